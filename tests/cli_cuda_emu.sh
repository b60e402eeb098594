#!/usr/bin/env bash
# cli_cuda_emu.sh - dptrain on CUDA devices of the CUDA emulator
# (tests/cuda_emulator/: the CUDA backend's own host code and kernels, with
# the runtime, cuBLAS and cuDNN done on the CPU; 2 GPUs unless
# DPTRAIN_CUDA_EMU_GPUS says otherwise), loaded as the CUDA module through
# DPTRAIN_CUDA_MODULE. Skipped (77) in a build without CUDA. What it shows
# is the backend's logic end to end, not a GPU's behaviour (cuda_emulator.h):
# - cuda:0 trains like cpu:0 (loss within 1e-4 relative, accuracy within 0.01), LeNet and
#   tests/models/tiny_mobilenet.cfg (relu6, depthwise convolutions) and
#   tests/models/tiny_mobilenet_v3.cfg (hardswish, hardsigmoid, scale_channels) and
#   tests/models/tiny_efficientnet.cfg (silu, sigmoid, scale_channels, drop_path);
#   tests/models/tiny_densenet.cfg (concat);
# - devices on two GPUs (cuda:0,cuda:1,cuda:1: one table per GPU, sums
#   through host memory) give one GPU's bits (cuda:0,cuda:0,cuda:0), for the
#   chunked allreduce, overlap, --sync ps (Adam, and AdamW with its
#   decay) and --sync-batch-norm; AdamW on cuda:0 trains like on cpu:0;
# - without --devices: every GPU, said on the first line;
# - checkpoints: saved on GPUs, resumed on GPUs = 2 epochs straight (bits),
#   saved on GPUs and resumed on CPU devices, and the other way round, learn;
# - 2 MPI ranks sharing one GPU = one process with 2 devices on it (bits);
# - no host synchronisation per step, on cuda:0 and cuda:0,cuda:0 (DPTRAIN_CUDA_EMU_STATS: runs of 2
#   and 4 steps count the same); with events that report "not ready" the staging slots are waited for,
#   with the same bits; on cuda:0,cuda:1 (NCCL) each GPU's stream waits for the sums once per step (before
#   the update), not once per bucket, with and without --overlap;
# - out of GPU memory, a GPU that faults, a GPU that is not there: one line
#   naming the device and what failed, non-zero exit, the checkpoint file
#   untouched.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
small_data "$tmp/data" 96 200 # 4 steps of 24 images an epoch: the emulated convolutions are slow
# the same training images beside 8 test images, for the runs whose test accuracy nothing reads (an
# epoch's evaluation of 200 images costs the emulator about as much as its training): every run but
# those `close` compares and batch norm's, which evaluate all 200 (tests=(...), after common's --data)
small_data "$tmp/quick" 96 8
data=$tmp/quick tests=(--data "$tmp/data")
acc() { json_field "$(tail -1 "$1")" test_acc; }
common=(train --data "$data" --limit 96 --batch-size 24 --lr 0.1 --seed 3 --quiet)

# close A B: train_loss within 1e-4 relative, test accuracy within 0.01
close() {
  awk -v a="$(last_loss "$tmp/$1.jsonl")" -v b="$(last_loss "$tmp/$2.jsonl")" -v p="$(acc "$tmp/$1.jsonl")" \
    -v q="$(acc "$tmp/$2.jsonl")" 'BEGIN { d = a - b; if (d < 0) d = -d; e = p - q; if (e < 0) e = -e;
      exit !(a != "" && b != "" && d <= 1e-4 * (a < 0 ? -a : a) && e <= 0.01) }' && pass \
    || fail "$1 vs $2: loss $(last_loss "$tmp/$1.jsonl") vs $(last_loss "$tmp/$2.jsonl"), accuracy $(acc "$tmp/$1.jsonl") vs $(acc "$tmp/$2.jsonl")"
}

# one GPU against the CPU, 2 epochs
train_run cpu cpu:0 --model lenet --epochs 2 --optimizer momentum "${tests[@]}"
train_run gpu cuda:0 --model lenet --epochs 2 --optimizer momentum "${tests[@]}"
close cpu gpu

