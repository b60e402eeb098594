#!/usr/bin/env bash
# cli_torchvision.sh - torchvision 0.14's resnet18, resnet34, resnet50,
# resnext50_32x4d, mobilenet_v2, mobilenet_v3_large and mobilenet_v3_small
# (Debian's python3-torchvision, randomly
# initialised, made at test time by tests/torchvision_check.py: no
# pretrained weights) against dptrain's models/*-imagenet.cfg with the same
# weights:
# - tools/import_torchvision.py turns each state_dict (torch.save) into a
#   weights-only checkpoint, which eval-style loading accepts;
# - `dptrain predict --resume` of two 224x224 PNGs (the checkpoint's
#   normalisation applied) gives torchvision's logits within 1e-4 of the
#   largest, for all seven; of a 320x240 image, ResNet-18's after
#   torchvision's evaluation transform (Resize(256), CenterCrop(224): the
#   import's data.transform); eval of them without --data asks for a
#   folder of test images in one line;
# - tests/torchvision_step (the imported checkpoint; ResNet-18, ResNet-50,
#   ResNeXt-50 and both MobileNetV3s at 64x64, MobileNetV2 at 128x128) gives the
#   inference-mode logits, loss
#   and every parameter's gradient, the training-mode (batch statistics)
#   logits, loss and running statistics, and ResNet-18's training-mode
#   gradients, within 1e-4 of float64 torchvision's; the training-mode
#   gradients of ResNet-50, ResNeXt-50, MobileNetV2 and V3, which float32
#   cannot give within 1e-4 at batch 2 (PyTorch's own are up to 3e-2 away
#   as a whole), within about 15x PyTorch float32's distance as a whole
#   (torchvision_check.py says why);
# - the deeper and wider networks of the same blocks (resnet101, resnet152,
#   resnext101_32x8d, wide_resnet50_2, wide_resnet101_2): `dptrain inspect
#   --model` lists torchvision's state_dict, name for name in its order,
#   shape for shape (torchvision_check.py structure);
# - `dptrain export --onnx` of each passes onnx's checker and OpenCV's DNN
#   gives dptrain's logits within 1e-4 (tools/check_onnx.py, the same
#   normalised images; MobileNetV3: OpenCV 4.6 on one image, its importer
#   refuses the squeeze-excitation's broadcast Mul at batch 2, and the
#   PyTorch rebuild of the ONNX graph);
# - the import refuses a state_dict with a tensor missing, an extra one or
#   one of another shape: one line naming it, exit 1, nothing written; and
#   `train --resume` refuses a weights-only checkpoint in one line (also on
#   data of fewer classes than its outputs: no warning before it), naming
#   --init;
# - `train --init` of an imported file without --normalize applies the
#   file's normalisation (one line says so), the same run as giving it, and
#   the same values spelled otherwise ("0.3", dptrain's 0.300000012) warn
#   of nothing.
source "$(dirname "$0")/testing.sh"
source "$(dirname "$0")/torchvision_testing.sh"
torchvision_needs cli_torchvision torch torchvision onnx cv2 PIL numpy
names=(resnet18 resnet34 resnet50 resnext50_32x4d mobilenet_v2 mobilenet_v3_large mobilenet_v3_small)
$py "$src/tests/torchvision_check.py" structure resnet101 resnet152 resnext101_32x8d wide_resnet50_2 wide_resnet101_2 \
  >"$tmp/structure.out" 2>&1
sed 's/^/  /' "$tmp/structure.out"
[[ $(grep -c ': ok (' "$tmp/structure.out") -eq 5 ]] && pass || fail "structure: $(grep -v ': ok (' "$tmp/structure.out")"
torchvision_make_and_compare "${names[@]}"
checks=() checks_v3=() checks_v3_torch=()
for name in "${names[@]}"; do
  if [[ $name == mobilenet_v3_* ]]; then # OpenCV 4.6 reads its squeeze-excitation Mul at batch 1 only
    head -1 "$tmp/$name-predict.jsonl" >"$tmp/$name-predict1.jsonl"
    checks_v3+=("$tmp/$name.onnx" "$tmp/$name-x.npy" 1 "$tmp/$name-predict1.jsonl")
    checks_v3_torch+=("$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl")
  else
    checks+=("$tmp/$name.onnx" "$tmp/$name-x.npy" 2 "$tmp/$name-predict.jsonl")
  fi
