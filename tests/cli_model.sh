#!/usr/bin/env bash
# cli_model.sh - `dptrain train --model FILE`: a shipped model file trains
# exactly like the built-in it describes (the same loss and accuracy to the
# last digit); tests/models/tiny_mobilenet.cfg (relu6, depthwise
# convolutions, kaiming_fan_out) learns; `dptrain inspect --model` prints
# a network's parameter table; tests/models/tiny_efficientnet.cfg (stochastic
# depth) trains the same on 1, 2 and 3 devices; and a broken or missing file ends the run
# with one line on stderr naming FILE:LINE and the problem, exit 1,
# nothing written.
source "$(dirname "$0")/testing.sh"
models=${DPTRAIN_TEST_DIR:?}/../models

# --- A model file trains like its built-in ------------------------------------------
# the first 3000 training and 1000 test images: each epoch's evaluation stays short
small_data "$tmp/fm" 3000 1000
data=$tmp/fm
run=(train --data "$data" --limit 3000 --epochs 1 --lr 0.3 --batch-size 128 --seed 2 --devices 2 --quiet)
for name in lenet lenet-paddle; do
  "$bin" "${run[@]}" --model "$name" --metrics "$tmp/$name-builtin.jsonl" >/dev/null 2>"$tmp/err" \
    && pass || fail "--model $name: $(cat "$tmp/err")"
  "$bin" "${run[@]}" --model "$models/$name.cfg" --metrics "$tmp/$name-file.jsonl" >/dev/null 2>"$tmp/err" \
    && pass || fail "--model $models/$name.cfg: $(cat "$tmp/err")"
  a=$(cat "$tmp/$name-builtin.jsonl" 2>/dev/null)
  b=$(cat "$tmp/$name-file.jsonl" 2>/dev/null)
  loss_a=$(json_field "$a" train_loss) loss_b=$(json_field "$b" train_loss)
  acc_a=$(json_field "$a" test_acc) acc_b=$(json_field "$b" test_acc)
  echo "$name: built-in loss $loss_a acc $acc_a, $name.cfg loss $loss_b acc $acc_b"
  [[ -n "$loss_a" && "$loss_a" == "$loss_b" && "$acc_a" == "$acc_b" ]] && pass \
    || fail "$name: built-in loss $loss_a acc $acc_a, model file loss $loss_b acc $acc_b"
done

# --- MobileNet's pieces (relu6, depthwise convolutions, kaiming_fan_out) learn ------
"$bin" train --data "$data" --limit 3000 --epochs 1 --batch-size 64 --lr 0.3 --optimizer momentum --seed 2 \
  --devices 2 --quiet --model "${DPTRAIN_TEST_DIR}/models/tiny_mobilenet.cfg" --metrics "$tmp/tm.jsonl" \
  >/dev/null 2>"$tmp/err" && pass || fail "tiny_mobilenet: $(cat "$tmp/err")"
acc=$(json_field "$(cat "$tmp/tm.jsonl" 2>/dev/null)" test_acc)
echo "tiny_mobilenet: test acc $acc after one epoch of 3000 images"
awk -v a="$acc" 'BEGIN { exit !(a != "" && a > 0.3) }' && pass || fail "tiny_mobilenet: test acc $acc (chance: 0.1)"

# --- Stochastic depth: the same run on 1, 2 and 3 devices ---------------------------------
# tests/models/tiny_efficientnet.cfg ([drop_path] 0.3 and 0.5; batch statistics synchronised): each example's
# mask follows its index in the whole batch, so the loss is the same within rounding on any number of
# devices (measured: 2.27441161 on 1, 2.27441162 on 2 and 3), and not the loss without stochastic depth (2.2175)
te=(train --data "$data" --limit 480 --epochs 1 --batch-size 48 --lr 0.1 --optimizer momentum --seed 2 --quiet
    --sync-batch-norm)
sed 's/^p = 0\.[35]$/p = 0/' "${DPTRAIN_TEST_DIR}/models/tiny_efficientnet.cfg" >"$tmp/te-p0.cfg"
for run in 1 2 3 p0; do
  model=${DPTRAIN_TEST_DIR}/models/tiny_efficientnet.cfg devices=$run
  [[ $run == p0 ]] && model=$tmp/te-p0.cfg devices=2
  "$bin" "${te[@]}" --devices $devices --model "$model" --metrics "$tmp/te-$run.jsonl" >/dev/null 2>"$tmp/err" \
    && pass || fail "tiny_efficientnet on $devices devices: $(cat "$tmp/err")"
