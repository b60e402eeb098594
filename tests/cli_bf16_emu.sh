#!/usr/bin/env bash
# cli_bf16_emu.sh - `--precision` on the CUDA emulator (tests/cuda_emulator/:
# cuDNN's and cuBLAS's bf16 configurations done on the CPU, the backend's
# own cast kernels compiled for the host); skipped (77) in a build without
# CUDA. What it shows is the backend's logic, not a GPU's speed or bits:
# - LeNet trains in bf16 on cuda:0 (the loss falls over 3 epochs); the first
#   line and every metrics line name the precision; the convolutions and
#   products ran in bf16 (DPTRAIN_CUDA_EMU_STATS: bf16 convolutions and bf16
#   products counted, no FP32 product left) and the run differs from FP32's;
# - two bf16 runs give the same checkpoint bits and losses;
# - checkpoints are FP32 and the same file: a bf16 run stopped after epoch 1
#   and resumed in bf16 ends with the straight run's bits; resumed in FP32
#   on cpu:0 and on cuda:0 it trains on (the loss falls); an FP32 checkpoint
#   resumes in bf16; `dptrain eval --precision bf16` evaluates it;
# - --profile in bf16: the table's header names the precision;
# - activations stored in bf16 (src/backend/cuda/layout_cuda.h): tiny_resnet
#   (batch norm and its ReLU, a skip add with ReLU, dropout, global average
#   pooling) trains in bf16 (the loss falls over 3 epochs), gives the same
#   bits twice, with --cuda-graph on as off, and resumed after epoch 1 ends
#   with the straight run's bits; on two devices sharing the GPU with
#   --sync-batch-norm it trains too; with --channels-last on it gives the
#   NCHW run's checkpoint within 1e-2 of each tensor's largest value;
# - the peak of device memory (the metrics' device_mem_peak_bytes) of one
#   step of LeNet at batch 96 and of tiny_resnet at batch 512 is lower in
#   bf16 than in FP32 (the figures are printed). The arena's first block
#   is 16 MiB and a step that fits in it shows no difference: these batches
#   are where the FP32 step outgrows it by more than bf16's (its
#   activations in half the bytes, beside a scratch buffer of its own);
# - refused with one line, a non-zero exit and nothing written:
#   --precision bf16 and tf32 on cpu:0, --precision fp8, --tf32 with
#   --precision bf16, eval --precision bf16 on cpu:0.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
small_data "$tmp/data" 64 100 # 4 steps of 16 images an epoch: the emulated convolutions are slow
small_data "$tmp/mem" 512 16  # one step of up to 512 images: the peak of device memory
# the training runs: the same images beside 8 test images (no check reads their test accuracy, and the
# emulated evaluation of 100 costs half an epoch's training); `dptrain eval` reads all 100 ($tmp/data)
small_data "$tmp/quick" 64 8
data=$tmp/quick
loud=(train --data "$data" --model lenet --limit 64 --batch-size 16 --optimizer adam --lr 0.003 --seed 5)
common=("${loud[@]}" --quiet)
loss_of() { json_field "$(sed -n "${2}p" "$tmp/$1.jsonl")" train_loss; }
falls() { # falls NAME FIRST LAST: the loss of epoch line LAST below that of line FIRST
  awk -v a="$(loss_of "$1" "$2")" -v b="$(loss_of "$1" "$3")" 'BEGIN { exit !(a != "" && b != "" && b < a) }' && pass \
    || fail "$1: the loss did not fall: $(loss_of "$1" "$2") then $(loss_of "$1" "$3")"
}
# one_line_refusal NAME PATTERN ARGS...: exit 1-127, stderr exactly one line matching PATTERN, nothing written
one_line_refusal() {
  local name=$1 pattern=$2
  shift 2
  "$bin" "$@" --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 && $(wc -l <"$tmp/$name.err") -eq 1 ]] && grep -qE "$pattern" "$tmp/$name.err" \
    && pass || fail "$name: exit $status, stderr: $(cat "$tmp/$name.err")"
  [[ ! -e "$tmp/$name.st" && ! -e "$tmp/$name.jsonl" ]] && pass || fail "$name: refused, but a file was written"
}

# bf16 trains; the first line, the metrics and the emulator's counts say so
DPTRAIN_CUDA_EMU_STATS=1 train_run bf16 cuda:0 --epochs 3 --precision bf16
falls bf16 1 3
"$bin" "${loud[@]}" --devices cuda:0 --epochs 1 --limit 16 --precision bf16 >"$tmp/first.out" 2>&1
head -1 "$tmp/first.out" | grep -q "seed 5, precision bf16, on \[cuda:0\]" && pass \
  || fail "first line: $(head -1 "$tmp/first.out")"
[[ $(grep -c '"precision": "bf16"' "$tmp/bf16.jsonl") -eq 3 ]] && pass \
  || fail "metrics lines naming bf16: $(grep -c '"precision": "bf16"' "$tmp/bf16.jsonl") of 3"
