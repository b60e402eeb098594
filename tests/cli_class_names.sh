#!/usr/bin/env bash
# cli_class_names.sh - a model trained on an image folder keeps its class
# names (the class folders, in label order), on a tiny folder of 8x8 PGM
# images made here with classes ant, bee and `sea "lion"` (a quote, to be
# escaped in JSON):
# - the checkpoint holds them as metadata data.classes, a JSON array;
#   `dptrain inspect` prints that key and a classes section (LABEL NAME),
#   tools/read_checkpoint.py the same lines;
# - `dptrain predict` labels images with them (text and --json), never with
#   Fashion-MNIST's names; `dptrain export --onnx` writes them as the
#   metadata_props entry "classes" beside the folder's evaluation transform
#   ("transform", read back with python3-onnx);
# - eval counts right by the checkpoint's names: on a test folder alone of
#   two of its classes and held out of class folders alone, its count is
#   the images predict names as their folder; a class folder that is no
#   class of the checkpoint is one line naming it; folders none of which is
#   (ImageNet's n01440764 ...) are labelled in their sorted order, with a
#   warning;
# - a folder whose path is not UTF-8 (named in Latin-1): the run records no
#   data.dir, and its checkpoint reads back; a model file so named is
#   refused before the run in one line, nothing written;
# - a model with fewer outputs than classes: one error line, exit 1, no
#   checkpoint, metrics or plot written; with more: one warning line, and
#   predict names the extra outputs "(output K)";
# - --init on data with other class names (the head kept: as many outputs)
#   warns in one line naming both lists; on the same names it says nothing;
# - a resume keeps the names; a resume on data with other class names is
#   one error line naming both lists, exit 1, nothing written;
# - a checkpoint of Fashion-MNIST (no class names) has no data.classes and
#   predicts with Fashion-MNIST's names; one of CIFAR-10 has CIFAR-10's
#   (inspect, predict, the ONNX file); a data.classes that is not an array
#   of names is one error line.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

# pgm FILE K N: an 8x8 gray P2 image of class K (rows 2K..2K+2 bright), N varies it
pgm() {
  local y x v
  { echo P2; echo 8 8; echo 255
    for ((y = 0; y < 8; y++)); do
      for ((x = 0; x < 8; x++)); do
        if ((y / 2 == $2)); then v=$((180 + (x * 7 + $3 * 13) % 70)); else v=$(((x * 5 + y * 3 + $3 * 11) % 40)); fi
        printf '%d ' $v
      done
      echo
    done; } >"$1"
}
# folder DIR NAME...: DIR/train/NAME/ (8 images) and DIR/test/NAME/ (2) per class, in the order given
folder() {
  local dir=$1 k=0 n name
  shift
  for name in "$@"; do
    mkdir -p "$dir/train/$name" "$dir/test/$name"
    for ((n = 0; n < 8; n++)); do pgm "$dir/train/$name/$n.pgm" $k $n; done
    for ((n = 8; n < 10; n++)); do pgm "$dir/test/$name/$n.pgm" $k $n; done
    k=$((k + 1))
  done
}
folder "$tmp/imgs" ant bee 'sea "lion"'
folder "$tmp/other" ant bee wasp
# model OUTPUTS: a linear model of 8x8 gray images with that many outputs
model() { printf '[net]\nchannels = 1\nheight = 8\nwidth = 8\n\n[flatten]\n\n[linear]\nname = fc\nout = %d\n' "$1" \
  >"$tmp/m$1.cfg"; }
model 2; model 3; model 5
common=(train --data "$tmp/imgs" --epochs 1 --batch-size 6 --lr 0.1 --seed 1 --devices 1 --quiet)
json='["ant","bee","sea \"lion\""]'

# Training keeps the names; inspect and read_checkpoint.py show them.
"$bin" "${common[@]}" --model "$tmp/m3.cfg" --save "$tmp/ck.st" >"$tmp/train.out" 2>"$tmp/train.err" \
  && [[ ! -s "$tmp/train.err" ]] && pass || fail "training on the image folder: $(cat "$tmp/train.out" "$tmp/train.err")"
