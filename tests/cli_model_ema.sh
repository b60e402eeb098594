#!/usr/bin/env bash
# cli_model_ema.sh - `dptrain train --model-ema` end to end on a small cut of
# Fashion-MNIST (1,200 training and 300 test images, lenet-paddle, batch 50;
# test_ema.c checks the arithmetic against torchvision's bits and the
# replicas' averages):
# - every epoch's line and the metrics give the average's test accuracy;
#   the first line names it; the checkpoint holds it (ema.* tensors,
#   model_ema.*) and `eval --ema` evaluates it to the last epoch's figure;
# - the decay is torchvision's adjustment of --model-ema-decay (the
#   checkpoint's model_ema.decay);
# - a run stopped after an epoch, or inside one between two updates, and
#   resumed ends in the straight run's bytes (the resume's line names the
#   options it took); 2 ranks under mpirun, and --sync ps, train the same
#   tensors as 2 devices;
# - 2 emulated GPUs (CUDA builds): NCCL = the host path, eval --ema there;
#   1 GPU: step graphs = steps as made;
# - the lr warm-up restarts it, --warmup-epochs as --warmup-steps;
# - --init does not take it; --model-ema-steps without --model-ema, bad
#   values, and eval --ema of a checkpoint without an average are one line.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300
ema=(train --model lenet-paddle --data "$tmp/small" --epochs 3 --batch-size 50 --seed 2 --lr 0.1
     --model-ema --model-ema-steps 5 --model-ema-decay 0.999)
base=("${ema[@]}" --devices 2)
meta() { "$bin" inspect "$1" | sed -n "s/^  $2 = //p"; }

"$bin" "${base[@]}" --save "$tmp/straight.st" --metrics "$tmp/straight.jsonl" >"$tmp/straight.out" 2>&1 \
  && pass || fail "--model-ema: $(tail -3 "$tmp/straight.out")"
grep -q "model EMA every 5 steps" "$tmp/straight.out" && pass || fail "first line: $(head -1 "$tmp/straight.out")"
[[ $(grep -c "^epoch [1-3]/3: .*, test acc [0-9.]* (ema [0-9.]*), lr" "$tmp/straight.out") == 3 ]] && pass \
  || fail "epoch lines: $(grep '^epoch' "$tmp/straight.out")"
last_ema=$(sed -n 's/^epoch 3\/3: .*(ema \([0-9.]*\)).*/\1/p' "$tmp/straight.out")
[[ $(json_field "$(tail -1 "$tmp/straight.jsonl")" test_acc_ema) == "$last_ema"* ]] && pass \
  || fail "metrics: test_acc_ema $(json_field "$(tail -1 "$tmp/straight.jsonl")" test_acc_ema), epoch line $last_ema"
# torchvision's adjustment: 1 - min(1, (1 - 0.999) x 50 x 5 / 3)
decay=$(meta "$tmp/straight.st" model_ema.decay)
/usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[1]) != 1.0 - min(1.0, (1.0 - 0.999) * (50 * 5 / 3)))' "$decay" \
  && [[ $(meta "$tmp/straight.st" model_ema.updates) == 15 ]] && pass \
  || fail "decay $decay (torchvision's: 1 - (1 - 0.999) x 50 x 5 / 3), updates $(meta "$tmp/straight.st" model_ema.updates)"
"$bin" eval --resume "$tmp/straight.st" --ema >"$tmp/eval.out" 2>&1 && pass || fail "eval --ema: $(cat "$tmp/eval.out")"
got=$(sed -n 's/^test acc: \([0-9.]*\) .*(its moving average).*/\1/p' "$tmp/eval.out")
awk -v a="$got" -v b="$last_ema" 'BEGIN { d = a - b; exit !(a != "" && d < 0.0006 && d > -0.0006) }' && pass \
  || fail "eval --ema: $(cat "$tmp/eval.out") vs the epoch line's $last_ema"
echo "--model-ema: last epoch test acc $(json_field "$(tail -1 "$tmp/straight.jsonl")" test_acc), its average $last_ema (eval --ema $got)"

# stopped and resumed: at an epoch's end, and inside one between two updates (step 7, updates every 5)
"$bin" "${base[@]}" --stop-after 1 --save "$tmp/half.st" --quiet >/dev/null 2>&1 && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 2 --save "$tmp/half.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/half.st" "$tmp/straight.st" && pass || fail "stopped after epoch 1 and resumed: not the straight bytes"
grep -q -- "--model-ema --model-ema-steps 5" "$tmp/resumed.out" && pass || fail "resume line: $(grep resuming "$tmp/resumed.out")"
"$bin" "${base[@]}" --save-every-steps 7 --stop-after 1 --save "$tmp/inside.st" --quiet >/dev/null 2>&1
"$bin" train --resume "$tmp/inside.st" --devices 2 --save "$tmp/inside.st" --quiet >/dev/null 2>&1 \
  && pass || fail "resume inside an epoch"
[[ $(meta "$tmp/inside.st" epochs_completed) == 3 ]] && cmp -s "$tmp/inside.st" "$tmp/straight.st" && pass \
  || fail "saved inside epoch 1 at step 7 and resumed: not the straight bytes"

# 2 ranks, and the parameter server: the same tensors (the average's too)
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${ema[@]}" --devices 1 --quiet \
    --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same_tensors "$tmp/straight.st" "$tmp/ranks.st" && pass || fail "2 ranks x 1 device: other tensors than 2 devices"
  "$bin" "${base[@]}" --sync ps --save "$tmp/ps.st" --quiet >/dev/null 2>&1 && pass || fail "--sync ps"
  same_tensors "$tmp/straight.st" "$tmp/ps.st" && pass || fail "--sync ps: other tensors"
