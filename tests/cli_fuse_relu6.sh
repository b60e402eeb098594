#!/usr/bin/env bash
# cli_fuse_relu6.sh - batch norm + ReLU6 run as one op (ops.h:
# DP_FUSE_RELU6; src/nn/nn.c fuses a batch norm with the relu6 after it
# when nothing else reads the batch norm's output), end to end on
# MobileNetV2 (models/mobilenet_v2-imagenet.cfg, --image-size 32,
# --num-classes 2, random 32 x 32 RGB images) against the same network with
# every such pair run as two ops: a copy of the model file in which routes
# before the classifier also read each of those 35 batch norms' outputs (so
# none is fused; the routes come after the dropout, whose layer index seeds
# its mask):
# - on 2 CPU devices, 2 epochs: the checkpoints' tensors are byte for byte
#   the same, and --profile names 35 forward rows batch_norm+relu6 in the
#   fused run and none in the other (which has relu6 rows instead);
# - on the CUDA emulator (builds with CUDA): cuda:0 in FP32 with step graphs,
#   and --precision bf16 --channels-last on: the same bits fused and apart.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

# 32 training and 8 test images, 32 x 32 RGB, 2 classes (2 steps an epoch)
"$py" "$src/tests/random_image_folder.py" "$tmp/data" 32 8 2 32x32 && pass || fail "making the image folder"

# the model file with each batch norm that a relu6 follows labelled and read again by a route before the
# classifier (then a route back to the dropout's output, which the classifier reads)
"$py" - "$src/models/mobilenet_v2-imagenet.cfg" >"$tmp/apart.cfg" <<'EOF' && pass || fail "making the model file copy"
import sys
lines = open(sys.argv[1]).read().split("\n")
heads = [i for i, l in enumerate(lines) if l.startswith("[")]
out, reads = [], []
for k, i in enumerate(heads):
    block = lines[i:heads[k + 1] if k + 1 < len(heads) else len(lines)]
    if block[0] == "[batchnorm]" and k + 1 < len(heads) and lines[heads[k + 1]] == "[relu6]":
        reads.append("bn_read_%d" % len(reads))
        block.insert(1, "label = " + reads[-1])
    elif block[0] == "[dropout]":
        block.insert(1, "label = head")
    elif block[0] == "[linear]":
        for label in reads + ["head"]:
            out += ["[route]", "from = " + label, ""]
    out += block
assert len(reads) == 35, len(reads)
print("\n".join(lines[:heads[0]] + out), end="")
EOF
common=(train --data "$tmp/data" --image-size 32 --num-classes 2 --batch-size 16 --lr 0.05 --seed 3)

# run NAME MODEL ARGS...: saves $tmp/NAME.st and its output $tmp/NAME.out
run() {
  local name=$1 model=$2
  shift 2
  "$bin" "${common[@]}" --model "$model" "$@" --save "$tmp/$name.st" >"$tmp/$name.out" 2>&1 && pass \
    || fail "$name: $(tail -3 "$tmp/$name.out")"
}
# fused_vs_apart NAME ARGS...: the shipped file and the copy, the same tensors
fused_vs_apart() {
  local name=$1
  shift
  run "$name-fused" "$src/models/mobilenet_v2-imagenet.cfg" "$@"
  run "$name-apart" "$tmp/apart.cfg" "$@"
  same_tensors "$tmp/$name-fused.st" "$tmp/$name-apart.st" && pass \
    || fail "$name: batch norm + relu6 fused and apart trained to other tensors"
}

fused_vs_apart cpu --devices 2 --epochs 2 --profile-steps 2,2
rows() { grep -c "^cpu:0 .* $1 *forward " "$tmp/$2.out"; }
echo "profile rows of cpu:0: fused batch_norm+relu6 $(rows batch_norm+relu6 cpu-fused), relu6 $(rows relu6 cpu-fused);" \
  "apart batch_norm+relu6 $(rows batch_norm+relu6 cpu-apart), relu6 $(rows relu6 cpu-apart)"
[[ $(rows batch_norm+relu6 cpu-fused) == 35 && $(rows relu6 cpu-fused) == 0 ]] && pass \
  || fail "fused run: not 35 batch_norm+relu6 rows and no relu6 row: $(grep relu6 "$tmp/cpu-fused.out" | head -3)"
[[ $(rows batch_norm+relu6 cpu-apart) == 0 && $(rows relu6 cpu-apart) == 35 ]] && pass \
  || fail "the copy: fused rows, or not 35 relu6 rows: $(grep relu6 "$tmp/cpu-apart.out" | head -3)"

emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
  fused_vs_apart emu-fp32 --devices cuda:0 --epochs 1 --cuda-graph on
  fused_vs_apart emu-bf16-nhwc --devices cuda:0 --epochs 1 --precision bf16 --channels-last on
else
  echo "cli_fuse_relu6: no CUDA emulator in this build (built without CUDA): CPU runs only"
fi
testing_finish cli_fuse_relu6
