#!/usr/bin/env bash
# resnet50_vs_pytorch.sh - one training step of ResNet-50 at ImageNet shape
# (batch 32 of 3x224x224, SGD with momentum) on the CPU: dptrain
# (models/resnet50-imagenet.cfg on DEVICES CPU devices, one thread each: the
# batch split between them) against PyTorch 1.13 (torchvision's resnet50,
# oneDNN, as many intra-op threads), in the same run, alternating A B A B so
# machine drift hits both alike. Each run: WARMUP untimed steps, then STEPS
# timed ones (WARMUP = 2: dptrain's step arena is folded into one block
# after its first step, whose pages the second step touches first).
# dptrain's wall time per step is its profile's mean `(step)` row (`train
# --profile-steps WARMUP,STEPS`: the timed steps only), PyTorch's the wall
# time of its timed loop; the CPU time per step (all threads) is PyTorch's
# process time over the loop, and dptrain's its profile's `cpu time` line
# (the process's CPU time, user + system, over the timed steps): on a
# shared machine the CPU time is the steadier figure. (Not the difference
# between runs of WARMUP + STEPS and WARMUP steps: the first two steps'
# page faults, 10-20 s of system time for ResNet-50, vary more than that.) Prints each run's ms per step and images/s, the median
# ratios (PyTorch's time / dptrain's: above 1, dptrain is faster), and the
# last dptrain run's profile: the layers that take the most of a step.
# Then the peak resident memory of one more run of each (dptrain as made,
# dptrain with DPTRAIN_GRAD_LIVENESS=apart and with =off, PyTorch) and the
# ratio of the first to PyTorch's.
#
# MODEL=mobilenet_v2 times MobileNetV2 instead (models/mobilenet_v2-imagenet.cfg).
# FREEZE=backbone times the fine-tuning step of a frozen backbone (only the
# last linear layer trains): dptrain's --freeze-backbone against PyTorch's
# requires_grad_(False) with the backbone's batch norms in eval mode; its
# memory lines add dptrain with the backbone's outputs kept for the whole
# step (DPTRAIN_FORWARD_LIVENESS=off: before src/nn/no_grad.c).
# DPTRAIN_ISA=avx2|generic measures a capped path (bench/isa_info.sh).
# usage: bench/resnet50_vs_pytorch.sh [path/to/dptrain] [runs] [devices] [steps]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
devices=${3:-2}
steps=${4:-3}
source "$here/bench_args.sh"
need_program resnet50_vs_pytorch "$bin" "build it: make build"
need_count resnet50_vs_pytorch runs "$runs" 1
need_count resnet50_vs_pytorch devices "$devices" 1
need_count resnet50_vs_pytorch steps "$steps" 1
need_python resnet50_vs_pytorch numpy PIL torch torchvision
warmup=2
batch=32
model=${MODEL:-resnet50}
[[ -f $here/../models/$model-imagenet.cfg ]] ||
  { echo "resnet50_vs_pytorch: MODEL=$model: no models/$model-imagenet.cfg (MODEL=resnet50, the default, or mobilenet_v2)" >&2; exit 2; }
freeze_dp=() freeze_pt=()
if [[ ${FREEZE:-} == backbone ]]; then freeze_dp=(--freeze-backbone) freeze_pt=(--freeze-backbone)
elif [[ -n ${FREEZE:-} ]]; then echo "FREEZE=$FREEZE: only FREEZE=backbone is known" >&2; exit 2; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/isa_info.sh" # caps PyTorch like DPTRAIN_ISA caps dptrain; prints both sides' ISA
isa_info "$bin" | sed 's/^onednn_verbose,info,cpu,isa:/pytorch: oneDNN isa /' | grep -E '^(dptrain|pytorch)'
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# an image folder of (warmup + steps) x batch random 224x224 RGB PNGs (2 classes)
images=$(( (warmup + steps) * batch ))
/usr/bin/python3 - "$tmp/data" "$images" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for split, count in (("train", n), ("test", 2)):
    for i in range(count):
        d = f"{root}/{split}/c{i % 2}"
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(f"{d}/{i:05d}.png")
EOF

