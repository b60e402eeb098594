#!/usr/bin/env bash
# cli_torchvision_squeezenet.sh - torchvision 0.14's SqueezeNet 1.0 and 1.1
# (Debian's python3-torchvision, randomly initialised, made at test time by
# tests/torchvision_check.py: no pretrained weights) against dptrain's
# models/squeezenet1_*-imagenet.cfg (tools/make_imagenet_models.py,
# tools/imagenet_models_squeezenet.py) with the same weights, as
# cli_torchvision_regnet.sh checks the RegNets:
# - both networks: `dptrain inspect` lists torchvision's state_dict, name for
#   name, shape for shape (torchvision_check.py structure); the import of
#   torchvision's state_dict (tools/import_torchvision.py); `dptrain predict
#   --resume` of two 224x224 PNGs gives torchvision's logits within 1e-4 of
#   the largest; tests/torchvision_step (1.0 at 64x64, 1.1 at 66x66: sizes
#   where a ceil_mode max pool keeps a partial last window) gives the
#   inference- and training-mode logits, loss and every parameter's gradient
#   within 1e-4 of float64 torchvision's (dropout p = 0 on both sides;
#   torchvision_check.py compare); `dptrain export --onnx` (MaxPool with
#   ceil_mode) passes onnx's checker and OpenCV 4.6 gives dptrain's logits
#   within 1e-4 at batch 2 (tools/check_onnx.py), as does the PyTorch
#   rebuild of the graph;
# - fine-tuning SqueezeNet 1.1 with `train --init` (the imported 1000-class
#   checkpoint) --num-classes 5 --freeze-backbone on a 5-class image folder:
#   the head, the final conv classifier.1 (no linear layer), starts afresh
#   with 5 filters and is the only layer that trains (the features'
#   tensors leave the run as they came).
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision_squeezenet torch torchvision onnx cv2 PIL numpy
names=(squeezenet1_0 squeezenet1_1)
$py "$src/tests/torchvision_check.py" structure "${names[@]}" >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
[[ $(grep -c ': ok (' "$tmp/structure.out") -eq ${#names[@]} ]] && pass \
  || fail "structure: $(grep -v ': ok (' "$tmp/structure.out")"

torchvision_make_and_compare "${names[@]}"

# the ONNX exports: onnx's checker, OpenCV and the PyTorch rebuild against predict's logits
$py "$src/tools/check_onnx.py" check "$tmp/squeezenet1_0.onnx" "$tmp/squeezenet1_0-x.npy" 2 \
  "$tmp/squeezenet1_0-predict.jsonl" "$tmp/squeezenet1_1.onnx" "$tmp/squeezenet1_1-x.npy" 2 \
  "$tmp/squeezenet1_1-predict.jsonl" --torch >"$tmp/onnx.out" 2>&1
sed 's/^/  /' "$tmp/onnx.out"
for name in "${names[@]}"; do
  grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check failed"
done
grep -aq ceil_mode "$tmp/squeezenet1_1.onnx" && pass || fail "no ceil_mode attribute in the ONNX file"

# fine-tuning: a new 5-class head on the imported weights, the backbone frozen
$py "$src/tests/random_image_folder.py" "$tmp/data" 10 5 5 72x72,80x64 >/dev/null && pass \
  || fail "making the image folder"
"$bin" train --data "$tmp/data" --model "$src/models/squeezenet1_1-imagenet.cfg" --image-size 64 --num-classes 5 \
  --init "$tmp/squeezenet1_1.safetensors" --freeze-backbone --epochs 1 --batch-size 5 --lr 0.01 --devices 2 \
  --seed 1 --save "$tmp/tuned.st" >"$tmp/tune.out" 2>&1 && pass || fail "train --init: $(tail -3 "$tmp/tune.out")"
grep 'initialised afresh' "$tmp/tune.out" | sed 's/^/  /'
grep -q "classifier.1 initialised afresh: 5 outputs, the checkpoint's 1000$" "$tmp/tune.out" && pass \
  || fail "the conv head was not started afresh: $(grep -i 'init' "$tmp/tune.out" | head -3)"
$py -c '
import sys
sys.path.insert(0, sys.argv[1] + "/tests")
import numpy as np
from torchvision_check import read_safetensors
before, after = read_safetensors(sys.argv[2]), read_safetensors(sys.argv[3])
head = after["classifier.1.weight"].shape
same = all(np.array_equal(before[k], after[k]) for k in before if k.startswith("features."))
moved = not np.array_equal(after["classifier.1.bias"], np.zeros(5, np.float32))
print(f"classifier.1.weight {list(head)}; features unchanged: {same}; head trained: {moved}")
sys.exit(0 if head == (5, 512, 1, 1) and same and moved else 1)
' "$src" "$tmp/squeezenet1_1.safetensors" "$tmp/tuned.st" >"$tmp/tuned.check" 2>&1 && pass \
  || fail "the tuned checkpoint: $(cat "$tmp/tuned.check")"
sed 's/^/  /' "$tmp/tuned.check"
testing_finish cli_torchvision_squeezenet