done
# the ONNX exports: onnx's checker and OpenCV against predict's logits (cli_export.sh also
# rebuilds its models in PyTorch from the files)
$py "$src/tools/check_onnx.py" check "${checks[@]}" >"$tmp/onnx.out" 2>&1
# MobileNetV3: OpenCV on the first image; the PyTorch rebuild of the ONNX graph on both
$py "$src/tools/check_onnx.py" check "${checks_v3[@]}" >>"$tmp/onnx.out" 2>&1
$py "$src/tools/check_onnx.py" check "${checks_v3_torch[@]}" --torch --no-opencv >"$tmp/onnx-torch.out" 2>&1
sed 's/^/  /' "$tmp/onnx-torch.out"
for name in mobilenet_v3_large mobilenet_v3_small; do
  grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx-torch.out" && pass || fail "$name: ONNX check (PyTorch rebuild) failed"
done
sed 's/^/  /' "$tmp/onnx.out"
for name in "${names[@]}"; do
  grep -qxF "$tmp/$name.onnx: ok" "$tmp/onnx.out" && pass || fail "$name: ONNX check failed"
done

# a photo of another shape: predict applies the evaluation torchvision's weights are measured with
# (transforms.Resize(256), CenterCrop(224), ToTensor, Normalize: the import's data.transform 'resize 256')
$py - "$tmp/photo.png" <<'PY'
import sys
import numpy as np
from PIL import Image
y, x = np.mgrid[0:240, 0:320]
rgb = np.stack([(x * 255 // 319), (y * 255 // 239), ((x + y) * 7 % 256)], 2).astype(np.uint8)
Image.fromarray(rgb).save(sys.argv[1])
PY
"$bin" predict --resume "$tmp/resnet18.safetensors" --json --logits --top 1 "$tmp/photo.png" >"$tmp/photo.jsonl" 2>&1
$py - "$tmp/resnet18.pth" "$tmp/photo.png" "$tmp/photo.jsonl" <<'PY' && pass || fail "predict of a 320x240 photo with imported ResNet-18 weights is not torchvision's evaluation"
import json, sys
import torch, torchvision
from PIL import Image
from torchvision import transforms as T
net = torchvision.models.resnet18()
net.load_state_dict(torch.load(sys.argv[1]))
net.eval()
x = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])(Image.open(sys.argv[2]).convert("RGB"))
with torch.no_grad():
    want = net(x[None])[0].double()
got = torch.tensor(json.loads(open(sys.argv[3]).read())["logits"], dtype=torch.float64)
diff = float((got - want).abs().max())
print(f"  imported resnet18 on a 320x240 photo: max |diff| {diff:.3g} (max |logit| {float(want.abs().max()):.3g})")
assert diff <= 1e-4 * float(want.abs().max()), diff
PY

# eval of imported weights without --data: one line asking for a folder of test images
out=$("$bin" eval --resume "$tmp/resnet18.safetensors" 2>&1)
[[ $? -eq 1 && $(wc -l <<<"$out") -eq 1 && $out == "dptrain: eval: $tmp/resnet18.safetensors holds imported weights, \
with no data of its own: give a folder of test images with --data DIR (DIR/test/CLASS/...; classes: tench, "* ]] \
  && pass || fail "eval of imported weights without --data: $out"

# predict names ImageNet's classes (the import's data.classes)
"$bin" predict --resume "$tmp/resnet18.safetensors" --top 1 "$tmp/resnet18-0.png" >"$tmp/top.out" 2>&1
grep -qE "resnet18-0.png: [A-Za-z]" "$tmp/top.out" && pass || fail "predict with class names: $(cat "$tmp/top.out")"

# refusals of the import: one line, exit 1, nothing written
$py - "$tmp" <<'EOF'
import sys, torch
d = sys.argv[1]
sd = torch.load(f"{d}/resnet18.pth")
missing = dict(sd); del missing["layer4.1.bn2.running_var"]
torch.save(missing, f"{d}/missing.pth")
extra = dict(sd); extra["head.weight"] = torch.zeros(3, 3)
torch.save(extra, f"{d}/extra.pth")
shape = dict(sd); shape["fc.weight"] = torch.zeros(10, 512); shape["fc.bias"] = torch.zeros(10)
torch.save(shape, f"{d}/shape.pth")
torch.save({"not": "a state_dict"}, f"{d}/junk.pth")
torch.save({"state_dict": sd, "epoch": 3}, f"{d}/wrapped.pth")  # a training script's checkpoint
torch.save(torch.nn.Linear(2, 2), f"{d}/whole.pth")  # a whole model, pickled
EOF
refused() {
  local label=$1 part=$2 file=$3
  rm -f "$tmp/out.safetensors"
  $py "$src/tools/import_torchvision.py" "$tmp/$file" "$src/models/resnet18-imagenet.cfg" "$tmp/out.safetensors" \
    >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 && ! -s "$tmp/out" ]] && grep -qF -- "$part" "$tmp/err" && pass \
    || fail "$label: status $status, stderr: $(head -c 300 "$tmp/err") (expected one line with '$part')"
  [[ ! -e "$tmp/out.safetensors" && -z $(find "$tmp" -maxdepth 1 -name 'out.safetensors.tmp.*') ]] && pass \
    || fail "$label: a file was written"
}
cfg=$src/models/resnet18-imagenet.cfg
refused "a missing tensor" "has no tensor 'layer4.1.bn2.running_var', which $cfg needs" missing.pth
refused "an extra tensor" "tensor 'head.weight' is not a parameter of $cfg" extra.pth
refused "another shape" "tensor 'fc.weight' has shape [10, 512], $cfg expects [1000, 512]" shape.pth
refused "not a state_dict" "not a state_dict" junk.pth
refused "a state_dict inside a checkpoint" "holds one under the key 'state_dict' (save that: torch.save(ck['state_dict'], FILE))" wrapped.pth
refused "a whole model" "holds a pickled torch.nn.modules.linear.Linear, not only tensors" whole.pth

