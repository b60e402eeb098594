#!/usr/bin/env bash
# cli_color_jitter.sh - `train --color-jitter B[,C,S,H]` end to end on a
# tiny generated image folder (PNGs and JPEGs of odd sizes, 3 classes),
# --transform resized-crop, LeNet-CIFAR (RGB, 32x32) and LeNet (gray, 28x28):
# - the jitter is applied (other tensors than the crop alone), its draws
#   are the sample's own: 1 and 3 loader threads and --cache-mb give the
#   same bits; 0.4 = 0.4,0.4,0.4 = 0.4,0.4,0.4,0 (timm's rule); a hue
#   changes an RGB run; on gray images saturation and hue change nothing
#   (their factors are drawn last: the same bits);
# - the checkpoint records it in data.train_transform ("resized-crop,
#   color-jitter 0.4,0.4,0.4,0.1"); a run stopped after 1 epoch and
#   resumed without the option takes it (the resume line says so) and
#   ends with the straight run's bytes, as does one given the same values
#   spelled otherwise; another value (or 0, or an auto-augmentation) is
#   refused in one line, nothing written, as is --color-jitter on a run
#   saved without it; --init does not take it;
# - bad values (2 or 5 values, negative, hue above 0.5, too many digits),
#   the option without --transform resized-crop, with --auto-augment, on
#   IDX data: one line, exit non-zero, nothing written.
source "$(dirname "$0")/testing.sh"
/usr/bin/python3 "$(dirname "$0")/gradient_image_folder.py" "$tmp/img" 7 34 60 \
  || { fail "making the image folder"; testing_finish cli_color_jitter; exit 1; }
rgb=(train --data "$tmp/img" --model lenet-cifar --batch-size 18 --lr 0.05 --seed 3 --epochs 1 --quiet --devices 2
     --transform resized-crop)
gray=(train --data "$tmp/img" --model lenet-paddle --batch-size 18 --lr 0.05 --seed 3 --epochs 1 --quiet --devices 2
      --transform resized-crop)
run() {
  local name=$1
  shift
  "$bin" "$@" --save "$tmp/$name.st" >"$tmp/$name.out" 2>&1 && pass || fail "$name: $(tail -3 "$tmp/$name.out")"
}
key() { "$bin" inspect "$1" 2>&1 | sed -n "s/^  data.train_transform = //p"; }

run crop "${rgb[@]}"
run cj "${rgb[@]}" --color-jitter 0.4 --loader-threads 1
run cj3 "${rgb[@]}" --color-jitter 0.4 --loader-threads 3
run cj_three "${rgb[@]}" --color-jitter 0.4,0.4,0.4
run cj_four "${rgb[@]}" --color-jitter 0.4,0.4,0.4,0
run hue "${rgb[@]}" --color-jitter 0.4,0.4,0.4,0.1
run exact "${rgb[@]}" --color-jitter 0.2,0.3,0.4,0.5 --dct-scale off
run cached "${rgb[@]}" --color-jitter 0.2,0.3,0.4,0.5 --dct-scale off --cache-mb 16
run gray_crop "${gray[@]}"
run gray "${gray[@]}" --color-jitter 0.4,0.4,0
run gray_sh "${gray[@]}" --color-jitter 0.4,0.4,0.9,0.5
same_tensors "$tmp/cj.st" "$tmp/cj3.st" && pass || fail "1 and 3 loader threads differ"
same_tensors "$tmp/exact.st" "$tmp/cached.st" && pass || fail "--cache-mb changed the bytes"
same_tensors "$tmp/cj.st" "$tmp/crop.st" && fail "--color-jitter 0.4 changed nothing" || pass
same_tensors "$tmp/cj.st" "$tmp/cj_three.st" && same_tensors "$tmp/cj.st" "$tmp/cj_four.st" && pass \
  || fail "0.4, 0.4,0.4,0.4 and 0.4,0.4,0.4,0 differ"
same_tensors "$tmp/hue.st" "$tmp/cj.st" && fail "a hue of 0.1 changed nothing" || pass
same_tensors "$tmp/gray.st" "$tmp/gray_crop.st" && fail "gray: --color-jitter 0.4,0.4,0 changed nothing" || pass
same_tensors "$tmp/gray.st" "$tmp/gray_sh.st" && pass || fail "gray: saturation and hue changed the bytes"
[[ $(key "$tmp/cj.st") == "resized-crop, color-jitter 0.4,0.4,0.4,0" &&
   $(key "$tmp/hue.st") == "resized-crop, color-jitter 0.4,0.4,0.4,0.1" &&
   $(key "$tmp/exact.st") == "resized-crop, dct-scale off, color-jitter 0.2,0.3,0.4,0.5" &&
   $(key "$tmp/crop.st") == "resized-crop" ]] && pass \
  || fail "data.train_transform: '$(key "$tmp/cj.st")' '$(key "$tmp/hue.st")' '$(key "$tmp/exact.st")'"

