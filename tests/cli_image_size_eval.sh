#!/usr/bin/env bash
# cli_image_size_eval.sh - `eval --image-size` and `predict --image-size`:
# a checkpoint tested at another input size than its training's (FixRes;
# torchvision's --val-crop-size, timm's validate.py --img-size), on
# models/resnet18-imagenet.cfg trained 1 epoch at 32 x 32 (3 classes) on a
# folder of random RGB images of several shapes:
# - eval --image-size 32 (its own size) gives the plain eval's line, the
#   size said after it; at 48 the line ends ", input 48x48 (resize 55)"
#   (train's 256/224 rule), with --resize 64 "(resize 64)", and 1 and 2
#   devices give the same line; predict --image-size 32, the plain
#   predict's lines;
# - the oracle: torchvision's resnet18 with the checkpoint's tensors, the
#   images through Resize(S) + CenterCrop (PIL; one of the input's size as
#   it is, as dptrain's evaluation takes it), gives predict
#   --image-size 48 and 40x48's logits within 1e-4 of the largest, and as
#   many right answers as eval at 48, at 48 with --resize 64 and at 32;
# - refused in one line, exit 1, nothing on stdout: a LeNet checkpoint at
#   40 (its fc1's inputs would change: the layer and both shapes named),
#   by eval and predict; IDX data at another size than its own 28 x 28
#   (a global-pooling network, which eval at 28 and predict of a PNG at 40
#   take); a value that is not N or HxW.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

# 3 classes of random RGB images of several shapes: 8 training and 4 test images each
"$py" "$src/tests/random_image_folder.py" "$tmp/data" 24 12 3 40x48,56x40,36x36,64x50 && pass \
  || fail "making the image folder"
ck=$tmp/r18.st
"$bin" train --data "$tmp/data" --model "$src/models/resnet18-imagenet.cfg" --image-size 32 --num-classes 3 \
  --epochs 1 --batch-size 8 --lr 0.01 --devices 2 --seed 1 --save "$ck" --quiet >"$tmp/train.out" 2>&1 && pass \
  || fail "training: $(tail -2 "$tmp/train.out")"

# eval_line NAME ARGS...: eval's first line (stdout) in $tmp/NAME.out; passes when it exits 0
eval_line() {
  local name=$1
  shift
  "$bin" eval --resume "$ck" --data "$tmp/data" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" && pass \
    || fail "eval $*: $(cat "$tmp/$name.err")"
  head -1 "$tmp/$name.out"
}
plain=$(eval_line plain --devices 2)
at32=$(eval_line at32 --devices 2 --image-size 32)
[[ $plain == "test acc: "* && $at32 == "$plain, input 32x32 (resize 37)" ]] && pass \
  || fail "--image-size 32 is not the plain eval: '$at32' against '$plain'"
at48=$(eval_line at48 --devices 1 --image-size 48)
at48_2=$(eval_line at48_2 --devices 2 --image-size 48)
[[ $at48 == "test acc: "*", input 48x48 (resize 55)" ]] && pass || fail "--image-size 48: '$at48'"
[[ $at48 == "$at48_2" ]] && pass || fail "--image-size 48 on 1 and 2 devices: '$at48' against '$at48_2'"
resize64=$(eval_line resize64 --devices 2 --image-size 48 --resize 64)
[[ $resize64 == "test acc: "*", input 48x48 (resize 64)" ]] && pass || fail "--image-size 48 --resize 64: '$resize64'"
correct() { sed -E 's/^test acc: [0-9.]+ \(([0-9]+)\/.*/\1/' <<<"$1"; }

# predict at 48 and at 40x48 (H x W): the logits, and the line saying the size
for size in 48 40x48; do
  "$bin" predict --resume "$ck" --image-size $size --json --logits --devices 2 "$tmp/data/test" \
    >"$tmp/predict-$size.jsonl" 2>"$tmp/predict-$size.err" && pass \
    || fail "predict --image-size $size: $(cat "$tmp/predict-$size.err")"
done
[[ $(cat "$tmp/predict-48.err") == "dptrain: predict: input 48x48 (resize 55)" ]] && pass \
  || fail "predict --image-size 48's line: $(cat "$tmp/predict-48.err")"
# at its own size: the plain predict's lines
"$bin" predict --resume "$ck" --json --logits "$tmp/data/test" >"$tmp/predict.jsonl" 2>&1 \
  && "$bin" predict --resume "$ck" --image-size 32 --json --logits "$tmp/data/test" >"$tmp/predict-32.jsonl" \
  2>/dev/null && [[ -s "$tmp/predict.jsonl" ]] && cmp -s "$tmp/predict.jsonl" "$tmp/predict-32.jsonl" && pass \
  || fail "predict --image-size 32 is not the plain predict"

# the oracle: torchvision's resnet18 with the checkpoint's tensors
"$py" - "$ck" "$tmp" "$(correct "$at48")" "$(correct "$resize64")" "$(correct "$plain")" <<'PY' && pass \
  || fail "dptrain at another size is not torchvision's"
