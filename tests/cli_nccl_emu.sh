#!/usr/bin/env bash
# cli_nccl_emu.sh - devices on distinct GPUs summing with NCCL
# (src/trainer/sync_peer.c, src/backend/cuda/peer_nccl.c), on the CUDA
# emulator and its emulated NCCL (tests/cuda_emulator/emu_nccl.c: member
# order, so the host path's bits). Skipped (77) in a build without CUDA or
# whose emulator has no NCCL. Every NCCL run is compared with the same run
# on the host path (DPTRAIN_NCCL=0): the checkpoint's tensors byte for byte
# and the last train_loss to the last digit; the first line says which path
# ran ("allreduce: nccl" or "allreduce: host (why)"):
# - cuda:0,cuda:1: the chunked allreduce (momentum), --overlap (Adam),
#   --accumulate 3, batch norm with and without --sync-batch-norm (the
#   NCCL runs' steps CUDA graphs, the sums and batch norm's broadcast
#   captured, except with --sync-batch-norm; the host path's as made);
# - 3 GPUs (DPTRAIN_CUDA_EMU_GPUS=3), with and without --overlap;
# - 2 MPI ranks each with its own GPU (CUDA_VISIBLE_DEVICES per rank from
#   OMPI_COMM_WORLD_RANK): NCCL across the ranks (its steps CUDA graphs,
#   the sums captured: counted, and = --cuda-graph off) = the host path
#   (MPI) = one process on cuda:0,cuda:1; 2 ranks of 2 GPUs each with --overlap
#   (graphs too)
#   (the bucket order across ranks: the emulator aborts on members whose
#   calls differ) = one process on 4 GPUs (member order) and within 1e-4
#   of the host path across ranks (which sums (g0 + g1) + (g2 + g3));
#   2 ranks sharing one GPU: the host path, the same bits;
# - DPTRAIN_NCCL=1 on one GPU: a group of one, the host path's bits; the
#   host path without it; devices sharing a GPU (cuda:0,cuda:0,cuda:1) and
#   --sync ps keep the host path; DPTRAIN_NCCL=2: one line, exit 1;
# - a GPU that faults while the sums are queued: one line, exit 4 (a device
#   failed: docs/multi-process.md's exit statuses), no hang.
# - a sum that never ends, no member failed (a rank that stopped answering): one line naming
#   --comm-timeout, exit 3 (a rank lost or stalled).
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
if ! nm -D "$emu" 2>/dev/null | grep -q ncclAllReduce && ! nm "$emu" 2>/dev/null | grep -q ncclAllReduce; then
  echo "cli_nccl_emu: SKIPPED: the CUDA emulator was built without NCCL (no nccl.h found)"
  exit 77
fi
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
unset DPTRAIN_NCCL CUDA_VISIBLE_DEVICES
small_data "$tmp/data" 96 48 # 4 steps of 24 images an epoch: the emulated convolutions are slow
data=$tmp/data
common=(train --data "$data" --limit 96 --batch-size 24 --lr 0.05 --seed 5)

# says NAME PATTERN: the first line of NAME's output matches PATTERN
says() {
  head -1 "$tmp/$1.out" | grep -qE "$2" && pass || fail "$1: first line '$(head -1 "$tmp/$1.out")' lacks /$2/"
}
# nccl_vs_host NAME DEVICES ARGS...: NCCL and the host path, the same bits; the NCCL run's steps are CUDA
# graphs (the host path's are not: several devices summing through host memory), so this also compares
# graphs with steps as made, unless --sync-batch-norm keeps the steps as made
nccl_vs_host() {
  local name=$1 devices=$2 graph=on
  shift 2
  [[ " $* " == *" --sync-batch-norm "* ]] && graph="off \\(--sync-batch-norm .*\\)"
  train_run "$name-nccl" "$devices" "$@"
  DPTRAIN_NCCL=0 train_run "$name-host" "$devices" "$@"
  says "$name-nccl" ", cuda graph: $graph, allreduce: nccl$"
  says "$name-host" ", allreduce: host \(DPTRAIN_NCCL=0\)$"
  same_run "$name-nccl" "$name-host"
}

