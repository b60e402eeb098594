#!/usr/bin/env bash
# gpu_vs_pytorch.sh - dptrain on one GPU against PyTorch at its best, in one
# run on the same GPU. Not a test.
#
# LeNet seconds per epoch: dptrain (--devices cuda:0) against PyTorch eager
# on CUDA (bench/torch_lenet_cuda.py: the same network, initialisation,
# batch 256, lr 0.2, the data on the GPU, one synchronize per epoch, FP32
# without TF32), alternating A B A B; dptrain with --cuda-graph on (its
# default: the step captured as one CUDA graph) and off, once each; then PyTorch's other variants once
# each (bench/torch_variants_cuda.py: channels_last + cudnn.benchmark, the
# whole step as a CUDA graph, torch.compile), and dptrain against the
# FASTEST of them. ResNet-18 (models/resnet18.cfg, the first 12,800 images)
# images per second at batch 256: dptrain (its 2nd epoch of 2) with cuDNN's
# heuristic algorithms (DPTRAIN_CUDNN_ALGO=heuristic), with the fixed ones
# (DPTRAIN_CUDNN_ALGO=fixed) and with measured ones (the default:
# cudnnFind*, timed in this run into a cache file of its own), PyTorch's four variants
# (bench/torch_resnet18_cuda.py, after a warm-up epoch), dptrain against the
# fastest (dptrain's measured, default, algorithms in every row from here on); then batches 128 and 512 (PyTorch
# channels_last and graph); and how many of the heuristic run's
# algorithm choices came from cuDNN's heuristics rather than the fixed
# fallback (DPTRAIN_CUDNN_ALGO_LOG). Beside each figure the peak GPU memory:
# PyTorch's torch.cuda.max_memory_allocated, dptrain's device_mem_peak_bytes
# (its metrics: the most memory its backend held). Then bf16: dptrain
# --precision bf16 against PyTorch's four variants under torch.autocast to
# bfloat16 (--precision bf16 of the PyTorch scripts), LeNet and ResNet-18
# at batch 256, one run each, each against the fastest. And dptrain's
# --channels-last on (NHWC activations inside the GPU) against off (the
# default in FP32; in bf16 on is ResNet-18's, off LeNet's): LeNet and
# ResNet-18 in FP32 and in bf16, one run each, with the peaks. ResNet-18's convolution
# biases inside cuDNN's fused call (the default) against dptrain's own pass (DPTRAIN_CONV_EPILOGUE=own),
# one run each; LeNet with its conv1 forward in dptrain's own direct kernel (DPTRAIN_CONV_DIRECT=on)
# against cuDNN's (the default), one run. The GPU's name is
# torch.cuda.get_device_name's. A variant that cannot run on the device is
# "n/a (no GPU)" (the CUDA graph on the CPU); torch.compile stops after
# DPTRAIN_BENCH_COMPILE_LIMIT seconds (240: a lent GPU machine gives a
# command 10 minutes) and says so; 0 leaves torch.compile out ("not run").
#
# usage: bench/gpu_vs_pytorch.sh [path/to/dptrain] [pairs] [epochs]
# Each LeNet run trains `epochs` epochs (default 3) and counts the median of
# epochs 2.. (epoch 1 holds the warm-up: the dataset upload, cuDNN's and
# cuBLAS's first calls, cudnn.benchmark, compiling, the graph's capture).
# For scripts/gpu_check.sh's rehearsal without a GPU (its figures mean
# nothing): DPTRAIN_BENCH_LIMIT (LeNet's training images, both sides),
# DPTRAIN_BENCH_LENET_BATCH (LeNet's batch, both sides, default 256),
# DPTRAIN_BENCH_TORCH_DEVICE (default cuda:0), DPTRAIN_BENCH_RESNET_MODEL
# (dptrain's model in the ResNet-18 steps, default resnet18),
# DPTRAIN_BENCH_RESNET_LIMIT (12800), DPTRAIN_BENCH_RESNET_BATCH (256) and
# DPTRAIN_BENCH_RESNET_BATCHES (the other batch sizes, "128 512").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build-cuda/dptrain}
pairs=${2:-3}
epochs=${3:-3}
source "$here/bench_args.sh"
need_gpu gpu_vs_pytorch
need_program gpu_vs_pytorch "$bin" "a CUDA build: scripts/gpu_check.sh makes build-cuda"
need_count gpu_vs_pytorch pairs "$pairs" 1
need_count gpu_vs_pytorch epochs "$epochs" 2 # the median of epochs 2..
data=${DPTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
py=${PYTHON:-python3}
limit=${DPTRAIN_BENCH_LIMIT:-}
lenet_batch=${DPTRAIN_BENCH_LENET_BATCH:-256}
torch_device=${DPTRAIN_BENCH_TORCH_DEVICE:-cuda:0}
resnet_model=${DPTRAIN_BENCH_RESNET_MODEL:-resnet18}
resnet_limit=${DPTRAIN_BENCH_RESNET_LIMIT:-12800}
resnet_batch=${DPTRAIN_BENCH_RESNET_BATCH:-256}
resnet_batches=${DPTRAIN_BENCH_RESNET_BATCHES-128 512}
compile_limit=${DPTRAIN_BENCH_COMPILE_LIMIT:-240}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the measured cuDNN algorithms (the default mode) into a cache file of this run only: measured on this GPU now
export DPTRAIN_CUDNN_ALGO_CACHE=$tmp/cudnn-algos
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
later_epochs() { tail -n +2; } # drop epoch 1
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }
# dp_peak METRICS: dptrain's peak device memory in its last metrics line
dp_peak() {
  local b
  b=$(tail -1 "$1" | sed -nE 's/.*"device_mem_peak_bytes": *([0-9]+).*/\1/p')
  [[ -n "$b" ]] && mib "$b" || echo "not counted"
}
declare -A names=([eager]=eager [channels_last]=channels_last+cudnn.benchmark [graph]="cuda graph" [compile]=torch.compile)

