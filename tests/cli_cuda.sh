#!/usr/bin/env bash
# cli_cuda.sh - `--devices cuda:N` from the command line, in whichever build
# this is: without CUDA one stderr line "this dptrain was built without
# CUDA", non-zero exit; with CUDA (the module lib/libdptrain_cuda.so in the
# build) on a machine without a GPU one line naming cuda:0 and what failed; with a GPU, cuda:99 names the missing GPU. In every
# build: devices on two GPUs where there are fewer, and a cpu/cuda mix, are refused with one line;
# without a GPU, --save of a stateful optimizer on cuda:0 fails with the
# same one line, and nothing is written (with a GPU it is allowed:
# test_cuda_staging checks the state it saves).
source "$(dirname "$0")/testing.sh"

# one_line_error WHAT PATTERN ARGS...: non-zero exit, one stderr line matching PATTERN
one_line_error() {
  local what=$1 pattern=$2
  shift 2
  "$bin" train --model lenet --data "$data" --epochs 1 --limit 256 --batch-size 64 "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 ]] && pass || fail "$what: exit status $status"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] && pass || fail "$what: want one stderr line, got: $(cat "$tmp/err")"
  grep -qE "$pattern" "$tmp/err" && pass || fail "$what: stderr '$(cat "$tmp/err")' lacks /$pattern/"
}

if [[ -e "$(dirname "$bin")/lib/libdptrain_cuda.so" ]]; then # a build with the CUDA module
  if nvidia-smi -L >/dev/null 2>&1; then
    one_line_error "absent GPU" "cuda:99: no such GPU" --devices cuda:99
  else
    one_line_error "no GPU" "^dptrain: cuda:0: (no CUDA GPU|no NVIDIA driver|the CUDA runtime)" --devices cuda:0
  fi
else
  one_line_error "no CUDA in this build" "this dptrain was built without CUDA" --devices cuda:0
fi
# two GPUs (one backend table each; cli_split and test_split check the trainer on such tables):
# refused with the first missing one's line where there are fewer than two
if [[ ! -e "$(dirname "$bin")/lib/libdptrain_cuda.so" ]]; then
  one_line_error "two GPUs, no CUDA" "this dptrain was built without CUDA" --devices cuda:0,cuda:1
elif ! nvidia-smi -L >/dev/null 2>&1; then
  one_line_error "two GPUs, none here" "^dptrain: cuda:0: (no CUDA GPU|no NVIDIA driver|the CUDA runtime)" \
    --devices cuda:0,cuda:1
elif [[ $(nvidia-smi -L | grep -c '^GPU') -eq 1 ]]; then
  one_line_error "two GPUs, one here" "cuda:1: no such GPU" --devices cuda:0,cuda:1
fi
one_line_error "cpu and cuda mixed" "not a count or a list" --devices cuda:0,cpu:1
one_line_error "cuda:N bad" "bad device" --devices cuda:x
if ! nvidia-smi -L >/dev/null 2>&1; then
  one_line_error "--save momentum without a GPU" "built without CUDA|cuda:0: " \
    --devices cuda:0 --optimizer momentum --save "$tmp/ck.safetensors"
  [[ ! -e "$tmp/ck.safetensors" ]] && pass || fail "a checkpoint was written after an error"
fi
testing_finish cli_cuda
