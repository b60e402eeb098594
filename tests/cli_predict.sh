#!/usr/bin/env bash
# cli_predict.sh - `dptrain predict` on PNG and PGM images.
# - on 256 Fashion-MNIST test images written as PNGs, the top-1 classes of
#   predict are the classes `dptrain eval` counts: the same accuracy, to the
#   image, on 1 and on 2 devices, and the logits agree (1e-5) across device
#   counts and batch sizes;
# - the same image as PNG, PGM P5, PGM P2, 16-bit PNG and RGB PNG gives the
#   same classes and probabilities;
# - images of other sizes (40x33 RGB, 20x17 gray) are resized like
#   PyTorch's F.interpolate(mode="bilinear", antialias=True) (= PIL's
#   bilinear), checked by running the exported ONNX model in OpenCV on the
#   input PyTorch made: logits agree to 1e-4 relative;
# - text output: one line per image, --top K classes, probabilities in
#   [0, 1], Fashion-MNIST's names; --labels FILE names; --json objects,
#   valid JSON in UTF-8 whatever bytes the file names hold (a byte that
#   is not UTF-8 as \udcXX, Python's surrogateescape);
# - bad input: truncated PNG, a PGM whose header says more pixels than it
#   has, a text file, a missing file, a folder without images or with a
#   file that is not one, a bad --labels file, --top larger than the
#   classes, no images: one line naming the problem, exit 1, nothing on
#   stdout;
# - a folder stands for its image files (subfolders too, make_dataset's
#   order, dot files and other names left out): the same lines as the
#   files named one by one, with any --batch-size (read a batch at a time);
# - --skip-bad-files: a file that is no image and one whose data is cut are
#   each a warning line and left out, the others predicted, exit 0.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
check="$src/tools/check_onnx.py"
mkdir -p "$tmp/data" "$tmp/png"
$py "$check" subset "$data" 256 "$tmp/data"
$py "$check" pngs "$tmp/data/t10k-images-idx3-ubyte" 256 "$tmp/png"
ck="$tmp/lenet.safetensors"
"$bin" train --data "$tmp/data" --model lenet-paddle --epochs 2 --batch-size 32 --optimizer adam --lr 0.003 \
  --devices 2 --save "$ck" --quiet >/dev/null 2>&1 && pass || fail "training the checkpoint"

# Accuracy of predict's top-1 == eval's, on 1 and 2 devices.
labels=$($py -c "import sys; d=open(sys.argv[1],'rb').read()[8:]; print(' '.join(str(b) for b in d))" \
         "$tmp/data/t10k-labels-idx1-ubyte")
eval_correct=$("$bin" eval --resume "$ck" --data "$tmp/data" --devices 2 | head -1 | sed -E 's/.*\(([0-9]+)\/.*/\1/')
for devices in 1 2; do
  "$bin" predict --resume "$ck" --devices $devices --json --logits "$tmp"/png/*.png >"$tmp/p$devices.jsonl"
  correct=$(paste -d' ' <(sed -E 's/.*"top": \[\{"class": ([0-9]+).*/\1/' "$tmp/p$devices.jsonl") \
            <(tr ' ' '\n' <<<"$labels") | awk '$1 == $2 { n++ } END { print n + 0 }')
  [[ -n "$eval_correct" && "$correct" == "$eval_correct" ]] && pass \
    || fail "$devices devices: predict gets $correct right, eval $eval_correct"