"$bin" inspect "$tmp/ck.st" >"$tmp/inspect.out" 2>&1 && pass || fail "inspect: $(cat "$tmp/inspect.out")"
grep -qxF "  data.classes = $json" "$tmp/inspect.out" && pass || fail "inspect: no data.classes = $json line"
sed -n '/^classes:$/,/^tensors:$/p' "$tmp/inspect.out" >"$tmp/classes.out"
printf 'classes:\n  0 ant\n  1 bee\n  2 sea "lion"\ntensors:\n' | cmp -s - "$tmp/classes.out" && pass \
  || fail "inspect's classes section: $(cat "$tmp/classes.out")"
$py "$src/tools/read_checkpoint.py" "$tmp/ck.st" >"$tmp/py.out" 2>&1 && cmp -s "$tmp/inspect.out" "$tmp/py.out" && pass \
  || fail "read_checkpoint.py differs from inspect: $(diff "$tmp/inspect.out" "$tmp/py.out" | head -5)"

# predict: the folder names, every image; never Fashion-MNIST's.
images=("$tmp"/imgs/test/*/*.pgm)
"$bin" predict --resume "$tmp/ck.st" "${images[@]}" >"$tmp/predict.out" 2>"$tmp/predict.err"
[[ $? -eq 0 && $(wc -l <"$tmp/predict.out") -eq ${#images[@]} && ! -s "$tmp/predict.err" ]] && pass \
  || fail "predict: $(cat "$tmp/predict.out" "$tmp/predict.err")"
name='(ant|bee|sea "lion")'
bad=$(grep -cvE "^[^:]+: $name [01]\.[0-9]{4}, $name [01]\.[0-9]{4}, $name [01]\.[0-9]{4}$" "$tmp/predict.out")
[[ $bad -eq 0 ]] && pass || fail "predict lines without the class names: $(head -2 "$tmp/predict.out")"
all3=$(awk '/ ant [01]/ && / bee [01]/ && / sea "lion" [01]/' "$tmp/predict.out" | wc -l)
[[ $all3 -eq ${#images[@]} ]] && pass || fail "predict: $all3 of ${#images[@]} lines name all three classes"
grep -qE "Trouser|T-shirt|Sneaker" "$tmp/predict.out" && fail "predict printed Fashion-MNIST's names" || pass
"$bin" predict --resume "$tmp/ck.st" --json --top 3 "${images[0]}" >"$tmp/predict.json" 2>&1
grep -qF '"label": "sea \"lion\""' "$tmp/predict.json" && grep -qF '"label": "ant"' "$tmp/predict.json" && pass \
  || fail "predict --json labels: $(cat "$tmp/predict.json")"

# export: metadata_props "classes".
"$bin" export --resume "$tmp/ck.st" --onnx "$tmp/m.onnx" >"$tmp/export.out" 2>&1 && pass \
  || fail "export: $(cat "$tmp/export.out")"
$py "$src/tools/check_onnx.py" props "$tmp/m.onnx" >"$tmp/props.out" 2>&1
grep -qxF "classes=$json" "$tmp/props.out" && grep -qx "transform=resize [0-9]*" "$tmp/props.out" && pass \
  || fail "ONNX metadata_props: $(cat "$tmp/props.out")"

# Fewer outputs than classes: one error line, exit 1, nothing written.
"$bin" "${common[@]}" --model "$tmp/m2.cfg" --save "$tmp/few.st" --metrics "$tmp/few.jsonl" --plot "$tmp/few.svg" \
  >"$tmp/few.out" 2>"$tmp/few.err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/few.err") -eq 1 && ! -s "$tmp/few.out" ]] && pass \
  || fail "2 outputs for 3 classes: exit $status, $(cat "$tmp/few.out" "$tmp/few.err")"
grep -qF "model $tmp/m2.cfg has 2 outputs, fewer than the training data's 3 classes: label 2 has no output" \
  "$tmp/few.err" && pass || fail "the error line: $(cat "$tmp/few.err")"
[[ ! -e "$tmp/few.st" && ! -e "$tmp/few.jsonl" && ! -e "$tmp/few.svg" ]] && pass || fail "files written on the error"

# More outputs than classes: one warning line, the run goes on; predict names the extra outputs.
"$bin" "${common[@]}" --model "$tmp/m5.cfg" --save "$tmp/many.st" >"$tmp/many.out" 2>"$tmp/many.err"
status=$?
[[ $status -eq 0 && $(wc -l <"$tmp/many.err") -eq 1 && -s "$tmp/many.st" ]] && pass \
  || fail "5 outputs for 3 classes: exit $status, $(cat "$tmp/many.out" "$tmp/many.err")"
grep -qxF "dptrain: warning: model $tmp/m5.cfg has 5 outputs, more than the training data's 3 classes: outputs 3 to 4 are no class" \
  "$tmp/many.err" && pass || fail "the warning line: $(cat "$tmp/many.err")"
"$bin" predict --resume "$tmp/many.st" --top 5 "${images[0]}" >"$tmp/many.pred" 2>&1
grep -qF "(output 3) " "$tmp/many.pred" && grep -qF "(output 4) " "$tmp/many.pred" && grep -qF 'sea "lion" ' "$tmp/many.pred" \
  && pass || fail "predict with 5 outputs: $(cat "$tmp/many.pred")"
# ... and a resume refused with such a model is its one line (the warning is said once the checkpoint is read)
"$bin" "${common[@]}" --model "$tmp/m5.cfg" --epochs 2 --resume "$tmp/ck.st" --save "$tmp/many2.st" \
  >"$tmp/many2.out" 2>"$tmp/many2.err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/many2.err") -eq 1 && ! -e "$tmp/many2.st" ]] && ! grep -q "warning" "$tmp/many2.err" \
  && pass || fail "5 outputs resuming a 3-output checkpoint: exit $status, $(cat "$tmp/many2.err")"

# Resume keeps the names; other class names are an error naming both.
"$bin" "${common[@]}" --model "$tmp/m3.cfg" --epochs 2 --resume "$tmp/ck.st" --save "$tmp/ck2.st" >"$tmp/r.out" 2>&1 \
  && pass || fail "resume: $(cat "$tmp/r.out")"
"$bin" inspect "$tmp/ck2.st" 2>&1 | grep -qxF "  data.classes = $json" && pass || fail "the resumed checkpoint lost the names"
"$bin" train --data "$tmp/other" --epochs 2 --batch-size 6 --lr 0.1 --seed 1 --devices 1 --quiet --model "$tmp/m3.cfg" \
  --resume "$tmp/ck.st" --save "$tmp/ck3.st" --metrics "$tmp/ck3.jsonl" >"$tmp/r3.out" 2>"$tmp/r3.err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/r3.err") -eq 1 && ! -e "$tmp/ck3.st" && ! -e "$tmp/ck3.jsonl" ]] && pass \
  || fail "resume on other classes: exit $status, $(cat "$tmp/r3.out" "$tmp/r3.err")"
grep -qF "saved with classes [ant, bee, sea \"lion\"], this run's data has classes [ant, bee, wasp]" "$tmp/r3.err" \
  && pass || fail "the resume error line: $(cat "$tmp/r3.err")"
# other classes and another image count: the classes are named, not the count as if --limit differed
cp -r "$tmp/other" "$tmp/other23" && rm "$tmp/other23/train/wasp/7.pgm"
"$bin" train --data "$tmp/other23" --epochs 2 --batch-size 6 --lr 0.1 --seed 1 --devices 1 --quiet \
  --model "$tmp/m3.cfg" --resume "$tmp/ck.st" --save "$tmp/ck4.st" >"$tmp/r4.out" 2>"$tmp/r4.err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/r4.err") -eq 1 && ! -e "$tmp/ck4.st" ]] \
  && grep -qF "saved with classes [ant, bee, sea \"lion\"], this run's data has classes [ant, bee, wasp]" "$tmp/r4.err" \
  && pass || fail "resume on other classes of another count: exit $status, $(cat "$tmp/r4.out" "$tmp/r4.err")"

# --init on other class names with the head kept (the same output count): one warning naming both, the run goes on;
# on the same names, none
"$bin" train --data "$tmp/other" --epochs 1 --batch-size 6 --lr 0.1 --seed 1 --devices 1 --quiet --model "$tmp/m3.cfg" \
  --init "$tmp/ck.st" >"$tmp/i3.out" 2>"$tmp/i3.err" && pass || fail "--init on other classes: $(cat "$tmp/i3.err")"
[[ "$(cat "$tmp/i3.err")" == "dptrain: warning: --init $tmp/ck.st: trained on classes [ant, bee, sea \"lion\"], this \
run's data has classes [ant, bee, wasp]: the last layer keeps the file's weights, each output those of the file's class \
at its position (--fresh-head starts it afresh)" ]] && pass || fail "--init on other classes: stderr $(cat "$tmp/i3.err")"
# --fresh-head: no warning, the line names the head started afresh (test_finetune checks its tensors); without --init
# it is refused in one line
"$bin" train --data "$tmp/other" --epochs 1 --batch-size 6 --lr 0.1 --seed 1 --devices 1 --model "$tmp/m3.cfg" \
  --init "$tmp/ck.st" --fresh-head --save "$tmp/fh.st" >"$tmp/fh.out" 2>"$tmp/fh.err"
status=$?
[[ $status -eq 0 && ! -s "$tmp/fh.err" && -s "$tmp/fh.st" ]] \
  && grep -q "^initialised from $tmp/ck.st (.*); [a-z0-9_.]* initialised afresh: 3 outputs (--fresh-head)$" "$tmp/fh.out" \
  && pass || fail "--fresh-head: exit $status, $(cat "$tmp/fh.out" "$tmp/fh.err")"
"$bin" "${common[@]}" --model "$tmp/m3.cfg" --fresh-head >"$tmp/fh2.out" 2>"$tmp/fh2.err"
status=$?
[[ $status -eq 1 && ! -s "$tmp/fh2.out" && "$(cat "$tmp/fh2.err")" == "dptrain: train: --fresh-head needs --init FILE (the \
checkpoint whose last layer it leaves out)" ]] && pass || fail "--fresh-head without --init: exit $status, $(cat "$tmp/fh2.err")"
"$bin" "${common[@]}" --model "$tmp/m3.cfg" --init "$tmp/ck.st" >"$tmp/i.out" 2>"$tmp/i.err" && [[ ! -s "$tmp/i.err" ]] \
  && pass || fail "--init on the same classes: $(cat "$tmp/i.err")"

# eval counts a prediction right by the checkpoint's class names (the labels are positions among them): on a
# folder of two of its three classes (bee and sea "lion": 1 and 2 in the checkpoint, 0 and 1 among the folder's
# own), a test folder alone (no train folder) and class folders alone (held out), eval's count is the number of
# images whose top-1 class predict names as their folder; a class folder the checkpoint has no name for (more
# classes than the model has outputs, too) is one line naming it.
right_by_name() { # FILE...: the images whose predicted class is their folder's name
  "$bin" predict --resume "$tmp/ck.st" --json --top 1 "$@" | $py -c '
import json, os, sys
print(sum(json.loads(l)["top"][0]["label"] == os.path.basename(os.path.dirname(json.loads(l)["image"])) for l in sys.stdin))'
}
mkdir -p "$tmp/sub/test" "$tmp/flat"
cp -r "$tmp/imgs/test/bee" "$tmp/imgs/test/sea \"lion\"" "$tmp/sub/test/"
cp -r "$tmp/imgs/train/bee" "$tmp/imgs/train/sea \"lion\"" "$tmp/flat/"
want=$(right_by_name "$tmp"/sub/test/*/*.pgm)
out=$("$bin" eval --resume "$tmp/ck.st" --data "$tmp/sub" --devices 1 2>&1)
[[ $? -eq 0 && $out == "test acc: "*" ($want/4 correct) on 4 images, "* ]] && pass \
  || fail "eval on a test folder of 2 of the 3 classes: '$out', predict right by name $want/4"
