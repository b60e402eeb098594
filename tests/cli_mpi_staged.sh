#!/usr/bin/env bash
# cli_mpi_staged.sh - MPI ranks with devices whose memory MPI may not read
# (named cli_mpi*: scripts/sanitize.sh runs those with leak detection off, as
# Open MPI leaks at exit): 2 ranks on the staged CPU backend (backend_cpu_staged.c, host_memory = 0:
# every sum across ranks goes through the trainer's host staging buffer) give
# 2 ranks on CPU devices' bits: the checkpoint's tensors byte for byte and
# the metrics' train_loss to the last digit, for
# - the bucketed allreduce with overlap (the default across ranks) and
#   without, 2 ranks x 2 devices, Adam (its saved state included);
# - a network with batch norm (running statistics broadcast from rank 0
#   after every step, staged as well);
# - the parameter server (--sync ps: reduce to rank 0 and broadcast, staged);
# - --augment crop:4,flip (filled on the host and uploaded).
source "$(dirname "$0")/testing.sh"
# the first 600 training and 1000 test images of Fashion-MNIST (the evaluation
# after every epoch is most of a short run's time)
small_data "$tmp/data" 600 1000
data=$tmp/data
command -v mpirun >/dev/null || { echo "cli_mpi_staged: mpirun not found (openmpi-bin)"; echo "cli_mpi_staged: 0 passed, 1 failed"; exit 1; }
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
loss() { json_field "$(tail -1 "$1")" train_loss; }
common=(train --data "$data" --limit 600 --batch-size 100 --lr 0.05 --seed 9 --epochs 1 --quiet)

# same NAME KIND:LIST-SUFFIX ARGS...: 2 ranks on staged devices = 2 ranks on cpu devices
same() {
  local name=$1 ids=$2
  shift 2
  for kind in cpu staged; do
    local devices
    devices=$(sed -E "s/([0-9]+)/$kind:\1/g" <<<"$ids")
    "${mpi[@]}" "$bin" "${common[@]}" --devices "$devices" --save "$tmp/$name-$kind.st" \
      --metrics "$tmp/$name-$kind.jsonl" "$@" >"$tmp/$name-$kind.out" 2>&1 && pass \
      || fail "$name on $devices: $(tail -3 "$tmp/$name-$kind.out")"
  done
  same_tensors "$tmp/$name-cpu.st" "$tmp/$name-staged.st" && pass || fail "$name: checkpoint tensors differ"
  [[ -n "$(loss "$tmp/$name-cpu.jsonl")" && "$(loss "$tmp/$name-cpu.jsonl")" == "$(loss "$tmp/$name-staged.jsonl")" ]] \
    && pass || fail "$name: train_loss cpu $(loss "$tmp/$name-cpu.jsonl") staged $(loss "$tmp/$name-staged.jsonl")"
}

same overlap 0,1 --model lenet --optimizer adam
same no-overlap 0,1 --model lenet --optimizer adam --overlap off
same batch-norm 0 --model "$(dirname "$0")/models/tiny_resnet.cfg" --optimizer momentum
same ps 0 --model lenet --optimizer momentum --sync ps
same augment 0 --model lenet --optimizer sgd --augment crop:4,flip
# the metrics say 2 ranks (the runs did go across processes)
grep -q '"ranks": 2' "$tmp/overlap-staged.jsonl" && pass || fail "not 2 ranks: $(cat "$tmp/overlap-staged.jsonl")"
testing_finish cli_mpi_staged
