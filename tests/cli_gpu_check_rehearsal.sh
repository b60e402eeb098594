#!/usr/bin/env bash
# cli_gpu_check_rehearsal.sh - scripts/gpu_check.sh's one-call GPU check,
# rehearsed here without a GPU (`gpu_check.sh rehearse BUILD`: the CUDA
# emulator, tiny sizes, PyTorch on the CPU), so that the script's own logic
# is tested without a GPU: every step must pass and the summary must carry
# each step's line with its figures parsed (numbers where numbers belong),
# as a report of a GPU run quotes them; the kernel profile, memcheck and
# synccheck say NOT RUN (no GPU). The figures themselves mean nothing. Also the
# profile's table (`gpu_check.sh kernel-table`) of a small ncu CSV.
# Skipped (77) in a build without CUDA or without PyTorch.
source "$(dirname "$0")/testing.sh"
build=$(dirname "$bin")
root=$(cd "$DPTRAIN_TEST_DIR/.." && pwd)
OUT=$tmp/out "$root/scripts/gpu_check.sh" rehearse "$build" >"$tmp/log" 2>&1
status=$?
if [[ $status -eq 77 ]]; then
  grep -m1 SKIPPED "$tmp/log"
  exit 77
fi
[[ $status -eq 0 ]] && pass || fail "gpu_check.sh rehearse: exit status $status: $(grep -E 'FAIL|NOT RUN' "$tmp/log" | head -3)"
summary=$tmp/out/summary.txt
[[ -s $summary ]] && pass || fail "no summary.txt"
num='[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?'
# want PATTERN: one summary line matches
want() { grep -qE "$1" "$summary" && pass || fail "summary lacks /$1/: $(cat "$summary")"; }
want "^  GPU: CUDA emulator"
want "^  build: not rebuilt \(rehearsal on "
want "^  GPU tests: 100% tests passed, 0 tests failed out of 2$" # test_cuda_peer, cli_cuda_gpu
want "^  cli_cuda: 100% tests passed, 0 tests failed out of 1$" # (cli_cuda_module: in the suite, on this build)
want "^  default devices: \[cuda:0\] \(default: the GPU\)"
want "^  LeNet 2 epochs on cuda:0: test accuracy $num \(>= 0\), median epoch ${num}s$"
want "^  LeNet bf16 2 epochs on cuda:0: test accuracy $num vs FP32 $num \(at most 1 below\), median epoch ${num}s$"
want "^  LeNet bf16 over 3 seeds: last: fp32 $num bf16 $num difference [-+]$num \(within 1; curves in lenet_seeds.txt\)$"
want "^  LeNet bf16 seed 1 twice: the same checkpoint bits$"
want "^  NCCL \(1 member\) on cuda:0: train_loss $num vs host $num, same checkpoint bits; [1-9][0-9]* steps as graphs with NCCL.s sum captured$"
want "^  kill and restart on cuda:0 \(NCCL, killed after step 3\): same checkpoint bits as the uninterrupted run, NCCL made again$"
want "^  benchmark: GPU: none \(PyTorch on cpu\) \(torch.cuda.get_device_name\); CPU: "
want "^  benchmark: LeNet median \(1 pairs, epochs 2-2\): dptrain $num s/epoch, pytorch eager $num s/epoch, speed-up ${num}x$"
want "^  benchmark: LeNet dptrain cuda graph \(one run each, median of epochs 2-2\): on $num s/epoch \([0-9]+ steps launched as graphs\), off $num s/epoch, off/on ${num}x$"
nogpu='\(peak n/a \(no GPU\)\)'
compiled="torch.compile (did not run \(.+\)|$num (s/epoch|images/sec) $nogpu)"
want "^  benchmark: LeNet pytorch variants \(median of epochs 2-2, one run each\): eager $num s/epoch $nogpu, channels_last\+cudnn.benchmark $num s/epoch $nogpu, cuda graph n/a \(no GPU\), $compiled$"
want "^  benchmark: LeNet vs the fastest PyTorch \((eager|channels_last\+cudnn.benchmark|torch.compile)\): dptrain $num s/epoch \(peak [0-9]+ MiB\), pytorch $num s/epoch $nogpu, pytorch/dptrain ${num}x$"
want "^  benchmark: ResNet-18 \(batch 16, one run each; dptrain ran lenet\): dptrain $num images/sec \(cuDNN heuristic algorithms\), $num images/sec \(DPTRAIN_CUDNN_ALGO=fixed\), pytorch eager $num images/sec$"
want "^  benchmark: ResNet-18 batch 16 pytorch variants \(one run each\): eager $num images/sec $nogpu, channels_last\+cudnn.benchmark $num images/sec $nogpu, cuda graph n/a \(no GPU\), $compiled$"
want "^  benchmark: ResNet-18 batch 8 pytorch variants \(one run each\): channels_last\+cudnn.benchmark $num images/sec $nogpu, cuda graph n/a \(no GPU\)$"
for batch in 16 8; do
  want "^  benchmark: ResNet-18 batch $batch vs the fastest PyTorch \((eager|channels_last\+cudnn.benchmark|torch.compile)\): dptrain $num images/sec \(peak [0-9]+ MiB\), pytorch $num images/sec $nogpu, dptrain/pytorch ${num}x$"
