#!/usr/bin/env bash
# cli_winograd.sh - `dptrain train --winograd` (5x5 convolutions with 8 or
# more channels by Winograd F(3x3, 5x5) on CPU devices; off by default):
# - the start-up line says so; without the flag it does not; the flag
#   changes the arithmetic (the loss is not the default path's to the digit);
# - lenet-paddle (its conv2 is 20 -> 20, 5x5), 1 epoch on 6,000 images, batch
#   64 (94 steps), 2 devices: it learns (test accuracy >= 0.50, five times
#   chance; measured 0.71-0.75 for seeds 3 and 4, as the default path) and its
#   epoch loss is within 1e-2 relative of the default path's (they differ by
#   rounding, which 94 steps of SGD amplify: measured up to 2.4e-3, as
#   large as the default path's own spread between 1, 2 and 3 devices);
# - the same seed twice: byte-identical checkpoints;
# - 1 and 3 devices: the epoch loss within 1e-2 relative of 2 devices' (they
#   sum gradients in another order; measured up to 2.4e-3);
# - the staged devices (the CPU ops behind a non-host-memory backend) give
#   the CPU devices' checkpoint bit for bit.
source "$(dirname "$0")/testing.sh"
small_data "$tmp/data" 6000 500
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= r * m) }'; }
run=(train --model lenet-paddle --data "$tmp/data" --epochs 1 --lr 0.1 --batch-size 64 --seed 3)

"$bin" "${run[@]}" --devices 2 --metrics "$tmp/plain.jsonl" >"$tmp/plain.out" 2>&1 || fail "default path: $(tail -1 "$tmp/plain.out")"
for r in a b; do
  "$bin" "${run[@]}" --devices 2 --winograd --save "$tmp/w$r.st" --metrics "$tmp/w$r.jsonl" >"$tmp/w$r.out" 2>&1 \
    || fail "--winograd run $r: $(tail -1 "$tmp/w$r.out")"
done
grep -q "Winograd F(3x3, 5x5)" "$tmp/wa.out" && pass || fail "the start-up line does not name Winograd: $(head -2 "$tmp/wa.out")"
grep -q "Winograd" "$tmp/plain.out" && fail "the default run names Winograd: $(head -2 "$tmp/plain.out")" || pass
loss() { json_field "$(tail -1 "$1")" train_loss; }
acc=$(json_field "$(tail -1 "$tmp/wa.jsonl")" test_acc)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.50) }' && pass || fail "--winograd does not learn: test accuracy $acc"
close "$(loss "$tmp/wa.jsonl")" "$(loss "$tmp/plain.jsonl")" 1e-2 && pass \
  || fail "--winograd loss $(loss "$tmp/wa.jsonl"), default $(loss "$tmp/plain.jsonl")"
[[ "$(loss "$tmp/wa.jsonl")" != "$(loss "$tmp/plain.jsonl")" ]] && pass \
  || fail "--winograd gave the default path's loss to the last digit: did it take effect?"
cmp -s "$tmp/wa.st" "$tmp/wb.st" && pass || fail "--winograd, same seed twice: the checkpoints differ"
for k in 1 3; do
  "$bin" "${run[@]}" --devices $k --winograd --metrics "$tmp/k$k.jsonl" >"$tmp/k$k.out" 2>&1 || fail "$k devices: $(tail -1 "$tmp/k$k.out")"
  close "$(loss "$tmp/k$k.jsonl")" "$(loss "$tmp/wa.jsonl")" 1e-2 && pass \
    || fail "--winograd on $k devices: loss $(loss "$tmp/k$k.jsonl"), 2 devices $(loss "$tmp/wa.jsonl")"
done
"$bin" "${run[@]}" --devices staged:0,staged:1 --winograd --save "$tmp/staged.st" >"$tmp/staged.out" 2>&1 \
  || fail "staged devices: $(tail -1 "$tmp/staged.out")"
same_tensors "$tmp/staged.st" "$tmp/wa.st" && pass || fail "--winograd: staged devices differ from CPU devices"
echo "losses: default $(loss "$tmp/plain.jsonl"), winograd $(loss "$tmp/wa.jsonl") (1 device $(loss "$tmp/k1.jsonl"), 3 devices $(loss "$tmp/k3.jsonl")); test acc $acc"
testing_finish cli_winograd
