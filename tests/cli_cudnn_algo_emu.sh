#!/usr/bin/env bash
# cli_cudnn_algo_emu.sh - the cuDNN convolution plans of the CUDA backend
# (ops_cuda.c: descriptors made once per shape, algorithms chosen once per
# shape by cuDNN's heuristics) on the CUDA emulator, whose heuristics list
# traps first (a non-deterministic algorithm, one with tensor-op math, one
# with a 1 TiB workspace, for some shapes one NOT_SUPPORTED) and whose
# convolutions abort with one line when handed one (emu_cudnn.c). Skipped
# (77) in a build without CUDA. Checks:
# - LeNet, every_layer.cfg (dilated and grouped conv, transposed conv, 1x1
#   conv, residual) and tiny_resnet.cfg (strided convs, 1x1 shortcut) train
#   with the heuristics (DPTRAIN_CUDNN_ALGO=heuristic: every run here names
#   its mode, but the default's) without springing a trap, and give the
#   bits of DPTRAIN_CUDNN_ALGO=fixed (the emulator's algorithms all compute
#   alike: what differs is only which one is called); the fixed runs ask the
#   heuristics nothing, the heuristic ones do; DPTRAIN_CUDNN_ALGO_LOG says
#   one line per choice (a heuristic result, or the fixed one and why).
#   (emu_test_cuda_ops runs every op fixture, 1-D to 3-D convs and
#   transposed convs, through the heuristics too.)
# - descriptors are made once per shape: runs of 2 and 4 steps create the
#   same number of cuDNN descriptors and ask the heuristics as often;
# - --tf32 takes the tensor-op result (allowed there) and trains;
# - the forward's bias and ReLU inside cuDNN's fused call give the bits of
#   the separate pass (DPTRAIN_CONV_EPILOGUE=own), and so does the plain
#   call where cuDNN refuses the fused one; the calls are counted;
# - NOT_SUPPORTED fallback: with every algorithm but the fixed ones refused
#   (some at the workspace query, some at the call), training passes over
#   the refused ones and gives the same bits;
# - a shape with no algorithm left (forward, transposed forward, weight
#   gradient refused for every algorithm): one stderr line naming the GPU
#   and the convolution, non-zero exit; DPTRAIN_CUDNN_ALGO=bogus and
#   DPTRAIN_CONV_EPILOGUE=bogus and DPTRAIN_CONV_DIRECT=bogus: one line naming the variable, its values
#   and the value, before training starts (nothing on stdout).
# - DPTRAIN_CONV_DIRECT=on: LeNet's conv1 forward in dptrain's own direct
#   kernel (no cuDNN choice or fused call for it), the checkpoint within
#   1e-4 of cuDNN's run and not its bits;
# - the default is measured: a LeNet run with DPTRAIN_CUDNN_ALGO unset times
#   its choices, writes them to DPTRAIN_CUDNN_ALGO_CACHE and gives the bits
#   of fixed;
# - DPTRAIN_CUDNN_ALGO=measured: cudnnFind* once per shape and direction
#   (the emulator times its traps fastest: none is taken), the same bits as
#   fixed; the choices go to the cache file (XDG_CACHE_HOME/dptrain/cudnn-algos
#   or DPTRAIN_CUDNN_ALGO_CACHE) and the next run takes the same ones from it
#   without a find query (the emulator's statistics line counts them); a
#   fresh measurement chooses the same; a corrupt file: one warning line,
#   measured again, the file rewritten and taken by the next run.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
unset DPTRAIN_CUDNN_ALGO_CACHE DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED
export DPTRAIN_CUDNN_ALGO=heuristic # the plans' heuristic mode; the runs of the other modes name theirs
small_data "$tmp/data" 384 100
models=$(dirname "$0")/models
common=(train --data "$tmp/data" --limit 192 --batch-size 96 --lr 0.1 --seed 3 --epochs 1 --quiet)
# stat NAME FIELD: a count of the emulator's cuDNN line (FIELD descriptors, heuristic or refused)
stat() {
  local n
  case $2 in descriptors) n=1 ;; heuristic) n=2 ;; refused) n=3 ;; esac
  sed -nE "s/^cuda emulator: cuDNN: ([0-9]+) descriptors created, ([0-9]+) heuristic queries, ([0-9]+) calls refused.*/\\$n/p" \
    "$tmp/$1.out"
}
# run NAME MODEL ENV... -- ARGS...: one training run on cuda:0 with the emulator's statistics
run() {
  local name=$1 model=$2 envs=()
  shift 2
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  env DPTRAIN_CUDA_EMU_STATS=1 DPTRAIN_CUDNN_ALGO_LOG=1 "${envs[@]}" "$bin" "${common[@]}" --model "$model" --devices cuda:0 \
    --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1 \
    && pass || fail "$name: $(grep -vE '^cuda emulator: ([0-9]+ kernel|cuDNN:)' "$tmp/$name.out" | tail -2)"
}

