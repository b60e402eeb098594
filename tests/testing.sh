# testing.sh - the shell side of testing.h, sourced by cli_*.sh tests: the
# binary and data paths, a temporary directory removed on exit, pass/fail
# counters, and a reader for one field of a --metrics JSON line.
# testing_finish NAME prints "NAME: N passed, N failed" and sets the status.
set -u
bin=${DPTRAIN_BIN:?DPTRAIN_BIN must point at the dptrain binary}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
# json_field LINE KEY: the value of KEY in a one-line JSON object
json_field() { sed -E "s/.*\"$2\": *([^,}]*).*/\1/" <<<"$1"; }
testing_finish() {
  echo "$1: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
