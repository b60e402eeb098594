#!/usr/bin/env bash
# cli_cudnn_algo_resume_emu.sh - the cuDNN convolution algorithms a
# checkpoint keeps (cuda.conv_algorithms, checkpoint.h) and a resume
# installs (conv_cuda.c, algo_choices.c), on the CUDA emulator, whose
# algorithms all compute alike (what differs is only which one is called:
# DPTRAIN_CUDNN_ALGO_LOG says) and whose measured choices differ from its
# heuristic ones. Skipped (77) in a build without CUDA. Checks:
# - a measured run saves every choice it ran (the cache file's keys and
#   algorithms), and `dptrain inspect` says how many;
# - a measured resume with an empty cache directory makes no find query,
#   runs every stored algorithm, writes no cache file, and ends in the bytes
#   of 2 straight epochs; a heuristic resume asks the heuristics nothing
#   and runs the measured algorithms, not its own;
# - stored choices naming another GPU and cuDNN version, with other
#   algorithms, are run as stored (by `dptrain eval` too);
# - a stored algorithm cuDNN refuses, or one it does not know: one warning
#   line naming it, the usual choice, the run completes with the same
#   tensors and the new checkpoint holds what ran;
# - on two GPUs (each its own keys) a resume measures nothing and ends in
#   the bytes of 2 straight epochs;
# - a CPU resume ignores the key (and saves none); a checkpoint without the
#   key resumes on the GPU as before (measured again); a GPU run without a
#   convolution saves none.
source "$(dirname "$0")/testing.sh"
needs_cuda_emulator
export DPTRAIN_CUDA_MODULE=$emu DPTRAIN_CUDA_EMU_GPUS=1
unset DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED
# the runs that name no mode: heuristic (the default is measured; the measured runs name it and their cache)
export DPTRAIN_CUDNN_ALGO=heuristic DPTRAIN_CUDNN_ALGO_CACHE=$tmp/default/algos
py=/usr/bin/python3
small_data "$tmp/data" 384 100
model=$(dirname "$0")/models/every_layer.cfg
common=(train --data "$tmp/data" --limit 192 --batch-size 96 --lr 0.1 --seed 3 --epochs 2 --quiet --model "$model")
# run NAME ENV... -- ARGS...: one run on cuda:0 (saving $tmp/NAME.st) with the emulator's statistics and the choices logged
run() {
  local name=$1 envs=()
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  env DPTRAIN_CUDA_EMU_STATS=1 DPTRAIN_CUDNN_ALGO_LOG=1 "${envs[@]}" "$bin" "${common[@]}" --devices cuda:0 \
    --save "$tmp/$name.st" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1 \
    && pass || fail "$name: $(grep -vE '^cuda emulator: ([0-9]+ kernel|cuDNN:)' "$tmp/$name.out" | tail -2)"
}
finds() { sed -nE 's/^cuda emulator: cuDNN: .* ([0-9]+) find queries$/\1/p' "$tmp/$1.out"; }
heuristics() { sed -nE 's/^cuda emulator: cuDNN: [0-9]+ descriptors created, ([0-9]+) heuristic queries.*/\1/p' "$tmp/$1.out"; }
# choices NAME: "convolution direction: algorithm N" per choice logged, sorted
choices() { sed -nE 's/^cuda:0: cuDNN (.*): (algorithm [0-9]+), .*/\1: \2/p' "$tmp/$1.out" | sort; }
# stored FILE: the checkpoint's choices, "KEY<tab>ALGO" sorted ("" without the key)
stored() {
  "$py" -c 'import json, struct, sys
data = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", data[:8])[0]
for c in json.loads(json.loads(data[8:8 + n])["__metadata__"].get("cuda.conv_algorithms", "[]")):
    print("%s\t%d" % (c["key"], c["algo"]))' "$1" | sort
}
# rewrite IN OUT PYTHON: OUT = IN with its choices (a list `c` of {"key", "algo"}; deleted when set to None) changed
# by the PYTHON statements; the header padded with spaces to its old length when shorter
rewrite() {
  "$py" -c 'import json, struct, sys
data = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n]); m = h["__metadata__"]; c = json.loads(m["cuda.conv_algorithms"])
exec(sys.argv[3])
if c is None: del m["cuda.conv_algorithms"]
else: m["cuda.conv_algorithms"] = json.dumps(c, separators=(",", ":"))
text = json.dumps(h, separators=(",", ":")).encode()
text += b" " * max(0, n - len(text)) + b" " * ((8 - len(text) % 8) % 8 if len(text) > n else 0)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])' "$1" "$2" "$3"
}

