#!/usr/bin/env bash
# cli_torchvision_regnet.sh - torchvision 0.14's RegNetX and RegNetY
# (Debian's python3-torchvision, randomly initialised, made at test time by
# tests/torchvision_check.py: no pretrained weights) against dptrain's
# models/regnet_*-imagenet.cfg (tools/make_imagenet_models.py,
# tools/imagenet_models_regnet.py) with the same weights, as
# cli_torchvision.sh checks the ResNets and MobileNets:
# - regnet_y_400mf and regnet_x_400mf, the smallest of each: the import of
#   torchvision's state_dict (tools/import_torchvision.py); `dptrain predict
#   --resume` of two 224x224 PNGs gives torchvision's logits within 1e-4 of
#   the largest; tests/torchvision_step at 64x64 gives the inference-mode
#   logits, loss and every parameter's gradient, and the training-mode
#   (batch statistics) logits, loss, running statistics and gradients,
#   within 1e-4 of float64 torchvision's (torchvision_check.py compare);
#   `dptrain export --onnx` passes onnx's checker and OpenCV's DNN gives
#   dptrain's logits within 1e-4 (tools/check_onnx.py; RegNetY: OpenCV 4.6
#   on one image, its importer refuses the squeeze-excitation's broadcast
#   Mul at batch 2, and the PyTorch rebuild of the ONNX graph at batch 2);
# - the twelve others (800MF to 32GF): `dptrain inspect --model` lists
#   torchvision's state_dict, name for name in its order, shape for shape
#   (torchvision_check.py structure).
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision_regnet torch torchvision onnx cv2 PIL numpy
others=(regnet_y_800mf regnet_y_1_6gf regnet_y_3_2gf regnet_y_8gf regnet_y_16gf regnet_y_32gf
  regnet_x_800mf regnet_x_1_6gf regnet_x_3_2gf regnet_x_8gf regnet_x_16gf regnet_x_32gf)
$py "$src/tests/torchvision_check.py" structure "${others[@]}" >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
[[ $(grep -c ': ok (' "$tmp/structure.out") -eq ${#others[@]} ]] && pass \
  || fail "structure: $(grep -v ': ok (' "$tmp/structure.out")"

names=(regnet_y_400mf regnet_x_400mf)
torchvision_make_and_compare "${names[@]}"

# the ONNX exports: onnx's checker and OpenCV against predict's logits; RegNetY's squeeze-excitation
# (a broadcast Mul) in OpenCV 4.6 on the first image, and the PyTorch rebuild of its graph on both
head -1 "$tmp/regnet_y_400mf-predict.jsonl" >"$tmp/regnet_y_400mf-predict1.jsonl"
$py "$src/tools/check_onnx.py" check "$tmp/regnet_x_400mf.onnx" "$tmp/regnet_x_400mf-x.npy" 2 \
  "$tmp/regnet_x_400mf-predict.jsonl" "$tmp/regnet_y_400mf.onnx" "$tmp/regnet_y_400mf-x.npy" 1 \
  "$tmp/regnet_y_400mf-predict1.jsonl" >"$tmp/onnx.out" 2>&1
$py "$src/tools/check_onnx.py" check "$tmp/regnet_y_400mf.onnx" "$tmp/regnet_y_400mf-x.npy" 2 \
  "$tmp/regnet_y_400mf-predict.jsonl" --torch --no-opencv >"$tmp/onnx-torch.out" 2>&1
sed 's/^/  /' "$tmp/onnx.out" "$tmp/onnx-torch.out"
for name in "${names[@]}"; do
  grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check failed"
done
grep -qxF "$tmp/regnet_y_400mf.onnx: ok" "$tmp/onnx-torch.out" && pass \
  || fail "regnet_y_400mf: ONNX check (PyTorch rebuild) failed"
testing_finish cli_torchvision_regnet
