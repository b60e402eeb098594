#!/usr/bin/env bash
# folder_vs_idx.sh - Fashion-MNIST from its IDX files against the same
# images as a folder of JPEGs of random sizes (28 to 112 pixels, aspect 3:4
# to 4:3, quality 90: tools/idx_to_image_folder.py), LeNet at 28x28 on 2 CPU
# devices, the book's settings (batch 256, lr 0.2), training and evaluation
# through Resize + CenterCrop: the test accuracy after EPOCHS epochs of
# each, the seconds per epoch of each (the folder streamed while the
# devices compute: its decoding shares the 2 cores with them), and the
# folder's epochs with --cache-mb (the first decodes, the later ones read
# the cache). Prints the CPU and the ratios.
#
# usage: bench/folder_vs_idx.sh [build dir] [epochs]
#   (FOLDER_BENCH_DIR=DIR reuses a folder made by idx_to_image_folder.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
epochs=${2:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
folder=${FOLDER_BENCH_DIR:-$tmp/fashion-jpeg}
idx=/usr/share/datasets/fashion-mnist
[[ -d "$folder/train" ]] || /usr/bin/python3 "$here/../tools/idx_to_image_folder.py" "$idx" "$folder" --random-size 28:112
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "folder_vs_idx: $(find "$folder" -name '*.jpg' | wc -l) JPEGs; CPU: $cpu, $(nproc) cores; LeNet, 2 devices, $epochs epochs"
find "$folder" -name "*.jpg" -exec cat {} + >/dev/null # from the page cache, as IDX is
run() {
  "$build/dptrain" train --epochs "$epochs" --devices 2 --batch-size 256 --lr 0.2 --metrics "$tmp/$1.jsonl" "${@:2}" \
    >"$tmp/$1.out" 2>&1 || { echo "folder_vs_idx: $1 failed: $(tail -2 "$tmp/$1.out")" >&2; exit 1; }
}
field() { sed -E "s/.*\"$2\": *([^,}]*).*/\1/" "$tmp/$1.jsonl"; }
run idx
run folder --data "$folder"
run cached --data "$folder" --cache-mb 1024
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
i=$(field idx epoch_sec | median) f=$(field folder epoch_sec | median)
c1=$(field cached epoch_sec | head -1) c=$(field cached epoch_sec | tail -n +2 | median)
echo "test acc after $epochs epochs: IDX $(field idx test_acc | tail -1), JPEG folder $(field folder test_acc | tail -1)"
echo "seconds per epoch (median): IDX $i, folder $f (ratio $(awk -v a="$f" -v b="$i" 'BEGIN {printf "%.2f", a / b}')), " \
     "cached: first $c1, later $c (ratio $(awk -v a="$c" -v b="$i" 'BEGIN {printf "%.2f", a / b}'))"
