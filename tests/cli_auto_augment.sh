#!/usr/bin/env bash
# cli_auto_augment.sh - `train --auto-augment ta_wide|ra|imagenet|cifar10|svhn`
# (and --ra-magnitude) end to end on a tiny generated image folder (PNGs and
# JPEGs of odd sizes, 3 classes), LeNet at 28x28 after --transform
# resized-crop:
# - the augmentation is applied (other tensors than the crop alone), its
#   draws are the sample's own: 2 devices give the same bits with 1 and 3
#   loader threads, with and without --cache-mb, 2 MPI ranks x 1 device = 1 process x 2 devices bit for
#   bit, 1 device within 1e-5 of 2 (the sums' order: cli_image_stream);
#   ra differs from ta_wide, --ra-magnitude from the default, AutoAugment's
#   imagenet and svhn policies from ta_wide and each other;
#   --auto-augment-interpolation nearest from the default bilinear;
# - the checkpoint records it in data.train_transform ("resized-crop,
#   auto-augment ta_wide", "..., auto-augment ra 9", "..., auto-augment
#   cifar10"); a run stopped after
#   1 epoch and resumed without the option takes it (the resume line says
#   so) and ends with the straight run's bytes; a resume with another
#   --auto-augment or --ra-magnitude is refused in one line, nothing
#   written; --init does not take it;
# - bad values: an unknown name, --ra-magnitude out of 0..30 or without
#   ra, the option without --transform resized-crop or on IDX data: one
#   line, exit non-zero, nothing written.
source "$(dirname "$0")/testing.sh"
/usr/bin/python3 "$(dirname "$0")/gradient_image_folder.py" "$tmp/img" 5 30 60 \
  || { fail "making the image folder"; testing_finish cli_auto_augment; exit 1; }
base=(train --data "$tmp/img" --model lenet-paddle --batch-size 18 --lr 0.05 --seed 3 --epochs 1 --quiet
      --transform resized-crop)
run() { saved_run "$1" "${base[@]}" "${@:2}"; }
key() { meta_value "$1" data.train_transform; }

run crop --devices 2
run ta --devices 2 --auto-augment ta_wide --loader-threads 1
run ta3 --devices 2 --auto-augment ta_wide --loader-threads 3
run ta1 --devices 1 --auto-augment ta_wide
run ra --devices 2 --auto-augment ra
run ra30 --devices 2 --auto-augment ra --ra-magnitude 30
run exact --devices 2 --auto-augment ta_wide --dct-scale off
run cached --devices 2 --auto-augment ta_wide --dct-scale off --cache-mb 16
run imagenet --devices 2 --auto-augment imagenet
run svhn --devices 2 --auto-augment svhn
run nearest --devices 2 --auto-augment ta_wide --auto-augment-interpolation nearest --loader-threads 1
same_tensors "$tmp/ta.st" "$tmp/ta3.st" && pass || fail "ta_wide: 1 and 3 loader threads differ"
same_tensors "$tmp/exact.st" "$tmp/cached.st" && pass || fail "ta_wide: --cache-mb changed the bytes"
same_tensors "$tmp/ta.st" "$tmp/crop.st" && fail "--auto-augment ta_wide changed nothing" || pass
same_tensors "$tmp/ra.st" "$tmp/ta.st" && fail "ra = ta_wide" || pass
same_tensors "$tmp/ra.st" "$tmp/ra30.st" && fail "--ra-magnitude 30 changed nothing" || pass
same_tensors "$tmp/imagenet.st" "$tmp/ta.st" && fail "imagenet = ta_wide" || pass
same_tensors "$tmp/imagenet.st" "$tmp/svhn.st" && fail "imagenet = svhn" || pass
same_tensors "$tmp/imagenet.st" "$tmp/crop.st" && fail "--auto-augment imagenet changed nothing" || pass
same_tensors "$tmp/nearest.st" "$tmp/ta.st" && fail "--auto-augment-interpolation nearest = bilinear" || pass
[[ $(key "$tmp/nearest.st") == "resized-crop, auto-augment ta_wide, aa-interpolation nearest" ]] && pass \
  || fail "nearest: data.train_transform '$(key "$tmp/nearest.st")'"
worst=$(close_checkpoints "$tmp/ta.st" "$tmp/ta1.st" 1e-5 2>&1) && pass || fail "1 vs 2 devices: $worst"
[[ $(key "$tmp/ta.st") == "resized-crop, auto-augment ta_wide" && $(key "$tmp/ra.st") == "resized-crop, auto-augment ra 9" &&
   $(key "$tmp/ra30.st") == "resized-crop, auto-augment ra 30" && $(key "$tmp/crop.st") == "resized-crop" &&
   $(key "$tmp/imagenet.st") == "resized-crop, auto-augment imagenet" ]] && pass \
  || fail "data.train_transform: '$(key "$tmp/ta.st")' '$(key "$tmp/ra.st")' '$(key "$tmp/crop.st")'"

if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${base[@]}" --devices 1 --auto-augment ta_wide \
    --save "$tmp/ranks.st" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks: $(tail -3 "$tmp/ranks.out")"
  same_tensors "$tmp/ranks.st" "$tmp/ta.st" && pass || fail "2 ranks x 1 device differ from 1 process x 2 devices"
