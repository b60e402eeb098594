#!/usr/bin/env bash
# cli_fit_example.sh - the dp_fit example (examples/fit_lenet.c): 1 epoch
# on 2 devices writes a checkpoint and a metrics line whose numbers are the
# printed ones; run again with 2 epochs it resumes and trains only epoch 2,
# ending byte-identical to 2 epochs straight; run again it has nothing to
# train; 0 devices is refused.
source "$(dirname "$0")/testing.sh"
example=$(dirname "$bin")/fit_lenet
cd "$tmp"
out=$("$example" 2 1 1000 a.safetensors a.jsonl 2>&1) && pass || fail "1 epoch: $out"
echo "$out"
line=$(head -1 a.jsonl)
printed=$(grep '^epoch 1/1:' <<<"$out")
loss=$(printf '%.4f' "$(json_field "$line" train_loss)")
[[ -n "$printed" && "$printed" == *"loss $loss,"* && $(wc -l <a.jsonl) -eq 1 ]] && pass ||
  fail "metrics '$line' against printed '$printed'"
[[ -s a.safetensors ]] && pass || fail "no checkpoint"
out=$("$example" 2 2 1000 a.safetensors a.jsonl 2>&1) && pass || fail "resume: $out"
echo "$out"
[[ $(grep -c '^epoch' <<<"$out") -eq 1 && "$out" == *"epoch 2/2:"* && $(wc -l <a.jsonl) -eq 2 ]] && pass ||
  fail "the resumed run did not train only epoch 2"
"$example" 2 2 1000 b.safetensors >/dev/null 2>&1 && pass || fail "2 epochs straight"
cmp -s a.safetensors b.safetensors && pass || fail "1 + 1 resumed epochs differ from 2 straight"
out=$("$example" 2 2 1000 a.safetensors 2>&1)
[[ "$out" == *"already has 2 epochs: test acc: "* && "$out" != *"epoch "[0-9]* ]] && pass ||
  fail "a finished checkpoint trained again: $out"
"$example" 0 >/dev/null 2>&1 && fail "0 devices accepted" || pass
testing_finish cli_fit_example