nccl_vs_host chunked cuda:0,cuda:1 --model lenet --epochs 2 --optimizer momentum
nccl_vs_host overlap cuda:0,cuda:1 --model lenet --epochs 1 --optimizer adam --overlap on
nccl_vs_host accumulate cuda:0,cuda:1 --model lenet --epochs 1 --optimizer momentum --accumulate 3
nccl_vs_host bn cuda:0,cuda:1 --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum
nccl_vs_host syncbn cuda:0,cuda:1 --model "$(dirname "$0")/models/tiny_resnet.cfg" --epochs 1 --optimizer momentum \
  --sync-batch-norm --overlap on
# overlap and not: the same bits (the same buckets, the same order)
train_run overlap-sgd-nccl cuda:0,cuda:1 --model lenet --epochs 2 --optimizer momentum --overlap on
same_run chunked-nccl overlap-sgd-nccl
DPTRAIN_CUDA_EMU_GPUS=3 nccl_vs_host three cuda:0,cuda:1,cuda:2 --model lenet --epochs 1 --optimizer momentum
# a GPU that faults while NCCL sums (a slow fault: seen only when the host waits, after the sum was
# queued): the other member's NCCL kernel waits for it for ever unless the communicators are aborted
# (the emulator holds that member's synchronising calls back and, after 10 s, aborts with one line
# where a GPU would hang): one line, exit status 4 (a device failed), naming a GPU and the fault (the first failure the
# trainer sees: the aborted sums, or a download; never the NaN a failed download leaves).
for fault in "40" "75 --overlap on"; do
  read -r -a args <<<"$fault"
  DPTRAIN_CUDA_EMU_FAULT=${args[0]} DPTRAIN_CUDA_EMU_FAULT_SEEN=sync "$bin" "${common[@]}" --model lenet \
    --epochs 2 --optimizer momentum --devices cuda:0,cuda:1 "${args[@]:1}" >"$tmp/fault.out" 2>"$tmp/fault.err"
  status=$?
  [[ $status -eq 4 && $(wc -l <"$tmp/fault.err") -eq 1 ]] \
    && grep -qE "^dptrain: cuda:[01]: .*an illegal memory access" "$tmp/fault.err" \
    && pass || fail "a GPU faulting at launch $fault: status $status, '$(cat "$tmp/fault.err")'"
done
# a sum that never ends with no error anywhere (DPTRAIN_CUDA_EMU_NCCL_HANG: as the GPUs see a member in
# another process that stopped answering, which is in no MPI call for the MPI watchdog to see): the
# waits give up after --comm-timeout and abort the communicators: one line naming the timeout, exit 3
# (without the limit the waits poll for ever, as on a GPU)
start=$SECONDS
DPTRAIN_CUDA_EMU_NCCL_HANG=12 timeout 60 "$bin" "${common[@]}" --model lenet --epochs 2 --optimizer momentum \
  --devices cuda:0,cuda:1 --comm-timeout 2 --save "$tmp/hang.st" >"$tmp/hang.out" 2>"$tmp/hang.err"
status=$? took=$((SECONDS - start))
[[ $status -eq 3 && $(wc -l <"$tmp/hang.err") -eq 1 && ! -e "$tmp/hang.st" && $took -lt 60 ]] \
  && grep -qE "^dptrain: cuda:[01]: NCCL: the sums were aborted: cuda:[01] waited [0-9]+ s .*\(--comm-timeout 2\)" \
    "$tmp/hang.err" && pass || fail "a sum that never ends: status $status after $took s, '$(cat "$tmp/hang.err")'"
DPTRAIN_CUDA_EMU_GPUS=3 nccl_vs_host three-overlap cuda:0,cuda:1,cuda:2 --model lenet --epochs 1 --optimizer adam \
  --overlap on

