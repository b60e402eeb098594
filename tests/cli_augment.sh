#!/usr/bin/env bash
# cli_augment.sh - `dptrain train --normalize, --augment, --accumulate`,
# eval's and predict's normalisation.
# - the same seed with --augment crop:4,flip --normalize: the same run twice
#   (checkpoint byte for byte, metrics loss to the last digit);
# - 1, 2 and 3 devices: the same epoch-1 loss to 1e-5 relative (the
#   gradient sum's order differs with the device count, also without
#   augmentation, so not bit for bit; by epoch 2 the rounding has grown to
#   ~5e-3 with or without augmentation; these runs train one epoch), and augmentation changes the loss
#   (it is applied);
# - 2 MPI ranks x 1 device = 1 process x 2 devices, bit for bit (tensors and
#   loss), with augmentation and --accumulate 2; likewise 3 ranks x 1 device
#   = 1 process x 3 devices; and with --accumulate 3 under --sync ps and
#   under --sync-batch-norm (tiny_resnet.cfg);
# - --batch-size 32 --accumulate 4 gives --batch-size 128's epoch-1 loss to
#   1e-5 relative (1 device; also across 2 ranks), batch 32 alone does not;
# - the checkpoint records data.normalize and data.augment; a resume with
#   another --normalize is refused with one line, one without takes the
#   checkpoint's (the same bytes as giving it), one with another --augment
#   warns and goes on;
# - eval uses the checkpoint's normalisation (its accuracy is the training
#   run's last test accuracy; without it the accuracy differs), refuses a
#   contradicting --normalize; predict applies it (its answer differs from
#   a checkpoint without the normalisation key);
# - bad --augment, --normalize and --accumulate values: one line, non-zero,
#   no file written.
source "$(dirname "$0")/testing.sh"
loss() { json_field "$(tail -1 "$1")" train_loss; }
# epoch 1's loss: where runs equal up to float rounding are compared (over
# more epochs the rounding grows with training, also without augmentation)
loss1() { json_field "$(head -1 "$1")" train_loss; }
test_acc() { json_field "$(tail -1 "$1")" test_acc; }
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= r * m) }'; }

# the first 1000 training and 1000 test images: each epoch's evaluation stays short
full=$data
small_data "$tmp/fm" 1000 1000
data=$tmp/fm
common=(train --model lenet-paddle --data "$data" --limit 1000 --epochs 1 --lr 0.1 --batch-size 64 --seed 5 --quiet)
# under ASan (scripts/sanitize.sh address) Open MPI's own allocations are
# reported as leaks at exit: its ranks run without leak detection, as cli_mpi's
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
aug=(--augment crop:4,flip --normalize 0.286,0.353)
for run in a b; do
  "$bin" "${common[@]}" "${aug[@]}" --devices 2 --save "$tmp/two-$run.st" --metrics "$tmp/two-$run.jsonl" >/dev/null 2>&1 \
    || fail "2 devices, run $run"
done
cmp -s "$tmp/two-a.st" "$tmp/two-b.st" && [[ -n "$(loss "$tmp/two-a.jsonl")" && "$(loss "$tmp/two-a.jsonl")" == "$(loss "$tmp/two-b.jsonl")" ]] \
  && pass || fail "same seed, different runs: $(loss "$tmp/two-a.jsonl") vs $(loss "$tmp/two-b.jsonl")"
for k in 1 3; do
  "$bin" "${common[@]}" "${aug[@]}" --devices $k --metrics "$tmp/k$k.jsonl" >/dev/null 2>&1 || fail "$k devices"
  close "$(loss1 "$tmp/k$k.jsonl")" "$(loss1 "$tmp/two-a.jsonl")" 1e-5 && pass \
    || fail "$k devices: epoch 1's loss $(loss1 "$tmp/k$k.jsonl"), 2 devices: $(loss1 "$tmp/two-a.jsonl")"
done
"$bin" "${common[@]}" --normalize 0.286,0.353 --devices 2 --metrics "$tmp/noaug.jsonl" >/dev/null 2>&1
close "$(loss1 "$tmp/noaug.jsonl")" "$(loss1 "$tmp/two-a.jsonl")" 1e-3 && fail "augmentation changed nothing" || pass