else
  fail "mpirun not found (openmpi-bin)"
fi

# resume: taken (the straight run's bytes); another value refused; --init does not take it. First a policy
# whose name has digits (cifar10) with nearest interpolation, then RandAugment with its magnitude.
cifar=(--auto-augment cifar10 --auto-augment-interpolation nearest)
"$bin" "${base[@]}" --epochs 2 --devices 2 "${cifar[@]}" --save "$tmp/c_straight.st" >/dev/null 2>&1 \
  && pass || fail "cifar10: 2 epochs"
"$bin" "${base[@]}" --epochs 2 --devices 2 "${cifar[@]}" --stop-after 1 --save "$tmp/c_half.st" \
  >/dev/null 2>&1 && [[ $(key "$tmp/c_half.st") == "resized-crop, auto-augment cifar10, aa-interpolation nearest" ]] \
  && pass || fail "cifar10: --stop-after 1: '$(key "$tmp/c_half.st")'"
"$bin" train --resume "$tmp/c_half.st" --devices 2 --save "$tmp/c_resumed.st" >"$tmp/c_resumed.out" 2>&1 \
  && cmp -s "$tmp/c_resumed.st" "$tmp/c_straight.st" \
  && grep -q -- "--auto-augment cifar10 --auto-augment-interpolation nearest" "$tmp/c_resumed.out" \
  && pass || fail "cifar10: stopped + resumed differs from the straight run: $(head -3 "$tmp/c_resumed.out")"
rm -f "$tmp/other.st"
"$bin" train --resume "$tmp/c_half.st" --devices 2 --auto-augment-interpolation bilinear --save "$tmp/other.st" \
  >/dev/null 2>"$tmp/other.err"
[[ $? -ne 0 && ! -e "$tmp/other.st" && $(wc -l <"$tmp/other.err") -eq 1 ]] \
  && grep -q "saved with --auto-augment-interpolation nearest, this run has bilinear" "$tmp/other.err" && pass \
  || fail "resume with another interpolation: $(cat "$tmp/other.err")"
"$bin" "${base[@]}" --epochs 2 --devices 2 --auto-augment ra --ra-magnitude 20 --save "$tmp/straight.st" \
  >/dev/null 2>&1 && pass || fail "2 epochs"
"$bin" "${base[@]}" --epochs 2 --devices 2 --auto-augment ra --ra-magnitude 20 --stop-after 1 --save "$tmp/half.st" \
  >/dev/null 2>&1 && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 2 --save "$tmp/resumed.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/resumed.st" "$tmp/straight.st" && pass || fail "stopped + resumed differs from the straight run"
grep -q -- "--auto-augment ra --ra-magnitude 20" "$tmp/resumed.out" && pass || fail "resume line: $(head -2 "$tmp/resumed.out")"
for other in "--auto-augment ta_wide" "--auto-augment none" "--ra-magnitude 9"; do
  rm -f "$tmp/other.st"
  "$bin" train --resume "$tmp/half.st" --devices 2 $other --save "$tmp/other.st" >"$tmp/other.out" 2>"$tmp/other.err"
  [[ $? -ne 0 && ! -e "$tmp/other.st" && $(wc -l <"$tmp/other.err") -eq 1 ]] \
    && grep -q "saved with --\(auto-augment ra\|ra-magnitude 20\), this run has" "$tmp/other.err" \
    && pass || fail "resume with $other: $(cat "$tmp/other.err")"
done
"$bin" "${base[@]}" --init "$tmp/half.st" --save "$tmp/init.st" >"$tmp/init.out" 2>&1 \
  && [[ $(key "$tmp/init.st") == "resized-crop" ]] && pass || fail "--init took it: '$(key "$tmp/init.st")' $(tail -2 "$tmp/init.out")"

# bad values: one line, nothing written
small_data "$tmp/idx" 60 20
refused_run "--auto-augment: 'aa' is not ta_wide, ra, imagenet, cifar10, svhn or none" "${base[@]}" --auto-augment aa
refused_run "--ra-magnitude: 31 is out of range" "${base[@]}" --auto-augment ra --ra-magnitude 31
refused_run "--ra-magnitude: -1 is out of range" "${base[@]}" --auto-augment ra --ra-magnitude -1
refused_run "--ra-magnitude 5: only with --auto-augment ra" "${base[@]}" --auto-augment ta_wide --ra-magnitude 5
refused_run "--auto-augment ta_wide: only with --transform resized-crop" "${base[@]}" --transform center --auto-augment ta_wide
refused_run "--auto-augment-interpolation: 'cubic' is not bilinear, nearest or bicubic" "${base[@]}" --auto-augment ra \
  --auto-augment-interpolation cubic
refused_run "--auto-augment-interpolation nearest: only with --auto-augment" "${base[@]}" \
  --auto-augment-interpolation nearest
refused_run "--auto-augment ra: only for image folders" train --data "$tmp/idx" --model lenet-paddle --epochs 1 --auto-augment ra
testing_finish cli_auto_augment
