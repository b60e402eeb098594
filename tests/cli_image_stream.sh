#!/usr/bin/env bash
# cli_image_stream.sh - `dptrain train` on a folder of JPEG photos of every
# size, streamed (image_folder.h): indexed once, each sample decoded and
# transformed by the loader threads while the devices compute.
# - Fashion-MNIST written as JPEGs of random sizes (28 to 112 pixels, aspect
#   3:4 to 4:3, tools/idx_to_image_folder.py) trains LeNet at 28x28 through
#   Resize + CenterCrop with no option, and with --transform resized-crop;
# - dptrain's promise: the same checkpoint bytes with 1 and 4 loader
#   threads (and --loader-threads 0: filled on the caller's thread), with
#   and without --cache-mb, 2 MPI ranks x 1 device = 1 process x 2 devices
#   bit for bit, 1 vs 2 devices within 1e-5 (cli_short_batch's tolerance);
#   a run SIGKILLed mid-epoch and resumed gives the uninterrupted bytes;
# - bad files: a truncated JPEG and a text file named .jpg stop the index
#   with one line each naming them, exit 1, nothing written; with
#   --skip-bad-files the run trains, saying how many were left out; a file
#   whose header reads but whose data does not decode (broken after the
#   index) stops the run with its line (no checkpoint), or with
#   --skip-bad-files is replaced and the run goes on;
# - ranks whose file lists differ (each rank's working directory holds
#   another copy of the data) stop naming the first difference;
# - the checkpoint records the evaluation transform (data.transform):
#   eval applies it (its correct count equals the test JPEGs predict's top
#   class gets right; without --data it reads the run's folder, data.dir,
#   and without that either one line asks for the folder), export writes it in the ONNX metadata; and the
#   training transform (data.train_transform): a resume with another
#   (center for resized-crop, --dct-scale off) warns once, the same does not;
#   the key empty or too long in a file: one line naming it;
# - --transform squash (the whole image to 28 x 28): recorded as `squash`,
#   eval and predict agree; --resize with it refused (train and eval);
# - --transform, --exif, --dct-scale values are checked.
source "$(dirname "$0")/testing.sh"
py=/usr/bin/python3
tools=$(dirname "$0")/../tools
"$py" "$tools/idx_to_image_folder.py" "$data" "$tmp/jpeg" --random-size 28:112 --limit-train 480 --limit-test 96 \
  --seed 1 || { fail "making the JPEG folder"; testing_finish cli_image_stream; exit 1; }
common=(train --data "$tmp/jpeg" --model lenet-paddle --batch-size 48 --lr 0.05 --seed 2 --epochs 2 --quiet)

# run NAME ARGS...: a training run saving NAME.st, its output in NAME.out
run() {
  local name=$1
  shift
  "$bin" "${common[@]}" --save "$tmp/$name.st" "$@" >"$tmp/$name.out" 2>&1 && pass \
    || fail "$name: $(tail -3 "$tmp/$name.out")"
}
same() { same_tensors "$tmp/$1.st" "$tmp/$2.st" && pass || fail "$1 and $2: checkpoint tensors differ"; }

# the same bytes for any loader thread count, with or without the cache
run one --devices 2 --loader-threads 1
run four --devices 2 --loader-threads 4
run caller --devices 2 --loader-threads 0
run cached --devices 2 --loader-threads 2 --cache-mb 64
same one four
same one caller
same one cached
run crop1 --devices 2 --loader-threads 1 --transform resized-crop
run crop3 --devices 2 --loader-threads 3 --transform resized-crop
same crop1 crop3
# the crops change the run (they are applied), and the 1-device run agrees within 1e-5
cmp -s <(tensors "$tmp/crop1.st") <(tensors "$tmp/one.st") && fail "--transform resized-crop changed nothing" || pass
run crop-dev1 --devices 1 --transform resized-crop
worst=$(close_checkpoints "$tmp/crop1.st" "$tmp/crop-dev1.st" 1e-5 2>&1) && pass || fail "1 vs 2 devices: $worst"

