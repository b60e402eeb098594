#!/usr/bin/env bash
# cli_channels_last_emu.sh - `dptrain train --channels-last on|off` (and
# eval) on one CUDA device of the CUDA emulator; skipped (77) in a build
# without CUDA. What it shows is the backend's logic and bits, not a GPU's
# speed:
# - LeNet (conv, sigmoid, avg pool, linear) and tiny_resnet (batch norm, a
#   skip add, dropout, global average pooling) trained with channels-last
#   on and off: the checkpoints agree within 1e-5 of each tensor's largest
#   value (parameters and batch norm's running statistics; 2e-7 measured
#   after 2 epochs of 3 steps). Not bit for
#   bit: the bias gradients and batch norm's per-channel sums run over an
#   (N H W, C) matrix in NHWC, another order of the same FP32/FP64 sums
#   (test_cuda_layout checks each op; every other result there is equal
#   bit for bit). SGD with momentum: Adam would divide the noise of a
#   zero gradient (a conv bias in front of batch norm) by its own size;
# - the same on two devices sharing the GPU with --sync-batch-norm;
# - the first line says channels-last; the checkpoint's stored cuDNN
#   choices name the layout (" nhwc" keys), an NCHW run's none;
# - --cuda-graph on with channels-last gives the bits of --cuda-graph off;
# - --precision bf16 with channels-last trains and agrees with bf16 NCHW
#   within 1e-2 (bf16 operands: a changed sum can flip a rounding); without
#   the option bf16 runs channels-last where every convolution's channels are
#   multiples of 8 (tiny_resnet), not LeNet (20 and 50 channels), and fp32 never;
# - a channels-last checkpoint is an NCHW checkpoint: it resumes on cpu:0
#   and on cuda:0 with channels-last off (the loss goes on falling), and
#   `dptrain eval` gives the same count with channels-last on and off;
# - refused in one line, nothing written: --channels-last on on cpu:0
#   (train and eval), a value other than on or off.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
small_data "$tmp/data" 192 100
loud=(train --data "$tmp/data" --limit 192 --batch-size 64 --optimizer momentum --lr 0.05 --seed 5)
common=("${loud[@]}" --quiet)
# close A B TOL: testing.sh's close_checkpoints of the runs A and B
close() { close_checkpoints "$tmp/$1.st" "$tmp/$2.st" "$3"; }
loss_of() { json_field "$(sed -n "${2}p" "$tmp/$1.jsonl")" train_loss; }
lenet=(--model lenet --epochs 2)
resnet=(--model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 2)

# on and off agree; the first line and the stored choices name the layout
for net in lenet resnet; do
  declare -n args=$net
  train_run "$net-on" cuda:0 "${args[@]}" --channels-last on --cuda-graph off
  train_run "$net-off" cuda:0 "${args[@]}" --channels-last off --cuda-graph off
  worst=$(close "$net-on" "$net-off" 1e-5) && pass || fail "$net: channels-last on vs off: $worst"
  echo "$net: channels-last on vs off, parameters within $worst of their largest value"
  ! same_tensors "$tmp/$net-on.st" "$tmp/$net-off.st" && pass \
    || fail "$net: on and off gave the same bits (did channels-last run at all?)"
  [[ $(grep -ac 'fp32 nhwc|forward' "$tmp/$net-on.st") -gt 0 && $(grep -ac ' nhwc|' "$tmp/$net-off.st") -eq 0 ]] \
    && pass || fail "$net: the stored cuDNN choices do not name the layout"
  [[ $(grep -c '"layout": "nhwc"' "$tmp/$net-on.jsonl") -eq 2 && $(grep -c '"layout": "nchw"' "$tmp/$net-off.jsonl") -eq 2 ]] \
    && pass || fail "$net: metrics lines naming the layout: $(tail -1 "$tmp/$net-on.jsonl")"
done
# the profile's header names the layout
"$bin" "${loud[@]}" "${lenet[@]}" --devices cuda:0 --epochs 1 --limit 96 --channels-last on --profile \
  --profile-steps 1,1 >"$tmp/profile.out" 2>&1
grep -q "^profile: mean ms per step over 1 step after 1 warm-up step, precision fp32, channels-last" \
  "$tmp/profile.out" && pass || fail "profile header: $(grep '^profile' "$tmp/profile.out")"
"$bin" "${loud[@]}" "${lenet[@]}" --devices cuda:0 --epochs 1 --limit 64 --channels-last on \
  >"$tmp/first.out" 2>&1
head -1 "$tmp/first.out" | grep -q "seed 5, precision fp32, channels-last, on \[cuda:0\]" && pass \
  || fail "first line: $(head -1 "$tmp/first.out")"
"$bin" "${loud[@]}" "${lenet[@]}" --devices cuda:0 --epochs 1 --limit 64 >"$tmp/first-off.out" 2>&1
head -1 "$tmp/first-off.out" | grep -q "seed 5, precision fp32, on \[cuda:0\]" && pass \
  || fail "first line, off: $(head -1 "$tmp/first-off.out")"

# two devices sharing the GPU, batch norm's statistics summed across them
train_run sync-on cuda:0,cuda:0 "${resnet[@]}" --sync-batch-norm --channels-last on
train_run sync-off cuda:0,cuda:0 "${resnet[@]}" --sync-batch-norm
worst=$(close sync-on sync-off 1e-5) && pass || fail "cuda:0,cuda:0 --sync-batch-norm: on vs off: $worst"

# a step graph with channels-last: the bits of the step as made
train_run resnet-graph cuda:0 "${resnet[@]}" --channels-last on --cuda-graph on
same_run resnet-graph resnet-on
train_run lenet-graph cuda:0 "${lenet[@]}" --channels-last on --cuda-graph on
same_run lenet-graph lenet-on

