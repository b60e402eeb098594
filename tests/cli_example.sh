#!/usr/bin/env bash
# cli_example.sh - the from-scratch example (examples/multi_device_lenet.c)
# builds, runs briefly on 2 devices and prints the book's summary line.
set -u
example=$(dirname "${DPTRAIN_BIN:?}")/multi_device_lenet
out=$("$example" 2 256 0.5 1 5000 2>&1)
status=$?
echo "$out"
passed=0 failed=0
[[ $status -eq 0 ]] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: exit $status" >&2; }
if grep -qE '^test acc: [0-9.]+, [0-9.]+ sec/epoch on \[cpu:0, cpu:1\]$' <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: no summary line" >&2
fi
"$example" 0 >/dev/null 2>&1 && { failed=$((failed + 1)); echo "FAILED: 0 devices accepted" >&2; } || passed=$((passed + 1))
echo "cli_example: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
