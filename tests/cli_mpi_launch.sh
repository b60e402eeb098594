#!/usr/bin/env bash
# cli_mpi_launch.sh - `dptrain launch --restarts K`: a rank killed (SIGKILL) in the
# middle of epoch 2 of a 3-epoch job with --save; launch says why (the signal)
# on stderr and in DIR/launch.log, reruns the job with --resume of the saved
# checkpoint, keeps the failed attempt's worklogs, and the job finishes with
# a final checkpoint whose tensors equal an uninterrupted run's, bit for bit
# (resume at an epoch boundary is exact). With --restarts 0 a failure is
# passed through (its status, one line from launch); a job failing every
# time (a fault injected in every attempt: DPTRAIN_FAULT) stops after K
# restarts with its status; bad --restarts values are refused.
source "$(dirname "$0")/testing.sh"
command -v mpirun >/dev/null || { echo "cli_mpi_launch: mpirun not found (openmpi-bin)"; echo "cli_mpi_launch: 0 passed, 1 failed"; exit 1; }

small_data "$tmp/small" 2000 300
job=(train --model lenet-paddle --data "$tmp/small" --epochs 3 --lr 0.1 --batch-size 100 --seed 7 --devices 1)
"$bin" launch --np 2 -- "${job[@]}" --save "$tmp/straight.st" >"$tmp/straight.out" 2>&1 \
  && pass || fail "uninterrupted run: $(tail -3 "$tmp/straight.out")"

"$bin" launch --np 2 --restarts 2 --log-dir "$tmp/log" -- "${job[@]}" --save "$tmp/ck.st" >"$tmp/restart.out" 2>&1 &
launcher=$!
killed=0
for _ in $(seq 1 6000); do # once epoch 1's checkpoint exists, kill rank 1
  if [[ -s "$tmp/ck.st" && -s "$tmp/log/worklog.1" ]]; then
    pid=$(sed -nE 's/^rank 1 of 2, .* pid ([0-9]+)$/\1/p' "$tmp/log/worklog.1")
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null && { killed=1; break; }
  fi
  sleep 0.05
done
ended=0
for _ in $(seq 1 4000); do kill -0 "$launcher" 2>/dev/null || { ended=1; break; }; sleep 0.1; done
[[ $ended -eq 1 ]] || { kill -TERM "$launcher"; sleep 1; }
wait "$launcher"
status=$?
[[ $killed -eq 1 ]] && pass || fail "could not kill rank 1"
[[ $status -eq 0 ]] && pass || fail "restarted job: exit $status: $(tail -5 "$tmp/restart.out")"
grep -q "^dptrain launch: attempt 1 failed: rank 1 on .* killed by signal 9 (Killed) at step .*; log $tmp/log/worklog.1.attempt1$" \
  "$tmp/restart.out" && grep -q "^dptrain launch: restart 1 of 2, resuming from $tmp/ck.st$" "$tmp/restart.out" && pass \
  || fail "launch's stderr names the signal and the checkpoint: $(grep launch "$tmp/restart.out")"
grep -q "Z attempt 1 failed: rank 1 on .* killed by signal 9 (Killed)" "$tmp/log/launch.log" && grep -q "Z restart 1 of 2" \
  "$tmp/log/launch.log" && grep -q "finished after 1 restart" "$tmp/log/launch.log" && pass \
  || fail "launch.log: $(cat "$tmp/log/launch.log" 2>&1)"
[[ -s "$tmp/log/worklog.1.attempt1" && -s "$tmp/log/worklog.1" ]] && pass || fail "the failed attempt's worklogs kept"
grep -q "^epoch 2/3" "$tmp/log/worklog.0" && grep -q "^epoch 3/3" "$tmp/log/worklog.0" && ! grep -q "^epoch 1/3" "$tmp/log/worklog.0" && pass \
  || fail "the rerun resumed after epoch 1: $(cat "$tmp/log/worklog.0")"
same_tensors "$tmp/ck.st" "$tmp/straight.st" && pass || fail "restarted job's checkpoint differs from the uninterrupted run"
echo "$(grep 'dptrain launch' "$tmp/restart.out" | head -2)"

# a job that always fails (rank 1 killed at step 2 of every attempt): K restarts, then its status
DPTRAIN_FAULT='kill:1:2:*' "$bin" launch --np 2 --restarts 1 -- "${job[@]}" --save "$tmp/bad.st" >"$tmp/bad.out" 2>&1
status=$?
[[ $status -eq 137 && $(grep -c "failed: rank 1 on .* killed by signal 9 (Killed) at step 2 " "$tmp/bad.out") -eq 2 ]] \
  && grep -q "no restarts left (--restarts 1)" "$tmp/bad.out" && pass || fail "always-failing job: exit $status: $(grep launch "$tmp/bad.out")"
# --restarts 0: the failure's line, no restart line
DPTRAIN_FAULT=exit4:0:2 "$bin" launch --np 2 -- "${job[@]}" >"$tmp/zero.out" 2>&1
status=$?
[[ $status -eq 4 && $(grep -c "^dptrain launch:" "$tmp/zero.out") -eq 1 ]] && grep -q "exited with status 4 (a device failed)" \
  "$tmp/zero.out" && pass || fail "--restarts 0: exit $status: $(cat "$tmp/zero.out")"
for bad in -1 x 1001; do
  out=$("$bin" launch --np 2 --restarts "$bad" -- train 2>&1) && fail "--restarts $bad accepted" \
    || { grep -q -- "--restarts" <<<"$out" && [[ $(wc -l <<<"$out") -eq 1 ]] && pass || fail "--restarts $bad: $out"; }
done
testing_finish cli_mpi_launch
