#!/usr/bin/env bash
# cli_profile.sh - `dptrain train --profile` (profile.h): the per-layer table
# printed at the end of training and the metrics file's {"profile": ...}
# line (both checked by profile_check.py: every LeNet layer forward and
# backward on every device, timed once per step of the window, times >= 0,
# shares summing to 100%):
# - LeNet on cpu:0,cpu:1 with --profile (5 warm-up steps, 20 timed), on
#   40 steps; the same run without --profile writes the same checkpoint
#   bits and prints no table;
# - a window cut short by the end of training (--profile-steps 30,20: 10
#   steps) and one never reached (--profile-steps 100,5: a line saying so);
# - bad --profile-steps values: one line, exit 1, no checkpoint written;
# - on the CUDA emulator (cli_cuda_emu's module; skipped in a build without
#   CUDA): cuda:0,cuda:1 has rows for both GPUs (CUDA events, not the host
#   clock: the emulator's cudaEventElapsedTime), and a window of 1 or 3
#   steps costs the same host synchronisations, one more than no profile:
#   the events are read once, after the window.
source "$(dirname "$0")/testing.sh"
check="$(dirname "$0")/profile_check.py"
small_data "$tmp/data" 640 100
# same_bits A B: the checkpoints' tensors and the last epoch's train_loss (the
# profile's line comes after the epochs' lines)
epoch_loss() { json_field "$(grep '"epoch"' "$tmp/$1.jsonl" | tail -1)" train_loss; }
same_bits() {
  same_tensors "$tmp/$1.st" "$tmp/$2.st" && [[ -n "$(epoch_loss "$1")" && "$(epoch_loss "$1")" == "$(epoch_loss "$2")" ]] \
    && pass || fail "$1 vs $2: checkpoint tensors or train_loss differ ($(epoch_loss "$1") vs $(epoch_loss "$2"))"
}
lenet=(conv1+relu1 avgpool1 conv2+relu2 avgpool2 flatten1 fc1 relu3 fc2 loss)
common=(train --data "$tmp/data" --limit 640 --batch-size 32 --lr 0.1 --seed 3 --quiet)

train_run prof cpu:0,cpu:1 --epochs 2 --profile
/usr/bin/python3 "$check" "$tmp/prof.out" "$tmp/prof.jsonl" cpu:0,cpu:1 20 5 "${lenet[@]}" >"$tmp/check.out" \
  && pass || fail "--profile on cpu:0,cpu:1: $(cat "$tmp/check.out")"
[[ $(grep -c '"epoch"' "$tmp/prof.jsonl") -eq 2 ]] && pass || fail "the epochs' metrics lines: $(cat "$tmp/prof.jsonl")"
train_run plain cpu:0,cpu:1 --epochs 2
same_bits prof plain
grep -q "profile" "$tmp/plain.out" "$tmp/plain.jsonl" && fail "without --profile: a profile: $(cat "$tmp/plain.out")" \
  || pass

train_run cut cpu:0 --epochs 2 --profile-steps 30,20
/usr/bin/python3 "$check" "$tmp/cut.out" "$tmp/cut.jsonl" cpu:0 10 30 "${lenet[@]}" >"$tmp/check.out" \
  && pass || fail "--profile-steps 30,20 over 40 steps: $(cat "$tmp/check.out")"
grep -q "^profile: .* (training ended before the window's end)$" "$tmp/cut.out" && pass \
  || fail "a window cut short does not say so: $(grep profile "$tmp/cut.out")"
train_run late cpu:0 --epochs 1 --profile-steps 100,5
grep -q "^profile: no step timed: training ended within the 100 warm-up steps" "$tmp/late.out" && pass \
  || fail "a window never reached: $(cat "$tmp/late.out")"
grep -q '"profile": {"warmup": 100, "window": 5, "steps": 0, "devices": \[' "$tmp/late.jsonl" && pass \
  || fail "a window never reached, metrics: $(tail -1 "$tmp/late.jsonl")"

for bad in 5 a,b 5,0 -1,3 5,20x 5,,20 "" 5,100001; do
  "$bin" "${common[@]}" --devices cpu:0 --epochs 1 --save "$tmp/bad.st" --profile-steps "$bad" >"$tmp/bad.out" \
    2>"$tmp/bad.err"
  code=$?
  [[ $code -eq 1 && $(wc -l <"$tmp/bad.err") -eq 1 && ! -s "$tmp/bad.out" && ! -e "$tmp/bad.st" ]] \
    && grep -q -- "$([[ -z $bad ]] && echo "--profile-steps" || echo "--profile-steps '$bad': expected WARMUP,STEPS")" \
      "$tmp/bad.err" && pass \
    || fail "--profile-steps '$bad': exit $code, $(cat "$tmp/bad.err" "$tmp/bad.out")"
done

emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ ! -e "$emu" ]]; then
  echo "cli_profile: the CUDA emulator's part SKIPPED: no CUDA emulator in this build (built without CUDA)"
else
  export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
  common=(train --data "$tmp/data" --limit 64 --batch-size 16 --lr 0.1 --seed 3 --quiet)
  train_run gpu cuda:0,cuda:1 --epochs 1 --profile-steps 1,2
  /usr/bin/python3 "$check" "$tmp/gpu.out" "$tmp/gpu.jsonl" cuda:0,cuda:1 2 1 "${lenet[@]}" >"$tmp/check.out" \
    && pass || fail "--profile on cuda:0,cuda:1 (emulator): $(cat "$tmp/check.out")"
  syncs() { sed -nE 's/^cuda emulator: .* ([0-9]+) stream synchronisations.*/\1/p' "$tmp/$1.out"; }
  # (with its kernels launched as made, as a profiled run's: --profile is never captured as a CUDA graph)
  DPTRAIN_CUDA_EMU_STATS=1 train_run none cuda:0 --epochs 1 --cuda-graph off
  DPTRAIN_CUDA_EMU_STATS=1 train_run one cuda:0 --epochs 1 --profile-steps 1,1
  DPTRAIN_CUDA_EMU_STATS=1 train_run three cuda:0 --epochs 1 --profile-steps 1,3
  none=$(syncs none) one=$(syncs one) three=$(syncs three)
  echo "cli_profile: host synchronisations in 4 steps on cuda:0 (emulator): $none without a profile," \
    "$one with a window of 1 step, $three with 3"
  [[ -n "$none" && -n "$one" && "$one" == "$three" && $one -eq $((none + 1)) ]] && pass \
    || fail "host synchronisations: $none without a profile, $one and $three with windows of 1 and 3 steps"
  same_bits none three
fi
testing_finish cli_profile
