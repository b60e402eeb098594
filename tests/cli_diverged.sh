#!/usr/bin/env bash
# cli_diverged.sh - a run whose model becomes NaN or infinite stops before
# it saves (src/trainer/fit_finite.c), on a small cut of Fashion-MNIST with
# tests/models/tiny_resnet.cfg and a learning rate far too large (its batch
# norm's running variance overflows in the first epoch):
# - exit status 9 and one line naming the epoch, the step, how many floats
#   and the first tensor, and what may help; no --save file written; the
#   diverged epoch's line is in the metrics;
# - resumed from a good checkpoint into divergence with the same --save:
#   the file keeps its bytes and the line says which epoch it holds;
# - --save-every-steps: the check comes before the step's checkpoint;
# - 2 ranks under mpirun: both stop (exit 9, rank 0's line), nothing saved;
#   `dptrain launch --restarts 2` does not run it again (status 9 is no
#   fault);
# - a run that does not diverge is not stopped (every other test).
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300
model="$(dirname "$0")/models/tiny_resnet.cfg"
base=(train --model "$model" --data "$tmp/small" --batch-size 50 --seed 2 --devices 1)
# one_line_9 NAME: $tmp/NAME.out/.err of a run that must have ended with status 9 and one line
one_line_9() {
  local rc=$1 name=$2
  [[ $rc -eq 9 && $(wc -l <"$tmp/$name.err") -eq 1 ]] && grep -q "the training diverged: [0-9]* of the model's 4042 floats are NaN or infinite (the first in [a-z_.0-9]*), and no checkpoint is written from them" "$tmp/$name.err" \
    && grep -q "a smaller --lr, --warmup-epochs or --clip-grad-norm may help" "$tmp/$name.err" \
    && pass || fail "$name: exit $rc, stderr: $(cat "$tmp/$name.err")"
}

"$bin" "${base[@]}" --epochs 3 --lr 1e4 --save "$tmp/new.st" --metrics "$tmp/new.jsonl" >"$tmp/new.out" 2>"$tmp/new.err"
one_line_9 $? new
grep -q "^dptrain: epoch 1, step 24 of 24: " "$tmp/new.err" && pass || fail "where: $(cat "$tmp/new.err")"
[[ ! -e $tmp/new.st ]] && pass || fail "a diverged run wrote its checkpoint"
[[ $(wc -l <"$tmp/new.jsonl") -eq 1 ]] && pass || fail "metrics: $(cat "$tmp/new.jsonl")"

# resumed into divergence: the good file stays as it was
"$bin" "${base[@]}" --epochs 1 --lr 0.05 --save "$tmp/good.st" --quiet >/dev/null 2>&1 && pass || fail "a good epoch"
cp "$tmp/good.st" "$tmp/good.bak"
"$bin" train --resume "$tmp/good.st" --epochs 3 --lr 1e4 --devices 1 --save "$tmp/good.st" >"$tmp/resumed.out" 2>"$tmp/resumed.err"
rc=$?
grep -v "^dptrain: warning:" "$tmp/resumed.err" >"$tmp/r.err"; mv "$tmp/r.err" "$tmp/resumed.err"
one_line_9 $rc resumed
grep -q "epoch 2, step 24 of 24: .*; $tmp/good.st holds epoch 1, the last checkpoint written before" "$tmp/resumed.err" \
  && pass || fail "resume: $(cat "$tmp/resumed.err")"
cmp -s "$tmp/good.st" "$tmp/good.bak" && pass || fail "the resumed file was replaced"

# inside an epoch: checked before the step's checkpoint
"$bin" "${base[@]}" --epochs 2 --lr 1e4 --save "$tmp/steps.st" --save-every-steps 5 >"$tmp/steps.out" 2>"$tmp/steps.err"
one_line_9 $? steps
grep -q "epoch 1, step 5 of 24: " "$tmp/steps.err" && [[ ! -e $tmp/steps.st ]] && pass \
  || fail "--save-every-steps: $(cat "$tmp/steps.err"), file: $(ls "$tmp/steps.st" 2>&1)"

# 2 ranks: every rank finds the same floats and stops; the launcher does not restart
if command -v mpirun >/dev/null; then
  ranks=(train --model "$model" --data "$tmp/small" --batch-size 50 --seed 2 --devices 1 --epochs 3 --lr 1e8)
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${ranks[@]}" --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>"$tmp/ranks.err"
  rc=$?
  [[ $rc -eq 9 && $(grep -c "^dptrain: epoch 1, step 24 of 24: the training diverged" "$tmp/ranks.err") -eq 1 && ! -e $tmp/ranks.st ]] \
    && pass || fail "2 ranks: exit $rc, $(grep dptrain "$tmp/ranks.err")"
  "$bin" launch --np 2 --restarts 2 --log-dir "$tmp/logs" -- "${ranks[@]}" --save "$tmp/launch.st" >"$tmp/launch.out" 2>&1
  rc=$?
  [[ $rc -eq 9 ]] && grep -q "exit status 9 (the training diverged)" "$tmp/launch.out" \
    && grep -q "not restarted (the training diverged, exit status 9, is not a fault)" "$tmp/launch.out" \
    && pass || fail "launch --restarts 2: exit $rc, $(cat "$tmp/launch.out")"
else
  fail "mpirun not found (openmpi-bin)"
fi
testing_finish cli_diverged
