#!/usr/bin/env bash
# ddp_vs_dptrain.sh - seconds per epoch of LeNet (batch 256, lr 0.2, full
# epoch): dptrain on 2 devices x 1 thread against PyTorch
# DistributedDataParallel (gloo) with 2 processes x 1 thread, alternating
# in the same run. Training steps only, evaluation excluded, for both.
#
# DPTRAIN_ISA=avx2|generic measures a capped path (bench/isa_info.sh);
# DPTRAIN_DATA=DIR another Fashion-MNIST IDX folder, for both sides (as in
# epoch_vs_pytorch.sh).
# usage: bench/ddp_vs_dptrain.sh [path/to/dptrain] [runs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
source "$here/bench_args.sh"
need_program ddp_vs_dptrain "$bin" "build it: make build"
need_count ddp_vs_dptrain runs "$runs" 1
need_python ddp_vs_dptrain numpy torch
data=${DPTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/isa_info.sh" # caps PyTorch like DPTRAIN_ISA caps dptrain; prints both sides' ISA
isa_info "$bin" | sed 's/^onednn_verbose,info,cpu,isa:/pytorch: oneDNN isa /' | grep -E '^(dptrain|pytorch)'
dp_times=() ddp_times=() ratios=()
for run in $(seq 1 "$runs"); do
  "$bin" train --model lenet --data "$data" --batch-size 256 --lr 0.2 --epochs 1 --devices 2 --threads-per-device 1 \
    --seed "$run" --metrics "$tmp/m$run.jsonl" --quiet >/dev/null
  dp=$(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/m$run.jsonl")
  ddp=$(OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_ddp_lenet.py" --data "$data" --epochs 1 --world 2 --seed "$run" \
          | sed -E 's/.* ([0-9.]+) sec\/epoch/\1/')
  ratio=$(awk -v a="$ddp" -v b="$dp" 'BEGIN { printf "%.2f", a / b }')
  printf 'run %d: dptrain (2 devices) %.2f s/epoch, PyTorch DDP (2 x 1) %.2f s/epoch, DDP/dptrain %sx\n' \
    "$run" "$dp" "$ddp" "$ratio"
  dp_times+=("$dp") ddp_times+=("$ddp") ratios+=("$ratio")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf 'median (%d runs): dptrain %.2f s/epoch, PyTorch DDP %.2f s/epoch, speed-up %.2fx\n' \
  "$runs" "$(median "${dp_times[@]}")" "$(median "${ddp_times[@]}")" "$(median "${ratios[@]}")"