# MobileNet's pieces (relu6, depthwise convolutions by cuDNN's group count) on cuda:0 train like cpu:0
train_run tm-cpu cpu:0 --model "$(dirname "$0")/models/tiny_mobilenet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
train_run tm-gpu cuda:0 --model "$(dirname "$0")/models/tiny_mobilenet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
close tm-cpu tm-gpu
# MobileNetV3's (hardswish, hardsigmoid, a squeeze-excitation's scale_channels) likewise
train_run tm3-cpu cpu:0 --model "$(dirname "$0")/models/tiny_mobilenet_v3.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
train_run tm3-gpu cuda:0 --model "$(dirname "$0")/models/tiny_mobilenet_v3.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
close tm3-cpu tm3-gpu
# EfficientNet's (SiLU, a squeeze-excitation with SiLU and sigmoid, stochastic depth: the same examples dropped)
train_run te-cpu cpu:0 --model "$(dirname "$0")/models/tiny_efficientnet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
train_run te-gpu cuda:0 --model "$(dirname "$0")/models/tiny_efficientnet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
close te-cpu te-gpu
# DenseNet's (a dense block's concat of features) likewise
train_run td-cpu cpu:0 --model "$(dirname "$0")/models/tiny_densenet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
train_run td-gpu cuda:0 --model "$(dirname "$0")/models/tiny_densenet.cfg" --epochs 1 --optimizer momentum "${tests[@]}"
close td-cpu td-gpu

# two GPUs = one GPU, bit for bit
for mode in chunked overlap ps adamw-ps; do
  args=(--model lenet --epochs 1 --optimizer adam)
  [[ $mode == overlap ]] && args+=(--overlap on)
  [[ $mode == ps ]] && args+=(--sync ps)
  [[ $mode == adamw-ps ]] && args=(--model lenet --epochs 1 --optimizer adamw --lr 0.003 --weight-decay 0.2 --sync ps)
  train_run "$mode-one" cuda:0,cuda:0,cuda:0 "${args[@]}"
  train_run "$mode-two" cuda:0,cuda:1,cuda:1 "${args[@]}"
  same_run "$mode-one" "$mode-two"
done
train_run bn-one cuda:0,cuda:0 --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum --sync-batch-norm "${tests[@]}"
train_run bn-two cuda:0,cuda:1 --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum --sync-batch-norm "${tests[@]}"
same_run bn-one bn-two
# AdamW (its decay computed on the host, applied by the GPU's kernel): cuda:0 trains like cpu:0
train_run adamw-cpu cpu:0 --model lenet --epochs 2 --optimizer adamw --lr 0.003 --weight-decay 0.2 "${tests[@]}"
train_run adamw-gpu cuda:0 --model lenet --epochs 2 --optimizer adamw --lr 0.003 --weight-decay 0.2 "${tests[@]}"
close adamw-cpu adamw-gpu

# the default devices: every GPU
"$bin" train --data "$data" --model lenet --limit 96 --batch-size 96 --epochs 1 >"$tmp/default.out" 2>&1 \
  && pass || fail "default devices: $(tail -2 "$tmp/default.out")"
grep -q "on \[cuda:0, cuda:1\] (default: every GPU (2))" "$tmp/default.out" && pass \
  || fail "default devices: want every GPU, got: $(head -1 "$tmp/default.out")"

# checkpoints across GPUs and CPUs
train_run straight cuda:0,cuda:1 --model lenet --epochs 2 --optimizer adam "${tests[@]}"
train_run half-gpu cuda:0,cuda:1 --model lenet --epochs 2 --stop-after 1 --optimizer adam
cp "$tmp/half-gpu.st" "$tmp/resume-gpu.st"
train_run resume-gpu cuda:0,cuda:1 --model lenet --epochs 2 --optimizer adam --resume "$tmp/resume-gpu.st"
same_run straight resume-gpu
cp "$tmp/half-gpu.st" "$tmp/resume-cpu.st"
train_run resume-cpu cpu:0,cpu:1 --model lenet --epochs 2 --optimizer adam --resume "$tmp/resume-cpu.st" "${tests[@]}"
close straight resume-cpu
train_run half-cpu cpu:0,cpu:1 --model lenet --epochs 2 --stop-after 1 --optimizer adam
cp "$tmp/half-cpu.st" "$tmp/resume-from-cpu.st"
train_run resume-from-cpu cuda:0,cuda:1 --model lenet --epochs 2 --optimizer adam --resume "$tmp/resume-from-cpu.st" "${tests[@]}"
close straight resume-from-cpu

