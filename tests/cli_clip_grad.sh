#!/usr/bin/env bash
# cli_clip_grad.sh - `dptrain train --clip-grad-norm X` end to end on a small
# cut of Fashion-MNIST (1,200 training and 300 test images, lenet-paddle,
# batch 50; test_clip.c checks the arithmetic against torch and the update
# bit for bit):
# - a bound the gradients never reach (1e6) trains the unclipped run's
#   tensors bit for bit; a tight one (0.25) trains others, and still
#   trains (the loss goes down); the first line and the checkpoint name it;
#   the metrics (after lr) and the epoch lines give the norms' mean and
#   largest and the fraction of steps clipped, only with clipping;
# - 2 devices: chunked, --overlap on, --allreduce naive and --sync ps give
#   the same tensors; under mpirun 2 ranks x 1 device (overlap on and off)
#   the same as 1 process x 2 devices: the norm is the whole sum's;
# - --resume takes it (named on the resume's line) and ends in the straight
#   run's bytes; another value is taken with a warning; --init does not
#   take it;
# - 2 emulated GPUs (CUDA builds): NCCL = the host path, overlap on = off,
#   and the first line says why no step graph;
# - bad values are refused in one line, before anything is written.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300
base=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 50 --seed 2 --lr 0.1)
run() { # NAME ARGS...: a run saving $tmp/NAME.st, $tmp/NAME.jsonl, its output in $tmp/NAME.out
  local name=$1
  shift
  "$bin" "${base[@]}" "$@" --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 \
    && pass || fail "$name: $(tail -3 "$tmp/$name.out")"
}
key() { head -c 20000 "$1" | grep -ao '"clip_grad_norm": *"[^"]*"' | sed -E 's/.*"([^"]*)"$/\1/'; }

run plain --devices 1
run loose --devices 1 --clip-grad-norm 1e6
run tight --devices 1 --clip-grad-norm 0.25
same_tensors "$tmp/plain.st" "$tmp/loose.st" && pass || fail "--clip-grad-norm 1e6 changed the tensors"
same_tensors "$tmp/plain.st" "$tmp/tight.st" && fail "--clip-grad-norm 0.25 clipped nothing" || pass
grep -q "gradient norm clipped at 0.25" "$tmp/tight.out" && pass || fail "first line: $(head -1 "$tmp/tight.out")"
grep -q "clipped" "$tmp/plain.out" && fail "a run without the option names clipping" || pass
[[ $(key "$tmp/tight.st") == 0.25 && -z $(key "$tmp/plain.st") ]] && pass \
  || fail "checkpoint key clip_grad_norm: '$(key "$tmp/tight.st")', without: '$(key "$tmp/plain.st")'"
first=$(json_field "$(sed -n 1p "$tmp/tight.jsonl")" train_loss)
last=$(json_field "$(sed -n 2p "$tmp/tight.jsonl")" train_loss)
echo "--clip-grad-norm 0.25: loss epoch 1 $first, epoch 2 $last; test acc $(json_field "$(tail -1 "$tmp/tight.jsonl")" test_acc) (unclipped $(json_field "$(tail -1 "$tmp/plain.jsonl")" test_acc))"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b < 0.9 * a) }' && pass || fail "clipped: the loss did not go down"
# the norms: in the metrics after lr and on the epoch lines, only with clipping
t2=$(sed -n 2p "$tmp/tight.jsonl") l2=$(sed -n 2p "$tmp/loose.jsonl")
echo "epoch 2 norms: 0.25 mean $(json_field "$t2" grad_norm_mean) max $(json_field "$t2" grad_norm_max) clipped $(json_field "$t2" clipped_fraction); 1e6 clipped $(json_field "$l2" clipped_fraction)"
awk -v m="$(json_field "$t2" grad_norm_mean)" -v x="$(json_field "$t2" grad_norm_max)" -v f="$(json_field "$t2" clipped_fraction)" \
  -v g="$(json_field "$l2" clipped_fraction)" 'BEGIN { exit !(m > 0.25 && x >= m && f > 0 && f <= 1 && g == 0) }' \
  && pass || fail "norms in the metrics: $t2 / $l2"
grep -q "grad_norm" "$tmp/plain.jsonl" && fail "a run without clipping has norms in its metrics" || pass
[[ $(grep -c "^epoch .*test acc [0-9.]*, grad norm [0-9.e+-]* (max [0-9.e+-]*, [0-9]*% of steps clipped)" "$tmp/tight.out") == 2 ]] \
  && pass || fail "epoch lines: $(grep '^epoch' "$tmp/tight.out")"

