#!/usr/bin/env bash
# cli_train_top5.sh - the top-5 accuracy (torchvision's Acc@5) on the
# command line, on a 1,000/200 cut of Fashion-MNIST, 1 epoch each:
# - LeNet (models/lenet.cfg) with --num-classes 20 (more than 10 classes):
#   the epoch line reads "test acc A (top-5 B)", B >= A, both the metrics'
#   test_acc and test_acc5 rounded to 3 decimals; the metrics put test_acc5
#   right after test_acc; `eval` of its checkpoint prints "top-5 acc: F
#   (N/200 in the top 5)" after the main line, N / 200 the metrics'
#   test_acc5 exactly and N >= the main line's correct count;
# - the same with --model-ema: "test acc A (top-5 B, ema C)", and
#   test_acc5 before test_acc_ema in the metrics;
# - LeNet of 10 classes: no top-5 on the epoch line (10 is not more than
#   10), test_acc5 in the metrics all the same (more than 5), and eval's
#   top-5 line.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)

small_data "$tmp/small" 1000 200
common=(train --data "$tmp/small" --epochs 1 --batch-size 25 --lr 0.002 --optimizer adam --devices 2 --seed 1)
# epoch_line OUT: the epoch line of a run's output
epoch_line() { grep '^epoch 1/1: ' "$1"; }

"$bin" "${common[@]}" --model "$src/models/lenet.cfg" --num-classes 20 --metrics "$tmp/c20.jsonl" \
  --save "$tmp/c20.st" >"$tmp/c20.out" 2>&1 && pass || fail "20 classes: $(tail -3 "$tmp/c20.out")"
line=$(epoch_line "$tmp/c20.out")
metrics=$(cat "$tmp/c20.jsonl")
echo "$line"
top1=$(sed -nE 's/.*, test acc ([0-9.]+) \(top-5 ([0-9.]+)\), lr .*/\1/p' <<<"$line")
top5=$(sed -nE 's/.*, test acc ([0-9.]+) \(top-5 ([0-9.]+)\), lr .*/\2/p' <<<"$line")
[[ -n "$top1" && -n "$top5" ]] && pass || fail "20 classes: no 'test acc A (top-5 B)' on the epoch line: $line"
awk -v a="$top1" -v b="$top5" 'BEGIN { exit !(b >= a && b > 0) }' && pass || fail "20 classes: top-5 $top5 < top-1 $top1"
acc=$(json_field "$metrics" test_acc) acc5=$(json_field "$metrics" test_acc5)
[[ $(printf '%.3f' "$acc") == "$top1" && $(printf '%.3f' "$acc5") == "$top5" ]] && pass \
  || fail "20 classes: the epoch line's $top1, $top5; the metrics' $acc, $acc5"
[[ $metrics == *"\"test_acc\": $acc, \"test_acc5\": $acc5, \"epoch_sec\": "* ]] && pass \
  || fail "20 classes: test_acc5 is not right after test_acc: $metrics"

"$bin" eval --resume "$tmp/c20.st" --data "$tmp/small" --devices 2 >"$tmp/e20.out" 2>"$tmp/e20.err" && pass \
  || fail "eval: $(cat "$tmp/e20.out")"
cat "$tmp/e20.out"
correct=$(sed -nE '1s/^test acc: [0-9.]+ \(([0-9]+)\/200 correct\) on 200 images, .*/\1/p' "$tmp/e20.out")
hits=$(sed -nE '2s/^top-5 acc: [0-9.]+ \(([0-9]+)\/200 in the top 5\)$/\1/p' "$tmp/e20.out")
[[ -n "$correct" && -n "$hits" && $(wc -l <"$tmp/e20.out") -eq 2 ]] && pass \
  || fail "eval: no main line and top-5 line: $(cat "$tmp/e20.out")"
[[ -n "$hits" ]] && awk -v n="$hits" -v c="$correct" -v a="$acc5" \
  'BEGIN { exit !(n >= c && sprintf("%.9g", n / 200) == a) }' && pass \
  || fail "eval: $hits/200 in the top 5 ($correct correct), the training's test_acc5 $acc5"
grep -qF "top-5 acc: $(awk -v n="$hits" 'BEGIN { printf "%.4f", n / 200 }') (" "$tmp/e20.out" && pass \
  || fail "eval: the top-5 fraction is not $hits/200: $(cat "$tmp/e20.out")"

# with the moving average: one parenthesis, top-5 first
"$bin" "${common[@]}" --model "$src/models/lenet.cfg" --num-classes 20 --model-ema --model-ema-steps 5 \
  --metrics "$tmp/ema.jsonl" >"$tmp/ema.out" 2>&1 && pass || fail "--model-ema: $(tail -3 "$tmp/ema.out")"
line=$(epoch_line "$tmp/ema.out")
metrics=$(cat "$tmp/ema.jsonl")
echo "$line"
[[ $line =~ ", test acc "[0-9.]+" (top-5 "([0-9.]+)", ema "([0-9.]+)"), lr " ]] && pass \
  || fail "--model-ema: no 'test acc A (top-5 B, ema C)': $line"
[[ ${BASH_REMATCH[1]:-} == $(printf '%.3f' "$(json_field "$metrics" test_acc5)") &&
   ${BASH_REMATCH[2]:-} == $(printf '%.3f' "$(json_field "$metrics" test_acc_ema)") ]] && pass \
  || fail "--model-ema: the line's figures are not the metrics': $line / $metrics"
[[ $metrics == *"\"test_acc5\": "*", \"test_acc_ema\": "* ]] && pass || fail "--model-ema: the keys' order: $metrics"

# 10 classes: not on the epoch line, in the metrics and eval's output
"$bin" "${common[@]}" --model "$src/models/lenet.cfg" --metrics "$tmp/c10.jsonl" --save "$tmp/c10.st" \
  >"$tmp/c10.out" 2>&1 && pass || fail "10 classes: $(tail -3 "$tmp/c10.out")"
line=$(epoch_line "$tmp/c10.out")
[[ -n "$line" && $line != *top-5* ]] && pass || fail "10 classes: top-5 on the epoch line: $line"
acc5=$(json_field "$(cat "$tmp/c10.jsonl")" test_acc5)
awk -v a="$acc5" -v b="$(json_field "$(cat "$tmp/c10.jsonl")" test_acc)" 'BEGIN { exit !(a >= b && a <= 1) }' \
  && pass || fail "10 classes: test_acc5 '$acc5' in the metrics: $(cat "$tmp/c10.jsonl")"
"$bin" eval --resume "$tmp/c10.st" --data "$tmp/small" --devices 1 >"$tmp/e10.out" 2>&1 \
  && grep -qE '^top-5 acc: [0-9.]+ \([0-9]+/200 in the top 5\)$' "$tmp/e10.out" && pass \
  || fail "10 classes: eval's top-5 line: $(cat "$tmp/e10.out")"
testing_finish cli_train_top5
