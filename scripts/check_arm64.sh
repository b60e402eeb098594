#!/usr/bin/env bash
# check_arm64.sh - dptrain on aarch64, without an ARM machine: cross-compiles
# with Debian's gcc-aarch64-linux-gnu against the arm64 OpenBLAS, zlib, libpng and libjpeg-turbo
# (dpkg multiarch) into build-arm64/, MPI off, and runs under qemu-user the
# unit tests (every test_*), the per-ISA runs for neon and generic (GEMM,
# op fixtures, gradient checks) and the short training runs
# (tests/isa_train.sh: tiny ResNet learns, LeNet with NEON kernels = the
# portable path). Not run here: the cli_*.sh tests (they start the binary
# directly, which needs binfmt_misc, not available in containers), and the
# unit tests that train for many steps: test_nn, test_optim and
# test_accumulate (1-9 s natively, 300 s to over 1200 s under qemu; the
# kernels they use are covered by the per-ISA runs), test_datasets (two
# training runs of the CLI), and test_backend and test_fit (the trainer's
# logic above the kernels, the same on every ISA: 140 s and 73 s under qemu,
# where they only compared aarch64 with itself), and test_metrics (the
# trainer's summed loss and accuracy, and the split backend's processes:
# 0.5 s natively, 62 s under qemu; its sums' kernels are the per-ISA runs'
# too), and test_clip (gradient clipping: 21 trainer steps compared bit for
# bit across the strategies, 2.5 s natively, 168 s under qemu; its
# arithmetic is plain C, no kernel of an ISA). test_model_file runs there without alexnet's and resnet18's
# initialisation and forward pass (40 s under qemu; it says so): their
# equality to the built-ins is the same code on every ISA. The rest takes
# about 2 minutes on 2 cores.
#
# Installs what is missing (root or sudo, as scripts/setup.sh); skips with a
# clear message, exit 0, only when the cross tools or qemu cannot be
# installed (no root, no network, no arm64 packages in the archive).
set -u
cd "$(dirname "$0")/.."
skip() { echo "check_arm64: SKIPPED: $*" >&2; exit 0; }

want=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libc6:arm64 libopenblas-dev:arm64 zlib1g-dev:arm64 libpng-dev:arm64 libjpeg62-turbo-dev:arm64)
missing=()
for pkg in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "check_arm64: installing ${missing[*]}" >&2
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || skip "need root (or sudo) to install ${missing[*]}"
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo[@]}" dpkg --add-architecture arm64 || skip "dpkg --add-architecture arm64 failed"
  fi
  "${sudo[@]}" apt-get update -qq >/dev/null 2>&1 || skip "apt-get update failed (no network?)"
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    skip "cannot install ${missing[*]} (apt-get install failed)"
fi
command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null ||
  skip "aarch64-linux-gnu-gcc or qemu-aarch64 missing after installation"

dir=build-arm64
select=(-L 'unit|isa' -E '^test_(nn|optim|optim_generic|datasets|accumulate|backend|fit|metrics|clip|finetune|no_grad)$') # the tests run here (and built)
mkdir -p "$dir"
cat >"$dir/toolchain.cmake" <<'TOOLCHAIN'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# the arm64 libraries of the host's multiarch tree, never the x86-64 ones
set(CMAKE_FIND_ROOT_PATH /usr/lib/aarch64-linux-gnu /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/qemu-aarch64)
TOOLCHAIN
# qemu finds the arm64 loader and libraries where multiarch puts them (/lib/ld-linux-aarch64.so.1).
if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$dir/toolchain.cmake" \
     -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DDPTRAIN_CUDA=OFF -DBLAS_LIBRARIES=/usr/lib/aarch64-linux-gnu/libopenblas.so \
     -DCBLAS_INCLUDE_DIR=/usr/include/aarch64-linux-gnu -DZLIB_LIBRARY=/usr/lib/aarch64-linux-gnu/libz.so \
     -DZLIB_INCLUDE_DIR=/usr/include -DJPEG_LIBRARY=/usr/lib/aarch64-linux-gnu/libjpeg.so \
     -DJPEG_INCLUDE_DIR=/usr/include >"$dir.log" 2>&1 ||
   ! targets=$(scripts/test_targets.sh "$dir" "${select[@]}" 2>>"$dir.log") ||
   ! cmake --build "$dir" -j "$(nproc)" --target $targets >>"$dir.log" 2>&1; then
  tail -30 "$dir.log" >&2
  echo "check_arm64: FAILED: the aarch64 build (see $dir.log)" >&2
  exit 1
fi
readelf -h "$dir/dptrain" 2>/dev/null | grep -q "AArch64" || { echo "check_arm64: FAILED: $dir/dptrain is not an aarch64 binary" >&2; exit 1; }
grep -q "dptrain: kernels neon, generic" "$dir.log" || { echo "check_arm64: FAILED: NEON kernels not configured" >&2; exit 1; }
qemu-aarch64 "$dir/dptrain" version || { echo "check_arm64: FAILED: dptrain version under qemu" >&2; exit 1; }
cd "$dir"
ctest "${select[@]}" -j "$(nproc)" --output-on-failure
status=$?
echo "check_arm64: aarch64 build under qemu-user: ctest ${select[*]} exit $status"
exit $status
