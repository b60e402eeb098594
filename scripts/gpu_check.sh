#!/usr/bin/env bash
# gpu_check.sh - the GPU checks and measurements in one command, on a machine
# with an NVIDIA GPU: configure with -DDPTRAIN_CUDA=ON, build (the backend is
# the module build-cuda/lib/libdptrain_cuda.so, which dptrain dlopens), run
# the GPU tests (ctest -L gpu: test_cuda_*, cli_cuda_gpu) and the module's
# command-line tests (cli_cuda, cli_cuda_module), check that the default
# devices are the GPU, train LeNet for 10 epochs with the book's settings on
# cuda:0 (test accuracy must reach 0.80) and again with --precision bf16
# (its test accuracy at most 0.02 below FP32's), both over seeds 0-2 (bf16's
# mean last accuracy within half a point of FP32's, the mean curves in
# lenet_seeds.txt; seed 1 in bf16 twice: the same bits), train with NCCL's one-member group
# (DPTRAIN_NCCL=1) against the host path, kill that run once under `dptrain
# launch --restarts 1` (DPTRAIN_FAULT) and check that the restarted process,
# with its GPU context and NCCL group made afresh, ends with the
# uninterrupted run's checkpoint bits, run bench/gpu_vs_pytorch.sh
# (dptrain against PyTorch's fastest variant, with the GPU's name and each
# side's peak GPU memory; ResNet-18 with cuDNN's heuristic and with the fixed
# algorithms, at batches 256, 128 and 512; dptrain's --channels-last on
# against off; the convolutions' bias inside cuDNN's fused call against
# dptrain's own pass), profile the kernels of a few
# LeNet and ResNet-18 steps with Nsight Compute when `ncu` is there (per
# kernel name: total us, share, count), run LeNet under compute-sanitizer's
# memcheck and synccheck when it is there, time ResNet-50 at ImageNet shape
# (batch 256, FP32 and bf16) against PyTorch's fastest variants and profile
# dptrain's FP32 step by op (bench/resnet50_gpu_vs_pytorch.sh), and print one summary. torch.compile
# is left out of the benchmark unless DPTRAIN_GPU_CHECK_COMPILE=1: on the
# H100 (2026-11-25) it was never PyTorch's fastest variant, and its four
# compilations cost minutes of the 10 a command has. Exit 0 only when every
# step passed (a profiler or sanitizer that is not installed is a NOT RUN
# line, not a failure); without a GPU it says so in one line and exits 2
# before building. The whole call keeps within a lent machine's 10 minutes per command:
# torch.compile, the profile, the sanitizers and ResNet-50 take what is
# left of DPTRAIN_GPU_CHECK_SECONDS (570) and say so when it is not enough.
#
#   scripts/gpu_check.sh pack   on a machine WITH network/packages (no GPU
#       needed): fills build-gpu-carry/ (ignored by git: /build*) with what
#       the GPU machine may lack: Fashion-MNIST and a tarball of OpenBLAS,
#       zlib, libpng and libjpeg-turbo (libraries and headers). About 52 MB (2026-11-28; the carry limit is 64 MiB).
#   scripts/gpu_check.sh        on the GPU machine. With this workplace's
#       device tool: run(command="scripts/gpu_check.sh", carry=["build-gpu-carry"]).
#       Logs and the metrics go to $OUT (when set) or build-cuda/gpu_check/;
#       summary.txt there grows line by line, so a run cut off by the
#       machine's time limit still tells how far it got (a second call on the
#       still-warm machine rebuilds nothing that is up to date).
#   scripts/gpu_check.sh resnet50   on the GPU machine: the set-up, the build
#       (nothing when it is up to date) and the ResNet-50 step alone: for a
#       second call on the still-warm machine when the first had no time left.
#   scripts/gpu_check.sh rehearse BUILD   here, without a GPU: every step
#       after the build, on the CUDA emulator of BUILD (a build with CUDA:
#       lib/libdptrain_cuda_emu.so), with tiny sizes (64 training and 16
#       test images, LeNet 2 epochs with no accuracy bar, two of the GPU
#       tests: test_cuda_peer and cli_cuda_gpu, cli_cuda alone in step 2b,
#       one benchmark pair), PyTorch on the CPU and LeNet in the
#       ResNet-18 step, so that this script's own steps, parsing and summary
#       have run before a machine with a GPU runs them; its figures mean nothing. Exit 77
#       without the emulator or PyTorch. tests/cli_gpu_check_rehearsal.sh
#       runs it and checks the summary.
#   scripts/gpu_check.sh kernel-table NCU_CSV   the profile step's table of
#       an `ncu --csv --metrics gpu__time_duration.sum` output.
# Nothing here needs network. cuDNN is taken from the toolkit, else from
# PyTorch's nvidia-cudnn wheel (DPTRAIN_CUDNN_ROOT).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
carry=$root/build-gpu-carry

