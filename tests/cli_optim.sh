#!/usr/bin/env bash
# cli_optim.sh - `dptrain train --optimizer ... --lr-schedule ...` end to end
# on a small cut of Fashion-MNIST (the first 1,200 training and 300 test
# images, written as IDX files here so that loading takes no time):
# - every optimizer trains lenet-paddle for 3 epochs (batch 50, 24 steps per
#   epoch) and the mean training loss of epoch 3 is below 0.85 x that of
#   epoch 1 (measured ratios: see the output; a broken update keeps the loss
#   near ln 10 = 2.30 or makes it NaN);
# - adam and adamw on 2 devices follow 1 device (float sums in another order);
# - adamw without --weight-decay is torch's 0.01 (the same bits as
#   --weight-decay 0.01, the first line says so), and --weight-decay 0 is
#   none (the same bits as adam without weight decay);
# - the per-epoch lr in the metrics follows the schedule;
# - --label-smoothing 0.1 trains another loss than without (named on the
#   first line, each epoch's line, the metrics and the checkpoint), a run
#   stopped and resumed without the option takes it (the resume's line
#   names it) and ends in the straight run's checkpoint bytes; another
#   value on resume, or on a checkpoint without it, is refused; --init
#   does not take it; values outside [0, 1) are refused in one line;
# - --norm-weight-decay / --bias-weight-decay: after one step the weights
#   are decayed as --weight-decay says, biases and batch norm's tensors as
#   their group's (0: the undecayed run's bits); saved, named on the first
#   line, taken by a resume (= the straight run's bytes); bad values refused.
source "$(dirname "$0")/testing.sh"

small_data "$tmp/small" 1200 300

base=(train --model lenet-paddle --data "$tmp/small" --epochs 3 --batch-size 50 --seed 2 --devices 1 --quiet)
for run in "sgd --lr 0.1" "momentum --lr 0.02" "momentum --lr 0.02 --nesterov --weight-decay 0.0005" \
           "adagrad --lr 0.01" "adam --lr 0.002 --beta1 0.8 --beta2 0.99 --eps 1e-7" "adamw --lr 0.002" \
           "adamw --lr 0.002 --weight-decay 0.05 --beta2 0.99 --eps 1e-7"; do
  name=$(tr ' ' '_' <<<"$run")
  # shellcheck disable=SC2086
  "$bin" "${base[@]}" --optimizer $run --metrics "$tmp/$name.jsonl" >/dev/null 2>"$tmp/$name.err" \
    && pass || fail "--optimizer $run: $(cat "$tmp/$name.err")"
  first=$(json_field "$(sed -n 1p "$tmp/$name.jsonl")" train_loss)
  last=$(json_field "$(sed -n 3p "$tmp/$name.jsonl")" train_loss)
  echo "--optimizer $run: loss epoch 1 $first, epoch 3 $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b < 0.85 * a) }' && pass \
    || fail "--optimizer $run: the loss did not go down ($first -> $last)"
done

# adam and adamw: 2 devices against 1 (the same global batches; the gradient sums differ in float order)
for run in "adam --lr 0.002 --beta1 0.8 --beta2 0.99 --eps 1e-7" \
           "adamw --lr 0.002 --weight-decay 0.05 --beta2 0.99 --eps 1e-7"; do
  name=$(tr ' ' '_' <<<"$run") kind=${run%% *}
  # shellcheck disable=SC2086
  "$bin" "${base[@]}" --optimizer $run --devices 2 --metrics "$tmp/${kind}2.jsonl" >/dev/null 2>&1 && pass \
    || fail "$kind on 2 devices"
  for epoch in 1 3; do
    one=$(json_field "$(sed -n ${epoch}p "$tmp/$name.jsonl")" train_loss)
    two=$(json_field "$(sed -n ${epoch}p "$tmp/${kind}2.jsonl")" train_loss)
    echo "$kind epoch $epoch: loss $one on 1 device, $two on 2"
    awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-3 * a) }' && pass \
      || fail "$kind epoch $epoch: 2 devices $two vs 1 device $one"
  done
done

