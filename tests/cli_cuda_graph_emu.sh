#!/usr/bin/env bash
# cli_cuda_graph_emu.sh - `dptrain train --cuda-graph on|off` on one CUDA
# device of the CUDA emulator (tests/cuda_emulator/: stream capture and
# graph launches are emulated, emu_graph.c). Skipped (77) in a build
# without CUDA. What it shows is the logic and the bits, not a GPU's speed:
# - the step captured as a graph and replayed gives the checkpoint bits of
#   the step as made: LeNet with SGD, with Adam and a cosine schedule
#   (changed every step: the learning rate and Adam's corrections reach the
#   graph through device memory), with AdamW and a cosine schedule (its
#   decay 1 - lr * weight_decay changes every step too), with momentum and --accumulate 2 (two
#   micro-batches in one graph), with a short last batch (its own graph),
#   and a model with dropout and batch norm (tiny_resnet: the masks' seeds
#   change every step and reach the graph through device memory), a model
#   with stochastic depth (tiny_efficientnet: [drop_path]'s seeds likewise), and
#   LeNet in --precision bf16 (the casts and the bf16 products captured),
#   and LeNet with --overlap on (each bucket's update captured where the
#   backward pass completed it), and LeNet with --augment crop:4,flip (each
#   step's batch augmented on the host, its bytes uploaded before the
#   launch);
# - the graphs were used: 3 epochs of 4 steps run 10 steps as graph
#   launches from 1 capture and 2 as made (2 warm-up steps; the evaluations
#   free nothing the graph uses);
#   the emulator counts as many graph launches, and the kernels it ran in
#   graphs plus those launched one by one are exactly the run's without
#   graphs (no kernel lost or added), none launched one by one in a
#   replayed step; a third epoch adds as many host synchronisations with
#   graphs as without (the epoch's own, none per step);
# - an evaluation that grows the device memory a graph uses (a wide model,
#   tests/models/wide_1x1.cfg) makes it stale: dropped, warmed up and
#   captured again in the next epoch (4 launched, 2 captures, 4 as made),
#   the same bits as without graphs;
# - a resume from a checkpoint (the end of epoch 1 of 2) captures afresh and
#   ends with the straight run's bits;
# - every run that cannot be captured says why on its first line and
#   trains: --cuda-graph off, --sync-batch-norm, --profile,
#   --sync ps, two devices sharing a GPU (host sums), CPU devices
#   with --cuda-graph on; a bad value is refused.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1 DPTRAIN_CUDA_EMU_STATS=1
# the heuristics' cuDNN algorithms: the stale-graph case is sized with their workspaces (the emulator's
# workspace depends on the algorithm; with the measured default's choices the arena never outgrows)
export DPTRAIN_CUDNN_ALGO=heuristic
small_data "$tmp/data" 100 48 # 4 steps of 24 images an epoch (the emulated convolutions are slow); the test batch larger
common=(train --data "$tmp/data" --limit 96 --batch-size 24 --lr 0.05 --seed 5 --model lenet)

# both ways, the same bits
for mode in sgd adam-cosine adamw-cosine momentum-accumulate short-batch dropout drop-path bf16 overlap augment; do
  case $mode in
    sgd) args=(--epochs 3 --optimizer sgd) ;;
    adam-cosine) args=(--epochs 2 --optimizer adam --lr 0.002 --lr-schedule cosine) ;;
    adamw-cosine) args=(--epochs 2 --optimizer adamw --lr 0.002 --weight-decay 0.5 --lr-schedule cosine) ;;
    momentum-accumulate) args=(--epochs 2 --optimizer momentum --batch-size 12 --accumulate 2) ;;
    short-batch) args=(--epochs 3 --optimizer adam --lr 0.002 --limit 100) ;;
    dropout) args=(--epochs 2 --optimizer momentum --model "$(dirname "$0")/models/tiny_resnet.cfg") ;;
    drop-path) args=(--epochs 2 --optimizer momentum --model "$(dirname "$0")/models/tiny_efficientnet.cfg") ;;
    bf16) args=(--epochs 2 --optimizer momentum --precision bf16) ;; # the casts and bf16 products captured too
    overlap) args=(--epochs 2 --optimizer adam --lr 0.002 --overlap on) ;; # the buckets' updates captured as issued
    augment) args=(--epochs 3 --optimizer momentum --augment crop:4,flip) ;; # augmented on the host, uploaded as bytes
  esac
  train_run "$mode-on" cuda:0 "${args[@]}" --cuda-graph on
  train_run "$mode-off" cuda:0 "${args[@]}" --cuda-graph off
  same_run "$mode-on" "$mode-off"
  grep -qE ", cuda graph: on(,|$)" <(head -1 "$tmp/$mode-on.out") && pass \
    || fail "$mode: first line: $(head -1 "$tmp/$mode-on.out")"
  grep -qF ", cuda graph: off (--cuda-graph off)" <(head -1 "$tmp/$mode-off.out") && pass \
    || fail "$mode off: first line: $(head -1 "$tmp/$mode-off.out")"
done

# the graphs were used (sgd, 3 epochs of 4 steps)
counts() { sed -nE 's/^cuda graph: ([0-9]+) steps launched as graphs \(([0-9]+) captures\), ([0-9]+) steps as made.*/\1 \2 \3/p' "$tmp/$1.out"; }
[[ $(counts sgd-on) == "10 1 2" ]] && pass \
  || fail "sgd: graph launches, captures, steps as made: '$(counts sgd-on)', expected '10 1 2'"
