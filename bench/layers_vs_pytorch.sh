#!/usr/bin/env bash
# layers_vs_pytorch.sh - per-layer forward/backward time, dptrain against
# PyTorch 1.13 (CPU, 1 thread), LeNet and ResNet-18 layer shapes at batch 64
# (bench/layers.txt), in the same run: the two programs take turns, ROUNDS
# times each (dptrain, PyTorch, dptrain, ...), and every layer's figure is the
# median over the rounds, so a burst of load on the machine hits both sides.
# Prints a table: milliseconds of both, and dptrain / PyTorch per direction;
# "SLOW" marks a layer where dptrain takes more than 1.5x PyTorch's time.
#
# DPTRAIN_ISA=avx2|generic measures a capped path, PyTorch capped alike
# (bench/isa_info.sh); LAYERS=file times another layer list (layers.txt's
# format), e.g. LeNet's layers at the training batch.
#
# usage: bench/layers_vs_pytorch.sh [path/to/layer_bench] [seconds_per_layer] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/layer_bench}
seconds=${2:-0.5}
rounds=${3:-3}
layers=${LAYERS:-$here/layers.txt}
source "$here/bench_args.sh"
need_program layers_vs_pytorch "$bin" "build it: make build"
need_number layers_vs_pytorch seconds_per_layer "$seconds"
need_count layers_vs_pytorch rounds "$rounds" 1
need_python layers_vs_pytorch torch
[[ -f $layers ]] || { echo "layers_vs_pytorch: no layer list $layers (LAYERS=FILE: bench/layers.txt's format)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/isa_info.sh" # caps PyTorch like DPTRAIN_ISA caps dptrain
echo "dptrain kernels: ${DPTRAIN_ISA:-best}; pytorch: ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-unset} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-unset}"
# what each side runs on this CPU, from the dptrain built beside layer_bench (the same library, the same choice)
if [[ -x $(dirname "$bin")/dptrain ]]; then
  isa_info "$(dirname "$bin")/dptrain" | sed 's/^onednn_verbose,info,cpu,isa:/pytorch: oneDNN isa /' | grep -E '^(dptrain|pytorch)'
else
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') (no dptrain beside $bin to say its kernels)"
fi

for r in $(seq 1 "$rounds"); do
  OPENBLAS_NUM_THREADS=1 "$bin" "$layers" "$seconds" >"$tmp/dp.$r"
  OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_layers.py" "$layers" "$seconds" --threads 1 >"$tmp/pt.$r"
done
# one line per layer and round: side name fwd bwd; medians per (side, layer)
for r in $(seq 1 "$rounds"); do
  awk '{ print "dp", NR, $0 }' "$tmp/dp.$r"
  awk '{ print "pt", NR, $0 }' "$tmp/pt.$r"
done |
  awk -v rounds="$rounds" -v title="$([[ -n "${LAYERS:-}" ]] && echo "layer" || echo "layer (batch 64)")" '
    function median(list,   n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    { key = $1 SUBSEP $2; name[$2] = $3; f[key] = f[key] " " $4; b[key] = b[key] " " $5; if ($2 > last) last = $2 }
    END {
      printf "%-22s %10s %10s %10s %10s %8s %8s\n", title, "dp fwd ms", "pt fwd ms",
             "dp bwd ms", "pt bwd ms", "fwd x", "bwd x"
      for (i = 1; i <= last; i++) {
        d = "dp" SUBSEP i; p = "pt" SUBSEP i
        pf = median(f[p]); pb = median(b[p])
        if (f[d] ~ /n\/a/) { printf "%-22s %10s %10.3f %10s %10.3f %8s %8s\n", name[i], "n/a", pf, "n/a", pb, "-", "-"; continue }
        df = median(f[d]); db = median(b[d]); rf = df / pf; rb = db / pb
        slow = (rf > 1.5 || rb > 1.5) ? "  SLOW" : ""
        if (rf > worst) worst = rf; if (rb > worst) worst = rb
        printf "%-22s %10.3f %10.3f %10.3f %10.3f %8.2f %8.2f%s\n", name[i], df, pf, db, pb, rf, rb, slow
        # a name ending in .xN (layers_resnet50.txt): the shape occurs N times in its network
        if (match(name[i], /\.x[0-9]+$/)) {
          w = substr(name[i], RSTART + 2) + 0; weighted = 1
          wdf += w * df; wpf += w * pf; wdb += w * db; wpb += w * pb
        }
      }
      printf "medians of %d rounds; worst dptrain/pytorch ratio: %.2f (target <= 1.5)\n", rounds, worst
      if (weighted)
        printf "weighted by the .xN counts (one pass of the network): dptrain fwd %.1f ms, bwd %.1f ms; pytorch fwd %.1f ms, bwd %.1f ms; pytorch/dptrain %.2fx (fwd + bwd)\n", wdf, wdb, wpf, wpb, (wpf + wpb) / (wdf + wdb)
    }'