# adamw's weight decay: not given, torch's 0.01; --weight-decay 0, none (adam's update without decay): one
# epoch each, their parameters and optimizer states compared bit for bit
one_epoch() { # NAME ARGS...: one epoch of the base run, saved as $tmp/NAME.st
  local name=$1; shift
  "$bin" "${base[@]}" --epochs 1 "$@" --save "$tmp/$name.st" >/dev/null 2>"$tmp/$name.err" && pass \
    || fail "$name: $(cat "$tmp/$name.err")"
}
one_epoch adamw-default --optimizer adamw --lr 0.002
one_epoch adamw-001 --optimizer adamw --lr 0.002 --weight-decay 0.01
one_epoch adamw-0 --optimizer adamw --lr 0.002 --weight-decay 0
one_epoch adam-plain --optimizer adam --lr 0.002
same_tensors "$tmp/adamw-default.st" "$tmp/adamw-001.st" && pass \
  || fail "adamw without --weight-decay differs from --weight-decay 0.01"
same_tensors "$tmp/adamw-0.st" "$tmp/adam-plain.st" && ! same_tensors "$tmp/adamw-0.st" "$tmp/adamw-default.st" && pass \
  || fail "adamw --weight-decay 0 is not adam without decay, or is adamw's default"
"$bin" inspect "$tmp/adamw-default.st" | grep -qx "  optimizer.weight_decay = 0.00999999978" \
  && "$bin" inspect "$tmp/adamw-0.st" | grep -qx "  optimizer.weight_decay = 0" && pass \
  || fail "inspect: adamw's weight decay $("$bin" inspect "$tmp/adamw-default.st" | grep weight_decay)"

# The schedule is applied: a warm-up changes the run; a step schedule that
# never decays within the run gives the constant run's bits.
check_same() { # NAME EXPECT(same|different) ARGS... against the sgd --lr 0.1 run above
  local name=$1 expect=$2; shift 2
  "$bin" "${base[@]}" "$@" --metrics "$tmp/$name.jsonl" >/dev/null 2>&1
  local a b; a=$(json_field "$(sed -n 1p "$tmp/sgd_--lr_0.1.jsonl")" train_loss)
  b=$(json_field "$(sed -n 1p "$tmp/$name.jsonl")" train_loss)
  if [[ -n "$b" && ( ( $expect == same && "$a" == "$b" ) || ( $expect == different && "$a" != "$b" ) ) ]]; then pass
  else fail "$name: epoch 1 loss $b, constant lr $a (expected $expect)"; fi
}
check_same warmup-applied different --lr 0.1 --warmup-steps 30
check_same no-decay same --lr 0.1 --lr-schedule step --lr-step-epochs 5

# lr per epoch (the lr of the epoch's last step; 24 steps per epoch)
lrs() { sed -E 's/.*"lr": *([^,}]*).*/\1/' "$1" | tr '\n' ' '; }
check_lrs() { # NAME EXPECTED(space-separated, awk-comparable) ARGS...
  local name=$1 expected=$2; shift 2
  "$bin" "${base[@]}" "$@" --metrics "$tmp/$name.jsonl" >/dev/null 2>"$tmp/$name.err" || { fail "$name: $(cat "$tmp/$name.err")"; return; }
  local got; got=$(lrs "$tmp/$name.jsonl")
  awk -v got="$got" -v want="$expected" 'BEGIN { n = split(got, g, " "); m = split(want, w, " ");
    if (n != m) exit 1; for (i = 1; i <= n; i++) { d = g[i] - w[i]; if (d < 0) d = -d; if (d > 1e-7 * w[i] + 1e-12) exit 1 } }' \
    && pass || fail "$name: lr per epoch $got, expected $expected"
}
check_lrs step "0.1 0.1 0.05" --lr 0.1 --lr-schedule step --lr-step-epochs 2 --lr-gamma 0.5
# cosine over 72 steps to 0.01: the last step of epoch e is t = 24 e - 1
check_lrs cosine "$(awk 'BEGIN { for (e = 1; e <= 3; e++) printf "%.12g ", 0.01 + 0.19 * (1 + cos(3.141592653589793 * (24 * e - 1) / 72)) / 2 }')" \
  --lr 0.2 --lr-schedule cosine --lr-min 0.01
# warm-up of 30 steps: epoch 1 ends at step 23 -> 24/30 of the lr
check_lrs warmup "0.08 0.1 0.1" --lr 0.1 --warmup-steps 30 --epochs 3
# 1.5 epochs = 36 steps; the step decay every 2 epochs counts from step 0
check_lrs warmup-epochs "0.0333333333333 0.05 0.025" --optimizer adam --lr 0.05 --warmup-epochs 1.5 \
  --lr-schedule step --lr-step-epochs 2 --lr-gamma 0.5
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 1 --optimizer adam --lr 0.003 \
  --lr-schedule cosine 2>/dev/null | grep -q "training lenet-paddle .*adam, lr 0.003 (cosine)" && pass || fail "first line names the optimizer"