# (a) a measured run, 1 epoch of 2: every choice it ran in the checkpoint, as in the cache file
run one DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$tmp/cache1/algos" -- --stop-after 1
measured=$(grep -cE ': algorithm [0-9]+, measured: the fastest of ' "$tmp/one.out")
[[ $measured -gt 0 && $(finds one) -eq $measured ]] && pass || fail "one: $measured measured choices, $(finds one) finds"
diff <(stored "$tmp/one.st") <(tail -n +2 "$tmp/cache1/algos" | sort) >/dev/null && pass \
  || fail "one: the checkpoint's choices are not the cache file's: $(diff <(stored "$tmp/one.st") <(tail -n +2 "$tmp/cache1/algos" | sort) | head -3)"
"$bin" inspect "$tmp/one.st" >"$tmp/inspect.out" 2>&1 && grep -qx "cuda conv algorithms: $measured stored" "$tmp/inspect.out" \
  && pass || fail "inspect: $(grep -E 'cuda|rror' "$tmp/inspect.out")"
echo "cli_cudnn_algo_resume_emu: every_layer: $measured choices stored"

# 2 epochs straight, measured (its own cache)
run straight DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$tmp/cache2/algos"
# (b, c) measured resume, the cache directory empty: no find, the stored algorithms, the straight run's bytes
run resumed DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$tmp/empty/algos" -- --resume "$tmp/one.st"
[[ $(finds resumed) == 0 ]] && pass || fail "resumed: $(finds resumed) find queries, want 0"
[[ $(grep -c ', installed from the checkpoint$' "$tmp/resumed.out") -eq $measured ]] && pass \
  || fail "resumed: $(grep -c ', installed from the checkpoint$' "$tmp/resumed.out") installed choices, want $measured"
diff <(choices one) <(choices resumed) >/dev/null && pass || fail "resumed: other algorithms than the measured run's"
[[ ! -e "$tmp/empty/algos" ]] && pass || fail "resumed: the stored choices went to the cache file"
cmp "$tmp/straight.st" "$tmp/resumed.st" && pass || fail "2 straight epochs and 1 + resume + 1 differ"
# heuristic resume: the stored (measured) algorithms, not the heuristics' (which differ here)
run heuristic-one -- --stop-after 1
! diff <(choices one) <(choices heuristic-one) >/dev/null && pass \
  || fail "the emulator's heuristics choose as its measurements: the heuristic resume below proves nothing"
run heuristic-resumed -- --resume "$tmp/one.st"
[[ $(heuristics heuristic-resumed) == 0 && $(finds heuristic-resumed) == 0 ]] && pass \
  || fail "heuristic resume: $(heuristics heuristic-resumed) heuristic queries, $(finds heuristic-resumed) finds, want 0"
diff <(choices one) <(choices heuristic-resumed) >/dev/null && pass || fail "heuristic resume: not the stored algorithms"
cmp "$tmp/straight.st" "$tmp/heuristic-resumed.st" && pass || fail "heuristic resume: not the straight run's bytes"

# choices of another GPU and cuDNN version, every one the direction's fixed algorithm: run as stored
rewrite "$tmp/one.st" "$tmp/in-other.st" '
for e in c: e["key"] = "Other GPU|cuDNN 1|" + e["key"].split("|", 2)[2]; e["algo"] = 1'
run other -- --resume "$tmp/in-other.st"
[[ $(grep -c ', installed from the checkpoint$' "$tmp/other.out") -eq $measured && $(heuristics other) == 0 ]] && pass \
  || fail "other GPU: $(grep -c ', installed from the checkpoint$' "$tmp/other.out") installed, $(heuristics other) heuristic queries"
[[ $(choices other | grep -vc ': algorithm 1$') == 0 ]] && pass || fail "other GPU: $(choices other | grep -v ': algorithm 1$' | head -2)"
same_tensors "$tmp/straight.st" "$tmp/other.st" && pass || fail "other GPU: other tensors"

# dptrain eval installs them too: the stored algorithms, no heuristic query
env DPTRAIN_CUDA_EMU_STATS=1 DPTRAIN_CUDNN_ALGO_LOG=1 "$bin" eval --resume "$tmp/in-other.st" --data "$tmp/data" \
  --devices cuda:0 >"$tmp/eval.out" 2>&1 && [[ $(heuristics eval) == 0 && $(grep -c ', installed from the checkpoint$' "$tmp/eval.out") -gt 0 ]] \
  && [[ $(choices eval | grep -vc ': algorithm 1$') == 0 ]] && pass || fail "eval: $(grep -v '^cuda' "$tmp/eval.out" | tail -2)"

# (d) a stored algorithm cuDNN refuses (the first forward choice set to 0, refused), one it does not know (99)
rewrite "$tmp/in-other.st" "$tmp/in-refused.st" '
first = [e for e in c if e["key"].endswith("|forward")][0]; first["algo"] = 0
open(sys.argv[2] + ".key", "w").write(first["key"].split("|", 2)[2])'
run refused DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED=fwd:0 -- --resume "$tmp/in-refused.st"
conv=$(cat "$tmp/in-refused.st.key")
[[ $(grep -c warning "$tmp/refused.out") == 1 ]] && grep -qxF "dptrain: warning: cuda:0: the checkpoint's cuDNN algorithm 0 for $conv: refused by cuDNN on this GPU (CUDNN_STATUS_NOT_SUPPORTED); choosing as DPTRAIN_CUDNN_ALGO says instead" "$tmp/refused.out" \
  && pass || fail "refused: $(grep warning "$tmp/refused.out")"
