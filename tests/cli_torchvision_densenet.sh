#!/usr/bin/env bash
# cli_torchvision_densenet.sh - torchvision 0.14's DenseNet-121, -161, -169
# and -201 (Debian's python3-torchvision, randomly initialised, made at test
# time by tests/torchvision_check.py: no pretrained weights) against
# dptrain's models/densenet*-imagenet.cfg (tools/make_imagenet_models.py,
# tools/imagenet_models_densenet.py: the dense layers' torch.cat as
# [concat]) with the same weights, as cli_torchvision.sh checks the ResNets:
# - densenet121: the import of torchvision's state_dict
#   (tools/import_torchvision.py); `dptrain predict --resume` of two
#   224x224 PNGs gives torchvision's logits within 1e-4 of the largest;
#   tests/torchvision_step at 64x64 gives the inference-mode logits, loss
#   and every parameter's gradient, and the training-mode (batch
#   statistics) logits, loss, running statistics and gradients, within
#   1e-4 of float64 torchvision's (torchvision_check.py compare); `dptrain
#   export --onnx` (Concat nodes) passes onnx's checker, and OpenCV's DNN
#   and the PyTorch rebuild of the graph give dptrain's logits within 1e-4
#   (tools/check_onnx.py);
# - densenet161, densenet169, densenet201: `dptrain inspect --model` lists
#   torchvision's state_dict, name for name in its order, shape for shape
#   (torchvision_check.py structure).
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision_densenet torch torchvision onnx cv2 PIL numpy
others=(densenet161 densenet169 densenet201)
$py "$src/tests/torchvision_check.py" structure "${others[@]}" >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
[[ $(grep -c ': ok (' "$tmp/structure.out") -eq ${#others[@]} ]] && pass \
  || fail "structure: $(grep -v ': ok (' "$tmp/structure.out")"

name=densenet121
torchvision_make_and_compare $name

# the ONNX export: onnx's checker, OpenCV and the PyTorch rebuild of the graph against predict's logits
$py "$src/tools/check_onnx.py" check "$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl" \
  >"$tmp/onnx.out" 2>&1
$py "$src/tools/check_onnx.py" check "$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl" \
  --torch --no-opencv >"$tmp/onnx-torch.out" 2>&1
sed 's/^/  /' "$tmp/onnx.out" "$tmp/onnx-torch.out"
grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check failed"
grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx-torch.out" && pass || fail "$name: ONNX check (PyTorch rebuild) failed"
testing_finish cli_torchvision_densenet
