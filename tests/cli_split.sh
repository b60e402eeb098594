#!/usr/bin/env bash
# cli_split.sh - devices on several backend tables (as cuda:0,cuda:1 are: one
# table per GPU, whose memories are apart), on the split CPU backend
# (--devices split:0,split:1,..., backend_cpu_split.c: the staged backend with
# a table and memory of its own per N, aborting when a table is handed
# another's pointer). The trainer then sums and copies among the replicas
# through host memory (src/trainer/replica_collectives.c). Every run is
# compared with the same run on cpu:0,cpu:1,cpu:2: the checkpoint's tensors
# (parameters, optimizer state) byte for byte and the metrics' train_loss to
# the last digit, for
# - the chunked allreduce (momentum), naive (Adagrad), overlap (Adam: its
#   state downloaded from device 0's table for the checkpoint), --sync ps,
#   --augment, --accumulate, batch norm with and without --sync-batch-norm;
# - tables shared by some devices (split:0,split:0,split:1: two devices on
#   one table, one on another);
# - resume: saved on split devices, resumed on CPU devices, and the other
#   way round, equal to 2 epochs straight;
# - 2 MPI ranks of 2 split devices each = 2 ranks of 2 CPU devices;
# - a split device handed another's memory aborts naming both (the check
#   itself), an unknown split:N and --tf32 get one line each.
source "$(dirname "$0")/testing.sh"
small_data "$tmp/data" 600 1000
data=$tmp/data
common=(train --data "$data" --limit 600 --batch-size 96 --lr 0.05 --seed 7 --quiet)

# same NAME ARGS...: split:0,split:1,split:2 gives cpu:0,cpu:1,cpu:2's bits
same() {
  local name=$1
  shift
  train_run "$name-cpu" cpu:0,cpu:1,cpu:2 "$@"
  train_run "$name-split" split:0,split:1,split:2 "$@"
  same_run "$name-cpu" "$name-split"
}

same momentum --model lenet --epochs 1 --optimizer momentum
# the first line names the devices (without --quiet)
"$bin" train --data "$data" --model lenet --limit 96 --batch-size 96 --epochs 1 --devices split:0,split:1,split:2 \
  >"$tmp/names.out" 2>&1
grep -q "on \[split:0, split:1, split:2\]" "$tmp/names.out" && pass \
  || fail "the first line does not name the three split devices: $(head -1 "$tmp/names.out")"
same naive --model lenet --epochs 1 --optimizer adagrad --allreduce naive
same overlap --model lenet --epochs 1 --optimizer adam --overlap on
# Adam's saved state is not all zeros (what a checkpoint that forgot the download would hold)
[[ $(tensors "$tmp/overlap-split.st" | od -An -v -t x1 | tr -d ' \n' | tr -d 0 | wc -c) -gt 0 ]] && pass \
  || fail "overlap: the split checkpoint is all zeros"
same ps --model lenet --epochs 1 --optimizer momentum --sync ps
same augment --model lenet --epochs 1 --optimizer sgd --augment crop:4,flip
same accumulate --model lenet --epochs 1 --optimizer momentum --accumulate 2
same batch-norm --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum
same sync-bn --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum --sync-batch-norm

# two devices on one table, one on another: the same bits again
train_run shared split:0,split:0,split:1 --model lenet --epochs 1 --optimizer momentum
same_run momentum-cpu shared

# resume across kinds: every way gives 2 epochs straight on CPU devices
train_run straight cpu:0,cpu:1,cpu:2 --model lenet --epochs 2 --optimizer adam
for first in cpu split; do
  train_run "half-$first" "$first:0,$first:1,$first:2" --model lenet --epochs 2 --stop-after 1 --optimizer adam
done
for pair in cpu-split split-cpu; do
  first=${pair%-*} second=${pair#*-}
  cp "$tmp/half-$first.st" "$tmp/from-$pair.st"
  train_run "resume-$pair" "$second:0,$second:1,$second:2" --model lenet --epochs 2 --optimizer adam \
    --resume "$tmp/from-$pair.st"
  same_tensors "$tmp/straight.st" "$tmp/resume-$pair.st" && pass \
    || fail "saved on $first, resumed on $second: not 2 epochs straight's tensors"
done

# 2 ranks x 2 split devices = 2 ranks x 2 CPU devices (the sums across ranks staged as well)
if command -v mpirun >/dev/null; then
  for kind in cpu split; do
    for overlap in on off; do
      mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${common[@]}" --model lenet --epochs 1 \
        --optimizer adam --overlap "$overlap" --devices "$kind:0,$kind:1" --save "$tmp/mpi-$overlap-$kind.st" \
        --metrics "$tmp/mpi-$overlap-$kind.jsonl" >"$tmp/mpi-$overlap-$kind.out" 2>&1 && pass \
        || fail "2 ranks on $kind devices, overlap $overlap: $(tail -3 "$tmp/mpi-$overlap-$kind.out")"
    done
  done
  for overlap in on off; do same_run "mpi-$overlap-cpu" "mpi-$overlap-split"; done
  grep -q '"ranks": 2' "$tmp/mpi-on-split.jsonl" && pass || fail "not 2 ranks: $(cat "$tmp/mpi-on-split.jsonl")"
else
  fail "mpirun not found (openmpi-bin)"
fi

# bad input: one line each, non-zero, nothing written
"$bin" "${common[@]}" --model lenet --epochs 1 --devices split:0,split:64 --save "$tmp/bad.st" >"$tmp/out" 2>"$tmp/err"
status=$?
[[ $status -ne 0 && $status -lt 128 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "split:64: no such device" "$tmp/err" \
  && pass || fail "split:64: exit $status, stderr $(cat "$tmp/err")"
[[ ! -e "$tmp/bad.st" ]] && pass || fail "split:64 refused, but a checkpoint was written"
"$bin" "${common[@]}" --model lenet --epochs 1 --devices split:0,split:1 --tf32 >"$tmp/out" 2>"$tmp/err"
status=$?
[[ $status -ne 0 && $status -lt 128 ]] && grep -q "train: --tf32: split:0 has no TF32 mode .*: use --precision fp32" "$tmp/err" && pass \
  || fail "--tf32 on split devices: exit $status, $(cat "$tmp/err")"
testing_finish cli_split