# 2 MPI ranks sharing one GPU = one process with 2 devices on it
if command -v mpirun >/dev/null; then
  DPTRAIN_CUDA_EMU_GPUS=1 mpirun --allow-run-as-root --oversubscribe -np 2 -x DPTRAIN_CUDA_MODULE -x DPTRAIN_CUDA_EMU_GPUS \
    "$bin" "${common[@]}" --model lenet --epochs 1 --optimizer momentum --devices cuda:0 --save "$tmp/ranks.st" \
    --metrics "$tmp/ranks.jsonl" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks on cuda:0: $(tail -3 "$tmp/ranks.out")"
  train_run process cuda:0,cuda:0 --model lenet --epochs 1 --optimizer momentum
  same_run process ranks
  grep -q '"ranks": 2' "$tmp/ranks.jsonl" && pass || fail "not 2 ranks: $(cat "$tmp/ranks.jsonl")"
else
  fail "mpirun not found (openmpi-bin)"
fi

# host synchronisations per step: none (a step waits for the GPU only for a collective across
# processes), each kernel launched as made (--cuda-graph off: cli_cuda_graph_emu counts the graphs'). The emulator counts every call that makes the host wait (stream and event synchronisations,
# downloads among them); runs of one epoch that differ only in their number of steps (2 or 4 batches of 24,
# --limit) must count the same: on one GPU, with 2 devices sharing it, and with 2 GPUs summing through NCCL
# (the default there; its emulation waits for its members on the host, as NCCL does on the GPU, which is
# no host synchronisation of the step). What they count is per run and
# epoch (docs/devices.md, "Training on GPUs"): the parameters' upload per device, the epoch's loss and accuracy read once at its end
# and the test accuracy once, the final replica check's downloads, the frees at exit.
syncs() { sed -nE 's/^cuda emulator: .* ([0-9]+) stream synchronisations.*/\1/p' "$tmp/$1.out"; }
launches() { sed -nE 's/^cuda emulator: ([0-9]+) kernel launches.*/\1/p' "$tmp/$1.out"; }
loud=("${common[@]:0:${#common[@]}-1}") # common without its last word, --quiet: the first line says the allreduce
[[ ${common[-1]} == --quiet ]] || fail "common's last word is not --quiet"
for devices in cuda:0 cuda:0,cuda:0 cuda:0,cuda:1; do
  for steps in 2 4; do
    DPTRAIN_CUDA_EMU_STATS=1 "$bin" "${loud[@]}" --model lenet --epochs 1 --limit $((24 * steps)) --cuda-graph off \
      --devices $devices --metrics "$tmp/stats-$devices-$steps.jsonl" >"$tmp/stats-$devices-$steps.out" 2>&1 \
      && pass || fail "statistics run: $(tail -2 "$tmp/stats-$devices-$steps.out")"
  done
  if [[ $devices == cuda:0,cuda:1 ]]; then # the NCCL path, not the host one (which waits per step)
    grep -q "^training .*, allreduce: nccl$" "$tmp/stats-$devices-4.out" && pass \
      || fail "$devices: the run does not say allreduce: nccl: $(grep "^training" "$tmp/stats-$devices-4.out")"
  fi
  two=$(syncs "stats-$devices-2") four=$(syncs "stats-$devices-4")
  echo "cli_cuda_emu: $devices: $two host synchronisations in a 2-step run, $four in a 4-step one;" \
    "$(( ($(launches "stats-$devices-4") - $(launches "stats-$devices-2")) / 2 )) kernel launches per step"
  [[ -n "$two" && "$two" == "$four" ]] && pass \
    || fail "$devices: host synchronisations per step: $two in 2 steps, $four in 4 (want the same: none per step)"
done
# NCCL's sums run beside the rest of the backward pass: each GPU's stream waits for them once per step (before
# the update: peer_join), not once per bucket (LeNet: 8), with --overlap as without
sum_waits() { sed -nE 's/^cuda emulator: .* ([0-9]+) stream waits for NCCL sums(,.*)?$/\1/p' "$tmp/$1.out"; }
for steps in 2 4; do
  DPTRAIN_CUDA_EMU_STATS=1 "$bin" "${loud[@]}" --model lenet --epochs 1 --limit $((24 * steps)) --overlap on --cuda-graph off \
    --devices cuda:0,cuda:1 --metrics "$tmp/stats-overlap-$steps.jsonl" >"$tmp/stats-overlap-$steps.out" 2>&1 \
    && pass || fail "statistics run with --overlap: $(tail -2 "$tmp/stats-overlap-$steps.out")"
