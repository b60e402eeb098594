#!/usr/bin/env bash
# cli_launch_hosts.sh - `dptrain launch` and a host mpirun cannot reach (a
# name under .invalid, which never resolves: ssh says so at once, of the
# name without its domain as Open MPI hands it over, and Open MPI's "ORTE was unable to reliably start one or more daemons" follows,
# mpirun exiting 255 with no rank started):
# - a fixed --hosts list: exit status 8, one line naming the host with the
#   launch agent's words, Open MPI's paragraph in --log-dir's launch.log
#   (not on the terminal), no worklog; without --log-dir the same line;
#   an agent that says nothing: the attempt's one remote host is named all
#   the same, two such hosts: "a host could not be reached";
# - --np 1:2 on that list with --restarts 1: the host is left out, the job
#   finishes on the remaining slot, with the bytes of a 1-rank run from the
#   start; --np 2: what is left is too small, one line, exit status 8;
# - elastic (--host-discovery offering localhost:2, then localhost:1 and
#   the unreachable host): rank 1 killed at step 16, attempt 2 cannot reach
#   the host, attempt 3 runs without it and resumes from step 14's
#   checkpoint: the bytes of 2 ranks to step 14, then 1 from it by hand;
#   a host file whose remaining slots are too few waits --min-wait: exit 7;
# - no process of any of these jobs left running.
source "$(dirname "$0")/testing.sh"
command -v mpirun >/dev/null || { echo "cli_launch_hosts: mpirun not found (openmpi-bin)"; echo "cli_launch_hosts: 0 passed, 1 failed"; exit 1; }

dead=nosuchhost-$$.invalid
# Open MPI starts a remote daemon with ssh; where there is none, a stand-in that fails as ssh does
if ! command -v ssh >/dev/null; then
  printf '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\necho "ssh: Could not resolve hostname $1: Name or service not known" >&2\nexit 255\n' \
    >"$tmp/ssh" && chmod +x "$tmp/ssh" && export OMPI_MCA_plm_rsh_agent="$tmp/ssh"
fi
small_data "$tmp/small" 1200 100
job=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --lr 0.1 --batch-size 40 --seed 5 --devices 1 --quiet
     --save-every-steps 7)
unreached="host $dead could not be reached \(mpirun could not start its daemon\)"

# --- a fixed list --------------------------------------------------------------------------
"$bin" launch --np 2 --hosts localhost:1,$dead:1 --log-dir "$tmp/fixed" -- "${job[@]}" >"$tmp/fixed.out" 2>&1
status=$?
[[ $status -eq 8 && $(wc -l <"$tmp/fixed.out") -eq 1 ]] \
  && grep -qE "^dptrain launch: attempt 1 failed: $unreached: .*${dead%%.*}.*; mpirun's message in $tmp/fixed/launch.log$" "$tmp/fixed.out" \
  && pass || fail "a fixed list: exit $status: $(cat "$tmp/fixed.out")"
grep -q "unable to reliably start one or more daemons" "$tmp/fixed/launch.log" && ! ls "$tmp/fixed" | grep -q worklog \
  && pass || fail "a fixed list: Open MPI's paragraph not in launch.log, or a worklog: $(ls "$tmp/fixed")"
"$bin" launch --np 2 --hosts localhost:1,$dead:1 -- "${job[@]}" >"$tmp/nolog.out" 2>&1
status=$?
[[ $status -eq 8 && $(wc -l <"$tmp/nolog.out") -eq 1 ]] \
  && grep -qE "^dptrain launch: attempt 1 failed: $unreached: .*; no log file \(no --log-dir\)$" "$tmp/nolog.out" \
  && pass || fail "a fixed list without --log-dir: exit $status: $(cat "$tmp/nolog.out")"
printf '#!/bin/sh\nexit 1\n' >"$tmp/mute" && chmod +x "$tmp/mute"
out=$(OMPI_MCA_plm_rsh_agent=$tmp/mute "$bin" launch --np 2 --hosts localhost:1,$dead:1 -- "${job[@]}" 2>&1)
status=$?
[[ $status -eq 8 && $out == "dptrain launch: attempt 1 failed: host $dead could not be reached (mpirun could not start its daemon): Open MPI: ORTE was unable to reliably start one or more daemons.; no log file (no --log-dir)" ]] \
  && pass || fail "an agent that says nothing: exit $status: $out"