# heuristic = fixed, bit for bit; no trap sprung (a trap aborts the run)
for model in lenet "$models/every_layer.cfg" "$models/tiny_resnet.cfg"; do
  name=$(basename "$model" .cfg)
  run "$name-heuristic" "$model"
  run "$name-fixed" "$model" DPTRAIN_CUDNN_ALGO=fixed
  same_run "$name-heuristic" "$name-fixed"
  [[ $(stat "$name-heuristic" heuristic) -gt 0 && $(stat "$name-fixed" heuristic) -eq 0 ]] && pass \
    || fail "$name: heuristic queries $(stat "$name-heuristic" heuristic) (want > 0), fixed $(stat "$name-fixed" heuristic) (want 0)"
  # DPTRAIN_CUDNN_ALGO_LOG: a line per choice, from the heuristics (each query had a qualifying result) or fixed
  chose=$(grep -cE '^cuda:0: cuDNN conv(_transpose)? (forward|backward data|backward filter) of x .*: algorithm [0-9]+, heuristic result [0-9]+ of [0-9]+, [0-9]+ qualified$' "$tmp/$name-heuristic.out")
  fixed=$(grep -c ': algorithm [0-9]*, the fixed one: DPTRAIN_CUDNN_ALGO=fixed$' "$tmp/$name-fixed.out")
  [[ $chose -eq $(stat "$name-heuristic" heuristic) && $fixed -eq $chose ]] && pass \
    || fail "$name: DPTRAIN_CUDNN_ALGO_LOG: $chose heuristic choices for $(stat "$name-heuristic" heuristic) queries, $fixed fixed ones"
done
# the forward's epilogue (conv_cuda.c: bias and ReLU inside cudnnConvolutionBiasActivationForward) gives the bits
# of the separate bias_act pass (DPTRAIN_CONV_EPILOGUE=own): with the ReLU where the forward algorithm is
# IMPLICIT_PRECOMP_GEMM (the fixed one: LeNet's convs, all with a ReLU), the bias alone before a batch norm
# (tiny_resnet, heuristic); refused by cuDNN (the emulator's "fused"): the plain call, the same bits
fused() { sed -nE 's/^cuda emulator: cuDNN: .* ([0-9]+) fused with a bias \(([0-9]+) with a ReLU\).*/\1 \2/p' "$tmp/$1.out"; }
run lenet-own lenet DPTRAIN_CUDNN_ALGO=fixed DPTRAIN_CONV_EPILOGUE=own
run lenet-unfused lenet DPTRAIN_CUDNN_ALGO=fixed DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED=fused
run tiny_resnet-own "$models/tiny_resnet.cfg" DPTRAIN_CONV_EPILOGUE=own
same_run lenet-fixed lenet-own
same_run lenet-fixed lenet-unfused
same_run tiny_resnet-heuristic tiny_resnet-own
read -r all relu <<<"$(fused lenet-fixed)"
[[ -n "$relu" && $relu -gt 0 && $relu == "$all" ]] && pass || fail "lenet, fixed: fused calls '$(fused lenet-fixed)' (want all with a ReLU)"
read -r all relu <<<"$(fused tiny_resnet-heuristic)"
[[ -n "$all" && $all -gt 0 && $relu == 0 ]] && pass \
  || fail "tiny_resnet: fused calls '$(fused tiny_resnet-heuristic)' (want some, none with a ReLU)"
