#!/usr/bin/env bash
# cli_bench_args.sh - the benchmarks (bench/, not run in CI) refuse what they
# cannot measure at once, in one line on stderr with a non-zero exit, before
# any work: a bad argument, a missing program or Python module, no GPU for
# the GPU ones; and they name the machine's CPU and kernels. Nothing is
# measured here but one tiny layer (5.); about 10 s.
source "$(dirname "$0")/testing.sh"
root=$(cd "$DPTRAIN_TEST_DIR/.." && pwd)
build=$(dirname "$bin")
# refused STATUS PATTERN COMMAND...: exits STATUS, says PATTERN in exactly one line on stderr, nothing on stdout
refused() {
  local want=$1 pattern=$2 status=0
  shift 2
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || status=$?
  [[ $status -eq $want && ! -s $tmp/out && $(wc -l <"$tmp/err") -eq 1 ]] && grep -qE -- "$pattern" "$tmp/err" && pass ||
    fail "$*: exit $status (want $want), stdout '$(head -c 300 "$tmp/out")', stderr '$(head -c 600 "$tmp/err")' (want one line /$pattern/)"
}
b=$root/bench
source "$b/bench_args.sh" # has_gpu: the scripts' own signs of a GPU
# has_gpu reads nvidia-smi's list (the GPU machine's sign where no device node is seen), under pipefail too
if ! has_gpu; then
  mkdir -p "$tmp/smi" && printf '#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: GPU-0)"\n' >"$tmp/smi/nvidia-smi" && chmod +x "$tmp/smi/nvidia-smi"
  (PATH=$tmp/smi:$PATH; set -o pipefail; has_gpu) && pass || fail "has_gpu: nvidia-smi's 'GPU 0: ...' not seen"
  printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$tmp/smi/nvidia-smi"
  (PATH=$tmp/smi:$PATH; has_gpu) && fail "has_gpu: nvidia-smi listing none taken for a GPU" || pass
fi

# 1. The PyTorch peers of the GPU benchmarks on a PyTorch that reaches no GPU: one line, not CUDA's traceback
if /usr/bin/python3 -c 'import sys, torch; sys.exit(torch.cuda.is_available())' 2>/dev/null; then
  for peer in torch_lenet_cuda.py torch_resnet18_cuda.py torch_resnet50_step.py; do
    refused 1 "^$peer: no GPU for --device cuda:0: PyTorch " /usr/bin/python3 "$b/$peer" --device cuda:0
  done
else echo "(no PyTorch, or one with a GPU: its peers' line without a GPU not checked)"; fi

# 2. The GPU benchmarks and gpu_check.sh without a GPU: one line at once (gpu_check.sh: nothing built)
if ! has_gpu; then
  refused 1 '^gpu_vs_pytorch: no NVIDIA GPU on this machine ' env -u DPTRAIN_CUDA_MODULE "$b/gpu_vs_pytorch.sh" "$bin" 1 2
  refused 1 '^resnet50_gpu_vs_pytorch: no NVIDIA GPU on this machine ' env -u DPTRAIN_CUDA_MODULE \
    "$b/resnet50_gpu_vs_pytorch.sh" "$bin" 1
  refused 2 '^gpu_check: no NVIDIA GPU on this machine .*gpu_check.sh rehearse BUILD' env -u DPTRAIN_CUDA_MODULE \
    DPTRAIN_BUILD="$tmp/build-cuda" OUT="$tmp/gpu_check" "$root/scripts/gpu_check.sh"
  [[ ! -e $tmp/build-cuda && ! -e $tmp/gpu_check ]] && pass || fail "gpu_check.sh without a GPU made $tmp/build-cuda or its OUT"
else echo "(a GPU here: the benchmarks' line without one not checked)"; fi
# a CUDA module named (the rehearsal's emulator): its arguments are checked
refused 2 "^gpu_vs_pytorch: epochs must be a whole number of at least 2, found '1'$" env DPTRAIN_CUDA_MODULE=none \
  "$b/gpu_vs_pytorch.sh" "$bin" 1 1
refused 1 "^gpu_vs_pytorch: no program $tmp/none " env DPTRAIN_CUDA_MODULE=none "$b/gpu_vs_pytorch.sh" "$tmp/none"

# 3. The CPU benchmarks' arguments and programs: a count of 0 or a word measured nothing and said figures
refused 2 "^epoch_vs_pytorch: runs must be a whole number of at least 1, found '0'$" "$b/epoch_vs_pytorch.sh" "$bin" 0
refused 2 "^epoch_vs_pytorch: threads must be a whole number of at least 1, found 'x'$" "$b/epoch_vs_pytorch.sh" "$bin" 1 x
refused 1 "^epoch_vs_pytorch: no program $tmp/none " "$b/epoch_vs_pytorch.sh" "$tmp/none"
refused 2 "^ddp_vs_dptrain: runs must be a whole number of at least 1, found 'abc'$" "$b/ddp_vs_dptrain.sh" "$bin" abc
refused 2 "^scaling: runs must be a whole number of at least 1, found '0'$" "$b/scaling.sh" "$bin" 0
refused 2 "^book_runs: seed must be a whole number of at least 0, found '-1'$" "$b/book_runs.sh" "$bin" -1
refused 2 "^layers_vs_pytorch: seconds_per_layer must be a number above 0, found '0'$" \
  "$b/layers_vs_pytorch.sh" "$build/layer_bench" 0
