#!/usr/bin/env bash
# check_cuda_build.sh [BUILD] [--no-tests] - the CUDA backend in the plain build (BUILD,
# default build/, configured here if it is not yet): where a CUDA toolkit is
# installed (our machines, CI's: /usr/local/cuda), -DDPTRAIN_CUDA=AUTO (the
# default) must have found it and built the module lib/libdptrain_cuda.so,
# so that every CUDA file is compiled and linked; the module and the
# emulator export only their entry point (nm -D --defined-only, weak symbols
# included: module_exports.map keeps a linked-in C++ runtime local), and
# neither dptrain nor libdptrain.so links a CUDA library (they dlopen the
# module on demand). Then the tests that concern
# it: the `--devices cuda:N` messages (cli_cuda), the module's loading
# (cli_cuda_module) and the GPU tests, which report themselves Skipped
# without a GPU (exit 77) and are never counted as passed (--no-tests: not
# here, for a caller that runs ctest over BUILD next, as `make test` does:
# the same tests of the same build). Without a
# toolkit, or in a build configured with -DDPTRAIN_CUDA=OFF, it says so and
# stops with success.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
run_tests=1
[[ "${2:-}" == --no-tests ]] && run_tests=0
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build.log" 2>&1 ||
    { echo "check_cuda_build: configure failed (see $build.log)" >&2; exit 1; }
fi
setting=$(sed -n 's/^DPTRAIN_CUDA:[A-Z]*=//p' "$build/CMakeCache.txt")
toolkit=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ "$setting" == OFF ]]; then
  echo "check_cuda_build: skipped: $build is configured with -DDPTRAIN_CUDA=OFF"
  exit 0
fi
cmake --build "$build" -j "$(nproc)" >"$build/check_cuda_build.log" 2>&1 ||
  { echo "check_cuda_build: build failed (see $build/check_cuda_build.log)" >&2; exit 1; }
module=$build/lib/libdptrain_cuda.so
if [[ ! -f "$module" ]]; then
  if [[ -n "$toolkit" ]]; then
    echo "check_cuda_build: FAILED: $toolkit is here but $build has no CUDA module (DPTRAIN_CUDA=$setting)" >&2
    exit 1
  fi
  echo "check_cuda_build: skipped: no CUDA toolkit (nvcc) here"
  exit 0
fi
failed=0
# the dynamic symbols a file defines (weak and unique ones included, versions stripped), one space after each
exports() { nm -D --defined-only "$1" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u | tr '\n' ' '; }
exported=$(exports "$module")
[[ "$exported" == "dp_cuda_module_entry " ]] || { echo "check_cuda_build: FAILED: the module exports: $exported" >&2; failed=1; }
for f in "$build/dptrain" "$build"/lib/libdptrain.so; do
  if readelf -d "$f" | grep -qE 'NEEDED.*lib(cudart|cublas|cudnn)'; then
    echo "check_cuda_build: FAILED: $f links a CUDA library" >&2
    failed=1
  fi
done
echo "check_cuda_build: $module built (nvcc: ${toolkit:-$(sed -n 's/^DPTRAIN_NVCC:[A-Z]*=//p' "$build/CMakeCache.txt")})"
emulator="$build/lib/libdptrain_cuda_emu.so" # the CUDA emulator (tests/cuda_emulator/): its tests run in the plain ctest
if [[ ! -f "$emulator" ]]; then
  echo "check_cuda_build: FAILED: $build has the CUDA module but not the CUDA emulator ($emulator)" >&2
  failed=1
elif [[ "$(exports "$emulator")" != "dp_cuda_module_entry " ]]; then
  echo "check_cuda_build: FAILED: the emulator exports more than dp_cuda_module_entry: $(exports "$emulator" | cut -c1-300)" >&2
  failed=1
fi
if [[ $run_tests -eq 1 ]]; then
  (cd "$build" && ctest -R 'cuda' -E 'emu' --output-on-failure) || failed=1
else
  echo "check_cuda_build: its tests (ctest -R cuda -E emu) left to the caller's ctest over $build"
fi
exit $failed