same_tensors "$tmp/straight.st" "$tmp/refused.st" && pass || fail "refused: other tensors"
stored "$tmp/refused.st" | grep -F "|$conv	" | grep -qvP '\t0$' && pass || fail "refused: the new checkpoint keeps $(stored "$tmp/refused.st" | grep -F "|$conv	")"
rewrite "$tmp/in-other.st" "$tmp/in-unknown.st" '
first = [e for e in c if e["key"].endswith("|backward filter")][0]; first["algo"] = 99
open(sys.argv[2] + ".key", "w").write(first["key"].split("|", 2)[2])'
run unknown -- --resume "$tmp/in-unknown.st"
conv=$(cat "$tmp/in-unknown.st.key")
[[ $(grep -c warning "$tmp/unknown.out") == 1 ]] && grep -qxE "dptrain: warning: cuda:0: the checkpoint's cuDNN algorithm 99 for .*\|backward filter: unknown to cuDNN [0-9]+ \(its algorithms are 0 to [0-9]+\); choosing as DPTRAIN_CUDNN_ALGO says instead" "$tmp/unknown.out" \
  && grep -qF "algorithm 99 for $conv:" "$tmp/unknown.out" && pass || fail "unknown: $(grep warning "$tmp/unknown.out")"
same_tensors "$tmp/straight.st" "$tmp/unknown.st" && pass || fail "unknown: other tensors"

# (e) a CPU resume ignores the key and saves none; a checkpoint without it resumes on the GPU, measuring again
"$bin" "${common[@]}" --devices cpu:0 --resume "$tmp/one.st" --save "$tmp/cpu.st" >"$tmp/cpu.out" 2>&1 \
  && ! grep -q warning "$tmp/cpu.out" && pass || fail "cpu resume: $(tail -2 "$tmp/cpu.out")"
[[ -s "$tmp/cpu.st" && -z "$(stored "$tmp/cpu.st")" ]] && pass || fail "cpu resume: the checkpoint holds choices"
rewrite "$tmp/one.st" "$tmp/in-without.st" 'c = None'
run without DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$tmp/cache3/algos" -- --resume "$tmp/in-without.st"
[[ $(finds without) -eq $measured && $(grep -c 'installed from the checkpoint' "$tmp/without.out") == 0 ]] && pass \
  || fail "without the key: $(finds without) finds, want $measured"
cmp "$tmp/straight.st" "$tmp/without.st" && pass || fail "without the key: not the straight run's bytes"
# two GPUs (choices keyed by each GPU's name): a resume with an empty cache measures nothing and gives the straight bytes
two() { # two CACHE ARGS...: a measured run on cuda:0,cuda:1
  local cache=$1
  shift
  env DPTRAIN_CUDA_EMU_GPUS=2 DPTRAIN_CUDA_EMU_STATS=1 DPTRAIN_CUDNN_ALGO=measured DPTRAIN_CUDNN_ALGO_CACHE="$cache" \
    "$bin" "${common[@]}" --devices cuda:0,cuda:1 "$@" >"$tmp/two.out" 2>&1 && pass || fail "two GPUs: $(tail -2 "$tmp/two.out")"
}
two "$tmp/cache4/algos" --stop-after 1 --save "$tmp/two-one.st"
two "$tmp/cache5/algos" --save "$tmp/two-straight.st"
two "$tmp/empty2/algos" --resume "$tmp/two-one.st" --save "$tmp/two-resumed.st"
[[ $(stored "$tmp/two-one.st" | grep -c '^dptrain CUDA emulator GPU 1|') -gt 0 && $(finds two) == 0 ]] && pass \
  || fail "two GPUs: $(stored "$tmp/two-one.st" | grep -c 'GPU 1|') choices of GPU 1 stored, $(finds two) finds on resume"
cmp "$tmp/two-straight.st" "$tmp/two-resumed.st" && pass || fail "two GPUs: 2 straight epochs and 1 + resume + 1 differ"

# a GPU run without a convolution saves no key (and saves)
printf '[net]\nname = flat\nchannels = 1\nheight = 28\nwidth = 28\n\n[flatten]\n\n[linear]\nname = fc\nout = 10\n' >"$tmp/flat.cfg"
"$bin" "${common[@]}" --model "$tmp/flat.cfg" --devices cuda:0 --save "$tmp/flat.st" >"$tmp/flat.out" 2>&1 \
  && [[ -s "$tmp/flat.st" && -z "$(stored "$tmp/flat.st")" ]] && pass || fail "no convolution: $(tail -2 "$tmp/flat.out")"
testing_finish cli_cudnn_algo_resume_emu
