#!/usr/bin/env bash
# cli_cuda_graph_nccl_emu.sh - the step as CUDA graphs on several GPUs of
# one process that sum with NCCL (src/trainer/step_graph.c, the sums
# captured by src/backend/cuda/peer_nccl.c), on the CUDA emulator: NCCL's
# stream forked into each GPU's capture and joined back (emu_graph.c), each
# member's sum a node of its GPU's graph, the graphs launched from the
# devices' threads and meeting at the sum (emu_nccl.c). Skipped (77) in a
# build without CUDA or whose emulator has no NCCL. It shows:
# - graphs and no graphs give the same checkpoint bits and last loss on
#   cuda:0,cuda:1 (SGD, 3 epochs; Adam with a cosine schedule and a short
#   last batch: a second shape's graphs) and on 3 GPUs; cli_nccl_emu
#   compares NCCL runs with graphs and the host path without them for
#   --overlap on (each bucket's sum captured where the backward pass
#   issued it), --accumulate 3, tiny_resnet (batch norm's running
#   statistics broadcast inside the graphs) and 2 MPI ranks;
# - the graphs were used: the counts of the one-GPU run (10 steps launched
#   from 1 capture, 2 as made) and the emulator's graph launches, one per
#   GPU and replayed step (20 on 2 GPUs, 30 on 3), its NCCL sums replayed
#   inside them; the same kernels in all (launched one by one plus in
#   graphs = the run without graphs);
# - an evaluation that grows a GPU's memory (the wide model of
#   tests/models/wide_1x1.cfg) makes its graphs stale: every GPU's are
#   dropped and captured again, the same bits as without graphs;
# - a resume from the end of epoch 1 captures afresh and ends with the
#   straight run's bits;
# - what stays as made says why on its first line: two GPUs summing
#   through host memory (DPTRAIN_NCCL=0).
# The emulator's own checks of such captures (fork, join, an update before
# the join, a launch from one thread) are emu_test_cuda_graph's.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
if ! nm -D "$emu" 2>/dev/null | grep -q ncclAllReduce && ! nm "$emu" 2>/dev/null | grep -q ncclAllReduce; then
  echo "cli_cuda_graph_nccl_emu: SKIPPED: the CUDA emulator was built without NCCL (no nccl.h found)"
  exit 77
fi
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=3 DPTRAIN_CUDA_EMU_STATS=1
# the heuristics' cuDNN algorithms: the stale-graph case below is sized with their workspaces (the
# emulator's workspace depends on the algorithm; the measured default chooses others, the arena then never outgrows)
export DPTRAIN_CUDNN_ALGO=heuristic
unset DPTRAIN_NCCL CUDA_VISIBLE_DEVICES
small_data "$tmp/data" 100 48 # 4 steps of 24 images an epoch; --limit 100: a short last batch
common=(train --data "$tmp/data" --limit 96 --batch-size 24 --lr 0.05 --seed 5 --model lenet)

first_line_has() {
  [[ $(head -1 "$tmp/$1.out") == *"$2"* ]] && pass || fail "$1: first line '$(head -1 "$tmp/$1.out")' lacks '$2'"
}
for mode in sgd adam-short three; do
  devices=cuda:0,cuda:1
  case $mode in
    sgd) args=(--epochs 3 --optimizer sgd) ;;
    adam-short) args=(--epochs 2 --optimizer adam --lr 0.002 --lr-schedule cosine --limit 100) ;;
    three) args=(--epochs 3 --optimizer sgd) devices=cuda:0,cuda:1,cuda:2 ;;
  esac
  train_run "$mode-on" "$devices" "${args[@]}" --cuda-graph on
  train_run "$mode-off" "$devices" "${args[@]}" --cuda-graph off
  same_run "$mode-on" "$mode-off"
  first_line_has "$mode-on" ", cuda graph: on, allreduce: nccl"
  first_line_has "$mode-off" ", cuda graph: off (--cuda-graph off), allreduce: nccl"