# bf16 with channels-last
train_run bf16-on cuda:0 "${lenet[@]}" --channels-last on --precision bf16
train_run bf16-off cuda:0 "${lenet[@]}" --channels-last off --precision bf16
worst=$(close bf16-on bf16-off 1e-2) && pass || fail "bf16: channels-last on vs off: $worst"
[[ $(grep -ac 'bf16 tensor-op nhwc|forward' "$tmp/bf16-on.st") -gt 0 ]] && pass || fail "bf16: no bf16 nhwc choices stored"
# bf16's default: on for a model whose convolutions' channels are multiples of 8 (tiny_resnet: 8 and 16; the
# faster side on an H200 for ResNet-18), off for LeNet's 20 and 50; the bits of the explicit setting, and the
# metrics and first line say which. FP32's default (off) is the first-off run's line above
train_run bf16-default cuda:0 "${lenet[@]}" --precision bf16
same_run bf16-default bf16-off
train_run resnet-bf16-on cuda:0 "${resnet[@]}" --precision bf16 --channels-last on
train_run resnet-bf16-default cuda:0 "${resnet[@]}" --precision bf16
same_run resnet-bf16-default resnet-bf16-on
train_run resnet-bf16-off cuda:0 "${resnet[@]}" --precision bf16 --channels-last off
! same_tensors "$tmp/resnet-bf16-default.st" "$tmp/resnet-bf16-off.st" && pass \
  || fail "tiny_resnet bf16's default gave the bits of channels-last off"
[[ $(grep -c '"layout": "nhwc"' "$tmp/resnet-bf16-default.jsonl") -eq 2 &&
   $(grep -c '"layout": "nchw"' "$tmp/bf16-default.jsonl") -eq 2 ]] && pass \
  || fail "bf16's default: metrics lines naming the layout: $(tail -1 "$tmp/resnet-bf16-default.jsonl")"
"$bin" "${loud[@]}" "${resnet[@]}" --devices cuda:0 --epochs 1 --limit 64 --precision bf16 >"$tmp/first-bf16.out" 2>&1
head -1 "$tmp/first-bf16.out" | grep -q "seed 5, precision bf16, channels-last, on \[cuda:0\]" && pass \
  || fail "first line, tiny_resnet bf16's default: $(head -1 "$tmp/first-bf16.out")"
"$bin" "${loud[@]}" "${lenet[@]}" --devices cuda:0 --epochs 1 --limit 64 --precision bf16 >"$tmp/first-lenet-bf16.out" 2>&1
head -1 "$tmp/first-lenet-bf16.out" | grep -q "seed 5, precision bf16, on \[cuda:0\]" && pass \
  || fail "first line, LeNet bf16's default: $(head -1 "$tmp/first-lenet-bf16.out")"

# the checkpoint is NCHW: it resumes on a CPU device and with channels-last off; eval agrees
for where in cpu:0 cuda:0; do
  name=resume-${where%%:*}
  cp "$tmp/resnet-on.st" "$tmp/$name.st"
  "$bin" "${common[@]}" "${resnet[@]}" --epochs 4 --devices "$where" --resume "$tmp/$name.st" --save "$tmp/$name.st" \
    --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 && pass || fail "$name: $(tail -2 "$tmp/$name.out")"
  awk -v a="$(loss_of resnet-on 1)" -v b="$(loss_of "$name" 2)" 'BEGIN { exit !(a != "" && b != "" && b < a) }' \
    && pass || fail "$name: epoch 4's loss $(loss_of "$name" 2) not below epoch 1's $(loss_of resnet-on 1)"
done
for cl in on off; do
  "$bin" eval --data "$tmp/data" --resume "$tmp/resnet-on.st" --devices cuda:0 --channels-last $cl \
    >"$tmp/eval-$cl.out" 2>&1 && pass || fail "eval --channels-last $cl: $(cat "$tmp/eval-$cl.out")"
done
grep -qE '^test acc: .*, channels-last$' "$tmp/eval-on.out" && pass || fail "eval on: $(cat "$tmp/eval-on.out")"
[[ -n "$(cut -d, -f1 "$tmp/eval-on.out")" && "$(cut -d, -f1 "$tmp/eval-on.out")" == "$(cut -d, -f1 "$tmp/eval-off.out")" ]] \
  && pass || fail "eval: on '$(cat "$tmp/eval-on.out")', off '$(cat "$tmp/eval-off.out")'"

# refusals: one line, non-zero, nothing written
refusal() { # refusal NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  "$bin" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 && $(wc -l <"$tmp/$name.err") -eq 1 ]] && grep -qE "$pattern" "$tmp/$name.err" \
    && pass || fail "$name: exit $status, stderr: $(cat "$tmp/$name.err")"
}
refusal cpu '^dptrain: train: --channels-last on: cpu:0 has no channels-last layout .*--channels-last off' \
  "${common[@]}" "${lenet[@]}" --devices cpu:0 --channels-last on --save "$tmp/never.st"
refusal value "^dptrain: train: --channels-last: 'yes' is not on or off$" \
  "${common[@]}" "${lenet[@]}" --devices cuda:0 --channels-last yes --save "$tmp/never.st"
refusal eval-cpu '^dptrain: eval: --channels-last on: cpu:0 has no channels-last layout' \
  eval --data "$tmp/data" --resume "$tmp/resnet-on.st" --devices cpu:0 --channels-last on
[[ ! -e "$tmp/never.st" ]] && pass || fail "a refused run wrote its checkpoint"
testing_finish cli_channels_last_emu