# across ranks: bit for bit, with accumulation too
if command -v mpirun >/dev/null; then
  mpi=("${mpi_env[@]}" mpirun --allow-run-as-root --oversubscribe)
  for n in 2 3; do
    "${mpi[@]}" -np $n "$bin" "${common[@]}" "${aug[@]}" --accumulate 2 --batch-size 33 --devices 1 \
      --save "$tmp/r$n.st" --metrics "$tmp/r$n.jsonl" >"$tmp/r$n.out" 2>&1 || fail "$n ranks: $(tail -3 "$tmp/r$n.out")"
    "$bin" "${common[@]}" "${aug[@]}" --accumulate 2 --batch-size 33 --devices $n --save "$tmp/l$n.st" \
      --metrics "$tmp/l$n.jsonl" >/dev/null 2>&1 || fail "$n devices, accumulate 2"
    same_tensors "$tmp/r$n.st" "$tmp/l$n.st" && [[ "$(loss "$tmp/r$n.jsonl")" == "$(loss "$tmp/l$n.jsonl")" ]] && pass \
      || fail "$n ranks x 1 device and 1 x $n devices differ (augment, accumulate 2): $(loss "$tmp/r$n.jsonl") vs $(loss "$tmp/l$n.jsonl")"
  done
  # accumulation with the parameter server and with synchronised batch norm
  for extra in "--sync ps" "--sync-batch-norm --model $(dirname "$0")/models/tiny_resnet.cfg"; do
    "${mpi[@]}" -np 2 "$bin" "${common[@]}" --batch-size 32 --accumulate 3 --augment flip $extra --devices 1 \
      --save "$tmp/x-r.st" >"$tmp/x.out" 2>&1 || fail "2 ranks, accumulate 3, $extra: $(tail -3 "$tmp/x.out")"
    "$bin" "${common[@]}" --batch-size 32 --accumulate 3 --augment flip $extra --devices 2 \
      --save "$tmp/x-l.st" >/dev/null 2>&1 || fail "2 devices, accumulate 3, $extra"
    same_tensors "$tmp/x-r.st" "$tmp/x-l.st" && pass || fail "accumulate 3, $extra: 2 ranks and 2 devices differ"
    rm -f "$tmp/x-r.st" "$tmp/x-l.st"
  done
  "${mpi[@]}" -np 2 "$bin" "${common[@]}" --batch-size 32 --accumulate 4 --devices 1 --metrics "$tmp/racc.jsonl" \
    >"$tmp/racc.out" 2>&1 || fail "2 ranks, accumulate 4: $(tail -3 "$tmp/racc.out")"
else
  fail "mpirun not found (openmpi-bin)"
fi

# accumulation: 4 x 32 = 128 in one step, to float rounding
"$bin" "${common[@]}" --batch-size 32 --accumulate 4 --devices 1 --metrics "$tmp/acc.jsonl" >/dev/null 2>&1 || fail "accumulate 4"
"$bin" "${common[@]}" --batch-size 128 --devices 1 --metrics "$tmp/big.jsonl" >/dev/null 2>&1 || fail "batch 128"
"$bin" "${common[@]}" --batch-size 32 --devices 1 --metrics "$tmp/small.jsonl" >/dev/null 2>&1 || fail "batch 32"
close "$(loss1 "$tmp/acc.jsonl")" "$(loss1 "$tmp/big.jsonl")" 1e-5 && pass \
  || fail "accumulate 4 x 32: loss $(loss1 "$tmp/acc.jsonl"), batch 128: $(loss1 "$tmp/big.jsonl")"
[[ -s "$tmp/racc.jsonl" ]] && close "$(loss1 "$tmp/racc.jsonl")" "$(loss1 "$tmp/big.jsonl")" 1e-5 && pass \
  || fail "2 ranks, accumulate 4 x 32: loss $(loss1 "$tmp/racc.jsonl" 2>/dev/null), batch 128: $(loss1 "$tmp/big.jsonl")"
close "$(loss1 "$tmp/small.jsonl")" "$(loss1 "$tmp/big.jsonl")" 1e-3 && fail "batch 32 and 128 agree: the check cannot fail" || pass

# the checkpoint's metadata, and resume
"$bin" inspect "$tmp/two-a.st" >"$tmp/inspect" 2>&1
grep -q "^  data.normalize = 0.286000013,0.352999985$" "$tmp/inspect" && grep -q "^  data.augment = crop:4,flip$" "$tmp/inspect" \
  && pass || fail "inspect: $(grep data "$tmp/inspect")"
out=$("$bin" "${common[@]}" --augment crop:4,flip --normalize 0.5,0.5 --devices 2 --epochs 2 --resume "$tmp/two-a.st" \
      --save "$tmp/never.st" 2>&1) && fail "resume with another --normalize accepted" \
  || { grep -q "saved with --normalize 0.286000013,0.352999985" <<<"$out" && [[ $(wc -l <<<"$out") -eq 1 ]] && pass \
       || fail "resume with another --normalize: $out"; }
