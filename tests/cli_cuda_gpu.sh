#!/usr/bin/env bash
# cli_cuda_gpu.sh - the GPU checks that go through the command, on a
# real GPU (label gpu: skipped, 77, where no GPU answers; scripts/gpu_check.sh
# runs it with the other GPU tests, and its rehearsal here on the CUDA
# emulator, DPTRAIN_CUDA_MODULE):
# - the same seed twice on cuda:0: the same checkpoint bits;
# - cuda:0 trains as cpu:0 does (train_loss within 1e-3 relative: the bound
#   test_cuda_train justifies for conv and gemm summing in other orders);
# - a checkpoint moved between the GPU and the CPU, both ways: the resumed
#   run ends within that bound of the straight one;
# - two devices sharing the GPU (cuda:0,cuda:0) with --sync ps and with
#   --sync-batch-norm (tests/models/tiny_resnet.cfg) train, and `dptrain eval`
#   of the checkpoint gives the run's test accuracy;
# - tiny_resnet with its backbone frozen: the same bits with the no-grad
#   runner and with every output kept (DPTRAIN_FORWARD_LIVENESS=off), the
#   device memory peak at most 4 granules (8 MiB) higher (both printed: at
#   this size the runner's arenas cost more than they save);
# - 2 MPI ranks sharing the GPU give one process's cuda:0,cuda:0 bits (when
#   mpirun is there; without it a line says NOT RUN, which gpu_check.sh puts
#   in its summary: the lent GPU machines may have no MPI).
source "$(dirname "$0")/testing.sh"
# 4 steps an epoch; on the CUDA emulator (gpu_check.sh's rehearsal), where each convolution runs as loops
# on the CPU, the same 4 steps on a quarter of the images and 64 test images
train=384 test=200 batch=96
[[ ${DPTRAIN_CUDA_MODULE:-} == */libdptrain_cuda_emu.so ]] && train=96 test=64 batch=24
small_data "$tmp/data" $train $test
data=$tmp/data
common=(train --data "$data" --limit $train --batch-size $batch --lr 0.1 --seed 3 --quiet)
"$bin" "${common[@]}" --model lenet --epochs 1 --devices cuda:0 >"$tmp/probe.out" 2>&1
if [[ $? -ne 0 ]]; then
  # (a module that does not load is a failure: test_cuda_common.h's rule)
  if grep -qE "built without CUDA|no CUDA GPU|no NVIDIA|the CUDA runtime failed to start" "$tmp/probe.out"; then
    echo "cli_cuda_gpu: SKIPPED: no GPU: $(tail -1 "$tmp/probe.out")"
    exit 77
  fi
  fail "cuda:0: $(tail -2 "$tmp/probe.out")"
  testing_finish cli_cuda_gpu
  exit
fi
acc() { json_field "$(tail -1 "$1")" test_acc; }
# close A B: train_loss within 1e-3 relative
close() {
  awk -v a="$(last_loss "$tmp/$1.jsonl")" -v b="$(last_loss "$tmp/$2.jsonl")" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(a != "" && b != "" && d <= 1e-3 * (a < 0 ? -a : a)) }' && pass \
    || fail "$1 vs $2: train_loss $(last_loss "$tmp/$1.jsonl") vs $(last_loss "$tmp/$2.jsonl")"
}

train_run gpu cuda:0 --model lenet --epochs 2 --optimizer adam
train_run gpu-again cuda:0 --model lenet --epochs 2 --optimizer adam
same_run gpu gpu-again
train_run cpu cpu:0 --model lenet --epochs 2 --optimizer adam
close gpu cpu

# a checkpoint from the GPU resumed on the CPU, and one from the CPU on the GPU
train_run half-gpu cuda:0 --model lenet --epochs 2 --stop-after 1 --optimizer adam
cp "$tmp/half-gpu.st" "$tmp/to-cpu.st"
train_run to-cpu cpu:0 --model lenet --epochs 2 --optimizer adam --resume "$tmp/to-cpu.st"
close gpu to-cpu
train_run half-cpu cpu:0 --model lenet --epochs 2 --stop-after 1 --optimizer adam
cp "$tmp/half-cpu.st" "$tmp/to-gpu.st"
train_run to-gpu cuda:0 --model lenet --epochs 2 --optimizer adam --resume "$tmp/to-gpu.st"
close cpu to-gpu

