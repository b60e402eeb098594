#!/usr/bin/env bash
# cli_resume_kill.sh - mid-epoch checkpoints (--save-every-steps) and exact
# resume, tested by killing runs with SIGKILL.
# - 2 devices, 4000 images, batch 32 (125 steps per epoch), 2 epochs, with
#   --augment crop:4,flip and --normalize: a run is killed three times, each
#   time at a random moment after its checkpoint has reached a target step
#   (random targets inside epoch 1, around the epoch boundary and inside
#   epoch 2), and resumed from its last checkpoint; the final checkpoint is
#   byte-identical to an uninterrupted run's, and so are the metrics lines'
#   loss, train and test accuracy; at least one resume started inside an
#   epoch (loader.batch > 0), so the mid-epoch path was taken;
# - the same with 2 MPI ranks x 1 device (mpirun; rank 1 or rank 0 killed by
#   its pid from its worklog), twice, then resumed to the end: byte-identical
#   final checkpoint;
# - `dptrain launch --restarts 1`: rank 1 killed after a mid-epoch
#   checkpoint; launch resumes from it and the job ends with the
#   uninterrupted run's tensors, bit for bit;
# - a mid-epoch checkpoint holds the epoch's per-rank sums (inspect), its
#   loader.batch is a multiple of --save-every-steps; --save-every-steps
#   without --save, or 0, is refused with one line.
source "$(dirname "$0")/testing.sh"
# under ASan (scripts/sanitize.sh address) Open MPI's own allocations are
# reported as leaks at exit: its ranks run without leak detection, as cli_mpi's
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
# meta FILE KEY: a metadata value of a checkpoint ("" when missing)
meta() { [[ -s "$1" ]] && grep -ao "\"$2\":\"[^\"]*\"" "$1" | head -1 | sed -E 's/.*:"(.*)"/\1/'; }
metric_cols() { sed -E 's/"epoch_sec".*"lr"/"lr"/; s/, "images_per_sec": [^,}]*//' "$1"; } # without timings

small_data "$tmp/small" 4000 300
job=(train --model lenet-paddle --data "$tmp/small" --epochs 2 --batch-size 32 --lr 0.05 --seed 4
     --augment crop:4,flip --normalize 0.286,0.353 --save-every-steps 5 --quiet)
steps=250

# wait_and_kill PID FILE TARGET: once FILE's step_count >= TARGET, sleep a
# random 0-0.06 s and SIGKILL PID; returns 1 when the run ended first. (A
# step takes about 5 ms here: a delay of up to 0.3 s would outrun the last
# targets of the 250-step runs, which would then now and then end before
# the kill.)
wait_and_kill() {
  local pid=$1 file=$2 target=$3 n
  for _ in $(seq 1 3000); do
    kill -0 "$pid" 2>/dev/null || return 1
    n=$(meta "$file" step_count)
    if [[ -n "$n" && $n -ge $target ]]; then
      sleep "0.0$((2 * (RANDOM % 4)))"
      kill -9 "$pid" 2>/dev/null || return 1
      return 0
    fi
    sleep 0.02
  done
  return 1
}
# random kill targets: inside epoch 1, near the epoch boundary, inside epoch 2
targets() { echo $((10 + RANDOM % 80)) $((115 + RANDOM % 20)) $((150 + RANDOM % 60)); }

# --- 2 devices -------------------------------------------------------------------
"$bin" "${job[@]}" --devices 2 --save "$tmp/ref.st" --metrics "$tmp/ref.jsonl" >/dev/null 2>&1 \
  && pass || fail "uninterrupted 2-device run"
kills=0 mid=0
for target in $(targets); do
  resume=()
  if [[ -s "$tmp/k.st" ]]; then
    resume=(--resume "$tmp/k.st")
    [[ $(meta "$tmp/k.st" loader.batch) != 0 ]] && mid=$((mid + 1))
  fi
  "$bin" "${job[@]}" --devices 2 --save "$tmp/k.st" --metrics "$tmp/k.jsonl" "${resume[@]}" >/dev/null 2>"$tmp/k.err" &
  pid=$!
  wait_and_kill $pid "$tmp/k.st" "$target" && kills=$((kills + 1))
  wait $pid 2>/dev/null
done
[[ $(meta "$tmp/k.st" loader.batch) != 0 ]] && mid=$((mid + 1))
"$bin" "${job[@]}" --devices 2 --save "$tmp/k.st" --metrics "$tmp/k.jsonl" --resume "$tmp/k.st" >/dev/null 2>"$tmp/k.err" \
  && pass || fail "2 devices: the last resume: $(cat "$tmp/k.err")"
[[ $kills -eq 3 ]] && pass || fail "2 devices: killed $kills of 3 times"
[[ $mid -ge 1 ]] && pass || fail "2 devices: no resume started inside an epoch"
cmp -s "$tmp/k.st" "$tmp/ref.st" && pass || fail "2 devices: the killed and resumed run's checkpoint differs"
# the metrics of each epoch (a kill between the metrics line and the checkpoint repeats a line)
[[ "$(metric_cols "$tmp/k.jsonl" | uniq)" == "$(metric_cols "$tmp/ref.jsonl")" ]] && pass \
  || fail "2 devices: metrics differ: $(metric_cols "$tmp/k.jsonl") vs $(metric_cols "$tmp/ref.jsonl")"
echo "2 devices: 3 kills, $mid resumes inside an epoch"

