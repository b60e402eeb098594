#!/usr/bin/env bash
# cli_checkpoint.sh - `dptrain train --save/--resume`, `dptrain eval`,
# `dptrain inspect` and tools/read_checkpoint.py, on the real Fashion-MNIST
# (600 training images, 2 devices: seconds per run).
# - 2 epochs straight and 1 epoch + save + resume + 1 more epoch end in
#   byte-identical checkpoint files (tensors and metadata), with allreduce
#   and with the parameter server; the resumed run prints and records the
#   same epoch-2 numbers;
# - eval reports the test accuracy the training recorded, to the image;
# - tools/read_checkpoint.py (numpy only; torch is made unimportable) prints
#   exactly what `dptrain inspect` prints: names, shapes, float64 sums;
# - refusals, one line each, exit 1, nothing written: another model (naming
#   the tensor), a truncated / corrupt / padded file, another batch size,
#   seed or --limit, a mid-epoch checkpoint; a warning for another lr;
# - a checkpoint that already has --epochs epochs: nothing trained, its
#   accuracy reported, the file untouched;
# - under mpirun (when built with MPI): 2 ranks x 1 device resume to the
#   same tensors as 1 process x 2 devices.
source "$(dirname "$0")/testing.sh"
reader="$(dirname "$0")/../tools/read_checkpoint.py"
field() { sed -E "s/.*\"$1\": *([^,}]*).*/\1/" <<<"$2"; }
# A refusal: exit status 1, exactly one line on stderr, containing $2.
refused() {
  local label=$1 part=$2 status=$3 err=$4
  [[ $status -eq 1 && $(wc -l <"$err") -eq 1 ]] && grep -qF -- "$part" "$err" && pass \
    || fail "$label: status $status, stderr: $(head -c 400 "$err") (expected one line with '$part')"
}

common=(train --data "$data" --model lenet-paddle --limit 600 --batch-size 64 --lr 0.1 --seed 5 --devices 2)

# --- 2 epochs straight vs 1 + resume + 1 --------------------------------------------------
"$bin" "${common[@]}" --epochs 2 --save "$tmp/a.st" --metrics "$tmp/a.jsonl" >"$tmp/a.out" 2>&1 \
  && pass || fail "2 epochs: $(tail -3 "$tmp/a.out")"
"$bin" "${common[@]}" --epochs 1 --save "$tmp/b.st" >"$tmp/b1.out" 2>&1 && pass || fail "1 epoch"
cp "$tmp/b.st" "$tmp/one_epoch.st"
cmp -s "$tmp/a.st" "$tmp/b.st" && fail "1-epoch and 2-epoch checkpoints are identical" || pass
"$bin" "${common[@]}" --epochs 2 --resume "$tmp/b.st" --save "$tmp/b.st" --metrics "$tmp/b.jsonl" \
  >"$tmp/b2.out" 2>&1 && pass || fail "resume: $(tail -3 "$tmp/b2.out")"
cmp "$tmp/a.st" "$tmp/b.st" && pass || fail "2 straight epochs and 1 + resume + 1 differ"
grep -q "^epoch 2/2: " "$tmp/b2.out" && ! grep -q "^epoch 1/2" "$tmp/b2.out" && pass \
  || fail "resumed run should train epoch 2 only: $(cat "$tmp/b2.out")"
a2=$(sed -n 2p "$tmp/a.jsonl") b2=$(cat "$tmp/b.jsonl")
for key in epoch train_loss train_acc test_acc; do
  [[ -n "$(field $key "$a2")" && "$(field $key "$a2")" == "$(field $key "$b2")" ]] && pass \
    || fail "epoch 2 $key: straight $(field $key "$a2"), resumed $(field $key "$b2")"
done
[[ -z $(find "$tmp" -name '*.tmp.*') ]] && pass || fail "temporary files left: $(ls "$tmp")"

# --- eval ---------------------------------------------------------------------------------
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices 2 >"$tmp/eval.out" 2>"$tmp/eval.err" && pass \
  || fail "eval: $(cat "$tmp/eval.err")"
