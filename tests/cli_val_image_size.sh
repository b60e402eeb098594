#!/usr/bin/env bash
# cli_val_image_size.sh - `train --val-image-size`: train at one input size,
# test every epoch at another (FixRes: torchvision's --train-crop-size 176
# --val-crop-size 224), on a small network with global average pooling
# trained at 16 x 16 and tested at 24 x 24 (3 classes) on a folder of colour
# gradients:
# - the oracle: each epoch's test figures (the metrics' test_acc and, with
#   --model-ema, test_acc_ema) are `eval --resume CK` of the checkpoint that
#   epoch saved, which tests at the recorded size by default (", input
#   24x24 (resize 27)", data.val_image_size 24x24) and `eval --ema`;
#   `eval --image-size 16` (the training size) counts otherwise here, so the
#   check can tell the sizes apart; --save-best keeps the epoch of the best
#   figure at 24; --resize 30 gives "resize 30", the epoch's figure again;
#   on 6 classes of random images the epoch's top-5 figure is eval's at 24
#   (and not at 16);
# - 1 device, 2 devices, 2 ranks under mpirun (a build with MPI) and 2
#   emulated GPUs (a build with CUDA) give the same figures; a run stopped
#   after epoch 1 and resumed (which keeps the size) gives the
#   uninterrupted run's figures and tensors; predict tests at 24 by
#   default, as --image-size 24 does;
# - the training size itself is that size: no second network, no key, the
#   figure eval at 16 counts;
# - refused in one line, exit 1, nothing written: a network whose
#   parameters depend on the size (LeNet's fc1), IDX data, a value that is
#   not N or HxW, a resume at another size.
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3

"$py" "$src/tests/gradient_image_folder.py" "$tmp/data" 1 20 48 && pass || fail "making the image folder"
cat >"$tmp/tiny.cfg" <<'CFG'
[net]
name = tiny
channels = 3
height = 16
width = 16
[conv]
name = conv1
filters = 16
size = 3
pad = 1
bias = 0
[batchnorm]
name = bn1
[relu]
[conv]
name = conv2
filters = 32
size = 3
stride = 2
pad = 1
bias = 0
[batchnorm]
name = bn2
[relu]
[global_avgpool]
[flatten]
[linear]
name = fc
out = 3
CFG
common=(train --data "$tmp/data" --model "$tmp/tiny.cfg"
        --epochs 2 --batch-size 10 --lr 0.05 --seed 1 --sync-batch-norm --model-ema --model-ema-steps 1 --quiet)
val=(--val-image-size 24)
saved_run a "${common[@]}" "${val[@]}" --devices 1 --metrics "$tmp/a.jsonl" --save-best "$tmp/best.st"
saved_run d2 "${common[@]}" "${val[@]}" --devices 2 --metrics "$tmp/d2.jsonl"
saved_run half "${common[@]}" "${val[@]}" --devices 1 --metrics "$tmp/half.jsonl" --stop-after 1
saved_run resumed train --resume "$tmp/half.st" --devices 1 --quiet --metrics "$tmp/resumed.jsonl"

# count FILE EPOCH FIELD: the metrics' figure of that epoch as a count of the 18 test images
count() { "$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; \
print(round([x for x in r if x['epoch']==int(sys.argv[2])][0][sys.argv[3]]*18))" "$@"; }
# eval_count ARGS...: eval's correct count (its line in $tmp/eval.out)
eval_count() {
  "$bin" eval "$@" >"$tmp/eval.out" 2>&1 || { fail "eval $*: $(cat "$tmp/eval.out")"; return; }
  sed -nE '1s/^test acc: [0-9.]+ \(([0-9]+)\/18 correct\).*/\1/p' "$tmp/eval.out"
}

[[ $(meta_value "$tmp/a.st" data.val_image_size) == 24x24 && $(meta_value "$tmp/a.st" data.transform) == "resize 27" ]] \
  && pass || fail "a's keys: $(meta_value "$tmp/a.st" data.val_image_size), $(meta_value "$tmp/a.st" data.transform)"
at24=$(eval_count --resume "$tmp/a.st")
[[ $(head -1 "$tmp/eval.out") == *", epoch 2, $tmp/a.st, input 24x24 (resize 27)" ]] && pass \
  || fail "eval's default size: $(head -1 "$tmp/eval.out")"
[[ -n $at24 && $at24 == "$(count "$tmp/a.jsonl" 2 test_acc)" ]] && pass \
  || fail "epoch 2's test_acc ($(count "$tmp/a.jsonl" 2 test_acc)/18) is not eval's at 24 ($at24/18)"
