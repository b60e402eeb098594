#!/usr/bin/env bash
# cli_forward_liveness.sh - the layers no backward reads run in memory
# their outputs leave as they die (src/nn/no_grad.c; the default) against
# every output kept until the step ends (DPTRAIN_FORWARD_LIVENESS=off), end
# to end:
# - on CPU devices (tiny_resnet: batch norm, a route, a residual add over
#   a batch norm's output, dropout; 2 devices, 2 epochs): nothing frozen,
#   --freeze stem,stem_bn,block.conv1,block.bn1 (an output a route after the
#   frozen prefix reads) and --freeze-backbone (dropout and the residual in
#   the prefix): checkpoints byte for byte the same, and each epoch's
#   train_loss and test_acc (the evaluation runs every layer through the
#   runner) the same in the metrics file; `dptrain eval` of the checkpoint
#   prints the same line, `dptrain predict` of 12 PNGs the same logits;
# - `dptrain eval` of models/resnet18.cfg on 200 images in one forward:
#   its peak resident memory on is under half of it off (197 against 540
#   MiB when written); (an evaluation after full training steps runs in the
#   step's arena, which holds enough already: cli_cuda_vmm_emu's peak);
# - on the CUDA emulator (builds with CUDA), with --freeze-backbone: cuda:0
#   with step graphs (still launched as graphs), bf16 channels-last, and 2
#   emulated GPUs summing with NCCL: the same bits on and off; one step of
#   models/resnet18.cfg at batch 16 has a lower device memory peak (the
#   metrics' device_mem_peak_bytes) on than off (both printed; 76 against
#   106 MB when written: the parameters are a third of it);
# - DPTRAIN_FORWARD_LIVENESS=maybe is refused in one line naming it, with a
#   non-zero exit and no checkpoint or metrics written (train, and predict).
# (The predictor's logits with the runner are test_predict's: bit for bit
# those of dp_model_forward without it.)
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
small_data "$tmp/data" 192 40
common=(train --data "$tmp/data" --batch-size 32 --lr 0.05 --seed 5 --model "$src/tests/models/tiny_resnet.cfg" --quiet)

# run NAME MODE ARGS...: a run with DPTRAIN_FORWARD_LIVENESS=MODE saving $tmp/NAME.st and $tmp/NAME.jsonl
run() { mode_run DPTRAIN_FORWARD_LIVENESS "$@"; }
# figures FILE: each epoch's train_loss and test_acc
figures() { while read -r line; do echo "$(json_field "$line" train_loss) $(json_field "$line" test_acc)"; done <"$1"; }

# both NAME ARGS...: NAME-on and NAME-off; the same tensors, and the same figures
both() {
  local name=$1
  shift
  run "$name-on" on "$@"
  run "$name-off" off "$@"
  same_tensors "$tmp/$name-on.st" "$tmp/$name-off.st" && pass || fail "$name: on and off differ"
  [[ -s $tmp/$name-on.jsonl && "$(figures "$tmp/$name-on.jsonl")" == "$(figures "$tmp/$name-off.jsonl")" ]] && pass \
    || fail "$name: the figures differ: $(figures "$tmp/$name-on.jsonl") / $(figures "$tmp/$name-off.jsonl")"
}

for freeze in none stem,stem_bn,block.conv1,block.bn1 backbone; do
  args=(--epochs 2 --devices 2)
  case $freeze in
    none) ;;
    backbone) args+=(--freeze-backbone) ;;
    *) args+=(--freeze "$freeze") ;;
  esac
  both "cpu-$freeze" "${args[@]}"
done
for mode in on off; do
  DPTRAIN_FORWARD_LIVENESS=$mode "$bin" eval --resume "$tmp/cpu-backbone-on.st" --data "$tmp/data" \
    >"$tmp/eval-$mode.out" 2>&1 && pass || fail "eval $mode: $(cat "$tmp/eval-$mode.out")"
done
grep -q "^test acc: " "$tmp/eval-on.out" && cmp -s "$tmp/eval-on.out" "$tmp/eval-off.out" && pass \
  || fail "eval differs: $(cat "$tmp/eval-on.out") / $(cat "$tmp/eval-off.out")"

# `dptrain eval` of d2l's ResNet-18 (models/resnet18.cfg) on 200 images, one forward on one device: the
# runner holds a few layer outputs where the arena held them all (peak resident memory, a wide margin)
small_data "$tmp/r18" 64 200
"$bin" train --data "$tmp/r18" --model "$src/models/resnet18.cfg" --batch-size 32 --limit 32 --epochs 1 --devices 1 \
  --quiet --save "$tmp/r18.st" >"$tmp/r18.out" 2>&1 && pass || fail "resnet18.cfg: $(tail -2 "$tmp/r18.out")"
