#!/usr/bin/env bash
# cli_checkpoint.sh - `dptrain train --save/--resume`, `dptrain eval`,
# `dptrain inspect` and tools/read_checkpoint.py, on the real Fashion-MNIST
# (600 training images, 2 devices: well under a second per run).
# - 2 epochs straight and 1 epoch + save + resume + 1 more epoch end in
#   byte-identical checkpoint files (tensors and metadata), with allreduce
#   and with the parameter server; the resumed run prints and records the
#   same epoch-2 numbers;
# - the same with tests/models/tiny_resnet.cfg (batch norm buffers, dropout
#   masks from the step count, a residual block): adam + cosine schedule
#   with a warm-up that runs across the resume point, momentum + Nesterov +
#   step decay, and sync batch norm; the first part stops with --stop-after 1
#   so that its cosine schedule is the full run's;
# - eval reports the test accuracy the training recorded, to the image (for
#   the BN model: the running statistics came back);
# - tools/read_checkpoint.py (numpy only; torch is made unimportable) prints
#   exactly what `dptrain inspect` prints: names, shapes, float64 sums (also
#   for the BN + adam checkpoint);
# - refusals, one line each, exit 1, nothing written: another model (naming
#   the tensor), a truncated / corrupt / padded file, another batch size,
#   seed or --limit, a mid-epoch checkpoint, another lr schedule (kind,
#   warm-up, cosine length); a warning for another lr or beta2, and for
#   another device count (and none when nothing changed);
# - a checkpoint that already has --epochs epochs: nothing trained, its
#   accuracy reported, the file untouched;
# - under mpirun (when built with MPI): 2 ranks x 1 device resume to the
#   same tensors as 1 process x 2 devices; the device-count warning is
#   printed once; only rank 0 writes (each rank runs in its own directory
#   with a relative --save: only rank 0's gets a file, no temporary files);
#   --sync ps with momentum (whose state only rank 0's server holds) resumes
#   byte-identically on 2 ranks.
source "$(dirname "$0")/testing.sh"
reader="$(dirname "$0")/../tools/read_checkpoint.py"
field() { sed -E "s/.*\"$1\": *([^,}]*).*/\1/" <<<"$2"; }
# A refusal: exit status 1, exactly one line on stderr, containing $2.
refused() {
  local label=$1 part=$2 status=$3 err=$4
  [[ $status -eq 1 && $(wc -l <"$err") -eq 1 ]] && grep -qF -- "$part" "$err" && pass \
    || fail "$label: status $status, stderr: $(head -c 400 "$err") (expected one line with '$part')"
}
# the first 600 training and 1000 test images: each epoch's evaluation stays short
small_data "$tmp/fm" 600 1000
data=$tmp/fm
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

# --- tiny_resnet: batch norm, dropout, optimizer state, lr schedules ---------------------------
models="$(cd "$(dirname "$0")" && pwd)/models"
resnet=(train --data "$data" --model "$models/tiny_resnet.cfg" --limit 600 --batch-size 64 --seed 5 --devices 2
        --epochs 2)
# straight_vs_resumed LABEL OPTION...: 2 epochs straight vs --stop-after 1 + --resume + 1 more.
straight_vs_resumed() {
  local label=$1
  shift
  "$bin" "${resnet[@]}" "$@" --save "$tmp/$label.a.st" --metrics "$tmp/$label.a.jsonl" >"$tmp/$label.a.out" 2>&1 \
    && pass || fail "$label straight: $(tail -3 "$tmp/$label.a.out")"
  "$bin" "${resnet[@]}" "$@" --stop-after 1 --save "$tmp/$label.b.st" >"$tmp/$label.b1.out" 2>&1 \
    && grep -q "^epoch 1/2: " "$tmp/$label.b1.out" && ! grep -q "^epoch 2/2" "$tmp/$label.b1.out" && pass \
    || fail "$label --stop-after 1: $(tail -3 "$tmp/$label.b1.out")"
  cp "$tmp/$label.b.st" "$tmp/$label.one.st"
  "$bin" "${resnet[@]}" "$@" --resume "$tmp/$label.b.st" --save "$tmp/$label.b.st" --metrics "$tmp/$label.b.jsonl" \
    >"$tmp/$label.b2.out" 2>&1 && pass || fail "$label resume: $(tail -3 "$tmp/$label.b2.out")"
  cmp "$tmp/$label.a.st" "$tmp/$label.b.st" && pass || fail "$label: 2 straight epochs and 1 + resume + 1 differ"
  cmp -s "$tmp/$label.one.st" "$tmp/$label.b.st" && fail "$label: the resumed run did not change the checkpoint" \
    || pass
  ! grep -q "warning" "$tmp/$label.b2.out" && pass || fail "$label: resume warned: $(cat "$tmp/$label.b2.out")"
  local a2 b2
  a2=$(sed -n 2p "$tmp/$label.a.jsonl") b2=$(cat "$tmp/$label.b.jsonl")
  for key in lr train_loss test_acc; do
    [[ -n "$(field $key "$a2")" && "$(field $key "$a2")" == "$(field $key "$b2")" ]] && pass \
      || fail "$label epoch 2 $key: straight $(field $key "$a2"), resumed $(field $key "$b2")"
  done
}
# the warm-up (13 steps; 10 per epoch) runs across the resume point
straight_vs_resumed adam --optimizer adam --lr 0.01 --lr-schedule cosine --warmup-steps 13
straight_vs_resumed nesterov --optimizer momentum --nesterov --lr 0.02 --lr-schedule step --lr-step-epochs 1 \
  --lr-gamma 0.5