done
for run in stats-cuda:0,cuda:1 stats-overlap; do
  two=$(sum_waits "$run-2") four=$(sum_waits "$run-4")
  [[ -n "$two" && -n "$four" && $(( (four - two) / 2 )) -eq 2 ]] && pass \
    || fail "$run: stream waits for NCCL sums: $two in 2 steps, $four in 4 (want 2 per step: one per GPU)"
done
# the staging slots' wait: with every event "not ready" until waited for (DPTRAIN_CUDA_EMU_EVENTS_PENDING),
# an upload into a slot in use waits for it: more synchronisations, the same training (bits)
DPTRAIN_CUDA_EMU_EVENTS_PENDING=1 DPTRAIN_CUDA_EMU_STATS=1 "$bin" "${common[@]}" --model lenet --epochs 1 \
  --devices cuda:0 --metrics "$tmp/stats-pending.jsonl" >"$tmp/stats-pending.out" 2>&1 \
  && pass || fail "pending events: $(tail -2 "$tmp/stats-pending.out")"
[[ -n "$(last_loss "$tmp/stats-pending.jsonl")" && \
   "$(last_loss "$tmp/stats-pending.jsonl")" == "$(last_loss "$tmp/stats-cuda:0-4.jsonl")" ]] && pass \
  || fail "pending events: train_loss $(last_loss "$tmp/stats-pending.jsonl") vs $(last_loss "$tmp/stats-cuda:0-4.jsonl")"
[[ -n "$(syncs stats-pending)" && $(syncs stats-pending) -gt $(syncs "stats-cuda:0-4") ]] && pass \
  || fail "pending events: $(syncs stats-pending) synchronisations, no more than without ($(syncs "stats-cuda:0-4"))"

# one_line_error WHAT PATTERN ENV... -- ARGS...: non-zero exit, one stderr line
# matching PATTERN, $tmp/keep.st (an earlier checkpoint, saved to) untouched
printf 'an earlier checkpoint' >"$tmp/keep.st"
cp "$tmp/keep.st" "$tmp/keep.orig"
one_line_error() {
  local what=$1 pattern=$2 envs=()
  shift 2
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$bin" "${common[@]}" --model lenet --epochs 2 --save "$tmp/keep.st" "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 ]] && pass || fail "$what: exit status $status ($(tail -2 "$tmp/err"))"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] && pass || fail "$what: want one stderr line, got: $(cat "$tmp/err")"
  grep -qE "$pattern" "$tmp/err" && pass || fail "$what: stderr '$(cat "$tmp/err")' lacks /$pattern/"
  cmp -s "$tmp/keep.st" "$tmp/keep.orig" && pass || fail "$what: the checkpoint file was changed"
}
one_line_error "out of GPU memory" "cuda:0: .*out of GPU memory" DPTRAIN_CUDA_EMU_MEMORY=3000000 -- --devices cuda:0
one_line_error "a GPU that faults" "cuda:1: .*an illegal memory access" DPTRAIN_CUDA_EMU_FAULT=60 -- \
  --devices cuda:1 --optimizer momentum
# a fault seen late (when the host next waits: a download, an upload that waits): named as itself at
# whichever call saw it, never as the NaN bytes a failed download leaves; faults in the first epoch,
# before its checkpoint
for fault in 29 53 77; do
  one_line_error "a GPU that faults (seen at launch $fault's next wait)" \
    "^dptrain: cuda:0: [a-z' ]+ failed: an illegal memory access" DPTRAIN_CUDA_EMU_FAULT=$fault \
    DPTRAIN_CUDA_EMU_FAULT_SEEN=sync -- --devices cuda:0 --optimizer momentum
done
one_line_error "a GPU that is not there" "cuda:2: no such GPU \(this machine has 2: cuda:0 to cuda:1\)" \
  DPTRAIN_CUDA_EMU_GPUS=2 -- --devices cuda:0,cuda:2
testing_finish cli_cuda_emu
