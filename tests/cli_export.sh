#!/usr/bin/env bash
# cli_export.sh - `dptrain export --onnx`, checked by ONNX tools that no one
# here wrote (tools/check_onnx.py): for lenet, lenet-paddle, alexnet
# (models/alexnet.cfg), resnet18 (models/resnet18.cfg), tests/models/
# tiny_resnet.cfg, tests/models/every_layer.cfg (every layer kind of the
# model files) and tests/models/tiny_mobilenet.cfg (relu6, exported as
# Relu(x) - Relu(x - 6); depthwise convolutions), each trained for one epoch on a 256-image subset (128 for
# AlexNet and ResNet-18) of
# Fashion-MNIST (batch norm gets trained running statistics) and exported
# (under the sanitizers only the three small ones, see below):
# - python3-onnx 1.12: check_model(full_check=True), strict shape inference
#   gives (batch, 10) with a symbolic batch; batch norm's running statistics
#   in the file are the trained ones (not 0 / 1);
# - OpenCV 4.6's cv2.dnn.readNetFromONNX, forward on the 256 test images
#   (and on one: the batch is dynamic), and PyTorch rebuilding the network
#   from the file's nodes and weights: logits agree with dptrain's own
#   (`dptrain predict --json --logits` on the same images written as PNGs)
#   to 1e-4 relative, and the predicted classes are the same;
# - docs/inference.md's Python program (bilinear and bicubic models), which makes images into the input
#   from the file's metadata_props (transform, normalize, classes), prints
#   predict's lines (top class, probabilities to 2e-4) for a normalised
#   model of an image folder and for tiny_resnet, on JPEGs, PNGs, an EXIF-rotated,
#   a gray, a colour, a tiny and an input-sized image;
# - the export is deterministic (same bytes twice) and atomic: a failed
#   export (missing checkpoint, another model's checkpoint, a directory that
#   does not exist, a directory as --onnx) is one line, exit 1, and leaves an existing file as it
#   was, with no temporary file behind.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
check="$src/tools/check_onnx.py"
# (found, not imported: the one check below imports them, and fails the models if one is broken)
if ! $py -c 'import importlib.util as u, sys; m = [n for n in sys.argv[1:] if not u.find_spec(n)]; sys.exit("missing: " + " ".join(m) if m else 0)' \
     onnx cv2 torch numpy 2>"$tmp/import.err"; then
  fail "python3-onnx, python3-opencv, python3-torch and python3-numpy are needed (scripts/setup.sh test): $(tail -1 "$tmp/import.err")"
  testing_finish cli_export
  exit
fi
mkdir -p "$tmp/data" "$tmp/png" "$tmp/train-data"
$py "$check" subset "$data" 256 "$tmp/data"
# the training runs evaluate 16 test images (a test accuracy nothing here reads), the checks use all 256
$py "$check" subset "$tmp/data" 256 "$tmp/train-data" 16
$py "$check" pngs "$tmp/data/t10k-images-idx3-ubyte" 256 "$tmp/png"

models=(lenet lenet-paddle "$src/models/alexnet.cfg" "$src/models/resnet18.cfg"
        "$src/tests/models/tiny_resnet.cfg" "$src/tests/models/every_layer.cfg" "$src/tests/models/tiny_mobilenet.cfg")
# Under the sanitizers (scripts/sanitize.sh) training AlexNet and ResNet-18 takes
# minutes: there the writer runs on the small models, which hold every layer kind.
cache="$(dirname "$bin")/CMakeCache.txt"
if [[ -f "$cache" ]] && grep -q '^CMAKE_C_FLAGS:STRING=.*-fsanitize' "$cache"; then
  models=(lenet "$src/tests/models/tiny_resnet.cfg" "$src/tests/models/every_layer.cfg"
          "$src/tests/models/tiny_mobilenet.cfg")
  echo "sanitizer build: checking lenet, tiny_resnet, every_layer and tiny_mobilenet only"
