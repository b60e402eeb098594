#!/usr/bin/env bash
# cli_image_memory.sh - an image folder is streamed in memory bounded by the
# loader's queue, not by the folder: 400 JPEG photographs of about 500 x 375
# (bench/make_photo_folder.py, from opencv-doc's pictures; about 215 MB
# decoded) train LeNet (resized-crop to 28 x 28, 4 loader threads, 2
# devices) with a peak resident memory under a limit of a quarter of the
# folder's decoded size (the measurement: /usr/bin/time's maximum resident
# set). The same run with --cache-mb 1000, which keeps every decoded image,
# goes over that limit: the measurement sees decoding into memory.
# (A kernel limit on the process, RLIMIT_DATA or RLIMIT_AS, cannot be the
# test's: OpenBLAS reserves 128 MB buffers per thread and spins forever
# when its malloc fails.) Skipped (77) without opencv-doc's pictures.
source "$(dirname "$0")/testing.sh"
photos=/usr/share/doc/opencv-doc/examples/data
if ! ls "$photos"/*.jpg >/dev/null 2>&1; then
  echo "cli_image_memory: SKIPPED: no photographs in $photos (apt-get install opencv-doc)"
  exit 77
fi
/usr/bin/python3 "$(dirname "$0")/../bench/make_photo_folder.py" "$tmp/photos" 400 --test-fraction 0.05 >/dev/null \
  || { fail "making the photo folder"; testing_finish cli_image_memory; exit 1; }
decoded=$(/usr/bin/python3 - "$tmp/photos" <<'EOF'
import glob, sys
from PIL import Image
total = 0
for path in glob.glob(sys.argv[1] + "/*/*/*.jpg"):
    with Image.open(path) as im:
        total += im.size[0] * im.size[1] * 3
print(total // 1024)
EOF
)
limit=$((decoded / 4))
peak() { /usr/bin/time -f "%M" -o "$tmp/$1.kb" "$bin" train --data "$tmp/photos" --epochs 1 --devices 2 --batch-size 32 \
           --transform resized-crop --loader-threads 4 --quiet "${@:2}" >"$tmp/$1.out" 2>&1 && pass \
           || fail "$1: $(tail -2 "$tmp/$1.out")"; }
peak stream
peak cached --cache-mb 1000
echo "cli_image_memory: the folder decodes to $((decoded / 1024)) MB; peak resident $(($(cat "$tmp/stream.kb") / 1024)) MB" \
  "streamed, $(($(cat "$tmp/cached.kb") / 1024)) MB with every decoded image cached; limit $((limit / 1024)) MB"
[[ $decoded -gt 150000 ]] && pass || fail "the folder decodes to only $decoded KB"
[[ $(cat "$tmp/stream.kb") -lt $limit ]] && pass || fail "streamed: peak $(cat "$tmp/stream.kb") KB, limit $limit KB"
[[ $(cat "$tmp/cached.kb") -gt $limit ]] && pass \
  || fail "with the cache: peak $(cat "$tmp/cached.kb") KB, not over $limit KB: the measurement would miss a leak"
testing_finish cli_image_memory