count() { sed -nE "s/^cuda emulator: $2.* ([0-9]+) $3.*/\\1/p" "$tmp/$1.out"; }
convs=$(count bf16 cuDNN "bf16 convolutions") bf16_products=$(count bf16 cuBLAS "bf16 products")
fp32_products=$(sed -nE 's/^cuda emulator: cuBLAS: ([0-9]+) FP32 products.*/\1/p' "$tmp/bf16.out")
[[ -n "$convs" && $convs -gt 0 && -n "$bf16_products" && $bf16_products -gt 0 && "$fp32_products" == 0 ]] && pass \
  || fail "bf16 run: $convs bf16 convolutions, $bf16_products bf16 products, $fp32_products FP32 products"
DPTRAIN_CUDA_EMU_STATS=1 train_run fp32 cuda:0 --epochs 3
[[ $(count fp32 cuDNN "bf16 convolutions") == 0 && $(count fp32 cuBLAS "bf16 products") == 0 ]] && pass \
  || fail "fp32 run: bf16 calls counted: $(grep 'cuda emulator: cu' "$tmp/fp32.out")"
grep -q '"precision": "fp32"' "$tmp/fp32.jsonl" && pass || fail "fp32 metrics: $(tail -1 "$tmp/fp32.jsonl")"
! same_tensors "$tmp/bf16.st" "$tmp/fp32.st" && pass || fail "bf16 and fp32 runs gave the same checkpoint"

# the same seed, the same bits
train_run bf16-again cuda:0 --epochs 3 --precision bf16
same_run bf16 bf16-again

# checkpoints: FP32, the same file; resumes across precisions and devices
train_run stop cuda:0 --epochs 3 --stop-after 2 --precision bf16
cp "$tmp/stop.st" "$tmp/stop-copy.st"
"$bin" "${common[@]}" --devices cuda:0 --epochs 3 --precision bf16 --resume "$tmp/stop.st" --save "$tmp/resumed.st" \
  --metrics "$tmp/resumed.jsonl" >"$tmp/resumed.out" 2>&1 && pass || fail "bf16 resume: $(tail -2 "$tmp/resumed.out")"
same_tensors "$tmp/resumed.st" "$tmp/bf16.st" && pass || fail "bf16 resumed after epoch 2: not the straight run's bits"
[[ "$(last_loss "$tmp/resumed.jsonl")" == "$(last_loss "$tmp/bf16.jsonl")" ]] && pass \
  || fail "bf16 resumed: loss $(last_loss "$tmp/resumed.jsonl"), straight $(last_loss "$tmp/bf16.jsonl")"
for where in cpu:0 cuda:0; do
  name=fp32-on-${where%%:*}
  cp "$tmp/stop-copy.st" "$tmp/$name.st"
  "$bin" "${common[@]}" --devices "$where" --epochs 3 --resume "$tmp/$name.st" --save "$tmp/$name.st" \
    --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 && pass || fail "$name: $(tail -2 "$tmp/$name.out")"
  awk -v a="$(loss_of stop 2)" -v b="$(loss_of "$name" 1)" 'BEGIN { exit !(a != "" && b != "" && b < a) }' && pass \
    || fail "$name: epoch 3's loss $(loss_of "$name" 1) not below the bf16 epoch 2's $(loss_of stop 2)"
done
train_run fp32-stop cuda:0 --epochs 3 --stop-after 2
"$bin" "${common[@]}" --devices cuda:0 --epochs 3 --precision bf16 --resume "$tmp/fp32-stop.st" \
  --metrics "$tmp/fp32-then-bf16.jsonl" >"$tmp/fp32-then-bf16.out" 2>&1 && pass \
  || fail "fp32 checkpoint resumed in bf16: $(tail -2 "$tmp/fp32-then-bf16.out")"
awk -v a="$(loss_of fp32-stop 2)" -v b="$(loss_of fp32-then-bf16 1)" 'BEGIN { exit !(a != "" && b != "" && b < a) }' \
  && pass || fail "fp32 then bf16: epoch 3's loss $(loss_of fp32-then-bf16 1) not below $(loss_of fp32-stop 2)"
"$bin" eval --data "$tmp/data" --resume "$tmp/bf16.st" --devices cuda:0 --precision bf16 >"$tmp/eval.out" 2>&1 \
  && grep -qE '^test acc: [0-9.]+ \([0-9]+/100 correct\) .*, precision bf16$' "$tmp/eval.out" && pass \
  || fail "eval --precision bf16: $(cat "$tmp/eval.out")"

# --profile in bf16
"$bin" "${common[@]}" --devices cuda:0 --epochs 1 --limit 48 --precision bf16 --profile-steps 1,1 \
  >"$tmp/profile.out" 2>&1 && grep -q "^profile: mean ms per step over 1 step after 1 warm-up step, precision bf16" \
  "$tmp/profile.out" && pass || fail "--profile in bf16: $(grep -m1 '^profile' "$tmp/profile.out")"

