#!/usr/bin/env bash
# cli_holdout.sh - `dptrain train` and `eval` on a folder of class folders
# without a test folder (DIR/CLASS/..., or DIR/train alone): a fraction of
# each class held out as the test split (--holdout, default 0.1;
# image_folder.h dp_image_index_hold_out).
# - 600 Fashion-MNIST PNGs in class folders train LeNet; the first line
#   says how many were held out, round(0.1 x n) of each class's n (counted
#   here from the folder), the rest train;
# - the checkpoint records it (data.holdout): eval on the same folder
#   evaluates the same files (its count, and its accuracy equal to the
#   run's last test accuracy in the metrics file); --holdout 0.25 holds out
#   round(0.25 x n) and eval of its checkpoint takes 0.25 by itself;
# - --init from the 0.1 run with --holdout 0.25 on the same folder warns
#   that the test split has images the file's run trained on; --init from
#   the 0.25 run with the default 0.1 says nothing;
# - DIR/train alone gives the same checkpoint bytes as the class folders
#   in DIR (the split depends on CLASS/NAME only), as do 2 MPI ranks x 1
#   device against 1 process x 2 devices;
# - DIR/train beside DIR/val: the val folder is the test split (the first
#   line says so, nothing is held out or recorded, eval reads it);
# - refused in one line, exit 1, nothing written: a resume with another
#   --holdout, a resume on the folder with images removed or added since
#   (said so, not as a --limit; data.train_total records the count, and a
#   checkpoint without it is still told where images were removed), --holdout beside a test or val folder or on IDX data, fractions 0,
#   1, 1.5 and 'abc', classes too small for anything to be held out, an
#   empty folder, a test or val folder without a train folder.
source "$(dirname "$0")/testing.sh"
py=/usr/bin/python3
tools=$(dirname "$0")/../tools
"$py" "$tools/idx_to_image_folder.py" "$data" "$tmp/made" --format png --limit-train 600 --limit-test 10 >/dev/null \
  || { fail "making the PNG folder"; testing_finish cli_holdout; exit 1; }
mv "$tmp/made/train" "$tmp/flat"
mkdir -p "$tmp/split" && cp -r "$tmp/flat" "$tmp/split/train"
common=(train --model lenet-paddle --batch-size 50 --lr 0.05 --seed 3 --epochs 1)

# held FRACTION DIR: round(FRACTION x n) of each class of DIR, at most n - 1, summed
held() {
  "$py" - "$1" "$2" <<'PY'
import os, sys
f, d = float(sys.argv[1]), sys.argv[2]
print(sum(min(int(f * n + 0.5), n - 1) for n in (len(os.listdir(os.path.join(d, c))) for c in os.listdir(d))))
PY
}
total=$(find "$tmp/flat" -name '*.png' | wc -l)
h10=$(held 0.1 "$tmp/flat") h25=$(held 0.25 "$tmp/flat")
[[ $total -eq 600 && $h10 -gt 0 && $h25 -gt $h10 ]] && pass || fail "the folder: $total files, held $h10 / $h25"

"$bin" "${common[@]}" --data "$tmp/flat" --devices 2 --save "$tmp/flat.st" --metrics "$tmp/flat.jsonl" \
  >"$tmp/flat.out" 2>&1 && pass || fail "class folders: $(tail -2 "$tmp/flat.out")"
grep -q "on $((total - h10)) images (test $h10 held out, --holdout 0.1)" "$tmp/flat.out" && pass \
  || fail "the first line: $(head -1 "$tmp/flat.out"), expected $((total - h10)) training and $h10 held out"
