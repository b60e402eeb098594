#!/usr/bin/env bash
# folder_vs_idx.sh - Fashion-MNIST from its IDX files against the same
# images as a folder of JPEGs of random sizes (28 to 112 pixels, aspect 3:4
# to 4:3, quality 90: tools/idx_to_image_folder.py), LeNet at 28x28 on 2 CPU
# devices, the book's settings (batch 256, lr 0.2), over SEEDS seeds:
# - the test accuracy of each after EPOCHS epochs (the mean over the seeds,
#   and the mean of the last 3 epochs: the sigmoid LeNet's accuracy moves
#   by several points from one epoch to the next), the folder through
#   each transform: center (Resize + CenterCrop, the default) and squash
#   (the whole image to 28 x 28);
# - the seconds per epoch of each (the first seed's runs; the folder
#   streamed while the devices compute: its decoding shares the 2 cores
#   with them), and the folder's epochs with --cache-mb (the first
#   decodes, the later ones read the cache).
# Prints the CPU and the ratios.
#
# usage: bench/folder_vs_idx.sh [build dir] [epochs] [seeds]
#   (FOLDER_BENCH_DIR=DIR reuses a folder made by idx_to_image_folder.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
epochs=${2:-10}
seeds=${3:-3}
source "$here/bench_args.sh"
need_program folder_vs_idx "$build/dptrain" "build it: make build"
need_count folder_vs_idx epochs "$epochs" 2 # the cached run's later epochs against its first
need_count folder_vs_idx seeds "$seeds" 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
folder=${FOLDER_BENCH_DIR:-$tmp/fashion-jpeg}
[[ -d "$folder/train" ]] || need_python folder_vs_idx numpy PIL # tools/idx_to_image_folder.py
idx=/usr/share/datasets/fashion-mnist
[[ -d "$folder/train" ]] || /usr/bin/python3 "$here/../tools/idx_to_image_folder.py" "$idx" "$folder" --random-size 28:112
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "folder_vs_idx: $(find "$folder" -name '*.jpg' | wc -l) JPEGs; CPU: $cpu ($flags), $(nproc) cores;" \
     "LeNet, 2 devices, $epochs epochs, $seeds seeds"
find "$folder" -name '*.jpg' -exec cat {} + >/dev/null # from the page cache, as IDX is
run() {
  "$build/dptrain" train --epochs "$epochs" --devices 2 --batch-size 256 --lr 0.2 --metrics "$tmp/$1.jsonl" "${@:2}" \
    >"$tmp/$1.out" 2>&1 || { echo "folder_vs_idx: $1 failed: $(tail -2 "$tmp/$1.out")" >&2; exit 1; }
}
field() { sed -E "s/.*\"$2\": *([^,}]*).*/\1/" "$tmp/$1.jsonl"; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
mean() { awk '{s += $1} END {printf "%.4f", s / NR}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
for s in $(seq 1 "$seeds"); do
  run "idx-$s" --seed "$s"
  run "center-$s" --seed "$s" --data "$folder"
  run "squash-$s" --seed "$s" --data "$folder" --transform squash
  for k in idx center squash; do
    echo "seed $s, $k: test acc by epoch $(field "$k-$s" test_acc | tr '\n' ' ')"
  done
done
run cached --data "$folder" --cache-mb 1024
last=$((epochs < 3 ? epochs : 3)) # the last 3 epochs' mean, of fewer in a shorter run
acc() { for s in $(seq 1 "$seeds"); do field "$1-$s" test_acc | tail -n "$2"; done | mean; }
for k in idx center squash; do
  printf '%s: test acc after %d epochs %s (mean of %d seeds), of the last %d epochs %s\n' "$k" "$epochs" \
    "$(acc "$k" 1)" "$seeds" "$last" "$(acc "$k" "$last")"
done
gap() { awk -v a="$(acc idx "$2")" -v b="$(acc "$1" "$2")" 'BEGIN {printf "%.1f", 100 * (a - b)}'; }
echo "accuracy below IDX's, points (final; last $last epochs): center $(gap center 1); $(gap center "$last")," \
     "squash $(gap squash 1); $(gap squash "$last")"
i=$(field idx-1 epoch_sec | median) f=$(field center-1 epoch_sec | median) q=$(field squash-1 epoch_sec | median)
c1=$(field cached epoch_sec | head -1) c=$(field cached epoch_sec | tail -n +2 | median)
echo "seconds per epoch (median): IDX $i, folder $f (ratio $(ratio "$f" "$i")), squash $q (ratio $(ratio "$q" "$i")), " \
     "cached: first $c1, later $c (ratio $(ratio "$c" "$i"))"
