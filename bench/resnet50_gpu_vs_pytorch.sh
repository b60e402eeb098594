#!/usr/bin/env bash
# resnet50_gpu_vs_pytorch.sh - ResNet-50 at ImageNet shape on one GPU,
# dptrain against PyTorch's fastest variants in the same run. Not a test.
#
# dptrain: models/resnet50-imagenet.cfg on cuda:0, batch 256 of 3x224x224,
# SGD with momentum, lr 0.01, from a folder of STEPS x 256 JPEGs of 224x224
# (smooth random images, 2 classes) kept decoded by --cache-mb and taken
# whole (--transform squash: no resize), 2 epochs: its images/sec are the
# second epoch's (the first holds the decoding, cuDNN's first calls and the
# step graph's capture), with the peak GPU memory its backend held. PyTorch
# (bench/torch_resnet50_step.py: torchvision's resnet50, the same optimizer,
# random images on the GPU): eager, channels_last + cudnn.benchmark and the
# whole step as a CUDA graph, STEPS timed steps after 2 warm-up steps, with
# torch.cuda.max_memory_allocated (its tensors) and max_memory_reserved
# (what its allocator took from the GPU, the figure dptrain's compares with). FP32 (TF32 off on both sides), then bf16
# (dptrain --precision bf16; PyTorch under autocast to bfloat16); each line
# ends with dptrain against the fastest PyTorch variant. One run each: the
# figures are for one GPU and this commit; the ratio is what to compare.
# Last, where dptrain's FP32 step goes: its --profile by op and direction in
# the log, the three largest rows on one "ResNet-50 FP32 profile" line.
#
# FREEZE=backbone times the fine-tuning step of a frozen backbone instead
# (only the last linear layer trains; not one of gpu_check.sh's runs):
# dptrain's --freeze-backbone, whose backbone runs through the no-grad runner
# (no_grad.h: each output's memory given back once its last reader has
# run), against PyTorch's requires_grad_(False) with the backbone's batch
# norms in eval mode; its lines say "(backbone frozen)", and one more
# dptrain FP32 run with DPTRAIN_FORWARD_LIVENESS=off (every output kept)
# gives the runner's memory saving. No profile.
#
# usage: bench/resnet50_gpu_vs_pytorch.sh [path/to/dptrain] [steps]
# DPTRAIN_BENCH_R50_PRECISIONS ("fp32 bf16") picks the precisions, in order
# (bf16 alone: a second short call on a lent GPU after gpu_check.sh's), and
# DPTRAIN_BENCH_R50_TORCH_VARIANTS ("eager channels_last graph") PyTorch's
# variants (gpu_check.sh leaves eager out: on the H200, 2026-11-28, it was
# the slowest, 908 images/s against 1,057 and 1,064 in FP32).
# For scripts/gpu_check.sh's rehearsal without a GPU (its figures mean
# nothing): DPTRAIN_BENCH_TORCH_DEVICE (default cuda:0; cpu runs eager and
# channels_last only), DPTRAIN_BENCH_R50_BATCH (256), DPTRAIN_BENCH_R50_MODEL
# (dptrain's model file, default models/resnet50-imagenet.cfg) and
# DPTRAIN_BENCH_R50_TORCH_MODEL (torchvision's, resnet50).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build-cuda/dptrain}
steps=${2:-6}
source "$here/bench_args.sh"
need_gpu resnet50_gpu_vs_pytorch
need_program resnet50_gpu_vs_pytorch "$bin" "a CUDA build: scripts/gpu_check.sh makes build-cuda"
need_count resnet50_gpu_vs_pytorch steps "$steps" 1
py=${PYTHON:-python3}
batch=${DPTRAIN_BENCH_R50_BATCH:-256}
torch_device=${DPTRAIN_BENCH_TORCH_DEVICE:-cuda:0}
model=${DPTRAIN_BENCH_R50_MODEL:-$here/../models/resnet50-imagenet.cfg}
torch_model=${DPTRAIN_BENCH_R50_TORCH_MODEL:-resnet50}
freeze_dp=() freeze_pt=() frozen=""
if [[ ${FREEZE:-} == backbone ]]; then freeze_dp=(--freeze-backbone) freeze_pt=(--freeze-backbone) frozen=" (backbone frozen)"
elif [[ -n ${FREEZE:-} ]]; then echo "FREEZE=$FREEZE: only FREEZE=backbone is known" >&2; exit 2; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }
size=$(awk -F' *= *' '$1 == "height" { print $2; exit }' "$model")
gpu=$("$py" -c 'import sys, torch; d = torch.device(sys.argv[1]); print(torch.cuda.get_device_name(d) if d.type == "cuda" else "none (PyTorch on " + sys.argv[1] + ")")' \
        "$torch_device" 2>/dev/null || echo unknown)