if [[ "${1:-}" == pack ]]; then
  set -e
  mkdir -p "$carry/deps/lib" "$carry/deps/include" "$carry/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*.gz "$carry/fashion-mnist/"
  lib=/usr/lib/x86_64-linux-gnu
  cp -L "$lib/libopenblas.so.0" "$carry/deps/lib/libopenblas.so"
  cp -L "$lib/libopenblas.so.0" "$lib/libgfortran.so.5" "$lib/libquadmath.so.0" "$lib/libz.so" "$carry/deps/lib/"
  for h in cblas.h openblas_config.h; do cp -L "$(find /usr/include -name "$h" | head -1)" "$carry/deps/include/"; done
  cp -L /usr/include/zlib.h /usr/include/zconf.h "$carry/deps/include/"
  cp -L "$lib/libpng16.so.16" "$carry/deps/lib/" && cp -L "$lib/libpng16.so.16" "$carry/deps/lib/libpng.so"
  cp -L /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$carry/deps/include/"
  cp -L "$lib/libjpeg.so.62" "$carry/deps/lib/" && cp -L "$lib/libjpeg.so.62" "$carry/deps/lib/libjpeg.so"
  cp -L /usr/include/jpeglib.h /usr/include/jerror.h /usr/include/jmorecfg.h /usr/include/x86_64-linux-gnu/jconfig.h \
    "$carry/deps/include/"
  tar -C "$carry" -czf "$carry/deps.tar.gz" deps && rm -rf "$carry/deps"
  du -sh "$carry"
  exit 0
fi

