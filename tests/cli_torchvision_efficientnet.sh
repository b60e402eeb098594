#!/usr/bin/env bash
# cli_torchvision_efficientnet.sh - torchvision 0.14's EfficientNets against
# dptrain's models/efficientnet_*-imagenet.cfg (Debian's python3-torchvision,
# randomly initialised by tests/torchvision_check.py: no pretrained weights):
# - EfficientNet-B0 fully: tools/import_torchvision.py turns its state_dict
#   into a weights-only checkpoint; `dptrain predict` of two 224x224 PNGs
#   gives torchvision's logits within 1e-4 of the largest; at 64x64
#   tests/torchvision_step gives the inference-mode logits, loss and every
#   parameter's gradient, the training-mode logits, loss and running
#   statistics within 1e-4 of float64 torchvision's, and the training-mode
#   gradients within 6e-4 as a whole (about 15x PyTorch float32's own
#   distance: torchvision_check.py's ILL_CONDITIONED). Stochastic depth is
#   random in training in both frameworks, so for that check it is off in
#   both: torchvision's StochasticDepth modules at p = 0, and the model
#   file's copy (DIR/efficientnet_b0-small.cfg) with its nine [drop_path]
#   blocks at p = 0 (checked here); dropout likewise;
# - its ONNX export passes onnx's checker; OpenCV 4.6 gives dptrain's logits
#   within 1e-4 on one image (its importer refuses the squeeze-excitation's
#   broadcast Mul at batch 2, as MobileNetV3's), the PyTorch rebuild of the
#   graph on both (tools/check_onnx.py);
# - B1 to B7 and V2-S, V2-M, V2-L, too slow to run here: `dptrain inspect
#   --model` lists torchvision's state_dict, name for name in its order,
#   shape for shape (torchvision_check.py structure);
# - all eleven: every convolution's kernel, stride, padding, groups and
#   bias, every batch norm's eps and momentum, the dropout and stochastic
#   depth probabilities, the SiLU and sigmoid counts and the input size
#   (the default weights' crop size) as torchvision's
#   (torchvision_check.py attributes).
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision_efficientnet torch torchvision onnx cv2 PIL numpy
others=(efficientnet_b1 efficientnet_b2 efficientnet_b3 efficientnet_b4 efficientnet_b5 efficientnet_b6 efficientnet_b7
        efficientnet_v2_s efficientnet_v2_m efficientnet_v2_l)
$py "$src/tests/torchvision_check.py" structure "${others[@]}" >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
for name in "${others[@]}"; do
  grep -q "^$name: ok (" "$tmp/structure.out" && pass || fail "structure: $(grep "^$name: " "$tmp/structure.out")"
done
$py "$src/tests/torchvision_check.py" attributes efficientnet_b0 "${others[@]}" >"$tmp/attributes.out" 2>&1
sed 's/^/  /' "$tmp/attributes.out"
for name in efficientnet_b0 "${others[@]}"; do
  grep -q "^$name: ok (" "$tmp/attributes.out" && pass || fail "attributes: $(grep "^$name: " "$tmp/attributes.out")"
done

name=efficientnet_b0 ck="$tmp/efficientnet_b0.safetensors"
$py "$src/tests/torchvision_check.py" make "$tmp" $name >"$tmp/make.out" 2>&1 && pass \
  || fail "torchvision_check.py make: $(tail -3 "$tmp/make.out")"
sed 's/^/  /' "$tmp/make.out"
# the gradient check's copy: nine stochastic depth blocks, every one off
[[ $(grep -c '^\[drop_path\]$' "$tmp/$name-small.cfg") -eq 9 && \
   $(grep -A1 '^\[drop_path\]$' "$tmp/$name-small.cfg" | grep -c '^p = 0$') -eq 9 ]] && pass \
  || fail "$name-small.cfg: stochastic depth not off in all nine blocks: $(grep -A1 drop_path "$tmp/$name-small.cfg" | head -4)"
$py "$src/tools/import_torchvision.py" "$tmp/$name.pth" "$src/models/$name-imagenet.cfg" "$ck" \
  >"$tmp/import.out" 2>&1 && pass || fail "$name: import: $(cat "$tmp/import.out")"
"$step" "$tmp/$name-small.cfg" "$ck" "$tmp/$name-input.safetensors" "$tmp/$name-out.safetensors" 2>"$tmp/err" \
  && pass || fail "$name: torchvision_step: $(cat "$tmp/err")"
"$bin" predict --resume "$ck" --json --logits --devices 2 "$tmp/$name-0.png" "$tmp/$name-1.png" \
  >"$tmp/$name-predict.jsonl" 2>"$tmp/err" && pass || fail "$name: predict: $(cat "$tmp/err")"
$py "$src/tests/torchvision_check.py" compare "$tmp" $name >"$tmp/compare.out" 2>&1
sed 's/^/  /' "$tmp/compare.out"
grep -qx "$name: ok" "$tmp/compare.out" && pass || fail "$name: $(grep "^$name: " "$tmp/compare.out")"

# ONNX: OpenCV on the first image, the PyTorch rebuild of the graph on both
"$bin" export --resume "$ck" --onnx "$tmp/$name.onnx" 2>"$tmp/err" && pass || fail "$name: export: $(cat "$tmp/err")"
head -1 "$tmp/$name-predict.jsonl" >"$tmp/$name-predict1.jsonl"
$py "$src/tools/check_onnx.py" check "$tmp/$name.onnx" "$tmp/$name-x.npy" 1 "$tmp/$name-predict1.jsonl" \
  >"$tmp/onnx.out" 2>&1
$py "$src/tools/check_onnx.py" check "$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl" --torch \
  --no-opencv >"$tmp/onnx-torch.out" 2>&1
sed 's/^/  /' "$tmp/onnx.out" "$tmp/onnx-torch.out"
grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check (onnx, OpenCV) failed"
grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx-torch.out" && pass || fail "$name: ONNX check (PyTorch rebuild) failed"
testing_finish cli_torchvision_efficientnet
