#!/usr/bin/env bash
# cli_resume_options.sh - `dptrain train --resume FILE` alone continues the
# run as it was saved (cli/train_resume.c), on Fashion-MNIST's first 640
# training images (the default data: a plain resume names none):
# - a run stopped with --stop-after 1, then `train --resume FILE` with no
#   other option, ends in the checkpoint of the uninterrupted run, byte for
#   byte: momentum + Nesterov + weight decay, cosine with a warm-up across
#   the stop, batch 64, seed 3, --limit 600, --augment crop:2,flip, the
#   model file lenet-paddle; Adam + step decay + --accumulate 2; AdamW
#   with its default weight decay (0.01, not listed in the line) and with
#   --weight-decay 0 (listed, kept: not replaced by the default, another
#   run than the default's); and tests/models/tiny_resnet.cfg with
#   --sync-batch-norm;
# - the line says what came from the checkpoint, all of it, and nothing at
#   its defaults; --quiet prints no such line;
# - an option given that contradicts the checkpoint is refused in one line
#   (--batch-size, --seed, --limit, --optimizer, --lr-schedule, --epochs of
#   a cosine schedule; --optimizer adamw for an adam checkpoint), exit 1,
#   the checkpoint untouched, nothing written;
#   another --lr is still allowed with its warning;
# - a checkpoint of an older dptrain (no epochs_planned, no accumulate)
#   resumes: a cosine schedule's length is its --epochs (the same bytes),
#   a constant one's is the default, and the line says so;
# - a finished run's plain resume trains nothing and leaves the file as it
#   was; --init (a new run from the weights) takes none of the options;
# - the data folder (data.dir, absolute) is taken: an image-folder run
#   (with --normalize, which the line names too) resumes from another
#   directory to the same bytes, eval reads it, and
#   a folder that moved is one line naming it (--data of the new place
#   resumes);
# - where it saves is not taken: without --save a resume warns and leaves
#   its file as it was.
# The devices are the default (one CPU device per core) in every run, so
# the plain resume has the same count.
source "$(dirname "$0")/testing.sh"
# refused LABEL PART STATUS ERR: exit status 1, exactly one line on stderr, containing PART
refused() {
  [[ $3 -eq 1 && $(wc -l <"$4") -eq 1 ]] && grep -qF -- "$2" "$4" && pass \
    || fail "$1: status $3, stderr: $(head -c 400 "$4") (expected one line with '$2')"
}
models="$(cd "$(dirname "$0")" && pwd)/models"
cd "$tmp" || exit 1
run=(--model lenet-paddle --optimizer momentum --nesterov --lr 0.05 --weight-decay 0.0001 --lr-schedule cosine
     --warmup-steps 13 --batch-size 64 --seed 3 --limit 600 --augment crop:2,flip --epochs 2)

# --- (a) --stop-after 1, then --resume alone: the uninterrupted run's bytes --------------------------
"$bin" train "${run[@]}" --save straight.st >straight.out 2>&1 && pass || fail "straight: $(tail -3 straight.out)"
"$bin" train "${run[@]}" --stop-after 1 --save ck.st >stopped.out 2>&1 && pass || fail "stopped: $(tail -3 stopped.out)"
cp ck.st one.st
"$bin" train --resume ck.st --save resumed.st >resumed.out 2>&1 && pass || fail "plain resume: $(tail -3 resumed.out)"
cmp straight.st resumed.st && pass || fail "--stop-after 1 + --resume alone and the uninterrupted run differ"
cmp -s one.st ck.st && grep -q "^epoch 2/2: " resumed.out && ! grep -q "^epoch 1/2" resumed.out && pass \
  || fail "the plain resume did not train epoch 2: $(cat resumed.out)"
! grep -q "warning" resumed.out && pass || fail "the plain resume warned: $(cat resumed.out)"
[[ "$(grep "^epoch 2/2" straight.out | sed -E 's/, [0-9.]+ sec.*//')" == \
   "$(grep "^epoch 2/2" resumed.out | sed -E 's/, [0-9.]+ sec.*//')" ]] && pass \
  || fail "epoch 2's line: straight $(grep "^epoch 2/2" straight.out), resumed $(grep "^epoch 2/2" resumed.out)"

