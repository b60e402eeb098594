#!/usr/bin/env bash
# layers_vs_pytorch.sh - per-layer forward/backward time, dptrain against
# PyTorch 1.13 (CPU, 1 thread), LeNet and ResNet-18 layer shapes at batch 64
# (bench/layers.txt), in the same run. Prints a table: milliseconds of both,
# and dptrain / PyTorch per direction; "SLOW" marks a layer where dptrain
# takes more than 1.5x PyTorch's time.
#
# usage: bench/layers_vs_pytorch.sh [path/to/layer_bench] [seconds_per_layer]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/layer_bench}
seconds=${2:-0.5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

OPENBLAS_NUM_THREADS=1 "$bin" "$here/layers.txt" "$seconds" >"$tmp/dp"
OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_layers.py" "$here/layers.txt" "$seconds" --threads 1 >"$tmp/pt"
join -j 1 <(awk '{ print NR, $0 }' "$tmp/dp" | sort -k1,1) <(awk '{ print NR, $0 }' "$tmp/pt" | sort -k1,1) |
  sort -n -k1,1 |
  awk 'BEGIN {
         printf "%-22s %10s %10s %10s %10s %8s %8s\n", "layer (batch 64)", "dp fwd ms", "pt fwd ms",
                "dp bwd ms", "pt bwd ms", "fwd x", "bwd x"
       }
       {
         if ($3 == "n/a") { printf "%-22s %10s %10.3f %10s %10.3f %8s %8s\n", $2, "n/a", $6, "n/a", $7, "-", "-"; next }
         rf = $3 / $6; rb = $4 / $7; slow = (rf > 1.5 || rb > 1.5) ? "  SLOW" : ""
         if (rf > worst) worst = rf; if (rb > worst) worst = rb
         printf "%-22s %10.3f %10.3f %10.3f %10.3f %8.2f %8.2f%s\n", $2, $3, $6, $4, $7, rf, rb, slow
       }
       END { printf "worst dptrain/pytorch ratio: %.2f (target <= 1.5)\n", worst }'
