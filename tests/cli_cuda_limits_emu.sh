#!/usr/bin/env bash
# cli_cuda_limits_emu.sh - what dptrain says when a run does not fit a GPU,
# on the CUDA emulator (whose cuDNN refuses a tensor of 2^31 elements or
# more, as cuDNN does, and whose memory DPTRAIN_CUDA_EMU_MEMORY limits):
# - a convolution whose output would pass cuDNN's 2^31 - 1 elements per
#   tensor (a 1x1 conv of 43,000 filters on 64 images of 28x28: 2.16e9) is
#   refused before cuDNN is asked, in one line naming the GPU, the
#   convolution with its shapes and the batch that fits per device (a
#   smaller --batch-size, or more devices); half that batch runs the step's
#   convolution (no refusal);
# - GPU memory that runs out: one line naming the GPU, what needed the
#   memory and what to change;
# - the metrics of a GPU run carry device_mem_peak_bytes (the most memory
#   the backend held), those of a CPU run do not.
# Skipped (77) in a build without CUDA.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
small_data "$tmp/data" 128 64
cat >"$tmp/wide.cfg" <<'CFG'
[net]
name = wide
channels = 1
height = 28
width = 28

[conv]
name = wide
filters = 43000
size = 1

[global_avgpool]

[flatten]

[linear]
name = fc
out = 10
CFG

# one_line NAME PATTERN ARGS...: exit 1..127, one stderr line matching PATTERN
one_line() {
  local what=$1 pattern=$2
  shift 2
  "$bin" train --data "$tmp/data" --epochs 1 --quiet "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 ]] && pass || fail "$what: exit status $status ($(tail -2 "$tmp/err"))"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] && pass || fail "$what: want one stderr line, got: $(cat "$tmp/err")"
  grep -qE -- "$pattern" "$tmp/err" && pass || fail "$what: stderr '$(cat "$tmp/err")' lacks /$pattern/"
}

# 64 x 43000 x 28 x 28 = 2,157,568,000 elements: at most 2147483647 / 33,712,000 = 63 images fit
one_line "a tensor past cuDNN's limit" \
  "^dptrain: cuda:0: model wide: layer 1 \(conv\): conv of x 64x1x28x28 by w 43000x1x1x1 \(pad 0x0, stride 1x1, dilation 1x1, groups 1\): its output holds 2157568000 elements, past cuDNN's limit of 2\^31 - 1 per tensor: use a smaller --batch-size \(at most 63 images per device\), or more devices$" \
  --model "$tmp/wide.cfg" --batch-size 64 --devices cuda:0
# the same convolution for 32 images is no refusal: it runs (and then the GPU's memory, 4 GiB, runs out
# for its 1.08e9-float output: the out-of-memory line, not cuDNN's)
one_line "the same convolution, half the batch" \
  "^dptrain: cuda:0: model wide: layer 1 \(conv\): conv: out of GPU memory for its output \[32, 43000, 28, 28\] \(1078784000 floats, 4115\.2 MiB, and as much for its gradient\): use a smaller --batch-size, or more devices$" \
  --model "$tmp/wide.cfg" --batch-size 32 --devices cuda:0
grep -q "cuDNN" "$tmp/err" && fail "batch 32: cuDNN refused it: $(cat "$tmp/err")" || pass

# out of GPU memory: LeNet in 3 MB
DPTRAIN_CUDA_EMU_MEMORY=3000000 one_line "out of GPU memory" \
  "^dptrain: cuda:0: out of GPU memory: [a-z' ]+ needs [0-9]+ bytes \([0-9.]+ MiB\) beside the [0-9.]+ MiB dptrain holds on it, [0-9.]+ of the GPU's 2\.9 MiB free: use a smaller --batch-size, or more devices$" \
  --model lenet --batch-size 64 --devices cuda:0

# the peak of device memory in a GPU run's metrics (at least LeNet's parameters and the dataset's copy), not in a CPU run's
for dev in cuda:0 cpu:0; do
  "$bin" train --data "$tmp/data" --epochs 1 --quiet --model lenet --batch-size 64 --devices $dev \
    --metrics "$tmp/$dev.jsonl" >"$tmp/out" 2>&1 && pass || fail "lenet on $dev: $(tail -2 "$tmp/out")"
done
peak=$(json_field "$(tail -1 "$tmp/cuda:0.jsonl")" device_mem_peak_bytes)
[[ $peak =~ ^[0-9]+$ ]] && ((peak >= 4 * 61706 + 128 * 784)) && pass || fail "cuda:0: device_mem_peak_bytes '$peak' in $(tail -1 "$tmp/cuda:0.jsonl")"
grep -q device_mem_peak "$tmp/cpu:0.jsonl" && fail "cpu:0's metrics count device memory: $(tail -1 "$tmp/cpu:0.jsonl")" || pass
testing_finish cli_cuda_limits_emu