# --- (c) the line: every option taken, none at its default; the first line agrees --------------------
expected="resuming ck.st with its run's options: --optimizer momentum --lr 0.05 --weight-decay 0.0001 --nesterov"
expected+=" --lr-schedule cosine --warmup-steps 13 --epochs 2 --batch-size 64 --seed 3 --limit 600"
expected+=" --augment crop:2,flip (the checkpoint's; give an option to change it where a resume allows)"
[[ "$(grep "^resuming ck.st with" resumed.out)" == "$expected" ]] && pass \
  || fail "the options line: $(grep "^resuming" resumed.out) (expected: $expected)"
grep -q "^training lenet-paddle on 600 images (test 10000), batch 64, momentum, lr 0.05 (cosine), 2 epochs, seed 3," \
  resumed.out && pass || fail "the first line of the plain resume: $(head -1 resumed.out)"
cp one.st quiet.st
"$bin" train --resume quiet.st --save quiet.st --quiet >quiet.out 2>&1 && [[ $(wc -l <quiet.out) -eq 1 ]] \
  && cmp -s quiet.st straight.st \
  && pass || fail "--resume --quiet: $(cat quiet.out)"

# --- Adam, step decay, a warm-up in epochs, --accumulate 2 -------------------------------------------
adam=(--model lenet --optimizer adam --lr 0.002 --beta2 0.99 --lr-schedule step --lr-step-epochs 1 --lr-gamma 0.5
      --warmup-epochs 0.5 --batch-size 32 --accumulate 2 --seed 7 --limit 640 --epochs 2)
"$bin" train "${adam[@]}" --save adam-straight.st --quiet >adam.out 2>&1 \
  && "$bin" train "${adam[@]}" --stop-after 1 --save adam.st --quiet >>adam.out 2>&1 \
  && "$bin" train --resume adam.st --save adam-resumed.st >adam-resumed.out 2>&1 && pass || fail "adam runs: $(tail -3 adam.out adam-resumed.out)"
cmp adam-straight.st adam-resumed.st && pass || fail "adam + --accumulate 2: --resume alone and the uninterrupted run differ"
grep -qx "resuming adam.st with its run's options: --optimizer adam --lr 0.002 --beta2 0.99 --lr-schedule step \
--lr-step-epochs 1 --lr-gamma 0.5 --warmup-epochs 0.5 --epochs 2 --batch-size 32 --accumulate 2 --seed 7 --limit 640 \
(.*)" adam-resumed.out && pass || fail "adam's options line: $(grep "^resuming" adam-resumed.out)"
"$bin" inspect adam.st | grep -qx "  accumulate = 2" && "$bin" inspect adam.st | grep -qx "  epochs_planned = 2" \
  && pass || fail "inspect: accumulate, epochs_planned: $("$bin" inspect adam.st | grep -E "accumulate|planned")"

# --- AdamW: torch's default weight decay 0.01 (not given, not listed), and --weight-decay 0 (listed, kept) -----
adamw=(--model lenet --optimizer adamw --lr 0.003 --batch-size 64 --seed 4 --limit 640 --epochs 2)
for wd in default 0; do
  given=(); [[ $wd == 0 ]] && given=(--weight-decay 0)
  "$bin" train "${adamw[@]}" "${given[@]}" --save "adamw-$wd-straight.st" --quiet >"adamw-$wd.out" 2>&1 \
    && "$bin" train "${adamw[@]}" "${given[@]}" --stop-after 1 --save "adamw-$wd.st" --quiet >>"adamw-$wd.out" 2>&1 \
    && "$bin" train --resume "adamw-$wd.st" --save "adamw-$wd-resumed.st" >"adamw-$wd-resumed.out" 2>&1 && pass \
    || fail "adamw ($wd weight decay) runs: $(tail -3 "adamw-$wd.out" "adamw-$wd-resumed.out")"
  cmp "adamw-$wd-straight.st" "adamw-$wd-resumed.st" && ! grep -q warning "adamw-$wd-resumed.out" && pass \
    || fail "adamw ($wd weight decay): --resume alone and the uninterrupted run differ"
done
grep -qx "resuming adamw-default.st with its run's options: --optimizer adamw --lr 0.003 --epochs 2 --batch-size 64 \
--seed 4 --limit 640 (.*)" adamw-default-resumed.out && pass \
  || fail "adamw's options line: $(grep "^resuming" adamw-default-resumed.out)"
grep -qx "resuming adamw-0.st with its run's options: --optimizer adamw --lr 0.003 --weight-decay 0 --epochs 2 \
--batch-size 64 --seed 4 --limit 640 (.*)" adamw-0-resumed.out && pass \
  || fail "adamw --weight-decay 0's options line: $(grep "^resuming" adamw-0-resumed.out)"
