#!/usr/bin/env bash
# scaling.sh - images per second of one full LeNet epoch (batch 256, lr 0.2),
# alternating in the same run, 1 thread per device:
#   1 device; 2 devices with --overlap off and on; 2 processes x 1 device
#   under mpirun with --overlap off and on.
# Prints, per run and as medians: 2 devices / 1 device and 2 ranks / 1 device
# (each with overlap on), and what overlapping the gradient sync with
# backward buys (on / off) in one process and across 2 ranks.
#
# DPTRAIN_ISA=avx2|generic measures a capped path (bench/isa_info.sh).
# usage: bench/scaling.sh [path/to/dptrain] [runs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
runs=${2:-3}
source "$here/bench_args.sh"
need_program scaling "$bin" "build it: make build"
need_count scaling runs "$runs" 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/isa_info.sh" # prints the ISA dptrain runs (DPTRAIN_ISA caps it)
isa_info "$bin" | grep '^dptrain'
field() { sed -E "s/.*\"$1\": *([0-9.eE+-]+).*/\1/" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
devices=() ranks=() local_gain=() mpi_gain=()
mpirun=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
train=(train --model lenet --batch-size 256 --lr 0.2 --epochs 1 --threads-per-device 1 --quiet)
for run in $(seq 1 "$runs"); do
  for cfg in "k1 --devices 1" "off --devices 2 --overlap off" "on --devices 2 --overlap on"; do
    set -- $cfg
    name=$1; shift
    "$bin" "${train[@]}" "$@" --seed "$run" --metrics "$tmp/$name-$run.jsonl" >/dev/null
  done
  for overlap in off on; do
    "${mpirun[@]}" -np 2 "$bin" "${train[@]}" --devices 1 --overlap $overlap --seed "$run" \
      --metrics "$tmp/mpi-$overlap-$run.jsonl" >/dev/null
  done
  one=$(field images_per_sec "$tmp/k1-$run.jsonl")
  off=$(field images_per_sec "$tmp/off-$run.jsonl")
  on=$(field images_per_sec "$tmp/on-$run.jsonl")
  mpi_off=$(field images_per_sec "$tmp/mpi-off-$run.jsonl")
  mpi_on=$(field images_per_sec "$tmp/mpi-on-$run.jsonl")
  devices+=("$(ratio "$on" "$one")") ranks+=("$(ratio "$mpi_on" "$one")")
  local_gain+=("$(ratio "$on" "$off")") mpi_gain+=("$(ratio "$mpi_on" "$mpi_off")")
  printf 'run %d: 1 device %.0f images/s; 2 devices %.0f (overlap off), %.0f (on); 2 ranks %.0f (off), %.0f (on)\n' \
    "$run" "$one" "$off" "$on" "$mpi_off" "$mpi_on"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf 'median: 2 devices / 1 device %sx; 2 ranks / 1 device %sx; overlap on / off: 2 devices %s, 2 ranks %s\n' \
  "$(median "${devices[@]}")" "$(median "${ranks[@]}")" "$(median "${local_gain[@]}")" "$(median "${mpi_gain[@]}")"