straight_vs_resumed syncbn --optimizer adam --lr 0.01 --lr-schedule cosine --warmup-steps 13 --sync-batch-norm
# the state that came back is not trivial: Adam's moments and the running statistics are non-zero
inspect_sum() { "$bin" inspect "$1" | sed -nE "s/^  $2 \[.*\] sum (.*)/\1/p"; }
for name in optimizer.fc.weight.exp_avg_sq block.bn2.running_mean stem_bn.running_var; do
  sum=$(inspect_sum "$tmp/adam.a.st" "$name")
  [[ -n "$sum" && "$sum" != 0 && "$sum" != 8 ]] && pass || fail "adam checkpoint: $name sum '$sum'"
done
grep -q "^  optimizer.states = momentum_buffer" <("$bin" inspect "$tmp/nesterov.a.st") \
  && grep -q "^  lr_schedule.total_steps = 20" <("$bin" inspect "$tmp/adam.a.st") && pass \
  || fail "metadata of the tiny_resnet checkpoints"
# eval uses the saved running statistics: the accuracy the training recorded
"$bin" eval --resume "$tmp/adam.a.st" --data "$data" --devices 2 >"$tmp/eval_bn.out" 2>&1
line=$(sed -n 1p "$tmp/eval_bn.out") # the main line (a top-5 line follows: 10 outputs)
bn_acc=$(sed -E 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\1/' <<<"$line")
bn_acc=$(awk -v c="$bn_acc" 'BEGIN { printf "%.9g", c / 1000 }')
[[ "$line" == *"model tiny_resnet, epoch 2"* && "$bn_acc" == "$(field test_acc "$(sed -n 2p "$tmp/adam.a.jsonl")")" ]] \
  && pass || fail "eval of the BN model: $line; training recorded $(sed -n 2p "$tmp/adam.a.jsonl")"
# another schedule is refused, naming what differs; nothing written
adam=(--optimizer adam --lr 0.01 --lr-schedule cosine --warmup-steps 13)
for change in "--epochs 3:--epochs (the length of the cosine schedule) 2, this run has 3" \
              "--warmup-steps 12:--warmup-steps 13, this run has 12" \
              "--lr-schedule constant:--lr-schedule cosine, this run has constant"; do
  "$bin" "${resnet[@]}" "${adam[@]}" ${change%%:*} --resume "$tmp/adam.one.st" --save "$tmp/never.st" \
    >/dev/null 2>"$tmp/err"
  refused "resume with ${change%%:*}" "saved with ${change#*:}" $? "$tmp/err"
done
# another beta2: a warning naming both, then training from the checkpoint
"$bin" "${resnet[@]}" "${adam[@]}" --beta2 0.99 --resume "$tmp/adam.one.st" --save "$tmp/beta.st" \
  >"$tmp/beta.out" 2>"$tmp/beta.err" && grep -q "^epoch 2/2" "$tmp/beta.out" \
  && grep -q "warning: .*saved with lr 0.00999999978, weight decay 0, beta1 0.899999976, beta2 0.999000013, eps 9.99999994e-09; continuing with .*beta2 0.99000001" "$tmp/beta.err" \
  && pass || fail "resume with another beta2: $(cat "$tmp/beta.err")"
# another device count: a warning, then training
"$bin" "${resnet[@]}" "${adam[@]}" --devices 1 --resume "$tmp/adam.one.st" --save "$tmp/dev1.st" \
  >"$tmp/dev1.out" 2>"$tmp/dev1.err" && grep -q "^epoch 2/2" "$tmp/dev1.out" \
  && grep -q "warning: .*saved by 2 device(s) x 1 rank(s), resuming on 1 x 1: equal up to float rounding" \
     "$tmp/dev1.err" && [[ $(wc -l <"$tmp/dev1.err") -eq 1 ]] && pass \
  || fail "resume on another device count: $(cat "$tmp/dev1.err")"

# --- eval ---------------------------------------------------------------------------------
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices 2 >"$tmp/eval.out" 2>"$tmp/eval.err" && pass \
  || fail "eval: $(cat "$tmp/eval.err")"
line=$(sed -n 1p "$tmp/eval.out") # the main line (a top-5 line follows: 10 outputs)
correct=$(sed -E 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\1/' <<<"$line")
total=$(sed -E 's/.*\(([0-9]+)\/([0-9]+) correct\).*/\2/' <<<"$line")
acc=$(awk -v c="$correct" -v t="$total" 'BEGIN { printf "%.9g", c / t }')
[[ "$line" == "test acc: "*"on 1000 images, model lenet-paddle, epoch 2, $tmp/a.st" ]] && pass \
  || fail "eval output: $line"
[[ "$acc" == "$(field test_acc "$a2")" ]] && pass || fail "eval accuracy $acc, training recorded $(field test_acc "$a2")"
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices 1 --batch-size 333 >"$tmp/eval1.out" 2>&1
grep -qF "($correct/1000 correct)" "$tmp/eval1.out" && pass || fail "eval on 1 device: $(cat "$tmp/eval1.out")"
# --devices takes train's lists too (cuda:N on a GPU: tests/cli_cuda_gpu.sh), with its one-line errors
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices cpu:0,cpu:1 >"$tmp/eval-list.out" 2>&1
grep -qF "($correct/1000 correct)" "$tmp/eval-list.out" && pass || fail "eval on cpu:0,cpu:1: $(cat "$tmp/eval-list.out")"
"$bin" eval --resume "$tmp/a.st" --data "$data" --devices cpu:0,cpu:0 >/dev/null 2>"$tmp/err"
[[ $? -eq 1 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "eval: --devices: cpu:0 is listed twice" "$tmp/err" && pass \
  || fail "eval --devices cpu:0,cpu:0: $(cat "$tmp/err")"

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
diff <(PYTHONPATH="$tmp/notorch" /usr/bin/python3 "$reader" "$tmp/adam.a.st" 2>&1) <("$bin" inspect "$tmp/adam.a.st") \
  >"$tmp/diff.out" && pass || fail "numpy and dptrain disagree on the BN + adam checkpoint: $(head "$tmp/diff.out")"
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
  && grep -qF "test acc: $(awk -v c="$correct" 'BEGIN { printf "%.4f", c / 1000 }') on 1000 images" "$tmp/done.out" \
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
    ! grep -q "warning" "$tmp/m2.out" && pass || fail "2 ranks x 1 device resuming 1 x 2 warned: $(cat "$tmp/m2.out")"
    # 2 ranks x 2 devices resuming 1 x 2: the warning, once (rank 0 speaks)
    "${mpi[@]}" "$bin" "${common[@]}" --epochs 2 --resume "$tmp/one_epoch.st" --save "$tmp/m4.st" --quiet \
      >"$tmp/m4.out" 2>&1 && [[ $(grep -c "warning: .*saved by 2 device(s) x 1 rank(s), resuming on 2 x 2" \
      "$tmp/m4.out") -eq 1 && $(grep -c "warning" "$tmp/m4.out") -eq 1 ]] && pass \
      || fail "device-count warning under mpirun: $(cat "$tmp/m4.out")"
    # Only rank 0 writes: each rank runs in its own directory with relative output paths.
    mkdir -p "$tmp/rank0" "$tmp/rank1"
    "${mpi[@]}" bash -c 'cd "$0/rank${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" && exec "$@"' "$tmp" \
      "$bin" "${common[@]}" --devices 1 --epochs 2 --save w.st --metrics w.jsonl --quiet >"$tmp/w.out" 2>&1 \
      && pass || fail "mpirun in rank directories: $(tail -3 "$tmp/w.out")"
    [[ "$(ls -A "$tmp/rank0" | tr '\n' ' ')" == "w.jsonl w.st " && -z "$(ls -A "$tmp/rank1")" ]] && pass \
      || fail "files written: rank 0: $(ls -A "$tmp/rank0"), rank 1: $(ls -A "$tmp/rank1")"
    # --sync ps: only rank 0's server steps (and holds momentum); the resume is exact all the same.
    ps=("${resnet[@]}" --devices 1 --sync ps --optimizer momentum --nesterov --lr 0.02 --lr-schedule cosine
        --warmup-steps 13 --quiet)
    "${mpi[@]}" "$bin" "${ps[@]}" --save "$tmp/mps_a.st" >"$tmp/mps.out" 2>&1 \
      && "${mpi[@]}" "$bin" "${ps[@]}" --stop-after 1 --save "$tmp/mps_b.st" >>"$tmp/mps.out" 2>&1 \
      && cp "$tmp/mps_b.st" "$tmp/mps_one.st" \
      && "${mpi[@]}" "$bin" "${ps[@]}" --resume "$tmp/mps_b.st" --save "$tmp/mps_b.st" >>"$tmp/mps.out" 2>&1 \
      && pass || fail "mpirun --sync ps: $(tail -3 "$tmp/mps.out")"
    cmp "$tmp/mps_a.st" "$tmp/mps_b.st" && ! cmp -s "$tmp/mps_one.st" "$tmp/mps_b.st" && pass \
      || fail "mpirun --sync ps: 2 straight epochs and 1 + resume + 1 differ"
    sum=$(inspect_sum "$tmp/mps_one.st" optimizer.fc.weight.momentum_buffer)
    [[ -n "$sum" && "$sum" != 0 ]] && pass || fail "--sync ps under 2 ranks saved momentum sum '$sum'"
  elif grep -q "without MPI" "$tmp/m.out"; then
    echo "cli_checkpoint: this dptrain has no MPI: the mpirun part is skipped"
  else
    fail "mpirun 1 epoch: $(tail -3 "$tmp/m.out")"
  fi
fi

echo "cli_checkpoint: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