! same_tensors adamw-default-straight.st adamw-0-straight.st && pass || fail "adamw: --weight-decay 0 is the default's run"
cp adam.st refuse.st
"$bin" train --resume refuse.st --optimizer adamw >/dev/null 2>err
refused "--resume of an adam checkpoint with --optimizer adamw" "saved with optimizer 'adam', this run uses 'adamw'" $? err
cmp -s adam.st refuse.st && pass || fail "--optimizer adamw changed the adam checkpoint"

# --- synchronised batch norm (tests/models/tiny_resnet.cfg: batch norm, dropout, a residual block) ---------
bn=(--model "$models/tiny_resnet.cfg" --sync-batch-norm --optimizer adam --lr 0.01
    --batch-size 64 --limit 640 --seed 5 --epochs 2)
"$bin" train "${bn[@]}" --save bn-straight.st --quiet >bn.out 2>&1 \
  && "$bin" train "${bn[@]}" --stop-after 1 --save bn.st --quiet >>bn.out 2>&1 \
  && "$bin" train --resume bn.st --save bn-resumed.st >bn-resumed.out 2>&1 && pass || fail "sync-bn runs: $(tail -3 bn.out bn-resumed.out)"
cmp bn-straight.st bn-resumed.st && grep -q "^resuming bn.st with its run's options: .* --sync-batch-norm " bn-resumed.out \
  && pass || fail "--sync-batch-norm: --resume alone and the uninterrupted run differ: $(grep "^resuming" bn-resumed.out)"

# --- (b) a given option that contradicts the checkpoint: one line, exit 1, nothing written ------------
for change in "--batch-size 32:saved with --batch-size 64, this run has 32" \
              "--seed 4:saved with --seed 3, this run has 4" \
              "--limit 500:saved with training-set size (--limit) 600, this run has 500" \
              "--optimizer adam:saved with optimizer 'momentum', this run uses 'adam'" \
              "--lr-schedule constant:saved with --lr-schedule cosine, this run has constant" \
              "--epochs 3:saved with --epochs (the length of the cosine schedule) 2, this run has 3"; do
  cp one.st refuse.st
  "$bin" train --resume refuse.st ${change%%:*} >/dev/null 2>err
  refused "--resume with ${change%%:*}" "${change#*:}" $? err
  cmp -s one.st refuse.st && pass || fail "--resume with ${change%%:*} changed the checkpoint"
done
[[ -z $(find . -name '*.tmp.*') ]] && pass || fail "temporary files left: $(ls)"
# allowed as before: another --lr, with the resume's warning
cp one.st lr.st
"$bin" train --resume lr.st --lr 0.01 >lr.out 2>lr.err && grep -q "^epoch 2/2" lr.out \
  && grep -q "warning: --resume lr.st: saved with lr 0.0500000007, .*; continuing with lr 0.00999999978" lr.err \
  && ! grep -q -- "--lr 0.05" lr.out && pass || fail "--resume with another --lr: $(cat lr.err lr.out)"

# --- (d) a checkpoint of an older dptrain: no epochs_planned, no accumulate ---------------------------
without_meta one.st older.st epochs_planned accumulate
"$bin" inspect older.st | grep -qE "epochs_planned|accumulate" && fail "without_meta left the keys" || pass
"$bin" train --resume older.st --save older-out.st >older.out 2>&1 && cmp straight.st older-out.st && pass \
  || fail "an older cosine checkpoint: $(tail -3 older.out)"
grep -q "^resuming older.st with its run's options: .* --epochs 2 " older.out && ! grep -q "is the default" older.out \
  && pass || fail "an older cosine checkpoint's line: $(grep "^resuming" older.out)"
plain=(--model lenet --lr 0.1 --batch-size 64 --limit 640 --seed 1)
"$bin" train "${plain[@]}" --epochs 2 --save constant-straight.st --quiet >/dev/null 2>&1 \
  && "$bin" train "${plain[@]}" --epochs 2 --stop-after 1 --save constant.st --quiet >/dev/null 2>&1 \
  && without_meta constant.st older-constant.st epochs_planned accumulate \
  && "$bin" train --resume older-constant.st --stop-after 2 >older-constant.out 2>&1 && pass \
  || fail "an older constant checkpoint: $(tail -3 older-constant.out)"
