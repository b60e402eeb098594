#!/usr/bin/env bash
# decode_vs_pil.sh - images/s of one sample's training path on one thread:
# JPEG decode + RandomResizedCrop 224 + horizontal flip, dptrain's
# dp_image_sample (bench/decode_bench.c; with DCT scaling, its default, and
# without, the exact path) against PIL + torchvision 0.14's transforms in
# one Python process (bench/torch_decode.py), alternating in the same run,
# over a folder of ~500x375 quality-90 JPEGs made from the photographs of
# Debian's opencv-doc package (bench/make_photo_folder.py). Files are read
# into memory before timing on both sides. Rates are images per second of
# the process's CPU time (on a shared machine the wall clock's also measure
# the others' load; both are printed). Prints each round, then the medians
# and the ratios, and the CPU; then dptrain alone at 112 x 112, where DCT
# scaling applies to most crops: its speed and its mean difference from the
# exact path on these photographs.
#
# usage: bench/decode_vs_pil.sh [build dir] [images] [rounds]
#   (DECODE_BENCH_FOLDER=DIR reuses a folder made by make_photo_folder.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
images=${2:-2000}
rounds=${3:-3}
source "$here/bench_args.sh"
need_count decode_vs_pil images "$images" 1
need_count decode_vs_pil rounds "$rounds" 1
need_python decode_vs_pil numpy PIL torch torchvision
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
folder=${DECODE_BENCH_FOLDER:-$tmp/photos}
[[ -x "$build/decode_bench" ]] || { echo "decode_vs_pil: no $build/decode_bench (cmake --build $build --target decode_bench)" >&2; exit 1; }
[[ -d "$folder/train" ]] || /usr/bin/python3 "$here/make_photo_folder.py" "$folder" "$images" --test-fraction 0
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "decode_vs_pil: $(find "$folder" -name '*.jpg' | wc -l) JPEGs in $folder; CPU: $cpu ($flags), $(nproc) cores, 1 thread each side"
on=() off=() pil=() on_wall=() pil_wall=() ev=() pil_ev=()
for round in $(seq 1 "$rounds"); do
  d=$(OMP_NUM_THREADS=1 "$build/decode_bench" "$folder" 1 | tee "$tmp/dp.txt" | sed -n 's/^dptrain: //p')
  t=$(OMP_NUM_THREADS=1 /usr/bin/python3 "$here/torch_decode.py" "$folder" 1 | tee "$tmp/tv.txt" | sed -n 's/^torchvision: //p')
  read -r a b e aw _ <<<"$d"
  read -r c ce cw _ <<<"$t"
  on+=("$a") off+=("$b") ev+=("$e") on_wall+=("$aw") pil+=("$c") pil_ev+=("$ce") pil_wall+=("$cw")
  echo "round $round: images/s by CPU time: dptrain $a (DCT scaling on), $b (off), eval $e; torchvision $c, eval $ce; by the wall clock: dptrain $aw, torchvision $cw"
done
grep -E '^DCT scaling on these|kpixels' "$tmp/dp.txt" | sed 's/^/  /'
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
m_on=$(median "${on[@]}") m_off=$(median "${off[@]}") m_pil=$(median "${pil[@]}") m_ev=$(median "${ev[@]}")
m_pil_ev=$(median "${pil_ev[@]}") m_on_wall=$(median "${on_wall[@]}") m_pil_wall=$(median "${pil_wall[@]}")
echo "eval (Resize 256 + CenterCrop 224): dptrain $m_ev img/s, torchvision $m_pil_ev img/s, ratio $(ratio "$m_ev" "$m_pil_ev") (CPU time)"
# DCT scaling where it applies: at 112 x 112 most crops shrink by 2 or more
"$build/decode_bench" "$folder" 1 112 | grep -E 'DCT scaling o|^DCT' | sed 's/^/  at 112 x 112: /'
echo "wall clock: dptrain $m_on_wall img/s, torchvision $m_pil_wall img/s, ratio $(ratio "$m_on_wall" "$m_pil_wall")"
echo "decode: dptrain $m_on img/s (DCT scaling on), $m_off img/s (off), torchvision $m_pil img/s, ratio $(ratio "$m_on" "$m_pil") ($(ratio "$m_off" "$m_pil") exact), by CPU time, medians of $rounds rounds, 1 thread, $cpu"