done

# the graphs were used: 3 epochs of 4 steps, as on one GPU (cli_cuda_graph_emu)
counts() { sed -nE 's/^cuda graph: ([0-9]+) steps launched as graphs \(([0-9]+) captures\), ([0-9]+) steps as made.*/\1 \2 \3/p' "$tmp/$1.out"; }
stat() { sed -nE "s/^cuda emulator: ([0-9]+) kernel launches, .* ([0-9]+) graph launches \(([0-9]+) kernels in them\)$/\\$2/p" "$tmp/$1.out"; }
for run in sgd:2 three:3; do
  name=${run%:*} gpus=${run#*:}
  [[ $(counts "$name-on") == "10 1 2" ]] && pass || fail "$name: launches, captures, as made: '$(counts "$name-on")'"
  [[ $(stat "$name-on" 2) == $((10 * gpus)) ]] && pass \
    || fail "$name: the emulator counted $(stat "$name-on" 2) graph launches, expected $((10 * gpus))"
  [[ $(stat "$name-off" 2) == 0 ]] && pass || fail "$name off: $(stat "$name-off" 2) graph launches"
  [[ -n $(stat "$name-on" 1) && $(($(stat "$name-on" 1) + $(stat "$name-on" 3))) == "$(stat "$name-off" 1)" ]] && pass \
    || fail "$name kernels: $(stat "$name-on" 1) + $(stat "$name-on" 3) in graphs with graphs, $(stat "$name-off" 1) without"
done

# graphs gone stale on one GPU drop every GPU's: an evaluation of 16 images per GPU outgrows what the training
# step of the wide model used (tests/models/wide_1x1.cfg), every GPU's graphs are dropped and captured again
# in the next epoch (2 epochs of 4 steps: 4 launched from 2 captures, 4 as made), the same bits as without
for graph in on off; do
  "$bin" train --data "$tmp/data" --limit 16 --batch-size 4 --lr 0.05 --seed 5 --epochs 2 --cuda-graph "$graph" \
    --devices cuda:0,cuda:1,cuda:2 --model "$(dirname "$0")/models/wide_1x1.cfg" --save "$tmp/wide-$graph.st" \
    >"$tmp/wide-$graph.out" 2>&1 && pass || fail "wide_1x1, --cuda-graph $graph: $(tail -2 "$tmp/wide-$graph.out")"
done
same_tensors "$tmp/wide-on.st" "$tmp/wide-off.st" && pass || fail "wide_1x1: graphs captured again give other bits"
[[ $(counts wide-on) == "4 2 4" ]] && pass || fail "wide_1x1: launches, captures, as made: '$(counts wide-on)'"
[[ $(stat wide-on 2) == 12 ]] && pass || fail "wide_1x1: the emulator counted $(stat wide-on 2) graph launches, expected 12"

# a resume (the end of epoch 1 of 3) captures afresh on both GPUs and ends with the straight run's bits
train_run half cuda:0,cuda:1 --epochs 3 --optimizer sgd --stop-after 1
train_run resumed cuda:0,cuda:1 --epochs 3 --optimizer sgd --resume "$tmp/half.st"
same_run sgd-on resumed
grep -qE "^cuda graph: [1-9][0-9]* steps launched as graphs \([1-9]" "$tmp/resumed.out" && pass \
  || fail "resumed: $(grep '^cuda graph' "$tmp/resumed.out")"

# as made, and why: two GPUs summing through host memory
DPTRAIN_NCCL=0 "$bin" "${common[@]}" --epochs 1 --devices cuda:0,cuda:1 >"$tmp/host.out" 2>&1 && pass \
  || fail "host: $(tail -2 "$tmp/host.out")"
first_line_has host ", cuda graph: off (several devices summing through host memory (a graph needs NCCL)), allreduce: host"

testing_finish cli_cuda_graph_nccl_emu