# one GPU: the host path unless DPTRAIN_NCCL=1 (a group of one member)
train_run one-host cuda:0 --model lenet --epochs 1 --optimizer momentum
says one-host ", allreduce: host \(one GPU; DPTRAIN_NCCL=1 uses NCCL for it\)$"
DPTRAIN_NCCL=1 train_run one-nccl cuda:0 --model lenet --epochs 1 --optimizer momentum
says one-nccl ", allreduce: nccl$"
same_run one-host one-nccl
# devices sharing a GPU, and the parameter server: the host path
train_run shared cuda:0,cuda:0,cuda:1 --model lenet --epochs 1 --optimizer momentum
says shared ", allreduce: host \(devices sharing a GPU\)$"
train_run ps cuda:0,cuda:1 --model lenet --epochs 1 --optimizer momentum --sync ps
says ps ", allreduce: host \(--sync ps\)$"
# CPU devices: nothing said
train_run cpu cpu:0,cpu:1 --model lenet --epochs 1 --optimizer momentum
head -1 "$tmp/cpu.out" | grep -q "allreduce" && fail "cpu devices: '$(head -1 "$tmp/cpu.out")'" || pass
# a bad switch: one line, exit 1, nothing written
DPTRAIN_NCCL=2 "$bin" "${common[@]}" --model lenet --epochs 1 --devices cuda:0,cuda:1 --save "$tmp/bad.st" \
  >"$tmp/bad.out" 2>"$tmp/bad.err"
status=$?
[[ $status -eq 1 && $(wc -l <"$tmp/bad.err") -eq 1 ]] && grep -q "DPTRAIN_NCCL: expected 0 .* or 1 .*, found '2'" \
  "$tmp/bad.err" && [[ ! -e "$tmp/bad.st" ]] && pass || fail "DPTRAIN_NCCL=2: status $status, '$(cat "$tmp/bad.err")'"

# MPI ranks: each its own GPUs (GPUS_PER_RANK of them: rank r sees r*k .. r*k+k-1), or all on GPU 0
cat >"$tmp/gpus.sh" <<'EOF'
#!/usr/bin/env bash
k=${GPUS_PER_RANK:-1} r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}
if [[ ${SHARE_GPU:-0} == 1 ]]; then
  export CUDA_VISIBLE_DEVICES=0
else
  list=""
  for ((i = 0; i < k; i++)); do list+="${list:+,}$((r * k + i))"; done
  export CUDA_VISIBLE_DEVICES=$list
