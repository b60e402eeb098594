#!/usr/bin/env bash
# scaling.sh - images per second of one full LeNet epoch (batch 256, lr 0.2)
# on 2 devices against 1 device, 1 thread each, alternating in the same run.
#
# usage: bench/scaling.sh [path/to/dptrain] [runs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -E "s/.*\"$1\": *([0-9.eE+-]+).*/\1/" "$2"; }
ratios=()
for run in $(seq 1 "$runs"); do
  for k in 1 2; do
    "$bin" train --model lenet --batch-size 256 --lr 0.2 --epochs 1 --devices "$k" --threads-per-device 1 \
      --seed "$run" --metrics "$tmp/k$k-$run.jsonl" --quiet >/dev/null
  done
  one=$(field images_per_sec "$tmp/k1-$run.jsonl")
  two=$(field images_per_sec "$tmp/k2-$run.jsonl")
  ratio=$(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
  printf 'run %d: 1 device %.0f images/s, 2 devices %.0f images/s, ratio %sx\n' "$run" "$one" "$two" "$ratio"
  ratios+=("$ratio")
done
printf 'median ratio (2 devices / 1 device): %s\n' \
  "$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')"