# 2 ranks x 1 device, each filling its share of every batch: 1 process x 2 devices' bits
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${common[@]}" --devices 1 --transform resized-crop \
    --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same ranks crop1
  # file lists that differ between ranks (a relative --data, another copy in each rank's folder)
  mkdir -p "$tmp/r0" "$tmp/r1"
  cp -r "$tmp/jpeg" "$tmp/r0/data"
  cp -r "$tmp/jpeg" "$tmp/r1/data"
  first=$(ls "$tmp/r1/data/train/3" | head -1)
  mv "$tmp/r1/data/train/3/$first" "$tmp/r1/data/train/3/${first%.jpg}-moved.jpg"
  out=$(mpirun --allow-run-as-root --oversubscribe -np 1 -wdir "$tmp/r0" "$bin" "${common[@]}" --data data --devices 1 : \
        -np 1 -wdir "$tmp/r1" "$bin" "${common[@]}" --data data --devices 1 2>&1) && fail "differing file lists trained" \
    || { grep -q "rank 1's file list differs from rank 0's at entry [0-9]*: rank 0 has '3 3/$first', rank 1 '3 3/${first%.jpg}-moved.jpg'" <<<"$out" \
           && pass || fail "differing file lists: $out"; }
else
  fail "mpirun not found (openmpi-bin)"
fi

# SIGKILL mid-epoch, then --resume: the uninterrupted run's bytes
run straight --devices 2 --transform resized-crop --save-every-steps 3
"$bin" "${common[@]}" --devices 2 --transform resized-crop --save-every-steps 3 --save "$tmp/killed.st" \
  >"$tmp/killed.out" 2>&1 &
pid=$!
for _ in $(seq 1 1000); do
  [[ -s "$tmp/killed.st" ]] && grep -aq '"loader.batch":"[36]"' "$tmp/killed.st" && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
kill -9 $pid 2>/dev/null && killed=1 || killed=0
wait $pid 2>/dev/null
# the checkpoint the resume starts from is inside the epoch (the loader's cursor past its first batch)
at=$(grep -ao '"loader.batch":"[0-9]*"' "$tmp/killed.st" 2>/dev/null | head -1 | grep -o '[0-9]*')
[[ -n $at && $at -gt 0 ]] && pass || fail "the killed run's checkpoint is not mid-epoch (loader.batch '${at}')"
"$bin" "${common[@]}" --devices 2 --transform resized-crop --save-every-steps 3 --save "$tmp/killed.st" \
  --resume "$tmp/killed.st" >"$tmp/resumed.out" 2>&1 && pass || fail "resume: $(tail -2 "$tmp/resumed.out")"
[[ $killed == 1 ]] && pass || fail "the run ended before it could be killed mid-epoch"
same killed straight

# bad files stop the index: one line each, exit 1, nothing written
cp -r "$tmp/jpeg" "$tmp/bad"
# (the first 30 bytes of a real JPEG of the folder: its header cut before the frame size)
cut_from=$(ls "$tmp/bad/train/1" | head -1)
[[ -s "$tmp/bad/train/1/$cut_from" ]] && pass || fail "no JPEG in $tmp/bad/train/1 to cut"
head -c 30 "$tmp/bad/train/1/$cut_from" >"$tmp/bad/train/1/000005-cut.jpg"
echo "not an image" >"$tmp/bad/train/2/notes.jpg"
"$bin" "${common[@]}" --data "$tmp/bad" --devices 1 --save "$tmp/bad.st" >"$tmp/bad.out" 2>&1 \
  && fail "a folder with bad files trained" || pass
grep -q "2 files cannot be read as an image" "$tmp/bad.out" && grep -q "000005-cut.jpg" "$tmp/bad.out" \
  && grep -q "notes.jpg" "$tmp/bad.out" && pass || fail "bad files: $(cat "$tmp/bad.out")"
[[ ! -e "$tmp/bad.st" ]] && pass || fail "a refused run wrote its checkpoint"
run skipped --data "$tmp/bad" --devices 1 --skip-bad-files
grep -q "2 unreadable files left out (2 training, 0 test)" "$tmp/skipped.out" && pass \
  || fail "--skip-bad-files: $(head -3 "$tmp/skipped.out")"

# a file whose header reads but whose data does not decode: the fill fails with its line, no checkpoint
cp -r "$tmp/jpeg" "$tmp/late"
f=$(ls "$tmp/late/train/4/" | head -1)
size=$(stat -c %s "$tmp/late/train/4/$f")
head -c $((size / 2)) "$tmp/jpeg/train/4/$f" >"$tmp/late/train/4/$f"
"$bin" "${common[@]}" --data "$tmp/late" --devices 1 --save "$tmp/late.st" >"$tmp/late.out" 2>&1 \
  && fail "a broken file's data trained" || pass
