#!/usr/bin/env bash
# cli_faults.sh - `dptrain launch` survives its faults and ends at once on a
# mistake, on real processes under mpirun, with faults injected by
# DPTRAIN_FAULT (docs/testing.md):
# - a rank killed at three different steps of one run (rank 1 SIGKILLed, then
#   rank 0, then rank 1 exiting with status 4) under --restarts 3: the job
#   exits 0 by itself and its final checkpoint is byte-identical to an
#   uninterrupted run's; launch names each failure (the rank, its host, the
#   signal or status, the step, the worklog kept) and lists them at the end;
# - a rank that hangs: caught by the stall detection (--comm-timeout 2),
#   the reason on launch's terminal although the ranks write to --log-dir,
#   restarted, the same bytes;
# - a mistake (no such data) with --restarts 3: one attempt, exit status 1,
#   one line, no Open MPI banner, also with --log-dir (launch's line then);
#   a typo in the train options: launch's one line, no rank started;
# - elastic: --np 1:2 with a discovery command offering 2 slots, then 1
#   after the failure: the job finishes on 1 rank, with the bytes of 2 ranks
#   to the checkpoint at step 14, then 1 from it; a host file whose host
#   fails twice is left out for --cooling, then the job finishes (2 ranks:
#   the same bytes);
#   --np 3 on 2 slots waits --min-wait, then ends with exit status 7;
#   but --np 3 on a fixed --hosts list of 2 slots is a mistake said at once
#   (exit 1, one line, the --log-dir not made);
# - --init with --resume: refused at once, as train refuses it (exit 1, one line);
# - a second launch on a --log-dir in use stops at once (exit 1, one line),
#   the first one's worklogs untouched and its job finishing;
# - no process of any of these jobs left running (mpirun, a rank).
source "$(dirname "$0")/testing.sh"
command -v mpirun >/dev/null || { echo "cli_faults: mpirun not found (openmpi-bin)"; echo "cli_faults: 0 passed, 1 failed"; exit 1; }

small_data "$tmp/small" 1200 100
job=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --lr 0.1 --batch-size 40 --seed 5 --devices 1 --quiet
     --save-every-steps 7)
banner() { grep -qE "MPI_ABORT|^-{20,}|ORTE_ERROR_LOG|Primary job" "$1"; }

"$bin" launch --np 2 -- "${job[@]}" --save "$tmp/ref.st" >"$tmp/ref.out" 2>&1 && pass \
  || fail "uninterrupted run: $(tail -3 "$tmp/ref.out")"

# --- three kills in one run ---------------------------------------------------------------
DPTRAIN_FAULT=kill:1:11,kill:0:25:1,exit4:1:44:2 "$bin" launch --np 2 --restarts 3 --log-dir "$tmp/kills" -- \
  "${job[@]}" --save "$tmp/kills.st" >"$tmp/kills.out" 2>&1
status=$?
[[ $status -eq 0 ]] && pass || fail "three kills: exit $status: $(tail -5 "$tmp/kills.out")"
same_tensors "$tmp/kills.st" "$tmp/ref.st" && pass || fail "three kills: the checkpoint differs from the uninterrupted run's"
said() { grep -qE -- "$1" "$tmp/kills.out" && pass || fail "three kills: no line /$1/ in: $(grep launch "$tmp/kills.out")"; }
said "^dptrain launch: attempt 1 failed: rank 1 on [^ ]+ \(pid [0-9]+\): killed by signal 9 \(Killed\) at step 11 \(epoch 1, step 11 of 30\); log $tmp/kills/worklog.1.attempt1$"
said "^dptrain launch: attempt 2 failed: rank 0 on [^ ]+ \(pid [0-9]+\): killed by signal 9 \(Killed\) at step 25 \(epoch 1, step 25 of 30\); log $tmp/kills/worklog.0.attempt2$"
said "^dptrain launch: attempt 3 failed: rank 1 on [^ ]+ \(pid [0-9]+\): exited with status 4 \(a device failed\) without a word at step 44 \(epoch 2, step 14 of 30\); log $tmp/kills/worklog.1.attempt3$"
said "^dptrain launch: restart 3 of 3, resuming from $tmp/kills.st$"
said "^dptrain launch: the job finished after 3 restarts$"
said "^dptrain launch: 3 failures:$"
[[ $(grep -c "^dptrain launch:   [123]\. rank [01] on " "$tmp/kills.out") -eq 3 ]] && pass || fail "three kills: the summary's lines"
[[ -s "$tmp/kills/worklog.1.attempt1" && -s "$tmp/kills/worklog.0.attempt2" && -s "$tmp/kills/worklog.0" ]] && pass \
  || fail "three kills: the worklogs kept: $(ls "$tmp/kills")"
