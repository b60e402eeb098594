#!/usr/bin/env bash
# cli_interpolation.sh - `train --interpolation bilinear|bicubic` end to end
# on a tiny generated image folder (PNGs and JPEGs of odd sizes, 3
# classes), LeNet at 28x28 (test_image_transform pins the bicubic bytes to
# PIL's; here the option's path through the CLI):
# - bicubic trains other tensors than the default bilinear, with
#   --transform resized-crop and center; the checkpoint records it:
#   data.train_transform "resized-crop, bicubic", data.transform "resize 32,
#   bicubic"; bilinear records nothing (older checkpoints read as bilinear);
# - a run stopped after 1 epoch and resumed without the option takes it
#   (the resume line says so) and ends with the straight run's bytes; a
#   resume with --interpolation bilinear is refused in one line, nothing
#   written; --init does not take it;
# - eval and predict use the checkpoint's (eval --image-size's line names
#   the transform; predict's logits), --interpolation bilinear overrides it
#   (other logits);
# - --auto-augment's geometric ops take --interpolation's filter by default
#   (the recipe's), --auto-augment-interpolation another (recorded then:
#   ", aa-interpolation bilinear"); bicubic there is resumed bit for bit
#   and another refused;
# - bad values: an unknown filter, IDX data (train, and eval and predict
#   of its checkpoint): one line, exit non-zero, nothing written.
source "$(dirname "$0")/testing.sh"
/usr/bin/python3 "$(dirname "$0")/gradient_image_folder.py" "$tmp/img" 5 30 60 \
  || { fail "making the image folder"; testing_finish cli_interpolation; exit 1; }
base=(train --data "$tmp/img" --model lenet-paddle --batch-size 18 --lr 0.05 --seed 3 --epochs 1 --quiet
      --devices 2)
run() { saved_run "$1" "${base[@]}" "${@:2}"; }
key() { meta_value "$1" "$2"; }
# resumed NAME LINE ARGS...: 2 epochs of base + ARGS straight, and stopped after 1 ($tmp/NAME_half.st) then
# resumed without ARGS: the same bytes, the resume line naming LINE
resumed() {
  local name=$1 line=$2
  shift 2
  "$bin" "${base[@]}" --epochs 2 "$@" --save "$tmp/${name}_straight.st" >/dev/null 2>&1 && pass || fail "$name: 2 epochs"
  "$bin" "${base[@]}" --epochs 2 "$@" --stop-after 1 --save "$tmp/${name}_half.st" >/dev/null 2>&1 && pass \
    || fail "$name: --stop-after 1"
  "$bin" train --resume "$tmp/${name}_half.st" --devices 2 --save "$tmp/${name}_resumed.st" >"$tmp/${name}.out" 2>&1 \
    && cmp -s "$tmp/${name}_resumed.st" "$tmp/${name}_straight.st" && grep -q -- "$line" "$tmp/${name}.out" && pass \
    || fail "$name: stopped + resumed differs from the straight run: $(head -3 "$tmp/${name}.out")"
}
# refused_command MESSAGE ARGS...: "$bin" ARGS exits 1 with one line containing MESSAGE
refused_command() {
  local want=$1 out
  shift
  out=$("$bin" "$@" 2>&1)
  [[ $? -eq 1 && $(wc -l <<<"$out") -eq 1 && $out == *"$want"* ]] && pass || fail "$*: $out"
}

run crop --transform resized-crop
run bicubic --transform resized-crop --interpolation bicubic
run bilinear --transform resized-crop --interpolation bilinear
run center --interpolation bicubic
same_tensors "$tmp/crop.st" "$tmp/bilinear.st" && pass || fail "--interpolation bilinear is not the default"
same_tensors "$tmp/crop.st" "$tmp/bicubic.st" && fail "--interpolation bicubic changed nothing" || pass
[[ $(key "$tmp/bicubic.st" data.train_transform) == "resized-crop, bicubic" &&
   $(key "$tmp/bicubic.st" data.transform) == "resize 32, bicubic" &&
   $(key "$tmp/center.st" data.train_transform) == "center, bicubic" &&
   $(key "$tmp/bilinear.st" data.train_transform) == "resized-crop" &&
   $(key "$tmp/bilinear.st" data.transform) == "resize 32" ]] && pass \
  || fail "recorded: '$(key "$tmp/bicubic.st" data.train_transform)' '$(key "$tmp/bicubic.st" data.transform)'" \
          "'$(key "$tmp/center.st" data.train_transform)' '$(key "$tmp/bilinear.st" data.transform)'"

# resume: taken (the straight run's bytes); bilinear refused; --init does not take it
resumed bicubic_run "--interpolation bicubic" --transform resized-crop --interpolation bicubic
refused_run "saved with --interpolation bicubic, this run has bilinear" train --resume "$tmp/bicubic_run_half.st" \
  --devices 2 --interpolation bilinear
"$bin" "${base[@]}" --transform resized-crop --init "$tmp/bicubic_run_half.st" --save "$tmp/init.st" >"$tmp/init.out" 2>&1 \
  && [[ $(key "$tmp/init.st" data.train_transform) == "resized-crop" ]] && pass \
  || fail "--init took it: '$(key "$tmp/init.st" data.train_transform)' $(tail -2 "$tmp/init.out")"

