#!/usr/bin/env bash
# cli_mpi_netns.sh - two hosts over a real network: two network namespaces
# joined by a veth pair (iproute2), one MPI rank in each, Open MPI's TCP
# transport only (--mca btl tcp,self: no shared memory), mpirun started in
# the first namespace and reaching the second through a launch agent that
# enters it (plm_rsh_agent = a script running `ip netns exec NS`, standing in
# for ssh; the Open MPI settings are OMPI_MCA_* environment variables, which
# mpirun, the agent and the daemons inherit). Checks:
# - 2 hosts x 1 device train to the same numbers as 1 process x 2 devices
#   (metrics equal to the last digit, checkpoint tensors bit for bit), and
#   the gradients really crossed the veth (bytes counted on the link);
# - `dptrain launch --hosts A:1,B:1` runs across them (worklogs, same
#   numbers), each rank in its own namespace (ip netns identify PID);
# - cutting the link (ip link set ... down) in the middle of epoch 1 ends the
#   job: rank 0 names rank 1 within --comm-timeout (+1 s of detection), and
#   launch's keepalive settings make mpirun exit soon after, non-zero;
# - faults across the hosts (DPTRAIN_FAULT): rank 1, on the second host,
#   killed under launch --restarts 1: named with its host, the job restarted
#   and ending with the bytes of the uninterrupted 2-host run; rank 1 hanging
#   under --np 1:2 --hostfile, the second host taken out of the host file
#   meanwhile: the stall ends the attempt and the job finishes on the first
#   host's rank, with the bytes of 2 devices to the checkpoint at step 10
#   then 1 device from it; the second host's link brought down while rank 1
#   hangs under a fixed --hosts list (--np 1:2, --restarts 2): the next
#   attempt cannot start its daemon (named, exit status 8's line), the host
#   is left out and the job finishes on the first host with the same bytes;
#   nothing left running in either namespace after each.
# Namespaces and leftover processes in them are removed on exit. Skipped
# (exit 77) where namespaces cannot be made (not root, no iproute2).
source "$(dirname "$0")/testing.sh"
skip() { echo "cli_mpi_netns: SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "ip (iproute2) not found"
command -v mpirun >/dev/null || { echo "cli_mpi_netns: mpirun not found (openmpi-bin)"; echo "cli_mpi_netns: 0 passed, 1 failed"; exit 1; }
id=$$
nsa=dpt-a-$id nsb=dpt-b-$id veth_a=dpta$id veth_b=dptb$id
net=10.$((200 + id % 50)).$((id / 50 % 250))
host_a=$net.1 host_b=$net.2
cleanup() {
  for ns in $nsa $nsb; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' TERM INT HUP
# namespaces left by an earlier run that was killed outright (its pid is gone)
for ns in $(ip netns list 2>/dev/null | grep -oE '^dpt-[ab]-[0-9]+'); do
  kill -0 "${ns##*-}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done
err=$(ip netns add $nsa 2>&1) || skip "cannot make a network namespace: $err"
ip netns add $nsb && ip link add $veth_a type veth peer name $veth_b && ip link set $veth_a netns $nsa \
  && ip link set $veth_b netns $nsb && ip -n $nsa addr add $host_a/24 dev $veth_a \
  && ip -n $nsb addr add $host_b/24 dev $veth_b && ip -n $nsa link set $veth_a up && ip -n $nsb link set $veth_b up \
  && ip -n $nsa link set lo up && ip -n $nsb link set lo up || skip "cannot set up the veth pair"
# Once a rank has ended the job, mpirun tells the other host's daemon, and on
# a dead link that message waits for TCP to give up: Linux retransmits
# tcp_retries2 = 15 times (about 15 minutes). These hosts give up after 3
# (about 3 s), what a cluster admin would set (see docs/multi-process.md, "Several hosts").
for ns in $nsa $nsb; do ip netns exec $ns sysctl -qw net.ipv4.tcp_retries2=3 || skip "cannot set tcp_retries2 in $ns"; done
cat >"$tmp/agent.sh" <<AGENT
#!/bin/bash
# mpirun's launch agent (in place of ssh): [options] HOST COMMAND...
while [[ \$1 == -* ]]; do shift; done
host=\$1; shift
case \$host in
  $host_a) ns=$nsa ;;
  $host_b) ns=$nsb ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns /bin/sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"