flat_right=$(right_by_name "$tmp"/flat/*/*.pgm)
out=$("$bin" eval --resume "$tmp/ck.st" --data "$tmp/flat" --holdout 0.5 --devices 1 2>&1)
[[ $? -eq 0 && ( $flat_right -lt 16 || $out == "test acc: 1.0000 (8/8 correct) on 8 images, "* ) ]] && pass \
  || fail "eval held out of 2 of the 3 classes: '$out', predict right by name on $flat_right of the 16 files"
# class folders none of which is a name of the checkpoint (ImageNet's n01440764 ... against imported weights'
# names): labelled in their sorted order, as torchvision's ImageFolder labels them, with one warning line
mkdir -p "$tmp/ids/test"
cp -r "$tmp/imgs/test/ant" "$tmp/ids/test/n01" && cp -r "$tmp/imgs/test/bee" "$tmp/ids/test/n02"
cp -r "$tmp/imgs/test/sea \"lion\"" "$tmp/ids/test/n03"
want=$("$bin" eval --resume "$tmp/ck.st" --data "$tmp/imgs" --devices 1 2>&1)
"$bin" eval --resume "$tmp/ck.st" --data "$tmp/ids" --devices 1 >"$tmp/ids.out" 2>"$tmp/ids.err"
[[ $? -eq 0 && "$(cut -d, -f1 "$tmp/ids.out")" == "${want%%,*}" && $(cat "$tmp/ids.err") == "dptrain: warning: eval: none \
of the class folders of $tmp/ids/test is a class of the checkpoint (ant, bee, sea \"lion\"): labelled in their sorted \
order, as torchvision's ImageFolder labels them (n01: output 0)" ]] && pass \
  || fail "eval on class folders of other names: $(cat "$tmp/ids.out" "$tmp/ids.err") (on the same images named: $want)"
folder "$tmp/five" ant bee cat dog eel
"$bin" eval --resume "$tmp/ck.st" --data "$tmp/five" --devices 1 >"$tmp/e5.out" 2>"$tmp/e5.err"
status=$?
[[ $status -eq 1 && ! -s "$tmp/e5.out" && $(cat "$tmp/e5.err") == "dptrain: eval: $tmp/five/test/cat: 'cat' is not one \
of the checkpoint's 3 classes (ant, bee, sea \"lion\"): eval counts a prediction right by the checkpoint's class names" ]] \
  && pass || fail "eval on 5 classes: exit $status, $(cat "$tmp/e5.out" "$tmp/e5.err")"
"$bin" train --data "$tmp/five" --epochs 2 --batch-size 6 --devices 1 --quiet --resume "$tmp/ck.st" \
  --save "$tmp/ck5.st" >"$tmp/r5.out" 2>"$tmp/r5.err"
[[ $? -eq 1 && ! -e "$tmp/ck5.st" ]] && grep -q "fewer than the training data's 5 classes" "$tmp/r5.err" && pass \
  || fail "resume on 5 classes: $(cat "$tmp/r5.out" "$tmp/r5.err")"

# A folder named in Latin-1: checkpoints hold UTF-8 text (the JSON writer would write the byte \udcXX, which no
# reader takes), so the run records no data.dir and its checkpoint reads back; a model file so named is refused
latin1=$tmp/caf$'\xe9'
cp -r "$tmp/imgs" "$latin1" && cp "$tmp/m3.cfg" "$latin1.cfg"
"$bin" train --data "$latin1" --epochs 1 --batch-size 6 --devices 1 --quiet --model "$tmp/m3.cfg" \
  --save "$tmp/latin1.st" >"$tmp/l1.out" 2>&1 && "$bin" inspect "$tmp/latin1.st" >"$tmp/l1.inspect" 2>&1 \
  && ! grep -q "data.dir" "$tmp/l1.inspect" && pass || fail "a folder named in Latin-1: $(cat "$tmp/l1.out" "$tmp/l1.inspect")"
"$bin" train --data "$tmp/imgs" --epochs 1 --batch-size 6 --devices 1 --quiet --model "$latin1.cfg" \
  --save "$tmp/latin1m.st" >"$tmp/l1m.out" 2>"$tmp/l1m.err"
status=$?
[[ $status -eq 1 && ! -s "$tmp/l1m.out" && ! -e "$tmp/latin1m.st" && $(wc -l <"$tmp/l1m.err") -eq 1 ]] \
  && grep -qF "is not UTF-8 (a name in another encoding?): a checkpoint holds UTF-8 text there" "$tmp/l1m.err" && pass \
  || fail "a model file named in Latin-1: exit $status, $(cat "$tmp/l1m.out" "$tmp/l1m.err")"

# Fashion-MNIST: no class names in the checkpoint, predict uses its built-in names.
small_data "$tmp/fm" 64 32
"$bin" train --data "$tmp/fm" --model lenet --epochs 1 --batch-size 32 --devices 1 --quiet --save "$tmp/fm.st" \
  >"$tmp/fm.out" 2>"$tmp/fm.err" && [[ ! -s "$tmp/fm.err" ]] && pass \
  || fail "Fashion-MNIST training (no warning expected): $(cat "$tmp/fm.out" "$tmp/fm.err")"
"$bin" inspect "$tmp/fm.st" >"$tmp/fm.inspect" 2>&1
grep -qE "data.classes|^classes:" "$tmp/fm.inspect" && fail "a Fashion-MNIST checkpoint has class names" || pass
"$bin" predict --resume "$tmp/fm.st" --top 10 "${images[0]}" 2>&1 | grep -qF "Trouser" && pass \
  || fail "predict with a Fashion-MNIST checkpoint lost its built-in names"

# CIFAR-10: its ten names (airplane ... truck) kept as an image folder's, predict and the ONNX file name them.
mkdir -p "$tmp/cifar"
$py - "$tmp/cifar" <<'PY'
import random, sys
rng = random.Random(2)
for name, n in (("data_batch_1.bin", 40), ("test_batch.bin", 10)):
    open(f"{sys.argv[1]}/{name}", "wb").write(b"".join(bytes([i % 10]) + rng.randbytes(3072) for i in range(n)))
PY
printf '[net]\nchannels = 3\nheight = 32\nwidth = 32\n\n[flatten]\n\n[linear]\nname = fc\nout = 10\n' >"$tmp/c10.cfg"
"$bin" train --data "$tmp/cifar" --model "$tmp/c10.cfg" --epochs 1 --batch-size 20 --devices 1 --quiet \
  --save "$tmp/cifar.st" >/dev/null 2>"$tmp/cifar.err" || fail "CIFAR training: $(cat "$tmp/cifar.err")"
cifar='["airplane","automobile","bird","cat","deer","dog","frog","horse","ship","truck"]'
"$bin" inspect "$tmp/cifar.st" | grep -qxF "  data.classes = $cifar" && pass || fail "a CIFAR-10 checkpoint's data.classes"
"$bin" predict --resume "$tmp/cifar.st" --top 10 "${images[0]}" >"$tmp/cifar.pred" 2>&1
grep -qF "airplane" "$tmp/cifar.pred" && grep -qF "truck" "$tmp/cifar.pred" && ! grep -qF "Trouser" "$tmp/cifar.pred" \
  && pass || fail "predict with a CIFAR-10 checkpoint: $(cat "$tmp/cifar.pred")"
"$bin" export --resume "$tmp/cifar.st" --onnx "$tmp/cifar.onnx" && $py "$src/tools/check_onnx.py" props "$tmp/cifar.onnx" \
  | grep -qxF "classes=$cifar" && pass || fail "the ONNX file of a CIFAR-10 checkpoint has no classes"

# A data.classes that is not an array of names: one line naming it.
$py - "$tmp/ck.st" "$tmp/badnames.st" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header["__metadata__"]["data.classes"] = '["ant", 3]'
text = json.dumps(header).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
"$bin" predict --resume "$tmp/badnames.st" "${images[0]}" >"$tmp/bad.out" 2>"$tmp/bad.err"
status=$?
[[ $status -eq 1 && ! -s "$tmp/bad.out" && $(wc -l <"$tmp/bad.err") -eq 1 ]] \
  && grep -qF "metadata 'data.classes': entry 1 is not a string" "$tmp/bad.err" && pass \
  || fail "a bad data.classes: exit $status, $(cat "$tmp/bad.out" "$tmp/bad.err")"

testing_finish cli_class_names