! banner "$tmp/kills.out" && pass || fail "three kills: Open MPI's messages on the terminal: $(cat "$tmp/kills.out")"
# the rank mpirun ended after the kill went at once (its SIGTERM is not a preemption)
[[ -s "$tmp/kills/worklog.0.attempt1" ]] && ! grep -q "asked to stop" "$tmp/kills/worklog.0.attempt1" && pass \
  || fail "three kills: rank 0's first worklog missing, or it took mpirun's SIGTERM for a preemption"
none_left "three kills"

# --- a hang, caught by the stall detection ---------------------------------------------------
DPTRAIN_FAULT=hang:1:18 "$bin" launch --np 2 --restarts 1 --log-dir "$tmp/hang" -- "${job[@]}" --comm-timeout 2 \
  --save "$tmp/hang.st" >"$tmp/hang.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/hang.st" "$tmp/ref.st" && pass \
  || fail "hang: exit $status, or the checkpoint differs: $(tail -3 "$tmp/hang.out")"
grep -qE "^dptrain launch: attempt 1 failed: rank 0 on [^ ]+ \(pid [0-9]+\): exit status 3 \(a rank lost or stalled\) at step 18 .*: no answer from rank 1 for 2 s in .* \(--comm-timeout 2\).*; log $tmp/hang/worklog.0.attempt1$" \
  "$tmp/hang.out" && pass || fail "hang: the reason on launch's terminal: $(cat "$tmp/hang.out")"
none_left "hang"

# --- mistakes: one attempt, one line ------------------------------------------------------
# rank 0's alone (only rank 0 writes the --save file): the ranks agree and end together
start=$SECONDS
"$bin" launch --np 2 --restarts 3 -- "${job[@]}" --comm-timeout 20 --save "$tmp/nodir/x.st" >"$tmp/rank0.out" 2>&1
status=$?
[[ $status -eq 1 && $((SECONDS - start)) -lt 15 && $(wc -l <"$tmp/rank0.out") -eq 1 ]] \
  && grep -q "^dptrain: --save $tmp/nodir/x.st: directory '$tmp/nodir' is not writable" "$tmp/rank0.out" \
  && pass || fail "rank 0's mistake: exit $status after $((SECONDS - start)) s: $(cat "$tmp/rank0.out")"
# rank 1's alone inside dp_fit, before its first step (its own DPTRAIN_FAULT does not parse): agreed too,
# rank 0 says rank 1's line
start=$SECONDS
mpirun --allow-run-as-root -q -np 1 -x DPTRAIN_FAULT=kill:0:999 "$bin" "${job[@]}" --comm-timeout 20 --save "$tmp/r1.st" : \
  -np 1 -x DPTRAIN_FAULT=boom "$bin" "${job[@]}" --comm-timeout 20 --save "$tmp/r1.st" >"$tmp/rank1.out" 2>&1
status=$?
[[ $status -eq 1 && $((SECONDS - start)) -lt 15 && $(wc -l <"$tmp/rank1.out") -eq 1 ]] \
  && grep -q "^dptrain: rank 1 of 2: DPTRAIN_FAULT: 'boom' is not ACTION:RANK:STEP" "$tmp/rank1.out" \
  && pass || fail "rank 1's mistake in dp_fit: exit $status after $((SECONDS - start)) s: $(cat "$tmp/rank1.out")"
# and in its resume (the same --resume ck.st, read in another directory: rank 1's is not a checkpoint)
mkdir -p "$tmp/w0" "$tmp/w1" && cp "$tmp/ref.st" "$tmp/w0/ck.st" && echo "not a checkpoint" >"$tmp/w1/ck.st"
start=$SECONDS
mpirun --allow-run-as-root -q -np 1 -wdir "$tmp/w0" "$bin" "${job[@]}" --comm-timeout 20 --resume ck.st --save x.st : \
  -np 1 -wdir "$tmp/w1" "$bin" "${job[@]}" --comm-timeout 20 --resume ck.st --save x.st >"$tmp/resume1.out" 2>&1