run_dptrain() { # NAME STEPS [ARGS...]: a training run of STEPS steps, its output in $tmp/NAME
  local name=$1 n=$2
  shift 2
  "$bin" train --model "$here/../models/$model-imagenet.cfg" \
    --data "$tmp/data" --batch-size $batch --epochs 1 --limit $((n * batch)) --optimizer momentum --lr 0.01 \
    --devices "$devices" --quiet ${freeze_dp[@]+"${freeze_dp[@]}"} "$@" >"$tmp/$name" 2>&1 ||
    { echo "resnet50_vs_pytorch: dptrain failed: $(tail -1 "$tmp/$name")" >&2; return 1; }
}
dp_ms=() pt_ms=() dp_cpu=() pt_cpu=() ratios=() cpu_ratios=()
for run in $(seq 1 "$runs"); do
  run_dptrain "dp.$run" $((warmup + steps)) --seed "$run" --profile-steps "$warmup,$steps"
  dp=$(awk '$2 == "(step)" { if ($(NF - 1) + 0 > worst) worst = $(NF - 1) + 0 } END { print worst }' "$tmp/dp.$run")
  [[ -n "$dp" && "$dp" != 0 ]] || { echo "no (step) row in dptrain's profile:"; cat "$tmp/dp.$run"; exit 1; }
  dpc=$(sed -nE 's/^cpu time: ([0-9.]+) ms per step.*/\1/p' "$tmp/dp.$run" | awk '{ printf "%.0f", $1 }')
  pt_line=$(OMP_NUM_THREADS=$devices /usr/bin/python3 "$here/torch_resnet50_step.py" --model "$model" \
              --batch $batch --steps "$steps" --warmup $warmup --threads "$devices" ${freeze_pt[@]+"${freeze_pt[@]}"})
  pt=$(sed -E 's/.* ([0-9.]+) ms\/step \(wall\).*/\1/' <<<"$pt_line")
  ptc=$(sed -E 's/.* ([0-9.]+) ms\/step \(CPU time.*/\1/' <<<"$pt_line")
  ratio=$(awk -v a="$pt" -v b="$dp" 'BEGIN { printf "%.2f", a / b }')
  cpu_ratio=$(awk -v a="$ptc" -v b="$dpc" 'BEGIN { printf "%.2f", a / b }')
  printf 'run %d: wall dptrain %.0f ms/step (%.1f images/s), pytorch %.0f ms/step (%.1f images/s), %sx;' \
    "$run" "$dp" "$(awk -v t="$dp" -v b=$batch 'BEGIN { print 1000 * b / t }')" "$pt" \
    "$(awk -v t="$pt" -v b=$batch 'BEGIN { print 1000 * b / t }')" "$ratio"
  printf ' CPU dptrain %s ms/step, pytorch %s ms/step, %sx (load %s)\n' "$dpc" "$ptc" "$cpu_ratio" \
    "$(cut -d' ' -f1 /proc/loadavg)"
  dp_ms+=("$dp") pt_ms+=("$pt") dp_cpu+=("$dpc") pt_cpu+=("$ptc") ratios+=("$ratio") cpu_ratios+=("$cpu_ratio")