# a weights-only checkpoint has nothing to resume
small_data "$tmp/fm" 64 16
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[flatten]\n[linear]\nname = fc\nout = 10\n' >"$tmp/lin.cfg"
$py - "$tmp" <<'EOF'
import sys, torch
torch.save({"fc.weight": torch.zeros(10, 784), "fc.bias": torch.zeros(10)}, f"{sys.argv[1]}/lin.pth")
EOF
$py "$src/tools/import_torchvision.py" "$tmp/lin.pth" "$tmp/lin.cfg" "$tmp/lin.safetensors" --normalize none \
  >/dev/null && pass || fail "import of a 10-class linear model"
# OUT in a folder that is not there: one line naming it, exit 1 (not a traceback)
$py "$src/tools/import_torchvision.py" "$tmp/lin.pth" "$tmp/lin.cfg" "$tmp/no-such-dir/lin.safetensors" \
  --normalize none >"$tmp/out" 2>"$tmp/err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 && ! -s "$tmp/out" ]] \
  && grep -qF "$tmp/no-such-dir/lin.safetensors: cannot write in $tmp/no-such-dir (No such file or directory)" "$tmp/err" \
  && pass || fail "import into a missing folder: status $status, stderr: $(head -c 300 "$tmp/err")"
"$bin" train --data "$tmp/fm" --model "$tmp/lin.cfg" --epochs 1 --batch-size 16 --resume "$tmp/lin.safetensors" \
  --quiet 2>"$tmp/err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "weights-only checkpoint" "$tmp/err" && pass \
  || fail "train --resume of a weights-only checkpoint: status $status, $(cat "$tmp/err")"
# the same on data of fewer classes than its outputs: the refusal alone, not a warning about the outputs before it
$py "$src/tools/idx_to_image_folder.py" "$tmp/fm" "$tmp/three" --format png --classes 0-2 --limit-train 12 \
  --limit-test 3 >/dev/null && pass || fail "making a 3-class PNG folder"
"$bin" train --data "$tmp/three" --resume "$tmp/lin.safetensors" --batch-size 4 --quiet --save "$tmp/none.st" \
  2>"$tmp/err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 && ! -e "$tmp/none.st" ]] \
  && grep -qF "weights-only checkpoint (parameters and batch-norm statistics, e.g. from tools/import_torchvision.py): \
it has no optimizer state or training position to resume; start a new run from its weights instead: --init \
$tmp/lin.safetensors" "$tmp/err" && pass \
  || fail "train --resume of a weights-only checkpoint on 3 classes: status $status, $(cat "$tmp/err")"
"$bin" eval --resume "$tmp/lin.safetensors" --data "$tmp/fm" >"$tmp/eval.out" 2>&1 \
  && grep -q "test acc" "$tmp/eval.out" && pass || fail "eval of a weights-only checkpoint: $(cat "$tmp/eval.out")"

# fine-tuning imported weights: without --normalize the file's normalisation applies (said on a line of its
# own), with the same values given the run is the same and nothing is warned about ("0.3" is the float
# 0.300000012 dptrain writes)
$py "$src/tools/import_torchvision.py" "$tmp/lin.pth" "$tmp/lin.cfg" "$tmp/lin-n.safetensors" --normalize 0.3,0.2 \
  >/dev/null && pass || fail "import with --normalize 0.3,0.2"
