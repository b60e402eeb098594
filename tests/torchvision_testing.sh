#!/usr/bin/env bash
# torchvision_testing.sh - what the tests against torchvision share
# (cli_torchvision*.sh source it after testing.sh): src (the source tree),
# py, step (tests/torchvision_step), DPTRAIN_BIN for
# tests/torchvision_check.py, and torchvision_needs NAME MODULE...: when a
# Python module is missing, one failed check naming it and the packages,
# NAME's summary, and the script ends.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=/usr/bin/python3
step="$(dirname "$bin")/tests/torchvision_step"
export DPTRAIN_BIN=$bin
torchvision_needs() {
  local name=$1
  shift
  local find_spec='import importlib.util as u, sys; m = [n for n in sys.argv[1:] if not u.find_spec(n)]
sys.exit("missing: " + " ".join(m) if m else 0)'
  if ! $py -c "$find_spec" "$@" 2>"$tmp/import.err"; then
    fail "python3-torch, -torchvision, -onnx, -opencv, -pil and -numpy are needed (scripts/setup.sh test):" \
      "$(tail -1 "$tmp/import.err")"
    testing_finish "$name"
    exit
  fi
}