rx_bytes() { ip -n $nsb -s link show $veth_b | awk '/RX:/ {getline; print $1}'; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
# the sum that ran ("sync") differs between hosts and devices: not what is compared
no_timing() { sed -E 's/"epoch_sec": [^,]*, "images_per_sec": [^,]*, //; s/"devices": \[[^]]*\], "num_devices": [0-9]*, "ranks": [0-9]*//; s/"sync": "[a-z-]*", //' "$1"; }

small_data "$tmp/small" 2000 300
job=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --lr 0.1 --batch-size 128 --seed 3)
"$bin" "${job[@]}" --devices 2 --quiet --metrics "$tmp/local.jsonl" --save "$tmp/local.st" >/dev/null 2>&1 \
  && pass || fail "1 process x 2 devices"

export OMPI_MCA_plm_rsh_agent="$tmp/agent.sh" OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$net.0/24 \
  OMPI_MCA_oob_tcp_if_include=$net.0/24 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rx_before=$(rx_bytes)
timeout 120 ip netns exec $nsa mpirun --allow-run-as-root -np 2 --host $host_a:1,$host_b:1 \
  "$bin" "${job[@]}" --devices 1 --metrics "$tmp/hosts.jsonl" --save "$tmp/hosts.st" >"$tmp/hosts.out" 2>&1 \
  && pass || fail "2 hosts x 1 device: $(tail -5 "$tmp/hosts.out")"
rx=$(( $(rx_bytes) - rx_before ))
[[ -s "$tmp/hosts.jsonl" ]] && [[ "$(no_timing "$tmp/hosts.jsonl")" == "$(no_timing "$tmp/local.jsonl")" ]] && pass \
  || fail "2 hosts vs 2 devices, metrics: $(cat "$tmp/hosts.jsonl" "$tmp/local.jsonl" 2>&1)"
same_tensors "$tmp/hosts.st" "$tmp/local.st" && pass || fail "2 hosts vs 2 devices: parameters differ"
# 32 steps x an 81 KB gradient each way, at least
[[ $rx -gt 2000000 ]] && pass || fail "only $rx bytes crossed the link"
echo "2 hosts: $rx bytes received over $veth_b"

# dptrain launch --hosts, from the first namespace
timeout 120 ip netns exec $nsa "$bin" launch --np 2 --hosts $host_a:1,$host_b:1 --log-dir "$tmp/log" -- \
  "${job[@]}" --devices 1 --metrics "$tmp/launch.jsonl" >"$tmp/launch.out" 2>&1 \
  && pass || fail "launch --hosts: $(tail -5 "$tmp/launch.out")"
[[ -s "$tmp/log/worklog.0" && -s "$tmp/log/worklog.1" ]] && grep -q "^rank 1 of 2" "$tmp/log/worklog.1" && pass \
  || fail "launch --hosts: worklogs $(ls "$tmp/log" 2>&1)"
[[ "$(no_timing "$tmp/launch.jsonl")" == "$(no_timing "$tmp/local.jsonl")" ]] && pass \
  || fail "launch --hosts vs 2 devices: $(cat "$tmp/launch.jsonl" 2>&1)"

# --- faults across the hosts ---------------------------------------------------------------
# nothing of the jobs left in either namespace
none_left() {
  local left
  left=$(ip netns pids $nsa; ip netns pids $nsb)
  [[ -z "$left" ]] && pass || { fail "$1: left running: $(ps -o pid,args -p $(echo $left) 2>&1)"; kill -9 $left 2>/dev/null; }
}
none_left "the runs so far"
DPTRAIN_FAULT=kill:1:13 timeout 120 ip netns exec $nsa "$bin" launch --np 2 --hosts $host_a:1,$host_b:1 --restarts 1 \
  --log-dir "$tmp/kill" -- "${job[@]}" --devices 1 --save-every-steps 5 --save "$tmp/kill.st" >"$tmp/kill.out" 2>&1