at16=$(eval_count --resume "$tmp/a.st" --image-size 16)
[[ -n $at16 && $at16 != "$at24" ]] && pass || fail "eval at 16 ($at16) and 24 ($at24) count alike: no test of the size"
ema=$(eval_count --resume "$tmp/a.st" --ema)
[[ -n $ema && $ema == "$(count "$tmp/a.jsonl" 2 test_acc_ema)" ]] && pass \
  || fail "epoch 2's test_acc_ema ($(count "$tmp/a.jsonl" 2 test_acc_ema)/18) is not eval --ema's ($ema/18)"
epoch1=$(eval_count --resume "$tmp/half.st")
[[ -n $epoch1 && $epoch1 == "$(count "$tmp/a.jsonl" 1 test_acc)" ]] && pass \
  || fail "epoch 1's test_acc ($(count "$tmp/a.jsonl" 1 test_acc)/18) is not eval's of its checkpoint ($epoch1/18)"
best_epoch=$("$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; \
print(max(r, key=lambda x: (x['test_acc'], -x['epoch']))['epoch'])" "$tmp/a.jsonl")
best=$(eval_count --resume "$tmp/best.st")
[[ -n $best && $best == "$(count "$tmp/a.jsonl" "$best_epoch" test_acc)" ]] \
  && grep -q ", epoch $best_epoch, " "$tmp/eval.out" && pass \
  || fail "--save-best: $(head -1 "$tmp/eval.out"), the metrics' best epoch $best_epoch"

# the same figures on 2 devices, under mpirun, and resumed
same_figures() {
  local e f
  for e in 1 2; do
    for f in test_acc test_acc_ema; do
      [[ $(count "$tmp/$1.jsonl" $e $f) == "$(count "$tmp/a.jsonl" $e $f)" ]] && pass \
        || fail "$1: epoch $e's $f $(count "$tmp/$1.jsonl" $e $f)/18, 1 device's $(count "$tmp/a.jsonl" $e $f)/18"
    done
  done
}
same_figures d2
"$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert [x['epoch'] for x in r] == [2]" \
  "$tmp/resumed.jsonl" && pass || fail "the resumed run's metrics: $(cat "$tmp/resumed.jsonl")"
cat "$tmp/half.jsonl" "$tmp/resumed.jsonl" >"$tmp/both.jsonl"
same_figures both
same_tensors "$tmp/a.st" "$tmp/resumed.st" && pass || fail "the resumed run's tensors are not the uninterrupted run's"
[[ $(meta_value "$tmp/resumed.st" data.val_image_size) == 24x24 ]] && pass || fail "the resume did not keep the size"
if ldd "$bin" 2>/dev/null | grep -q libmpi && command -v mpirun >/dev/null; then # a build with MPI
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${common[@]}" "${val[@]}" --devices 1 \
    --metrics "$tmp/mpi.jsonl" --save "$tmp/mpi.st" >"$tmp/mpi.out" 2>&1 && pass \
    || fail "mpirun -np 2: $(tail -3 "$tmp/mpi.out")"
  same_figures mpi
  [[ $(eval_count --resume "$tmp/mpi.st") == "$(count "$tmp/mpi.jsonl" 2 test_acc)" ]] && pass \
    || fail "mpirun -np 2: epoch 2's figure is not eval's"
fi
emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then # a build with CUDA: 2 emulated GPUs give the same figures, eval on one of them too
  DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2 "$bin" "${common[@]}" "${val[@]}" --devices cuda:0,cuda:1 \
    --metrics "$tmp/gpus.jsonl" --save "$tmp/gpus.st" >"$tmp/gpus.out" 2>&1 && pass \
    || fail "2 emulated GPUs: $(tail -3 "$tmp/gpus.out")"
  same_figures gpus
  [[ $(DPTRAIN_CUDA_MODULE=$emu eval_count --resume "$tmp/gpus.st" --devices cuda:0) == \
     "$(count "$tmp/gpus.jsonl" 2 test_acc)" ]] && pass || fail "2 emulated GPUs: epoch 2's figure is not eval's"
fi