status=$?
[[ $status -eq 1 && $((SECONDS - start)) -lt 15 && $(wc -l <"$tmp/resume1.out") -eq 1 ]] && grep -q "^dptrain: rank 1 of 2: ck.st: " \
  "$tmp/resume1.out" && pass || fail "rank 1's resume: exit $status after $((SECONDS - start)) s: $(cat "$tmp/resume1.out")"
for logs in "" "--log-dir $tmp/mistake"; do
  "$bin" launch --np 2 --restarts 3 $logs -- "${job[@]}" --data "$tmp/nosuch" --save "$tmp/x.st" >"$tmp/mistake.out" 2>&1
  status=$?
  [[ $status -eq 1 && $(wc -l <"$tmp/mistake.out") -eq 1 ]] && grep -q "$tmp/nosuch: cannot open the data directory" \
    "$tmp/mistake.out" && ! banner "$tmp/mistake.out" && pass || fail "a mistake ($logs): exit $status: $(cat "$tmp/mistake.out")"
done
grep -q "^dptrain launch: the job failed: rank 0 .*not restarted (a mistake, exit status 1, is not a fault)" "$tmp/mistake.out" \
  && pass || fail "a mistake with --log-dir: $(cat "$tmp/mistake.out")"
mkdir "$tmp/t"
TMPDIR=$tmp/t "$bin" launch --np 2 --restarts 3 -- "${job[@]}" --epoch 2 >"$tmp/typo.out" 2>&1
status=$?
[[ $status -eq 1 && "$(cat "$tmp/typo.out")" == "dptrain: train: unknown option '--epoch' (did you mean --epochs?)" && -z "$(ls "$tmp/t")" ]] \
  && pass || fail "a typo: exit $status: $(cat "$tmp/typo.out")"
# --init with --resume, refused as train refuses it (a restart would drop the --init unsaid)
TMPDIR=$tmp/t "$bin" launch --np 2 --restarts 3 -- "${job[@]}" --init "$tmp/a.st" --resume "$tmp/b.st" >"$tmp/both.out" 2>&1
status=$?
[[ $status -eq 1 && "$(cat "$tmp/both.out")" == "dptrain: launch: --init $tmp/a.st with --resume $tmp/b.st: --init starts a new run"* \
   && $(wc -l <"$tmp/both.out") -eq 1 && -z "$(ls "$tmp/t")" ]] && pass || fail "--init with --resume: exit $status: $(cat "$tmp/both.out")"
none_left "mistakes"

# --- elastic: fewer ranks after a failure, cooling, too few -------------------------------------
cat >"$tmp/discover.sh" <<EOF
#!/bin/bash
# offers 2 slots the first time, then 1
n=\$(cat "$tmp/discovered" 2>/dev/null || echo 0); echo \$((n + 1)) >"$tmp/discovered"
[[ \$n -eq 0 ]] && echo localhost:2 || echo localhost:1
EOF
chmod +x "$tmp/discover.sh"
DPTRAIN_FAULT=kill:1:16 "$bin" launch --np 1:2 --restarts 1 --host-discovery "$tmp/discover.sh" --log-dir "$tmp/el" -- \
  "${job[@]}" --save "$tmp/el.st" >"$tmp/el.out" 2>&1
status=$?
[[ $status -eq 0 ]] && grep -q "^dptrain launch: attempt 2: 1 rank on localhost:1$" "$tmp/el.out" \
  && grep -q "^rank 0 of 1," "$tmp/el/worklog.0" && pass || fail "elastic: exit $status: $(cat "$tmp/el.out")"