[[ ! -e "$tmp/never.st" ]] && pass || fail "a refused resume wrote its --save file"
# a resume without --normalize takes the checkpoint's: the same run as giving it
for given in "" "--normalize 0.286,0.353"; do
  "$bin" "${common[@]}" --augment crop:4,flip $given --devices 2 --epochs 2 --resume "$tmp/two-a.st" \
    --save "$tmp/resumed${given:+-given}.st" >"$tmp/resumed.out" 2>&1 && pass || fail "resume '$given': $(cat "$tmp/resumed.out")"
done
same_tensors "$tmp/resumed.st" "$tmp/resumed-given.st" && pass \
  || fail "a resume without --normalize differs from one giving the checkpoint's"
"$bin" "${common[@]}" --augment flip --normalize 0.286,0.353 --devices 2 --epochs 2 --resume "$tmp/two-a.st" \
  --save "$tmp/flip.st" >/dev/null 2>"$tmp/flip.err" && grep -q "warning: .*saved with --augment crop:4,flip, continuing with flip" \
  "$tmp/flip.err" && [[ -s "$tmp/flip.st" ]] && pass || fail "resume with another --augment: $(cat "$tmp/flip.err")"

# eval: the checkpoint's normalisation
out=$("$bin" eval --resume "$tmp/two-a.st" --data "$data" 2>&1)
acc=$(sed -nE 's/^test acc: ([0-9.]+) .*/\1/p' <<<"$out")
close "$acc" "$(test_acc "$tmp/two-a.jsonl")" 1e-9 && pass || fail "eval: $out vs $(test_acc "$tmp/two-a.jsonl")"
without_meta "$tmp/two-a.st" "$tmp/plain.st" data.normalize
plain=$("$bin" eval --resume "$tmp/plain.st" --data "$data" 2>&1 | sed -nE 's/^test acc: ([0-9.]+) .*/\1/p')
[[ -n "$plain" && "$plain" != "$acc" ]] && pass || fail "eval without the normalisation: '$plain' = '$acc'"
given=$("$bin" eval --resume "$tmp/plain.st" --data "$data" --normalize 0.286,0.353 2>&1 | sed -nE 's/^test acc: ([0-9.]+) .*/\1/p')
[[ "$given" == "$acc" ]] && pass || fail "eval --normalize on a checkpoint without it: '$given' vs '$acc'"
out=$("$bin" eval --resume "$tmp/two-a.st" --data "$data" --normalize 0.5,0.5 2>&1) && fail "eval with a contradicting --normalize" \
  || { grep -q "trained with --normalize 0.286000013,0.352999985" <<<"$out" && pass || fail "eval --normalize 0.5,0.5: $out"; }
# predict: the checkpoint's normalisation changes the answer
png="$tmp/shirt.pgm" # the first test image as a PGM
{ printf 'P5\n28 28\n255\n'; gzip -dc "$full/t10k-images-idx3-ubyte.gz" | tail -c +17 | head -c 784; } >"$png"
if [[ -s "$png" ]]; then
  p1=$("$bin" predict --resume "$tmp/two-a.st" --json --logits "$png" 2>&1)
  p2=$("$bin" predict --resume "$tmp/plain.st" --json --logits "$png" 2>&1)
  [[ -n "$p1" && "$p1" == *logits* && "$p1" != "$p2" ]] && pass || fail "predict ignores the normalisation: $p1 / $p2"
else
  fail "could not write the PGM for predict"
fi

# bad values
for bad in "--augment crop:0" "--augment rotate" "--normalize 1,2,3" "--normalize 0.5,0" "--accumulate 0" \
           "--accumulate x" "--normalize 0.1,0.2,0.3,0.4,0.5,0.6"; do
  out=$("$bin" train --data "$data" --limit 500 --epochs 1 $bad --save "$tmp/bad.st" 2>&1) && fail "$bad accepted" \
    || { grep -q -- "${bad%% *}" <<<"$out" && [[ $(wc -l <<<"$out") -eq 1 ]] && pass || fail "$bad: $out"; }
done
out=$("$bin" train --data "$data" --limit 500 --epochs 1 --batch-size 200 --accumulate 3 2>&1) && fail "a step larger than the data accepted" \
  || { grep -q "batch-size 200 x --accumulate 3 is larger than the training set (500 images)" <<<"$out" && pass || fail "$out"; }
[[ ! -e "$tmp/bad.st" ]] && pass || fail "a refused run wrote its --save file"
testing_finish cli_augment