line=$(cat "$tmp/eval.out")
correct=$(sed -E 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\1/' <<<"$line")
total=$(sed -E 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\2/' <<<"$line")
acc=$(awk -v c="$correct" -v t="$total" 'BEGIN { printf "%.9g", c / t }')
[[ "$line" == "test acc: "*"on 10000 images, model lenet-paddle, epoch 2, $tmp/a.st" ]] && pass \
  || fail "eval output: $line"
[[ "$acc" == "$(field test_acc "$a2")" ]] && pass || fail "eval accuracy $acc, training recorded $(field test_acc "$a2")"
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices 1 --batch-size 333 >"$tmp/eval1.out" 2>&1
grep -qF "($correct/10000 correct)" "$tmp/eval1.out" && pass || fail "eval on 1 device: $(cat "$tmp/eval1.out")"

# --- numpy reader vs dptrain inspect ------------------------------------------------------
mkdir -p "$tmp/notorch/torch"
echo 'raise ImportError("read_checkpoint.py must not import torch")' >"$tmp/notorch/torch/__init__.py"
PYTHONPATH="$tmp/notorch" /usr/bin/python3 "$reader" "$tmp/a.st" >"$tmp/py.out" 2>"$tmp/py.err" && pass \
  || fail "read_checkpoint.py: $(cat "$tmp/py.err")"
"$bin" inspect "$tmp/a.st" >"$tmp/c.out" 2>&1 && pass || fail "inspect: $(cat "$tmp/c.out")"
diff "$tmp/py.out" "$tmp/c.out" >"$tmp/diff.out" && pass || fail "numpy and dptrain disagree: $(head "$tmp/diff.out")"
grep -qE "^  conv1.weight \[20, 1, 5, 5\] sum -?[0-9]" "$tmp/c.out" && grep -q "^  optimizer = sgd" "$tmp/c.out" \
  && grep -q "^  epochs_completed = 2" "$tmp/c.out" && pass || fail "inspect output: $(head -30 "$tmp/c.out")"
[[ $(/usr/bin/python3 "$reader" "$tmp/a.st" fc.bias | wc -l) -eq 10 ]] && pass || fail "reader: fc.bias values"
# The sums are not trivially equal: the 1-epoch checkpoint's differ.
"$bin" inspect "$tmp/one_epoch.st" | grep "conv1.weight" >"$tmp/one.sum"
grep "conv1.weight" "$tmp/c.out" | cmp -s - "$tmp/one.sum" && fail "conv1.weight sum unchanged by epoch 2" || pass

# --- refusals -----------------------------------------------------------------------------
"$bin" eval --model lenet --resume "$tmp/a.st" --data "$data" --devices 1 >/dev/null 2>"$tmp/err"
refused "eval, other model" "tensor 'conv1.weight' has shape [20, 1, 5, 5], model lenet expects [20, 1, 3, 3]" $? "$tmp/err"
"$bin" train --data "$data" --model lenet --limit 600 --batch-size 64 --lr 0.1 --seed 5 --devices 2 --epochs 3 \
  --resume "$tmp/a.st" --save "$tmp/never.st" --quiet >/dev/null 2>"$tmp/err"
refused "train, other model" "'conv1.weight'" $? "$tmp/err"
head -c 5000 "$tmp/a.st" >"$tmp/cut.st"
"$bin" eval --resume "$tmp/cut.st" --data "$data" >/dev/null 2>"$tmp/err"
refused "eval, truncated" "truncated" $? "$tmp/err"
"$bin" "${common[@]}" --epochs 3 --resume "$tmp/cut.st" --save "$tmp/never.st" >/dev/null 2>"$tmp/err"
refused "train, truncated" "$tmp/cut.st" $? "$tmp/err"
/usr/bin/python3 "$reader" "$tmp/cut.st" >/dev/null 2>"$tmp/err"
refused "reader, truncated" "do not fit shape" $? "$tmp/err"
cp "$tmp/a.st" "$tmp/bad.st" && printf 'x' | dd of="$tmp/bad.st" bs=1 seek=8 conv=notrunc 2>/dev/null
"$bin" inspect "$tmp/bad.st" >/dev/null 2>"$tmp/err"
refused "corrupt header" "does not start with '{'" $? "$tmp/err"
cp "$tmp/a.st" "$tmp/long.st" && printf 'junk' >>"$tmp/long.st"
"$bin" eval --resume "$tmp/long.st" --data "$data" >/dev/null 2>"$tmp/err"
refused "trailing bytes" "4 bytes after the last tensor" $? "$tmp/err"
/usr/bin/python3 "$reader" "$tmp/long.st" >/dev/null 2>"$tmp/err"
refused "reader, trailing bytes" "4 bytes after the last tensor" $? "$tmp/err"
for opt in "--batch-size 32:--batch-size 64" "--seed 6:--seed 5" "--limit 500:training-set size (--limit) 600"; do
  "$bin" "${common[@]}" ${opt%%:*} --epochs 3 --resume "$tmp/a.st" --save "$tmp/never.st" >/dev/null 2>"$tmp/err"
  refused "resume with ${opt%%:*}" "saved with ${opt#*:}" $? "$tmp/err"
done
/usr/bin/python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
assert b.count(b"\"loader.batch\":\"0\"") == 1
open(sys.argv[2], "wb").write(b.replace(b"\"loader.batch\":\"0\"", b"\"loader.batch\":\"3\""))' "$tmp/a.st" "$tmp/mid.st"
"$bin" "${common[@]}" --epochs 3 --resume "$tmp/mid.st" --save "$tmp/never.st" >/dev/null 2>"$tmp/err"
refused "mid-epoch checkpoint" "stops inside epoch 3 (batch 3)" $? "$tmp/err"
"$bin" eval --data "$data" >/dev/null 2>"$tmp/err"
refused "eval without --resume" "--resume FILE is required" $? "$tmp/err"
"$bin" "${common[@]}" --epochs 1 --save "$tmp/no/such/dir/x.st" >/dev/null 2>"$tmp/err"
refused "--save into a missing directory" "--save $tmp/no/such/dir/x.st" $? "$tmp/err"
[[ ! -e "$tmp/never.st" ]] && pass || fail "a refused resume wrote its --save file"

# Another lr: a warning, then training goes on from the checkpoint.
"$bin" "${common[@]}" --lr 0.05 --epochs 3 --resume "$tmp/a.st" --save "$tmp/lr.st" >"$tmp/lr.out" 2>"$tmp/lr.err" \
  && grep -q "warning: .*saved with lr 0.100000001" "$tmp/lr.err" && grep -q "^epoch 3/3" "$tmp/lr.out" \
  && grep -q "^  optimizer.lr = 0.0500000007" <("$bin" inspect "$tmp/lr.st") && pass \
  || fail "resume with another lr: $(cat "$tmp/lr.err" "$tmp/lr.out")"

# Nothing left to train: the saved model's accuracy, the file untouched.
cp "$tmp/a.st" "$tmp/a_copy.st"
"$bin" "${common[@]}" --epochs 2 --resume "$tmp/a.st" --save "$tmp/a.st" >"$tmp/done.out" 2>&1 && pass \
  || fail "resume of a finished run: $(cat "$tmp/done.out")"
grep -q "has 2 epochs, --epochs 2: nothing to train" "$tmp/done.out" \
  && grep -qF "test acc: $(awk -v c="$correct" 'BEGIN { printf "%.4f", c / 10000 }') on 10000 images" "$tmp/done.out" \
  && pass || fail "finished run output: $(cat "$tmp/done.out")"
cmp -s "$tmp/a.st" "$tmp/a_copy.st" && pass || fail "the finished checkpoint was rewritten"

# --- the parameter server resumes exactly too ------------------------------------------------
"$bin" "${common[@]}" --sync ps --epochs 2 --save "$tmp/ps_a.st" --quiet >/dev/null 2>&1
"$bin" "${common[@]}" --sync ps --epochs 1 --save "$tmp/ps_b.st" --quiet >/dev/null 2>&1
"$bin" "${common[@]}" --sync ps --epochs 2 --resume "$tmp/ps_b.st" --save "$tmp/ps_b.st" --quiet >/dev/null 2>&1
[[ -s "$tmp/ps_a.st" ]] && cmp "$tmp/ps_a.st" "$tmp/ps_b.st" && pass || fail "--sync ps: straight and resumed differ"

# --- MPI: 2 ranks x 1 device resume to 1 process x 2 devices' tensors ---------------------------
if command -v mpirun >/dev/null; then
  # Open MPI leaks its own allocations at exit: under scripts/sanitize.sh
  # address, LeakSanitizer is off for the mpirun runs only (as for cli_mpi).
  mpi=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" mpirun --allow-run-as-root --oversubscribe -np 2)
  if "${mpi[@]}" "$bin" "${common[@]}" --devices 1 --epochs 1 --save "$tmp/m.st" >"$tmp/m.out" 2>&1; then
    "${mpi[@]}" "$bin" "${common[@]}" --devices 1 --epochs 2 --resume "$tmp/m.st" --save "$tmp/m.st" \
      >"$tmp/m2.out" 2>&1 && pass || fail "mpirun resume: $(tail -3 "$tmp/m2.out")"
    diff <("$bin" inspect "$tmp/a.st" | grep -vE "^  (devices|ranks) = ") \
         <("$bin" inspect "$tmp/m.st" | grep -vE "^  (devices|ranks) = ") >"$tmp/mdiff" && pass \
      || fail "2 ranks resumed vs 2 devices straight: $(head "$tmp/mdiff")"
    grep -q "^  ranks = 2" <("$bin" inspect "$tmp/m.st") && pass || fail "ranks not recorded"
  elif grep -q "without MPI" "$tmp/m.out"; then
    echo "cli_checkpoint: this dptrain has no MPI: the mpirun part is skipped"
  else
    fail "mpirun 1 epoch: $(tail -3 "$tmp/m.out")"
  fi
fi

echo "cli_checkpoint: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