done
"$bin" predict --resume "$ck" --devices 2 --batch-size 7 --json --logits "$tmp"/png/*.png >"$tmp/p7.jsonl"
# Other shard sizes may round differently in the GEMMs: the same classes, logits to 1e-5.
same_logits() {
  $py - "$1" "$2" <<'PY'
import json, sys
import numpy as np
a, b = ([json.loads(l)["logits"] for l in open(p)] for p in sys.argv[1:3])
a, b = np.array(a), np.array(b)
assert a.shape == b.shape == (256, 10), (a.shape, b.shape)
assert (a.argmax(1) == b.argmax(1)).all() and np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), np.abs(a - b).max()
PY
}
same_logits "$tmp/p1.jsonl" "$tmp/p2.jsonl" && pass || fail "logits differ between 1 and 2 devices"
same_logits "$tmp/p1.jsonl" "$tmp/p7.jsonl" && pass || fail "logits differ with --batch-size 7"

# A folder: its image files, in make_dataset's order (the folder's own files, then each subfolder's, sorted),
# the same lines as naming them, a batch at a time.
"$bin" predict --resume "$ck" --devices 1 --json --logits "$tmp/png" >"$tmp/folder1.jsonl"
cmp -s "$tmp/folder1.jsonl" "$tmp/p1.jsonl" && pass || fail "predict FOLDER differs from its files named one by one"
"$bin" predict --resume "$ck" --devices 2 --batch-size 7 --json --logits "$tmp/png/" >"$tmp/folder7.jsonl"
cmp -s "$tmp/folder7.jsonl" "$tmp/p7.jsonl" && pass || fail "predict FOLDER --batch-size 7 differs from the files'"
mkdir -p "$tmp/nest/b/deep" "$tmp/nest/a"
cp "$tmp/png/00001.png" "$tmp/nest/z.png" && cp "$tmp/png/00002.png" "$tmp/nest/a/y.PNG"
cp "$tmp/png/00003.png" "$tmp/nest/b/deep/x.png" && cp "$tmp/png/00004.png" "$tmp/nest/b/w.png"
cp "$tmp/png/00005.png" "$tmp/nest/.hidden.png" && echo notes >"$tmp/nest/notes.txt"
"$bin" predict --resume "$ck" --top 1 "$tmp/nest" "$tmp/png/00000.png" 2>&1 | cut -d: -f1 >"$tmp/nest.out"
printf '%s\n' "$tmp/nest/z.png" "$tmp/nest/a/y.PNG" "$tmp/nest/b/w.png" "$tmp/nest/b/deep/x.png" \
  "$tmp/png/00000.png" | cmp -s - "$tmp/nest.out" && pass || fail "a nested folder's order: $(cat "$tmp/nest.out")"

# Text output: one line per image, 3 classes, names, probabilities.
"$bin" predict --resume "$ck" "$tmp/png/00000.png" "$tmp/png/00001.png" >"$tmp/text.out" 2>"$tmp/text.err"
[[ $? -eq 0 && $(wc -l <"$tmp/text.out") -eq 2 && ! -s "$tmp/text.err" ]] && pass || fail "text output: $(cat "$tmp/text.out" "$tmp/text.err")"
grep -qE "^$tmp/png/00000.png: [A-Za-z/ -]+ (0|1)\.[0-9]{4}, [A-Za-z/ -]+ (0|1)\.[0-9]{4}, [A-Za-z/ -]+ (0|1)\.[0-9]{4}$" "$tmp/text.out" \
  && pass || fail "text line format: $(head -1 "$tmp/text.out")"
first=$(sed -E 's/^[^}]*"label": "([^"]*)".*/\1/' <(head -1 "$tmp/p1.jsonl"))
grep -q "00000.png: $first " "$tmp/text.out" && pass || fail "text top class is not the JSON's ($first)"
"$bin" predict --resume "$ck" --top 10 --json "$tmp/png/00000.png" >"$tmp/top10.json"
$py - "$tmp/top10.json" <<'PY' && pass || fail "--top 10 --json: probabilities"
import json, sys
o = json.loads(open(sys.argv[1]).read())
p = [t["prob"] for t in o["top"]]
names = {t["label"] for t in o["top"]}
assert len(p) == 10 and all(a >= b for a, b in zip(p, p[1:])) and abs(sum(p) - 1) < 1e-4, p
assert "Ankle boot" in names and "T-shirt/top" in names, names
assert sorted(t["class"] for t in o["top"]) == list(range(10))
PY
printf 'zero\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n' >"$tmp/labels.txt"
"$bin" predict --resume "$ck" --labels "$tmp/labels.txt" --top 1 --json "$tmp/png/00000.png" >"$tmp/lab.json"
cls=$(sed -E 's/.*"class": ([0-9]+).*/\1/' "$tmp/lab.json")
names=(zero one two three four five six seven eight nine)
grep -q "\"label\": \"${names[$cls]}\"" "$tmp/lab.json" && pass || fail "--labels: $(cat "$tmp/lab.json")"
# --json with file names in any bytes: each line valid JSON in UTF-8; a byte that is not UTF-8 written as
# Python's surrogateescape reads it (\udcXX), so that os.fsencode gives the name back
mkdir -p "$tmp/names"
for name in 'caf\xc3\xa9.png' 'latin\xe9.png' 'cut\xe2\x82.png' 'quote"back\\slash.png' 'tab\tnew.png'; do
  cp "$tmp/png/00000.png" "$tmp/names/$(printf "$name")"
done
"$bin" predict --resume "$ck" --json --top 1 "$tmp/names" >"$tmp/names.jsonl"
$py - "$tmp/names.jsonl" "$tmp/names" <<'PY' && pass || fail "--json with odd file names: $(cat -v "$tmp/names.jsonl")"
import json, os, sys
lines = open(sys.argv[1], "rb").read().splitlines()
got = sorted(os.fsencode(json.loads(l.decode("utf-8"))["image"]) for l in lines)
want = sorted(os.path.join(os.fsencode(sys.argv[2]), n) for n in os.listdir(os.fsencode(sys.argv[2])))
assert got == want, (got, want)
PY

