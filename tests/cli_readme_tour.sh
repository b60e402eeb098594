#!/usr/bin/env bash
# cli_readme_tour.sh - the tour of README.md runs as written: its first sh
# block after "## A tour" is extracted and run with bash -e in an empty
# directory, so a command of the front page that stops working fails here.
# What the test changes, and only that:
# - `build/dptrain` and `cmake --install build` name this build (DPTRAIN_BIN's
#   directory); `build/dptrain` is a wrapper that adds `--data SMALL` (256
#   training and 50 test images of Fashion-MNIST) to train, eval and
#   launch, so the CPU lines run their epochs as written, in seconds;
# - lines on cuda:N run on the CUDA emulator (the build's
#   lib/libdptrain_cuda_emu.so, as cli_cuda_emu.sh does), with `--limit 32
#   --batch-size 32 --epochs 1` added (the emulator runs kernels thread by thread); without
#   the emulator they are skipped with a printed reason, as `launch` is
#   without mpirun;
# - HOME is a temporary directory (the tour installs into $HOME/dptrain) and
#   ankle_boot.png is a test image of Fashion-MNIST.
# Then it checks what the tour says it made: the metrics and plot, the
# worklogs, a checkpoint resumed to the bytes of 2 epochs straight, eval's
# and predict's lines, an ONNX file, the C program's line.
# README_TOUR_FILE=PATH tests another README (the mutation check).
source "$(dirname "$0")/testing.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$(dirname "$bin")" && pwd)
readme=${README_TOUR_FILE:-$src/README.md}
emu="$build/lib/libdptrain_cuda_emu.so"

awk '/^## A tour/ { tour = 1 } tour && /^```sh$/ { block = 1; next } block && /^```$/ { exit } block { print }' \
  "$readme" >"$tmp/tour.sh"
[[ $(grep -c 'build/dptrain' "$tmp/tour.sh") -ge 10 ]] && pass || fail "no tour of 10 or more dptrain commands in $readme"

small_data "$tmp/small" 256 50
mkdir -p "$tmp/wrap" "$tmp/home" "$tmp/work" "$tmp/png"
cat >"$tmp/wrap/dptrain" <<WRAP
#!/usr/bin/env bash
args=("\$@")
if [[ " \$* " == *cuda:* ]]; then
  if [[ ! -e "$emu" ]]; then echo "cli_readme_tour: SKIPPED (no CUDA emulator in this build): dptrain \$*"; exit 0; fi
  export DPTRAIN_CUDA_MODULE="$emu" DPTRAIN_CUDA_EMU_GPUS=2
  args+=(--limit 32 --batch-size 32 --epochs 1)
fi
if [[ \$1 == launch ]] && ! command -v mpirun >/dev/null; then echo "cli_readme_tour: SKIPPED (no mpirun): dptrain \$*"; exit 0; fi
case \$1 in train|eval|launch) args+=(--data "$tmp/small") ;; esac
exec "$bin" "\${args[@]}"
WRAP
chmod +x "$tmp/wrap/dptrain"
/usr/bin/python3 "$src/tools/check_onnx.py" pngs "$tmp/small/t10k-images-idx3-ubyte" 1 "$tmp/png" \
  && cp "$tmp"/png/*.png "$tmp/work/ankle_boot.png" || fail "writing the test image"

{ echo 'trap '"'"'echo "the tour stopped at: $BASH_COMMAND" >&2'"'"' ERR'
  sed -e "s#build/dptrain#\"$tmp/wrap/dptrain\"#g" -e "s#cmake --install build #cmake --install \"$build\" #g" \
  "$tmp/tour.sh"; } >"$tmp/tour_run.sh"
if (cd "$tmp/work" && HOME="$tmp/home" bash -e -o pipefail "$tmp/tour_run.sh") >"$tmp/tour.out" 2>&1; then
  pass
else
  fail "$(grep -m1 '^the tour stopped at: ' "$tmp/tour.out" || tail -3 "$tmp/tour.out")"
fi
cat "$tmp/tour.out"

w=$tmp/work
[[ $(wc -l <"$w/run.jsonl" 2>/dev/null) -eq 10 ]] && pass || fail "run.jsonl: not 10 epochs"
grep -q '<svg' "$w/run.svg" 2>/dev/null && pass || fail "run.svg: no plot"
if command -v mpirun >/dev/null; then
  [[ -s $w/logs/worklog.0 && -s $w/logs/worklog.1 ]] && pass || fail "launch: no worklog.0 and worklog.1"
fi
"$bin" train --data "$tmp/small" --epochs 2 --devices 2 --save "$tmp/straight.st" --quiet >/dev/null 2>&1
same_tensors "$w/ck.safetensors" "$tmp/straight.st" && pass || fail "the resumed checkpoint differs from 2 epochs straight"
grep -qE '^test acc: [0-9.]+ \([0-9]+/50 correct\)' "$tmp/tour.out" && pass || fail "no eval line"
grep -qE '^ankle_boot.png: [^,]+ [0-9.]+, [^,]+ [0-9.]+$' "$tmp/tour.out" && pass || fail "no predict line with 2 classes"
[[ -s $w/model.onnx ]] && pass || fail "no model.onnx"
grep -qE '^test acc 0\.[0-9]{3}$' "$tmp/tour.out" && pass || fail "the C program printed no test accuracy"
if [[ -e "$emu" ]]; then
  [[ $(grep -c 'on \[cuda:0' "$tmp/tour.out") -ge 2 ]] && pass || fail "the GPU lines did not train on cuda:0"
fi
testing_finish cli_readme_tour
