#!/usr/bin/env bash
# cli_mpi.sh - `dptrain train` under mpirun on localhost (Open MPI; as root,
# --allow-run-as-root, and --oversubscribe for more ranks than cores).
# - 2 ranks x 1 device give the same training curve as 1 process x 2 devices
#   (the same shards, summed in the same order: equal to the last digit);
# - 2 ranks x 2 devices with uneven shards and a short last batch;
# - only rank 0 writes the metrics; a run across ranks learns;
# - ranks started with different options stop with a message naming the rank.
# Every run also ends with dptrain's own check that all replicas on all
# ranks hold the same parameters (it fails the run otherwise).
set -u
bin=${DPTRAIN_BIN:?DPTRAIN_BIN must point at the dptrain binary}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
command -v mpirun >/dev/null || { echo "cli_mpi: mpirun not found (openmpi-bin)"; echo "cli_mpi: 0 passed, 1 failed"; exit 1; }
mpi=(mpirun --allow-run-as-root --oversubscribe)
field() { sed -E "s/.*\"$1\": *([^,}]*).*/\1/" <<<"$2"; }

common=(train --data "$data" --limit 3000 --epochs 2 --lr 0.5 --batch-size 257 --seed 3)
"${mpi[@]}" -np 2 "$bin" "${common[@]}" --devices 1 --metrics "$tmp/ranks.jsonl" >"$tmp/ranks.out" 2>&1 \
  && pass || fail "2 ranks x 1 device: $(tail -3 "$tmp/ranks.out")"
"$bin" "${common[@]}" --devices 2 --metrics "$tmp/local.jsonl" --quiet >/dev/null 2>&1 && pass || fail "2 devices"
[[ $(wc -l <"$tmp/ranks.jsonl") -eq 2 ]] && pass || fail "metrics lines: $(wc -l <"$tmp/ranks.jsonl") (only rank 0 writes)"
for epoch in 1 2; do
  a=$(sed -n "${epoch}p" "$tmp/ranks.jsonl") b=$(sed -n "${epoch}p" "$tmp/local.jsonl")
  for key in train_loss train_acc test_acc; do
    [[ -n "$(field $key "$a")" && "$(field $key "$a")" == "$(field $key "$b")" ]] && pass \
      || fail "epoch $epoch $key: 2 ranks $(field $key "$a") vs 2 devices $(field $key "$b")"
  done
done
grep -q '"ranks": 2' "$tmp/ranks.jsonl" && grep -q '"num_devices": 2' "$tmp/ranks.jsonl" && pass \
  || fail "metrics ranks/num_devices: $(head -1 "$tmp/ranks.jsonl")"
grep -q "on 2 ranks x \[cpu:0\]" "$tmp/ranks.out" && pass || fail "epoch line: $(cat "$tmp/ranks.out")"
[[ $(grep -c "^test acc:" "$tmp/ranks.out") -eq 1 ]] && pass || fail "summary printed by more than rank 0"

# 2 ranks x 2 devices (oversubscribed), batch 10 over 4 devices, last batch of 5.
"${mpi[@]}" -np 2 "$bin" train --data "$data" --limit 95 --epochs 1 --batch-size 10 --devices 2 \
  >"$tmp/four.out" 2>&1 && grep -q "on 2 ranks x \[cpu:0, cpu:1\]" "$tmp/four.out" && pass \
  || fail "2 ranks x 2 devices: $(tail -3 "$tmp/four.out")"

# Learning across ranks (lenet-paddle, as in cli_train.sh: 0.57 there).
"${mpi[@]}" -np 2 "$bin" train --model lenet-paddle --data "$data" --limit 10000 --epochs 1 --lr 0.1 \
  --batch-size 64 --seed 1 --devices 1 --metrics "$tmp/learn.jsonl" >/dev/null 2>&1
acc=$(field test_acc "$(cat "$tmp/learn.jsonl" 2>/dev/null)")
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.40) }' && pass || fail "2 ranks: test accuracy ${acc:-none} not above 0.40"

# Ranks with different options: stopped at start-up, the rank named, non-zero exit.
timeout 60 "${mpi[@]}" -np 1 "$bin" train --data "$data" --limit 1000 --epochs 1 --batch-size 100 --devices 1 : \
  -np 1 "$bin" train --data "$data" --limit 1000 --epochs 1 --batch-size 50 --devices 1 >"$tmp/mis.out" 2>&1
status=$?
[[ $status -ne 0 && $status -ne 124 ]] && grep -q "rank 1's options differ from rank 0's" "$tmp/mis.out" && pass \
  || fail "mismatched options: exit $status, $(head -5 "$tmp/mis.out")"

echo "cli_mpi: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