echo "GPU: $gpu; $(basename "$model" .cfg) batch $batch, ${size}x$size, $steps timed steps"

# the folder: smooth random images (noise at 1/8 the size, scaled up), q90 JPEGs
images=$((steps * batch))
"$py" - "$tmp/data" "$images" "$size" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root, n, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
for split, count in (("train", n), ("test", 2)):
    for i in range(count):
        d = f"{root}/{split}/c{i % 2}"
        os.makedirs(d, exist_ok=True)
        small = Image.fromarray(rng.integers(0, 256, (max(s // 8, 1), max(s // 8, 1), 3), dtype=np.uint8))
        small.resize((s, s), Image.BILINEAR).save(f"{d}/{i:05d}.jpg", quality=90)
PY

# dptrain PRECISION: its second epoch's images/sec and peak, "N images/sec (peak M)", or why not; a run that
# fails is tried once more with the arena of cudaMalloc'd blocks (DPTRAIN_CUDA_VMM=off, the range of CUDA's
# virtual memory not yet run on a GPU when this was written), its figures then marked so
dptrain() {
  local m=$tmp/dp-$1.jsonl why
  if run_dptrain "$1"; then
    dptrain_figures "$m"
    return
  fi
  why=$(tail -1 "$tmp/dp-$1.err")
  if [[ ${DPTRAIN_CUDA_VMM:-on} == off ]]; then
    echo "did not run ($why)"
  elif DPTRAIN_CUDA_VMM=off run_dptrain "$1"; then
    echo "$(dptrain_figures "$m") with DPTRAIN_CUDA_VMM=off (with the range: did not run: $why)"
  else
    echo "did not run ($why; with DPTRAIN_CUDA_VMM=off: $(tail -1 "$tmp/dp-$1.err"))"
  fi
}
dptrain_figures() { # METRICS: "N images/sec (peak M)" of its last line
  local ips peak
  ips=$(tail -1 "$1" | sed -nE 's/.*"images_per_sec": *([0-9.eE+-]+).*/\1/p')
  peak=$(tail -1 "$1" | sed -nE 's/.*"device_mem_peak_bytes": *([0-9]+).*/\1/p')
  printf '%.0f images/sec (peak %s)\n' "$ips" "$([[ -n $peak ]] && mib "$peak" || echo 'not counted')"
}
run_dptrain() { # PRECISION: one run, its metrics in $tmp/dp-PRECISION.jsonl (emptied first)
  local m=$tmp/dp-$1.jsonl
  rm -f "$m"
  "$bin" train --model "$model" --data "$tmp/data" --batch-size "$batch" --epochs 2 --optimizer momentum \
       --lr 0.01 --devices cuda:0 --transform squash --cache-mb $((images * size * size * 3 / 1048576 + 64)) \
       --precision "$1" --metrics "$m" ${freeze_dp[@]+"${freeze_dp[@]}"} >"$tmp/dp-$1.out" 2>"$tmp/dp-$1.err"
}
# pytorch VARIANT PRECISION: "N images/sec (peak M)", or why not
pytorch() {
  if [[ $1 == graph && $torch_device != cuda* ]]; then echo "n/a (no GPU)"; return; fi
  if "$py" "$here/torch_resnet50_step.py" --model "$torch_model" --batch "$batch" --steps "$steps" --warmup 2 \
       --device "$torch_device" --variant "$1" --precision "$2" ${freeze_pt[@]+"${freeze_pt[@]}"} \
       >"$tmp/pt-$1-$2.out" 2>"$tmp/pt-$1-$2.err"; then
    local ips peak reserved
    ips=$(sed -nE 's/.* ([0-9.]+) images\/s$/\1/p' "$tmp/pt-$1-$2.out")
    peak=$(sed -nE 's/.*peak GPU memory: ([0-9]+) bytes.*/\1/p' "$tmp/pt-$1-$2.out")
    reserved=$(sed -nE 's/.*\(reserved ([0-9]+) bytes\).*/\1/p' "$tmp/pt-$1-$2.out")
    printf '%.0f images/sec (peak %s%s)\n' "$ips" "$([[ -n $peak ]] && mib "$peak" || echo 'n/a')" \
      "$([[ -n $reserved ]] && echo ", reserved $(mib "$reserved")")"
  else
    echo "did not run ($(tail -1 "$tmp/pt-$1-$2.err"))"
  fi
}
for precision in ${DPTRAIN_BENCH_R50_PRECISIONS:-fp32 bf16}; do
  label=$([[ $precision == fp32 ]] && echo FP32 || echo bf16)
  dp=$(dptrain "$precision")
  line="" best="" best_ips=0
  for v in ${DPTRAIN_BENCH_R50_TORCH_VARIANTS:-eager channels_last graph}; do
    fig=$(pytorch "$v" "$precision")
    line+="${line:+, }$v $fig"
    ips=$(sed -nE 's/^([0-9.]+) images\/sec.*/\1/p' <<<"$fig")
    if [[ -n $ips ]] && awk -v a="$ips" -v b="$best_ips" 'BEGIN { exit !(a > b) }'; then best=$v best_ips=$ips; fi
  done
  echo "ResNet-50 $label$frozen batch $batch: dptrain $dp; pytorch $line"
  dp_ips=$(sed -nE 's/^([0-9.]+) images\/sec.*/\1/p' <<<"$dp")
  if [[ -n $dp_ips && -n $best ]]; then
    echo "ResNet-50 $label$frozen vs the fastest PyTorch ($best): dptrain/pytorch $(awk -v a="$dp_ips" -v b="$best_ips" 'BEGIN { printf "%.2f", a / b }')x"
  else
    echo "ResNet-50 $label$frozen vs the fastest PyTorch: not compared"
  fi
  grep -m1 '^training ' "$tmp/dp-$precision.out" | sed 's/^/  dptrain: /' || true
done

if [[ -n $frozen ]]; then
  echo "ResNet-50 FP32$frozen batch $batch, every output kept (DPTRAIN_FORWARD_LIVENESS=off): dptrain $(DPTRAIN_FORWARD_LIVENESS=off dptrain fp32)"
  exit 0
fi

# Where dptrain's FP32 step goes: a run of its own with --profile (its per-op timing would slow the timed
# run), 1 warm-up step and STEPS - 1 profiled; by op and direction, convolutions by kernel size (from the
# model file's names), into the log, and the three largest on one "ResNet-50 FP32 profile" line.
if (( steps >= 2 )) && "$bin" train --model "$model" --data "$tmp/data" --batch-size "$batch" --epochs 1 \
     --limit $((steps * batch)) --optimizer momentum --lr 0.01 --devices cuda:0 --transform squash \
     --profile-steps "1,$((steps - 1))" --quiet >"$tmp/dp-profile.out" 2>&1; then
  "$here/profile_by_op.sh" "$model" "$tmp/dp-profile.out" cuda:0 >"$tmp/by-op"
  step_ms=$(awk '$1 == "cuda:0" && $2 == "(step)" { print $(NF - 1) }' "$tmp/dp-profile.out")
  echo "dptrain FP32 profile, batch $batch: ${step_ms:-?} ms a step; by op and direction (ms, share of the step):"
  awk -F'\t' '{ printf "  %.1f ms %.1f%% %s\n", $1, $2, $3 }' "$tmp/by-op" | head -16
  echo "ResNet-50 FP32 profile ($batch a step, ${step_ms:-no} ms): $(head -3 "$tmp/by-op" | awk -F'\t' '{
    printf "%s%s %.1f ms (%.1f%%)", (NR > 1 ? "; " : ""), $3, $1, $2 }')"
else
  echo "ResNet-50 FP32 profile: not taken ($( (( steps >= 2 )) && tail -1 "$tmp/dp-profile.out" || echo "fewer than 2 steps"))"
fi