first=$("$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 1 --optimizer adamw \
  2>/dev/null | head -1)
[[ "$first" == *", batch 50, adamw, weight decay 0.01 (the default of adamw), lr 0.001 (constant; the default of adamw), "* ]] \
  && pass || fail "adamw's first line: $first"
first=$("$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 1 --optimizer adamw \
  --weight-decay 0 --lr 0.002 2>/dev/null | head -1)
[[ "$first" == *", batch 50, adamw, weight decay 0, lr 0.002 (constant), "* ]] && pass || fail "adamw --weight-decay 0's first line: $first"
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 1 --lr 0.1 --warmup-steps 48 \
  2>/dev/null | grep -q "^epoch 1/1: loss .*, lr 0.05, " && pass || fail "per-epoch line shows the lr"

# a warm-up longer than the run, or one that rounds to no step: a warning (the run goes on); one that fits: none
warm=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 50 --devices 1 --quiet)
"$bin" "${warm[@]}" --warmup-epochs 3 >/dev/null 2>"$tmp/warm.err" \
  && [[ "$(cat "$tmp/warm.err")" == "dptrain: warning: train: --warmup-epochs 3 is 72 steps, more than the run's 48 (2 epochs of 24): the learning rate never reaches its scheduled value" ]] \
  && pass || fail "a warm-up longer than the run: $(cat "$tmp/warm.err")"
"$bin" "${warm[@]}" --warmup-epochs 0.01 >/dev/null 2>"$tmp/warm.err" \
  && [[ "$(cat "$tmp/warm.err")" == "dptrain: warning: train: --warmup-epochs 0.01 rounds to no step (24 steps an epoch): the run has no warm-up" ]] \
  && pass || fail "a warm-up of no step: $(cat "$tmp/warm.err")"
"$bin" "${warm[@]}" --warmup-steps 48 >/dev/null 2>"$tmp/warm.err" && [[ ! -s "$tmp/warm.err" ]] && pass \
  || fail "a warm-up as long as the run warned: $(cat "$tmp/warm.err")"

# --- label smoothing -------------------------------------------------------------------
# one_line_refusal LABEL PART ARGS...: exit status 1, one line on stderr containing PART, nothing saved
one_line_refusal() {
  local label=$1 part=$2
  shift 2
  rm -f "$tmp/never.st"
  "$bin" "$@" --save "$tmp/never.st" >"$tmp/ls.out" 2>"$tmp/ls.err"
  [[ $? -eq 1 && $(wc -l <"$tmp/ls.err") -eq 1 && ! -s "$tmp/ls.out" && ! -e "$tmp/never.st" ]] \
    && grep -qF -- "$part" "$tmp/ls.err" && pass || fail "$label: stderr $(cat "$tmp/ls.err") (expected one line with '$part')"
}
smooth=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 50 --seed 2 --lr 0.1 --devices 2)
"$bin" "${smooth[@]}" --label-smoothing 0.1 --save "$tmp/ls_a.st" --metrics "$tmp/ls_a.jsonl" >"$tmp/ls_a.out" 2>&1 \
  && pass || fail "--label-smoothing 0.1: $(tail -3 "$tmp/ls_a.out")"
"$bin" "${smooth[@]}" --save "$tmp/ls_plain.st" --metrics "$tmp/ls_plain.jsonl" >"$tmp/ls_plain.out" 2>&1 \
  && pass || fail "without --label-smoothing: $(tail -3 "$tmp/ls_plain.out")"
grep -q "^training lenet-paddle .*, seed 2, label smoothing 0.1, precision fp32, " "$tmp/ls_a.out" && pass \
  || fail "the first line does not name the label smoothing: $(head -1 "$tmp/ls_a.out")"
grep -q "^epoch 2/2: loss [0-9.]* (label smoothing 0.1), train acc " "$tmp/ls_a.out" && pass \
  || fail "the epoch line does not say the loss is smoothed: $(grep '^epoch' "$tmp/ls_a.out")"
! grep -q "smoothing" "$tmp/ls_plain.out" && pass || fail "a run without it names label smoothing"
smoothed=$(json_field "$(sed -n 1p "$tmp/ls_a.jsonl")" train_loss)
plain=$(json_field "$(sed -n 1p "$tmp/ls_plain.jsonl")" train_loss)
echo "--label-smoothing 0.1: loss epoch 1 $smoothed (without: $plain)"
[[ -n "$smoothed" && -n "$plain" && "$smoothed" != "$plain" ]] && pass || fail "smoothed loss $smoothed, plain $plain"
# the smoothed loss is a cross-entropy against 0.91/0.01 targets: never below their entropy, 0.500
awk -v l="$smoothed" 'BEGIN { exit !(l > 0.5 && l < 2.5) }' && pass || fail "smoothed loss $smoothed out of range"
[[ "$(json_field "$(sed -n 2p "$tmp/ls_a.jsonl")" label_smoothing)" == 0.1 ]] && ! grep -q label_smoothing \
  "$tmp/ls_plain.jsonl" && pass || fail "metrics: $(sed -n 2p "$tmp/ls_a.jsonl")"