fi
checks=() checked=() # the check's arguments (MODEL.onnx IDX COUNT LOGITS, each model) and the models' names
for model in "${models[@]}"; do
  name=$(basename "$model" .cfg)
  ck="$tmp/$name.safetensors" onnx="$tmp/$name.onnx"
  # the big two train on 128 images (2 steps) and are checked on 64, to keep the test short
  limit=256 count=256
  [[ $name == alexnet || $name == resnet18 ]] && limit=128 count=64
  if ! "$bin" train --data "$tmp/train-data" --model "$model" --epochs 1 --batch-size 64 --limit $limit --optimizer adam \
       --lr 0.002 --devices 2 --save "$ck" --quiet >"$tmp/train.out" 2>&1; then
    fail "$name: training failed: $(tail -2 "$tmp/train.out")"; continue
  fi
  if ! "$bin" export --resume "$ck" --onnx "$onnx" 2>"$tmp/export.err"; then
    fail "$name: export failed: $(cat "$tmp/export.err")"; continue
  fi
  [[ ! -s "$tmp/export.err" ]] && pass || fail "$name: export wrote to stderr: $(cat "$tmp/export.err")"
  pngs=("$tmp"/png/*.png)
  "$bin" predict --resume "$ck" --json --logits --devices 2 "${pngs[@]:0:count}" >"$tmp/$name.jsonl" \
    && [[ $(wc -l <"$tmp/$name.jsonl") -eq $count ]] && pass || fail "$name: predict --json --logits"
  checks+=("$onnx" "$tmp/data/t10k-images-idx3-ubyte" $count "$tmp/$name.jsonl") checked+=("$name")
done
# every export checked by one Python process (importing onnx, OpenCV and PyTorch once); each model's
# lines end with "MODEL.onnx: ok" or "MODEL.onnx: FAILED: why"
if [[ ${#checked[@]} -gt 0 ]]; then
  $py "$check" check "${checks[@]}" --torch >"$tmp/check.out" 2>&1
  sed 's/^/  /' "$tmp/check.out"
  for name in "${checked[@]}"; do
    grep -qxF "$tmp/$name.onnx: ok" "$tmp/check.out" && pass \
      || fail "$name: $(awk -v p="$tmp/$name.onnx" 'index($0, p) == 1 { on = 1 } on { print } index($0, p ": ok") == 1 || index($0, p ": FAILED") == 1 { on = 0 }' \
                        "$tmp/check.out" | tail -8)"
  done
fi

# docs/inference.md's program (its python block), which makes images into the exported model's input from the
# file's metadata_props alone, prints predict's lines: for a normalised model of an image folder (transform
# 'resize S') on JPEGs of other sizes (one EXIF-rotated, one gray), a PNG with alpha and an image of the input's
# size; and for tiny_resnet (Fashion-MNIST: no transform, no names) on test PNGs, a colour JPEG, colour stripes (luma)
# and a tiny image.
awk '/^```python$/ { on = 1; next } /^```$/ { on = 0 } on' "$src/docs/inference.md" >"$tmp/onnx_classify.py"
$py - "$tmp/photos" <<'PY'
import os, random, sys
from PIL import Image
rng = random.Random(5)
for split, n in (("train", 12), ("test", 3)):
    for k, name in enumerate(("red", "green", "blue")):
        os.makedirs(f"{sys.argv[1]}/{split}/{name}", exist_ok=True)
        for i in range(n):
            im = Image.new("RGB", (rng.randint(20, 50), rng.randint(20, 50)))
            im.putdata([tuple(rng.randint(100, 255) if j == k else rng.randint(0, 120) for j in range(3))
                        for _ in range(im.width * im.height)])
            im.save(f"{sys.argv[1]}/{split}/{name}/{i}.jpg", quality=90)
other = f"{sys.argv[1]}/other"
os.makedirs(other)
im = Image.open(f"{sys.argv[1]}/test/red/0.jpg")
exif = Image.Exif()
exif[0x0112] = 6
im.transpose(Image.ROTATE_90).save(f"{other}/exif6.jpg", exif=exif.tobytes(), quality=90)
im.convert("L").save(f"{other}/gray.jpg")
alpha = im.convert("RGBA")
alpha.putalpha(100)
alpha.save(f"{other}/alpha.png")
im.resize((12, 12)).save(f"{other}/input_size.png")
im.resize((5, 3)).save(f"{other}/tiny.png")
stripes = Image.new("RGB", (33, 30))  # green and blue stripes: one gray by luma, two by the channels' mean
stripes.putdata([(0, 255, 0) if (i % 33) // 4 % 2 else (0, 0, 255) for i in range(33 * 30)])
stripes.save(f"{other}/stripes.png")
PY
printf '[net]\nchannels = 3\nheight = 12\nwidth = 12\n\n[conv]\nname = conv\nfilters = 4\nsize = 3\nactivation = relu\n\n[global_avgpool]\n\n[flatten]\n\n[linear]\nname = fc\nout = 3\n' >"$tmp/rgb.cfg"
same_lines() { # LABEL FILE1 FILE2: the same files and top class, probabilities within 2e-4
  $py - "$2" "$3" <<'PY' && pass || fail "$1: $(diff "$2" "$3" | head -6)"
import sys
def parse(path):
    out = []
    for line in open(path):
        image, rest = line.rstrip("\n").split(": ", 1)
        out.append((image, [(t.rsplit(" ", 1)[0], float(t.rsplit(" ", 1)[1])) for t in rest.split(", ")]))
    return out
a, b = parse(sys.argv[1]), parse(sys.argv[2])
assert len(a) == len(b) > 0, (len(a), len(b))
for (ia, ta), (ib, tb) in zip(a, b):
    assert ia == ib and ta[0][0] == tb[0][0], (ia, ta, ib, tb)
    pb = dict(tb)
    assert all(abs(p - pb[c]) <= 2e-4 for c, p in ta if c in pb), (ia, ta, tb)
PY
}
# doc_program NAME ARGS...: a model of the photos trained with ARGS, exported: inference.md's program prints
# predict's lines
doc_program() {
  local name=$1
  shift
  if "$bin" train --data "$tmp/photos" --model "$tmp/rgb.cfg" --epochs 1 --batch-size 12 --devices 1 --quiet "$@" \
       --save "$tmp/$name.st" >/dev/null 2>&1 && "$bin" export --resume "$tmp/$name.st" --onnx "$tmp/$name.onnx"; then
    images=("$tmp"/photos/test/*/*.jpg "$tmp"/photos/other/*)
    "$bin" predict --resume "$tmp/$name.st" "${images[@]}" >"$tmp/$name.predict" 2>&1
    $py "$tmp/onnx_classify.py" "$tmp/$name.onnx" "${images[@]}" >"$tmp/$name.doc" 2>&1
    same_lines "inference.md's program on the $name model" "$tmp/$name.doc" "$tmp/$name.predict"
  else
    fail "training or exporting the $name model"
  fi
}
doc_program photos --normalize 0.5,0.4,0.3,0.2,0.25,0.3
doc_program bicubic --interpolation bicubic # "transform" ends ", bicubic": the program resizes with PIL's BICUBIC
seq 0 9 >"$tmp/digits"
images=("$tmp"/png/0000[0-4].png "$tmp"/photos/other/{exif6.jpg,tiny.png,stripes.png})
"$bin" predict --resume "$tmp/tiny_resnet.safetensors" --labels "$tmp/digits" "${images[@]}" >"$tmp/tiny.predict" 2>&1
$py "$tmp/onnx_classify.py" "$tmp/tiny_resnet.onnx" "${images[@]}" >"$tmp/tiny.doc" 2>&1
same_lines "inference.md's program on tiny_resnet" "$tmp/tiny.doc" "$tmp/tiny.predict"

# Deterministic: the same checkpoint gives the same bytes.
"$bin" export --resume "$tmp/tiny_resnet.safetensors" --onnx "$tmp/again.onnx" \
  && cmp -s "$tmp/again.onnx" "$tmp/tiny_resnet.onnx" && pass || fail "export is not deterministic"

# Refusals: one line, exit 1, the existing file untouched, no temporary file.
refused() {
  local label=$1 part=$2 status=$3 err=$4
  [[ $status -eq 1 && $(wc -l <"$err") -eq 1 ]] && grep -qF -- "$part" "$err" && pass \
    || fail "$label: status $status, stderr: $(head -c 400 "$err") (expected one line with '$part')"
}
before=$(sha256sum <"$tmp/lenet.onnx")
"$bin" export --resume "$tmp/missing.safetensors" --onnx "$tmp/lenet.onnx" 2>"$tmp/err"
refused "missing checkpoint" "missing.safetensors" $? "$tmp/err"
"$bin" export --resume "$tmp/tiny_resnet.safetensors" --model lenet --onnx "$tmp/lenet.onnx" 2>"$tmp/err"
refused "another model's checkpoint" "conv1.weight" $? "$tmp/err"
head -c 1000 "$tmp/lenet.safetensors" >"$tmp/cut.safetensors"
"$bin" export --resume "$tmp/cut.safetensors" --onnx "$tmp/lenet.onnx" 2>"$tmp/err"
refused "truncated checkpoint" "cut.safetensors" $? "$tmp/err"
[[ $(sha256sum <"$tmp/lenet.onnx") == "$before" ]] && pass || fail "a failed export changed the existing file"
"$bin" export --resume "$tmp/lenet.safetensors" --onnx "$tmp/no/such/dir/m.onnx" 2>"$tmp/err"
refused "missing directory" "no/such/dir" $? "$tmp/err"
mkdir -p "$tmp/adir"
"$bin" export --resume "$tmp/lenet.safetensors" --onnx "$tmp/adir" 2>"$tmp/err"
refused "a directory as --onnx" "export: --onnx $tmp/adir is a directory" $? "$tmp/err"
"$bin" export --resume "$tmp/lenet.safetensors" 2>"$tmp/err"
refused "no --onnx" "--onnx" $? "$tmp/err"
"$bin" export --resume "$tmp/lenet.safetensors" --onnx "$tmp/x.onnx" --bogus 1 2>"$tmp/err"
refused "unknown option" "--bogus" $? "$tmp/err"
[[ ! -e "$tmp/x.onnx" ]] && pass || fail "a refused export wrote a file"
leftovers=$(find "$tmp" -name '*.tmp.*' | wc -l)
[[ $leftovers -eq 0 ]] && pass || fail "temporary files left: $(find "$tmp" -name '*.tmp.*')"
"$bin" export --help | grep -q "opset 13" && pass || fail "export --help"
testing_finish cli_export
