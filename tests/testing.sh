# testing.sh - the shell side of testing.h, sourced by cli_*.sh tests: the
# binary and data paths, a temporary directory removed on exit, pass/fail
# counters, and a reader for one field of a --metrics JSON line.
# testing_finish NAME prints "NAME: N passed, N failed" and sets the status.
set -u
bin=${DPTRAIN_BIN:?DPTRAIN_BIN must point at the dptrain binary}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the measured cuDNN algorithms of runs on a GPU or the emulator (the default mode) into this test's own file,
# never the user's cache
export DPTRAIN_CUDNN_ALGO_CACHE=${DPTRAIN_CUDNN_ALGO_CACHE:-$tmp/cudnn-algos}
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
# json_field LINE KEY: the value of KEY in a one-line JSON object
json_field() { sed -E "s/.*\"$2\": *([^,}]*).*/\1/" <<<"$1"; }
testing_finish() {
  echo "$1: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
# tensors FILE: a safetensors file without its header (the tensors' bytes);
# same_tensors A B: both non-empty and their tensors byte-identical
tensors() { local h; h=$(od -An -t u8 -N 8 "$1" | tr -d ' '); tail -c +$((9 + h)) "$1"; }
same_tensors() { [[ -s "$1" && -s "$2" ]] && cmp -s <(tensors "$1") <(tensors "$2"); }
# none_left LABEL [PATTERN]: nothing of this test's jobs left running (their command lines name $tmp);
# what is, is named and killed (PATTERN: the processes to kill, default $tmp/small)
none_left() {
  local left
  left=$(pgrep -af -- "$tmp" | grep -v -e pgrep -e "^$$ ")
  [[ -z "$left" ]] && pass || { fail "$1: left running: $left"; pkill -9 -f -- "${2:-$tmp/small}"; }
}
# without_meta IN OUT KEY...: the checkpoint IN without its metadata KEY... (e.g. a file of an older dptrain)
without_meta() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for key in sys.argv[3:]:
    del h["__metadata__"][key]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-(8 + len(t)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
}
# small_data DIR N_TRAIN N_TEST: the first images of Fashion-MNIST as plain IDX
# files (a small test split keeps each epoch's evaluation short)
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
small_data() {
  mkdir -p "$1"
  local split n
  for split in train t10k; do
    [[ $split == train ]] && n=$2 || n=$3
    { printf '\x00\x00\x08\x03'; be32 "$n"; be32 28; be32 28
      gzip -dc "$data/$split-images-idx3-ubyte.gz" | tail -c +17 | head -c $((n * 784)); } >"$1/$split-images-idx3-ubyte"
    { printf '\x00\x00\x08\x01'; be32 "$n"
      gzip -dc "$data/$split-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$n"; } >"$1/$split-labels-idx1-ubyte"
  done
}
# mode_run VAR NAME MODE ARGS...: "$bin" "${common[@]}" (the script's) ARGS
# with VAR=MODE in its environment, saving $tmp/NAME.st, $tmp/NAME.jsonl
# and its output $tmp/NAME.out; passes when it exits 0 (an A/B switch's runs).
mode_run() {
  local var=$1 name=$2 mode=$3
  shift 3
  env "$var=$mode" "$bin" "${common[@]}" "$@" --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" \
    >"$tmp/$name.out" 2>&1 && pass || fail "$name: $(tail -3 "$tmp/$name.out")"
}
# refused_setting VAR VALUE MESSAGE: "$bin" "${common[@]}" --epochs 1 with
# VAR=VALUE refused: a non-zero exit, one line containing MESSAGE, no
# checkpoint or metrics written.
refused_setting() {
  local var=$1 value=$2 message=$3
  env "$var=$value" "$bin" "${common[@]}" --epochs 1 --save "$tmp/bad.st" --metrics "$tmp/bad.jsonl" \
    >"$tmp/bad.out" 2>&1 && fail "$var=$value accepted" || pass
  grep -qF "$message" "$tmp/bad.out" && pass || fail "$var=$value: $(cat "$tmp/bad.out")"
  [[ $(grep -c . "$tmp/bad.out") == 1 ]] && pass || fail "$var=$value: not one line: $(cat "$tmp/bad.out")"
  [[ ! -e $tmp/bad.st && ! -e $tmp/bad.jsonl ]] && pass || fail "$var=$value: a file was written"
}
# emu_step_peak VAR SETTING...: one step of tests/models/tiny_resnet.cfg at
# batch 512 (past a step arena's first 16 MiB) on the emulator's cuda:0
# (DPTRAIN_CUDA_MODULE set by the caller) with the environment SETTING...;
# passes when it runs, and VAR becomes its device memory peak (the metrics'
# device_mem_peak_bytes; empty when it failed).
emu_step_peak() {
  local var=$1 name=mem-$1
  shift
  [[ -s $tmp/mem/train-images-idx3-ubyte ]] || small_data "$tmp/mem" 512 16
  env "$@" "$bin" train --data "$tmp/mem" --batch-size 512 --limit 512 --epochs 1 --lr 0.05 \
    --model "$(dirname "${BASH_SOURCE[0]}")/models/tiny_resnet.cfg" --devices cuda:0 --quiet \
    --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 && pass || fail "memory run $*: $(tail -3 "$tmp/$name.out")"
  printf -v "$var" '%s' "$(json_field "$(tail -1 "$tmp/$name.jsonl" 2>/dev/null)" device_mem_peak_bytes)"
}
# emu_modes: the emulator's ways to run a step that the arena's tests go through;
# emu_mode_args NAME: args = NAME's train options (graph: step graphs;
# bf16-nhwc: bf16 channels-last activations; nccl: 2 GPUs summed by NCCL)
emu_modes=(graph bf16-nhwc nccl)
emu_mode_args() {
  case $1 in
    graph) args=(--devices cuda:0 --cuda-graph on) ;;
    bf16-nhwc) args=(--devices cuda:0 --precision bf16 --channels-last on) ;;
    nccl) args=(--devices cuda:0,cuda:1) ;;
  esac
}
# needs_cuda_emulator: emu = the build's CUDA emulator module; without one
# (a build without CUDA) the test says SKIPPED and exits 77.
needs_cuda_emulator() {
  emu="$(dirname "$bin")/lib/libdptrain_cuda_emu.so"
  if [[ ! -e "$emu" ]]; then
    echo "$(basename "$0" .sh): SKIPPED: no CUDA emulator in this build (built without CUDA)"
    exit 77
  fi
}
# train_run NAME DEVICES ARGS...: "$bin" "${common[@]}" (the script's) on
# DEVICES, saving $tmp/NAME.st, $tmp/NAME.jsonl and its output $tmp/NAME.out;
# passes when it exits 0. same_run A B: their checkpoint tensors byte-identical
# and their last train_loss equal to the last digit.
# close_checkpoints A B TOL: every float tensor of checkpoint A within TOL x its largest |value| in B,
# except the optimizer's state; prints the worst ratio and its tensor's name
close_checkpoints() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    h = struct.unpack("<Q", b[:8])[0]
    hdr, base, out = json.loads(b[8:8 + h]), 8 + h, {}
    for k, v in hdr.items():
        if k != "__metadata__" and v.get("dtype") == "F32" and not k.startswith("optimizer."):
            s, e = v["data_offsets"]
            out[k] = struct.unpack("<%df" % ((e - s) // 4), b[base + s:base + e])
    return out
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys() and a, "tensors differ"
worst = max((max(abs(x - y) for x, y in zip(a[k], b[k])) / max(max(abs(y) for y in b[k]), 1e-30), k) for k in a)
print("%.3g %s" % worst)
sys.exit(0 if worst[0] <= tol else 1)
EOF
}
# saved_run NAME ARGS...: "$bin" ARGS --save $tmp/NAME.st, its output in
# $tmp/NAME.out; passes when it exits 0.
saved_run() {
  local name=$1
  shift
  "$bin" "$@" --save "$tmp/$name.st" >"$tmp/$name.out" 2>&1 && pass || fail "$name: $(tail -3 "$tmp/$name.out")"
}
# meta_value FILE KEY: checkpoint FILE's metadata KEY as `dptrain inspect`
# prints it (empty: not there).
meta_value() { "$bin" inspect "$1" 2>&1 | sed -n "s/^  $2 = //p"; }
# refused_run MESSAGE ARGS...: "$bin" ARGS --save $tmp/never.st exits
# non-zero with one line on stderr containing MESSAGE, and writes nothing.
refused_run() {
  local want=$1
  shift
  rm -f "$tmp/never.st"
  "$bin" "$@" --save "$tmp/never.st" >"$tmp/bad.out" 2>"$tmp/bad.err"
  [[ $? -ne 0 && $(wc -l <"$tmp/bad.err") -eq 1 && ! -e "$tmp/never.st" ]] && grep -q -- "$want" "$tmp/bad.err" \
    && pass || fail "$*: $(cat "$tmp/bad.err")"
}
last_loss() { json_field "$(tail -1 "$1")" train_loss; }
train_run() {
  local name=$1 devices=$2
  shift 2
  "$bin" "${common[@]}" --devices "$devices" --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" "$@" \
    >"$tmp/$name.out" 2>&1 && pass || fail "$name on $devices: $(tail -3 "$tmp/$name.out")"
}
same_run() {
  same_tensors "$tmp/$1.st" "$tmp/$2.st" && pass || fail "$1 vs $2: checkpoint tensors differ"
  [[ -n "$(last_loss "$tmp/$1.jsonl")" && "$(last_loss "$tmp/$1.jsonl")" == "$(last_loss "$tmp/$2.jsonl")" ]] && pass \
    || fail "$1 vs $2: train_loss $(last_loss "$tmp/$1.jsonl") vs $(last_loss "$tmp/$2.jsonl")"
}