"$bin" inspect "$tmp/ls_a.st" | grep -qx "  label_smoothing = 0.1" && pass \
  || fail "checkpoint: $("$bin" inspect "$tmp/ls_a.st" | grep -i smooth)"
! "$bin" inspect "$tmp/ls_plain.st" | grep -q label_smoothing && pass || fail "a checkpoint without it records it"
# stopped after epoch 1, resumed without the option: the straight run's bytes
"$bin" "${smooth[@]}" --label-smoothing 0.1 --stop-after 1 --save "$tmp/ls_b.st" >"$tmp/ls_b1.out" 2>&1 && pass \
  || fail "--stop-after 1: $(tail -3 "$tmp/ls_b1.out")"
"$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/ls_b.st" --save "$tmp/ls_b.st" >"$tmp/ls_b2.out" 2>&1 \
  && pass || fail "resume: $(tail -3 "$tmp/ls_b2.out")"
grep -q "^resuming $tmp/ls_b.st with its run's options:.* --label-smoothing 0.1[ (]" "$tmp/ls_b2.out" && pass \
  || fail "the resume's line does not name --label-smoothing 0.1: $(grep resuming "$tmp/ls_b2.out")"
grep -q "^epoch 2/2: loss [0-9.]* (label smoothing 0.1), " "$tmp/ls_b2.out" && pass || fail "resumed epoch line"
cmp "$tmp/ls_a.st" "$tmp/ls_b.st" && pass || fail "--label-smoothing: 2 straight epochs and 1 + resume + 1 differ"
# the loss is the run's: another value, or 0, refused; so is smoothing on a checkpoint without it (an older
# file's, or a plain run's)
one_line_refusal "resume with another value" "saved with --label-smoothing 0.1, this run has 0.2" \
  train --data "$tmp/small" --devices 2 --epochs 3 --resume "$tmp/ls_a.st" --label-smoothing 0.2
one_line_refusal "resume with 0" "saved with --label-smoothing 0.1, this run has 0 (" \
  train --data "$tmp/small" --devices 2 --epochs 3 --resume "$tmp/ls_a.st" --label-smoothing 0
one_line_refusal "resume of a plain run with it" "saved with --label-smoothing 0, this run has 0.1 (" \
  train --data "$tmp/small" --devices 2 --epochs 3 --resume "$tmp/ls_plain.st" --label-smoothing 0.1
# --init is a new run: the file's smoothing is not taken
"$bin" train --model lenet-paddle --data "$tmp/small" --epochs 1 --batch-size 50 --devices 1 --init "$tmp/ls_a.st" \
  --save "$tmp/ls_init.st" >"$tmp/ls_init.out" 2>&1 && ! grep -q smoothing "$tmp/ls_init.out" \
  && ! "$bin" inspect "$tmp/ls_init.st" | grep -q label_smoothing && pass \
  || fail "--init took the label smoothing: $(cat "$tmp/ls_init.out")"
for bad in 1 1.5 -0.1 0.99999999; do
  one_line_refusal "--label-smoothing $bad" "train: --label-smoothing must be in [0, 1) (0: none, 0.1 as torchvision's recipes), found" \
    "${smooth[@]}" --epochs 1 --label-smoothing "$bad"
done
one_line_refusal "--label-smoothing nan" "train: --label-smoothing: 'nan' is not a number" "${smooth[@]}" --label-smoothing nan

# --- weight-decay groups (--norm-weight-decay, --bias-weight-decay) ---------------------
# A model with a biased conv, batch norm and a biased linear layer; after one step (the same gradients)
# the weights decay as --weight-decay says, the biases and batch norm's tensors as the group's decay
# says (0 here: the run without any decay's bits); the options are saved and a resume takes them.
cat >"$tmp/bn.cfg" <<'CFG'
[net]
name = bn-small
channels = 1
height = 28
width = 28
init = torch

[conv]
name = conv1
filters = 4
size = 5
stride = 2

[batchnorm]
name = bn1

[relu]

[flatten]