[[ $(fused lenet-own) == "0 0" && $(fused tiny_resnet-own) == "0 0" && $(fused lenet-unfused) == "0 0" ]] && pass \
  || fail "DPTRAIN_CONV_EPILOGUE=own or refused: fused calls '$(fused lenet-own)', '$(fused tiny_resnet-own)', '$(fused lenet-unfused)'"
[[ $(stat lenet-unfused refused) -gt 0 ]] && pass || fail "lenet: the fused calls were not refused"
echo "cli_cudnn_algo_emu: fused with a bias (with a ReLU): lenet fixed $(fused lenet-fixed), tiny_resnet $(fused tiny_resnet-heuristic)"

# DPTRAIN_CONV_DIRECT=on: LeNet's conv1 (1x3x3: 9 taps) runs its forward, bias and ReLU in dptrain's own kernel
# (conv_direct.cu): no cuDNN forward choice for its shape, half the fused calls (conv2's, 20x5x5, keep cuDNN's);
# the backward stays cuDNN's; another summation order, so the checkpoint within 1e-4 of cuDNN's, not its bits
run lenet-direct lenet DPTRAIN_CUDNN_ALGO=fixed DPTRAIN_CONV_DIRECT=on
conv1_fwd='cuDNN conv forward of x 96x1x28x28 '
[[ $(grep -c "$conv1_fwd" "$tmp/lenet-fixed.out") -eq 1 && $(grep -c "$conv1_fwd" "$tmp/lenet-direct.out") -eq 0 ]] \
  && pass || fail "DPTRAIN_CONV_DIRECT=on: conv1's forward still chose a cuDNN algorithm"
read -r all_fixed _ <<<"$(fused lenet-fixed)"
read -r all_direct _ <<<"$(fused lenet-direct)"
[[ -n "$all_direct" && $all_direct -gt 0 && $((2 * all_direct)) -eq $all_fixed ]] && pass \
  || fail "DPTRAIN_CONV_DIRECT=on: fused calls $all_direct against $all_fixed (want half: conv2's alone)"
close=$(close_checkpoints "$tmp/lenet-direct.st" "$tmp/lenet-fixed.st" 1e-4) && pass \
  || fail "DPTRAIN_CONV_DIRECT=on: checkpoint off cuDNN's run's: $close"
same_tensors "$tmp/lenet-direct.st" "$tmp/lenet-fixed.st" && fail "DPTRAIN_CONV_DIRECT=on: cuDNN's bits (direct kernel not run?)"
echo "cli_cudnn_algo_emu: DPTRAIN_CONV_DIRECT=on against cuDNN (fixed): worst tensor $close"

echo "cli_cudnn_algo_emu: every_layer, 2 steps: $(stat every_layer-heuristic descriptors) cuDNN descriptors," \
  "$(stat every_layer-heuristic heuristic) heuristic queries"

# descriptors once per shape: 4 steps make no more than 2
run every_layer-4steps "$models/every_layer.cfg" -- --limit 384
for field in descriptors heuristic; do
  two=$(stat every_layer-heuristic $field) four=$(stat every_layer-4steps $field)
  [[ -n "$two" && "$two" -gt 0 && "$two" == "$four" ]] && pass \
    || fail "every_layer: $field: $two in 2 steps, $four in 4 (want the same: none per step after the first)"
done

# --tf32: tensor-op math allowed, the run trains
run every_layer-tf32 "$models/every_layer.cfg" -- --tf32

# NOT_SUPPORTED fallback: every algorithm but the fixed ones refused, at the query or (@run) at the call
refuse=fwd:0,fwd:2,fwd:3@run,fwd:4,fwd:5,fwd:6@run,fwd:7
refuse+=,bwd_data:0@run,bwd_data:2,bwd_data:3,bwd_data:4@run,bwd_data:5
refuse+=,bwd_filter:0,bwd_filter:2@run,bwd_filter:3,bwd_filter:4,bwd_filter:5@run,bwd_filter:6
run every_layer-refused "$models/every_layer.cfg" DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED=$refuse
same_run every_layer-refused every_layer-fixed
[[ $(stat every_layer-refused refused) -gt 0 ]] && pass \
  || fail "every_layer: no call refused as not supported with DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED=$refuse"

