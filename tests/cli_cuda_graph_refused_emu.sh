#!/usr/bin/env bash
# cli_cuda_graph_refused_emu.sh - a step capture that CUDA or NCCL refuses
# falls back to the step as made (src/trainer/step_graph.c,
# capture_or_refuse), on the CUDA emulator, which refuses on purpose
# (DPTRAIN_CUDA_EMU_REFUSE_CAPTURE, tests/cuda_emulator/emu_graph.c). Skipped
# (77) in a build without CUDA. Adam with a constant learning rate: its step
# count (advanced by the capture's host part) changes its corrections, so a
# step count not given back shows in the bits. It shows:
# - one GPU, every capture refused (cudaStreamEndCapture invalidated;
#   cudaGraphInstantiate failing; the capture's first call refused, which
#   fails the step inside the capture after the optimizers' step counts
#   moved): the run exits 0, says so in exactly one line naming what was
#   refused, ends with the checkpoint of --cuda-graph off, byte for byte
#   (its tensors, and its header's step count and optimizer step count),
#   and its last loss, and counts 0 steps launched as graphs (0 captures,
#   6 as made: the refused shape is not captured again after 2 more
#   warm-up steps);
# - only the second capture refused (the short last batch's shape, in the
#   third epoch): that shape runs as made, the first keeps its graph (4
#   launched, 1 capture, 5 as made), the bits of --cuda-graph off;
# - a genuine failure is not swallowed: a GPU fault in the step whose
#   capture was refused fails the run as it fails without graphs (the same
#   status and message);
# - two GPUs summing with NCCL, the capture of only cuda:1 refused (at its
#   end, at its first call, NCCL refusing its first sum): both GPUs drop
#   their graphs, the checkpoint of --cuda-graph off, 0 launched as
#   graphs;
# - two MPI ranks (one GPU each), only rank 1's capture refused: both ranks
#   run as made, the bits of --cuda-graph off.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
export DPTRAIN_CUDNN_ALGO=heuristic # as the other graph tests: the cheapest choice on the emulator
unset DPTRAIN_NCCL CUDA_VISIBLE_DEVICES DPTRAIN_CUDA_EMU_REFUSE_CAPTURE DPTRAIN_CUDA_EMU_FAULT
small_data "$tmp/data" 48 24 # 1 epoch of 6 steps of 8 images: 2 warm-up, the capture, 3 more
common=(train --data "$tmp/data" --limit 48 --batch-size 8 --epochs 1 --lr 0.002 --seed 5 --model lenet --optimizer adam)
has_nccl=0
nm "$emu" 2>/dev/null | grep -q ncclAllReduce && has_nccl=1

counts() { sed -nE 's/^cuda graph: ([0-9]+) steps launched as graphs \(([0-9]+) captures\), ([0-9]+) steps as made.*/\1 \2 \3/p' "$tmp/$1.out"; }
# refused NAME BATCH WHAT EXPECTED_COUNTS: the run NAME said once that the step of BATCH could not be
# captured, naming WHAT, and counted EXPECTED_COUNTS
refused() {
  local lines
  lines=$(grep -c "cuda graph: the step of batch" "$tmp/$1.out")
  [[ $lines == 1 ]] && pass || fail "$1: $lines lines say a capture was refused, expected 1"
  grep -qF "dptrain: warning: cuda graph: the step of batch $2 could not be captured (" "$tmp/$1.out" \
    && grep -qE "could not be captured \(.*$3.*\): steps of batch $2 run as made$" "$tmp/$1.out" && pass \
    || fail "$1: the line lacks batch $2 or '$3': $(grep 'cuda graph: the step' "$tmp/$1.out")"
  [[ $(counts "$1") == "$4" ]] && pass || fail "$1: launches, captures, as made: '$(counts "$1")', expected '$4'"
}
# same_checkpoint A B: same_run, and the whole files identical (the header's step counts and loader position too)
same_checkpoint() {
  same_run "$1" "$2"
  cmp -s "$tmp/$1.st" "$tmp/$2.st" && pass || fail "$1 vs $2: the checkpoints differ (the step count in the header?)"
}
# refused_like OFF NAME DEVICES REFUSAL SAYS: NAME, run on DEVICES with DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=REFUSAL,
# ends as OFF did, says once that the capture was refused (naming SAYS), and ran every step as made
refused_like() {
  DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=$4 train_run "$2" "$3"
  same_checkpoint "$2" "$1"
  refused "$2" 8 "$5" "0 0 6"
}

# one GPU, every capture refused: the bits of no graphs
train_run off cuda:0 --cuda-graph off
refused_like off refused-end cuda:0 end \
  "cuda:0: capturing a step as a CUDA graph failed: operation failed due to a previous error during capture"
