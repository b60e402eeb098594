#!/usr/bin/env bash
# sanitize.sh - builds dptrain with a sanitizer and runs tests under it.
#   thread:  ThreadSanitizer, build-tsan/, the tests labelled `threads` (the
#            device layer, the collectives, the trainer on several devices)
#   address: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer,
#            build-asan/, the unit tests, the per-ISA runs and the command-line
#            tests labelled `asan` (the readers of untrusted input: images,
#            model files, checkpoints' bad-input checks, export); the long
#            end-to-end training scripts run in the plain build only (they
#            took 25 of the 30 minutes of a full ASan run)
# Any report fails the run. Both build without the CUDA backend (the plain
# build compiles and links it; its GPU tests skip without a GPU anyway).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  thread)  dir=build-tsan flags="-fsanitize=thread" select=(-L threads)
           export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ;;
  address) dir=build-asan flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" select=(-L 'unit|isa|asan')
           export ASAN_OPTIONS="detect_leaks=1" ;;
  *) echo "usage: scripts/sanitize.sh thread|address" >&2; exit 2 ;;
esac
# -O2 with line tables only (-g1): a report's stacks keep their functions, files and lines (the variable
# a report names comes from the instrumentation, not from debug information), at a fifth less compile time
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DDPTRAIN_CUDA=OFF \
  -DCMAKE_C_FLAGS="$flags -fno-omit-frame-pointer -march=native" >/dev/null
# only what the selected tests run (scripts/test_targets.sh)
targets=$(scripts/test_targets.sh "$dir" "${select[@]}")
cmake --build "$dir" -j "$(nproc)" --target $targets >/dev/null
cd "$dir"
ctest "${select[@]}" -j "$(nproc)" --output-on-failure
