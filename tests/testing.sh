# testing.sh - sourced by the cli_*.sh tests that use it: the binary, the
# data, a temporary directory removed at exit, pass/fail counters and a
# metrics-line field reader. (The shell side of testing.h.)
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