peak_rss() { # MODE: the peak resident KiB of the evaluation with DPTRAIN_FORWARD_LIVENESS=MODE, -1 when it failed
  DPTRAIN_FORWARD_LIVENESS=$1 /usr/bin/python3 -c 'import resource, subprocess, sys
ok = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if ok else -1)' \
    "$bin" eval --resume "$tmp/r18.st" --data "$tmp/r18" --devices 1 --batch-size 200
}
rss_on=$(peak_rss on) rss_off=$(peak_rss off)
echo "dptrain eval, resnet18.cfg, 200 images in one forward: peak resident ${rss_on} KiB with forward liveness, ${rss_off} without"
[[ $rss_on -gt 0 && $((2 * rss_on)) -lt $rss_off ]] && pass || fail "eval's peak: ${rss_on} KiB on, ${rss_off} off"

# predict: the same logits on and off (PNGs of the test images)
mkdir -p "$tmp/png"
/usr/bin/python3 "$src/tools/check_onnx.py" pngs "$tmp/data/t10k-images-idx3-ubyte" 12 "$tmp/png"
for mode in on off; do
  DPTRAIN_FORWARD_LIVENESS=$mode "$bin" predict --resume "$tmp/cpu-backbone-on.st" --devices 2 --json --logits \
    "$tmp"/png/*.png >"$tmp/predict-$mode.out" 2>&1 && pass || fail "predict $mode: $(tail -2 "$tmp/predict-$mode.out")"
done
[[ $(grep -c logits "$tmp/predict-on.out") == 12 ]] && cmp -s "$tmp/predict-on.out" "$tmp/predict-off.out" && pass \
  || fail "predict differs: $(head -2 "$tmp/predict-on.out") / $(head -2 "$tmp/predict-off.out")"
DPTRAIN_FORWARD_LIVENESS=maybe "$bin" predict --resume "$tmp/cpu-backbone-on.st" "$tmp"/png/*.png \
  >"$tmp/predict-bad.out" 2>&1 && fail "predict: DPTRAIN_FORWARD_LIVENESS=maybe accepted" || pass
[[ $(grep -c . "$tmp/predict-bad.out") == 1 ]] && grep -q "DPTRAIN_FORWARD_LIVENESS=maybe: expected on or off" \
  "$tmp/predict-bad.out" && pass || fail "predict, bad value: $(cat "$tmp/predict-bad.out")"

# a value it does not take: refused in one line naming the variable, nothing written
refused_setting DPTRAIN_FORWARD_LIVENESS maybe "DPTRAIN_FORWARD_LIVENESS=maybe: expected on or off"

emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
if [[ -e $emu ]]; then
  export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=2
  small_data "$tmp/emu" 64 8
  common=(train --data "$tmp/emu" --batch-size 16 --lr 0.05 --seed 5 --model "$src/tests/models/tiny_resnet.cfg"
          --epochs 1 --freeze-backbone) # not --quiet: the step graphs' line
  for name in "${emu_modes[@]}"; do
    emu_mode_args "$name"
    both "emu-$name" "${args[@]}"
  done
  grep -q "^cuda graph: [1-9][0-9]* steps launched as graphs" "$tmp/emu-graph-on.out" && pass \
    || fail "no step graph: $(tail -2 "$tmp/emu-graph-on.out")"
  # one step of d2l's ResNet-18 (models/resnet18.cfg) at batch 16 with the backbone frozen: the device memory peak
  small_data "$tmp/mem" 16 4
  for mode in on off; do
    DPTRAIN_FORWARD_LIVENESS=$mode "$bin" train --data "$tmp/mem" --batch-size 16 --epochs 1 --lr 0.05 \
      --model "$src/models/resnet18.cfg" --freeze-backbone --devices cuda:0 --quiet \
      --metrics "$tmp/mem-$mode.jsonl" >"$tmp/mem-$mode.out" 2>&1 && pass || fail "memory run $mode: $(tail -3 "$tmp/mem-$mode.out")"
  done
  peak_on=$(json_field "$(tail -1 "$tmp/mem-on.jsonl" 2>/dev/null)" device_mem_peak_bytes)
  peak_off=$(json_field "$(tail -1 "$tmp/mem-off.jsonl" 2>/dev/null)" device_mem_peak_bytes)
  echo "resnet18.cfg, backbone frozen, batch 16, one step on the emulator: device memory peak ${peak_on:-?} bytes with forward liveness, ${peak_off:-?} without"
  [[ ${peak_on:-0} -gt 0 && ${peak_on:-0} -lt ${peak_off:-0} ]] && pass || fail "peak on ${peak_on:-?} not below off ${peak_off:-?}"
else
  echo "cli_forward_liveness: no CUDA emulator in this build (built without CUDA): CPU runs only"
fi
testing_finish cli_forward_liveness