# predict tests at the recorded size, as --image-size 24 does
"$bin" predict --resume "$tmp/a.st" --json --logits "$tmp/data/test" >"$tmp/p.jsonl" 2>"$tmp/p.err" \
  && "$bin" predict --resume "$tmp/a.st" --image-size 24 --json --logits "$tmp/data/test" >"$tmp/p24.jsonl" \
  2>/dev/null && [[ -s "$tmp/p.jsonl" ]] && cmp -s "$tmp/p.jsonl" "$tmp/p24.jsonl" \
  && [[ $(cat "$tmp/p.err") == "dptrain: predict: input 24x24 (resize 27)" ]] && pass \
  || fail "predict's default size: $(cat "$tmp/p.err")"

# the first line names the test's size (common without its last option, --quiet)
"$bin" "${common[@]:0:${#common[@]}-1}" "${val[@]}" --devices 1 --epochs 1 >"$tmp/line.out" 2>&1 \
  && [[ $(head -1 "$tmp/line.out") == "training $tmp/tiny.cfg on 90 images (test 18 at 24x24), batch 10,"* ]] && pass \
  || fail "the first line: $(head -1 "$tmp/line.out")"

# --resize 30: the test images' shorter side, recorded and applied by eval
saved_run r30 "${common[@]}" "${val[@]}" --devices 2 --epochs 1 --resize 30 --metrics "$tmp/r30.jsonl"
r30=$(eval_count --resume "$tmp/r30.st")
[[ $(meta_value "$tmp/r30.st" data.transform) == "resize 30" && $(head -1 "$tmp/eval.out") == *"input 24x24 (resize 30)" ]] \
  && [[ -n $r30 && $r30 == "$(count "$tmp/r30.jsonl" 1 test_acc)" ]] && pass \
  || fail "--resize 30: $(head -1 "$tmp/eval.out"), the epoch's $(count "$tmp/r30.jsonl" 1 test_acc)/18"

# top-5 (6 classes of random images): the epoch's test_acc5 is eval's top-5 at 24, which at 16 counts otherwise
"$py" "$src/tests/random_image_folder.py" "$tmp/six" 24 12 6 40x48,36x36 && sed 's/^out = 3$/out = 6/' "$tmp/tiny.cfg" \
  >"$tmp/tiny6.cfg" && pass || fail "making the 6-class folder"
saved_run top5 train --data "$tmp/six" --model "$tmp/tiny6.cfg" --epochs 2 --batch-size 8 --lr 0.05 --seed 1 \
  --devices 2 --val-image-size 24 --metrics "$tmp/top5.jsonl" --quiet
top5() { "$bin" eval --resume "$tmp/top5.st" "$@" 2>&1 | sed -nE 's/^top-5 acc: [0-9.]+ \(([0-9]+)\/12 in the top 5\)$/\1/p'; }
acc5=$("$py" -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readlines()[-1])['test_acc5']*12))" \
  "$tmp/top5.jsonl")
[[ -n $acc5 && $(top5) == "$acc5" && $(top5 --image-size 16) != "$acc5" ]] && pass \
  || fail "top-5: the epoch's $acc5/12, eval's at 24 $(top5)/12, at 16 $(top5 --image-size 16)/12"

# the training size: that size, no key; its figure is eval's at 16
saved_run same "${common[@]}" --val-image-size 16x16 --devices 2 --epochs 1 --metrics "$tmp/same.jsonl"
same=$(eval_count --resume "$tmp/same.st")
[[ -z $(meta_value "$tmp/same.st" data.val_image_size) && -n $same && $same == "$(count "$tmp/same.jsonl" 1 test_acc)" ]] \
  && [[ $(head -1 "$tmp/eval.out") != *input* ]] && pass \
  || fail "--val-image-size 16x16: $(meta_value "$tmp/same.st" data.val_image_size), $(head -1 "$tmp/eval.out")"

# refusals: one line, exit 1, nothing written
refused_run "layer fc1 depends on the input size" train --data "$tmp/data" --model lenet --val-image-size 40 --epochs 1
small_data "$tmp/small" 20 10
refused_run "train: --val-image-size 32: the data in $tmp/small has images of 28 x 28" train --data "$tmp/small" \
  --model "$tmp/tiny.cfg" --val-image-size 32 --epochs 1
for bad in 0 abc 24x 70000; do
  refused_run "train: --val-image-size: '$bad' is not N or HxW" "${common[@]}" --val-image-size "$bad"
done
refused_run "its run tested every epoch at --val-image-size 24x24, this one would at --val-image-size 20x20" \
  train --resume "$tmp/half.st" --val-image-size 20 --quiet
refused_run "tested every epoch at --val-image-size 24x24, this one would at the model's input size" \
  train --resume "$tmp/half.st" --val-image-size 16 --quiet

testing_finish cli_val_image_size