# resume: taken (the straight run's bytes); the same values spelled otherwise too; another value refused;
# --init does not take it
"$bin" "${rgb[@]}" --epochs 2 --color-jitter 0.4,0.4,0.4,0.1 --save "$tmp/straight.st" >/dev/null 2>&1 \
  && pass || fail "2 epochs"
"$bin" "${rgb[@]}" --epochs 2 --color-jitter 0.4,0.4,0.4,0.1 --stop-after 1 --save "$tmp/half.st" >/dev/null 2>&1 \
  && pass || fail "--stop-after 1"
"$bin" train --resume "$tmp/half.st" --devices 2 --save "$tmp/resumed.st" >"$tmp/resumed.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/resumed.out")"
cmp -s "$tmp/resumed.st" "$tmp/straight.st" && pass || fail "stopped + resumed differs from the straight run"
grep -q -- "--color-jitter 0.4,0.4,0.4,0.1" "$tmp/resumed.out" && pass || fail "resume line: $(head -2 "$tmp/resumed.out")"
"$bin" train --resume "$tmp/half.st" --devices 2 --color-jitter 0.40,.4,0.4,0.10 --save "$tmp/respelled.st" \
  >"$tmp/respelled.out" 2>&1 && cmp -s "$tmp/respelled.st" "$tmp/straight.st" && pass \
  || fail "resume with the same values spelled otherwise: $(tail -2 "$tmp/respelled.out")"
for other in "--color-jitter 0.4" "--color-jitter 0" "--auto-augment ta_wide"; do
  rm -f "$tmp/other.st"
  "$bin" train --resume "$tmp/half.st" --devices 2 $other --save "$tmp/other.st" >"$tmp/other.out" 2>"$tmp/other.err"
  [[ $? -ne 0 && ! -e "$tmp/other.st" && $(wc -l <"$tmp/other.err") -eq 1 ]] \
    && grep -q "saved with --\(color-jitter 0.4,0.4,0.4,0.1\|auto-augment none\), this run has" "$tmp/other.err" \
    && pass || fail "resume with $other: $(cat "$tmp/other.err")"
done
rm -f "$tmp/other.st"
"$bin" train --resume "$tmp/crop.st" --epochs 2 --devices 2 --color-jitter 0.4 --save "$tmp/other.st" \
  >"$tmp/other.out" 2>"$tmp/other.err"
[[ $? -ne 0 && ! -e "$tmp/other.st" && $(wc -l <"$tmp/other.err") -eq 1 ]] \
  && grep -q "saved with --color-jitter 0 (none), this run has 0.4" "$tmp/other.err" && pass \
  || fail "resume of a run without it, with --color-jitter 0.4: $(cat "$tmp/other.err")"
"$bin" "${rgb[@]}" --init "$tmp/half.st" --save "$tmp/init.st" >"$tmp/init.out" 2>&1 \
  && [[ $(key "$tmp/init.st") == "resized-crop" ]] && pass || fail "--init took it: '$(key "$tmp/init.st")' $(tail -2 "$tmp/init.out")"

# bad values: one line, nothing written
small_data "$tmp/idx" 60 20
refused_run "--color-jitter: '0.4,0.4' is not B, B,C,S or B,C,S,H" "${rgb[@]}" --color-jitter 0.4,0.4
refused_run "--color-jitter: '0.1,0.1,0.1,0.1,0' is not" "${rgb[@]}" --color-jitter 0.1,0.1,0.1,0.1,0
refused_run "--color-jitter: '-0.4' is not" "${rgb[@]}" --color-jitter -0.4
refused_run "--color-jitter: hue 0.6 (0 to 0.5" "${rgb[@]}" --color-jitter 0.4,0.4,0.4,0.6
refused_run "--color-jitter: brightness 101 (0 to 100)" "${rgb[@]}" --color-jitter 101
refused_run "--color-jitter 0.123456789012,0.123456789012,0.123456789012,0.1: too many digits" \
  "${rgb[@]}" --color-jitter 0.123456789012,0.123456789012,0.123456789012,0.1
refused_run "--color-jitter 0.4: only with --transform resized-crop" "${rgb[@]}" --transform center --color-jitter 0.4
refused_run "--color-jitter 0.4 with --auto-augment ta_wide: one or the other" "${rgb[@]}" --color-jitter 0.4 --auto-augment ta_wide
refused_run "--color-jitter 0.4: only for image folders" train --data "$tmp/idx" --model lenet-paddle --epochs 1 --color-jitter 0.4
refused_run "unknown option '--color-jitter'" eval --data "$tmp/img" --color-jitter 0.4
testing_finish cli_color_jitter
