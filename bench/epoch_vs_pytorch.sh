#!/usr/bin/env bash
# epoch_vs_pytorch.sh - seconds per epoch of LeNet on Fashion-MNIST, dptrain
# against PyTorch, same network, batch, learning rate and thread count, in
# the same run, alternating A B A B so machine drift hits both alike.
#
# DPTRAIN_ISA=avx2|generic measures a capped path (bench/isa_info.sh).
# usage: bench/epoch_vs_pytorch.sh [path/to/dptrain] [runs] [threads]
# dptrain runs on one device (--devices 1). Prints each run's seconds per
# epoch (training steps only, evaluation excluded, for both) and the median
# ratio PyTorch / dptrain.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
threads=${3:-1}
source "$here/bench_args.sh"
need_program epoch_vs_pytorch "$bin" "build it: make build"
need_count epoch_vs_pytorch runs "$runs" 1
need_count epoch_vs_pytorch threads "$threads" 1
need_python epoch_vs_pytorch numpy torch
data=${DPTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/isa_info.sh" # caps PyTorch like DPTRAIN_ISA caps dptrain; prints both sides' ISA
isa_info "$bin" | sed 's/^onednn_verbose,info,cpu,isa:/pytorch: oneDNN isa /' | grep -E '^(dptrain|pytorch)'

dp_times=() pt_times=() ratios=()
for run in $(seq 1 "$runs"); do
  "$bin" train --model lenet --data "$data" --batch-size 256 --lr 0.2 --epochs 1 \
    --devices 1 --threads-per-device "$threads" --seed "$run" --metrics "$tmp/m$run.jsonl" --quiet >/dev/null
  dp=$(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/m$run.jsonl")
  pt=$(OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/torch_lenet.py" --data "$data" \
         --epochs 1 --threads "$threads" --seed "$run" | sed -E 's/.* ([0-9.]+) sec\/epoch/\1/')
  ratio=$(awk -v a="$pt" -v b="$dp" 'BEGIN { printf "%.2f", a / b }')
  printf 'run %d: dptrain %.2f s/epoch, pytorch %.2f s/epoch, pytorch/dptrain %sx\n' "$run" "$dp" "$pt" "$ratio"
  dp_times+=("$dp") pt_times+=("$pt") ratios+=("$ratio")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf 'median (%d runs, %d thread(s)): dptrain %.2f s/epoch, pytorch %.2f s/epoch, speed-up %.2fx\n' \
  "$runs" "$threads" "$(median "${dp_times[@]}")" "$(median "${pt_times[@]}")" "$(median "${ratios[@]}")"
