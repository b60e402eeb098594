#!/usr/bin/env bash
# cli_ra_sampler.sh - `train --ra-sampler [--ra-reps N]` (repeated
# augmentation, torchvision's RASampler) end to end on a small generated
# image folder, LeNet at 28x28 after --transform resized-crop:
# - applied: other tensors than without, --ra-reps 4 other than 3; the
#   first line says "repeated augmentation x3"; 1 and 3 loader threads and
#   2 MPI ranks x 1 device = 1 process x 2 devices bit for bit; as many
#   steps per epoch as without;
# - the checkpoint records data.ra_reps; a run stopped after 1 epoch and
#   resumed without the options takes them (the resume line says so) and
#   ends with the straight run's bytes; a resume with another --ra-reps, or
#   a plain run's resume with --ra-sampler, is refused in one line, nothing
#   written; --init does not take it;
# - IDX data with --augment crop:2,flip: runs, copies augmented apart;
# - bad values: --ra-reps 1 or 65, --ra-reps without --ra-sampler: one
#   line, exit non-zero, nothing written.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 "$src/tests/random_image_folder.py" "$tmp/img" 72 18 3 30x40,44x36,52x52,36x48 && pass \
  || fail "making the image folder"
base=(train --data "$tmp/img" --model lenet-paddle --batch-size 12 --lr 0.05 --seed 3 --epochs 1 --transform resized-crop)
run() { saved_run "$1" "${base[@]}" "${@:2}"; }

run plain --devices 2
run ra --devices 2 --ra-sampler --loader-threads 1
run ra3 --devices 2 --ra-sampler --loader-threads 3
run ra4 --devices 2 --ra-sampler --ra-reps 4
same_tensors "$tmp/ra.st" "$tmp/ra3.st" && pass || fail "--ra-sampler: 1 and 3 loader threads differ"
same_tensors "$tmp/ra.st" "$tmp/plain.st" && fail "--ra-sampler changed nothing" || pass
same_tensors "$tmp/ra.st" "$tmp/ra4.st" && fail "--ra-reps 4 = 3" || pass
grep -q "repeated augmentation x3" "$tmp/ra.out" && ! grep -q "repeated augmentation" "$tmp/plain.out" && pass \
  || fail "first line: $(head -1 "$tmp/ra.out")"
[[ $(meta_value "$tmp/ra.st" data.ra_reps) == 3 && $(meta_value "$tmp/ra4.st" data.ra_reps) == 4 && -z $(meta_value "$tmp/plain.st" data.ra_reps) ]] \
  && pass || fail "data.ra_reps: '$(meta_value "$tmp/ra.st" data.ra_reps)' '$(meta_value "$tmp/ra4.st" data.ra_reps)' '$(meta_value "$tmp/plain.st" data.ra_reps)'"
[[ $(meta_value "$tmp/ra.st" optimizer.steps) == $(meta_value "$tmp/plain.st" optimizer.steps) && -n $(meta_value "$tmp/ra.st" optimizer.steps) ]] \
  && pass || fail "steps per epoch: $(meta_value "$tmp/ra.st" optimizer.steps) with, $(meta_value "$tmp/plain.st" optimizer.steps) without"

if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${base[@]}" --devices 1 --ra-sampler \
    --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same_tensors "$tmp/ranks.st" "$tmp/ra.st" && pass || fail "2 ranks x 1 device differ from 1 process x 2 devices"
else
  fail "mpirun not found (openmpi-bin)"
fi

# resume: taken (the straight run's bytes); another value refused; --init does not take it
"$bin" "${base[@]}" --epochs 2 --devices 2 --ra-sampler --ra-reps 4 --save "$tmp/straight.st" >/dev/null 2>&1 \
  && pass || fail "2 epochs"
"$bin" "${base[@]}" --epochs 2 --devices 2 --ra-sampler --ra-reps 4 --stop-after 1 --save "$tmp/half.st" \
  >/dev/null 2>&1 && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 2 --save "$tmp/resumed.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/resumed.st" "$tmp/straight.st" && pass || fail "stopped + resumed differs from the straight run"
grep -q -- "--ra-sampler --ra-reps 4" "$tmp/resumed.out" && pass || fail "resume line: $(head -2 "$tmp/resumed.out")"
refused() {
  local label=$1 file=$2
  shift 2
  rm -f "$tmp/other.st"
  "$bin" train --resume "$file" --devices 2 "$@" --save "$tmp/other.st" >"$tmp/other.out" 2>"$tmp/other.err"
  [[ $? -ne 0 && ! -e "$tmp/other.st" && $(wc -l <"$tmp/other.err") -eq 1 ]] && grep -q -- "--ra-reps" "$tmp/other.err" \
    && pass || fail "$label: $(cat "$tmp/other.err")"
}
refused "resume with --ra-reps 3" "$tmp/half.st" --ra-sampler --ra-reps 3
"$bin" "${base[@]}" --epochs 2 --devices 2 --stop-after 1 --save "$tmp/plain_half.st" >/dev/null 2>&1 && pass \
  || fail "plain --stop-after 1"
refused "a plain run resumed with --ra-sampler" "$tmp/plain_half.st" --ra-sampler
"$bin" "${base[@]}" --init "$tmp/half.st" --save "$tmp/init.st" >"$tmp/init.out" 2>&1 \
  && [[ -z $(meta_value "$tmp/init.st" data.ra_reps) ]] && pass || fail "--init took it: $(tail -2 "$tmp/init.out")"

# IDX data: --augment's crop and flip are keyed by position, so the copies differ too
small_data "$tmp/idx" 120 20
idx=(train --data "$tmp/idx" --model lenet-paddle --epochs 1 --batch-size 20 --devices 2 --augment crop:2,flip)
"$bin" "${idx[@]}" --save "$tmp/idx_plain.st" >/dev/null 2>&1 && "$bin" "${idx[@]}" --ra-sampler --save "$tmp/idx_ra.st" \
  >/dev/null 2>&1 && pass || fail "IDX runs"
same_tensors "$tmp/idx_plain.st" "$tmp/idx_ra.st" && fail "IDX: --ra-sampler changed nothing" || pass

# bad values: one line, nothing written
refused_run "--ra-reps: 1 is out of range" "${base[@]}" --ra-sampler --ra-reps 1
refused_run "--ra-reps: 65 is out of range" "${base[@]}" --ra-sampler --ra-reps 65
refused_run "--ra-reps 4 without --ra-sampler" "${base[@]}" --ra-reps 4
testing_finish cli_ra_sampler