status=$?
[[ $status -eq 0 ]] && same_tensors "$tmp/kill.st" "$tmp/hosts.st" && pass \
  || fail "rank 1 killed on $host_b: exit $status, or not the 2-host run's bytes: $(cat "$tmp/kill.out")"
grep -q "^dptrain launch: attempt 1 failed: rank 1 on $host_b (pid [0-9]*): killed by signal 9 (Killed) at step 13 " "$tmp/kill.out" \
  && pass || fail "rank 1 killed: its host named: $(cat "$tmp/kill.out")"
none_left "rank 1 killed"
printf '%s:1\n%s slots=1\n' $host_a $host_b >"$tmp/hostfile"
DPTRAIN_FAULT=hang:1:13 ip netns exec $nsa "$bin" launch --np 1:2 --hostfile "$tmp/hostfile" --restarts 1 --log-dir "$tmp/gone" -- \
  "${job[@]}" --devices 1 --save-every-steps 5 --comm-timeout 2 --save "$tmp/gone.st" >"$tmp/gone.out" 2>&1 &
job_pid=$!
for _ in $(seq 1 600); do grep -q "DPTRAIN_FAULT: rank 1, step 13: hanging" "$tmp/gone/worklog.1" 2>/dev/null && break; sleep 0.1; done
echo "$host_a:1" >"$tmp/hostfile" # the second host is gone for good
for _ in $(seq 1 600); do kill -0 $job_pid 2>/dev/null || break; sleep 0.1; done
kill -9 $job_pid 2>/dev/null
wait $job_pid
status=$?
[[ $status -eq 0 ]] && grep -q "^dptrain launch: attempt 2: 1 rank on $host_a:1$" "$tmp/gone.out" && grep -q "^rank 0 of 1," "$tmp/gone/worklog.0" \
  && pass || fail "a host gone: exit $status: $(cat "$tmp/gone.out")"
grep -q "^dptrain launch: attempt 1 failed: rank 0 on $host_a (pid [0-9]*): exit status 3 (a rank lost or stalled) at step 13 .*: no answer from rank 1 " \
  "$tmp/gone.out" && pass || fail "a host gone: the stall's line: $(cat "$tmp/gone.out")"
# the same in one process: 2 devices to step 10's checkpoint (step 12 ends it), then 1 device from it
(DPTRAIN_FAULT=kill:0:12 "$bin" "${job[@]}" --devices 2 --save-every-steps 5 --save "$tmp/gone-ref.st") >/dev/null 2>&1
"$bin" "${job[@]}" --devices 1 --save-every-steps 5 --resume "$tmp/gone-ref.st" --save "$tmp/gone-ref.st" >/dev/null 2>&1
same_tensors "$tmp/gone.st" "$tmp/gone-ref.st" && pass || fail "a host gone: not the bytes of 2 devices to step 10, then 1"
worst=$(close_checkpoints "$tmp/gone.st" "$tmp/hosts.st" 1) # the float tolerance, for the record
echo "a host gone: the job finished on 1 rank; its parameters within $worst of the 2-host run's"
none_left "a host gone"

# the second host loses its network during the job (its link down while rank 1 hangs): the stall ends attempt 1,
# attempt 2 cannot start the host's daemon (exit status 8's line, naming it), the host is left out of the fixed
# --hosts list and attempt 3 finishes on the first host, with the bytes of 2 devices to step 10, then 1
DPTRAIN_FAULT=hang:1:13 ip netns exec $nsa "$bin" launch --np 1:2 --hosts $host_a:1,$host_b:1 --restarts 2 \
  --log-dir "$tmp/lost" -- "${job[@]}" --devices 1 --save-every-steps 5 --comm-timeout 2 --save "$tmp/lost.st" \
  >"$tmp/lost.out" 2>&1 &
