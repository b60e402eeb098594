#!/usr/bin/env bash
# cli_save_best.sh - `dptrain train --save-best FILE` (Keras' save_best_only)
# and `--early-stop N` (Keras' EarlyStopping(patience=N))
# on a cut of Fashion-MNIST (1,200 training, 300 test images), LeNet (Paddle's)
# with SGD at lr 0.2 for 5 epochs, whose test accuracy goes up and down
# (measured on AMD EPYC AVX-512: 0.540 0.700 0.740 0.723 0.647; the checks
# take the best epoch from the metrics, whatever it is):
# - FILE is the checkpoint of the first epoch with the highest test accuracy:
#   byte for byte the --save checkpoint of a run stopped there; every
#   checkpoint records the best so far (best.epoch, best.test_correct,
#   best.test_count); each new best is named on a line, the end says which;
# - a run stopped before its best epoch and resumed writes the same FILE; one
#   resumed after it writes none and says why;
# - --early-stop N: the run stops after the first epoch N past its best,
#   records N, says so; a resume of it trains nothing and changes nothing;
#   one stopped before by --stop-after and resumed ends in the same bytes; a
#   resume with more patience trains on;
# - --save-best as --save's file, or in a folder that does not exist, and
#   --early-stop 0 are refused in one line before anything is written.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300
run=(train --model lenet-paddle --data "$tmp/small" --lr 0.2 --epochs 5 --batch-size 50 --devices 2 --seed 3)
"$bin" "${run[@]}" --save "$tmp/a.st" --save-best "$tmp/best.st" --metrics "$tmp/a.jsonl" >"$tmp/a.out" 2>&1 \
  && pass || fail "the run: $(tail -3 "$tmp/a.out")"
accs=$(sed -E 's/.*"test_acc": *([^,}]*).*/\1/' "$tmp/a.jsonl" | tr '\n' ' ')
best=$(awk -v a="$accs" 'BEGIN { n = split(a, v, " "); b = 1; for (i = 2; i <= n; i++) if (v[i] > v[b]) b = i; print b }')
echo "test accuracy per epoch: $accs; the best: epoch $best"
meta() { "$bin" inspect "$1" | sed -n "s/^  $2 = //p"; }
[[ "$(meta "$tmp/best.st" epochs_completed)" == "$best" && "$(meta "$tmp/best.st" best.epoch)" == "$best" &&
   "$(meta "$tmp/a.st" best.epoch)" == "$best" && "$(meta "$tmp/a.st" epochs_completed)" == 5 ]] && pass \
  || fail "best.st holds epoch $(meta "$tmp/best.st" epochs_completed), records $(meta "$tmp/best.st" best.epoch); a.st records $(meta "$tmp/a.st" best.epoch) (expected $best)"
correct=$(meta "$tmp/a.st" best.test_correct) count=$(meta "$tmp/a.st" best.test_count)
awk -v c="$correct" -v n="$count" -v a="$(awk -v a="$accs" -v b="$best" 'BEGIN { split(a, v, " "); print v[b] }')" \
  'BEGIN { d = c / n - a; exit !(n == 300 && d < 1e-9 && d > -1e-9) }' && pass \
  || fail "best.test_correct $correct of $count is not epoch $best's accuracy"
# a line at each new best, and the end's
saves=$(sed -nE 's/^epoch ([0-9]+): the best test accuracy so far, saving .*best\.st$/\1/p' "$tmp/a.out" | tr '\n' ' ')
want=$(awk -v a="$accs" 'BEGIN { n = split(a, v, " "); m = -1; for (i = 1; i <= n; i++) if (v[i] > m) { m = v[i]; printf "%d ", i } }')
[[ "$saves" == "$want" ]] && pass || fail "new-best lines for epochs '$saves', expected '$want'"
grep -qx "best: epoch $best, test acc [0-9.]* ($correct/300 correct), saved in $tmp/best.st" "$tmp/a.out" && pass \
  || fail "the end's line: $(grep '^best' "$tmp/a.out")"
[[ $best -lt 5 ]] && ! same_tensors "$tmp/best.st" "$tmp/a.st" && echo "the best epoch is not the last" \
  || echo "the best epoch is the last here: best.st and a.st hold the same epoch"
# = the checkpoint of the same run stopped at that epoch
"$bin" "${run[@]}" --stop-after "$best" --save "$tmp/stopped.st" >/dev/null 2>&1
cmp "$tmp/best.st" "$tmp/stopped.st" && pass || fail "best.st differs from the run stopped after epoch $best"
# stopped before the best, resumed: the same file; resumed after it: none written, the line says so
if [[ $best -gt 1 ]]; then
  "$bin" "${run[@]}" --stop-after $((best - 1)) --save "$tmp/r.st" --save-best "$tmp/rb.st" >/dev/null 2>&1
  "$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/r.st" --save "$tmp/r.st" --save-best "$tmp/rb.st" \
    >"$tmp/r.out" 2>&1 && cmp "$tmp/rb.st" "$tmp/best.st" && cmp "$tmp/r.st" "$tmp/a.st" && pass \
    || fail "stopped after epoch $((best - 1)) and resumed: the best or the last checkpoint differs: $(tail -2 "$tmp/r.out")"
