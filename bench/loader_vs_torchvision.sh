#!/usr/bin/env bash
# loader_vs_torchvision.sh - the image-folder loader against torchvision's,
# in the same run: decode + RandomResizedCrop 224 + flip + normalise into
# float batches of 256, over a folder of ~500x375 quality-90 JPEGs made from
# the photographs of Debian's opencv-doc package (bench/make_photo_folder.py:
# crops and scalings of ~58 photographs, a few thousand distinct images).
# dptrain: the batch loader with a thread per core (folder_loader_bench.c);
# torchvision 0.14: ImageFolder + PIL + DataLoader(num_workers = cores)
# (torch_folder_loader.py). Alternating rounds; the medians of images/s and
# of the peak resident memory (torchvision's: its main process and workers
# summed). The last line:
#   loader: dptrain X img/s, torchvision Y img/s, ratio R, peak RSS A MB vs B MB
#
# usage: bench/loader_vs_torchvision.sh [build dir] [images] [rounds]
#   (LOADER_BENCH_FOLDER=DIR reuses a folder made by make_photo_folder.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
images=${2:-3000}
rounds=${3:-3}
source "$here/bench_args.sh"
need_count loader_vs_torchvision images "$images" 1
need_count loader_vs_torchvision rounds "$rounds" 1
need_python loader_vs_torchvision PIL torch torchvision
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
folder=${LOADER_BENCH_FOLDER:-$tmp/photos}
cores=$(nproc)
[[ -x "$build/folder_loader_bench" ]] \
  || { echo "loader_vs_torchvision: no $build/folder_loader_bench (cmake --build $build --target folder_loader_bench)" >&2; exit 1; }
[[ -d "$folder/train" ]] || /usr/bin/python3 "$here/make_photo_folder.py" "$folder" "$images" --test-fraction 0 >/dev/null
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "loader_vs_torchvision: $(find "$folder" -name '*.jpg' | wc -l) JPEGs; CPU: $cpu ($flags), $cores cores; batch 256, 224x224"
cat "$folder"/train/*/*.jpg >/dev/null # both sides read from the page cache
dp=() tv=() dp_mb=() tv_mb=()
for round in $(seq 1 "$rounds"); do
  d=$("$build/folder_loader_bench" "$folder" "$cores" 256 1 224)
  t=$(OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_folder_loader.py" "$folder" "$cores" 256 1 224)
  echo "round $round: $d"
  echo "round $round: $t"
  dp+=("$(sed -E 's/^dptrain: ([0-9.]+) img\/s.*/\1/' <<<"$d")") dp_mb+=("$(sed -E 's/.*peak RSS ([0-9.]+) MB.*/\1/' <<<"$d")")
  tv+=("$(sed -E 's/^torchvision: ([0-9.]+) img\/s.*/\1/' <<<"$t")") tv_mb+=("$(sed -E 's/.*peak RSS ([0-9.]+) MB.*/\1/' <<<"$t")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
a=$(median "${dp[@]}") b=$(median "${tv[@]}") am=$(median "${dp_mb[@]}") bm=$(median "${tv_mb[@]}")
echo "loader: dptrain $a img/s, torchvision $b img/s, ratio $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}'), peak RSS $am MB vs $bm MB"
