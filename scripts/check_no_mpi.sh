#!/usr/bin/env bash
# check_no_mpi.sh - a build without MPI still builds and trains, and says
# clearly, when started by mpirun, that multi-process training needs an MPI
# build. Builds build-nompi/ with CMake told not to find MPI.
set -u
cd "$(dirname "$0")/.."
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1" >&2; fi; }
cmake -S . -B build-nompi -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DDPTRAIN_CUDA=OFF >build-nompi.log 2>&1 &&
  cmake --build build-nompi -j "$(nproc)" --target dptrain_cli >>build-nompi.log 2>&1
check "build without MPI (see build-nompi.log)" '[[ -x build-nompi/dptrain ]]'
check "MPI reported off" 'grep -q "dptrain: MPI off" build-nompi.log'
check "trains without MPI" 'build-nompi/dptrain train --limit 300 --batch-size 100 --epochs 1 --quiet >/dev/null 2>&1'
if command -v mpirun >/dev/null; then
  root=(); [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  out=$(mpirun "${root[@]}" -np 2 build-nompi/dptrain train --limit 300 --epochs 1 2>&1); status=$?
  check "under mpirun: non-zero exit and the message (exit $status)" \
    '[[ $status -ne 0 ]] && grep -q "built without MPI: multi-process training needs an MPI build" <<<"$out"'
fi
echo "check_no_mpi: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