# the same by hand: 2 ranks to step 14's checkpoint (step 16 ends them), then 1 rank from it
DPTRAIN_FAULT=kill:1:16 mpirun --allow-run-as-root -q -np 2 "$bin" "${job[@]}" --save "$tmp/el-ref.st" >/dev/null 2>&1
mpirun --allow-run-as-root -q -np 1 "$bin" "${job[@]}" --resume "$tmp/el-ref.st" --save "$tmp/el-ref.st" >/dev/null 2>&1
same_tensors "$tmp/el.st" "$tmp/el-ref.st" && pass || fail "elastic: not the bytes of 2 ranks to step 14, then 1"
worst=$(close_checkpoints "$tmp/el.st" "$tmp/ref.st" 1) # the float tolerance, for the record
echo "elastic: 2 ranks, then 1 from step 14: parameters within $worst of the uninterrupted 2-rank run's"
echo "localhost:2" >"$tmp/hosts"
DPTRAIN_FAULT=kill:1:10,kill:1:20:1 "$bin" launch --np 1:2 --restarts 2 --hostfile "$tmp/hosts" --cooling 1 -- \
  "${job[@]}" --save "$tmp/cool.st" >"$tmp/cool.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/cool.st" "$tmp/ref.st" && grep -q "^dptrain launch: host localhost has failed again: left out for 1 s$" \
  "$tmp/cool.out" && grep -q "waiting up to 60 s for more ranks: 0 ranks available (0 hosts, others cooling off" "$tmp/cool.out" \
  && pass || fail "cooling: exit $status: $(cat "$tmp/cool.out")"
start=$SECONDS
"$bin" launch --np 3 --hostfile "$tmp/hosts" --min-wait 1 -- "${job[@]}" >"$tmp/few.out" 2>&1
status=$?
[[ $status -eq 7 && $((SECONDS - start)) -lt 10 ]] && tail -1 "$tmp/few.out" | grep -q "^dptrain launch: 2 ranks available (1 host), --np needs at least 3; gave up after 1 s (--min-wait 1)$" \
  && pass || fail "too few ranks: exit $status: $(cat "$tmp/few.out")"
for bad in "--np 0" "--np 2:1" "--np 1:x" "--np 2 --hosts a:1 --hostfile $tmp/hosts" "--np 2 --cooling -1"; do
  out=$("$bin" launch $bad -- train 2>&1) && fail "launch $bad accepted" \
    || { [[ $(wc -l <<<"$out") -eq 1 ]] && pass || fail "launch $bad: $out"; }
done
start=$SECONDS
out=$("$bin" launch --np 3 --hosts localhost:2 --log-dir "$tmp/fixed" -- "${job[@]}" 2>&1)
status=$?
[[ $status -eq 1 && $((SECONDS - start)) -lt 5 && ! -e "$tmp/fixed" \
   && $out == "dptrain: launch: --hosts localhost:2 has 2 slots, --np needs at least 3 (give more hosts or slots, or a smaller --np)" ]] \
  && pass || fail "too few slots in --hosts: exit $status after $((SECONDS - start)) s: $out"
"$bin" launch --np 2 --log-dir "$tmp/busy" -- "${job[@]}" --epochs 6 --save "$tmp/busy.st" >"$tmp/busy.out" 2>&1 &
first=$!
for _ in $(seq 1 600); do grep -q "^rank 1 of 2" "$tmp/busy/worklog.1" 2>/dev/null && break; sleep 0.1; done
out=$("$bin" launch --np 2 --log-dir "$tmp/busy" -- "${job[@]}" 2>&1)
status=$?
[[ $status -eq 1 && $out == "dptrain: launch: --log-dir $tmp/busy is in use by another dptrain launch (pid $first): give each job a log directory of its own" ]] \
  && pass || fail "a second launch on one --log-dir: exit $status: $out"
wait $first
status=$?
[[ $status -eq 0 ]] && grep -q "^rank 0 of 2, .* pid " "$tmp/busy/worklog.0" && grep -q "^rank 1 of 2, .* pid " "$tmp/busy/worklog.1" \
  && [[ ! -s "$tmp/busy/launch.log" ]] && pass || fail "the first launch on $tmp/busy: exit $status: $(cat "$tmp/busy.out" "$tmp/busy/launch.log")"
mkdir -p "$tmp/hostdir"
out=$("$bin" launch --np 1 --hostfile "$tmp/hostdir" --min-wait 0 -- "${job[@]}" 2>&1)
[[ $? -eq 7 && $out == *"0 ranks available (0 hosts; --hostfile $tmp/hostdir: Is a directory)"* ]] && pass \
  || fail "a directory as --hostfile: $out"
printf 'localhost:0\n' >"$tmp/badhosts"
out=$("$bin" launch --np 1 --hostfile "$tmp/badhosts" -- "${job[@]}" 2>&1) && fail "slots 0 accepted" \
  || { grep -q "the slots must be a number from 1 to 4096" <<<"$out" && pass || fail "slots 0: $out"; }
none_left "elastic"
testing_finish cli_faults