done
want "^  benchmark: LeNet bf16 pytorch variants \(autocast bfloat16, one run each\): eager $num s/epoch $nogpu, channels_last\+cudnn.benchmark $num s/epoch $nogpu, cuda graph n/a \(no GPU\), $compiled$"
want "^  benchmark: LeNet bf16 vs the fastest PyTorch bf16 \((eager|channels_last\+cudnn.benchmark|torch.compile)\): dptrain $num s/epoch \(peak [0-9]+ MiB\), pytorch $num s/epoch $nogpu, pytorch/dptrain ${num}x$"
want "^  benchmark: ResNet-18 batch 16 bf16 pytorch variants \(autocast bfloat16, one run each\): eager $num images/sec $nogpu, channels_last\+cudnn.benchmark $num images/sec $nogpu, cuda graph n/a \(no GPU\), $compiled$"
want "^  benchmark: ResNet-18 batch 16 bf16 vs the fastest PyTorch bf16 \((eager|channels_last\+cudnn.benchmark|torch.compile)\): dptrain $num images/sec \(peak [0-9]+ MiB\), pytorch $num images/sec $nogpu, dptrain/pytorch ${num}x$"
want "^  benchmark: ResNet-18 batch 16 dptrain conv epilogue \(one run each\): cudnn $num images/sec, own \(DPTRAIN_CONV_EPILOGUE=own\) $num images/sec, cudnn is ${num}x the speed of own$"
want "^  benchmark: LeNet \(median of epochs 2-2\) dptrain conv direct \(one run each\): on $num s/epoch \(peak [0-9.]+ MiB\), off $num s/epoch, on is ${num}x the speed of off$"
want "^  benchmark: LeNet \(median of epochs 2-2\) dptrain --channels-last \(one run each\): on $num s/epoch, off $num s/epoch, on is ${num}x the speed of off$"
for what in "ResNet-18 batch 16" "ResNet-18 batch 16 bf16"; do
  want "^  benchmark: $what dptrain --channels-last \(one run each\): on $num images/sec \(peak [0-9]+ MiB\), off $num images/sec \(peak [0-9]+ MiB\), on is ${num}x the speed of off$"