import glob, json, os, struct, sys
import numpy as np
import torch, torchvision
from PIL import Image
from torchvision import transforms as T
ck, tmp = sys.argv[1], sys.argv[2]
raw = open(ck, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
state = {}
for name, e in header.items():
    if name == "__metadata__" or "." not in name or name.startswith(("optim.", "ema.")):
        continue
    a, b = e["data_offsets"]
    state[name] = torch.from_numpy(np.frombuffer(raw[8 + n + a:8 + n + b], "<f4").reshape(e["shape"]).copy())
assert not header["__metadata__"].get("data.normalize"), "the run had no --normalize"
net = torchvision.models.resnet18(num_classes=3)
missing, unexpected = net.load_state_dict(state, strict=False)
assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
net.eval()
def logits(paths, resize, crop):
    # dptrain's evaluation takes an image of the input's size as it is (docs/data.md), torchvision's Resize
    # would resample it: those go through ToTensor alone
    h, w = crop if isinstance(crop, tuple) else (crop, crop)
    t = T.Compose([T.Resize(resize), T.CenterCrop(crop), T.ToTensor()])
    def x(p):
        image = Image.open(p).convert("RGB")
        return T.ToTensor()(image) if image.size == (w, h) else t(image)
    with torch.no_grad():
        return net(torch.stack([x(p) for p in paths])).double()
for size, crop in (("48", 48), ("40x48", (40, 48))):
    got = [json.loads(l) for l in open(f"{tmp}/predict-{size}.jsonl")]
    want = logits([g["image"] for g in got], 55, crop)
    diff = float((torch.tensor([g["logits"] for g in got], dtype=torch.float64) - want).abs().max())
    print(f"  predict --image-size {size}: {len(got)} images, max |diff| {diff:.3g} (max |logit| {float(want.abs().max()):.3g})")
    assert len(got) == 12 and diff <= 1e-4 * float(want.abs().max()), diff
paths = sorted(glob.glob(f"{tmp}/data/test/c*/*.png"))
labels = torch.tensor([int(os.path.basename(os.path.dirname(p))[1:]) for p in paths])
for label, resize, crop, eval_correct in (("48", 55, 48, sys.argv[3]), ("48 --resize 64", 64, 48, sys.argv[4]),
                                           ("32 (plain)", 37, 32, sys.argv[5])):
    right = int((logits(paths, resize, crop).argmax(1) == labels).sum())
    print(f"  eval at {label}: {eval_correct} right, torchvision {right}")
    assert str(right) == eval_correct, (label, right, eval_correct)
PY

# refused: one line on stderr, exit 1, nothing on stdout
refused() {
  local label=$1 part=$2
  shift 2
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -eq 1 && $(wc -l <"$tmp/err") -eq 1 && ! -s "$tmp/out" ]] && grep -qF -- "$part" "$tmp/err" && pass \
    || fail "$label: status $status, stdout $(head -c 200 "$tmp/out"), stderr $(head -c 400 "$tmp/err") (expected one line with '$part')"
}
small_data "$tmp/fm" 64 16
"$bin" train --data "$tmp/fm" --model lenet --epochs 1 --batch-size 32 --save "$tmp/lenet.st" --quiet >/dev/null 2>&1 \
  && pass || fail "training LeNet"
lenet_says="--image-size 40: model lenet's layer fc1 depends on the input size: fc1.weight would be [128, 2450] at 40 x \
40, the checkpoint's is [128, 800]"
refused "LeNet at 40" "eval: $lenet_says" eval --resume "$tmp/lenet.st" --data "$tmp/fm" --image-size 40
refused "LeNet at 40 (predict)" "predict: $lenet_says" predict --resume "$tmp/lenet.st" --image-size 40 \
  "$tmp/data/test/c0/0.png"
refused "not a size" "eval: --image-size: '4x' is not N or HxW" eval --resume "$ck" --data "$tmp/data" --image-size 4x
# a network of global pooling on IDX data: its own size only
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[conv]\nname = conv\nfilters = 4\nsize = 3\nactivation = relu\n%b' \
  '[global_avgpool]\n[flatten]\n[linear]\nname = fc\nout = 10\n' >"$tmp/pool.cfg"
"$bin" train --data "$tmp/fm" --model "$tmp/pool.cfg" --epochs 1 --batch-size 32 --save "$tmp/pool.st" --quiet \
  >/dev/null 2>&1 && pass || fail "training the pooling network"
refused "IDX data at 40" "eval: --image-size 40: the data in $tmp/fm has images of 28 x 28, one size for all; only an \
image folder's are resized to another" eval --resume "$tmp/pool.st" --data "$tmp/fm" --image-size 40
own=$("$bin" eval --resume "$tmp/pool.st" --data "$tmp/fm" | head -1)
at28=$("$bin" eval --resume "$tmp/pool.st" --data "$tmp/fm" --image-size 28 | head -1)
[[ $own == "test acc: "* && $at28 == "$own, input 28x28" ]] && pass || fail "IDX data at 28: '$at28' against '$own'"
"$bin" predict --resume "$tmp/pool.st" --image-size 40 --top 1 "$tmp/data/test/c0/0.png" >"$tmp/out" 2>"$tmp/err" \
  && [[ $(cat "$tmp/err") == "dptrain: predict: input 40x40 (each image resized whole)" ]] \
  && grep -q "^$tmp/data/test/c0/0.png: " "$tmp/out" && pass \
  || fail "predict of a PNG at 40 with the pooling network: $(cat "$tmp/out" "$tmp/err")"
testing_finish cli_image_size_eval
