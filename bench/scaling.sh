#!/usr/bin/env bash
# scaling.sh - images per second of one full LeNet epoch (batch 256, lr 0.2),
# alternating in the same run, 1 thread per device:
#   1 device; 2 devices without overlap; 2 devices with overlap (the default);
#   2 processes x 1 device under mpirun.
# Prints 2 devices / 1 device, what overlapping the bucketed allreduce with
# backward buys (overlap on / off), and 2 ranks / 1 device.
#
# usage: bench/scaling.sh [path/to/dptrain] [runs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -E "s/.*\"$1\": *([0-9.eE+-]+).*/\1/" "$2"; }
ratios=() overlaps=() mpis=()
mpirun=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
for run in $(seq 1 "$runs"); do
  for cfg in "k1 --devices 1" "off --devices 2 --overlap off" "on --devices 2 --overlap on"; do
    set -- $cfg
    name=$1; shift
    "$bin" train --model lenet --batch-size 256 --lr 0.2 --epochs 1 --threads-per-device 1 "$@" \
      --seed "$run" --metrics "$tmp/$name-$run.jsonl" --quiet >/dev/null
  done
  "${mpirun[@]}" -np 2 "$bin" train --model lenet --batch-size 256 --lr 0.2 --epochs 1 --devices 1 \
    --seed "$run" --metrics "$tmp/mpi-$run.jsonl" --quiet >/dev/null
  one=$(field images_per_sec "$tmp/k1-$run.jsonl")
  off=$(field images_per_sec "$tmp/off-$run.jsonl")
  on=$(field images_per_sec "$tmp/on-$run.jsonl")
  ratio=$(awk -v a="$on" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
  gain=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
  ranks=$(field images_per_sec "$tmp/mpi-$run.jsonl")
  mpi=$(awk -v a="$ranks" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
  printf 'run %d: 1 device %.0f images/s; 2 devices %.0f (overlap off), %.0f (on); 2 ranks %.0f; 2/1 %sx, on/off %s, ranks/1 %sx\n' \
    "$run" "$one" "$off" "$on" "$ranks" "$ratio" "$gain" "$mpi"
  ratios+=("$ratio") overlaps+=("$gain") mpis+=("$mpi")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf 'median: 2 devices / 1 device %sx; overlap on / off %s; 2 ranks / 1 device %sx\n' \
  "$(median "${ratios[@]}")" "$(median "${overlaps[@]}")" "$(median "${mpis[@]}")"
