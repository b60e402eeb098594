#!/usr/bin/env bash
# torchvision_testing.sh - what the tests against torchvision share
# (cli_torchvision*.sh source it after testing.sh): src (the source tree),
# py, step (tests/torchvision_step), DPTRAIN_BIN for
# tests/torchvision_check.py, torchvision_needs NAME MODULE...: when a
# Python module is missing, one failed check naming it and the packages,
# NAME's summary, and the script ends; and torchvision_make_and_compare
# NAME... (below): the networks made, imported, run and compared.
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

# torchvision_make_and_compare NAME...: torchvision_check.py make (seeded weights, images, the
# reference), then per NAME the import of its state_dict, tests/torchvision_step (the networks
# of GRAD_SIZES), `predict --json --logits` of the PNGs and `export --onnx` ($tmp/NAME.onnx),
# and torchvision_check.py compare: one pass or fail per step and per NAME's comparison.
torchvision_make_and_compare() {
  local name ck
  $py "$src/tests/torchvision_check.py" make "$tmp" "$@" >"$tmp/make.out" 2>&1 && pass \
    || fail "torchvision_check.py make: $(tail -3 "$tmp/make.out")"
  sed 's/^/  /' "$tmp/make.out"
  for name in "$@"; do
    ck="$tmp/$name.safetensors"
    $py "$src/tools/import_torchvision.py" "$tmp/$name.pth" "$src/models/$name-imagenet.cfg" "$ck" \
      >"$tmp/import.out" 2>&1 && pass || { fail "$name: import: $(cat "$tmp/import.out")"; continue; }
    if [[ -e "$tmp/$name-input.safetensors" ]]; then # the networks whose gradients are checked
      "$step" "$tmp/$name-small.cfg" "$ck" "$tmp/$name-input.safetensors" "$tmp/$name-out.safetensors" \
        2>"$tmp/err" && pass || fail "$name: torchvision_step: $(cat "$tmp/err")"
    fi
    "$bin" predict --resume "$ck" --json --logits --devices 2 "$tmp/$name-0.png" "$tmp/$name-1.png" \
      >"$tmp/$name-predict.jsonl" 2>"$tmp/err" && pass || fail "$name: predict: $(cat "$tmp/err")"
    "$bin" export --resume "$ck" --onnx "$tmp/$name.onnx" 2>"$tmp/err" && pass \
      || fail "$name: export: $(cat "$tmp/err")"
  done
  $py "$src/tests/torchvision_check.py" compare "$tmp" "$@" >"$tmp/compare.out" 2>&1
  sed 's/^/  /' "$tmp/compare.out"
  for name in "$@"; do
    grep -qx "$name: ok" "$tmp/compare.out" && pass || fail "$name: $(grep "^$name: " "$tmp/compare.out")"
  done
}
