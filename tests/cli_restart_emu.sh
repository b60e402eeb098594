#!/usr/bin/env bash
# cli_restart_emu.sh - `dptrain launch --restarts` on CUDA devices, on the CUDA
# emulator (docs/testing.md) and its NCCL (label emu; skipped, 77, in a build
# without CUDA):
# - one rank on cuda:0,cuda:1 summing with NCCL, killed (DPTRAIN_FAULT) at
#   step 5 of 8, after its step graphs were captured: the restarted attempt,
#   a new process, makes its NCCL group and captures afresh (its first line
#   says "allreduce: nccl", its last counts one capture again) and the job
#   ends with the uninterrupted run's bytes;
# - 2 ranks sharing the GPU (the host path: MPI and host memory), rank 1
#   killed at step 3: restarted, the same bytes as without the kill;
# - a GPU that faults (DPTRAIN_CUDA_EMU_FAULT) is a fault: exit status 4,
#   named by launch with the device's line.
# Without NCCL in the emulator, the first case runs on the host path.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
command -v mpirun >/dev/null || { echo "cli_restart_emu: mpirun not found (openmpi-bin)"; echo "cli_restart_emu: 0 passed, 1 failed"; exit 1; }
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
unset DPTRAIN_NCCL CUDA_VISIBLE_DEVICES
nccl=host
{ nm -D "$emu" 2>/dev/null | grep -q ncclAllReduce || nm "$emu" 2>/dev/null | grep -q ncclAllReduce; } && nccl=nccl
small_data "$tmp/data" 96 24 # 4 steps of 24 images an epoch: the emulated convolutions are slow
job=(train --data "$tmp/data" --batch-size 24 --lr 0.05 --seed 5 --model lenet --epochs 2 --optimizer momentum
     --save-every-steps 2)

# --- one rank, two GPUs with NCCL -----------------------------------------------------------
"$bin" launch --np 1 --log-dir "$tmp/ref" -- "${job[@]}" --devices cuda:0,cuda:1 --save "$tmp/ref.st" >"$tmp/ref.out" 2>&1 \
  && pass || fail "uninterrupted: $(tail -3 "$tmp/ref.out")"
DPTRAIN_FAULT=kill:0:5 "$bin" launch --np 1 --restarts 1 --log-dir "$tmp/k" -- "${job[@]}" --devices cuda:0,cuda:1 \
  --save "$tmp/k.st" >"$tmp/k.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/k.st" "$tmp/ref.st" && pass \
  || fail "NCCL, killed at step 5: exit $status, or other bytes: $(cat "$tmp/k.out")"
grep -q "^dptrain launch: attempt 1 failed: rank 0 on .* killed by signal 9 (Killed) at step 5 (epoch 2, step 1 of 4)" "$tmp/k.out" \
  && pass || fail "NCCL, killed: $(cat "$tmp/k.out")"
for log in "$tmp/k/worklog.0.attempt1" "$tmp/k/worklog.0"; do # each attempt made its own group
  grep -qE "^training .* on \[cuda:0, cuda:1\], cuda graph: on, allreduce: $nccl$" "$log" && pass \
    || fail "$log: $(grep '^training' "$log")"
done
grep -qE "^cuda graph: [0-9]+ steps launched as graphs \(1 captures\)" "$tmp/k/worklog.0" && pass \
  || fail "the restarted attempt's graphs: $(grep '^cuda graph' "$tmp/k/worklog.0")"
none_left "NCCL" "$tmp/data"

# --- two ranks sharing the GPU: MPI ------------------------------------------------------------
"$bin" launch --np 2 -- "${job[@]}" --devices cuda:0 --quiet --save "$tmp/mref.st" >"$tmp/mref.out" 2>&1 \
  && pass || fail "2 ranks, uninterrupted: $(tail -3 "$tmp/mref.out")"
DPTRAIN_FAULT=kill:1:3 "$bin" launch --np 2 --restarts 1 -- "${job[@]}" --devices cuda:0 --quiet --save "$tmp/m.st" \
  >"$tmp/m.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/m.st" "$tmp/mref.st" && grep -q "^dptrain launch: restart 1 of 1, resuming from $tmp/m.st$" \
  "$tmp/m.out" && pass || fail "2 ranks, rank 1 killed: exit $status: $(cat "$tmp/m.out")"
none_left "2 ranks" "$tmp/data"

# --- a GPU that faults: a fault, exit status 4 -----------------------------------------------
DPTRAIN_CUDA_EMU_FAULT=40 "$bin" launch --np 1 --log-dir "$tmp/f" -- "${job[@]}" --devices cuda:0 --save "$tmp/f.st" \
  >"$tmp/f.out" 2>&1
status=$?
[[ $status -eq 4 ]] && grep -q "^dptrain launch: attempt 1 failed: rank 0 on .*: exit status 4 (a device failed) .*: cuda:0: .*an illegal memory access" \
  "$tmp/f.out" && pass || fail "a GPU fault: exit $status: $(cat "$tmp/f.out")"
none_left "a GPU fault" "$tmp/data"
testing_finish cli_restart_emu