grep -qx "resuming older-constant.st with its run's options: --lr 0.1 --batch-size 64 --seed 1 --limit 640 \
(the checkpoint's; give an option to change it where a resume allows); --epochs 10 is the default: \
older-constant.st (of an older dptrain) does not record its run's (give --epochs N)" older-constant.out && pass \
  || fail "an older constant checkpoint's line: $(grep "^resuming" older-constant.out)"
without_meta constant.st older-constant.st epochs_planned accumulate
"$bin" train --resume older-constant.st --epochs 2 --save older-constant2.st --quiet >/dev/null 2>&1 \
  && cmp constant-straight.st older-constant2.st \
  && pass || fail "an older constant checkpoint with --epochs 2 and the uninterrupted run differ"

# --- without --save: a warning, and the file it resumes is never replaced -----------------------------
cp one.st nosave.st
"$bin" train --resume nosave.st --stop-after 2 >nosave.out 2>nosave.err && grep -q "^epoch 2/2: " nosave.out \
  && [[ $(grep -c "^dptrain: warning: train: --resume nosave.st without --save: this run saves no checkpoint (give --save nosave.st to go on saving there, or --save ANOTHER)$" nosave.err) -eq 1 ]] \
  && cmp -s one.st nosave.st && [[ -z $(find . -name 'nosave.st.*') ]] && pass \
  || fail "a resume without --save: $(cat nosave.err) $(cmp one.st nosave.st)"

# --- the run's data folder (data.dir): a plain resume and eval read it; moved, one line names it ----------
"/usr/bin/python3" "$(dirname "$0")/../tools/idx_to_image_folder.py" "$data" folder --format png --limit-train 120 \
  --limit-test 20 >/dev/null 2>&1 || fail "making the PNG folder"
pics=(--model lenet-paddle --data folder --batch-size 20 --seed 2 --epochs 2 --normalize 0.5,0.25)
"$bin" train "${pics[@]}" --save pics-straight.st --quiet >/dev/null 2>&1 \
  && "$bin" train "${pics[@]}" --stop-after 1 --save pics.st --quiet >/dev/null 2>&1 \
  && mkdir elsewhere && (cd elsewhere && "$bin" train --resume ../pics.st --save ../pics-resumed.st >../pics.out 2>&1) \
  && cmp pics-straight.st pics-resumed.st && pass || fail "a plain resume of an image-folder run: $(tail -3 pics.out)"
"$bin" inspect pics.st | grep -qx "  data.dir = $tmp/folder" && grep -q "^resuming ../pics.st with its run's options: .* --data $tmp/folder --normalize 0.5,0.25 (the checkpoint's" pics.out \
  && pass || fail "data.dir: $("$bin" inspect pics.st | grep data.dir) $(grep "^resuming" pics.out)"
(cd elsewhere && "$bin" eval --resume ../pics.st >../pics-eval.out 2>&1) && grep -q "^test acc: .* on 20 images, " pics-eval.out \
  && pass || fail "eval without --data: $(cat pics-eval.out)"
mv folder moved
for command in "train --resume pics.st --save pics-moved.st" "eval --resume pics.st"; do
  "$bin" $command >/dev/null 2>err
  refused "${command%% *} with the data folder moved" "pics.st was trained on the data in $tmp/folder (its data.dir), which is not found here: give that data's folder with --data DIR" $? err
done
[[ ! -e pics-moved.st ]] && "$bin" train --resume pics.st --data moved --save pics-moved.st --quiet >/dev/null 2>&1 \
  && "$bin" inspect pics-moved.st | grep -qx "  data.dir = $tmp/moved" \
  && same_tensors pics-straight.st pics-moved.st && pass || fail "a resume with --data of the moved folder"

# --- a finished run: nothing to train, the file as it was; --init takes no option ---------------------
cp straight.st done.st
"$bin" train --resume done.st >done.out 2>&1 && grep -q "has 2 epochs, --epochs 2: nothing to train" done.out \
  && cmp -s straight.st done.st && pass || fail "a finished run's plain resume: $(cat done.out)"
"$bin" train --model lenet-paddle --init one.st --epochs 1 --limit 256 --save init.st >init.out 2>&1 \
  && grep -q "^training lenet-paddle on 256 images (test 10000), batch 256, sgd, lr 0.2 (constant; the default of sgd), 1 epoch, seed 0," \
     init.out && ! grep -q "with its run's options" init.out && pass || fail "--init: $(head -4 init.out)"

testing_finish cli_resume_options