stat() { sed -nE "s/^cuda emulator: ([0-9]+) kernel launches, .* ([0-9]+) graph launches \(([0-9]+) kernels in them\)$/\\$2/p" "$tmp/$1.out"; }
[[ $(stat sgd-on 2) == 10 ]] && pass || fail "the emulator counted $(stat sgd-on 2) graph launches, expected 10"
[[ $(stat sgd-off 2) == 0 ]] && pass || fail "--cuda-graph off: $(stat sgd-off 2) graph launches"
[[ -n $(stat sgd-on 1) && $(($(stat sgd-on 1) + $(stat sgd-on 3))) == "$(stat sgd-off 1)" ]] && pass \
  || fail "kernels: $(stat sgd-on 1) launched + $(stat sgd-on 3) in graphs with graphs, $(stat sgd-off 1) without"
# 10 of 12 steps replayed: each replayed step launched no kernel of its own (its kernels all ran in the graph)
per_step=$(($(stat sgd-on 3) / 10))
[[ $per_step -ge 20 && $(($(stat sgd-off 1) - $(stat sgd-on 1))) == $((10 * per_step)) ]] && pass \
  || fail "kernels per graph $per_step; launched one by one: $(stat sgd-on 1) with graphs, $(stat sgd-off 1) without"

# graphs gone stale: an evaluation that outgrows what the training step used (tests/models/wide_1x1.cfg: wide
# activations, cheap arithmetic; the device memory it grows frees some) drops the graph, and the next epoch
# warms up and captures again: 2 epochs of 4 steps, 4 launched from 2 captures, 4 as made; the same bits
small_data "$tmp/wide" 16 16
for graph in on off; do
  "$bin" train --data "$tmp/wide" --batch-size 4 --lr 0.05 --seed 5 --epochs 2 --devices cuda:0 --cuda-graph "$graph" \
    --model "$(dirname "$0")/models/wide_1x1.cfg" --save "$tmp/wide-$graph.st" >"$tmp/wide-$graph.out" 2>&1 && pass \
    || fail "wide_1x1, --cuda-graph $graph: $(tail -2 "$tmp/wide-$graph.out")"
done
same_tensors "$tmp/wide-on.st" "$tmp/wide-off.st" && pass || fail "wide_1x1: graphs captured again give other bits"
[[ $(counts wide-on) == "4 2 4" ]] && pass || fail "wide_1x1: launches, captures, as made: '$(counts wide-on)', expected '4 2 4'"

# no host synchronisation per step with graphs either: a third epoch (4 replayed steps) adds as many as
# it adds to the run without graphs (the epoch's own: its figures, its test accuracy, its checkpoint)
train_run sgd-on-2 cuda:0 --epochs 2 --optimizer sgd --cuda-graph on
train_run sgd-off-2 cuda:0 --epochs 2 --optimizer sgd --cuda-graph off
syncs() { sed -nE 's/^cuda emulator: .* ([0-9]+) stream synchronisations.*/\1/p' "$tmp/$1.out"; }
on=$(($(syncs sgd-on) - $(syncs sgd-on-2))) off=$(($(syncs sgd-off) - $(syncs sgd-off-2)))
echo "cli_cuda_graph_emu: a third epoch adds $on host synchronisations with graphs, $off without"
[[ -n $(syncs sgd-on-2) && $on == "$off" ]] && pass \
  || fail "host synchronisations of a third epoch: $on with graphs, $off without (want the same: none per step)"

# a resume captures afresh and ends where the straight run does
train_run half cuda:0 --epochs 2 --stop-after 1 --optimizer adam --lr 0.002 --lr-schedule cosine
train_run resumed cuda:0 --epochs 2 --optimizer adam --lr 0.002 --lr-schedule cosine --resume "$tmp/half.st"
same_run adam-cosine-on resumed
grep -q "(1 captures)" "$tmp/resumed.out" && pass || fail "resumed: $(grep '^cuda graph: [0-9]' "$tmp/resumed.out")"

# runs that cannot be captured: the first line says why, and they train
why_run() {
  local name=$1 devices=$2 why=$3
  shift 3
  "$bin" "${common[@]}" --limit 24 --epochs 1 --devices "$devices" "$@" >"$tmp/$name.out" 2>&1 && pass \
    || fail "$name: $(tail -2 "$tmp/$name.out")"
  [[ $(head -1 "$tmp/$name.out") == *", cuda graph: off ($why)"* ]] && pass || fail "$name: $(head -1 "$tmp/$name.out")"
  grep -q "^cuda graph: [0-9]" "$tmp/$name.out" && fail "$name: graphs were counted" || pass
}
why_run sync-bn cuda:0 "--sync-batch-norm (its statistics meet at a host barrier)" --sync-batch-norm
why_run profile cuda:0 "--profile (its timing marks are read on the host)" --profile-steps 0,1
why_run ps cuda:0 "--sync ps (the server's update runs on its own device)" --sync ps
why_run two cuda:0,cuda:0 "several devices summing through host memory (a graph needs NCCL)"
why_run cpu cpu:0 "not CUDA devices" --cuda-graph on
"$bin" "${common[@]}" --devices cpu:0 --epochs 1 --limit 24 >"$tmp/cpu-default.out" 2>&1 && pass || fail "cpu: $(tail -1 "$tmp/cpu-default.out")"
grep -q "cuda graph" "$tmp/cpu-default.out" && fail "CPU devices without --cuda-graph: $(head -1 "$tmp/cpu-default.out")" || pass
"$bin" "${common[@]}" --devices cuda:0 --cuda-graph maybe >"$tmp/bad.out" 2>&1 && fail "--cuda-graph maybe accepted" || pass
grep -q "cuda-graph: 'maybe' is not on or off" "$tmp/bad.out" && pass || fail "bad value: $(cat "$tmp/bad.out")"

testing_finish cli_cuda_graph_emu
