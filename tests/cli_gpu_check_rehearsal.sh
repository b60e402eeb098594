#!/usr/bin/env bash
# cli_gpu_check_rehearsal.sh - scripts/gpu_check.sh's one-call GPU check,
# rehearsed here without a GPU (`gpu_check.sh rehearse BUILD`: the CUDA
# emulator, tiny sizes, PyTorch on the CPU), so that the script's own logic
# is tested without a GPU: every step must pass and the summary must carry
# each step's line with its figures parsed (numbers where numbers belong),
# as a report of a GPU run quotes them. The figures themselves mean nothing.
# Skipped (77) in a build without CUDA or without PyTorch.
source "$(dirname "$0")/testing.sh"
build=$(dirname "$bin")
root=$(cd "$DPTRAIN_TEST_DIR/.." && pwd)
OUT=$tmp/out "$root/scripts/gpu_check.sh" rehearse "$build" >"$tmp/log" 2>&1
status=$?
if [[ $status -eq 77 ]]; then
  grep -m1 SKIPPED "$tmp/log"
  exit 77
fi
[[ $status -eq 0 ]] && pass || fail "gpu_check.sh rehearse: exit status $status: $(grep -E 'FAIL|NOT RUN' "$tmp/log" | head -3)"
summary=$tmp/out/summary.txt
[[ -s $summary ]] && pass || fail "no summary.txt"
num='[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?'
# want PATTERN: one summary line matches
want() { grep -qE "$1" "$summary" && pass || fail "summary lacks /$1/: $(cat "$summary")"; }
want "^  GPU: CUDA emulator"
want "^  build: not rebuilt \(rehearsal on "
want "^  GPU tests: 100% tests passed, 0 tests failed out of 2$" # test_cuda_peer, cli_cuda_gpu
want "^  cli_cuda, cli_cuda_module: 100% tests passed, 0 tests failed out of 2$"
want "^  default devices: \[cuda:0\] \(default: the GPU\)"
want "^  LeNet 2 epochs on cuda:0: test accuracy $num \(>= 0\), median epoch ${num}s$"
want "^  NCCL \(1 member\) on cuda:0: train_loss $num vs host $num, same checkpoint bits$"
want "^  benchmark: LeNet median \(1 pairs, epochs 2-2\): dptrain $num s/epoch, pytorch eager $num s/epoch, speed-up ${num}x$"
want "^  benchmark: pytorch torch.compile: (did not run \(.+\)|$num s/epoch)"
want "^  benchmark: ResNet-18 \(batch 32, one run each; dptrain ran lenet\): dptrain $num images/sec \(cuDNN heuristic algorithms\), $num images/sec \(DPTRAIN_CUDNN_ALGO=fixed\), pytorch eager $num images/sec$"
want "^  benchmark: ResNet-18 cuDNN algorithms: heuristic $num images/sec, fixed $num images/sec, heuristic/fixed ${num}x$"
want "^  benchmark: ResNet-18 cuDNN choices \(heuristic run\): [1-9][0-9]* from the heuristics, 0 the fixed fallback$"
! grep -qE 'FAIL|NOT RUN|failed:|\?' "$summary" && pass || fail "summary: $(grep -E 'FAIL|NOT RUN|failed:|\?' "$summary")"
# its ctest kept its records apart (not in the build's Testing/, which an outer ctest may be writing)
[[ -d $tmp/out/ctest/Testing/Temporary ]] && pass || fail "the rehearsal's ctest wrote no records in its own folder"
testing_finish cli_gpu_check_rehearsal