refused 2 "^layers_vs_pytorch: rounds must be a whole number of at least 1, found '0'$" \
  "$b/layers_vs_pytorch.sh" "$build/layer_bench" 0.1 0
refused 2 "^layers_vs_pytorch: no layer list $tmp/none " env LAYERS="$tmp/none" "$b/layers_vs_pytorch.sh" "$build/layer_bench"
refused 2 "^decode_vs_pil: images must be a whole number of at least 1, found '0'$" "$b/decode_vs_pil.sh" "$build" 0
refused 2 "^loader_vs_torchvision: rounds must be a whole number of at least 1, found 'x'$" \
  "$b/loader_vs_torchvision.sh" "$build" 10 x
refused 2 "^folder_vs_idx: epochs must be a whole number of at least 2, found '1'" "$b/folder_vs_idx.sh" "$build" 1
refused 2 "^fault_soak: K must be a whole number of at least 1, found '0'$" "$b/fault_soak.sh" "$bin" 0
refused 2 "^fault_soak: 5 kills need 7 steps or more, found 2 " "$b/fault_soak.sh" "$bin" 5 100 1
refused 2 "^resnet50_vs_pytorch: devices must be a whole number of at least 1, found '3x'$" \
  "$b/resnet50_vs_pytorch.sh" "$bin" 1 3x
refused 2 "^resnet50_vs_pytorch: MODEL=nope: no models/nope-imagenet.cfg " env MODEL=nope "$b/resnet50_vs_pytorch.sh" "$bin"
refused 2 '^usage: bench/profile_by_op.sh MODEL.cfg PROFILE_OUTPUT DEVICE' "$b/profile_by_op.sh"
refused 2 '^usage: bench/profile_by_op.sh ' "$b/profile_by_op.sh" "$root/models/resnet50-imagenet.cfg" "$tmp/none" cpu:0
refused 1 '^usage: torch_decode.py FOLDER ' /usr/bin/python3 "$b/torch_decode.py"
refused 1 '^usage: torch_folder_loader.py DIR ' /usr/bin/python3 "$b/torch_folder_loader.py" "$tmp/none"
# a peer's module that cannot be imported (a stand-in torch first on the path): said before dptrain's epoch
mkdir -p "$tmp/py" && echo 'raise ImportError("a stand-in that cannot be imported")' >"$tmp/py/torch.py"
refused 1 "^epoch_vs_pytorch: /usr/bin/python3 cannot import torch \(ImportError: a stand-in" \
  env PYTHONPATH="$tmp/py" "$b/epoch_vs_pytorch.sh" "$bin" 1

# 4. The C benchmarks: a bad count in one line (allreduce_bench said nothing; sync_bench printed -nan figures),
# and their first line names the CPU and the kernels
refused 2 "^allreduce_bench: k \(devices\) must be a whole number from 1 to 64, found 'abc'$" "$build/allreduce_bench" abc
refused 2 "^sync_bench: steps must be a whole number from 1 to 1000000, found '0'$" "$build/sync_bench" 2 0
refused 2 "^freeze_bench: DEVICES must be a whole number from 1 to 64, found '0'$" "$build/freeze_bench" resnet18 0
refused 2 "^stop_vote_bench: rounds must be a whole number from 1 to 1000000, found 'x'$" "$build/stop_vote_bench" x
first=$("$build/allreduce_bench" 1 1 | head -1)
[[ $first == "cpu: kernels "*" on "* ]] && pass || fail "allreduce_bench's first line does not name the CPU: '$first'"

# 5. layers_vs_pytorch names the CPU and each side's kernels (it said "dptrain kernels: best"), on one small layer
echo "one.relu relu 2 1 4 4" >"$tmp/one.txt"
LAYERS=$tmp/one.txt timeout 60 "$b/layers_vs_pytorch.sh" "$build/layer_bench" 0.01 1 >"$tmp/layers.out" 2>&1
grep -qE '^dptrain: isa [a-z0-9]+ \(best [a-z0-9]+\), cpu .+, blas ' "$tmp/layers.out" && grep -q '^one.relu ' "$tmp/layers.out" &&
  pass || fail "layers_vs_pytorch does not name the CPU and kernels: $(head -c 600 "$tmp/layers.out")"

testing_finish cli_bench_args
