#!/usr/bin/env bash
# cli_short_batch.sh - an epoch whose last batch has fewer examples than
# there are devices (docs/training.md "The last short batch"): the devices
# without examples contribute nothing, so the step's update is still the
# mean gradient over the examples there are. Every run trains 2 epochs of
# --limit 24 + R examples in batches of 24 (the last one R examples):
# - one process, k = 2 and 3 CPU devices, every remainder R from 1 to k - 1,
#   with and without --accumulate 2 (batches of 12 x 2): the checkpoint's
#   parameters equal one device's within 1e-5 of each tensor's largest
#   value (measured: 2.2e-7 at most; the same runs without their last batch
#   differ from them by 0.47);
# - with the other strategies (--overlap on, --allreduce naive, --sync ps)
#   and with synchronised batch norm (tiny_resnet: the same statistics as
#   one device), each against one device; batch norm per device (each
#   device its own statistics: not one device's numbers) runs and ends with
#   identical replicas (dp_fit checks them);
# - 2 MPI ranks x 1 device (R = 1: rank 1 without examples) and 2 ranks x 2
#   devices (R = 1, 2, 3), with and without --accumulate 2, and 2 x 1 with
#   --sync-batch-norm: 2 x 1 bit for bit one process on 2 devices, 2 x 2
#   within 1e-5 of one device;
# - on 3 GPUs of the CUDA emulator summing with NCCL (LeNet and batch norm),
#   the short step captured as a CUDA graph and replayed gives the bits of
#   the steps as made, and one device's numbers within 1e-5.
source "$(dirname "$0")/testing.sh"
small_data "$tmp/data" 200 50
lenet=(--model lenet-paddle --optimizer momentum)
tiny=(--model "$(dirname "$0")/models/tiny_resnet.cfg" --optimizer momentum)

# run NAME DEVICES R ARGS...: 2 epochs of 24 + R examples, batches of 24 (or as ARGS say); $quiet
quiet=--quiet
run() {
  local name=$1 devices=$2 r=$3
  shift 3
  "$bin" train --data "$tmp/data" --limit $((24 + r)) --batch-size 24 --epochs 2 --lr 0.05 --seed 3 ${quiet-} \
    --devices "$devices" --save "$tmp/$name.st" "$@" >"$tmp/$name.out" 2>&1 && pass \
    || fail "$name on $devices (last batch of $r): $(tail -2 "$tmp/$name.out")"
}
# near A B: A's parameters within 1e-5 of B's (close_checkpoints, testing.sh)
near() {
  local worst
  worst=$(close_checkpoints "$tmp/$1.st" "$tmp/$2.st" 1e-5 2>&1) && pass || fail "$1 vs $2: worst $worst"
}

for k in 2 3; do
  for ((r = 1; r < k; r++)); do
    run "one-$r" 1 "$r" "${lenet[@]}"
    run "k$k-$r" "$k" "$r" "${lenet[@]}"
    near "k$k-$r" "one-$r"
    run "one-acc-$r" 1 "$r" "${lenet[@]}" --batch-size 12 --accumulate 2
    run "k$k-acc-$r" "$k" "$r" "${lenet[@]}" --batch-size 12 --accumulate 2
    near "k$k-acc-$r" "one-acc-$r"
  done
done
# the check can fail: the same run without its last batch is far from it
run "k3-none" 3 0 "${lenet[@]}"
if close_checkpoints "$tmp/k3-none.st" "$tmp/one-1.st" 1e-5 >/dev/null 2>&1; then
  fail "a run without the short batch passes for one with it"
else pass; fi

for strategy in "--overlap on" "--allreduce naive" "--sync ps"; do
  name=$(tr -dc 'a-z' <<<"$strategy")
  run "$name" 3 1 "${lenet[@]}" $strategy
  near "$name" one-1
done
run tiny-one 1 2 "${tiny[@]}"
run tiny-sync 3 2 "${tiny[@]}" --sync-batch-norm
near tiny-sync tiny-one
run tiny-per-device 3 1 "${tiny[@]}"

if command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root --oversubscribe)
  # ranks NAME N_PER_RANK R ARGS...: 2 ranks; with 1 device each, bit for bit one process on 2 devices
  # (the same sums in the same order); with 2, one device's numbers within 1e-5 (the ranks' sum adds
  # (g0 + g1) + (g2 + g3), one process ((g0 + g1) + g2) + g3)
  ranks() {
    local name=$1 per=$2 r=$3
    shift 3
    "${mpi[@]}" -np 2 "$bin" train --data "$tmp/data" --limit $((24 + r)) --batch-size 24 --epochs 2 --lr 0.05 \
      --seed 3 --quiet --devices "$per" --save "$tmp/$name.st" "$@" >"$tmp/$name.out" 2>&1 && pass \
      || fail "$name: 2 ranks x $per (last batch of $r): $(tail -2 "$tmp/$name.out")"
    if [[ $per == 1 ]]; then
      run "$name-local" 2 "$r" "$@"
      same_tensors "$tmp/$name.st" "$tmp/$name-local.st" && pass \
        || fail "$name: 2 ranks x 1 and one process on 2 devices differ"
    else
      run "$name-one" 1 "$r" "$@"
      near "$name" "$name-one"
    fi
  }
  ranks mpi1 1 1 "${lenet[@]}"
  ranks mpi1-acc 1 1 "${lenet[@]}" --batch-size 12 --accumulate 2
  for r in 1 2 3; do
    ranks "mpi2-$r" 2 "$r" "${lenet[@]}"
    ranks "mpi2-acc-$r" 2 "$r" "${lenet[@]}" --batch-size 12 --accumulate 2
  done
  ranks mpi-sync 1 1 "${tiny[@]}" --sync-batch-norm
  run tiny-one-1 1 1 "${tiny[@]}"
  near mpi-sync tiny-one-1
else
  fail "mpirun not found (openmpi-bin)"
fi
# GPUs on the CUDA emulator (where this build has it): 3 GPUs summing with NCCL, 2 of them without
# examples in the last batch of 1; 4 epochs, so the short step's shape is captured as a CUDA graph
# (after 2 warm-up steps) and replayed: the same bits as without graphs, within 1e-5 of one CPU device
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  for model in lenet tiny; do
    [[ $model == lenet ]] && args=("${lenet[@]}") || args=("${tiny[@]}")
    for graph in on off; do
      DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=3 quiet='' run "gpu-$model-$graph" cuda:0,cuda:1,cuda:2 1 \
        "${args[@]}" --epochs 4 --cuda-graph "$graph"
    done
    same_tensors "$tmp/gpu-$model-on.st" "$tmp/gpu-$model-off.st" && pass \
      || fail "$model on 3 emulated GPUs: step graphs and steps as made differ"
  done
  grep -q "cuda graph: 4 steps launched as graphs (2 captures)" "$tmp/gpu-lenet-on.out" && pass \
    || fail "the short step was not captured: $(grep 'cuda graph' "$tmp/gpu-lenet-on.out")"
  run gpu-one 1 1 "${lenet[@]}" --epochs 4
  near gpu-lenet-on gpu-one
fi
testing_finish cli_short_batch