else
  fail "mpirun not found (openmpi-bin)"
fi

# 2 emulated GPUs (a build with CUDA): NCCL = the host path, and eval --ema on a GPU
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  small_data "$tmp/tiny" 96 48
  gpus=(train --model lenet-paddle --data "$tmp/tiny" --epochs 1 --batch-size 24 --seed 2 --lr 0.1
        --devices cuda:0,cuda:1 --model-ema --model-ema-steps 2 --model-ema-decay 0.99)
  for nccl in 1 0; do
    DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 DPTRAIN_NCCL=$nccl "$bin" "${gpus[@]}" \
      --save "$tmp/gpu-$nccl.st" >"$tmp/gpu.out" 2>&1 && pass || fail "2 GPUs: $(tail -3 "$tmp/gpu.out")"
  done
  same_tensors "$tmp/gpu-1.st" "$tmp/gpu-0.st" && pass || fail "2 emulated GPUs: NCCL and the host path differ"
  # one GPU: its steps CUDA graphs, the average's updates launched between them = every step as made
  for graph in on off; do
    DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" "${gpus[@]/cuda:0,cuda:1/cuda:0}" --cuda-graph $graph \
      --save "$tmp/graph-$graph.st" >"$tmp/graph-$graph.out" 2>&1 && pass \
      || fail "1 GPU, --cuda-graph $graph: $(tail -3 "$tmp/graph-$graph.out")"
  done
  grep -q "cuda graph: [1-9][0-9]* steps launched as graphs" "$tmp/graph-on.out" && pass \
    || fail "1 GPU: no step launched as a graph: $(grep -i graph "$tmp/graph-on.out")"
  same_tensors "$tmp/graph-on.st" "$tmp/graph-off.st" && pass || fail "1 emulated GPU: graphs and steps as made differ"
  gpu_ema=$(sed -n 's/^epoch 1\/1: .*(ema \([0-9.]*\)).*/\1/p' "$tmp/gpu.out")
  DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" eval --resume "$tmp/gpu-0.st" --ema --devices cuda:0 \
    >"$tmp/gpu-eval.out" 2>&1 && grep -q "^test acc: ${gpu_ema}[0-9]* .*(its moving average)" "$tmp/gpu-eval.out" && pass \
    || fail "eval --ema on an emulated GPU: $(cat "$tmp/gpu-eval.out") vs the epoch line's $gpu_ema"
else
  echo "cli_model_ema: no CUDA emulator in this build: the GPU part is skipped"
fi

# the lr warm-up restarts the average (torchvision's), given in epochs as in steps: --warmup-epochs 1
# (24 steps of 50 of 1,200 images) = --warmup-steps 24, bit for bit, and not the run without a warm-up's
for warm in "epochs 1" "steps 24"; do
  "$bin" "${base[@]}" --warmup-${warm% *} ${warm#* } --save "$tmp/warm-${warm% *}.st" >"$tmp/warm.out" 2>&1 \
    && pass || fail "--warmup-$warm: $(tail -3 "$tmp/warm.out")"
done
same_tensors "$tmp/warm-epochs.st" "$tmp/warm-steps.st" && pass \
  || fail "--warmup-epochs 1 and --warmup-steps 24: other tensors (the average's restarts)"
[[ $(meta "$tmp/warm-epochs.st" model_ema.updates) == $(meta "$tmp/warm-steps.st" model_ema.updates) &&
   $(meta "$tmp/warm-steps.st" model_ema.updates) != $(meta "$tmp/straight.st" model_ema.updates) ]] && pass \
  || fail "updates after a warm-up: epochs $(meta "$tmp/warm-epochs.st" model_ema.updates), steps $(meta "$tmp/warm-steps.st" model_ema.updates), none $(meta "$tmp/straight.st" model_ema.updates)"

# --init takes the model, not its average, nor the option
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 2 --init "$tmp/straight.st" \
  --save "$tmp/init.st" >"$tmp/init.out" 2>&1 && pass || fail "--init: $(tail -3 "$tmp/init.out")"
[[ -z $(meta "$tmp/init.st" model_ema.steps) ]] && ! grep -q "(ema " "$tmp/init.out" && pass || fail "--init took the average"

# refusals: one line, exit 1, nothing written
refused() { # LABEL PART ARGS...
  local label=$1 part=$2
  shift 2
  rm -f "$tmp/never.st"
  "$bin" "$@" >"$tmp/r.out" 2>"$tmp/r.err"
  [[ $? -eq 1 && $(wc -l <"$tmp/r.err") -eq 1 && ! -e $tmp/never.st ]] && grep -qF -- "$part" "$tmp/r.err" && pass \
    || fail "$label: $(cat "$tmp/r.err")"
}
plain=(train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --save "$tmp/never.st")
refused "steps without --model-ema" "--model-ema-steps without --model-ema" "${plain[@]}" --model-ema-steps 4
refused "decay without --model-ema" "--model-ema-decay without --model-ema" "${plain[@]}" --model-ema-decay 0.9
refused "steps 0" "--model-ema-steps: 0 is out of range" "${plain[@]}" --model-ema --model-ema-steps 0
refused "decay 1.5" "--model-ema-decay must be in [0, 1]" "${plain[@]}" --model-ema --model-ema-decay 1.5
refused "eval --ema without one" "no moving average of the model in this checkpoint" eval --resume "$tmp/init.st" --ema
testing_finish cli_model_ema
