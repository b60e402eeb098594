#!/usr/bin/env bash
# cli_disk_full.sh - a checkpoint written to a full disk: the save fails
# with one line naming the real cause (ENOSPC, "No space left on device",
# kept by src/io/file_atomic.c from the write that failed, not a generic
# "Input/output error"), exit status 1, no temporary file left, and the
# previous checkpoint intact: resumed, it ends with the bytes of an
# uninterrupted run. The disk is a tmpfs of 900 KB in a mount namespace of
# the test's own (unshare -m): LeNet's checkpoint is 516 KB, so the first
# save fits and the second (its temporary file beside the first) does not.
# Skipped (77) where the test cannot mount (not root, no unshare).
source "$(dirname "$0")/testing.sh"
if [[ $(id -u) -ne 0 ]] || ! unshare -m sh -c "mount -t tmpfs -o size=4k tmpfs '$tmp'" 2>/dev/null; then
  echo "cli_disk_full: SKIPPED: mounting a small tmpfs needs root and unshare -m"
  exit 77
fi
small_data "$tmp/small" 256 50
mkdir -p "$tmp/disk"
common=(train --data "$tmp/small" --devices 1 --batch-size 64 --quiet)
unshare -m bash -c 'mount -t tmpfs -o size=900k tmpfs "$0" || exit 99
  "$@" --epochs 2 --save "$0/ck.st" 2>"$0.err"; echo $? >"$0.status"
  cp "$0/ck.st" "$0.saved.st"; ls -A "$0" >"$0.ls"' "$tmp/disk" "$bin" "${common[@]}"
[[ $? -ne 99 ]] && pass || fail "mount of the tmpfs failed"
[[ $(cat "$tmp/disk.status") -eq 1 ]] && pass || fail "exit status $(cat "$tmp/disk.status"), not 1"
[[ $(wc -l <"$tmp/disk.err") -eq 1 ]] && grep -q "^dptrain: .*ck.st: write of the temporary file .* failed: No space left on device$" \
  "$tmp/disk.err" && pass || fail "the message: $(cat "$tmp/disk.err")"
[[ $(cat "$tmp/disk.ls") == ck.st ]] && pass || fail "left on the disk: $(cat "$tmp/disk.ls")"
"$bin" inspect "$tmp/disk.saved.st" | grep -qx "  epochs_completed = 1" && pass || fail "the first epoch's checkpoint is gone"
"$bin" "${common[@]}" --epochs 2 --resume "$tmp/disk.saved.st" --save "$tmp/resumed.st" >/dev/null 2>&1 \
  && "$bin" "${common[@]}" --epochs 2 --save "$tmp/straight.st" >/dev/null 2>&1 && pass || fail "training again"
same_tensors "$tmp/resumed.st" "$tmp/straight.st" && pass || fail "the kept checkpoint does not resume to the straight run"
testing_finish cli_disk_full
