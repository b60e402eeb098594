#!/usr/bin/env bash
# cli_model.sh - `dptrain train --model FILE`: a shipped model file trains
# exactly like the built-in it describes (the same loss and accuracy to the
# last digit); tests/models/tiny_mobilenet.cfg (relu6, depthwise
# convolutions, kaiming_fan_out) learns; `dptrain inspect --model` prints
# a network's parameter table; and a broken or missing file ends the run
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
expect_error --model lenet5 -- \
  "unknown model 'lenet5': not a built-in model (lenet, lenet-paddle, resnet18, alexnet) nor a model file"

"$bin" train --help | grep -q -- "--model NAME|FILE" && pass || fail "train --help does not mention model files"

testing_finish cli_model
