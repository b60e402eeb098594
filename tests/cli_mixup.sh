#!/usr/bin/env bash
# cli_mixup.sh - `dptrain train --mixup-alpha A --cutmix-alpha A
# --random-erase P` end to end on a small cut of Fashion-MNIST (1,203
# training and 300 test images, lenet-paddle, batch 51: shards of 26 and
# 25, a short last batch; test_mix.c checks the arithmetic against an
# oracle of torchvision's):
# - mixing and erasing each train other tensors than without them, and
#   still train (the loss goes down); the first line and the checkpoint
#   name them;
# - the whole batch is mixed, each example with the one before it: 2 ranks
#   x 1 device (each rank's loader also reads the partner before its
#   shard, the first rank the batch's last) give 1 process x 2 devices'
#   tensors bit for bit, with --accumulate 2 too; on emulated GPUs (CUDA
#   builds) it runs on 1 and 2, changes the tensors, and the first line
#   says why no step graph;
# - --resume takes the alphas (named on the resume's line) and ends in the
#   straight run's bytes; another alpha on resume is refused; --init does
#   not take them; the same for --random-erase;
# - bad values are refused in one line, before anything is written.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1203 300
base=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 51 --seed 2 --lr 0.1)
mix=(--mixup-alpha 0.2 --cutmix-alpha 1.0 --random-erase 0.25)
run() { # NAME ARGS...: a run saving $tmp/NAME.st, $tmp/NAME.jsonl, its output in $tmp/NAME.out
  local name=$1
  shift
  "$bin" "${base[@]}" "$@" --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 \
    && pass || fail "$name: $(tail -3 "$tmp/$name.out")"
}
key() { head -c 20000 "$1" | grep -ao "\"$2\": *\"[^\"]*\"" | sed -E 's/.*"([^"]*)"$/\1/'; }

run plain --devices 2
run mixed --devices 2 "${mix[@]}"
run mixup --devices 2 --mixup-alpha 0.2
run mixboth --devices 2 --mixup-alpha 0.2 --cutmix-alpha 1.0
run erased --devices 2 --random-erase 0.25
same_tensors "$tmp/plain.st" "$tmp/mixup.st" && fail "mixing changed nothing" || pass
same_tensors "$tmp/plain.st" "$tmp/erased.st" && fail "erasing changed nothing" || pass
same_tensors "$tmp/mixup.st" "$tmp/mixboth.st" && fail "--cutmix-alpha changed nothing beside --mixup-alpha" || pass
same_tensors "$tmp/mixboth.st" "$tmp/mixed.st" && fail "--random-erase changed nothing beside mixing" || pass
grep -q "mixup 0.2, cutmix 1, random erasing 0.25," "$tmp/mixed.out" && pass \
  || fail "first line: $(head -1 "$tmp/mixed.out")"
grep -q "mixup\|cutmix\|erasing" "$tmp/plain.out" && fail "a run without mixing names it" || pass
[[ $(key "$tmp/mixed.st" mixup_alpha) == 0.2 && $(key "$tmp/mixed.st" cutmix_alpha) == 1 &&
   $(key "$tmp/mixed.st" random_erase) == 0.25 && -z $(key "$tmp/mixup.st" cutmix_alpha) &&
   -z $(key "$tmp/plain.st" mixup_alpha) && -z $(key "$tmp/mixup.st" random_erase) ]] && pass \
  || fail "checkpoint keys: '$(key "$tmp/mixed.st" mixup_alpha)' '$(key "$tmp/mixed.st" cutmix_alpha)' '$(key "$tmp/mixed.st" random_erase)'"
first=$(json_field "$(sed -n 1p "$tmp/mixed.jsonl")" train_loss)
last=$(json_field "$(sed -n 2p "$tmp/mixed.jsonl")" train_loss)
echo "mixed and erased: loss epoch 1 $first, epoch 2 $last; test acc $(json_field "$(tail -1 "$tmp/mixed.jsonl")" test_acc) (plain $(json_field "$(tail -1 "$tmp/plain.jsonl")" test_acc), erased only $(json_field "$(tail -1 "$tmp/erased.jsonl")" test_acc))"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b < 0.95 * a) }' && pass || fail "mixed: the loss did not go down"

# the whole batch: 2 ranks x 1 device = 1 process x 2 devices, also accumulating
run accumulated --devices 2 "${mix[@]}" --accumulate 2
if command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
  for what in mixed accumulated; do
    extra=()
    [[ $what == accumulated ]] && extra=(--accumulate 2)
    "${mpi[@]}" "$bin" "${base[@]}" --devices 1 "${mix[@]}" "${extra[@]}" --quiet --save "$tmp/ranks-$what.st" \
      >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
    same_tensors "$tmp/$what.st" "$tmp/ranks-$what.st" && pass \
      || fail "2 ranks x 1 device differ from 1 process x 2 devices ($what)"
  done
