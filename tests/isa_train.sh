#!/usr/bin/env bash
# isa_train.sh ISA - a short training run with the kernels capped to ISA
# (DPTRAIN_ISA), skipped (77) where this CPU cannot run ISA:
# - an unknown DPTRAIN_ISA is refused with one line;
# - the start-up line and every metrics line name the ISA, the CPU, the BLAS;
# - a network with batch norm and a residual block (tests/models/tiny_resnet.cfg)
#   learns: epoch 2's loss below epoch 1's, test accuracy at least twice chance (0.2);
# - LeNet on 2 devices gives the same loss as the portable C path
#   (DPTRAIN_ISA=generic) within float rounding (relative 1e-4) after an
#   epoch, and the same parameters after one step: every tensor of the
#   checkpoint within 1e-4 of the tensor's largest value (a kernel wrong in
#   a few outputs moves the loss less than that, the parameters it touches
#   more; measured 1.7e-7 on AVX-512 and AVX2). One step, not the epoch:
#   over many steps a pre-activation within rounding of 0 can take the other
#   side of a ReLU in one path (the epoch below: one such flip moves
#   conv2.bias by 6e-4 with AVX2 kernels), a difference of rounding, not of
#   kernels. The SIMD kernels compute what the reference computes.
source "$(dirname "$0")/testing.sh"
isa=$1
emu=(${DPTRAIN_EMULATOR:-})
run() { DPTRAIN_ISA=$1 "${emu[@]}" "$bin" "${@:2}"; }
out=$(run "$isa" version 2>&1)
if [[ $? -ne 0 ]] && grep -q "this CPU does not support it" <<<"$out"; then
  echo "skipped: $out"
  exit 77
fi

# A bad DPTRAIN_ISA: one line naming it, exit 1, nothing trained.
bad=$(run bogus train --limit 300 --epochs 1 --metrics "$tmp/bad.jsonl" 2>&1)
[[ $? -eq 1 && "$bad" == "dptrain: DPTRAIN_ISA='bogus' is not an instruction set (expected avx512, avx2, neon or generic)" &&
   ! -e "$tmp/bad.jsonl" ]] && pass || fail "DPTRAIN_ISA=bogus: $bad"

# The first 3000 training and 1000 test images of Fashion-MNIST (under an
# emulator, scripts/check_arm64.sh, 1500 and 500), as plain IDX files (the
# count in the header rewritten): the evaluation of every epoch stays short.
# LeNet's runs below compare training losses and parameters, which no
# evaluation touches: they read the same training images beside 16 test
# images ($tmp/lenet-data), so that their evaluation costs next to nothing.
subset() { # DIR NAME HEADER_BYTES RECORD_BYTES COUNT
  local full=$1/$2.full
  zcat "$data/$2.gz" | head -c $(($3 + $4 * $5)) >"$full"
  { head -c 4 "$full"
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($5 >> 24 & 255)) $(($5 >> 16 & 255)) $(($5 >> 8 & 255)) $(($5 & 255)))"
    tail -c +9 "$full"; } >"$1/$2"
  rm "$full"
}
mkdir -p "$tmp/data" "$tmp/lenet-data"
train_n=3000 test_n=1000
[[ ${#emu[@]} -gt 0 ]] && train_n=1500 test_n=500
subset "$tmp/data" train-images-idx3-ubyte 16 784 $train_n && subset "$tmp/data" train-labels-idx1-ubyte 8 1 $train_n &&
  subset "$tmp/data" t10k-images-idx3-ubyte 16 784 $test_n && subset "$tmp/data" t10k-labels-idx1-ubyte 8 1 $test_n &&
  ln -s "$tmp/data/train-images-idx3-ubyte" "$tmp/data/train-labels-idx1-ubyte" "$tmp/lenet-data/" &&
  subset "$tmp/lenet-data" t10k-images-idx3-ubyte 16 784 16 && subset "$tmp/lenet-data" t10k-labels-idx1-ubyte 8 1 16 ||
  fail "subset of $data"

common=(--batch-size 64 --devices 2)
if run "$isa" train --data "$tmp/data" "${common[@]}" --model "$DPTRAIN_TEST_DIR/models/tiny_resnet.cfg" --lr 0.1 --epochs 2 \
    --metrics "$tmp/resnet.jsonl" >"$tmp/resnet.out" 2>&1; then pass; else fail "tiny_resnet run: $(cat "$tmp/resnet.out")"; fi
grep -Eq "^kernels $isa( \(capped by DPTRAIN_ISA; best [a-z0-9]+\))? on .+, BLAS .+" "$tmp/resnet.out" && pass || fail "start-up line does not name $isa: $(head -3 "$tmp/resnet.out")"
lines=$(grep -c "\"isa\": \"$isa\", \"cpu\": \"[^\"]\+\", \"blas\": \"[^\"]\+\"}$" "$tmp/resnet.jsonl" 2>/dev/null)
[[ "$lines" == 2 ]] && pass || fail "metrics lines naming isa $isa, cpu and blas: ${lines:-0} of 2"
first=$(sed -n 1p "$tmp/resnet.jsonl") second=$(sed -n 2p "$tmp/resnet.jsonl")
awk -v a="$(json_field "$first" train_loss)" -v b="$(json_field "$second" train_loss)" \
    -v acc="$(json_field "$second" test_acc)" 'BEGIN { exit !(b < a && acc > 0.2) }' && pass \
  || fail "tiny_resnet did not learn: $first / $second"

if [[ $isa != generic ]]; then
  for path in "$isa" generic; do
    run "$path" train --data "$tmp/lenet-data" "${common[@]}" --model lenet --limit $((train_n / 3)) --lr 0.2 --epochs 1 --quiet --metrics "$tmp/lenet-$path.jsonl" \
      >/dev/null 2>&1 || fail "lenet run with DPTRAIN_ISA=$path"
  done
  a=$(json_field "$(cat "$tmp/lenet-$isa.jsonl")" train_loss) b=$(json_field "$(cat "$tmp/lenet-generic.jsonl")" train_loss)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * b) }' && pass \
    || fail "lenet loss with $isa kernels $a, portable C $b"
  for path in "$isa" generic; do
    run "$path" train --data "$tmp/lenet-data" "${common[@]}" --model lenet --limit 128 --lr 0.2 --epochs 1 --quiet --save "$tmp/step-$path.st" \
      >/dev/null 2>&1 || fail "lenet step with DPTRAIN_ISA=$path"
  done
  worst=$(close_checkpoints "$tmp/step-$isa.st" "$tmp/step-generic.st" 1e-4 2>&1) && pass \
    || fail "lenet parameters after a step with $isa kernels against portable C: worst ${worst:-none} (want <= 1e-4)"
  echo "isa_train_$isa: lenet parameters after a step against portable C: worst $worst (of the tensor's largest value)"
fi
testing_finish "isa_train_$isa"
