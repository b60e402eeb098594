#!/usr/bin/env bash
# cli_transfer_resnet.sh - it transfers, measured, on a JPEG folder
# (docs/training.md, "Fine-tuning"): torchvision's ResNet-18
# (models/resnet18-imagenet.cfg) at 3x64x64, JPEG folders of Fashion-MNIST
# written here with tools/idx_to_image_folder.py, every image of a random
# size (48 to 96 pixels, aspect 3:4 to 4:3, quality 90), read through
# --transform squash:
# - pretrained on classes 0-4 (3,000 images, 10 outputs, 1 epoch);
# - then a 5-output ResNet-18 on classes 5-9 (2,000 training and 1,000 test
#   images) for one epoch, started with --init from the first with its
#   stem, layer1 and layer2 frozen (fc initialised afresh, named in one
#   line), against the same run from scratch (the same seed, optimizer and
#   data);
# the first must have the higher test accuracy (both are printed).
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

folder() { # folder OUT CLASSES TRAIN TEST
  "$py" "$src/tools/idx_to_image_folder.py" "$data" "$1" --names fashion --classes "$2" --limit-train "$3" \
    --limit-test "$4" --random-size 48:96 --seed 3 && pass || fail "writing $1"
}
folder "$tmp/pre" 0-4 3000 500
folder "$tmp/new" 5-9 2000 1000
model() { # model FILE OUTPUTS
  sed -E "s/^(height|width) = 224$/\1 = 64/; s/^out = 1000$/out = $2/; s/^name = resnet18-imagenet$/name = resnet18-64-$2/" \
    "$src/models/resnet18-imagenet.cfg" >"$1"
}
model "$tmp/pre.cfg" 10
model "$tmp/new.cfg" 5
run=(train --optimizer adam --lr 0.001 --devices 2 --seed 0 --transform squash --batch-size 50)
"$bin" "${run[@]}" --model "$tmp/pre.cfg" --data "$tmp/pre" --epochs 1 --quiet --save "$tmp/pre.st" \
  >"$tmp/pre.out" 2>&1 && pass || fail "pretraining on classes 0-4: $(tail -3 "$tmp/pre.out")"
new=("${run[@]}" --model "$tmp/new.cfg" --data "$tmp/new" --epochs 1)
"$bin" "${new[@]}" --init "$tmp/pre.st" --freeze conv1,bn1,layer1,layer2 --save "$tmp/transfer.st" \
  --metrics "$tmp/transfer.jsonl" >"$tmp/transfer.out" 2>&1 && pass \
  || fail "--init --freeze on classes 5-9: $(tail -3 "$tmp/transfer.out")"
"$bin" "${new[@]}" --metrics "$tmp/scratch.jsonl" >"$tmp/scratch.out" 2>&1 && pass \
  || fail "from scratch on classes 5-9: $(tail -3 "$tmp/scratch.out")"

grep -q "; fc initialised afresh: 5 outputs, the checkpoint's 10$" "$tmp/transfer.out" && pass \
  || fail "the fresh head is not named: $(head -4 "$tmp/transfer.out")"
"$bin" inspect "$tmp/transfer.st" >"$tmp/inspect.out" 2>&1
grep -q "^  data.transform = squash$" "$tmp/inspect.out" && grep -q "^  model.freeze = conv1,bn1,layer1,layer2$" \
  "$tmp/inspect.out" && pass || fail "inspect: $(grep -E 'transform|freeze' "$tmp/inspect.out")"
transfer=$(json_field "$(tail -1 "$tmp/transfer.jsonl")" test_acc)
scratch=$(json_field "$(tail -1 "$tmp/scratch.jsonl")" test_acc)
echo "resnet18 at 64x64, JPEG classes 5-9 after 1 epoch: test acc $transfer with --init (classes 0-4) and" \
  "conv1,bn1,layer1,layer2 frozen, $scratch from scratch"
"$py" -c "import sys; sys.exit(0 if float('$transfer') > float('$scratch') else 1)" 2>/dev/null && pass \
  || fail "--init + --freeze ($transfer) does not beat training from scratch ($scratch)"
testing_finish cli_transfer_resnet