else
  fail "mpirun not found (openmpi-bin)"
fi

# resume: taken, and the straight run's bytes; another alpha refused
"$bin" "${base[@]}" --devices 2 "${mix[@]}" --stop-after 1 --save "$tmp/half.st" >/dev/null 2>&1 \
  && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 2 --save "$tmp/resumed.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/resumed.st" "$tmp/mixed.st" && pass || fail "stopped + resumed differs from the straight run"
grep -q -- "--mixup-alpha 0.2" "$tmp/resumed.out" && grep -q -- "--cutmix-alpha 1" "$tmp/resumed.out" &&
  grep -q -- "--random-erase 0.25" "$tmp/resumed.out" && pass || fail "resume line: $(head -2 "$tmp/resumed.out")"
"$bin" train --resume "$tmp/half.st" --devices 2 --mixup-alpha 0.4 --save "$tmp/other.st" >"$tmp/other.out" 2>&1
[[ $? -ne 0 && ! -e "$tmp/other.st" ]] && grep -q "saved with --mixup-alpha 0.2 --cutmix-alpha 1" "$tmp/other.out" \
  && pass || fail "resume with another alpha: $(tail -2 "$tmp/other.out")"
"$bin" train --resume "$tmp/half.st" --devices 2 --random-erase 0.5 --save "$tmp/other.st" >"$tmp/other.out" 2>&1
[[ $? -ne 0 && ! -e "$tmp/other.st" ]] && grep -q "saved with --random-erase 0.25" "$tmp/other.out" \
  && pass || fail "resume with another erasing: $(tail -2 "$tmp/other.out")"
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 51 --init "$tmp/mixed.st" \
  --save "$tmp/init.st" >"$tmp/init.out" 2>&1 && pass || fail "--init: $(tail -3 "$tmp/init.out")"
[[ -z $(key "$tmp/init.st" mixup_alpha) && -z $(key "$tmp/init.st" random_erase) ]] && ! grep -q "mixup\|erasing" "$tmp/init.out" \
  && pass || fail "--init took the mixing or erasing"

# 2 emulated GPUs (a build with CUDA): the host path's bits, and no step graph
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  small_data "$tmp/tiny" 97 48
  unmixed=(train --model lenet-paddle --data "$tmp/tiny" --epochs 1 --batch-size 25 --seed 2 --lr 0.1)
  tiny=("${unmixed[@]}" "${mix[@]}")
  DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 DPTRAIN_NCCL=0 "$bin" "${tiny[@]}" --devices cuda:0,cuda:1 \
    --save "$tmp/tiny-gpu.st" >"$tmp/gpu.out" 2>&1 && pass || fail "2 GPUs: $(tail -3 "$tmp/gpu.out")"
  grep -q "cutmix-alpha (each step mixes with its own weight)" "$tmp/gpu.out" && pass \
    || fail "2 GPUs, why no step graph: $(head -1 "$tmp/gpu.out")"
  DPTRAIN_CUDA_MODULE=$emu "$bin" "${tiny[@]}" --devices cuda:0 --save "$tmp/tiny-gpu1.st" >"$tmp/gpu1.out" 2>&1 \
    && grep -q "cutmix-alpha (each step mixes" "$tmp/gpu1.out" && pass || fail "1 GPU: $(head -3 "$tmp/gpu1.out")"
  # Mixup's blend (the ema_update kernel) and the two loss terms ran: the GPUs trained other tensors than unmixed
  DPTRAIN_CUDA_MODULE=$emu "$bin" "${unmixed[@]}" --devices cuda:0 --save "$tmp/tiny-plain.st" >/dev/null 2>&1 \
    && pass || fail "1 GPU without mixing"
  same_tensors "$tmp/tiny-plain.st" "$tmp/tiny-gpu1.st" && fail "1 emulated GPU: mixing changed nothing" || pass
else
  echo "cli_mixup: no CUDA emulator in this build: the GPU part is skipped"
fi

# bad values: one line, nothing written
for opt in --mixup-alpha --cutmix-alpha --random-erase; do
  for bad in -1 nan inf 1001 abc; do
    rm -f "$tmp/never.st" "$tmp/never.jsonl"
    "$bin" "${base[@]}" "$opt" "$bad" --save "$tmp/never.st" --metrics "$tmp/never.jsonl" >"$tmp/bad.out" 2>"$tmp/bad.err"
    [[ $? -ne 0 && $(wc -l <"$tmp/bad.err") -eq 1 && ! -s "$tmp/bad.out" && ! -e "$tmp/never.st" && ! -e "$tmp/never.jsonl" ]] \
      && grep -q -- "$opt" "$tmp/bad.err" && pass || fail "$opt $bad: $(cat "$tmp/bad.err")"
  done
done
testing_finish cli_mixup
