#!/usr/bin/env bash
# cli_staged.sh - the generic (non-host-memory) paths above the device seam,
# on the staged CPU backend (--devices staged:0,..., backend_cpu_staged.c: the
# CPU's kernels with host_memory = 0 and the optimizer state in a device copy
# of its own, a test double of a GPU). Every run is compared with the same
# run on cpu:0,cpu:1: the checkpoint's tensors (parameters and optimizer
# state) byte for byte, and the metrics' train_loss to the last digit.
# - momentum, Adagrad and Adam (the state is saved through
#   optimizer_download; a run that forgot it saves zeros and differs);
# - resume: 1 epoch saved on staged devices, resumed for a second on staged
#   devices and on CPU devices, and the other way round, all equal to 2
#   epochs straight on CPU devices (optimizer_upload after a restore);
# - --augment crop:4,flip (filled on the host and uploaded by the trainer);
# - --sync ps and --overlap on;
# - --tf32 on CPU devices: one line, non-zero, nothing written;
# - without --devices the first line says which devices and why (here: one
#   CPU device per core, no GPU; with a GPU: the GPU).
source "$(dirname "$0")/testing.sh"
# the first 768 training and 1000 test images of Fashion-MNIST (the evaluation
# after every epoch is most of a short run's time)
small_data "$tmp/data" 768 1000
data=$tmp/data
common=(train --model lenet --data "$data" --limit 768 --batch-size 96 --lr 0.05 --seed 5 --quiet)

# same NAME ARGS...: staged:0,staged:1 gives cpu:0,cpu:1's bits
same() {
  local name=$1
  shift
  train_run "$name-cpu" cpu:0,cpu:1 "$@"
  train_run "$name-staged" staged:0,staged:1 "$@"
  same_run "$name-cpu" "$name-staged"
}

for optimizer in momentum adagrad adam; do
  same "$optimizer" --epochs 1 --optimizer "$optimizer"
done
# the saved state is not all zeros (what a forgotten download would save)
[[ $(tensors "$tmp/adam-staged.st" | od -An -v -t x1 | tr -d ' \n' | tr -d 0 | wc -c) -gt 0 ]] && pass \
  || fail "adam: the staged checkpoint is all zeros"

# resume across backends: every way gives 2 epochs straight on CPU devices
train_run straight cpu:0,cpu:1 --epochs 2 --optimizer adam
for first in cpu staged; do
  train_run "half-$first" "$first:0,$first:1" --epochs 2 --stop-after 1 --optimizer adam
  for second in cpu staged; do
    cp "$tmp/half-$first.st" "$tmp/from-$first-$second.st"
    train_run "resume-$first-$second" "$second:0,$second:1" --epochs 2 --optimizer adam \
      --resume "$tmp/from-$first-$second.st"
    same_tensors "$tmp/straight.st" "$tmp/resume-$first-$second.st" && pass \
      || fail "saved on $first, resumed on $second: not 2 epochs straight's tensors"
  done
done

same augment --epochs 1 --optimizer momentum --augment crop:4,flip
same ps --epochs 1 --optimizer momentum --sync ps
same overlap --epochs 1 --optimizer adam --overlap on
same naive --epochs 1 --optimizer adagrad --allreduce naive

# --tf32 on CPU devices: refused, nothing written
"$bin" "${common[@]}" --devices staged:0 --tf32 --epochs 1 --save "$tmp/tf32.st" >"$tmp/out" 2>"$tmp/err"
status=$?
[[ $status -ne 0 && $status -lt 128 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "train: --tf32: staged:0 has no TF32 mode .*: use --precision fp32" "$tmp/err" \
  && pass || fail "--tf32 on staged devices: exit $status, stderr $(cat "$tmp/err")"
[[ ! -e "$tmp/tf32.st" ]] && pass || fail "--tf32 refused, but a checkpoint was written"
"$bin" "${common[@]}" --devices 1 --tf32 --epochs 1 >"$tmp/out" 2>"$tmp/err"
[[ $? -ne 0 ]] && grep -q "train: --tf32: cpu:0 has no TF32 mode .*: use --precision fp32" "$tmp/err" && pass \
  || fail "--tf32 on cpu devices: $(cat "$tmp/err")"
"$bin" "${common[@]}" --devices staged:1,staged:1 --epochs 1 >"$tmp/out" 2>"$tmp/err"
[[ $? -ne 0 ]] && grep -q "staged:1 is listed twice" "$tmp/err" && pass || fail "staged:1 twice: $(cat "$tmp/err")"

# default devices: the first line names them and why
cores=$(getconf _NPROCESSORS_ONLN)
"$bin" train --model lenet --data "$data" --limit 512 --batch-size 512 --epochs 1 >"$tmp/default.out" 2>&1 \
  && pass || fail "default devices: $(tail -3 "$tmp/default.out")"
first=$(head -1 "$tmp/default.out")
if [[ -e "$(dirname "$bin")/lib/libdptrain_cuda.so" ]] && nvidia-smi -L >/dev/null 2>&1; then
  grep -qE "on \[cuda:0(, cuda:[0-9]+)*\] \(default: (the GPU|every GPU \([0-9]+\))" <<<"$first" && pass || fail "default on a GPU machine: $first"
else
  names=$(seq -s ', ' -f 'cpu:%g' 0 $((cores - 1)))
  grep -qF "on [$names] (default: one CPU device per core; no GPU: " <<<"$first" && pass \
    || fail "default devices: want [$names] and why, got: $first"
  [[ -e "$(dirname "$bin")/lib/libdptrain_cuda.so" ]] || { grep -q "no GPU: this dptrain was built without CUDA" <<<"$first" && pass \
    || fail "default devices: the reason should be the build: $first"; }
fi
testing_finish cli_staged