# kernel_table CSV: ncu's --csv output of gpu__time_duration.sum summed per kernel name: a first line
# "N kernels, T us in all", then "total-us share% count name" rows, the largest first
kernel_table() {
  python3 - "$1" <<'PY'
import collections, csv, sys
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
rows = list(csv.reader(line for line in open(sys.argv[1], errors="replace") if not line.startswith("==")))
first = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
if first is None:
    sys.exit("no ncu CSV (no row with 'Kernel Name' and 'Metric Value')")
h, rows = rows[first], rows[first:]
name, metric, unit, value = (h.index(k) for k in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    if len(r) == len(h) and r[metric] == "gpu__time_duration.sum" and r[unit] in scale:
        total[r[name]] += float(r[value].replace(",", "")) * scale[r[unit]]
        count[r[name]] += 1
if not count:
    sys.exit("no gpu__time_duration.sum rows in the ncu CSV")
whole = sum(total.values())
print(f"{sum(count.values())} kernels, {whole:.1f} us in all")
for k, us in total.most_common():
    print(f"{us:10.1f} us {100 * us / whole:5.1f}% {count[k]:4d}  {k[:90]}")
PY
}
if [[ "${1:-}" == kernel-table ]]; then kernel_table "${2:?usage: scripts/gpu_check.sh kernel-table NCU_CSV}"; exit; fi

rehearse=0 only_resnet50=0
[[ "${1:-}" == resnet50 ]] && only_resnet50=1
if [[ "${1:-}" == rehearse ]]; then
  rehearse=1
  build=${2:?usage: scripts/gpu_check.sh rehearse BUILD}
else
  build=${DPTRAIN_BUILD:-build-cuda} # the build folder
fi
[[ $build == /* ]] || build=$root/$build
# Without a GPU nothing here can pass: said at once, before minutes of building (bench_args.sh's has_gpu:
# dptrain's own signs of a GPU, or nvidia-smi's list)
source "$root/bench/bench_args.sh"
if [[ $rehearse -eq 0 ]] && ! has_gpu; then
  echo "gpu_check: no NVIDIA GPU on this machine (no /dev/nvidia*, nvidia-smi lists none): nothing checked;" \
       "scripts/gpu_check.sh rehearse BUILD rehearses the steps on the CUDA emulator" >&2
  exit 2
fi
out=${OUT:-$build/gpu_check}
mkdir -p "$out"
summary=()
failed=0
# each line also goes to summary.txt at once: a run cut off by a time limit still leaves what it found
: >"$out/summary.txt"
note() { summary+=("$1"); echo "== $1"; echo "  $1" >>"$out/summary.txt"; }
fail() { failed=1; note "FAIL: $1"; }
# The time box: a lent machine stops a command at 10 minutes; the optional steps (torch.compile's share,
# the kernel profile, memcheck) take what is left of DPTRAIN_GPU_CHECK_SECONDS (570) and say NOT RUN without it
budget=${DPTRAIN_GPU_CHECK_SECONDS:-570}
left() { echo $((budget - SECONDS)); }
bench_reserve=360 # the benchmark's other runs (bf16's too), the kernel profile and memcheck
resnet_model=${DPTRAIN_BENCH_RESNET_MODEL:-resnet18} # (the rehearsal's: lenet)

# The sizes of the steps (the rehearsal's are tiny), and ctest in the build
# (the rehearsal's own ctest runs from $out/ctest, so that it never writes
# into the build's Testing/ while an outer ctest runs there).
lenet_epochs=10 min_acc=0.80 bf16_tol=0.02 gpu_tests=(-L gpu) nccl_size=(--limit 2048 --epochs 2) bench_args=(2 3)
restart_kill=5 # step 3c's kill: of 16 steps (the rehearsal's: of 4), checkpoints every 2
lenet_batch=256 # LeNet's batch (the rehearsal's: 64, its whole training set: one step an epoch)
r50_steps=6 # ResNet-50's timed steps (batches of 256) on each side
cli_tests=(cli_cuda cli_cuda_module) # step 2b's (the rehearsal's: cli_cuda; the suite runs cli_cuda_module on this build)
ctest_dir=$build
export PATH=$PATH:/usr/local/cuda/bin
# NCCL's bootstrap (its unique id) looks for a network interface; every member is on this machine, and the
# lent machines reach no network: the loopback one (unless set)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
if [[ $rehearse -eq 1 ]]; then
  emu=$build/lib/libdptrain_cuda_emu.so
  [[ -e $emu ]] || { echo "gpu_check rehearse: SKIPPED: no CUDA emulator in $build (built without CUDA)"; exit 77; }
  PYTHON=$(for py in ${PYTHON:-} /usr/bin/python3 python3; do "$py" -c 'import torch' 2>/dev/null && echo "$py" && break; done)
  [[ -n $PYTHON ]] || { echo "gpu_check rehearse: SKIPPED: no PyTorch (import torch) in /usr/bin/python3 or python3"; exit 77; }
  export PYTHON OMP_NUM_THREADS=1 # the benchmark's PyTorch, on one thread: its figures mean nothing here, and ctest runs another test beside it
  export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
  # (each emulated LeNet step costs in proportion to its batch: 64 images, one step of 64, an epoch)
  export DPTRAIN_BENCH_LIMIT=64 DPTRAIN_BENCH_LENET_BATCH=64 DPTRAIN_BENCH_TORCH_DEVICE=cpu DPTRAIN_BENCH_RESNET_MODEL=lenet
  export DPTRAIN_BENCH_RESNET_LIMIT=16 DPTRAIN_BENCH_RESNET_BATCH=16 DPTRAIN_BENCH_RESNET_BATCHES=8
  # (ResNet-50's step: tiny_resnet at batch 4 against torchvision's resnet18 on the CPU, 2 steps)
  export DPTRAIN_BENCH_R50_BATCH=4 DPTRAIN_BENCH_R50_MODEL=$root/tests/models/tiny_resnet.cfg DPTRAIN_BENCH_R50_TORCH_MODEL=resnet18
  r50_steps=2
  lenet_epochs=2 min_acc=0 bf16_tol=1 gpu_tests=(-L gpu -R '^(test_cuda_peer|cli_cuda_gpu)$') nccl_size=(--limit 64 --epochs 1 --batch-size 16) # 4 steps: 2 warm-up, 2 graphs
  lenet_batch=64 cli_tests=(cli_cuda) restart_kill=3
  bench_args=(1 2)
  ctest_dir=$out/ctest
  mkdir -p "$ctest_dir" && echo "subdirs(\"$build\")" >"$ctest_dir/CTestTestfile.cmake"
  # tiny_data DIR TRAIN TEST: the first images of Fashion-MNIST, as gzip'd IDX files
  # (the escapes as text, "\x00\x00\x00\x40", which the caller's printf turns into the 4 bytes)
  be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
  tiny_data() {
    local split n src=/usr/share/datasets/fashion-mnist
    mkdir -p "$1"
    for split in train t10k; do
      [[ $split == train ]] && n=$2 || n=$3
      { printf '\x00\x00\x08\x03'; printf "$(be32 "$n")$(be32 28)$(be32 28)"
        gzip -dc "$src/$split-images-idx3-ubyte.gz" | tail -c +17 | head -c $((n * 784)); } | gzip -1 >"$1/$split-images-idx3-ubyte.gz"
      { printf '\x00\x00\x08\x01'; printf "$(be32 "$n")"
        gzip -dc "$src/$split-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$n"; } | gzip -1 >"$1/$split-labels-idx1-ubyte.gz"
    done
  }
  tiny_data "$out/data" 64 16
  export DPTRAIN_DATA=$out/data
  gpu="CUDA emulator (rehearsal without a GPU: the figures mean nothing)"
else
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
fi
[[ -n "$gpu" ]] && note "GPU: $gpu" || note "GPU: none found (nvidia-smi): the GPU steps cannot pass here"
note "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not found')"

# What the GPU machine may lack, from the carried tarball (DPTRAIN_USE_CARRIED_DEPS=1: even when the system has it).
if [[ -f "$carry/deps.tar.gz" ]] && { [[ -n "${DPTRAIN_USE_CARRIED_DEPS:-}" ]] ||
     ! [[ -f /usr/include/cblas.h || -f /usr/include/x86_64-linux-gnu/cblas.h || -f /usr/include/openblas/cblas.h ]] ||
     ! [[ -f /usr/include/png.h && -f /usr/include/jpeglib.h ]]; }; then
  mkdir -p /tmp/dptrain-deps && tar -C /tmp/dptrain-deps -xzf "$carry/deps.tar.gz"
  export CMAKE_LIBRARY_PATH=/tmp/dptrain-deps/deps/lib CMAKE_INCLUDE_PATH=/tmp/dptrain-deps/deps/include
  export LD_LIBRARY_PATH=/tmp/dptrain-deps/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CPATH=/tmp/dptrain-deps/deps/include${CPATH:+:$CPATH}
  note "deps: OpenBLAS, zlib, libpng and libjpeg-turbo from build-gpu-carry/deps.tar.gz"
fi
if [[ -z "${DPTRAIN_CUDNN_ROOT:-}" && ! -f /usr/local/cuda/include/cudnn.h ]]; then
  wheel=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0])' 2>/dev/null || true)
  if [[ -n "$wheel" ]]; then
    export DPTRAIN_CUDNN_ROOT=$wheel LD_LIBRARY_PATH=$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    note "cuDNN: PyTorch's wheel, $wheel"
  fi
fi
# NCCL likewise: PyTorch's nvidia-nccl wheel when the toolkit has none (the module is built without NCCL
# otherwise, and steps 2 and 3b fail: test_cuda_peer skips, the first line says "allreduce: host")
if [[ -z "${DPTRAIN_NCCL_ROOT:-}" && ! -f /usr/local/cuda/include/nccl.h ]]; then
  wheel=$(python3 -c 'import os, nvidia.nccl as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0])' 2>/dev/null || true)
  if [[ -n "$wheel" ]]; then
    export DPTRAIN_NCCL_ROOT=$wheel LD_LIBRARY_PATH=$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    note "NCCL: PyTorch's wheel, $wheel"
  fi
fi
data=${DPTRAIN_DATA:-}
[[ -z "$data" && -f "$carry/fashion-mnist/train-images-idx3-ubyte.gz" ]] && data=$carry/fashion-mnist
data=${data:-/usr/share/datasets/fashion-mnist}
export DPTRAIN_DATA=$data
# The tests (testing.sh: cli_cuda_gpu, cli_cuda, cli_cuda_module) read Fashion-MNIST from
# /usr/share/datasets/fashion-mnist: linked to the carried copy if absent, before any step needs it
std_data=/usr/share/datasets/fashion-mnist
[[ -e "$std_data" || "$data" == "$std_data" || $rehearse -eq 1 ]] ||
  { mkdir -p "$(dirname "$std_data")" && ln -s "$data" "$std_data"; } 2>/dev/null
if [[ $rehearse -eq 0 && ! -e "$std_data/train-images-idx3-ubyte.gz" ]]; then
  failed=1
  note "NOT RUN: no Fashion-MNIST at $std_data (nor carried in build-gpu-carry/fashion-mnist: scripts/gpu_check.sh pack): the tests that read it fail"
fi

# 1. configure and build
if [[ $rehearse -eq 1 ]]; then
  note "build: not rebuilt (rehearsal on $build)"
elif cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA=ON >"$out/configure.log" 2>&1 &&
   cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1; then
  note "build: OK ($(grep -o 'CUDA on.*' "$out/configure.log" | head -1))"
else
  fail "build (see configure.log / build.log): $(grep -m1 -iE 'error' "$out/configure.log" "$out/build.log" | head -1)"
  printf '  %s\n' "${summary[@]}" | tee "$out/summary.txt"
  exit 1
fi

# the ResNet-50 step (7), also alone (scripts/gpu_check.sh resnet50): dptrain's models/resnet50-imagenet.cfg at
# batch 256 on cuda:0 against torchvision's resnet50 (eager, channels_last, CUDA graph), FP32 and bf16;
# at most what is left of the time box
resnet50_step() {
  if (( $(left) < 100 )); then note "NOT RUN: ResNet-50 ($(left) s left of the time box)"; return; fi
  local rc=0 limit=$(( $(left) - 5 ))
  # PyTorch's eager variant left out unless set (never its fastest here: it cost the bf16 run its time in the
  # box on 2026-11-28)
  DPTRAIN_BENCH_R50_TORCH_VARIANTS=${DPTRAIN_BENCH_R50_TORCH_VARIANTS:-channels_last graph} \
    timeout "$limit" bench/resnet50_gpu_vs_pytorch.sh "$build"/dptrain "$r50_steps" >"$out/resnet50.log" 2>&1 || rc=$?
  while IFS= read -r line; do note "benchmark: $line"; done < <(grep -E '^ResNet-50 ' "$out/resnet50.log")
  if [[ $rc -eq 124 ]]; then note "NOT RUN: the rest of ResNet-50 (stopped at $limit s)"
  elif [[ $rc -ne 0 ]]; then fail "ResNet-50 benchmark: exit $rc: $(tail -1 "$out/resnet50.log")"
  elif grep -qE '^ResNet-50 .*: dptrain did not run' "$out/resnet50.log"; then
    fail "ResNet-50: dptrain did not run: $(grep -m1 -oE 'dptrain did not run \([^;]*' "$out/resnet50.log")"
  fi
}
if [[ $only_resnet50 -eq 1 ]]; then
  resnet50_step
  echo
  echo "gpu_check resnet50 summary ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?')):"
  printf '  %s\n' "${summary[@]}"
  exit $failed
fi

# 2. the GPU tests
# (a test that hangs stops at 240 s, well inside a lent machine's 10 minutes per command)
(cd "$ctest_dir" && ctest "${gpu_tests[@]}" --timeout 240 --output-on-failure -V) >"$out/gpu_tests.log" 2>&1
tests_rc=$?
line=$(grep -E 'tests passed|tests failed' "$out/gpu_tests.log" | tail -1)
skipped=$(grep -c '\*\*\*Skipped' "$out/gpu_tests.log" || true)
if [[ $tests_rc -ne 0 ]]; then
  fail "GPU tests: $line: $(grep -E '^[[:space:]]+[0-9]+ - ' "$out/gpu_tests.log" | tr -s ' \n' ' ')"
  # cuDNN's heuristic algorithms round otherwise than the emulator's loops: the failed tests again with the
  # fixed algorithms tell a tolerance met by another algorithm from a bug
  (cd "$ctest_dir" && DPTRAIN_CUDNN_ALGO=fixed ctest --rerun-failed --timeout 240 --output-on-failure -V) \
    >"$out/gpu_tests_fixed.log" 2>&1
  note "GPU tests that failed, again with DPTRAIN_CUDNN_ALGO=fixed: $(grep -E 'tests passed|tests failed' "$out/gpu_tests_fixed.log" | tail -1)"
elif [[ "$skipped" -gt 0 ]]; then failed=1; note "NOT RUN: GPU tests skipped ($skipped): $(grep -m1 SKIPPED "$out/gpu_tests.log")"
else note "GPU tests: $line"; fi
# what a GPU test could not run there (cli_cuda_gpu without mpirun): not verified
while IFS= read -r line; do failed=1; note "NOT RUN: ${line#*NOT RUN: }"; done < <(grep -oE 'NOT RUN: .*' "$out/gpu_tests.log" | sort -u)
grep -E '^ *[0-9]+: +(optimizer|1 GPU|[23] devices)' "$out/gpu_tests.log" | sed 's/^ *[0-9]*: */   /' | head -20

# 2b. The CUDA module's loading and the cuda:N messages on a GPU machine
# (cli_cuda, cli_cuda_module).
names=$(printf '%s, ' "${cli_tests[@]}") && names=${names%, }
if [[ -e "$std_data/train-images-idx3-ubyte.gz" ]]; then
  # (the rehearsal: as on a machine without a GPU, the emulator not named)
  (cd "$ctest_dir" && env -u DPTRAIN_CUDA_MODULE ctest -R "^($(IFS='|'; echo "${cli_tests[*]}"))\$" --output-on-failure) \
    >"$out/cli_cuda.log" 2>&1
  cli_rc=$?
  line=$(grep -E 'tests passed|tests failed' "$out/cli_cuda.log" | tail -1)
  if [[ $cli_rc -eq 0 ]]; then note "$names: $line"
  else fail "$names: $line $(grep -m2 FAILED "$out/cli_cuda.log" | tr '\n' ' ')"; fi
else
  failed=1
  note "NOT RUN: $names (no Fashion-MNIST at $std_data)"
fi

# 3. LeNet, 10 epochs, the book's settings, on cuda:0
if [[ -n "$gpu" ]]; then
  # the default devices: the GPU, found by the device-node check and the module (the book's try_all_gpus)
  "$build"/dptrain train --model lenet --data "$data" --limit 512 --batch-size "$lenet_batch" --epochs 1 >"$out/default.log" 2>&1
  first=$(grep -m1 "^training " "$out/default.log")
  if grep -qE 'on \[cuda:0(, cuda:[0-9]+)*\] \(default: (the GPU|every GPU \([0-9]+\))' <<<"$first"; then note "default devices: ${first##* on }"
  else fail "default devices are not the GPU: $first $(tail -1 "$out/default.log")"; fi
  if "$build"/dptrain train --model lenet --data "$data" --epochs "$lenet_epochs" --batch-size "$lenet_batch" --lr 0.2 --devices cuda:0 \
       --metrics "$out/lenet_cuda.jsonl" >"$out/train.log" 2>&1; then
    acc=$(tail -1 "$out/lenet_cuda.jsonl" | sed -E 's/.*"test_acc": *([0-9.]+).*/\1/')
    sec=$(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$out/lenet_cuda.jsonl" | tail -n +2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    if [[ -n "$acc" && -n "$sec" ]] && awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a >= m) }'; then
      note "LeNet $lenet_epochs epochs on cuda:0: test accuracy $acc (>= $min_acc), median epoch ${sec}s"
    else fail "LeNet $lenet_epochs epochs on cuda:0: test accuracy '$acc' < $min_acc (median epoch '${sec}'s)"; fi
  else
    fail "LeNet on cuda:0: $(tail -1 "$out/train.log")"
  fi
  # 3a. the same in bf16 (--precision bf16): its test accuracy at most bf16_tol below FP32's
  if [[ -n "${acc:-}" ]] && "$build"/dptrain train --model lenet --data "$data" --epochs "$lenet_epochs" --batch-size "$lenet_batch" \
       --lr 0.2 --devices cuda:0 --precision bf16 --metrics "$out/lenet_cuda_bf16.jsonl" >"$out/train_bf16.log" 2>&1; then
    acc16=$(tail -1 "$out/lenet_cuda_bf16.jsonl" | sed -E 's/.*"test_acc": *([0-9.]+).*/\1/')
    sec16=$(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$out/lenet_cuda_bf16.jsonl" | tail -n +2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    if [[ -n "$acc16" && -n "$sec16" ]] && awk -v a="$acc16" -v f="$acc" -v t="$bf16_tol" 'BEGIN { exit !(a >= f - t) }'; then
      note "LeNet bf16 $lenet_epochs epochs on cuda:0: test accuracy $acc16 vs FP32 $acc (at most $bf16_tol below), median epoch ${sec16}s"
    else fail "LeNet bf16 $lenet_epochs epochs on cuda:0: test accuracy '$acc16' vs FP32 $acc: more than $bf16_tol below (median epoch '${sec16}'s)"; fi
  else
    fail "LeNet bf16 on cuda:0: $(tail -1 "$out/train_bf16.log" 2>/dev/null || echo "the FP32 run failed")"
  fi
  # 3a'. bf16's accuracy over 3 seeds (0, the runs above, then 1 and 2): the mean test accuracy of each
  # epoch, FP32 and bf16 (lenet_seeds.txt: the curves for the docs), and whether bf16's last is within
  # half a point (0.005) of FP32's (the rehearsal's bar: none); then seed 1 in bf16 again: the same bits
  if [[ -n "${acc:-}" && -n "${acc16:-}" ]]; then
    seeds_ok=1
    for seed in 1 2; do
      for precision in fp32 bf16; do
        "$build"/dptrain train --model lenet --data "$data" --epochs "$lenet_epochs" --batch-size "$lenet_batch" \
          --lr 0.2 --devices cuda:0 --precision "$precision" --seed "$seed" --save "$out/seed$seed-$precision.st" \
          --metrics "$out/seed$seed-$precision.jsonl" --quiet >"$out/seed$seed-$precision.log" 2>&1 || seeds_ok=0
      done
    done
    "$build"/dptrain train --model lenet --data "$data" --epochs "$lenet_epochs" --batch-size "$lenet_batch" --lr 0.2 \
      --devices cuda:0 --precision bf16 --seed 1 --save "$out/seed1-bf16-again.st" --quiet >"$out/seed1-again.log" 2>&1 ||
      seeds_ok=0
    if [[ $seeds_ok -eq 1 ]]; then
      python3 - "$out" "$lenet_epochs" >"$out/lenet_seeds.txt" <<'PY'
import json, sys
out, epochs = sys.argv[1], int(sys.argv[2])
def accs(path):
    return [json.loads(line)["test_acc"] for line in open(path) if line.strip()]
runs = {"fp32": [f"{out}/lenet_cuda.jsonl", f"{out}/seed1-fp32.jsonl", f"{out}/seed2-fp32.jsonl"],
        "bf16": [f"{out}/lenet_cuda_bf16.jsonl", f"{out}/seed1-bf16.jsonl", f"{out}/seed2-bf16.jsonl"]}
curves = {p: [accs(f) for f in files] for p, files in runs.items()}
print("epoch  fp32 mean (seeds 0 1 2)          bf16 mean (seeds 0 1 2)")
for e in range(epochs):
    row = []
    for p in ("fp32", "bf16"):
        vals = [c[e] for c in curves[p]]
        row.append(f"{sum(vals) / len(vals):.4f} ({' '.join(f'{v:.4f}' for v in vals)})")
    print(f"{e + 1:5d}  {row[0]:32s} {row[1]}")
last = {p: sum(c[-1] for c in curves[p]) / 3 for p in curves}
print(f"last: fp32 {last['fp32']:.4f} bf16 {last['bf16']:.4f} difference {last['bf16'] - last['fp32']:+.4f}")
PY
      diff_line=$(tail -1 "$out/lenet_seeds.txt")
      bar=$([[ $rehearse -eq 1 ]] && echo 1 || echo 0.005)
      d=$(sed -nE 's/.*difference ([-+][0-9.]+)$/\1/p' <<<"$diff_line")
      if [[ -n "$d" ]] && awk -v d="$d" -v b="$bar" 'BEGIN { exit !(d >= -b) }'; then
        note "LeNet bf16 over 3 seeds: $diff_line (within $bar; curves in lenet_seeds.txt)"
      else fail "LeNet bf16 over 3 seeds: ${diff_line:-no figures}: more than $bar below FP32"; fi
      if cmp -s "$out/seed1-bf16.st" "$out/seed1-bf16-again.st"; then note "LeNet bf16 seed 1 twice: the same checkpoint bits"
      else fail "LeNet bf16 seed 1 twice: the checkpoints differ"; fi
    else fail "LeNet over 3 seeds: a run failed: $(tail -qn1 "$out"/seed*.log | grep -v '^$' | head -1)"; fi
  fi
  # 3b. NCCL with one member (DPTRAIN_NCCL=1, its sums captured in the step's CUDA graph) against the
  # host path on cuda:0: a group of one sums
  # nothing (NCCL copies the buffer), so the update sees the same gradients and, with the backend's
  # deterministic algorithms, the same bits are expected; the guard is a loose 1e-5 relative on the
  # last train_loss (the line says whether the checkpoints were also the same bits)
  nccl_args=(train --model lenet --data "$data" --batch-size "$lenet_batch" "${nccl_size[@]}" --lr 0.2 --devices cuda:0)
  if DPTRAIN_NCCL=1 "$build"/dptrain "${nccl_args[@]}" --save "$out/nccl1.st" --metrics "$out/nccl1.jsonl" \
       >"$out/nccl1.log" 2>&1 &&
     DPTRAIN_NCCL=0 "$build"/dptrain "${nccl_args[@]}" --save "$out/host1.st" --metrics "$out/host1.jsonl" \
       >"$out/host1.log" 2>&1; then
    a=$(tail -1 "$out/nccl1.jsonl" | sed -E 's/.*"train_loss": *([0-9.eE+-]+).*/\1/')
    b=$(tail -1 "$out/host1.jsonl" | sed -E 's/.*"train_loss": *([0-9.eE+-]+).*/\1/')
    bits=$(cmp -s "$out/nccl1.st" "$out/host1.st" && echo "same checkpoint bits" || echo "checkpoints differ")
    said=$(head -1 "$out/nccl1.log" | grep -o 'allreduce: .*')
    # the NCCL run's steps are CUDA graphs with the sum captured in them (the path of several GPUs)
    graphs=$(grep -o '^cuda graph: [0-9]* steps launched as graphs' "$out/nccl1.log" | grep -o '[0-9]*' | head -1)
    if [[ "$said" == "allreduce: nccl" && "${graphs:-0}" -gt 0 ]] &&
       awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * a) }'; then
      note "NCCL (1 member) on cuda:0: train_loss $a vs host $b, $bits; $graphs steps as graphs with NCCL's sum captured"
    else
      fail "NCCL (1 member) on cuda:0: '$said', ${graphs:-no} steps as graphs, train_loss $a vs host $b, $bits"
    fi
  else
    fail "NCCL (1 member) on cuda:0: $(tail -1 "$out/nccl1.log") / $(tail -1 "$out/host1.log")"
  fi
  # 3c. a kill and a restart on the GPU: the run of 3b with NCCL (a group of one) under dptrain launch,
  # killed after step $restart_kill (DPTRAIN_FAULT) with checkpoints every 2 steps, restarted: the new
  # process makes its GPU context and its NCCL group afresh (nothing of the dead one's communicators
  # exists in it), resumes from the checkpoint inside the epoch and ends with the bits of the same run
  # uninterrupted
  tensors_of() { local h; h=$(od -An -t u8 -N 8 "$1" | tr -d ' '); tail -c +$((9 + h)) "$1"; }
  if ! command -v mpirun >/dev/null; then
    failed=1
    note "NOT RUN: kill and restart on cuda:0 (no mpirun for dptrain launch)"
  elif DPTRAIN_NCCL=1 "$build"/dptrain launch --np 1 -- "${nccl_args[@]}" --save-every-steps 2 --save "$out/restart_ref.st" \
         >"$out/restart_ref.log" 2>&1 &&
       DPTRAIN_NCCL=1 DPTRAIN_FAULT=kill:0:$restart_kill "$build"/dptrain launch --np 1 --restarts 1 --log-dir "$out/restart" -- \
         "${nccl_args[@]}" --save-every-steps 2 --save "$out/restart.st" >"$out/restart.log" 2>&1; then
    bits=$(cmp -s <(tensors_of "$out/restart.st") <(tensors_of "$out/restart_ref.st") && echo "same checkpoint bits" || echo "checkpoints differ")
    said=$(cat "$out/restart/worklog.0.attempt1" "$out/restart/worklog.0" 2>/dev/null | grep -c '^training .*allreduce: nccl$')
    if [[ "$bits" == "same checkpoint bits" && "$said" == 2 ]] && grep -q "^dptrain launch: restart 1 of 1, resuming from" "$out/restart.log"; then
      note "kill and restart on cuda:0 (NCCL, killed after step $restart_kill): $bits as the uninterrupted run, NCCL made again"
    else
      fail "kill and restart on cuda:0: $bits, $said attempts said 'allreduce: nccl': $(grep 'dptrain launch' "$out/restart.log" | tail -2)"
    fi
  else
    fail "kill and restart on cuda:0: $(tail -2 "$out/restart_ref.log" "$out/restart.log" | tr '\n' ' ')"
  fi
  # 4. the benchmark (torch.compile, with DPTRAIN_GPU_CHECK_COMPILE=1, gets what the time box leaves: a quarter of what remains beyond the other
  # steps' needs, 30 to 240 s for each of its four compilations: FP32 and bf16, LeNet and ResNet-18)
  if [[ -n "${DPTRAIN_GPU_CHECK_COMPILE:-}" ]]; then
    compile_limit=$(( ($(left) - bench_reserve) / 4 ))
    compile_limit=$(( compile_limit > 240 ? 240 : compile_limit < 30 ? 30 : compile_limit ))
  else
    compile_limit=0
    note "benchmark: torch.compile left out (DPTRAIN_GPU_CHECK_COMPILE=1 times it, in the time box)"
  fi
  if DPTRAIN_BENCH_COMPILE_LIMIT=$compile_limit bench/gpu_vs_pytorch.sh "$build"/dptrain "${bench_args[@]}" \
       >"$out/bench.log" 2>&1; then
    while IFS= read -r line; do note "benchmark: $line"; done < <(grep -E \
      '^(GPU: |LeNet median|LeNet dptrain cuda graph|LeNet (bf16 )?pytorch variants|LeNet (bf16 )?vs the fastest|ResNet-18 \(batch|ResNet-18 (bf16 )?batch [0-9]+ (bf16 )?(pytorch variants|vs the fastest)|.* dptrain (--channels-last|conv epilogue|conv direct) \(one run each\))' \
      "$out/bench.log")
    # cuDNN's heuristic algorithms against the fixed ones (DPTRAIN_CUDNN_ALGO=fixed), ResNet-18 (the measured: the next line)
    heuristic=$(sed -nE 's/^ResNet-18 .*: dptrain ([0-9.eE+-]+) images\/sec \(cuDNN heuristic.*/\1/p' "$out/bench.log")
    fixed=$(sed -nE 's/^ResNet-18 .*, ([0-9.eE+-]+) images\/sec \(DPTRAIN_CUDNN_ALGO=fixed\).*/\1/p' "$out/bench.log")
    note "benchmark: ResNet-18 cuDNN algorithms: heuristic ${heuristic:-?} images/sec, fixed ${fixed:-?} images/sec$(
      [[ -n "$heuristic" && -n "$fixed" ]] && awk -v h="$heuristic" -v f="$fixed" 'BEGIN { printf ", heuristic/fixed %.2fx", h / f }')"
    note "benchmark: $(grep -m1 'ResNet-18 cuDNN choices' "$out/bench.log")"
    note "benchmark: $(grep -m1 'ResNet-18 cuDNN measured' "$out/bench.log")"
  else
    fail "benchmark: $(tail -1 "$out/bench.log")"
  fi
  # 5. where the GPU time goes: Nsight Compute's gpu__time_duration of each kernel over a few steps of
  # LeNet (200 kernels, about 4 steps), ResNet-18 (400 kernels after the first 200 launches) and ResNet-18
  # in bf16 (its default layout, channels-last), summed per kernel name (kernels-*.txt, the CSVs beside
  # them); at most 120 s each, within the time box
  if [[ $rehearse -eq 1 ]] || ! command -v ncu >/dev/null; then
    note "NOT RUN: kernel profile ($([[ $rehearse -eq 1 ]] && echo 'the rehearsal has no GPU' || echo 'no ncu on PATH'))"
  else
    for spec in "lenet lenet 0 200 2560" "resnet18 $resnet_model 200 400 1024" \
                "resnet18-bf16 $resnet_model 200 400 1024 --precision bf16"; do
      read -r name model skip count images extra <<<"$spec"
      if (( $(left) < 150 )); then note "NOT RUN: kernel profile of $name ($(left) s left of the time box)"; continue; fi
      limit=$(( $(left) - 30 < 120 ? $(left) - 30 : 120 ))
      timeout "$limit" ncu --csv --metrics gpu__time_duration.sum --launch-skip "$skip" --launch-count "$count" \
        "$build"/dptrain train --model "$model" --data "$data" --limit "$images" --batch-size 256 --epochs 1 \
        --devices cuda:0 $extra --quiet >"$out/ncu-$name.csv" 2>"$out/ncu-$name.err"
      rc=$?
      if kernel_table "$out/ncu-$name.csv" >"$out/kernels-$name.txt" 2>>"$out/ncu-$name.err"; then
        note "kernel profile $name$([[ $rc -eq 124 ]] && echo " (stopped at $limit s)"): $(head -1 "$out/kernels-$name.txt"); largest: $(sed -n 2p "$out/kernels-$name.txt" | tr -s ' ' | cut -c1-110)"
        sed 's/^/    /' "$out/kernels-$name.txt" | head -25
      else fail "kernel profile $name: ncu exit $rc: $(grep -v '^==PROF==' "$out/ncu-$name.err" | tail -1)"; fi
    done
  fi
  # 6. compute-sanitizer over LeNet on cuda:0: memcheck (8 steps, at most 150 s) and synccheck (the barriers
  # and warp-synchronous code of the backend's kernels; 2 steps, at most 90 s), within the time box
  # sanitize TOOL STEPS MAX_SECONDS
  sanitize() {
    local tool=$1 steps=$2 most=$3 rc errors limit
    if [[ $rehearse -eq 1 ]] || ! command -v compute-sanitizer >/dev/null; then
      note "NOT RUN: $tool ($([[ $rehearse -eq 1 ]] && echo 'the rehearsal has no GPU' || echo 'no compute-sanitizer on PATH'))"
      return
    fi
    if (( $(left) < 60 )); then note "NOT RUN: $tool ($(left) s left of the time box)"; return; fi
    limit=$(( $(left) - 10 < most ? $(left) - 10 : most ))
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 3 "$build"/dptrain train --model lenet \
      --data "$data" --limit $((steps * 256)) --batch-size 256 --epochs 1 --devices cuda:0 --quiet >"$out/$tool.log" 2>&1
    rc=$?
    errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$out/$tool.log" | tail -1 | grep -oE '[0-9]+')
    if [[ $rc -eq 0 && "$errors" == 0 ]]; then note "$tool (LeNet, $steps steps on cuda:0): 0 errors"
    else fail "$tool (LeNet, $steps steps on cuda:0): exit $rc, ${errors:-no} errors reported: $(grep -m1 -E 'Invalid|Barrier|ERROR' "$out/$tool.log")"; fi
  }
  sanitize memcheck 8 150
  sanitize synccheck 2 90
  # 7. ResNet-50 at ImageNet shape against PyTorch (issue 31's GPU figures)
  resnet50_step
else
  failed=1
  note "NOT RUN: LeNet on cuda:0 and the benchmark (no GPU)"
fi

echo
echo "gpu_check summary ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?')):"
printf '  %s\n' "${summary[@]}" | tee "$out/summary.txt"
[[ $failed -eq 0 ]] && exit 0
[[ -z "$gpu" ]] && exit 2
exit 1