# The same image in other formats: same classes and probabilities.
$py - "$tmp/data/t10k-images-idx3-ubyte" "$tmp" <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
img = d[16:16 + 784]
out = sys.argv[2]
open(out + "/same.pgm", "wb").write(b"P5\n# a comment\n28 28\n255\n" + img)
open(out + "/same_p2.pgm", "w").write("P2 28 28 255\n" + "\n".join(str(b) for b in img) + "\n")
def png(w, h, depth, color, rows):
    def chunk(k, b): return struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b))
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rows = [img[28 * y:28 * y + 28] for y in range(28)]
open(out + "/same16.png", "wb").write(png(28, 28, 16, 0, [bytes(b for v in r for b in (v, v)) for r in rows]))
open(out + "/same_rgb.png", "wb").write(png(28, 28, 8, 2, [bytes(v for v in r for _ in range(3)) for r in rows]))
full = png(28, 28, 8, 0, rows)
open(out + "/truncated.png", "wb").write(full[:len(full) // 2])
open(out + "/short.pgm", "wb").write(b"P5 28 28 255\n" + img[:700])
open(out + "/notimage.png", "w").write("this is not an image\n")
PY
for f in same.pgm same_p2.pgm same16.png same_rgb.png; do
  a=$("$bin" predict --resume "$ck" --top 3 "$tmp/png/00000.png" | cut -d: -f2)
  b=$("$bin" predict --resume "$ck" --top 3 "$tmp/$f" | cut -d: -f2)
  [[ -n "$a" && "$a" == "$b" ]] && pass || fail "$f: '$b' vs the PNG's '$a'"
done

# Other sizes: resized like PyTorch's antialiased bilinear (= PIL's), checked through the ONNX model in OpenCV.
"$bin" export --resume "$ck" --onnx "$tmp/m.onnx" || fail "export for the resize check"
$py - "$tmp" <<'PY'
import struct, sys, zlib
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(0)
def png(w, h, color, pixels):
    def chunk(k, b): return struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b))
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
big = rng.integers(0, 256, (33, 40, 3), dtype=np.uint8)
small = rng.integers(0, 256, (17, 20), dtype=np.uint8)
open(out + "/big_rgb.png", "wb").write(png(40, 33, 2, big))
open(out + "/small.png", "wb").write(png(20, 17, 0, small))
np.save(out + "/big_rgb.npy", big)
np.save(out + "/small.npy", small)
PY
"$bin" predict --resume "$ck" --json --logits "$tmp/big_rgb.png" "$tmp/small.png" >"$tmp/resized.jsonl"
$py - "$tmp" <<'PY' >"$tmp/resize.out" 2>&1 && pass || fail "resize: $(cat "$tmp/resize.out")"
import json, sys
import cv2, numpy as np, torch, torch.nn.functional as F
out = sys.argv[1]
big = np.load(out + "/big_rgb.npy").astype(np.float32)
gray = 0.299 * big[..., 0] + 0.587 * big[..., 1] + 0.114 * big[..., 2]  # ITU-R 601-2, as PIL's "L"
small = np.load(out + "/small.npy").astype(np.float32)
xs = [F.interpolate(torch.from_numpy(a)[None, None], size=(28, 28), mode="bilinear", align_corners=False,
                    antialias=True)[0].numpy() / 255 for a in (gray, small)]
net = cv2.dnn.readNetFromONNX(out + "/m.onnx")
net.setInput(np.stack(xs).astype(np.float32))
got = net.forward()
want = np.array([json.loads(l)["logits"] for l in open(out + "/resized.jsonl")], np.float32)
diff, scale = np.abs(got - want).max(), np.abs(want).max()
print(f"resized inputs: max |diff| {diff:.3g}, max |logit| {scale:.3g}")
assert diff <= 1e-4 * scale, (got, want)
PY

