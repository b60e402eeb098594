#!/usr/bin/env bash
# decode_vs_pil.sh - images/s of one sample's training path on one thread:
# JPEG decode + RandomResizedCrop 224 + horizontal flip, dptrain's
# dp_image_sample (bench/decode_bench.c; with DCT scaling, its default, and
# without, the exact path) against PIL + torchvision 0.14's transforms in
# one Python process (bench/torch_decode.py), alternating in the same run,
# over a folder of ~500x375 quality-90 JPEGs made from the photographs of
# Debian's opencv-doc package (bench/make_photo_folder.py). Files are read
# into memory before timing on both sides. Prints each round, then the
# medians and the ratio, and the CPU.
#
# usage: bench/decode_vs_pil.sh [build dir] [images] [rounds]
#   (DECODE_BENCH_FOLDER=DIR reuses a folder made by make_photo_folder.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
images=${2:-2000}
rounds=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
folder=${DECODE_BENCH_FOLDER:-$tmp/photos}
[[ -x "$build/decode_bench" ]] || { echo "decode_vs_pil: no $build/decode_bench (cmake --build $build --target decode_bench)" >&2; exit 1; }
[[ -d "$folder/train" ]] || /usr/bin/python3 "$here/make_photo_folder.py" "$folder" "$images" --test-fraction 0
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "decode_vs_pil: $(find "$folder" -name '*.jpg' | wc -l) JPEGs in $folder; CPU: $cpu ($flags), $(nproc) cores, 1 thread each side"
on=() off=() pil=()
for round in $(seq 1 "$rounds"); do
  d=$(OMP_NUM_THREADS=1 "$build/decode_bench" "$folder" 1 | tee "$tmp/dp.txt" | sed -n 's/^dptrain: //p')
  t=$(OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_decode.py" "$folder" 1 | tee "$tmp/tv.txt" | sed -n 's/^torchvision: //p')
  read -r a b _ <<<"$d"
  read -r c _ <<<"$t"
  on+=("$a") off+=("$b") pil+=("$c")
  echo "round $round: dptrain $a img/s (DCT scaling on), $b img/s (off); torchvision $c img/s"
done
grep -E '^DCT scaling on these|kpixels' "$tmp/dp.txt" | sed 's/^/  /'
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
m_on=$(median "${on[@]}") m_off=$(median "${off[@]}") m_pil=$(median "${pil[@]}")
echo "decode: dptrain $m_on img/s (DCT scaling on), $m_off img/s (off), torchvision $m_pil img/s, ratio $(awk -v a="$m_on" -v b="$m_pil" 'BEGIN {printf "%.2f", a / b}') ($(awk -v a="$m_off" -v b="$m_pil" 'BEGIN {printf "%.2f", a / b}') exact), 1 thread, $cpu"
