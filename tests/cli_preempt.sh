#!/usr/bin/env bash
# cli_preempt.sh - preemption and interrupts, on real processes: signals to
# `dptrain launch`, to one rank, to plain mpirun (docs/multi-process.md).
# - SIGTERM to the launcher once epoch 1 is over (so in epoch 2, or 3 on a
#   slow machine), without --save-every-steps: every rank stops at the
#   same step boundary, rank 0 saves there (loader.batch > 0: inside the
#   epoch) into the --save file, every rank and the launcher exit with
#   status 6 (preempted) and one line saying where and to add --resume; the same command with it gives the uninterrupted
#   run's bytes; SIGTERM 0.1 s after the start (mpirun and the ranks not
#   set up yet): passed on once they are (neither ended by a SIGUSR1 it
#   cannot take yet), the job stops, saved, exit 6;
# - SIGTERM to one rank under launch --restarts 0: the job saves and stops,
#   launch runs it again from the save without counting a restart, and it
#   ends with the uninterrupted bytes;
# - SIGUSR1 to plain mpirun (which forwards it to every rank): the ranks
#   save and exit 6; the resume gives the same bytes; SIGTERM to a single
#   process (no MPI): the same, at the very next step;
# - SIGTERM twice to the launcher, or SIGINT once (`kill -INT` alone): the
#   job ends at once (exit 143 or 130, within a few seconds), the --save
#   file whole (it loads) or absent, never torn;
# - SIGINT to the launcher after every rank has ended but before mpirun
#   has (an mpirun that lingers): exit 0, one line that the job is done;
# - no process of any of these jobs left running.
source "$(dirname "$0")/testing.sh"
command -v mpirun >/dev/null || { echo "cli_preempt: mpirun not found (openmpi-bin)"; echo "cli_preempt: 0 passed, 1 failed"; exit 1; }
meta() { [[ -s "$1" ]] && grep -ao "\"$2\":\"[^\"]*\"" "$1" | head -1 | sed -E 's/.*:"(.*)"/\1/'; }
# wait_for FILE REGEX: until FILE has a line matching REGEX (up to 60 s)
wait_for() { for _ in $(seq 1 600); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

small_data "$tmp/small" 5000 100 # 250 steps an epoch: time for a signal to land inside the run
job=(train --model lenet-paddle --data "$tmp/small" --epochs 3 --lr 0.1 --batch-size 20 --seed 6 --devices 1 --comm-timeout 10)
"$bin" launch --np 2 -- "${job[@]}" --quiet --save "$tmp/ref.st" >"$tmp/ref.out" 2>&1 && pass \
  || fail "uninterrupted run: $(tail -3 "$tmp/ref.out")"

# --- SIGTERM to the launcher in epoch 2 ---------------------------------------------------
"$bin" launch --np 2 --log-dir "$tmp/term" -- "${job[@]}" --save "$tmp/term.st" >"$tmp/term.out" 2>&1 &
launcher=$!
wait_for "$tmp/term/worklog.0" "^epoch 1/3" && kill -TERM $launcher
wait $launcher
status=$?
# (in epoch 2, or 3 on a slow machine: after the line of epoch 1 in any case)
batch=$(meta "$tmp/term.st" loader.batch) step=$(meta "$tmp/term.st" step_count) epoch=$(meta "$tmp/term.st" loader.epoch)
[[ $status -eq 6 && -n "$batch" && $batch -gt 0 && $epoch -ge 1 ]] && pass \
  || fail "SIGTERM: exit $status, saved at epoch $epoch batch '$batch': $(cat "$tmp/term.out")"
# (a new launch resumes only from a --resume it is given: the line says to add it)
grep -q "^dptrain launch: preempted (Terminated): every rank stopped after step $step; saved to $tmp/term.st: continue with the same command and --resume $tmp/term.st$" \
  "$tmp/term.out" && [[ $(wc -l <"$tmp/term.out") -eq 1 ]] && pass || fail "SIGTERM: launch said $(cat "$tmp/term.out")"
for r in 0 1; do # every rank stopped there, with the preempted line (rank 0's words)
  grep -qE "^dptrain: (rank 0 of 2: )?preempted: stopped after step $step \(epoch $((epoch + 1)), step $batch of 250\) and saved it to $tmp/term.st" \
    "$tmp/term/worklog.$r" && pass || fail "SIGTERM: worklog.$r: $(tail -2 "$tmp/term/worklog.$r")"
done
none_left "SIGTERM"
"$bin" launch --np 2 --log-dir "$tmp/term2" -- "${job[@]}" --save "$tmp/term.st" --resume "$tmp/term.st" >"$tmp/term2.out" 2>&1 \
  && same_tensors "$tmp/term.st" "$tmp/ref.st" && pass || fail "SIGTERM: the resume: $(tail -3 "$tmp/term2.out")"

# SIGTERM at once: the ranks stop at their first steps
"$bin" launch --np 2 -- "${job[@]}" --epochs 10 --save "$tmp/early.st" >"$tmp/early.out" 2>&1 &
launcher=$!
sleep 0.1
kill -TERM $launcher
wait $launcher
status=$?
step=$(meta "$tmp/early.st" step_count)
[[ $status -eq 6 && -n "$step" && $step -ge 1 && $step -lt 2500 ]] && pass || fail "SIGTERM at once: exit $status, step '$step': $(cat "$tmp/early.out")"
none_left "SIGTERM at once"

# --- SIGTERM to one rank: launch runs the job again, not counted as a restart ---------------
"$bin" launch --np 2 --log-dir "$tmp/rank" -- "${job[@]}" --save "$tmp/rank.st" >"$tmp/rank.out" 2>&1 &
launcher=$!
if wait_for "$tmp/rank/worklog.1" "^rank 1 of 2, .* pid [0-9]+$" && wait_for "$tmp/rank/worklog.0" "^epoch 1/3"; then
  kill -TERM "$(sed -nE 's/^rank 1 of 2, .* pid ([0-9]+)$/\1/p' "$tmp/rank/worklog.1")"
fi
wait $launcher
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/rank.st" "$tmp/ref.st" && pass || fail "SIGTERM to rank 1: exit $status: $(cat "$tmp/rank.out")"
grep -q "^dptrain launch: a rank was asked to stop (preempted): running the job again, resuming from $tmp/rank.st (not counted as a restart)$" \
  "$tmp/rank.out" && pass || fail "SIGTERM to rank 1: $(cat "$tmp/rank.out")"
none_left "SIGTERM to a rank"

# --- SIGUSR1 to plain mpirun -----------------------------------------------------------------
rm -rf "$tmp/usr" && mkdir "$tmp/usr"
DPTRAIN_LOG_DIR=$tmp/usr mpirun --allow-run-as-root -q -np 2 -x DPTRAIN_LOG_DIR "$bin" "${job[@]}" --save "$tmp/usr.st" \
  >"$tmp/usr.out" 2>&1 &
runner=$!
wait_for "$tmp/usr/worklog.0" "^epoch 1/3" && kill -USR1 $runner
wait $runner
status=$?
[[ $status -eq 6 && $(meta "$tmp/usr.st" loader.batch) -gt 0 ]] && pass || fail "SIGUSR1 to mpirun: exit $status: $(tail -3 "$tmp/usr.out")"
mpirun --allow-run-as-root -q -np 2 "$bin" "${job[@]}" --quiet --save "$tmp/usr.st" --resume "$tmp/usr.st" >"$tmp/usr2.out" 2>&1 \
  && same_tensors "$tmp/usr.st" "$tmp/ref.st" && pass || fail "SIGUSR1: the resume: $(tail -3 "$tmp/usr2.out")"
none_left "SIGUSR1 to mpirun"

# --- SIGTERM to one process, no MPI ------------------------------------------------------------
"$bin" "${job[@]}" --save "$tmp/one-ref.st" --quiet >/dev/null 2>&1
"$bin" "${job[@]}" --save "$tmp/one.st" >"$tmp/one.out" 2>&1 &
runner=$!
wait_for "$tmp/one.out" "^epoch 1/3" && kill -TERM $runner
wait $runner
status=$?
[[ $status -eq 6 && $(meta "$tmp/one.st" loader.batch) -gt 0 ]] && grep -q "^dptrain: preempted: stopped after step" "$tmp/one.out" \
  && pass || fail "SIGTERM to one process: exit $status: $(tail -2 "$tmp/one.out")"
"$bin" "${job[@]}" --quiet --save "$tmp/one.st" --resume "$tmp/one.st" >/dev/null 2>&1 && same_tensors "$tmp/one.st" "$tmp/one-ref.st" \
  && pass || fail "SIGTERM to one process: the resume's bytes"

# --- at once: SIGTERM twice, SIGINT once -------------------------------------------------------
# (a job of 30 epochs, so that the signal lands inside it on any machine: it ends at once)
long=(train --model lenet-paddle --data "$tmp/small" --epochs 30 --lr 0.1 --batch-size 20 --seed 6 --devices 1 --comm-timeout 10)
for how in TERM-TERM INT; do
  rm -f "$tmp/once.st"
  "$bin" launch --np 2 --log-dir "$tmp/once-$how" -- "${long[@]}" --save "$tmp/once.st" >"$tmp/once.out" 2>&1 &
  launcher=$!
  wait_for "$tmp/once-$how/worklog.0" "^training"
  sleep 0.5
  start=$SECONDS
  if [[ $how == INT ]]; then kill -INT $launcher; else kill -TERM $launcher; sleep 0.2; kill -TERM $launcher; fi
  wait $launcher
  status=$? took=$((SECONDS - start))
  expected=$([[ $how == INT ]] && echo 130 || echo 143)
  [[ $status -eq $expected && $took -le 5 ]] && pass || fail "$how: exit $status (expected $expected) after $took s: $(cat "$tmp/once.out")"
  [[ ! -e "$tmp/once.st" ]] || "$bin" inspect "$tmp/once.st" >/dev/null 2>&1 && pass || fail "$how: a torn --save file"
  grep -q "^dptrain launch: interrupted (" "$tmp/once.out" && pass || fail "$how: $(cat "$tmp/once.out")"
  none_left "$how"
done

# --- SIGINT after every rank has finished, before mpirun has: the job is done ---------------------
# (an mpirun that lingers 5 s after its ranks, in front of the real one on PATH)
mkdir -p "$tmp/late" && cat >"$tmp/late/mpirun" <<SH
#!/bin/sh
$(command -v mpirun) "\$@"
code=\$?
touch "$tmp/late/ranks-ended"
sleep 5
exit \$code
SH
chmod +x "$tmp/late/mpirun"
small=(train --model lenet-paddle --data "$tmp/small" --epochs 1 --limit 400 --lr 0.1 --batch-size 20 --seed 6 --devices 1)
PATH="$tmp/late:$PATH" "$bin" launch --np 2 --log-dir "$tmp/late-log" -- "${small[@]}" --save "$tmp/late.st" \
  >"$tmp/late.out" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do [[ -e "$tmp/late/ranks-ended" ]] && break; sleep 0.1; done
kill -INT $launcher
wait $launcher
status=$?
[[ $status -eq 0 ]] && grep -q "^dptrain launch: every rank had finished when mpirun ended (.*): the job is done$" "$tmp/late.out" \
  && ! grep -q "interrupted" "$tmp/late.out" && "$bin" inspect "$tmp/late.st" >/dev/null 2>&1 && pass \
  || fail "SIGINT after the ranks ended: exit $status: $(cat "$tmp/late.out")"
pkill -f -- "sleep 5" 2>/dev/null # the lingering stand-in's
testing_finish cli_preempt
