#!/usr/bin/env bash
# profile_by_op.sh - a `dptrain train --profile` table summed by op and
# direction, convolutions by kernel size (from the model file's [conv]
# names and sizes), for the benchmarks (resnet50_vs_pytorch.sh,
# resnet50_gpu_vs_pytorch.sh). Prints one line per group, the largest
# first: "MS<TAB>SHARE<TAB>WHAT" (ms per step on DEVICE, percent of its
# (step) row, e.g. "conv 3x3 backward"); nothing when DEVICE has no (step) row.
# usage: bench/profile_by_op.sh MODEL.cfg PROFILE_OUTPUT DEVICE
set -euo pipefail
[[ $# -eq 3 && -f $1 && -f $2 ]] ||
  { echo "usage: bench/profile_by_op.sh MODEL.cfg PROFILE_OUTPUT DEVICE (two files and a device)" >&2; exit 2; }
model=$1 profile=$2 device=$3
# the kernel size of each conv layer: "NAME KxK"
awk '/^\[/ { conv = ($0 ~ /^\[conv\]/) } conv && /^name =/ { name = $3 } conv && /^size =/ { print name, $3 "x" $3 }' \
  "$model" | awk -v dev="$device" 'NR == FNR { k[$1] = $2; next }
  $1 == dev && $2 == "(step)" { step = $(NF - 1) }
  $1 == dev && $2 != "(step)" { what = $2 == "(outside" ? "(outside the layers)" : $3 " " $4
    if ($3 ~ /^conv/) { split($2, l, "+"); what = $3 " " k[l[1]] " " $4 }
    ms[what] += $(NF - 1) }
  END { if (step > 0) for (w in ms) printf "%.1f\t%.1f\t%s\n", ms[w], 100 * ms[w] / step, w }' - "$profile" \
  | sort -t$'\t' -k1,1 -g -r