done
loss() { json_field "$(cat "$tmp/te-$1.jsonl" 2>/dev/null)" train_loss; }
echo "tiny_efficientnet: loss $(loss 1) on 1 device, $(loss 2) on 2, $(loss 3) on 3, $(loss p0) without stochastic depth"
awk -v a="$(loss 1)" -v b="$(loss 2)" -v c="$(loss 3)" -v z="$(loss p0)" 'function d(x, y) { return x > y ? x - y : y - x }
  BEGIN { exit !(a != "" && d(a, b) <= 1e-6 * a && d(a, c) <= 1e-6 * a && d(a, z) > 1e-3 * a) }' && pass \
  || fail "tiny_efficientnet: loss $(loss 1), $(loss 2), $(loss 3) on 1, 2, 3 devices; $(loss p0) with p = 0"

# --- inspect --model: the parameter table ---------------------------------------------
"$bin" inspect --model "$models/mobilenet_v2-imagenet.cfg" >"$tmp/table" 2>"$tmp/err" && pass || fail "inspect --model"
head -1 "$tmp/table" | grep -q "^model mobilenet_v2-imagenet: input 3x224x224, 1000 outputs, 3504872 trainable parameters, 34112 buffer values, 262 tensors, fingerprint [0-9a-f]\{16\}$" \
  && pass || fail "inspect --model: $(head -1 "$tmp/table")"
grep -qx "  features.1.conv.0.0.weight \[32, 1, 3, 3\] trainable" "$tmp/table" \
  && grep -qx "  features.18.1.running_var \[1280\] buffer" "$tmp/table" && [[ $(wc -l <"$tmp/table") -eq 263 ]] \
  && pass || fail "inspect --model: the table"
"$bin" inspect --model "$tmp/missing.cfg" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 1 && "$(cat "$tmp/err")" == "dptrain: $tmp/missing.cfg: cannot open model file (No such file or directory)" \
   && ! -s "$tmp/out" ]] && pass || fail "inspect --model of a missing file: $(cat "$tmp/err")"

# --- Broken and missing files -------------------------------------------------------
# expect_error ARGS... -- MESSAGE: exit 1, stderr exactly "dptrain: MESSAGE", no metrics file.
expect_error() {
  local args=() message
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  message=$2
  rm -f "$tmp/m.jsonl"
  "$bin" train --data "$data" --epochs 1 --metrics "$tmp/m.jsonl" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -eq 1 ]] && pass || fail "${args[*]}: exit $status, expected 1"
  [[ "$(cat "$tmp/err")" == "dptrain: $message" ]] && pass \
    || fail "${args[*]}: stderr '$(cat "$tmp/err")', expected 'dptrain: $message'"
  [[ ! -e "$tmp/m.jsonl" && ! -s "$tmp/out" ]] && pass || fail "${args[*]}: wrote output"
}
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n\n[conv]\nname = conv1\nfilters = 20\nsize = 3\npad = -1\n' \
  >"$tmp/bad.cfg"
expect_error --model "$tmp/bad.cfg" -- "$tmp/bad.cfg:10: pad = -1 is out of range (expected 0 to 1024)"
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[conv]\nname = c\nfilters = 4\nsize = 3\n[linear]\nname = fc\nout = 10\n' \
  >"$tmp/shape.cfg"
expect_error --model "$tmp/shape.cfg" -- \
  "$tmp/shape.cfg:9: [linear] model shape: layer fc: linear needs a flat input (add a flatten layer)"
printf '[net]\nchannels = 3\nheight = 28\nwidth = 28\n[flatten]\n[linear]\nname = fc\nout = 10\n' >"$tmp/rgb.cfg"
expect_error --model "$tmp/rgb.cfg" -- "model $tmp/rgb.cfg takes 3x28x28 images, the data in $data has 1x28x28"
expect_error --model "$tmp/missing.cfg" -- "$tmp/missing.cfg: cannot open model file (No such file or directory)"
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[flatten]\n[linear]\nname = fc\nout = 10\ninit_scale = 0.1\n' \
  >"$tmp/scale.cfg"
expect_error --model "$tmp/scale.cfg" -- \
  "$tmp/scale.cfg:9: init_scale is the standard deviation of init = normal: give init = normal in this block too"
# a name is looked for among the model files: this build's, not installed, finds the source tree's models/
expect_error --model lenet5 -- "unknown model 'lenet5': not a built-in model (lenet, lenet-paddle, resnet18, \
alexnet) nor a model file (looked for lenet5.cfg in $(cd "$models" && pwd -P))"
expect_error --model lenet-cifar -- "model lenet-cifar takes 3x32x32 images, the data in $data has 1x28x28"

