# shell_testing.sh - sourced by the tests/cli_*.sh scripts (the shell side of
# testing.h): strict variables, $bin (the dptrain binary, from ctest's
# DPTRAIN_BIN), $data (Fashion-MNIST), $tmp (a directory removed at exit),
# and pass / fail "message" counting into $passed / $failed.
set -u
bin=${DPTRAIN_BIN:?DPTRAIN_BIN must point at the dptrain binary}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
