#!/usr/bin/env bash
# cli_lr_warmup.sh - torchvision's warm-up options and exponential schedule
# in `dptrain train` (schedule.h): --warmup-method, --warmup-start,
# --warmup-sequential, --lr-schedule exponential, on a small cut of
# Fashion-MNIST (1,200 training images, batch 50: 24 steps an epoch):
# - the per-epoch lr in the metrics (the lr of each epoch's last step,
#   t = 24 e - 1) follows schedule.h's formulas: torchvision's recipe
#   (linear from 0.01, sequential, cosine), exponential, a constant warm-up;
# - the defaults given explicitly (--warmup-method linear) are the run
#   without them, checkpoint bytes and all (no new key written);
# - the first line names the warm-up; the checkpoint records it (inspect);
#   --stop-after 1 then --resume FILE alone ends in the straight run's
#   checkpoint bytes and the resume's line lists what it took; another
#   value on resume is refused in one line;
# - bad values are refused in one line; --help documents the options.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300
base=(train --model lenet-paddle --data "$tmp/small" --batch-size 50 --seed 3 --devices 1 --quiet)

# expect_lrs NAME EXPECTED(space-separated) ARGS...: the run's per-epoch lr within 1e-7 relative
lrs() { sed -E 's/.*"lr": *([^,}]*).*/\1/' "$1" | tr '\n' ' '; }
expect_lrs() {
  local name=$1 expected=$2; shift 2
  "$bin" "${base[@]}" "$@" --metrics "$tmp/$name.jsonl" --save "$tmp/$name.st" >/dev/null 2>"$tmp/$name.err" \
    || { fail "$name: $(cat "$tmp/$name.err")"; return; }
  local got; got=$(lrs "$tmp/$name.jsonl")
  awk -v got="$got" -v want="$expected" 'BEGIN { n = split(got, g, " "); m = split(want, w, " ");
    if (n != m) exit 1; for (i = 1; i <= n; i++) { d = g[i] - w[i]; if (d < 0) d = -d; if (d > 1e-7 * w[i]) exit 1 } }' \
    && pass || fail "$name: lr per epoch $got, expected $expected"
}
# torchvision's recipe: linear from 0.01 over 1 epoch (W = 24), then cosine over the 48 steps left to 0.001
recipe=(--lr 0.5 --lr-schedule cosine --lr-min 0.001 --warmup-epochs 1 --warmup-method linear --warmup-start 0.01
        --warmup-sequential --epochs 3)
expect_lrs recipe "$(awk 'BEGIN { pi = 3.141592653589793; printf "%.12g ", 0.5 * (0.01 + 0.99 * 23 / 24);
  for (u = 23; u <= 47; u += 24) printf "%.12g ", 0.001 + 0.499 * (1 + cos(pi * u / 48)) / 2 }')" "${recipe[@]}"
# exponential: gamma once per epoch
expect_lrs exponential "0.1 0.05 0.025" --lr 0.1 --lr-schedule exponential --lr-gamma 0.5 --epochs 3
# a constant warm-up of 30 steps at 0.25, chained: epoch 1 (t = 23) at 0.25 x lr, epoch 2 at lr
expect_lrs constant "0.025 0.1" --lr 0.1 --warmup-steps 30 --warmup-method constant --warmup-start 0.25 --epochs 2
# the same warm-up sequential before exponential: epoch 2 ends at t = 47, 17 steps after it: gamma^0
expect_lrs constant-exp "0.025 0.1 0.05" --lr 0.1 --lr-schedule exponential --lr-gamma 0.5 --warmup-steps 30 \
  --warmup-method constant --warmup-start 0.25 --warmup-sequential --epochs 3

# the defaults given: the run without them, byte for byte
"$bin" "${base[@]}" --lr 0.1 --warmup-steps 30 --epochs 1 --save "$tmp/plain.st" >/dev/null 2>&1 \
  && "$bin" "${base[@]}" --lr 0.1 --warmup-steps 30 --warmup-method linear --epochs 1 --save "$tmp/linear.st" \
     >/dev/null 2>&1 && cmp -s "$tmp/plain.st" "$tmp/linear.st" \
  && ! "$bin" inspect "$tmp/plain.st" | grep -q "warmup_method\|warmup_start\|warmup_sequential" && pass \
  || fail "--warmup-method linear is not the default run's bytes"

# the first line and the checkpoint
first=$("$bin" train --model lenet-paddle --data "$tmp/small" --batch-size 50 --devices 1 "${recipe[@]}" --epochs 1 \
  2>/dev/null | head -1)
[[ "$first" == *", lr 0.5 (cosine; warm-up linear from 0.01, sequential), "* ]] && pass \
  || fail "the recipe's first line: $first"
meta=$("$bin" inspect "$tmp/constant-exp.st")
grep -qx "  lr_schedule = exponential" <<<"$meta" && grep -qx "  lr_schedule.warmup_method = constant" <<<"$meta" \
  && grep -qx "  lr_schedule.warmup_start = 0.25" <<<"$meta" && grep -qx "  lr_schedule.warmup_sequential = 1" <<<"$meta" \
  && grep -qx "  lr_schedule.gamma = 0.5" <<<"$meta" && pass || fail "constant-exp's metadata: $(grep lr_sch <<<"$meta")"
