#!/usr/bin/env bash
# tsan.sh - builds dptrain with ThreadSanitizer in build-tsan/ and runs the
# tests labelled `threads` (the device layer, the collectives, the trainer
# with several devices). Any data race fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer -march=native" >/dev/null
cmake --build build-tsan -j "$(nproc)" >/dev/null
cd build-tsan
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest -L threads --output-on-failure
