#!/usr/bin/env bash
# fault_soak.sh - a LeNet run on 2 ranks (dptrain launch, 1 CPU device each)
# with a random rank killed (SIGKILL, DPTRAIN_FAULT) at K random steps, one
# per attempt, under --restarts K, against the same run without faults in
# the same invocation. Prints the faults survived, the wall times and their
# difference, the steps recomputed (each kill's steps since the checkpoint
# it resumed from: --save-every-steps), their cost at the fault-free run's
# seconds per step, what is left per restart, and whether the final
# checkpoint's bytes equal the uninterrupted run's. The target: K of K
# survived, the same bytes, and the overhead at most the lost steps plus
# 3 s per restart.
#
# usage: bench/fault_soak.sh [path/to/dptrain] [K] [images] [epochs] [save-every-steps] [seed]
#   defaults: build/dptrain, K 5, 6000 training images, 2 epochs, 10, a random seed
set -eu # (no pipefail: head ends the gzip pipes early)
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
kills=${2:-5}
images=${3:-6000}
epochs=${4:-2}
every=${5:-10}
seed=${6:-$RANDOM}
batch=64
source "$here/bench_args.sh"
need_program fault_soak "$bin" "build it: make build"
need_count fault_soak K "$kills" 1
need_count fault_soak images "$images" $batch
need_count fault_soak epochs "$epochs" 1
need_count fault_soak save-every-steps "$every" 1
need_count fault_soak seed "$seed" 0
steps_per_epoch=$(((images + batch - 1) / batch))
total=$((steps_per_epoch * epochs))
# each kill in its own span of the steps after the first and before the last
(( total - 2 >= kills )) ||
  { echo "fault_soak: $kills kills need $((kills + 2)) steps or more, found $total ($images images, $epochs epochs of $batch)" >&2; exit 2; }
data_src=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "dptrain $("$bin" version | sed -n 's/^dptrain //p'), cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
RANDOM=$seed

# the first IMAGES training images and 500 test images as plain IDX files
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
mkdir -p "$tmp/data"
for split in train t10k; do
  [[ $split == train ]] && n=$images || n=500
  { printf '\x00\x00\x08\x03'; be32 "$n"; be32 28; be32 28
    gzip -dc "$data_src/$split-images-idx3-ubyte.gz" | tail -c +17 | head -c $((n * 784)); } >"$tmp/data/$split-images-idx3-ubyte"
  { printf '\x00\x00\x08\x01'; be32 "$n"
    gzip -dc "$data_src/$split-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$n"; } >"$tmp/data/$split-labels-idx1-ubyte"
done
job=(train --model lenet --data "$tmp/data" --epochs "$epochs" --batch-size $batch --lr 0.1 --seed 1 --devices 1
     --quiet --save-every-steps "$every")
now() { date +%s.%N; }
tensors() { local h; h=$(od -An -t u8 -N 8 "$1" | tr -d ' '); tail -c +$((9 + h)) "$1"; }

# K kill steps, increasing (each attempt resumes before its own), one per attempt, random ranks
plan="" recomputed=0 steps=()
for i in $(seq 0 $((kills - 1))); do
  lo=$(( (total - 2) * i / kills + 1 )) hi=$(( (total - 2) * (i + 1) / kills ))
  step=$((lo + RANDOM % (hi - lo + 1))) rank=$((RANDOM % 2))
  plan+="${plan:+,}kill:$rank:$step:$i"
  steps+=("$step")
  recomputed=$((recomputed + step % every)) # the checkpoint it resumes from is at a multiple of $every
done
echo "LeNet, 2 ranks x 1 CPU device, $images images, batch $batch, $epochs epochs ($total steps), checkpoint every $every steps; seed $seed"
echo "faults: $plan"

start=$(now)
"$bin" launch --np 2 -- "${job[@]}" --save "$tmp/ref.st" >"$tmp/ref.out" 2>&1
clean=$(awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.2f", a - b }')
start=$(now)
status=0
DPTRAIN_FAULT=$plan "$bin" launch --np 2 --restarts "$kills" -- "${job[@]}" --save "$tmp/soak.st" >"$tmp/soak.out" 2>&1 \
  || status=$?
faulty=$(awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.2f", a - b }')
survived=$(grep -c "^dptrain launch: restart [0-9]* of $kills," "$tmp/soak.out" || true)
[[ $status -eq 0 ]] || { survived=$((survived)); echo "the job failed (exit $status):"; tail -5 "$tmp/soak.out"; }
same=no
cmp -s <(tensors "$tmp/soak.st") <(tensors "$tmp/ref.st") && same=yes
per_step=$(awk -v t="$clean" -v n="$total" 'BEGIN { printf "%.4f", t / n }') # an upper bound: start-up included
awk -v k="$kills" -v s="$survived" -v c="$clean" -v f="$faulty" -v r="$recomputed" -v p="$per_step" -v same="$same" 'BEGIN {
  over = f - c; lost = r * p; left = (over - lost) / k
  printf "faults survived: %d of %d; final checkpoint bytes equal to the uninterrupted run'"'"'s: %s\n", s, k, same
  printf "wall: %.2f s without faults, %.2f s with %d (x%.2f): %.2f s more\n", c, f, k, f / c, over
  printf "steps recomputed: %d (%.2f s at %.4f s per step of the fault-free run); the rest: %.2f s per restart\n", r, lost, p, left
  printf "target (overhead <= lost steps + 3 s per restart): %s\n", (over <= lost + 3 * k && s == k && same == "yes") ? "met" : "NOT met"
}'
grep "^dptrain launch:   [0-9]*\. " "$tmp/soak.out" | sed 's/^dptrain launch:  /  /'