# two devices sharing the GPU: the parameter server, synchronised batch norm; eval of what they saved
resnet=$DPTRAIN_TEST_DIR/models/tiny_resnet.cfg
train_run ps cuda:0,cuda:0 --model lenet --epochs 1 --sync ps --optimizer momentum
train_run sync-bn cuda:0,cuda:0 --model "$resnet" --epochs 1 --sync-batch-norm --optimizer momentum
for run in ps sync-bn; do
  model=lenet
  [[ $run == sync-bn ]] && model=$resnet
  "$bin" eval --data "$data" --model "$model" --resume "$tmp/$run.st" --devices cuda:0 >"$tmp/eval-$run.out" 2>&1
  said=$(grep -oE 'test acc(uracy)?:? [0-9.]+' "$tmp/eval-$run.out" | grep -oE '[0-9.]+$' | head -1)
  awk -v a="$said" -v b="$(acc "$tmp/$run.jsonl")" 'BEGIN { d = a - b; exit !(a != "" && d <= 0.006 && d >= -0.006) }' \
    && pass || fail "eval of $run: '$(tail -1 "$tmp/eval-$run.out")' vs the run's test_acc $(acc "$tmp/$run.jsonl")"
done

# a frozen backbone (tiny_resnet): its layers run through the no-grad runner (no_grad.h: pool arenas of GPU
# memory, switched inside the captured step graph) with the same bits as with every output kept
# (DPTRAIN_FORWARD_LIVENESS=off), and the device memory peak at most 4 of the arenas' 2 MiB granules higher
# (at this size the runner's own arenas, the kept one and 3 pool arenas, cost more than they save: 25.3 MB
# against 16.9 on the emulator; ResNet-18's backbone at batch 16 there takes 76 MB against 106)
train_run frozen cuda:0 --model "$resnet" --epochs 1 --freeze-backbone --optimizer momentum
DPTRAIN_FORWARD_LIVENESS=off train_run frozen-kept cuda:0 --model "$resnet" --epochs 1 --freeze-backbone \
  --optimizer momentum
same_run frozen frozen-kept
peak_on=$(json_field "$(tail -1 "$tmp/frozen.jsonl")" device_mem_peak_bytes)
peak_off=$(json_field "$(tail -1 "$tmp/frozen-kept.jsonl")" device_mem_peak_bytes)
echo "cli_cuda_gpu: tiny_resnet, backbone frozen: device memory peak ${peak_on:-?} bytes, ${peak_off:-?} with every output kept"
[[ ${peak_on:-0} -gt 0 && ${peak_on:-0} -le $(( ${peak_off:-0} + 4 * 2097152 )) ]] && pass \
  || fail "frozen: peak ${peak_on:-?} past ${peak_off:-?} and 4 granules"

# 2 MPI ranks sharing the GPU = one process with 2 devices on it
if command -v mpirun >/dev/null; then
  exports=()
  for v in DPTRAIN_CUDA_MODULE DPTRAIN_CUDA_EMU_GPUS LD_LIBRARY_PATH; do [[ -n ${!v:-} ]] && exports+=(-x "$v"); done
  mpirun --allow-run-as-root --oversubscribe -np 2 "${exports[@]}" \
    "$bin" "${common[@]}" --model lenet --epochs 1 --optimizer momentum --devices cuda:0 --save "$tmp/ranks.st" \
    --metrics "$tmp/ranks.jsonl" >"$tmp/ranks.out" 2>&1 && pass || fail "2 ranks on cuda:0: $(tail -3 "$tmp/ranks.out")"
  train_run process cuda:0,cuda:0 --model lenet --epochs 1 --optimizer momentum
  same_run process ranks
else
  echo "cli_cuda_gpu: NOT RUN: 2 MPI ranks sharing the GPU (mpirun not found)"
fi
testing_finish cli_cuda_gpu
