#!/usr/bin/env bash
# cli_log_steps.sh - `dptrain train --log-every-steps N` (torchvision's
# --print-freq): a line every N steps inside an epoch, on a cut of
# Fashion-MNIST (1,000 training images, batch 50: 20 steps an epoch), LeNet
# (Paddle's) at lr 0.2, which learns from the first steps:
# - a line after steps N, 2N, ... of each epoch but its last (the epoch's own
#   line follows that), saying the epoch, the step of the steps, the loss and
#   train acc so far, the lr, images/sec and the time left; none with --quiet;
# - the lines do not change the run: its metrics and checkpoint equal a run's
#   without them, bit for bit (the figures are peeked at, not folded);
# - the figures are every device's and rank's: 1 device, 2 devices and 2
#   ranks x 1 device print the same losses and accuracies;
# - a run stopped inside an epoch (a preemption) and resumed prints the
#   lines the uninterrupted run printed after that step;
# - GPU devices (the CUDA emulator) print the CPU devices' figures;
# - 0, -1, "x" are refused in one line before anything is written.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1000 200
run=(train --model lenet-paddle --data "$tmp/small" --lr 0.2 --epochs 2 --batch-size 50 --seed 5)
figures() { sed -nE 's/^(epoch [0-9]+\/[0-9]+ step [0-9]+\/[0-9]+: loss [0-9.]+, train acc [0-9.]+, lr [0-9.e-]+),.*/\1/p' "$1"; }

"$bin" "${run[@]}" --devices 2 --log-every-steps 6 --metrics "$tmp/a.jsonl" --save "$tmp/a.st" >"$tmp/a.out" 2>&1 \
  && pass || fail "the run: $(tail -3 "$tmp/a.out")"
steps=$(sed -nE 's/^epoch ([0-9]+)\/2 step ([0-9]+)\/20: .*/\1.\2/p' "$tmp/a.out" | tr '\n' ' ')
[[ "$steps" == "1.6 1.12 1.18 2.6 2.12 2.18 " ]] && pass || fail "lines after the steps '$steps' (epoch.step)"
grep -qE '^epoch 1/2 step 6/20: loss [0-9]\.[0-9]{4}, train acc [01]\.[0-9]{3}, lr 0\.2, [0-9]+ images/sec, 0:00:[0-9]{2} left$' \
  "$tmp/a.out" && pass || fail "the line's form: $(grep -m1 step "$tmp/a.out")"
# the order: epoch 1's lines, then its line, then epoch 2's
order=$(grep -E '^epoch [0-9]' "$tmp/a.out" | sed -E 's/^epoch ([0-9]+)\/2( step ([0-9]+))?.*/\1:\3/' | tr '\n' ' ')
[[ "$order" == "1:6 1:12 1:18 1: 2:6 2:12 2:18 2: " ]] && pass || fail "the lines' order: $order"

"$bin" "${run[@]}" --devices 2 --metrics "$tmp/b.jsonl" --save "$tmp/b.st" >"$tmp/b.out" 2>&1 && pass || fail "without"
! grep -q ' step ' "$tmp/b.out" && pass || fail "lines without --log-every-steps: $(grep -m1 ' step ' "$tmp/b.out")"
strip_pace() { sed -E 's/"(epoch_sec|images_per_sec)": *[^,}]*//g' "$1"; }
cmp -s <(strip_pace "$tmp/a.jsonl") <(strip_pace "$tmp/b.jsonl") && same_tensors "$tmp/a.st" "$tmp/b.st" && pass \
  || fail "the lines changed the run: $(diff <(strip_pace "$tmp/a.jsonl") <(strip_pace "$tmp/b.jsonl") | head -3)"

"$bin" "${run[@]}" --devices 2 --log-every-steps 6 --quiet >"$tmp/q.out" 2>&1
[[ $(wc -l <"$tmp/q.out") -eq 1 ]] && ! grep -q ' step ' "$tmp/q.out" && pass || fail "--quiet printed: $(head -2 "$tmp/q.out")"

# every device's and rank's figures
"$bin" "${run[@]}" --devices 1 --log-every-steps 6 >"$tmp/one.out" 2>&1 && pass || fail "1 device"
cmp -s <(figures "$tmp/a.out") <(figures "$tmp/one.out") && [[ -n "$(figures "$tmp/one.out")" ]] && pass \
  || fail "1 device vs 2: $(diff <(figures "$tmp/one.out") <(figures "$tmp/a.out") | head -3)"
if command -v mpirun >/dev/null; then
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${run[@]}" --devices 1 --log-every-steps 6 \
    >"$tmp/mpi.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/mpi.out")"
  cmp -s <(figures "$tmp/a.out") <(figures "$tmp/mpi.out") && pass \
    || fail "2 ranks x 1 device vs 1 x 2: $(diff <(figures "$tmp/mpi.out") <(figures "$tmp/a.out") | head -3)"
else
  fail "mpirun not found (openmpi-bin)"
fi

# asked to stop inside epoch 2 (a preemption's SIGTERM after the run's step 30, epoch 2's step 10:
# it saves where all ranks agree to stop), then resumed: the lines after that step are the straight run's
DPTRAIN_FAULT=term:0:30 "$bin" "${run[@]}" --devices 2 --save "$tmp/p.st" --log-every-steps 6 >"$tmp/p.out" 2>&1
at=$(meta_value "$tmp/p.st" loader.batch)
[[ "$(meta_value "$tmp/p.st" epochs_completed)" == 1 && $at -ge 10 && $at -lt 18 ]] && pass \
  || fail "the preempted run saved epochs_completed $(meta_value "$tmp/p.st" epochs_completed), loader_batch $at"
"$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/p.st" --log-every-steps 6 >"$tmp/r.out" 2>&1 && pass \
  || fail "the resumed run: $(tail -2 "$tmp/r.out")"
after() { figures "$1" | awk -v at="$at" '{ split($4, s, "/"); if ($2 == "2/2" && s[1] + 0 > at) print }'; }
[[ -n "$(after "$tmp/r.out")" ]] && cmp -s <(after "$tmp/a.out") <(figures "$tmp/r.out") && pass \
  || fail "resumed at epoch 2 step $at: $(diff <(figures "$tmp/r.out") <(after "$tmp/a.out") | head -3)"

# GPU devices (the CUDA emulator, where this build has it): the same figures as CPU devices
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e "$emu" ]]; then
  short=(train --model lenet-paddle --data "$tmp/small" --limit 200 --lr 0.2 --epochs 1 --batch-size 20 --seed 5
         --log-every-steps 3)
  DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" "${short[@]}" --devices cuda:0,cuda:1 >"$tmp/gpu.out" 2>&1
  "$bin" "${short[@]}" --devices 2 >"$tmp/cpu.out" 2>&1
  [[ $(figures "$tmp/gpu.out" | wc -l) -eq 3 ]] && cmp -s <(figures "$tmp/gpu.out") <(figures "$tmp/cpu.out") && pass \
    || fail "the emulator's GPUs vs CPU devices: $(diff <(figures "$tmp/gpu.out") <(figures "$tmp/cpu.out") | head -3)"
else
  echo "cli_log_steps: no CUDA emulator in this build: its check skipped"
fi

for bad in 0 -1 x; do
  refused_run "--log-every-steps" "${run[@]}" --devices 2 --log-every-steps "$bad"
done
testing_finish cli_log_steps