done
want "^  benchmark: ResNet-18 cuDNN algorithms: heuristic $num images/sec, fixed $num images/sec, heuristic/fixed ${num}x$"
want "^  benchmark: ResNet-18 cuDNN choices \(heuristic run\): [1-9][0-9]* from the heuristics, 0 the fixed fallback$"
want "^  benchmark: ResNet-18 cuDNN measured algorithms \(batch 16\): dptrain $num images/sec \(DPTRAIN_CUDNN_ALGO=measured, [1-9][0-9]* choices timed\), measured/heuristic ${num}x$"
want "^  NOT RUN: kernel profile \(the rehearsal has no GPU\)$"
want "^  NOT RUN: memcheck \(the rehearsal has no GPU\)$"
want "^  NOT RUN: synccheck \(the rehearsal has no GPU\)$"
want "^  benchmark: torch.compile left out \(DPTRAIN_GPU_CHECK_COMPILE=1 times it, in the time box\)$"
# ResNet-50's step (the rehearsal: tiny_resnet at batch 4 against torchvision's resnet18 on the CPU)
for p in FP32 bf16; do
  # (PyTorch's eager variant left out by gpu_check.sh)
  want "^  benchmark: ResNet-50 $p batch 4: dptrain $num images/sec \(peak [0-9]+ MiB\); pytorch channels_last $num images/sec \(peak n/a\), graph n/a \(no GPU\)$"
  want "^  benchmark: ResNet-50 $p vs the fastest PyTorch \(channels_last\): dptrain/pytorch ${num}x$"
done
# where dptrain's FP32 step goes: the three largest rows of its profile, by op and direction
# (a row: an op and direction, or the time outside the layers, which a loaded machine can make the largest)
row="(\(outside the layers\)|[a-z_+]+ ([0-9]+x[0-9]+ )?(forward|backward)) $num ms \($num%\)"
want "^  benchmark: ResNet-50 FP32 profile \(4 a step, $num ms\): $row; $row; $row$"
! grep -vE '^  NOT RUN: (kernel profile|memcheck|synccheck) \(the rehearsal has no GPU\)$' "$summary" | grep -qE 'FAIL|NOT RUN|failed:|\?' && pass \
  || fail "summary: $(grep -E 'FAIL|NOT RUN|failed:|\?' "$summary")"
# the profile's table: ncu's CSV (a kernel name with commas, units in ns and us, a line of its own and the
# program's output around it) summed per kernel name, the largest first
cat >"$tmp/ncu.csv" <<'CSV'
==PROF== Connected to process 1 (dptrain)
dptrain: the program's own line
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","dptrain","127.0.0.1","bias_grad_kernel(const float *, float *, int, int)","1","13","(256, 1, 1)","(20, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","106.50"
"1","1","dptrain","127.0.0.1","void fft2d_r2c_32x32<float, 0, 1, 0>(float2 *, const T1 *, int)","1","13","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","41,000"
"2","1","dptrain","127.0.0.1","bias_grad_kernel(const float *, float *, int, int)","1","13","(256, 1, 1)","(20, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","93.50"
==PROF== Disconnected from process 1
CSV
"$root/scripts/gpu_check.sh" kernel-table "$tmp/ncu.csv" >"$tmp/table" 2>&1 && pass || fail "kernel-table: $(cat "$tmp/table")"
diff <(printf '%s\n' "3 kernels, 241.0 us in all" "     200.0 us  83.0%    2  bias_grad_kernel(const float *, float *, int, int)" \
  "      41.0 us  17.0%    1  void fft2d_r2c_32x32<float, 0, 1, 0>(float2 *, const T1 *, int)") "$tmp/table" >"$tmp/table.diff" && pass \
  || fail "kernel-table: $(cat "$tmp/table.diff")"
echo 'not a CSV' >"$tmp/bad.csv"
"$root/scripts/gpu_check.sh" kernel-table "$tmp/bad.csv" >"$tmp/table" 2>&1 && fail "kernel-table took a file without ncu's columns" || pass
# its ctest kept its records apart (not in the build's Testing/, which an outer ctest may be writing)
[[ -d $tmp/out/ctest/Testing/Temporary ]] && pass || fail "the rehearsal's ctest wrote no records in its own folder"
testing_finish cli_gpu_check_rehearsal
