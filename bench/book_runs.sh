#!/usr/bin/env bash
# book_runs.sh - the three runs of d2l 12.5, 10 epochs each, as a table:
#   train(num_gpus=1, batch_size=256, lr=0.2)
#   train(num_gpus=2, batch_size=256, lr=0.2)
#   train(num_gpus=2, batch_size=512, lr=0.3)   (the exercise: scale the batch with k)
# usage: bench/book_runs.sh [path/to/dptrain] [seed]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/dptrain}
seed=${2:-0}
source "$here/bench_args.sh"
need_program book_runs "$bin" "build it: make build"
need_count book_runs seed "$seed" 0
source "$here/isa_info.sh" # prints the ISA dptrain runs (DPTRAIN_ISA caps it) and the CPU
isa_info "$bin" | grep '^dptrain'
printf '| devices | batch | lr | test acc (epoch 10) | sec/epoch |\n| --- | --- | --- | --- | --- |\n'
for run in "1 256 0.2" "2 256 0.2" "2 512 0.3"; do
  set -- $run
  line=$("$bin" train --model lenet --devices "$1" --batch-size "$2" --lr "$3" --epochs 10 --seed "$seed" --quiet)
  acc=$(sed -E 's/^test acc: ([0-9.]+), ([0-9.]+) sec\/epoch.*/\1/' <<<"$line")
  sec=$(sed -E 's/^test acc: ([0-9.]+), ([0-9.]+) sec\/epoch.*/\2/' <<<"$line")
  printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$acc" "$sec"
done
