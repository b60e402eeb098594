#!/usr/bin/env bash
# check_cuda_build.sh - builds dptrain with the CUDA backend (build-cuda/,
# -DDPTRAIN_CUDA=AUTO) where a CUDA toolkit is installed (our machines:
# /usr/local/cuda), so that every CUDA file is compiled and linked, and runs
# the tests that concern it: the `--devices cuda:N` messages (cli_cuda) and
# the GPU tests, which report themselves Skipped without a GPU (exit 77)
# and are never counted as passed. Without a toolkit it says so and stops
# with success: the plain build is the one without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA=AUTO >build-cuda.log 2>&1; then
  echo "check_cuda_build: configure failed (see build-cuda.log)" >&2
  exit 1
fi
if ! grep -q "dptrain: CUDA on" build-cuda.log; then
  echo "check_cuda_build: skipped: $(grep -o 'dptrain: CUDA off.*' build-cuda.log)"
  exit 0
fi
grep -o 'dptrain: CUDA on.*' build-cuda.log
cmake --build build-cuda -j "$(nproc)" >>build-cuda.log 2>&1 || { echo "check_cuda_build: build failed (see build-cuda.log)" >&2; exit 1; }
cd build-cuda
ctest -R 'cuda' --output-on-failure