# Bad input: one line naming the file, exit 1, nothing on stdout.
bad() {
  local label=$1 part=$2; shift 2
  "$bin" predict --resume "$ck" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local status=$?
  [[ $status -eq 1 && $(wc -l <"$tmp/bad.err") -eq 1 && ! -s "$tmp/bad.out" ]] && grep -qF -- "$part" "$tmp/bad.err" && pass \
    || fail "$label: status $status, stdout $(head -c 200 "$tmp/bad.out"), stderr $(head -c 300 "$tmp/bad.err") (expected '$part')"
}
bad "truncated PNG" "truncated.png: bad PNG" "$tmp/png/00000.png" "$tmp/truncated.png"
bad "short PGM" "short.pgm: truncated PGM: header says 28 x 28" "$tmp/short.pgm"
bad "not an image" "notimage.png: not a JPEG, PNG, PGM/PPM or BMP image" "$tmp/png/00000.png" "$tmp/notimage.png"
bad "missing file" "missing.png: cannot open" "$tmp/missing.png"
mkdir -p "$tmp/empty/sub" "$tmp/badfolder"
bad "a folder without images" "$tmp/empty: no image files" "$tmp/empty"
cp "$tmp/png/00000.png" "$tmp/notimage.png" "$tmp/badfolder/"
bad "a folder with a file that is not an image" "badfolder/notimage.png: not a JPEG" "$tmp/badfolder"
# --skip-bad-files: each bad file (one that is no image, one whose data is cut) a warning line, the rest predicted
cp "$tmp/truncated.png" "$tmp/png/00001.png" "$tmp/badfolder/"
"$bin" predict --resume "$ck" --top 1 --skip-bad-files "$tmp/badfolder" >"$tmp/skip.out" 2>"$tmp/skip.err"
status=$?
[[ $status -eq 0 && $(wc -l <"$tmp/skip.out") -eq 2 && $(wc -l <"$tmp/skip.err") -eq 2 ]] \
  && grep -q "^$tmp/badfolder/00000.png: " "$tmp/skip.out" && grep -q "^$tmp/badfolder/00001.png: " "$tmp/skip.out" \
  && grep -q "warning: --skip-bad-files: left out: $tmp/badfolder/notimage.png" "$tmp/skip.err" \
  && grep -q "warning: --skip-bad-files: left out: $tmp/badfolder/truncated.png" "$tmp/skip.err" && pass \
  || fail "--skip-bad-files: status $status, $(cat "$tmp/skip.out" "$tmp/skip.err")"
"$bin" predict --resume "$ck" --skip-bad-files "$tmp/notimage.png" >"$tmp/none.out" 2>"$tmp/none.err"
status=$?
[[ $status -eq 1 && ! -s "$tmp/none.out" ]] && tail -1 "$tmp/none.err" | grep -q "none of the files can be read" && pass \
  || fail "--skip-bad-files with no image left: status $status, $(cat "$tmp/none.err")"
printf 'a\nb\n' >"$tmp/two.txt"
bad "short labels" "two.txt: 2 names, the model has 10 classes" --labels "$tmp/two.txt" "$tmp/png/00000.png"
bad "a directory as --labels" "--labels $tmp/empty: cannot read (Is a directory)" --labels "$tmp/empty" "$tmp/png/00000.png"
bad "a missing --labels" "--labels $tmp/none.txt: cannot open (No such file or directory)" --labels "$tmp/none.txt" \
  "$tmp/png/00000.png"
bad "top too large" "--top 11" --top 11 "$tmp/png/00000.png"
# a 2-class model (an image folder of two classes): the default --top shows both, an explicit 3 is refused
mkdir -p "$tmp/two/a" "$tmp/two/b"
cp "$tmp"/png/0000[0-3].png "$tmp/two/a/"; cp "$tmp"/png/0000[4-7].png "$tmp/two/b/"
printf '[net]\nchannels = 1\nheight = 28\nwidth = 28\n[flatten]\n[linear]\nname = fc\nout = 2\n' >"$tmp/two.cfg"
"$bin" train --data "$tmp/two" --model "$tmp/two.cfg" --holdout 0.25 --epochs 1 --batch-size 2 --devices 1 \
  --save "$tmp/two.st" --quiet >/dev/null 2>&1 && pass || fail "training the 2-class checkpoint"
"$bin" predict --resume "$tmp/two.st" "$tmp/png/00000.png" >"$tmp/two.out" 2>"$tmp/two.err"
status=$?
[[ $status -eq 0 && ! -s "$tmp/two.err" ]] && grep -qE "^$tmp/png/00000.png: [ab] [0-9.]+, [ab] [0-9.]+$" "$tmp/two.out" \
  && pass || fail "predict with a 2-class model and the default --top: status $status, $(cat "$tmp/two.out" "$tmp/two.err")"
ck_saved=$ck ck=$tmp/two.st
bad "top 3 of 2 classes" "--top 3 is more than the model's 2 classes" --top 3 "$tmp/png/00000.png"
ck=$ck_saved
bad "no images" "no images"
bad "logits without json" "--logits needs --json" --logits "$tmp/png/00000.png"
"$bin" predict "$tmp/png/00000.png" 2>"$tmp/err" >/dev/null
[[ $? -eq 1 ]] && grep -q -- "--resume" "$tmp/err" && pass || fail "no --resume: $(cat "$tmp/err")"
"$bin" predict --help | grep -q "PIL's bilinear" && pass || fail "predict --help"
testing_finish cli_predict