grep -qx "  lr_schedule.warmup_start = 0.01" <("$bin" inspect "$tmp/recipe.st") \
  && ! grep -q "warmup_method" <("$bin" inspect "$tmp/recipe.st") && pass || fail "the recipe's metadata"

# stopped after epoch 1 and resumed with --resume alone: the straight run's bytes
resumed() { # NAME ARGS... (those of the straight run $tmp/NAME.st)
  local name=$1; shift
  "$bin" "${base[@]}" "$@" --stop-after 1 --save "$tmp/$name.one.st" >/dev/null 2>"$tmp/$name.one.err" && pass \
    || fail "$name --stop-after 1: $(cat "$tmp/$name.one.err")"
  cp "$tmp/$name.one.st" "$tmp/$name.b.st"
  "$bin" train --data "$tmp/small" --devices 1 --resume "$tmp/$name.b.st" --save "$tmp/$name.b.st" \
    >"$tmp/$name.b.out" 2>"$tmp/$name.b.err" && cmp -s "$tmp/$name.st" "$tmp/$name.b.st" && pass \
    || fail "$name: straight and resumed differ: $(cat "$tmp/$name.b.err")"
}
resumed recipe "${recipe[@]}"
resumed constant-exp --lr 0.1 --lr-schedule exponential --lr-gamma 0.5 --warmup-steps 30 --warmup-method constant \
  --warmup-start 0.25 --warmup-sequential --epochs 3
grep -q "resuming .* --warmup-method constant --warmup-start 0.25 --warmup-sequential " "$tmp/constant-exp.b.out" \
  && grep -q "resuming .* --warmup-start 0.01 --warmup-sequential " "$tmp/recipe.b.out" \
  && ! grep -q -- "--warmup-method" "$tmp/recipe.b.out" && pass \
  || fail "the resume's line: $(grep resuming "$tmp/constant-exp.b.out" "$tmp/recipe.b.out")"

# refused in one line, nothing saved: LABEL PART ARGS...
one_line_refusal() {
  local label=$1 part=$2
  shift 2
  rm -f "$tmp/never.st"
  "$bin" "$@" --save "$tmp/never.st" >"$tmp/r.out" 2>"$tmp/r.err"
  [[ $? -eq 1 && $(wc -l <"$tmp/r.err") -eq 1 && ! -e "$tmp/never.st" ]] && grep -qF -- "$part" "$tmp/r.err" && pass \
    || fail "$label: stderr $(head -c 400 "$tmp/r.err") (expected one line with '$part')"
}
resume=(train --data "$tmp/small" --devices 1 --quiet --resume)
one_line_refusal "resume, another start" "saved with --warmup-start (0: not given, 1 / W) 0.25, this run has 0.5" \
  "${resume[@]}" "$tmp/constant-exp.one.st" --warmup-start 0.5
one_line_refusal "resume, another method" "saved with --warmup-method constant, this run has linear" \
  "${resume[@]}" "$tmp/constant-exp.one.st" --warmup-method linear
"$bin" "${base[@]}" --lr 0.1 --warmup-steps 30 --epochs 2 --stop-after 1 --save "$tmp/chained.st" >/dev/null 2>&1
one_line_refusal "resume, sequential" "saved with --warmup-sequential (1: on) 0, this run has 1" \
  "${resume[@]}" "$tmp/chained.st" --warmup-sequential

short=("${base[@]}" --epochs 1 --lr 0.1)
one_line_refusal "start 0" "train: --warmup-start must be in (0, 1], found 0" "${short[@]}" --warmup-steps 5 \
  --warmup-start 0
one_line_refusal "start 1.5" "train: --warmup-start must be in (0, 1], found 1.5" "${short[@]}" --warmup-steps 5 \
  --warmup-start 1.5
one_line_refusal "method" "train: --warmup-method: 'cosine' is not linear or constant" "${short[@]}" \
  --warmup-steps 5 --warmup-method cosine
one_line_refusal "no warm-up" "need --warmup-epochs X or --warmup-steps N, found neither" "${short[@]}" \
  --warmup-sequential
one_line_refusal "exponential without gamma" "--lr-schedule exponential needs --lr-gamma X" "${short[@]}" \
  --lr-schedule exponential
one_line_refusal "exponential gamma 1.5" "lr schedule exponential: gamma must be in (0, 1], found 1.5" \
  "${short[@]}" --lr-schedule exponential --lr-gamma 1.5
one_line_refusal "schedule name" "is not constant, step, cosine or exponential" "${short[@]}" --lr-schedule linear

help=$("$bin" train --help)
for opt in --warmup-method --warmup-start --warmup-sequential exponential; do
  grep -q -- "$opt" <<<"$help" && pass || fail "train --help does not document $opt"
done
testing_finish cli_lr_warmup