[linear]
name = fc
out = 10
CFG
wd=(train --model "$tmp/bn.cfg" --data "$tmp/small" --epochs 1 --limit 50 --batch-size 50 --seed 2 --devices 2
    --optimizer adamw --lr 0.01 --quiet)
"$bin" "${wd[@]}" --weight-decay 0.3 --save "$tmp/wd_plain.st" >/dev/null 2>"$tmp/wd.err" && pass || fail "wd_plain: $(cat "$tmp/wd.err")"
"$bin" "${wd[@]}" --weight-decay 0 --save "$tmp/wd_none.st" >/dev/null 2>"$tmp/wd.err" && pass || fail "wd_none: $(cat "$tmp/wd.err")"
"$bin" "${wd[@]}" --weight-decay 0.3 --norm-weight-decay 0 --bias-weight-decay 0 --save "$tmp/wd_groups.st" \
  >/dev/null 2>"$tmp/wd.err" && pass || fail "wd_groups: $(cat "$tmp/wd.err")"
tensor() { # FILE NAME: the tensor's bytes in hex
  /usr/bin/python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
s, e = json.loads(b[8:8 + n])[sys.argv[2]]["data_offsets"]; print(b[8 + n + s:8 + n + e].hex())' "$1" "$2"
}
for name in conv1.weight fc.weight; do
  [[ "$(tensor "$tmp/wd_groups.st" $name)" == "$(tensor "$tmp/wd_plain.st" $name)" ]] && pass \
    || fail "$name: not decayed by --weight-decay with the groups given"
done
for name in conv1.bias bn1.weight fc.bias; do
  [[ "$(tensor "$tmp/wd_groups.st" $name)" == "$(tensor "$tmp/wd_none.st" $name)" &&
     "$(tensor "$tmp/wd_plain.st" $name)" != "$(tensor "$tmp/wd_none.st" $name)" ]] && pass \
    || fail "$name: not the undecayed run's with its group's decay 0 (or the decay changes nothing)"
done
"$bin" inspect "$tmp/wd_groups.st" | grep -qx "  optimizer.norm_weight_decay = 0" \
  && "$bin" inspect "$tmp/wd_groups.st" | grep -qx "  optimizer.bias_weight_decay = 0" \
  && ! "$bin" inspect "$tmp/wd_plain.st" | grep -q "norm_weight_decay" && pass \
  || fail "checkpoint keys: $("$bin" inspect "$tmp/wd_groups.st" | grep weight_decay)"
first=$("$bin" "${wd[@]:0:${#wd[@]}-1}" --norm-weight-decay 0 2>/dev/null | head -1) # without --quiet
[[ "$first" == *", adamw, weight decay 0.01 (the default of adamw), norm layers 0, lr 0.01 "* ]] && pass \
  || fail "first line with --norm-weight-decay: $first"
# stopped after epoch 1 of 2 and resumed without the options: they are taken (named), and the bytes are the straight run's
"$bin" "${wd[@]}" --epochs 2 --weight-decay 0.3 --norm-weight-decay 0.05 --save "$tmp/wd_a.st" >/dev/null 2>&1 && pass \
  || fail "wd_a"
"$bin" "${wd[@]}" --epochs 2 --weight-decay 0.3 --norm-weight-decay 0.05 --stop-after 1 --save "$tmp/wd_b.st" \
  >/dev/null 2>&1 && pass || fail "wd_b"
"$bin" train --data "$tmp/small" --devices 2 --resume "$tmp/wd_b.st" --save "$tmp/wd_b.st" >"$tmp/wd_b.out" 2>&1 \
  && grep -q "^resuming $tmp/wd_b.st with its run's options:.* --norm-weight-decay 0.05[ (]" "$tmp/wd_b.out" && pass \
  || fail "the resume does not name --norm-weight-decay 0.05: $(grep -E 'resuming|dptrain' "$tmp/wd_b.out")"
cmp "$tmp/wd_a.st" "$tmp/wd_b.st" && pass || fail "--norm-weight-decay: 2 straight epochs and 1 + resume + 1 differ"
one_line_refusal "--norm-weight-decay -1" "train: --norm-weight-decay must be >= 0, found -1" "${wd[@]}" --norm-weight-decay -1
one_line_refusal "--bias-weight-decay -0.5" "train: --bias-weight-decay must be >= 0, found -0.5" "${wd[@]}" --bias-weight-decay -0.5
one_line_refusal "--bias-weight-decay inf" "train: --bias-weight-decay: 'inf' is not a number" "${wd[@]}" --bias-weight-decay inf

echo "cli_optim: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
