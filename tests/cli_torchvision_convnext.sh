#!/usr/bin/env bash
# cli_torchvision_convnext.sh - torchvision 0.14's ConvNeXt (Debian's
# python3-torchvision, randomly initialised by tests/torchvision_check.py at
# test time: no pretrained weights) against models/convnext_*-imagenet.cfg:
# - convnext_small, convnext_base and convnext_large: `dptrain inspect
#   --model` lists torchvision's state_dict, name for name in its order,
#   shape for shape (torchvision_check.py structure; too slow to run here);
# - convnext_tiny with the same weights (layer norms and layer scales
#   random: a layer scale of 1e-6 would hide every block):
#   tools/import_torchvision.py turns its state_dict into a weights-only
#   checkpoint; `dptrain predict --resume` of two 224x224 PNGs gives
#   torchvision's logits within 1e-4 of the largest; tests/torchvision_step
#   at 64x64 gives the inference-mode and the training-mode logits, loss
#   and every parameter's gradient within 1e-4 of float64 torchvision's
#   (stochastic depth p = 0 on both sides: its masks are dptrain's own,
#   test_ops_properties and test_graph check them);
# - `dptrain export --onnx` of it passes onnx's checker and the PyTorch
#   rebuild of the graph gives predict's logits within 1e-4
#   (tools/check_onnx.py --torch). OpenCV 4.6 is not asked: its importer
#   refuses the layer norm's broadcast Div ((N, C, H, W) by (N, 1, H, W)).
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision_convnext torch torchvision onnx PIL numpy
$py "$src/tests/torchvision_check.py" structure convnext_small convnext_base convnext_large >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
[[ $(grep -c ': ok (' "$tmp/structure.out") -eq 3 ]] && pass || fail "structure: $(grep -v ': ok (' "$tmp/structure.out")"

name=convnext_tiny
$py "$src/tests/torchvision_check.py" make "$tmp" $name >"$tmp/make.out" 2>&1 && pass \
  || fail "torchvision_check.py make: $(tail -3 "$tmp/make.out")"
sed 's/^/  /' "$tmp/make.out"
ck="$tmp/$name.safetensors"
$py "$src/tools/import_torchvision.py" "$tmp/$name.pth" "$src/models/$name-imagenet.cfg" "$ck" >"$tmp/import.out" 2>&1 \
  && pass || fail "$name: import: $(cat "$tmp/import.out")"
"$step" "$tmp/$name-small.cfg" "$ck" "$tmp/$name-input.safetensors" "$tmp/$name-out.safetensors" 2>"$tmp/err" \
  && pass || fail "$name: torchvision_step: $(cat "$tmp/err")"
"$bin" predict --resume "$ck" --json --logits --devices 2 "$tmp/$name-0.png" "$tmp/$name-1.png" \
  >"$tmp/$name-predict.jsonl" 2>"$tmp/err" && pass || fail "$name: predict: $(cat "$tmp/err")"
$py "$src/tests/torchvision_check.py" compare "$tmp" $name >"$tmp/compare.out" 2>&1
sed 's/^/  /' "$tmp/compare.out"
grep -qx "$name: ok" "$tmp/compare.out" && pass || fail "$name: $(grep "^$name: " "$tmp/compare.out")"
# the stochastic depth the reference turned off is in the file: 0 for the first block, 0.1 for the last
[[ $(grep -c '^\[drop_path\]$' "$src/models/$name-imagenet.cfg") -eq 18 ]] \
  && grep -q '^p = 0.1$' "$src/models/$name-imagenet.cfg" && pass || fail "$name: the drop_path blocks are not torchvision's"

"$bin" export --resume "$ck" --onnx "$tmp/$name.onnx" 2>"$tmp/err" && pass || fail "$name: export: $(cat "$tmp/err")"
$py "$src/tools/check_onnx.py" check "$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl" --torch \
  --no-opencv >"$tmp/onnx.out" 2>&1
sed 's/^/  /' "$tmp/onnx.out"
grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check (PyTorch rebuild) failed"
testing_finish cli_torchvision_convnext