"$bin" inspect "$tmp/flat.st" | grep -q '^  data.holdout = 0.1$' && pass || fail "data.holdout not recorded"
out=$("$bin" eval --resume "$tmp/flat.st" --data "$tmp/flat" --devices 1 2>&1)
correct=$(sed -nE 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\1/p' <<<"$out")
count=$(sed -nE 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\2/p' <<<"$out")
acc=$(json_field "$(tail -1 "$tmp/flat.jsonl")" test_acc)
[[ $count == "$h10" ]] && pass || fail "eval: $out (expected $h10 images)"
"$py" -c "import sys; sys.exit(abs($correct / $count - $acc) > 1e-9)" && pass \
  || fail "eval's accuracy $correct/$count is not the run's test accuracy $acc"

"$bin" "${common[@]}" --data "$tmp/split" --devices 2 --save "$tmp/split.st" >"$tmp/split.out" 2>&1 && pass \
  || fail "DIR/train alone: $(tail -2 "$tmp/split.out")"
same_tensors "$tmp/flat.st" "$tmp/split.st" && pass || fail "DIR/train alone trained otherwise than DIR's classes"
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${common[@]}" --data "$tmp/flat" --devices 1 \
    --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same_tensors "$tmp/flat.st" "$tmp/ranks.st" && pass || fail "2 ranks x 1 device differ from 1 process x 2 devices"
fi

"$bin" "${common[@]}" --data "$tmp/flat" --devices 2 --holdout 0.25 --save "$tmp/q.st" >"$tmp/q.out" 2>&1 \
  && grep -q "on $((total - h25)) images (test $h25 held out, --holdout 0.25)" "$tmp/q.out" && pass \
  || fail "--holdout 0.25: $(head -1 "$tmp/q.out"), expected $h25 held out"
"$bin" eval --resume "$tmp/q.st" --data "$tmp/flat" --devices 1 2>&1 | grep -q "correct) on $h25 images" && pass \
  || fail "eval did not take the checkpoint's --holdout 0.25"

# --init from a run on the same folder: more held out is warned about (its test split has images the file's
# run trained on), as much or less is not
"$bin" "${common[@]}" --data "$tmp/flat" --devices 1 --holdout 0.25 --init "$tmp/flat.st" --quiet >"$tmp/i25.out" \
  2>"$tmp/i25.err"
status=$?
[[ $status -eq 0 && "$(cat "$tmp/i25.err")" == "dptrain: warning: --init $tmp/flat.st: trained on $(realpath "$tmp/flat") with --holdout 0.1, this run holds out 0.25: its test split has images the file's run trained on, and its test accuracy will be too high (give --holdout 0.1 to test on images neither run trained on)" ]] \
  && pass || fail "--init with more held out: exit $status, $(cat "$tmp/i25.err")"
"$bin" "${common[@]}" --data "$tmp/flat" --devices 1 --init "$tmp/q.st" --quiet >"$tmp/i10.out" 2>"$tmp/i10.err" \
  && [[ ! -s "$tmp/i10.err" ]] && pass || fail "--init with less held out: $(cat "$tmp/i10.err")"

# refused: one line naming what, exit 1, nothing written
refused() { # refused WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  rm -f "$tmp/none.st"
  local out status
  out=$("$bin" "$@" 2>&1)
  status=$?
  [[ $status -eq 1 && $(wc -l <<<"$out") -eq 1 && $out == *"$pattern"* && ! -e "$tmp/none.st" ]] && pass \
    || fail "$what: status $status: $out"
}
cp "$tmp/flat.st" "$tmp/before.st"
refused "a resume with another --holdout" "saved with --holdout 0.1, this run has --holdout 0.2" \
  "${common[@]}" --data "$tmp/flat" --devices 2 --epochs 2 --resume "$tmp/flat.st" --save "$tmp/flat.st" --holdout 0.2
cmp -s "$tmp/flat.st" "$tmp/before.st" && pass || fail "the refused resume changed its checkpoint"
# the folder lost or gained images since the checkpoint (its data.train_total): said so, not as a --limit the run
# never had (nor, gained, by training on the first ones as if it had), nothing written; a checkpoint without
# data.train_total (an older dptrain's) is told by its training-set size where the folder lost images
cp -r "$tmp/flat" "$tmp/fewer" && find "$tmp/fewer/$(ls "$tmp/fewer" | head -1)" -name '*.png' | head -10 | xargs rm
cp -r "$tmp/flat" "$tmp/more" && for f in $(find "$tmp/more/$(ls "$tmp/more" | head -1)" -name '*.png' | head -10); do
  cp "$f" "${f%.png}-copy.png"; done
[[ "$("$bin" inspect "$tmp/flat.st" | grep "data.train_total")" == "  data.train_total = $((total - h10))" ]] && pass \
  || fail "data.train_total: $("$bin" inspect "$tmp/flat.st" | grep "data.train_total")"
refused "a resume on a folder that lost images" \
  "when it had $((total - h10)) training images, it has $((total - h10 - 9)) now (files removed or moved since" \
  "${common[@]}" --data "$tmp/fewer" --devices 2 --epochs 2 --resume "$tmp/flat.st" --save "$tmp/none.st"
refused "a resume on a folder that gained images" \
  "when it had $((total - h10)) training images, it has $((total - h10 + 9)) now (files added since" \
  "${common[@]}" --data "$tmp/more" --devices 2 --epochs 2 --resume "$tmp/flat.st" --save "$tmp/none.st"
"$py" - "$tmp/flat.st" "$tmp/older.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]["data.train_total"]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
refused "an older checkpoint's resume on a folder that lost images" \
  "its run trained on $((total - h10)) images of $tmp/fewer, which has $((total - h10 - 9)) training images now" \
  "${common[@]}" --data "$tmp/fewer" --devices 2 --epochs 2 --resume "$tmp/older.st" --save "$tmp/none.st"
# DIR/val (ImageNet's and YOLO's name) is the test split when there is no DIR/test: nothing held out
mkdir -p "$tmp/withval" && cp -r "$tmp/flat" "$tmp/withval/train" && cp -r "$tmp/made/test" "$tmp/withval/val"
nval=$(find "$tmp/withval/val" -name '*.png' | wc -l)
"$bin" "${common[@]}" --data "$tmp/withval" --devices 2 --save "$tmp/val.st" >"$tmp/val.out" 2>&1 \
  && grep -q "on $total images (test $nval: the val folder)" "$tmp/val.out" && pass \
  || fail "DIR/val: $(head -1 "$tmp/val.out"), expected $total training and $nval test images"
"$bin" inspect "$tmp/val.st" | grep -q "data.holdout" && fail "a run with a val folder recorded a hold-out" || pass
"$bin" eval --resume "$tmp/val.st" --data "$tmp/withval" --devices 1 2>&1 | grep -q "correct) on $nval images" && pass \
  || fail "eval did not read DIR/val"
refused "--holdout beside a val folder" "--holdout 0.2: $tmp/withval/val is the test split" \
  "${common[@]}" --data "$tmp/withval" --holdout 0.2 --save "$tmp/none.st"
mkdir -p "$tmp/onlyval/val/a"
refused "a val folder without a train folder" "$tmp/onlyval: has a val folder but no train folder" \
  "${common[@]}" --data "$tmp/onlyval" --save "$tmp/none.st"
mkdir -p "$tmp/withtest" && cp -r "$tmp/flat" "$tmp/withtest/train" && cp -r "$tmp/made/test" "$tmp/withtest/test"
refused "--holdout beside a test folder" "--holdout 0.2: $tmp/withtest/test is the test split" \
  "${common[@]}" --data "$tmp/withtest" --holdout 0.2 --save "$tmp/none.st"
small_data "$tmp/idx" 100 10
refused "--holdout on IDX data" "is IDX data with a test split of its own" \
  "${common[@]}" --data "$tmp/idx" --holdout 0.2 --save "$tmp/none.st"
for bad in 0 1 1.5 abc; do
  refused "--holdout $bad" "--holdout: '$bad' is not a fraction above 0 and below 1" \
    "${common[@]}" --data "$tmp/flat" --holdout "$bad" --save "$tmp/none.st"
done
mkdir -p "$tmp/tiny/a" "$tmp/tiny/b"
cp "$(find "$tmp/flat/$(ls "$tmp/flat" | head -1)" -name '*.png' | head -1)" "$tmp/tiny/a/1.png"
cp "$tmp/tiny/a/1.png" "$tmp/tiny/b/1.png" && cp "$tmp/tiny/a/1.png" "$tmp/tiny/b/2.png"
refused "classes too small" "$tmp/tiny: too few images to hold out a test split at --holdout 0.1 (3 images in 2 classes)" \
  "${common[@]}" --data "$tmp/tiny" --batch-size 2 --save "$tmp/none.st"
mkdir -p "$tmp/empty" "$tmp/onlytest/test/a"
refused "an empty folder" "$tmp/empty: no data found: expected class folders of images" \
  "${common[@]}" --data "$tmp/empty" --save "$tmp/none.st"
refused "a test folder without a train folder" "$tmp/onlytest: has a test folder but no train folder" \
  "${common[@]}" --data "$tmp/onlytest" --save "$tmp/none.st"
testing_finish cli_holdout