out=$(OMPI_MCA_plm_rsh_agent=$tmp/mute "$bin" launch --np 2 --hosts a-$dead:1,b-$dead:1 -- "${job[@]}" 2>&1)
status=$?
[[ $status -eq 8 && $out == "dptrain launch: attempt 1 failed: a host could not be reached (mpirun could not start a daemon): Open MPI: "* ]] \
  && pass || fail "two silent hosts: exit $status: $out"

# --- restarts on a fixed list: left out ---------------------------------------------------------
"$bin" "${job[@]}" --save "$tmp/one.st" >/dev/null 2>&1 && pass || fail "1 rank from the start"
"$bin" launch --np 1:2 --hosts localhost:1,$dead:1 --restarts 1 -- "${job[@]}" --save "$tmp/left.st" >"$tmp/left.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/left.st" "$tmp/one.st" && pass \
  || fail "left out of a fixed list: exit $status, or not the bytes of 1 rank: $(cat "$tmp/left.out")"
said() { grep -qE -- "$2" "$tmp/$1.out" && pass || fail "$1: no line /$2/ in: $(cat "$tmp/$1.out")"; }
said left "^dptrain launch: host $dead left out for 10 s \(it could not be reached\)$"
said left "^dptrain launch: attempt 2: 1 rank on localhost:1$"
said left "^dptrain launch:   1\. $unreached, left out for 10 s; no log file \(no --log-dir\)$"
"$bin" launch --np 2 --hosts localhost:1,$dead:1 --restarts 2 -- "${job[@]}" >"$tmp/small.out" 2>&1
status=$?
[[ $status -eq 8 ]] && tail -1 "$tmp/small.out" | grep -qx "dptrain launch: --hosts localhost:1,$dead:1 has 1 slot left without the host left out, --np needs at least 2; not restarted" \
  && ! grep -q "restart 1" "$tmp/small.out" && pass || fail "too few slots left: exit $status: $(cat "$tmp/small.out")"

# --- elastic: lost between attempts, then left out; the job resumes without it ----------------------
cat >"$tmp/discover.sh" <<EOF
#!/bin/bash
# offers 2 slots here the first time, then 1 here and 1 on a host that cannot be reached
n=\$(cat "$tmp/discovered" 2>/dev/null || echo 0); echo \$((n + 1)) >"$tmp/discovered"
[[ \$n -eq 0 ]] && echo localhost:2 || printf 'localhost:1\n$dead:1\n'
EOF
chmod +x "$tmp/discover.sh"
DPTRAIN_FAULT=kill:1:16 "$bin" launch --np 1:2 --restarts 2 --host-discovery "$tmp/discover.sh" --log-dir "$tmp/el" -- \
  "${job[@]}" --save "$tmp/el.st" >"$tmp/el.out" 2>&1
status=$?
[[ $status -eq 0 ]] && pass || fail "elastic: exit $status: $(cat "$tmp/el.out")"
said el "^dptrain launch: attempt 2: 2 ranks on localhost:1,$dead:1$"
said el "^dptrain launch: attempt 2 failed: $unreached: .*; mpirun's message in $tmp/el/launch.log$"
said el "^dptrain launch: restart 2 of 2, resuming from $tmp/el.st$"
said el "^dptrain launch: attempt 3: 1 rank on localhost:1$"
said el "^dptrain launch:   2\. $unreached, left out for 10 s; "
DPTRAIN_FAULT=kill:1:16 mpirun --allow-run-as-root -q -np 2 "$bin" "${job[@]}" --save "$tmp/el-ref.st" >/dev/null 2>&1
mpirun --allow-run-as-root -q -np 1 "$bin" "${job[@]}" --resume "$tmp/el-ref.st" --save "$tmp/el-ref.st" >/dev/null 2>&1
same_tensors "$tmp/el.st" "$tmp/el-ref.st" && pass || fail "elastic: not the bytes of 2 ranks to step 14, then 1"
printf 'localhost:1\n%s:1\n' $dead >"$tmp/hosts"
"$bin" launch --np 2 --hostfile "$tmp/hosts" --restarts 1 --min-wait 1 -- "${job[@]}" >"$tmp/few.out" 2>&1
status=$?
[[ $status -eq 7 ]] && tail -1 "$tmp/few.out" | grep -qx "dptrain launch: 1 rank available (1 host, others cooling off after failing), --np needs at least 2; gave up after 1 s (--min-wait 1)" \
  && pass || fail "elastic, too few left: exit $status: $(cat "$tmp/few.out")"
none_left "unreachable hosts"
testing_finish cli_launch_hosts