job_pid=$!
for _ in $(seq 1 600); do grep -q "DPTRAIN_FAULT: rank 1, step 13: hanging" "$tmp/lost/worklog.1" 2>/dev/null && break; sleep 0.1; done
ip -n $nsb link set $veth_b down
for _ in $(seq 1 900); do kill -0 $job_pid 2>/dev/null || break; sleep 0.1; done
kill -9 $job_pid 2>/dev/null
wait $job_pid
status=$?
ip -n $nsb link set $veth_b up
[[ $status -eq 0 ]] && same_tensors "$tmp/lost.st" "$tmp/gone-ref.st" && pass \
  || fail "a host's network lost: exit $status, or not the bytes of 2 devices to step 10, then 1: $(cat "$tmp/lost.out")"
grep -q "^dptrain launch: attempt 2 failed: host $host_b could not be reached (mpirun could not start its daemon): " "$tmp/lost.out" \
  && grep -q "^dptrain launch: attempt 3: 1 rank on $host_a:1$" "$tmp/lost.out" && ! grep -qE "^-{20,}|^(ORTE|WARNING)" "$tmp/lost.out" && pass \
  || fail "a host's network lost: the lines: $(cat "$tmp/lost.out")"
none_left "a host's network lost"

# cut the link in the middle of epoch 1
timeout=3
ip netns exec $nsa "$bin" launch --np 2 --hosts $host_a:1,$host_b:1 --log-dir "$tmp/cut" -- train --model lenet-paddle \
  --data "$data" --limit 60000 --epochs 3 --batch-size 128 --seed 3 --devices 1 --comm-timeout $timeout \
  >"$tmp/cut.out" 2>&1 &
job_pid=$!
pid0= pid1=
for _ in $(seq 1 300); do
  pid0=$(sed -nE 's/^rank 0 of 2, .* pid ([0-9]+)$/\1/p' "$tmp/cut/worklog.0" 2>/dev/null)
  pid1=$(sed -nE 's/^rank 1 of 2, .* pid ([0-9]+)$/\1/p' "$tmp/cut/worklog.1" 2>/dev/null)
  [[ -n "$pid0" && -n "$pid1" ]] && grep -q "^training" "$tmp/cut/worklog.0" && break
  sleep 0.1
done
[[ "$(ip netns identify "$pid0" 2>/dev/null)" == "$nsa" && "$(ip netns identify "$pid1" 2>/dev/null)" == "$nsb" ]] \
  && pass || fail "ranks in their namespaces: rank 0 (pid $pid0) in '$(ip netns identify "$pid0" 2>&1)', rank 1 (pid $pid1) in '$(ip netns identify "$pid1" 2>&1)'"
sleep 1
grep -q "^epoch 1/3" "$tmp/cut/worklog.0" && fail "epoch 1 already over when the link was cut" || pass
ip -n $nsb link set $veth_b down
start=$(date +%s.%N)
named= ended=
for _ in $(seq 1 400); do
  now=$(date +%s.%N)
  [[ -z "$named" ]] && grep -q "no answer from rank 1" "$tmp/cut/worklog.0" 2>/dev/null && named=$(elapsed "$now" "$start")
  kill -0 $job_pid 2>/dev/null || { ended=$(elapsed "$now" "$start"); break; }
  sleep 0.1
done
if [[ -z "$ended" ]]; then kill -TERM $job_pid 2>/dev/null; fi
wait $job_pid
status=$?
[[ -n "$ended" && $status -ne 0 ]] && pass || fail "cut link: the job did not end within 40 s (status $status)"
[[ -n "$named" ]] && awk -v n="$named" -v t=$timeout 'BEGIN { exit !(n <= t + 1.5) }' && pass \
  || fail "cut link: rank 1 not named within --comm-timeout $timeout + 1.5 s (named after '${named}' s): $(grep -h dptrain "$tmp/cut/worklog.0" "$tmp/cut.out" | head -3)"
echo "cut link: rank 0 named rank 1 after ${named:-?} s (--comm-timeout $timeout), mpirun exited after ${ended:-?} s with status $status"
grep -h "no answer" "$tmp/cut/worklog.0" | head -1
testing_finish cli_mpi_netns