# one_line_error WHAT MODEL PATTERN ENV...: non-zero exit, one stderr line matching PATTERN
one_line_error() {
  local what=$1 model=$2 pattern=$3
  shift 3
  env "$@" "$bin" "${common[@]}" --model "$model" --devices cuda:0 >"$tmp/out" 2>"$tmp/err"
  local status=$?
  [[ $status -ne 0 && $status -lt 128 ]] && pass || fail "$what: exit status $status ($(tail -2 "$tmp/err"))"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] && pass || fail "$what: want one stderr line, got: $(cat "$tmp/err")"
  grep -qE "$pattern" "$tmp/err" && pass || fail "$what: stderr '$(cat "$tmp/err")' lacks /$pattern/"
}
left="no cuDNN algorithm left for the convolution of"
one_line_error "no forward algorithm" lenet \
  "cuda:0: conv forward: $left x 96x1x28x28 by w [0-9]+x1x[0-9x]+ \(pad .*\): [0-9]+ tried, the last said CUDNN_STATUS_NOT_SUPPORTED$" \
  DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED='fwd:*'
one_line_error "no transposed forward algorithm" "$models/every_layer.cfg" \
  "cuda:0: conv_transpose forward: $left .*groups 1\): [0-9]+ tried" DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED='bwd_data:*'
one_line_error "no weight gradient algorithm" lenet "cuda:0: conv weight gradient: $left .*CUDNN_STATUS_NOT_SUPPORTED$" \
  DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED='bwd_filter:*@run'
# a bad setting is refused when the GPU is opened, before training starts (nothing on stdout)
one_line_error "DPTRAIN_CONV_EPILOGUE=bogus" lenet \
  "^dptrain: DPTRAIN_CONV_EPILOGUE must be cudnn \(the default\) or own, found 'bogus'$" DPTRAIN_CONV_EPILOGUE=bogus
# refused_before_start VAR=VALUE: the same run without --quiet prints no training line (refused before it)
refused_before_start() {
  env "$1" "$bin" train --data "$tmp/data" --limit 192 --batch-size 96 --lr 0.1 --seed 3 --epochs 1 --model lenet \
    --devices cuda:0 >"$tmp/loud.out" 2>/dev/null && fail "$1: trained"
  ! grep -qE '^(training|epoch) ' "$tmp/loud.out" && pass || fail "$1: refused after the start: $(head -2 "$tmp/loud.out")"
}
refused_before_start DPTRAIN_CONV_EPILOGUE=bogus
one_line_error "DPTRAIN_CONV_DIRECT=bogus" lenet \
  "^dptrain: DPTRAIN_CONV_DIRECT must be on or off \(the default\), found 'bogus'$" DPTRAIN_CONV_DIRECT=bogus
refused_before_start DPTRAIN_CONV_DIRECT=bogus
one_line_error "DPTRAIN_CUDNN_ALGO=bogus" lenet \
  "^dptrain: DPTRAIN_CUDNN_ALGO must be measured \(the default\), heuristic or fixed, found 'bogus'$" \
  DPTRAIN_CUDNN_ALGO=bogus
refused_before_start DPTRAIN_CUDNN_ALGO=bogus

# a measured choice's log line: the time and workspace of the one taken, then the fastest result the workspace
# limit alone shut out (every shape's: the emulator's trap of 1 TiB is among its fastest results; the limit on
# the emulator's 4 GiB GPU: its floor, 256 MiB, since its tensors are small)
measured_line=': algorithm [0-9]+, measured: the fastest of [0-9]+ qualified of [0-9]+, [0-9.]+ ms, [0-9]+ MiB of workspace; '\
'algorithm [0-9]+, [0-9.]+ ms, needs 1048576 MiB, over the limit of 256 MiB$'
# the default (DPTRAIN_CUDNN_ALGO empty, as unset): measured, into the cache file; the bits of fixed
run lenet-default lenet DPTRAIN_CUDNN_ALGO= DPTRAIN_CUDNN_ALGO_CACHE="$tmp/default-cache"
same_run lenet-default lenet-fixed
timed=$(grep -cE "$measured_line" "$tmp/lenet-default.out")
[[ $timed -gt 0 && $(stat lenet-default heuristic) -eq 0 && $(($(wc -l <"$tmp/default-cache") - 1)) -eq $timed ]] && pass \
  || fail "the default: $timed measured choices, $(stat lenet-default heuristic) heuristic queries, cache: $(head -2 "$tmp/default-cache" 2>&1)"