# eval: the checkpoint's filter, or --interpolation's (the --image-size line names the transform used)
out=$("$bin" eval --resume "$tmp/bicubic.st" --devices 1 --image-size 28 2>/dev/null)
[[ $? -eq 0 && $out == *"input 28x28 (resize 32, bicubic)"* ]] && pass || fail "eval: $out"
out=$("$bin" eval --resume "$tmp/bicubic.st" --devices 1 --image-size 28 --interpolation bilinear 2>/dev/null)
[[ $? -eq 0 && $out == *"input 28x28 (resize 32)"* ]] && pass || fail "eval --interpolation bilinear: $out"
out=$("$bin" eval --resume "$tmp/bilinear.st" --devices 1 --image-size 28 --interpolation bicubic 2>/dev/null)
[[ $? -eq 0 && $out == *"input 28x28 (resize 32, bicubic)"* ]] && pass || fail "eval of bilinear, bicubic: $out"
# predict: the same images through the checkpoint's filter and through bilinear give other logits
images=("$tmp"/img/test/c0/*)
"$bin" predict --resume "$tmp/bicubic.st" --devices 1 --json --logits "${images[@]}" >"$tmp/p_bicubic.out" 2>&1 \
  && pass || fail "predict: $(tail -2 "$tmp/p_bicubic.out")"
"$bin" predict --resume "$tmp/bicubic.st" --devices 1 --json --logits --interpolation bicubic "${images[@]}" \
  >"$tmp/p_same.out" 2>&1 && cmp -s "$tmp/p_bicubic.out" "$tmp/p_same.out" && pass \
  || fail "predict --interpolation bicubic is not the checkpoint's"
"$bin" predict --resume "$tmp/bicubic.st" --devices 1 --json --logits --interpolation bilinear "${images[@]}" \
  >"$tmp/p_bilinear.out" 2>&1 && pass || fail "predict --interpolation bilinear: $(tail -2 "$tmp/p_bilinear.out")"
cmp -s "$tmp/p_bicubic.out" "$tmp/p_bilinear.out" && fail "predict: bilinear gives the bicubic logits" || pass

# bad values: one line, nothing written
small_data "$tmp/idx" 60 20
refused_run "train: --interpolation: 'nearest' is not bilinear or bicubic" "${base[@]}" --interpolation nearest
refused_run "--interpolation bicubic: only for image folders" train --data "$tmp/idx" --model lenet-paddle --epochs 1 \
  --interpolation bicubic
# auto-augmentation: its shears, translations and rotations take --interpolation's filter unless
# --auto-augment-interpolation says another (recorded then); a resume keeps either
run aa --transform resized-crop --interpolation bicubic --auto-augment ta_wide --loader-threads 1
run aa_bilinear --transform resized-crop --interpolation bicubic --auto-augment ta_wide --loader-threads 1 \
  --auto-augment-interpolation bilinear
run aa_explicit --transform resized-crop --interpolation bicubic --auto-augment ta_wide --loader-threads 1 \
  --auto-augment-interpolation bicubic
same_tensors "$tmp/aa.st" "$tmp/aa_explicit.st" && pass || fail "the auto-augmentation's default is not --interpolation's"
same_tensors "$tmp/aa.st" "$tmp/aa_bilinear.st" && fail "--auto-augment-interpolation bilinear changed nothing" || pass
[[ $(key "$tmp/aa.st" data.train_transform) == "resized-crop, bicubic, auto-augment ta_wide" &&
   $(key "$tmp/aa_bilinear.st" data.train_transform) == "resized-crop, bicubic, auto-augment ta_wide, aa-interpolation bilinear" ]] \
  && pass || fail "with auto-augment: '$(key "$tmp/aa.st" data.train_transform)' '$(key "$tmp/aa_bilinear.st" data.train_transform)'"
aa=(--transform resized-crop --auto-augment ta_wide --auto-augment-interpolation bicubic)
resumed aa "--auto-augment-interpolation bicubic" "${aa[@]}"
[[ $(key "$tmp/aa_half.st" data.train_transform) == "resized-crop, auto-augment ta_wide, aa-interpolation bicubic" ]] \
  && pass || fail "aa: --stop-after 1: '$(key "$tmp/aa_half.st" data.train_transform)'"
refused_run "saved with --auto-augment-interpolation bicubic, this run has bilinear" train --resume "$tmp/aa_half.st" \
  --devices 2 --auto-augment-interpolation bilinear
refused_command "eval: --interpolation: 'cubic' is not bilinear or bicubic" eval --resume "$tmp/bicubic.st" \
  --devices 1 --interpolation cubic
refused_command "predict: --interpolation: 'cubic' is not bilinear or bicubic" predict --resume "$tmp/bicubic.st" \
  --interpolation cubic "${images[@]}"
# a checkpoint of IDX data: eval and predict refuse the option in one line
"$bin" train --data "$tmp/idx" --model lenet-paddle --epochs 1 --batch-size 20 --devices 1 --quiet \
  --save "$tmp/idx.st" >/dev/null 2>&1 && pass || fail "training on IDX data"
refused_command "eval: --interpolation bicubic: only for image folders" eval --resume "$tmp/idx.st" --devices 1 \
  --interpolation bicubic
refused_command "predict: --interpolation bicubic: only for a checkpoint of an image folder" predict \
  --resume "$tmp/idx.st" --interpolation bicubic "${images[@]}"
testing_finish cli_interpolation