fi
exec "$@"
EOF
# ranks NAME GPUS_PER_RANK SHARE ENV... -- ARGS...: 2 ranks, devices cuda:0..k-1 each
ranks() {
  local name=$1 k=$2 share=$3 envs=() devices=cuda:0
  shift 3
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  ((k == 2)) && devices=cuda:0,cuda:1
  env "${envs[@]}" GPUS_PER_RANK="$k" SHARE_GPU="$share" DPTRAIN_CUDA_EMU_GPUS=4 \
    mpirun --allow-run-as-root --oversubscribe -np 2 -x DPTRAIN_CUDA_MODULE -x DPTRAIN_CUDA_EMU_GPUS -x GPUS_PER_RANK \
    -x SHARE_GPU -x DPTRAIN_NCCL bash "$tmp/gpus.sh" "$bin" "${common[@]}" --devices "$devices" \
    --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1 \
    && pass || fail "$name (2 ranks): $(tail -3 "$tmp/$name.out")"
}
if command -v mpirun >/dev/null; then
  lenet=(--model lenet --epochs 1 --optimizer momentum)
  ranks ranks-nccl 1 0 DPTRAIN_NCCL= -- "${lenet[@]}"
  says ranks-nccl "^training .* on 2 ranks x \[cuda:0\], cuda graph: on, allreduce: nccl$"
  # each rank's steps ran as graphs, its sums captured (the rank that prints: 4 steps, 2 warm-up)
  grep -qE "^cuda graph: 2 steps launched as graphs \(1 captures\), 2 steps as made" "$tmp/ranks-nccl.out" && pass \
    || fail "ranks-nccl: $(grep '^cuda graph' "$tmp/ranks-nccl.out")"
  ranks ranks-nccl-off 1 0 DPTRAIN_NCCL= -- "${lenet[@]}" --cuda-graph off
  same_run ranks-nccl ranks-nccl-off
  ranks ranks-host 1 0 DPTRAIN_NCCL=0 -- "${lenet[@]}"
  says ranks-host "cuda graph: off \(several MPI ranks summing through MPI \(a graph needs NCCL\)\), allreduce: host \(DPTRAIN_NCCL=0\)$"
  same_run ranks-nccl ranks-host
  # across ranks, a sum that never ends: every rank's waits give up after --comm-timeout, the job ends
  # (the first rank to fail ends the job: either may be the one that says so)
  DPTRAIN_CUDA_EMU_NCCL_HANG=12 GPUS_PER_RANK=1 SHARE_GPU=0 DPTRAIN_CUDA_EMU_GPUS=4 timeout 60 \
    mpirun --allow-run-as-root --oversubscribe -np 2 -x DPTRAIN_CUDA_MODULE -x DPTRAIN_CUDA_EMU_GPUS -x GPUS_PER_RANK \
    -x SHARE_GPU -x DPTRAIN_CUDA_EMU_NCCL_HANG bash "$tmp/gpus.sh" "$bin" "${common[@]}" "${lenet[@]}" \
    --devices cuda:0 --comm-timeout 2 >"$tmp/ranks-hang.out" 2>&1
  status=$?
  [[ $status -ne 0 && $status -ne 124 ]] && grep -qE "^dptrain: rank [01] of 2: cuda:0: NCCL: the sums were aborted: .*--comm-timeout 2" \
    "$tmp/ranks-hang.out" && pass || fail "ranks, a sum that never ends: status $status, $(grep dptrain "$tmp/ranks-hang.out" | head -2)"
  train_run process cuda:0,cuda:1 "${lenet[@]}"
  same_run ranks-nccl process
  ranks ranks-shared 1 1 DPTRAIN_NCCL= -- "${lenet[@]}"
  says ranks-shared "allreduce: host \(ranks sharing a GPU\)$"
  same_run ranks-nccl ranks-shared
  # 2 ranks x 2 GPUs with overlap: the buckets go in one order on both ranks
  adam=(--model lenet --epochs 2 --optimizer adam --overlap on)
  ranks four-nccl 2 0 DPTRAIN_NCCL= -- "${adam[@]}"
  says four-nccl "on 2 ranks x \[cuda:0, cuda:1\], cuda graph: on, allreduce: nccl$"
  # NCCL sums the 4 members in member order, as one process of 4 devices does
  DPTRAIN_NCCL=0 DPTRAIN_CUDA_EMU_GPUS=4 train_run four-process cuda:0,cuda:1,cuda:2,cuda:3 "${adam[@]}"
  same_run four-nccl four-process
  # the host path across ranks sums hierarchically, (g0 + g1) + (g2 + g3): close, not the same bits
  ranks four-host 2 0 DPTRAIN_NCCL=0 -- "${adam[@]}"
  awk -v a="$(last_loss "$tmp/four-nccl.jsonl")" -v b="$(last_loss "$tmp/four-host.jsonl")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-4 * a) }' && pass \
    || fail "four-nccl vs four-host: train_loss $(last_loss "$tmp/four-nccl.jsonl") vs $(last_loss "$tmp/four-host.jsonl")"
  grep -q "emulated NCCL" "$tmp/four-nccl.out" && fail "four-nccl: $(grep "emulated NCCL" "$tmp/four-nccl.out")" || pass
else
  fail "mpirun not found (openmpi-bin)"
fi
testing_finish cli_nccl_emu