fi
if [[ $best -lt 5 ]]; then
  "$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/stopped.st" --save "$tmp/s.st" --save-best "$tmp/sb.st" \
    >"$tmp/s.out" 2>&1 && [[ ! -e "$tmp/sb.st" ]] \
    && grep -qx "best: epoch $best, test acc [0-9.]* ($correct/300 correct), before the resumed checkpoint (no later epoch beat it: this run did not write $tmp/sb.st)" "$tmp/s.out" \
    && pass || fail "resumed after the best: $(grep -E '^best|dptrain' "$tmp/s.out"), sb.st $(ls "$tmp/sb.st" 2>&1)"
fi
# --early-stop 2 over 8 epochs: it stops after the first epoch 2 past the best so far (from the metrics), records
# the patience, names the stop; a resume of it trains nothing and leaves the file; one stopped on the way by
# --stop-after and resumed stops at the same epoch with the same bytes; a resume with more patience trains on
"$bin" "${run[@]}" --epochs 8 --early-stop 2 --save "$tmp/es.st" --metrics "$tmp/es.jsonl" >"$tmp/es.out" 2>&1 \
  && pass || fail "--early-stop 2: $(tail -3 "$tmp/es.out")"
accs=$(sed -E 's/.*"test_acc": *([^,}]*).*/\1/' "$tmp/es.jsonl" | tr '\n' ' ')
want=$(awk -v a="$accs" 'BEGIN { n = split(a, v, " "); b = 1; for (i = 2; i <= n; i++) { if (v[i] > v[b]) b = i; if (i - b >= 2) { print i, b; exit } } print n, b }')
read -r stop bestes <<<"$want"
echo "--early-stop 2: test accuracy per epoch $accs; expected to stop after epoch $stop (best $bestes)"
[[ $(wc -l <"$tmp/es.jsonl") -eq $stop && "$(meta "$tmp/es.st" epochs_completed)" == "$stop" &&
   "$(meta "$tmp/es.st" early_stop)" == 2 ]] && pass \
  || fail "--early-stop 2: $(wc -l <"$tmp/es.jsonl") epochs, checkpoint at $(meta "$tmp/es.st" epochs_completed), early_stop $(meta "$tmp/es.st" early_stop)"
if [[ $stop -lt 8 ]]; then
  grep -qx "stopped early after epoch $stop of 8: no better test accuracy than epoch $bestes's for 2 epochs (--early-stop 2)" \
    "$tmp/es.out" && pass || fail "the stop's line: $(grep stopped "$tmp/es.out")"
  cp "$tmp/es.st" "$tmp/es_copy.st"
  "$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/es.st" --save "$tmp/es.st" >"$tmp/es_r.out" 2>&1 \
    && grep -qx "checkpoint $tmp/es.st stopped early after epoch $stop (--early-stop 2: no better test accuracy since epoch $bestes): nothing to train" \
      "$tmp/es_r.out" && cmp -s "$tmp/es.st" "$tmp/es_copy.st" && pass \
    || fail "resuming the stopped run: $(grep -vE '^(training|kernels)' "$tmp/es_r.out")"
  "$bin" "${run[@]}" --epochs 8 --early-stop 2 --stop-after $((stop - 1)) --save "$tmp/es2.st" >/dev/null 2>&1
  "$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/es2.st" --save "$tmp/es2.st" >"$tmp/es2.out" 2>&1 \
    && grep -q "^resuming .* --early-stop 2 " "$tmp/es2.out" && cmp -s "$tmp/es2.st" "$tmp/es_copy.st" && pass \
    || fail "stopped after epoch $((stop - 1)) and resumed: $(grep -vE '^(kernels)' "$tmp/es2.out")"
  "$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/es_copy.st" --early-stop 20 --save "$tmp/es3.st" \
    >"$tmp/es3.out" 2>&1 && [[ "$(meta "$tmp/es3.st" epochs_completed)" == 8 ]] && pass \
    || fail "a resume with --early-stop 20 did not train to epoch 8: $(tail -2 "$tmp/es3.out")"
else
  echo "no stop within 8 epochs here: the stop's checks are left out"
fi

# refusals: one line, status 1, nothing written
refused() { # LABEL PART ARGS...
  local label=$1 part=$2; shift 2
  rm -f "$tmp/x.st"
  "$bin" "${run[@]}" "$@" >"$tmp/x.out" 2>"$tmp/x.err"
  [[ $? -eq 1 && $(wc -l <"$tmp/x.err") -eq 1 && ! -e "$tmp/x.st" ]] && grep -qF -- "$part" "$tmp/x.err" && pass \
    || fail "$label: $(cat "$tmp/x.err")"
}
refused "--save-best = --save" "train: --save-best $tmp/x.st is --save's file" --save "$tmp/x.st" --save-best "$tmp/x.st"
refused "--save-best in a missing folder" "$tmp/no/b.st" --save "$tmp/x.st" --save-best "$tmp/no/b.st"
refused "--early-stop 0" "train: --early-stop" --save "$tmp/x.st" --early-stop 0
testing_finish cli_save_best