# --- A checkpoint carries its model file ------------------------------------------
# Trained in work/ on work/my.cfg (lenet-paddle's file, 0xff in a comment:
# not UTF-8), the checkpoint holds the file's text (model_text): eval,
# predict, export and a resume without --model run from another folder;
# --model still overrides; without the key (an older dptrain's checkpoint)
# the model file is looked for where --model named it.
mkdir -p "$tmp/work" "$tmp/elsewhere"
{ printf '# my.cfg \xff\n'; cat "$models/lenet-paddle.cfg"; } >"$tmp/work/my.cfg"
short=(--data "$data" --limit 512 --batch-size 128 --devices 2 --quiet)
(cd "$tmp/work" && "$bin" train "${short[@]}" --model my.cfg --epochs 1 --save ck.st >/dev/null 2>"$tmp/err") \
  && pass || fail "training on my.cfg: $(cat "$tmp/err")"
(cd "$tmp/work" && "$bin" train "${short[@]}" --model my.cfg --epochs 2 --save straight.st >/dev/null 2>&1) \
  || fail "2 epochs straight on my.cfg"
cd "$tmp/elsewhere"
"$bin" inspect ../work/ck.st >inspect.out 2>&1 && grep -qx "  model = my.cfg" inspect.out \
  && grep -qE "^  model_text = \([0-9]+ bytes of model file text\)$" inspect.out && pass \
  || fail "inspect: $(grep model inspect.out)"
/usr/bin/python3 "$models/../tools/read_checkpoint.py" ../work/ck.st >reader.out 2>&1 && cmp -s inspect.out reader.out \
  && pass || fail "read_checkpoint.py differs from inspect: $(diff inspect.out reader.out | head -3)"
"$bin" eval --resume ../work/ck.st --data "$data" --devices 2 >eval.out 2>&1 \
  && grep -qE "^test acc: [0-9.]+ \([0-9]+/1000 correct\) on 1000 images, model lenet-paddle, epoch 1, ../work/ck.st$" eval.out \
  && pass || fail "eval from elsewhere: $(cat eval.out)"
mkdir -p "$tmp/png" && /usr/bin/python3 "$models/../tools/check_onnx.py" pngs "$data/t10k-images-idx3-ubyte" 1 "$tmp/png" >/dev/null 2>&1
"$bin" predict --resume ../work/ck.st --top 1 "$tmp"/png/*.png >predict.out 2>&1 && [[ $(wc -l <predict.out) -eq 1 ]] \
  && pass || fail "predict from elsewhere: $(cat predict.out)"
"$bin" export --resume ../work/ck.st --onnx my.onnx >export.out 2>&1 && [[ -s my.onnx ]] && pass \
  || fail "export from elsewhere: $(cat export.out)"
"$bin" train "${short[@]}" --epochs 2 --resume ../work/ck.st --save resumed.st >train.out 2>&1 \
  && same_tensors resumed.st ../work/straight.st && pass || fail "resume from elsewhere: $(cat train.out)"
"$bin" eval --resume ../work/ck.st --data "$data" --model lenet >eval.out 2>&1
[[ $? -eq 1 ]] && grep -q "^dptrain: .*tensor 'conv1.weight' has shape" eval.out && pass \
  || fail "--model lenet did not override the checkpoint's model: $(cat eval.out)"
/usr/bin/python3 - ../work/ck.st old.st <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]["model_text"]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-(8 + len(t)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
"$bin" eval --resume old.st --data "$data" >eval.out 2>&1
[[ $? -eq 1 && $(cat eval.out) == "dptrain: my.cfg: cannot open model file (No such file or directory)" ]] && pass \
  || fail "a checkpoint without model_text, elsewhere: $(cat eval.out)"
"$bin" eval --resume old.st --data "$data" --model ../work/my.cfg >eval.out 2>&1 && pass \
  || fail "a checkpoint without model_text, --model: $(cat eval.out)"
(cd "$tmp/work" && "$bin" eval --resume ../elsewhere/old.st --data "$data" >/dev/null 2>&1) && pass \
  || fail "a checkpoint without model_text, in the folder it was trained in"
cd - >/dev/null

"$bin" train --help | grep -q -- "--model NAME|FILE" && pass || fail "train --help does not mention model files"

# inspect --model with a train option after it names that option (it said
# '--model takes one network', as if a second network had been given)
"$bin" inspect --model lenet --image-size 8 >"$tmp/inspect_extra.out" 2>"$tmp/inspect_extra.err" \
  && fail "inspect --model lenet --image-size 8 exited 0" \
  || { [[ $(wc -l <"$tmp/inspect_extra.err") -eq 1 && ! -s "$tmp/inspect_extra.out" ]] \
       && grep -q "found '--image-size'" "$tmp/inspect_extra.err" && pass \
       || fail "inspect --model lenet --image-size 8: $(cat "$tmp/inspect_extra.err")"; }

testing_finish cli_model