tune=(train --data "$tmp/fm" --model "$tmp/lin.cfg" --epochs 1 --batch-size 16 --devices 2 --init "$tmp/lin-n.safetensors")
"$bin" "${tune[@]}" --save "$tmp/tuned.st" >"$tmp/tuned.out" 2>&1 && pass || fail "--init: $(tail -2 "$tmp/tuned.out")"
grep -qx "inputs normalised as $tmp/lin-n.safetensors's were: --normalize 0.3,0.2" "$tmp/tuned.out" && pass \
  || fail "no line saying the file's normalisation applies: $(head -4 "$tmp/tuned.out")"
# the start line says the weights were imported (not "0 epochs of" a model dptrain never trained)
grep -qx "initialised from $tmp/lin-n.safetensors (parameters and batch norm statistics of $tmp/lin.cfg, imported weights)" \
  "$tmp/tuned.out" && pass || fail "the --init line of imported weights: $(grep initialised "$tmp/tuned.out")"
"$bin" "${tune[@]}" --normalize 0.3,0.2 --save "$tmp/tuned-given.st" >"$tmp/given.out" 2>&1 && pass \
  || fail "--init --normalize: $(tail -2 "$tmp/given.out")"
! grep -q "warning" "$tmp/tuned.out" "$tmp/given.out" && pass || fail "warned: $(grep warning "$tmp"/*.out)"
same_tensors "$tmp/tuned.st" "$tmp/tuned-given.st" && pass || fail "the file's normalisation and the same given differ"
"$bin" inspect "$tmp/tuned.st" | grep -q "^  data.normalize = 0.300000012,0.200000003$" && pass \
  || fail "data.normalize of the tuned run: $("$bin" inspect "$tmp/tuned.st" | grep normalize)"
# --transform "resize S, bicubic" (torchvision's EfficientNet weights evaluate after Pillow's BICUBIC resize):
# recorded as the checkpoint's data.transform; predict with it = predict of the bilinear import told
# --interpolation bicubic, and not the bilinear one
$py - "$tmp" <<'EOF'
import sys, torch
import numpy as np
from PIL import Image
torch.manual_seed(0)
torch.save({"fc.weight": torch.randn(10, 784), "fc.bias": torch.zeros(10)}, f"{sys.argv[1]}/lin-r.pth")
Image.fromarray(np.random.default_rng(0).integers(0, 256, (37, 50), dtype=np.uint8)).save(f"{sys.argv[1]}/gray.png")
EOF
for filter in bilinear bicubic; do
  $py "$src/tools/import_torchvision.py" "$tmp/lin-r.pth" "$tmp/lin.cfg" "$tmp/lin-$filter.safetensors" --normalize none \
    --transform "resize 40, $filter" >/dev/null && pass || fail "import with --transform 'resize 40, $filter'"
done
[[ $(meta_value "$tmp/lin-bicubic.safetensors" data.transform) == "resize 40, bicubic" &&
   $(meta_value "$tmp/lin-bilinear.safetensors" data.transform) == "resize 40" ]] && pass \
  || fail "data.transform: $(meta_value "$tmp/lin-bicubic.safetensors" data.transform)"
logits() { "$bin" predict --resume "$@" --json --logits --devices 1 "$tmp/gray.png" 2>/dev/null | sed 's/.*"logits"//'; }
bicubic=$(logits "$tmp/lin-bicubic.safetensors")
[[ -n $bicubic && $bicubic == "$(logits "$tmp/lin-bilinear.safetensors" --interpolation bicubic)" &&
   $bicubic != "$(logits "$tmp/lin-bilinear.safetensors")" ]] && pass \
  || fail "predict of the bicubic import: not the bilinear import's with --interpolation bicubic, or the same as bilinear"
$py "$src/tools/import_torchvision.py" "$tmp/lin-r.pth" "$tmp/lin.cfg" "$tmp/lin-x.safetensors" --normalize none \
  --transform "resize 40, lanczos" >/dev/null 2>"$tmp/err"
[[ $? -eq 1 && ! -e "$tmp/lin-x.safetensors" ]] && grep -qF -- "--transform resize 40, lanczos: the filter 'lanczos' is not bicubic or bilinear" "$tmp/err" \
  && pass || fail "--transform with another filter: $(cat "$tmp/err")"
testing_finish cli_torchvision
