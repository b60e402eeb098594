#!/usr/bin/env bash
# setup.sh - installs what dptrain needs (Debian packages) when it is missing.
#
# usage: scripts/setup.sh [build|test|bench]
#   build: compiler, CMake, OpenBLAS, zlib, libpng, libjpeg-turbo, Open MPI, the Fashion-MNIST package
#   test:  build's packages (the suite trains on the real dataset) plus
#          numpy (tests/cli_checkpoint.sh reads checkpoints with tools/read_checkpoint.py),
#          onnx, OpenCV and PyTorch (tests/cli_export.sh checks the ONNX export with them),
#          PIL and torchvision (the image tests compare the decoders and transforms with them)
#          iproute2 (tests/cli_mpi_netns.sh: two hosts in network namespaces), procps
#          (pgrep: tests/cli_faults.sh and others check that no process of a job is left) and
#          opencv-doc (its photographs: tests/cli_image_memory.sh streams a folder made from them)
#   bench: build's packages plus PyTorch and numpy (the benchmark peer), PIL and torchvision
#          (bench/decode_vs_pil.sh's peer) and opencv-doc (its photographs)
# Needs root or sudo only when something is missing.
set -euo pipefail

want=(build-essential cmake pkg-config libopenblas-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev dataset-fashion-mnist openmpi-bin libopenmpi-dev)
case "${1:-build}" in
  build) ;;
  test) want+=(python3-numpy python3-onnx python3-opencv python3-torch python3-pil python3-torchvision iproute2 procps
               opencv-doc) ;;
  bench) want+=(python3-torch python3-numpy python3-pil python3-torchvision opencv-doc) ;;
  *) echo "setup.sh: unknown target '$1' (expected build, test or bench)" >&2; exit 2 ;;
esac

# installed for this machine's architecture or for all: with a foreign architecture added (arm64, for
# scripts/check_arm64.sh) dpkg lists a multiarch package once per architecture it is installed for
native=$(dpkg --print-architecture 2>/dev/null || echo unknown)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status} ${Architecture}\n' "$pkg" 2>/dev/null | grep -qxE "install ok installed ($native|all)" ||
    missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