# activations stored in bf16: tiny_resnet
lenet_common=("${common[@]}")
common=(train --data "$data" --model "$(dirname "$0")/models/tiny_resnet.cfg" --limit 64 --batch-size 16
        --optimizer momentum --lr 0.05 --seed 5 --quiet)
train_run resnet-bf16 cuda:0 --epochs 3 --precision bf16 --cuda-graph off
falls resnet-bf16 1 3
train_run resnet-bf16-again cuda:0 --epochs 3 --precision bf16 --cuda-graph off
same_run resnet-bf16 resnet-bf16-again
train_run resnet-bf16-graph cuda:0 --epochs 3 --precision bf16 --cuda-graph on
same_run resnet-bf16 resnet-bf16-graph
train_run resnet-bf16-stop cuda:0 --epochs 3 --stop-after 1 --precision bf16 --cuda-graph off
"$bin" "${common[@]}" --devices cuda:0 --epochs 3 --precision bf16 --cuda-graph off --resume "$tmp/resnet-bf16-stop.st" \
  --save "$tmp/resnet-bf16-resumed.st" --metrics "$tmp/resnet-bf16-resumed.jsonl" >"$tmp/resnet-bf16-resumed.out" 2>&1 \
  && pass || fail "tiny_resnet bf16 resume: $(tail -2 "$tmp/resnet-bf16-resumed.out")"
same_tensors "$tmp/resnet-bf16-resumed.st" "$tmp/resnet-bf16.st" && pass \
  || fail "tiny_resnet bf16 resumed after epoch 1: not the straight run's bits"
train_run resnet-bf16-sync cuda:0,cuda:0 --epochs 3 --precision bf16 --sync-batch-norm
falls resnet-bf16-sync 1 3
train_run resnet-bf16-nhwc cuda:0 --epochs 3 --precision bf16 --cuda-graph off --channels-last on
worst=$(close_checkpoints "$tmp/resnet-bf16-nhwc.st" "$tmp/resnet-bf16.st" 1e-2) && pass \
  || fail "tiny_resnet bf16: channels-last on vs off: $worst"
echo "tiny_resnet bf16: channels-last on vs off, parameters within $worst of their largest value"
common=("${lenet_common[@]}")

# the peak of device memory: one step, FP32 against bf16
for net in "lenet 96" "$(dirname "$0")/models/tiny_resnet.cfg 512"; do
  read -r model batch <<<"$net"
  for p in fp32 bf16; do
    name=mem-$(basename "$model" .cfg)-$p
    "$bin" train --data "$tmp/mem" --model "$model" --limit "$batch" --batch-size "$batch" --epochs 1 --seed 5 --quiet \
      --devices cuda:0 --precision "$p" --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 && pass \
      || fail "$name: $(tail -2 "$tmp/$name.out")"
  done
  fp32=$(json_field "$(tail -1 "$tmp/mem-$(basename "$model" .cfg)-fp32.jsonl")" device_mem_peak_bytes)
  bf16=$(json_field "$(tail -1 "$tmp/mem-$(basename "$model" .cfg)-bf16.jsonl")" device_mem_peak_bytes)
  echo "$(basename "$model" .cfg) at batch $batch: device memory peak $fp32 bytes in FP32, $bf16 in bf16"
  [[ $fp32 =~ ^[0-9]+$ && $bf16 =~ ^[0-9]+$ ]] && ((bf16 < fp32)) && pass \
    || fail "$(basename "$model" .cfg) at batch $batch: bf16's peak $bf16 is not below FP32's $fp32"
done

# refusals: one line, non-zero, nothing written
one_line_refusal cpu-bf16 '^dptrain: train: --precision bf16: cpu:0 has no bf16 mode .*use --precision fp32' \
  "${common[@]}" --devices cpu:0 --epochs 1 --precision bf16
one_line_refusal cpu-tf32 '^dptrain: train: --precision tf32: cpu:0 has no TF32 mode .*use --precision fp32' \
  "${common[@]}" --devices cpu:0 --epochs 1 --precision tf32
one_line_refusal fp8 "^dptrain: train: --precision: 'fp8' is not fp32, tf32 or bf16$" \
  "${common[@]}" --devices cuda:0 --epochs 1 --precision fp8
one_line_refusal tf32-and-bf16 '^dptrain: train: --tf32 is --precision tf32, and --precision says bf16' \
  "${common[@]}" --devices cuda:0 --epochs 1 --tf32 --precision bf16
"$bin" eval --data "$tmp/data" --resume "$tmp/bf16.st" --devices cpu:0 --precision bf16 >"$tmp/eval-cpu.out" \
  2>"$tmp/eval-cpu.err"
status=$?
[[ $status -ne 0 && $status -lt 128 && $(wc -l <"$tmp/eval-cpu.err") -eq 1 ]] \
  && grep -q "eval: --precision bf16: cpu:0 has no bf16 mode" "$tmp/eval-cpu.err" && pass \
  || fail "eval --precision bf16 on cpu:0: exit $status, $(cat "$tmp/eval-cpu.err")"
testing_finish cli_bf16_emu