refused_like off refused-instantiate cuda:0 instantiate \
  "cuda:0: instantiating a step's CUDA graph failed: operation not supported"
refused_like off refused-call cuda:0 call "cuda:0: .* failed: operation not permitted when stream is capturing"

# only the second capture refused: 3 epochs of 12, 12 and 4 images, the batch of 12 captured in epoch 2
# (4 launched as graphs with it), the batch of 4 in epoch 3 (where it is refused)
train_run short-off cuda:0 --epochs 3 --limit 28 --batch-size 12 --cuda-graph off
DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=end:2 train_run short-refused cuda:0 --epochs 3 --limit 28 --batch-size 12
same_checkpoint short-refused short-off
refused short-refused 4 "cuda:0: capturing a step" "4 1 5"

# a GPU fault in the step whose capture was refused (the 60th kernel: in step 3) fails the run as without graphs
for run in off:off refused:on; do
  DPTRAIN_CUDA_EMU_FAULT=60 DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=end "$bin" "${common[@]}" --devices cuda:0 \
    --cuda-graph "${run#*:}" >"$tmp/fault-${run%:*}.out" 2>&1
  echo "status $?" >>"$tmp/fault-${run%:*}.out"
done
grep -q "^status 0$" "$tmp/fault-off.out" && fail "the fault did not fail the run without graphs" || pass
grep -q "could not be captured" "$tmp/fault-refused.out" && pass || fail "the fault came before the refused capture"
[[ -n $(grep "illegal memory access" "$tmp/fault-off.out") &&
   $(grep -v "cuda graph" "$tmp/fault-off.out") == "$(grep -v "cuda graph" "$tmp/fault-refused.out")" ]] && pass \
  || fail "a fault after a refused capture: '$(grep -E '^dptrain|^status' "$tmp/fault-refused.out")'," \
    "without graphs: '$(grep -E '^dptrain|^status' "$tmp/fault-off.out")'"

# two GPUs summing with NCCL, only cuda:1's capture refused: both run as made
if ((has_nccl)); then
  train_run nccl-off cuda:0,cuda:1 --cuda-graph off
  grep -q "allreduce: nccl" <(head -1 "$tmp/nccl-off.out") && pass || fail "nccl-off: $(head -1 "$tmp/nccl-off.out")"
  refused_like nccl-off nccl-end cuda:0,cuda:1 end@1 "cuda:1: capturing a step as a CUDA graph failed"
  refused_like nccl-off nccl-call cuda:0,cuda:1 call@1 \
    "cuda:1: .* failed: operation not permitted when stream is capturing"
  refused_like nccl-off nccl-nccl cuda:0,cuda:1 nccl@1 "NCCL: ncclAllReduce.*refused in a CUDA graph's capture"
else
  echo "cli_cuda_graph_refused_emu: the NCCL cases SKIPPED: the CUDA emulator was built without NCCL"
fi

# two MPI ranks summing with NCCL, only rank 1's capture refused: both ranks run as made
if command -v mpirun >/dev/null && ((has_nccl)); then
  cat >"$tmp/rank.sh" <<'EOF'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}
export CUDA_VISIBLE_DEVICES=$r
[[ $r == 1 ]] && export DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=call
exec "$@"
EOF
  for graph in on off; do
    mpirun --allow-run-as-root --oversubscribe -np 2 -x DPTRAIN_CUDA_MODULE -x DPTRAIN_CUDA_EMU_GPUS \
      bash "$tmp/rank.sh" "$bin" "${common[@]}" --batch-size 24 --epochs 2 --devices cuda:0 --cuda-graph "$graph" \
      --save "$tmp/ranks-$graph.st" --metrics "$tmp/ranks-$graph.jsonl" >"$tmp/ranks-$graph.out" 2>&1 && pass \
      || fail "2 ranks, --cuda-graph $graph: $(tail -3 "$tmp/ranks-$graph.out")"
  done
  same_checkpoint ranks-on ranks-off
  [[ $(counts ranks-on) == "0 0 4" ]] && pass || fail "2 ranks: launches, captures, as made: '$(counts ranks-on)'"
  # each rank says it once: rank 1 what its GPU refused, rank 0 that rank 1's capture was
  grep -q "could not be captured (rank 1: cuda:0: .* not permitted when stream is capturing)" "$tmp/ranks-on.out" \
    && grep -qF "could not be captured (rank 1's capture was refused)" "$tmp/ranks-on.out" \
    && [[ $(grep -c "could not be captured" "$tmp/ranks-on.out") == 2 ]] && pass \
    || fail "2 ranks: $(grep 'could not be captured' "$tmp/ranks-on.out")"
else
  echo "cli_cuda_graph_refused_emu: the MPI case SKIPPED: no mpirun, or an emulator without NCCL"
fi

testing_finish cli_cuda_graph_refused_emu