# measured: cudnnFind* once per shape and direction (the emulator's fastest results are its traps: the filter
# passes over them), the choice kept in the cache file and taken from there by the next run (no find query)
cache=$tmp/cache/dptrain/cudnn-algos
choices() { grep -oE '^cuda:0: cuDNN .*: algorithm [0-9]+' "$tmp/$1.out"; }
run every_layer-measured "$models/every_layer.cfg" DPTRAIN_CUDNN_ALGO=measured XDG_CACHE_HOME="$tmp/cache"
same_run every_layer-measured every_layer-fixed
finds=$(sed -nE 's/^cuda emulator: cuDNN: .* ([0-9]+) find queries$/\1/p' "$tmp/every_layer-measured.out")
measured=$(grep -cE "$measured_line" "$tmp/every_layer-measured.out")
[[ -n "$finds" && $finds -gt 0 && $finds -eq $measured && $(stat every_layer-measured heuristic) -eq 0 ]] && pass \
  || fail "measured: $finds find queries, $measured measured choices, $(stat every_layer-measured heuristic) heuristic queries"
[[ $(head -1 "$cache" 2>/dev/null) == "dptrain cuDNN algorithms 1" && $(($(wc -l <"$cache") - 1)) -eq $measured ]] && pass \
  || fail "measured: the cache file $cache: $(head -3 "$cache" 2>&1)"
grep -qP '^dptrain CUDA emulator GPU 0\|cuDNN [0-9]+\|conv x 96x8x14x14 by w .*\|(forward|backward data|backward filter)\t[0-9]+$' "$cache" \
  && pass || fail "measured: the cache's keys: $(sed -n 2p "$cache")"
# the next run: the same choices, from the file; no find query
run every_layer-cached "$models/every_layer.cfg" DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$cache"
[[ $(sed -nE 's/^cuda emulator: cuDNN: .* ([0-9]+) find queries$/\1/p' "$tmp/every_layer-cached.out") == 0 ]] && pass \
  || fail "cached: $(grep 'find queries' "$tmp/every_layer-cached.out")"
diff <(choices every_layer-measured) <(choices every_layer-cached) >/dev/null && pass || fail "cached: other choices than measured"
[[ $(grep -c ', measured before (' "$tmp/every_layer-cached.out") -eq $measured ]] && pass \
  || fail "cached: $(grep -c ', measured before (' "$tmp/every_layer-cached.out") choices from the file, want $measured"
# measured again from scratch: the same choices (the measurement is deterministic here)
run every_layer-remeasured "$models/every_layer.cfg" DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$tmp/other-cache"
diff <(choices every_layer-measured) <(choices every_layer-remeasured) >/dev/null && pass \
  || fail "measured twice: other choices"
# a corrupt cache: one warning line, measured again, the file rewritten (the next run measures nothing)
printf 'dptrain cuDNN algorithms 1\nnot a choice\n' >"$cache"
run every_layer-corrupt "$models/every_layer.cfg" DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$cache"
[[ $(grep -c '^dptrain: warning: ' "$tmp/every_layer-corrupt.out") -eq 1 ]] && grep -qF \
  "dptrain: warning: $cache: line 2 is not a cuDNN algorithm choice (\"dptrain cuDNN algorithms 1\" first, then KEY<tab>ALGO lines): the file is ignored, and the algorithms are measured again" \
  "$tmp/every_layer-corrupt.out" && pass || fail "corrupt cache: $(grep -i warning "$tmp/every_layer-corrupt.out")"
[[ $(grep -c ', measured: the fastest' "$tmp/every_layer-corrupt.out") -eq $measured ]] && pass \
  || fail "corrupt cache: not measured again"
run every_layer-rewritten "$models/every_layer.cfg" DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$cache"
[[ $(sed -nE 's/^cuda emulator: cuDNN: .* ([0-9]+) find queries$/\1/p' "$tmp/every_layer-rewritten.out") == 0 ]] && \
  ! grep -q warning "$tmp/every_layer-rewritten.out" && pass || fail "the rewritten cache was not taken"
testing_finish cli_cudnn_algo_emu