gpu=$("$py" -c 'import sys, torch; d = torch.device(sys.argv[1]); print(torch.cuda.get_device_name(d) if d.type == "cuda" else "none (PyTorch on " + sys.argv[1] + ")")' \
        "$torch_device" 2>/dev/null || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
echo "GPU: ${gpu:-unknown} (torch.cuda.get_device_name); CPU: $(lscpu | sed -n 's/^Model name: *//p')"

# torch_run SCRIPT VARIANT LABEL ARGS...: runs a PyTorch peer; its stdout in $tmp/LABEL.out; prints nothing.
# Sets `ran` (0: figures in the output, else why not, one line). The CUDA graph needs a GPU; torch.compile
# has compile_limit seconds.
has_compile='' # 1 or 0 once asked: whether this PyTorch has torch.compile (2.0 and later)
torch_run() {
  local script=$1 variant=$2 label=$3 rc=0
  shift 3
  if [[ $variant == graph && $torch_device != cuda* ]]; then ran="n/a (no GPU)"; return; fi
  if [[ $variant == compile && -z $has_compile ]]; then
    has_compile=$("$py" -c 'import torch; print(int(hasattr(torch, "compile")))' 2>/dev/null || echo 0)
  fi
  if [[ $variant == compile && $has_compile != 1 ]]; then ran="did not run (this PyTorch has no torch.compile)"; return; fi
  if [[ $variant == compile && $compile_limit == 0 ]]; then ran="not run (DPTRAIN_BENCH_COMPILE_LIMIT=0)"; return; fi
  if [[ $variant == compile ]]; then
    timeout "$compile_limit" "$py" "$here/$script" --variant "$variant" --device "$torch_device" "$@" \
      >"$tmp/$label.out" 2>"$tmp/$label.err" || rc=$?
  else
    "$py" "$here/$script" --variant "$variant" --device "$torch_device" "$@" >"$tmp/$label.out" 2>"$tmp/$label.err" || rc=$?
  fi
  if [[ $rc -eq 0 ]]; then ran=0
  elif [[ $rc -eq 124 ]]; then ran="did not run (stopped after $compile_limit s)"
  else ran="did not run ($(tail -1 "$tmp/$label.err"))"; fi
}
# torch_peak LABEL: the peak GPU memory a PyTorch run printed, its tensors' and (after "reserved") what its
# allocator took from the GPU, dptrain's figure's peer ("n/a (no GPU)" on the CPU)
torch_peak() {
  local b r
  b=$(sed -nE 's/.*peak GPU memory: ([0-9]+) bytes.*/\1/p' "$tmp/$1.out")
  r=$(sed -nE 's/.*\(reserved ([0-9]+) bytes\).*/\1/p' "$tmp/$1.out")
  if [[ -n "$b" ]]; then echo "$(mib "$b")${r:+, reserved $(mib "$r")}"; else echo "n/a (no GPU)"; fi
}

# --- LeNet ---
dp_all=() pt_all=() ratios=()
for pair in $(seq 1 "$pairs"); do
  "$bin" train --model lenet --data "$data" --batch-size "$lenet_batch" --lr 0.2 --epochs "$epochs" --devices cuda:0 \
    --seed "$pair" ${limit:+--limit "$limit"} --metrics "$tmp/m$pair.jsonl" --quiet >/dev/null
  dp=$(median $(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/m$pair.jsonl" | later_epochs))
  torch_run torch_lenet_cuda.py eager "lenet-eager-$pair" --batch-size "$lenet_batch" --data "$data" --epochs "$epochs" --seed "$pair" ${limit:+--limit "$limit"}
  [[ $ran == 0 ]] || { echo "pytorch eager: $ran"; exit 1; }
  pt=$(median $(sed -nE 's/.* ([0-9.]+) sec\/epoch/\1/p' "$tmp/lenet-eager-$pair.out" | later_epochs))
  ratio=$(awk -v a="$pt" -v b="$dp" 'BEGIN { printf "%.2f", a / b }')
  printf 'pair %d: dptrain %.4f s/epoch, pytorch eager %.4f s/epoch, pytorch/dptrain %sx\n' "$pair" "$dp" "$pt" "$ratio"
  dp_all+=("$dp") pt_all+=("$pt") ratios+=("$ratio")
done
dp_lenet=$(median "${dp_all[@]}")
printf 'LeNet median (%d pairs, epochs 2-%d): dptrain %.4f s/epoch, pytorch eager %.4f s/epoch, speed-up %.2fx\n' \
  "$pairs" "$epochs" "$dp_lenet" "$(median "${pt_all[@]}")" "$(median "${ratios[@]}")"
# dptrain's step as one CUDA graph (the default) against every kernel launched as made, one run each
for g in on off; do
  "$bin" train --model lenet --data "$data" --batch-size "$lenet_batch" --lr 0.2 --epochs "$epochs" --devices cuda:0 \
    --seed 1 ${limit:+--limit "$limit"} --metrics "$tmp/graph-$g.jsonl" --cuda-graph "$g" >"$tmp/graph-$g.out" 2>&1 \
    || { echo "dptrain --cuda-graph $g: $(tail -1 "$tmp/graph-$g.out")"; exit 1; }
done
graph_on=$(median $(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/graph-on.jsonl" | later_epochs))
graph_off=$(median $(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/graph-off.jsonl" | later_epochs))
printf 'LeNet dptrain cuda graph (one run each, median of epochs 2-%d): on %.4f s/epoch (%s), off %.4f s/epoch, off/on %.2fx\n' \
  "$epochs" "$graph_on" "$(sed -nE 's/^cuda graph: ([0-9]+ steps launched as graphs).*/\1/p' "$tmp/graph-on.out")" \
  "$graph_off" "$(awk -v a="$graph_off" -v b="$graph_on" 'BEGIN { print a / b }')"
# the variants: eager is the pairs' median; the fastest has the fewest seconds per epoch
best=eager best_sec=$(median "${pt_all[@]}") best_peak=$(torch_peak lenet-eager-1)
line="eager $(printf '%.4f' "$best_sec") s/epoch (peak $best_peak)"
for v in channels_last graph compile; do
  torch_run torch_lenet_cuda.py "$v" "lenet-$v" --batch-size "$lenet_batch" --data "$data" --epochs "$epochs" ${limit:+--limit "$limit"}
  if [[ $ran == 0 ]]; then
    sec=$(median $(sed -nE 's/.* ([0-9.]+) sec\/epoch/\1/p' "$tmp/lenet-$v.out" | later_epochs))
    line+=", ${names[$v]} $(printf '%.4f' "$sec") s/epoch (peak $(torch_peak "lenet-$v"))"
    if awk -v a="$sec" -v b="$best_sec" 'BEGIN { exit !(a < b) }'; then best=$v best_sec=$sec best_peak=$(torch_peak "lenet-$v"); fi
  else
    line+=", ${names[$v]} $ran"
  fi
done
echo "LeNet pytorch variants (median of epochs 2-$epochs, one run each): $line"
printf 'LeNet vs the fastest PyTorch (%s): dptrain %.4f s/epoch (peak %s), pytorch %.4f s/epoch (peak %s), pytorch/dptrain %.2fx\n' \
  "${names[$best]}" "$dp_lenet" "$(dp_peak "$tmp/m1.jsonl")" "$best_sec" "$best_peak" \
  "$(awk -v a="$best_sec" -v b="$dp_lenet" 'BEGIN { print a / b }')"

# --- ResNet-18 ---
# resnet ALGO BATCH: dptrain's ResNet-18 images per second with DPTRAIN_CUDNN_ALGO=ALGO (metrics in $tmp/r-ALGO-BATCH.jsonl)
# (with `precision` set: --precision $precision, in $tmp/r-ALGO-BATCH-PRECISION.jsonl; with `layout` set:
# --channels-last $layout, the file name ending -cl-LAYOUT; with `epilogue` set: DPTRAIN_CONV_EPILOGUE=$epilogue,
# the file name ending -ep-EPILOGUE)
resnet() {
  local run=r-$1-$2${precision:+-$precision}${layout:+-cl-$layout}${epilogue:+-ep-$epilogue}
  DPTRAIN_CONV_EPILOGUE=${epilogue:-cudnn} DPTRAIN_CUDNN_ALGO=$1 DPTRAIN_CUDNN_ALGO_LOG=1 "$bin" train --model "$resnet_model" --data "$data" \
    --batch-size "$2" --lr 0.05 --epochs 2 --limit "$resnet_limit" --devices cuda:0 --metrics "$tmp/$run.jsonl" \
    ${precision:+--precision "$precision"} ${layout:+--channels-last "$layout"} --quiet >/dev/null 2>"$tmp/$run.err" &&
    tail -1 "$tmp/$run.jsonl" | sed -E 's/.*"images_per_sec": *([0-9.eE+-]+).*/\1/' || echo "failed: $(tail -1 "$tmp/$run.err")"
}
# resnet_row BATCH VARIANTS...: PyTorch's variants at BATCH, then dptrain (measured, the default) against the fastest
resnet_row() {
  local batch=$1 v ips dp best='' best_ips=0 best_peak='' line=''
  shift
  for v in "$@"; do
    if [[ -s "$tmp/resnet-$v-$batch.out" ]]; then ran=0 # (eager at the first batch size: run already)
    else torch_run torch_resnet18_cuda.py "$v" "resnet-$v-$batch" --data "$data" --limit "$resnet_limit" --batch-size "$batch"; fi
    if [[ $ran == 0 ]]; then
      ips=$(sed -nE 's/^resnet18: ([0-9.]+) images\/sec.*/\1/p' "$tmp/resnet-$v-$batch.out")
      line+="${line:+, }${names[$v]} $ips images/sec (peak $(torch_peak "resnet-$v-$batch"))"
      if awk -v a="$ips" -v b="$best_ips" 'BEGIN { exit !(a > b) }'; then best=$v best_ips=$ips best_peak=$(torch_peak "resnet-$v-$batch"); fi
    else
      line+="${line:+, }${names[$v]} $ran"
    fi
  done
  echo "ResNet-18 batch $batch pytorch variants (one run each): $line"
  [[ -e "$tmp/r-measured-$batch.jsonl" ]] || resnet measured "$batch" >/dev/null
  dp=$(tail -1 "$tmp/r-measured-$batch.jsonl" 2>/dev/null | sed -nE 's/.*"images_per_sec": *([0-9.eE+-]+).*/\1/p')
  if [[ -n "$best" && -n "$dp" ]]; then
    printf 'ResNet-18 batch %s vs the fastest PyTorch (%s): dptrain %.0f images/sec (peak %s), pytorch %.0f images/sec (peak %s), dptrain/pytorch %.2fx\n' \
      "$batch" "${names[$best]}" "$dp" "$(dp_peak "$tmp/r-measured-$batch.jsonl")" "$best_ips" "$best_peak" \
      "$(awk -v a="$dp" -v b="$best_ips" 'BEGIN { print a / b }')"
  else
    echo "ResNet-18 batch $batch vs the fastest PyTorch: not compared (dptrain: ${dp:-$(tail -1 "$tmp/r-measured-$batch.err" 2>/dev/null)}; pytorch: ${best:-no variant ran})"
  fi
}
dp_heuristic=$(resnet heuristic "$resnet_batch")
dp_fixed=$(resnet fixed "$resnet_batch")
# measured algorithms (cudnnFind*, the default), into the cache file of this run
dp_measured=$(resnet measured "$resnet_batch")
torch_run torch_resnet18_cuda.py eager "resnet-eager-$resnet_batch" --data "$data" --limit "$resnet_limit" \
  --batch-size "$resnet_batch"
[[ $ran == 0 ]] && pt_r=$(sed -nE 's/^resnet18: ([0-9.]+).*/\1/p' "$tmp/resnet-eager-$resnet_batch.out") || pt_r="failed: $ran"
echo "ResNet-18 (batch $resnet_batch, one run each$([[ $resnet_model == resnet18 ]] || echo "; dptrain ran $resnet_model")):" \
  "dptrain $dp_heuristic images/sec (cuDNN heuristic algorithms)," \
  "$dp_fixed images/sec (DPTRAIN_CUDNN_ALGO=fixed), pytorch eager $pt_r images/sec"
echo "ResNet-18 cuDNN choices (heuristic run): $(grep -c ', heuristic result ' "$tmp/r-heuristic-$resnet_batch.err" || true) from the" \
  "heuristics, $(grep -c ', the fixed one: none of ' "$tmp/r-heuristic-$resnet_batch.err" || true) the fixed fallback"
echo "ResNet-18 cuDNN measured algorithms (batch $resnet_batch): dptrain $dp_measured images/sec (DPTRAIN_CUDNN_ALGO=measured," \
  "$(grep -c ', measured: the fastest ' "$tmp/r-measured-$resnet_batch.err" || true) choices timed)$(
  [[ $dp_measured =~ ^[0-9.eE+-]+$ && $dp_heuristic =~ ^[0-9.eE+-]+$ ]] &&
    awk -v m="$dp_measured" -v h="$dp_heuristic" 'BEGIN { printf ", measured/heuristic %.2fx", m / h }')"
resnet_row "$resnet_batch" eager channels_last graph compile
for batch in $resnet_batches; do resnet_row "$batch" channels_last graph; done

# --- channels-last: dptrain --channels-last on (NHWC activations inside the GPU) against off (FP32's default) ---
# on_off WHAT UNIT ON OFF [ON_METRICS OFF_METRICS]: one line, each figure with its run's peak GPU memory when
# the metrics are given, and on/off as a speed ratio (s/epoch: off/on; images/sec: on/off)
on_off() {
  local fig=(x "$3" "$4") peak=(x '' '') ratio='' i
  for i in 1 2; do
    [[ ${fig[i]} =~ ^[0-9.eE+-]+$ && $2 == images/sec ]] && fig[i]=$(printf '%.0f' "${fig[i]}")
    [[ -n ${5:-} ]] && peak[i]=" (peak $(dp_peak "${@:4+i:1}"))"
  done
  [[ $3 =~ ^[0-9.eE+-]+$ && $4 =~ ^[0-9.eE+-]+$ ]] &&
    ratio=$(awk -v on="$3" -v off="$4" -v u="$2" 'BEGIN { printf ", on is %.2fx the speed of off", u == "s/epoch" ? off / on : on / off }')
  echo "$1 dptrain --channels-last (one run each): on ${fig[1]} $2${peak[1]}, off ${fig[2]} $2${peak[2]}$ratio"
}
# lenet_run NAME [ARGS...]: dptrain's LeNet with ARGS (--channels-last, --precision), the median s/epoch of
# epochs 2.. (metrics in $tmp/NAME.jsonl), or "failed: ..."
lenet_run() {
  local name=$1
  shift
  if "$bin" train --model lenet --data "$data" --batch-size "$lenet_batch" --lr 0.2 --epochs "$epochs" --devices cuda:0 \
       --seed 1 ${limit:+--limit "$limit"} "$@" --metrics "$tmp/$name.jsonl" --quiet >/dev/null 2>"$tmp/$name.err"; then
    printf '%.4f' "$(median $(sed -E 's/.*"epoch_sec": *([0-9.eE+-]+).*/\1/' "$tmp/$name.jsonl" | later_epochs))"
  else echo "failed: $(tail -1 "$tmp/$name.err")"; fi
}
lenet_cl=$(lenet_run m-cl --channels-last on)
on_off "LeNet (median of epochs 2-$epochs)" s/epoch "$lenet_cl" "$(printf '%.4f' "$graph_on")"
dp_cl=$(layout=on resnet measured "$resnet_batch")
on_off "ResNet-18 batch $resnet_batch" images/sec "$dp_cl" "$dp_measured" "$tmp/r-measured-$resnet_batch-cl-on.jsonl" \
  "$tmp/r-measured-$resnet_batch.jsonl"

# --- the convolutions' bias (and ReLU) inside cuDNN's fused call (the default) against dptrain's own pass ---
dp_own=$(epilogue=own resnet measured "$resnet_batch")
printf 'ResNet-18 batch %s dptrain conv epilogue (one run each): cudnn %s images/sec, own (DPTRAIN_CONV_EPILOGUE=own) %s images/sec%s\n' \
  "$resnet_batch" "$dp_measured" "$dp_own" "$([[ $dp_measured =~ ^[0-9.eE+-]+$ && $dp_own =~ ^[0-9.eE+-]+$ ]] &&
    awk -v a="$dp_measured" -v b="$dp_own" 'BEGIN { printf ", cudnn is %.2fx the speed of own", a / b }')"

# --- LeNet's conv1 forward (1x3x3) in dptrain's own direct kernel (DPTRAIN_CONV_DIRECT=on) against cuDNN's (off,
# the default: the LeNet figure above) ---
lenet_direct=$(DPTRAIN_CONV_DIRECT=on lenet_run m-direct)
printf 'LeNet (median of epochs 2-%s) dptrain conv direct (one run each): on %s s/epoch (peak %s), off %.4f s/epoch%s\n' \
  "$epochs" "$lenet_direct" "$(dp_peak "$tmp/m-direct.jsonl")" "$graph_on" "$([[ $lenet_direct =~ ^[0-9.eE+-]+$ ]] &&
    awk -v on="$lenet_direct" -v off="$graph_on" 'BEGIN { printf ", on is %.2fx the speed of off", off / on }')"

# --- bf16: dptrain --precision bf16 against PyTorch's variants under autocast(bfloat16) ---
# bf16_row WHAT LABEL SCRIPT DP DP_METRICS ARGS...: PyTorch's four variants of SCRIPT ARGS with --precision
# bf16, one run each, and dptrain's figure DP (its metrics DP_METRICS) against the fastest: LeNet's figures
# are seconds per epoch (median of epochs 2..; fewer is faster), ResNet-18's images per second.
bf16_row() {
  local what=$1 label=$2 script=$3 dp=$4 dp_metrics=$5 v fig best='' best_fig='' best_peak='' line='' unit=images/sec
  shift 5
  [[ $script == torch_lenet_cuda.py ]] && unit=s/epoch
  for v in eager channels_last graph compile; do
    torch_run "$script" "$v" "$label-bf16-$v" --precision bf16 "$@"
    if [[ $ran != 0 ]]; then line+="${line:+, }${names[$v]} $ran"; continue; fi
    if [[ $unit == s/epoch ]]; then fig=$(median $(sed -nE 's/.* ([0-9.]+) sec\/epoch/\1/p' "$tmp/$label-bf16-$v.out" | later_epochs))
    else fig=$(sed -nE 's/^resnet18: ([0-9.]+) images\/sec.*/\1/p' "$tmp/$label-bf16-$v.out"); fi
    line+="${line:+, }${names[$v]} $fig $unit (peak $(torch_peak "$label-bf16-$v"))"
    if [[ -z $best ]] || awk -v a="$fig" -v b="$best_fig" -v u="$unit" 'BEGIN { exit !(u == "s/epoch" ? a < b : a > b) }'; then
      best=$v best_fig=$fig best_peak=$(torch_peak "$label-bf16-$v")
    fi
  done
  echo "$what bf16 pytorch variants (autocast bfloat16, one run each): $line"
  if [[ -n $best && $dp =~ ^[0-9.eE+-]+$ ]]; then
    printf '%s bf16 vs the fastest PyTorch bf16 (%s): dptrain %s %s (peak %s), pytorch %s %s (peak %s), %s\n' "$what" \
      "${names[$best]}" "$dp" "$unit" "$(dp_peak "$dp_metrics")" "$best_fig" "$unit" "$best_peak" \
      "$(awk -v a="$dp" -v b="$best_fig" -v u="$unit" 'BEGIN { if (u == "s/epoch") printf "pytorch/dptrain %.2fx", b / a;
                                                               else printf "dptrain/pytorch %.2fx", a / b }')"
  else
    echo "$what bf16 vs the fastest PyTorch bf16: not compared (dptrain: $dp; pytorch: ${best:-no variant ran})"
  fi
}
# LeNet in bf16 (its default layout: NCHW, its 20 and 50 channels)
dp=$(lenet_run m-bf16 --precision bf16)
bf16_row LeNet lenet torch_lenet_cuda.py "$dp" "$tmp/m-bf16.jsonl" --batch-size "$lenet_batch" --data "$data" --epochs "$epochs" ${limit:+--limit "$limit"}
on_off "LeNet bf16 (median of epochs 2-$epochs)" s/epoch "$(lenet_run m-bf16-on --precision bf16 --channels-last on)" \
  "$(lenet_run m-bf16-off --precision bf16 --channels-last off)" "$tmp/m-bf16-on.jsonl" "$tmp/m-bf16-off.jsonl"
dp=$(precision=bf16 resnet measured "$resnet_batch")
bf16_row "ResNet-18 batch $resnet_batch" "resnet-$resnet_batch" torch_resnet18_cuda.py "$dp" \
  "$tmp/r-measured-$resnet_batch-bf16.jsonl" --data "$data" --limit "$resnet_limit" --batch-size "$resnet_batch"
# (bf16's default for ResNet-18 is on: the on figure is the run above, the off one its own)
dp_bf16_off=$(precision=bf16 layout=off resnet measured "$resnet_batch")
on_off "ResNet-18 batch $resnet_batch bf16" images/sec "$dp" "$dp_bf16_off" \
  "$tmp/r-measured-$resnet_batch-bf16.jsonl" "$tmp/r-measured-$resnet_batch-bf16-cl-off.jsonl"
