#!/usr/bin/env bash
# test_targets.sh BUILD CTEST_ARGS... - the CMake targets that the tests which
# `ctest CTEST_ARGS...` selects in the configured BUILD run, one per line: the
# command (the cli_*.sh and isa_train.sh scripts start it) and the test
# programs they name (test_cpu for test_cpu_avx2 too). scripts/sanitize.sh and
# scripts/check_arm64.sh build only these: not the examples, the benchmarks
# and the test programs that no selected test runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/test_targets.sh BUILD CTEST_ARGS...}
shift
tests=$(cd "$build" && ctest -N "$@" | sed -nE 's/^ *Test +#[0-9]+: +([^ ]+)$/\1/p')
[[ -n "$tests" ]] || { echo "test_targets.sh: ctest $* selects no test in $build" >&2; exit 1; }
echo dptrain_cli
for source in tests/test_*.c; do
  program=$(basename "$source" .c)
  [[ $program != test_cuda_* ]] && grep -qxE "$program(_[a-z0-9]+)?" <<<"$tests" && echo "$program"
done
exit 0