# the strategies: the same norm of the same sum, the same update
run chunked --devices 2 --clip-grad-norm 0.25
for mode in "overlap --overlap on" "naive --allreduce naive" "ps --sync ps"; do
  name=${mode%% *}
  # shellcheck disable=SC2086
  run "$name" --devices 2 --clip-grad-norm 0.25 ${mode#* }
  same_tensors "$tmp/chunked.st" "$tmp/$name.st" && pass || fail "2 devices, ${mode#* }: tensors differ from chunked"
done
if command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
  for overlap in on off; do
    "${mpi[@]}" "$bin" "${base[@]}" --devices 1 --clip-grad-norm 0.25 --overlap $overlap --quiet \
      --save "$tmp/ranks-$overlap.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
    same_tensors "$tmp/chunked.st" "$tmp/ranks-$overlap.st" && pass \
      || fail "2 ranks x 1 device (--overlap $overlap) differ from 1 process x 2 devices"
  done
else
  fail "mpirun not found (openmpi-bin)"
fi

# resume: taken, and the straight run's bytes
"$bin" "${base[@]}" --devices 1 --clip-grad-norm 0.25 --stop-after 1 --save "$tmp/half.st" >/dev/null 2>&1 \
  && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 1 --save "$tmp/resumed.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/resumed.st" "$tmp/tight.st" && pass || fail "stopped + resumed differs from the straight run"
grep -q -- "--clip-grad-norm 0.25" "$tmp/resumed.out" && pass || fail "resume line: $(head -2 "$tmp/resumed.out")"
"$bin" train --resume "$tmp/half.st" --devices 1 --clip-grad-norm 0.5 --save "$tmp/other.st" >"$tmp/other.out" 2>&1 \
  && pass || fail "resume with another bound: $(tail -3 "$tmp/other.out")"
grep -q "saved with --clip-grad-norm 0.25, continuing with 0.5" "$tmp/other.out" && pass \
  || fail "another bound on resume: no warning ($(grep -i clip "$tmp/other.out"))"
[[ $(key "$tmp/other.st") == 0.5 ]] && pass || fail "resumed with 0.5: the checkpoint says '$(key "$tmp/other.st")'"
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --init "$tmp/tight.st" \
  --save "$tmp/init.st" >"$tmp/init.out" 2>&1 && pass || fail "--init: $(tail -3 "$tmp/init.out")"
[[ -z $(key "$tmp/init.st") ]] && ! grep -q clipped "$tmp/init.out" && pass || fail "--init took the clipping"

# 2 emulated GPUs (a build with CUDA): NCCL's in-place sums (every replica scaled by replica 0's
# coefficient) = the host path's bits, with and without overlap; no step graph (the norm is read on the host)
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]] && { nm -D "$emu" 2>/dev/null | grep -q ncclAllReduce || nm "$emu" 2>/dev/null | grep -q ncclAllReduce; }; then
  small_data "$tmp/tiny" 96 48
  gpus=(train --model lenet-paddle --data "$tmp/tiny" --epochs 1 --batch-size 24 --seed 2 --lr 0.1
        --devices cuda:0,cuda:1 --clip-grad-norm 0.25)
  for overlap in off on; do
    for nccl in 1 0; do
      DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 DPTRAIN_NCCL=$nccl "$bin" "${gpus[@]}" --overlap $overlap \
        --save "$tmp/gpu-$overlap-$nccl.st" >"$tmp/gpu.out" 2>&1 && pass || fail "2 GPUs: $(tail -3 "$tmp/gpu.out")"
      [[ $nccl == 1 ]] && { grep -q "allreduce: nccl" "$tmp/gpu.out" && grep -q "clip-grad-norm (the gradients' norm is read on the host)" "$tmp/gpu.out" \
        && pass || fail "2 GPUs, first line: $(head -1 "$tmp/gpu.out")"; }
    done
    same_tensors "$tmp/gpu-$overlap-1.st" "$tmp/gpu-$overlap-0.st" && pass \
      || fail "2 emulated GPUs, --overlap $overlap: NCCL and the host path differ"
  done
  same_tensors "$tmp/gpu-off-1.st" "$tmp/gpu-on-1.st" && pass || fail "2 emulated GPUs: overlap on and off differ"
else
  echo "cli_clip_grad: no CUDA emulator with NCCL in this build: the GPU part is skipped"
fi

# bad values: one line, nothing written
for bad in 0 -1 nan inf 1e31 abc; do
  rm -f "$tmp/never.st" "$tmp/never.jsonl"
  "$bin" "${base[@]}" --clip-grad-norm "$bad" --save "$tmp/never.st" --metrics "$tmp/never.jsonl" \
    >"$tmp/bad.out" 2>"$tmp/bad.err"
  [[ $? -ne 0 && $(wc -l <"$tmp/bad.err") -eq 1 && ! -s "$tmp/bad.out" && ! -e "$tmp/never.st" && ! -e "$tmp/never.jsonl" ]] \
    && grep -q -- "--clip-grad-norm" "$tmp/bad.err" && pass || fail "--clip-grad-norm $bad: $(cat "$tmp/bad.err")"
done
testing_finish cli_clip_grad