done
median() {
  printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
dpm=$(median "${dp_ms[@]}") ptm=$(median "${pt_ms[@]}")
printf 'median of %d runs, %s%s, batch %d, %d devices / threads:\n' "$runs" "$model" \
  "${FREEZE:+ (backbone frozen)}" $batch "$devices"
printf '  wall: dptrain %.0f ms/step = %.1f images/s, pytorch %.0f ms/step = %.1f images/s, speed-up %.2fx\n' \
  "$dpm" "$(awk -v t="$dpm" -v b=$batch 'BEGIN { print 1000 * b / t }')" "$ptm" \
  "$(awk -v t="$ptm" -v b=$batch 'BEGIN { print 1000 * b / t }')" "$(median "${ratios[@]}")"
printf '  CPU time: dptrain %.0f ms/step, pytorch %.0f ms/step, speed-up %.2fx\n' "$(median "${dp_cpu[@]}")" \
  "$(median "${pt_cpu[@]}")" "$(median "${cpu_ratios[@]}")"
# peak memory: the resident set's high-water mark (getrusage's ru_maxrss of the one child) of a run of
# WARMUP + STEPS steps: dptrain as made (activation gradients placed over the activations backward is done
# with), with them apart from the activations (DPTRAIN_GRAD_LIVENESS=apart), with each its own memory for the
# whole step (=off: as before gradients were placed by liveness), and PyTorch
peak_rss() { # COMMAND...: its peak RSS in KiB, -1 when it failed
  /usr/bin/python3 -c 'import resource, subprocess, sys
ok = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if ok else -1)' "$@"
}
dp_args=(train --model "$here/../models/$model-imagenet.cfg" --data "$tmp/data" --batch-size $batch --epochs 1
         --limit $(((warmup + steps) * batch)) --optimizer momentum --lr 0.01 --devices "$devices" --quiet
         ${freeze_dp[@]+"${freeze_dp[@]}"})
rss_on=$(peak_rss "$bin" "${dp_args[@]}")
rss_apart=$(peak_rss env DPTRAIN_GRAD_LIVENESS=apart "$bin" "${dp_args[@]}")
rss_off=$(peak_rss env DPTRAIN_GRAD_LIVENESS=off "$bin" "${dp_args[@]}")
[[ -z ${FREEZE:-} ]] || rss_whole=$(peak_rss env DPTRAIN_FORWARD_LIVENESS=off "$bin" "${dp_args[@]}")
rss_pt=$(OMP_NUM_THREADS=$devices peak_rss /usr/bin/python3 "$here/torch_resnet50_step.py" --model "$model" \
           --batch $batch --steps "$steps" --warmup $warmup --threads "$devices" ${freeze_pt[@]+"${freeze_pt[@]}"})
printf '  peak RSS over %d steps: dptrain %.0f MiB (gradients apart from the activations: %.0f MiB, each their own: %.0f MiB), pytorch %.0f MiB: %.2fx pytorch'"'"'s\n' \
  $((warmup + steps)) "$(awk -v k="$rss_on" 'BEGIN { print k / 1024 }')" "$(awk -v k="$rss_apart" 'BEGIN { print k / 1024 }')" \
  "$(awk -v k="$rss_off" 'BEGIN { print k / 1024 }')" \
  "$(awk -v k="$rss_pt" 'BEGIN { print k / 1024 }')" "$(awk -v a="$rss_on" -v b="$rss_pt" 'BEGIN { printf "%.2f", a / b }')"
[[ -z ${FREEZE:-} ]] || printf '  the frozen backbone'"'"'s outputs kept for the whole step (DPTRAIN_FORWARD_LIVENESS=off): %.0f MiB, %.2fx pytorch'"'"'s\n' \
  "$(awk -v k="$rss_whole" 'BEGIN { print k / 1024 }')" "$(awk -v a="$rss_whole" -v b="$rss_pt" 'BEGIN { printf "%.2f", a / b }')"
echo "dptrain's profile (run $runs, device cpu:0), by op and direction (convolutions by kernel size):"
"$here/profile_by_op.sh" "$here/../models/$model-imagenet.cfg" "$tmp/dp.$runs" cpu:0 \
  | awk -F'\t' '{ printf "  %9.1f ms %5.1f%%  %s\n", $1, $2, $3 }' | head -14
echo "its largest rows:"
awk '$1 == "cpu:0" && $2 != "(step)"' "$tmp/dp.$runs" | sort -k5 -g -r | head -12