# a mid-epoch checkpoint's contents
"$bin" "${job[@]}" --devices 2 --save "$tmp/mid.st" >/dev/null 2>&1 &
pid=$!
wait_and_kill $pid "$tmp/mid.st" 40; wait $pid 2>/dev/null
b=$(meta "$tmp/mid.st" loader.batch)
[[ -n "$b" && $b -gt 0 && $((b % 5)) -eq 0 && -n "$(meta "$tmp/mid.st" epoch.loss_sums)" && \
   $(meta "$tmp/mid.st" epoch.examples) -eq $((b * 32)) ]] && pass \
  || fail "mid-epoch checkpoint: loader.batch '$b', sums '$(meta "$tmp/mid.st" epoch.loss_sums)', examples $(meta "$tmp/mid.st" epoch.examples)"

# bad values: one line, non-zero
for bad in "--save-every-steps 5" "--save-every-steps 0 --save $tmp/x.st" "--save-every-steps x --save $tmp/x.st"; do
  out=$("$bin" train --data "$tmp/small" --epochs 1 $bad 2>&1) && fail "$bad accepted" \
    || { grep -q -- "--save-every-steps" <<<"$out" && [[ $(wc -l <<<"$out") -eq 1 ]] && pass || fail "$bad: $out"; }
done
[[ ! -e "$tmp/x.st" ]] && pass || fail "a refused run wrote its --save file"

# --- 2 MPI ranks x 1 device -------------------------------------------------------
if command -v mpirun >/dev/null; then
  mpi=("${mpi_env[@]}" mpirun --allow-run-as-root --oversubscribe -np 2)
  "${mpi[@]}" "$bin" "${job[@]}" --devices 1 --save "$tmp/mref.st" >"$tmp/mref.out" 2>&1 \
    && pass || fail "uninterrupted 2-rank run: $(tail -3 "$tmp/mref.out")"
  kills=0 mid=0
  for target in $(targets | cut -d' ' -f1,3); do
    resume=()
    if [[ -s "$tmp/m.st" ]]; then
      resume=(--resume "$tmp/m.st")
      [[ $(meta "$tmp/m.st" loader.batch) != 0 ]] && mid=$((mid + 1))
    fi
    rm -rf "$tmp/mlog"; mkdir -p "$tmp/mlog"
    DPTRAIN_LOG_DIR="$tmp/mlog" "${mpi[@]}" -x DPTRAIN_LOG_DIR "$bin" "${job[@]}" --devices 1 --save "$tmp/m.st" \
      "${resume[@]}" >"$tmp/m.out" 2>&1 &
    launcher=$!
    victim=$((RANDOM % 2))
    for _ in $(seq 1 500); do [[ -s "$tmp/mlog/worklog.$victim" ]] && break; sleep 0.02; done
    rpid=$(sed -nE "s/^rank $victim of 2, .* pid ([0-9]+)\$/\\1/p" "$tmp/mlog/worklog.$victim" 2>/dev/null)
    if [[ -n "$rpid" ]] && wait_and_kill "$rpid" "$tmp/m.st" "$target"; then kills=$((kills + 1)); fi
    for _ in $(seq 1 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    wait "$launcher" 2>/dev/null
  done
  [[ $(meta "$tmp/m.st" loader.batch) != 0 ]] && mid=$((mid + 1))
  "${mpi[@]}" "$bin" "${job[@]}" --devices 1 --save "$tmp/m.st" --resume "$tmp/m.st" >"$tmp/m.out" 2>&1 \
    && pass || fail "2 ranks: the last resume: $(tail -3 "$tmp/m.out")"
  [[ $kills -eq 2 ]] && pass || fail "2 ranks: killed $kills of 2 times"
  [[ $mid -ge 1 ]] && pass || fail "2 ranks: no resume started inside an epoch"
  cmp -s "$tmp/m.st" "$tmp/mref.st" && pass || fail "2 ranks: the killed and resumed run's checkpoint differs"
  echo "2 ranks: 2 kills, $mid resumes inside an epoch"

  # dptrain launch --restarts 1: rank 1 killed after a mid-epoch checkpoint
  "${mpi_env[@]}" "$bin" launch --np 2 --restarts 1 --log-dir "$tmp/log" -- "${job[@]}" --devices 1 --save "$tmp/l.st" \
    >"$tmp/l.out" 2>&1 &
  launcher=$!
  for _ in $(seq 1 500); do [[ -s "$tmp/log/worklog.1" ]] && break; sleep 0.02; done
  rpid=$(sed -nE 's/^rank 1 of 2, .* pid ([0-9]+)$/\1/p' "$tmp/log/worklog.1" 2>/dev/null)
  killed=0
  [[ -n "$rpid" ]] && wait_and_kill "$rpid" "$tmp/l.st" $((20 + RANDOM % 60)) && killed=1
  lb=$(meta "$tmp/l.st" loader.batch)
  for _ in $(seq 1 1200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  wait "$launcher"
  status=$?
  [[ $killed -eq 1 && $status -eq 0 ]] && pass || fail "launch --restarts 1: killed $killed, exit $status: $(tail -5 "$tmp/l.out")"
  [[ -n "$lb" && $lb != 0 ]] && pass || fail "launch: the checkpoint at the kill was not inside an epoch ($lb)"
  grep -q "restart 1 of 1, resuming from $tmp/l.st" "$tmp/l.out" && pass || fail "launch: $(grep launch "$tmp/l.out")"
  same_tensors "$tmp/l.st" "$tmp/mref.st" && pass || fail "launch: the restarted job's tensors differ"
else
  fail "mpirun not found (openmpi-bin)"
fi
testing_finish cli_resume_kill
