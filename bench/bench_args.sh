# bench_args.sh - sourced by the bench scripts: the checks of their
# arguments and of what they need, before any work. A failure is one line on
# stderr naming the script, the argument or the missing piece and what was
# found; exit status 2 for a bad argument (as the C benchmarks' usage
# errors), 1 for something missing.
#
# need_count SCRIPT WHAT VALUE MIN: VALUE is a whole number, at least MIN
# need_number SCRIPT WHAT VALUE: VALUE is a number above 0 (seconds)
# need_program SCRIPT PATH HINT: PATH is an executable file; HINT says how to make it
# need_python SCRIPT MODULE...: /usr/bin/python3 (the peers' Python) imports every MODULE
need_count() {
  [[ $3 =~ ^[0-9]+$ ]] && (( 10#$3 >= $4 )) ||
    { echo "$1: $2 must be a whole number of at least $4, found '$3'" >&2; exit 2; }
}
need_number() {
  [[ $3 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v v="$3" 'BEGIN { exit !(v > 0) }' ||
    { echo "$1: $2 must be a number above 0, found '$3'" >&2; exit 2; }
}
need_program() {
  [[ -f $2 && -x $2 ]] || { echo "$1: no program $2 ($3)" >&2; exit 1; }
}
need_python() {
  local script=$1 missing
  shift
  [[ -x /usr/bin/python3 ]] || { echo "$script: no /usr/bin/python3 (scripts/setup.sh bench installs the peers)" >&2; exit 1; }
  missing=$(/usr/bin/python3 - "$@" 2>/dev/null <<'PY'
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:
        print(f"{name} ({type(e).__name__}: {e})".splitlines()[0])
        break
PY
)
  [[ -z $missing ]] ||
    { echo "$script: /usr/bin/python3 cannot import $missing: scripts/setup.sh bench installs the peers' packages" >&2; exit 1; }
}
# has_gpu: an NVIDIA GPU may be here (dptrain's own signs, src/backend/backend_registry.c's gpu_absent: a
# device node of the driver or its /proc folder; or nvidia-smi's list). gpu_check.sh and cli_bench_args use it too.
has_gpu() {
  [[ -e /dev/nvidiactl || -e /dev/dxg ]] || compgen -G '/dev/nvidia[0-9]*' >/dev/null ||
    compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null || [[ $'\n'$(nvidia-smi -L 2>/dev/null) == *$'\n'GPU\ * ]]
  # (nvidia-smi's list read whole: a pipe into grep -q could end it with SIGPIPE, a failure under pipefail)
}
# need_gpu SCRIPT: has_gpu, or a CUDA module named by DPTRAIN_CUDA_MODULE (as gpu_check.sh's rehearsal names
# the emulator)
need_gpu() {
  if [[ -n ${DPTRAIN_CUDA_MODULE:-} ]] || has_gpu; then
    return 0
  fi
  echo "$1: no NVIDIA GPU on this machine (no /dev/nvidia*): it runs on one with a GPU (scripts/gpu_check.sh);" \
       "scripts/gpu_check.sh rehearse BUILD rehearses it on the CUDA emulator" >&2
  exit 1
}