grep -q "train/4/$f" "$tmp/late.out" && pass || fail "the broken file is not named: $(tail -2 "$tmp/late.out")"
[[ ! -e "$tmp/late.st" ]] && pass || fail "the failed run wrote a checkpoint"
run late-skip --data "$tmp/late" --devices 1 --skip-bad-files --metrics "$tmp/late-skip.jsonl"
grep -q "replaced by the next file that decodes" "$tmp/late-skip.out" && pass \
  || fail "--skip-bad-files on a broken file: $(head -3 "$tmp/late-skip.out")"
# counted in the metrics: once in epoch 1, twice by the end of epoch 2
[[ "$(sed -E 's/.*"skipped_files": ([0-9]+).*/\1/' "$tmp/late-skip.jsonl" | tr '\n' ' ')" == "1 2 " ]] && pass \
  || fail "skipped_files in the metrics: $(cat "$tmp/late-skip.jsonl")"

# the preprocessing travels with the model: the checkpoint's data.transform; eval and predict apply it
# (predict's top class of every test JPEG is right exactly as often as eval counts), export writes it
"$bin" inspect "$tmp/crop1.st" >"$tmp/inspect.out" 2>&1
grep -q "^  data.transform = resize 32$" "$tmp/inspect.out" && pass || fail "inspect: $(grep -i transform "$tmp/inspect.out")"
# and the training transform (data.train_transform): a resume with another says so in one warning, and trains;
# a resume without --transform takes the checkpoint's
grep -q "^  data.train_transform = resized-crop$" "$tmp/inspect.out" && pass \
  || fail "inspect: $(grep -i train_transform "$tmp/inspect.out")"
"$bin" inspect "$tmp/one.st" 2>&1 | grep -q "^  data.train_transform = center$" && pass || fail "inspect one.st: no center"
"$bin" "${common[@]}" --epochs 3 --devices 2 --transform center --resume "$tmp/crop1.st" --save "$tmp/crop-center.st" \
  >/dev/null 2>"$tmp/crop-center.err" && [[ -s "$tmp/crop-center.st" ]] \
  && [[ $(grep -c "warning: --resume $tmp/crop1.st: saved with the training transform 'resized-crop', continuing with 'center' (not what an uninterrupted run would do)$" "$tmp/crop-center.err") -eq 1 ]] \
  && pass || fail "resume with another training transform: $(cat "$tmp/crop-center.err")"
"$bin" "${common[@]}" --epochs 3 --devices 2 --resume "$tmp/crop1.st" --save "$tmp/crop-kept.st" \
  >"$tmp/crop-kept.out" 2>&1 && ! grep -q "training transform" "$tmp/crop-kept.out" \
  && "$bin" inspect "$tmp/crop-kept.st" 2>&1 | grep -q "^  data.train_transform = resized-crop$" && pass \
  || fail "resume without --transform: $(cat "$tmp/crop-kept.out")"
"$bin" "${common[@]}" --epochs 3 --devices 2 --transform resized-crop --dct-scale off --resume "$tmp/crop1.st" \
  --save "$tmp/crop-nodct.st" >/dev/null 2>"$tmp/crop-nodct.err" \
  && grep -q "continuing with 'resized-crop, dct-scale off'" "$tmp/crop-nodct.err" && pass \
  || fail "resume with --dct-scale off: $(cat "$tmp/crop-nodct.err")"
"$bin" "${common[@]}" --epochs 3 --devices 2 --transform resized-crop --resume "$tmp/crop1.st" \
  --save "$tmp/crop-same.st" >/dev/null 2>"$tmp/crop-same.err" && ! grep -q "training transform" "$tmp/crop-same.err" \
  && pass || fail "resume with the same training transform warned: $(cat "$tmp/crop-same.err")"
# a file whose data.train_transform is empty or too long: one line naming the key, exit 1
for value in "" "$(printf 'x%.0s' {1..160})"; do
  /usr/bin/python3 - "$tmp/crop1.st" "$tmp/bad-tt.st" "$value" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"]["data.train_transform"] = sys.argv[3]
