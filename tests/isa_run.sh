#!/usr/bin/env bash
# isa_run.sh ISA PROGRAM [ARGS...] - runs a test program with its kernels
# capped to ISA (DPTRAIN_ISA, include/dptrain/cpu.h), so one machine tests
# every path it can run. Exit 77 (ctest: skipped) when this CPU cannot run
# ISA, as `dptrain version` says; any other refusal fails. $DPTRAIN_EMULATOR
# (e.g. qemu-aarch64 for a cross build) runs the binaries.
set -u
isa=$1
shift
emu=(${DPTRAIN_EMULATOR:-})
out=$(DPTRAIN_ISA=$isa "${emu[@]}" "${DPTRAIN_BIN:?DPTRAIN_BIN must point at the dptrain binary}" version 2>&1)
status=$?
if [[ $status -ne 0 ]] && grep -q "this CPU does not support it" <<<"$out"; then
  echo "skipped: $out"
  exit 77
fi
if [[ $status -ne 0 ]] || ! grep -qx "isa: $isa" <<<"$out"; then
  echo "FAILED: DPTRAIN_ISA=$isa dptrain version (exit $status):" >&2
  echo "$out" >&2
  exit 1
fi
export DPTRAIN_ISA=$isa
exec "${emu[@]}" "$@"
