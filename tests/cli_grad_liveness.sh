#!/usr/bin/env bash
# cli_grad_liveness.sh - activation gradients placed by liveness
# (src/nn/grad_plan.c), over the activations backward is done with (the
# default) and apart from them (DPTRAIN_GRAD_LIVENESS=apart), against each
# its own memory for the whole step (=off), end to end:
# - on CPU devices (tiny_resnet: batch norm, residual joins with ReLU,
#   dropout; 2 devices; and with --freeze stem,stem_bn): the checkpoints of
#   2 epochs are byte for byte the same (on, apart and off);
# - on the CUDA emulator (builds with CUDA): cuda:0 with step graphs,
#   --channels-last on with --precision bf16 (converted copies of inputs
#   whose gradients the plan places too), and 2 emulated GPUs summing with
#   NCCL: the same bits on, apart and off; and the peak of device memory (the
#   metrics' device_mem_peak_bytes) of tiny_resnet at batch 512 is lower on
#   (both figures printed);
# - DPTRAIN_GRAD_LIVENESS=maybe is refused in one line naming it, with a
#   non-zero exit and no checkpoint or metrics written.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
small_data "$tmp/data" 192 16
common=(train --data "$tmp/data" --batch-size 32 --lr 0.05 --seed 5 --model "$src/tests/models/tiny_resnet.cfg" --quiet)

# run NAME MODE ARGS...: a run with DPTRAIN_GRAD_LIVENESS=MODE saving $tmp/NAME.st and $tmp/NAME.jsonl
run() { mode_run DPTRAIN_GRAD_LIVENESS "$@"; }

# every_mode NAME ARGS...: runs NAME-on, NAME-apart and NAME-off; the first two's checkpoints must be the last's
every_mode() {
  local name=$1 mode
  shift
  for mode in on apart off; do run "$name-$mode" $mode "$@"; done
  for mode in on apart; do
    same_tensors "$tmp/$name-$mode.st" "$tmp/$name-off.st" && pass || fail "$name: liveness $mode and off differ"
  done
}

for freeze in none stem,stem_bn; do
  args=(--epochs 2 --devices 2)
  [[ $freeze != none ]] && args+=(--freeze "$freeze")
  every_mode "cpu-$freeze" "${args[@]}"
done

# a value it does not take: refused in one line naming the variable, nothing written
refused_setting DPTRAIN_GRAD_LIVENESS maybe "DPTRAIN_GRAD_LIVENESS=maybe: expected on, apart or off"

emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
  small_data "$tmp/emu" 64 8
  common=(train --data "$tmp/emu" --batch-size 16 --lr 0.05 --seed 5 --model "$src/tests/models/tiny_resnet.cfg"
          --epochs 1) # not --quiet: the step graphs' line
  for name in "${emu_modes[@]}"; do
    emu_mode_args "$name"
    every_mode "emu-$name" "${args[@]}"
  done
  grep -q "^cuda graph: [1-9][0-9]* steps launched as graphs" "$tmp/emu-graph-on.out" && pass \
    || fail "no step graph: $(tail -2 "$tmp/emu-graph-on.out")"
  # one step of 512 images: the step outgrows the arena's first block (16 MiB), with liveness by less
  emu_step_peak peak_on DPTRAIN_GRAD_LIVENESS=on
  emu_step_peak peak_off DPTRAIN_GRAD_LIVENESS=off
  echo "tiny_resnet, batch 512, one step on the emulator: device memory peak ${peak_on:-?} bytes with liveness, ${peak_off:-?} without"
  [[ ${peak_on:-0} -gt 0 && ${peak_on:-0} -lt ${peak_off:-0} ]] && pass || fail "peak on ${peak_on:-?} not below off ${peak_off:-?}"
else
  echo "cli_grad_liveness: no CUDA emulator in this build (built without CUDA): CPU runs only"
fi
testing_finish cli_grad_liveness