t = json.dumps(h).encode()
t += b" " * (-(8 + len(t)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
EOF
  out=$("$bin" inspect "$tmp/bad-tt.st" 2>&1 >/dev/null)
  [[ $? -ne 0 && $(wc -l <<<"$out") -eq 1 && $out == *"metadata 'data.train_transform' is "*", expected 1 to 159 bytes" ]] \
    && pass || fail "data.train_transform '${value:0:8}...': $out"
done
eval_line=$("$bin" eval --resume "$tmp/crop1.st" --data "$tmp/jpeg" --devices 1 2>&1)
# without --data: the run's folder (data.dir), the same line; a file without data.dir (of an older dptrain:
# then Fashion-MNIST's IDX files by default): one line saying to give the image folder
out=$("$bin" eval --resume "$tmp/crop1.st" --devices 1 2>&1)
[[ $? -eq 0 && "$out" == "$eval_line" ]] && pass || fail "eval without --data (data.dir): '$out' vs '$eval_line'"
without_meta "$tmp/crop1.st" "$tmp/crop1-older.st" data.dir
out=$("$bin" eval --resume "$tmp/crop1-older.st" --devices 1 2>&1)
[[ $? -eq 1 && $(wc -l <<<"$out") -eq 1 && $out == "dptrain: eval: $tmp/crop1-older.st was trained on an image folder (10 classes: "*"): give that folder, or one with the same class folders, with --data DIR" ]] \
  && pass || fail "eval of an image folder's checkpoint without --data or data.dir: $out"
# the evaluation's batches filled by 1 or 3 loader threads, on 1 or 2 devices: the same count
for run in "--loader-threads 1 --devices 2" "--loader-threads 3 --devices 1"; do
  other=$("$bin" eval --resume "$tmp/crop1.st" --data "$tmp/jpeg" $run 2>&1)
  [[ "${other%%, model*}" == "${eval_line%%, model*}" ]] && pass || fail "eval $run: '$other' vs '$eval_line'"
done
# eval_predict CHECKPOINT EVAL_LINE: predict's top class is right as often as eval counts
eval_predict() {
  local correct predicted
  correct=$(sed -nE 's/^test acc: [0-9.]+ \(([0-9]+)\/96 correct\).*/\1/p' <<<"$2")
  predicted=$("$bin" predict --resume "$1" --top 1 "$tmp"/jpeg/test/*/*.jpg 2>&1 \
    | awk '{ n = split($0, a, "/"); split(a[n], b, ": "); cls = a[n - 1]; split(b[2], c, " "); if (c[1] == cls) right++ }
           END { print right + 0 }')
  [[ -n $correct && $correct == "$predicted" ]] && pass \
    || fail "$1: eval counts '$correct' correct, predict's top class is right for $predicted ($2)"
}
eval_predict "$tmp/crop1.st" "$eval_line"
if /usr/bin/python3 -c "import onnx" 2>/dev/null; then
  "$bin" export --resume "$tmp/crop1.st" --onnx "$tmp/m.onnx" >/dev/null 2>&1 && pass || fail "export"
  props=$(/usr/bin/python3 "$tools/check_onnx.py" props "$tmp/m.onnx" 2>&1)
  grep -qx "transform=resize 32" <<<"$props" && pass || fail "ONNX metadata: $props"
else
  fail "no python3-onnx (import onnx) to read the exported metadata"
fi

# --transform squash: the whole image to 28 x 28 in training and evaluation; recorded, applied by eval and predict
run squash --devices 2 --transform squash
cmp -s <(tensors "$tmp/squash.st") <(tensors "$tmp/one.st") && fail "--transform squash changed nothing" || pass
"$bin" inspect "$tmp/squash.st" 2>&1 | grep -q "^  data.transform = squash$" && pass || fail "inspect: no squash"
eval_line=$("$bin" eval --resume "$tmp/squash.st" --data "$tmp/jpeg" --devices 1 2>&1) && pass || fail "eval: $eval_line"
eval_predict "$tmp/squash.st" "$eval_line"
for bad in "train --transform squash --resize 30" "eval --resize 30"; do
  if [[ $bad == train* ]]; then out=$("$bin" "${common[@]}" --devices 1 ${bad#train } 2>&1)
  else out=$("$bin" eval --resume "$tmp/squash.st" --data "$tmp/jpeg" ${bad#eval } 2>&1); fi
  [[ $? -ne 0 && $(wc -l <<<"$out") -eq 1 && $out == *"--resize 30: the squash transform"* ]] && pass || fail "$bad: $out"
done

# option values
for bad in "--transform random" "--exif maybe" "--dct-scale yes"; do
  out=$("$bin" "${common[@]}" --devices 1 $bad 2>&1) && fail "$bad accepted" \
    || { [[ $(wc -l <<<"$out") -eq 1 ]] && grep -q -- "${bad%% *}" <<<"$out" && pass || fail "$bad: $out"; }
done
testing_finish cli_image_stream
