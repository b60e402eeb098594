#!/usr/bin/env bash
# cli_transfer.sh - it transfers, measured (docs/training.md, "Fine-tuning"):
# LeNet trained on Fashion-MNIST's classes 0-4 (t-shirt, trouser, pullover,
# dress, coat: the first 6,000 such training images, 2 epochs, IDX files
# written here), then a 5-output LeNet on classes 5-9 (sandal, shirt,
# sneaker, bag, ankle boot: an image folder of 1,000 training and 1,000 test
# images written here as PGM files) for one epoch:
# - started with --init from the first and its convolutions frozen: its
#   fc2 (10 outputs there, 5 here) is initialised afresh and named in one
#   line, the checkpoint's fc2 is (5, 128) and its class names are the new
#   folder's;
# - the same run from scratch (the same seed, optimizer and data);
# the first must have the higher test accuracy (both are printed; 0.68 and
# 0.59 measured on an AMD EPYC with AVX-512).
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

# IDX files of classes 0-4 ($tmp/pre) and an image folder of classes 5-9 ($tmp/new)
"$py" - "$data" "$tmp" 6000 1000 1000 <<'EOF' || fail "writing the data"
import gzip, os, struct, sys
src, out, n_pre, n_new, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
names = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]
def load(split):
    return (gzip.open(f"{src}/{split}-images-idx3-ubyte.gz").read()[16:],
            gzip.open(f"{src}/{split}-labels-idx1-ubyte.gz").read()[8:])
def pick(data, classes, n):
    img, lab = data
    idx = [i for i in range(len(lab)) if lab[i] in classes][:n]
    return [(img[i * 784:(i + 1) * 784], lab[i]) for i in idx]
def write_idx(d, split, items):
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(items), 28, 28) + b"".join(p for p, _ in items))
    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, len(items)) + bytes(l for _, l in items))
def write_folder(d, split, items):
    for k, (p, l) in enumerate(items):
        os.makedirs(f"{d}/{split}/{names[l]}", exist_ok=True)
        with open(f"{d}/{split}/{names[l]}/{k:05d}.pgm", "wb") as f:
            f.write(b"P5\n28 28\n255\n" + p)
train, test = load("train"), load("t10k")
write_idx(f"{out}/pre", "train", pick(train, range(5), n_pre))
write_idx(f"{out}/pre", "t10k", pick(test, range(5), n_test))
write_folder(f"{out}/new", "train", pick(train, range(5, 10), n_new))
write_folder(f"{out}/new", "test", pick(test, range(5, 10), n_test))
EOF
sed 's/^out = 10$/out = 5/; s/^name = lenet$/name = lenet5/' "$src/models/lenet.cfg" >"$tmp/lenet5.cfg"
run=(train --optimizer adam --lr 0.002 --devices 2 --seed 0)
"$bin" "${run[@]}" --model lenet --data "$tmp/pre" --batch-size 64 --epochs 2 --quiet --save "$tmp/pre.st" \
  >"$tmp/pre.out" 2>&1 && pass || fail "pretraining on classes 0-4: $(tail -3 "$tmp/pre.out")"
new=("${run[@]}" --model "$tmp/lenet5.cfg" --data "$tmp/new" --batch-size 50 --epochs 1)
"$bin" "${new[@]}" --init "$tmp/pre.st" --freeze conv1,conv2 --save "$tmp/transfer.st" --metrics "$tmp/transfer.jsonl" \
  >"$tmp/transfer.out" 2>&1 && pass || fail "--init --freeze on classes 5-9: $(tail -3 "$tmp/transfer.out")"
"$bin" "${new[@]}" --metrics "$tmp/scratch.jsonl" >"$tmp/scratch.out" 2>&1 && pass \
  || fail "from scratch on classes 5-9: $(tail -3 "$tmp/scratch.out")"

grep -q "^initialised from $tmp/pre.st (parameters and batch norm statistics, 2 epochs of lenet); fc2 initialised afresh: 5 outputs, the checkpoint's 10$" \
  "$tmp/transfer.out" && pass || fail "the fresh head is not named: $(head -4 "$tmp/transfer.out")"
"$py" - "$tmp/transfer.st" <<'EOF' && pass || fail "the fine-tuned checkpoint's head or class names"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["fc2.weight"]["shape"] == [5, 128] and h["fc2.bias"]["shape"] == [5], h["fc2.weight"]
assert json.loads(h["__metadata__"]["data.classes"]) == ["ankle-boot", "bag", "sandal", "shirt", "sneaker"]
EOF
transfer=$(json_field "$(tail -1 "$tmp/transfer.jsonl")" test_acc)
scratch=$(json_field "$(tail -1 "$tmp/scratch.jsonl")" test_acc)
echo "classes 5-9 after 1 epoch: test acc $transfer with --init (classes 0-4) and conv1,conv2 frozen, $scratch from scratch"
"$py" -c "import sys; sys.exit(0 if float('$transfer') > float('$scratch') else 1)" 2>/dev/null && pass \
  || fail "--init + --freeze ($transfer) does not beat training from scratch ($scratch)"
testing_finish cli_transfer
