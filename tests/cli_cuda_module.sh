#!/usr/bin/env bash
# cli_cuda_module.sh - the CUDA backend as a module loaded on demand
# (backend_registry.c; lib/libdptrain_cuda.so of a build with CUDA), seen
# through the dynamic loader's own log (LD_DEBUG=files lists every library
# loaded, dlopen'd ones included):
# - the module and the emulator's export only dp_cuda_module_entry (nm -D
#   --defined-only: weak and unique symbols too); the check is shown to see
#   weak __cxa_* symbols of a shared object, and module_exports.map to hide them;
# - `dptrain version`, a training run on the default devices and one on
#   `--devices 2` load no CUDA library (libdptrain_cuda, cudart, cuBLAS,
#   cuDNN) and dptrain links none; on a machine without an NVIDIA device node
#   the default-devices line says CPU and why; CUDA_VISIBLE_DEVICES="" or -1
#   says that it hides the GPUs, without loading the module either;
# - `--devices cuda:0` loads the module and cudart (the check above can
#   fail) and, without a GPU, says so in one line;
# - where the module is found: $DPTRAIN_CUDA_MODULE, beside the program,
#   its lib/, ../lib (an installed bin/dptrain); missing: one line naming
#   every path tried, exit 1; a file that is not a module (not ELF, no entry
#   point, an entry point answering another interface version): one line
#   naming the file and what is wrong; installed (`cmake --install`): the
#   module beside libdptrain.so, exporting only its entry point, found by
#   the installed dptrain and by a program linked with libdptrain.so;
# - the module's entry point refuses a host table of another ABI or layout
#   (a small C program, built here, that dlopens the module).
# A build without CUDA has no module: skipped (exit 77).
source "$(dirname "$0")/testing.sh"
build=$(cd "$(dirname "$bin")" && pwd)
module=$build/lib/libdptrain_cuda.so
if [[ ! -e "$module" ]]; then
  echo "cli_cuda_module: skipped: this build has no CUDA module ($module)"
  exit 77
fi
src=$(cd "$(dirname "$0")/.." && pwd)
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cflags=$(sed -n 's/^CMAKE_C_FLAGS:STRING=//p' "$build/CMakeCache.txt") # for programs built here (a sanitizer's too)
cuda_libs='lib(dptrain_cuda|cudart|cublas|cublasLt|cudnn)[._a-zA-Z0-9]*\.so'
gpu_nodes() { compgen -G '/dev/nvidia[0-9]*' >/dev/null || [[ -e /dev/nvidiactl || -e /dev/dxg ]]; }
small_data "$tmp/data" 256 64

# run NAME ARGS...: the command under LD_DEBUG=files (log in $tmp/NAME.ld),
# stdout+stderr without the loader's lines in $tmp/NAME.out, its status in $status
run() {
  local name=$1
  shift
  LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/$name.ld" "$@" >"$tmp/$name.raw" 2>&1
  status=$?
  cat "$tmp/$name.ld".* >"$tmp/$name.ld" 2>/dev/null
  rm -f "$tmp/$name.ld".*
  grep -v '^ *[0-9]*: ' "$tmp/$name.raw" >"$tmp/$name.out"
}
loaded_cuda() { grep -oE "file=[^ ]*$cuda_libs" "$tmp/$1.ld" | sort -u | tr '\n' ' '; }
train=(train --model lenet --data "$tmp/data" --epochs 1 --batch-size 64)

# exports SO: the dynamic symbols SO defines (weak and unique ones included, versions stripped), sorted, one space after each
exports() { nm -D --defined-only "$1" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u | tr '\n' ' '; }

# 0. The module and the emulator export only their entry point (module_exports.map); the check itself
#    sees what a C++ runtime linked in exports (weak __cxa_* symbols), and the version script hides it.
for so in "$module" "$build/lib/libdptrain_cuda_emu.so"; do
  [[ "$(exports "$so")" == "dp_cuda_module_entry " ]] && pass || fail "$so exports more than its entry: $(exports "$so" | cut -c1-300)"
done
cat >"$tmp/cxx.c" <<'C'
__attribute__((weak)) void *__cxa_allocate_exception(unsigned long n) { (void)n; return 0; }
__attribute__((weak)) void *__cxa_begin_catch(void *e) { return e; }
int dp_cuda_module_entry(void) { return 1; }
C
map=$src/src/backend/cuda/module_exports.map
if "$cc" -shared -fPIC -o "$tmp/cxx.so" "$tmp/cxx.c" && "$cc" -shared -fPIC -Wl,--version-script="$map" -o "$tmp/cxx_map.so" "$tmp/cxx.c"; then
  [[ "$(exports "$tmp/cxx.so")" == "__cxa_allocate_exception __cxa_begin_catch dp_cuda_module_entry " ]] && pass \
    || fail "the exports check misses weak C++ runtime symbols: '$(exports "$tmp/cxx.so")'"
  [[ "$(exports "$tmp/cxx_map.so")" == "dp_cuda_module_entry " ]] && pass \
    || fail "module_exports.map leaves exported: '$(exports "$tmp/cxx_map.so")'"
else
  fail "compiling a shared object with weak __cxa_* symbols"
fi

# 1. Nothing of CUDA in a CPU run.
ldd "$bin" | grep -qE "$cuda_libs" && fail "dptrain links a CUDA library: $(ldd "$bin" | grep -E "$cuda_libs")" || pass
run version "$bin" version
[[ $status -eq 0 ]] && grep -q '^dptrain ' "$tmp/version.out" && pass || fail "version: exit $status: $(cat "$tmp/version.out")"
grep -q 'file=libopenblas' "$tmp/version.ld" && pass || fail "LD_DEBUG=files logged nothing (the checks below would prove nothing)"
[[ -z $(loaded_cuda version) ]] && pass || fail "dptrain version loaded $(loaded_cuda version)"
run cpu2 "$bin" "${train[@]}" --devices 2
[[ $status -eq 0 ]] && pass || fail "--devices 2: exit $status: $(tail -2 "$tmp/cpu2.out")"
[[ -z $(loaded_cuda cpu2) ]] && pass || fail "training on --devices 2 loaded $(loaded_cuda cpu2)"

# 2. The default devices: CPU and why, without loading the module, on a machine without a GPU.
cores=$(getconf _NPROCESSORS_ONLN)
names=$(seq -s ', ' -f 'cpu:%g' 0 $((cores - 1)))
if ! gpu_nodes; then
  run default "$bin" "${train[@]}"
  [[ $status -eq 0 ]] && pass || fail "default devices: exit $status: $(tail -2 "$tmp/default.out")"
  grep -qF "on [$names] (default: one CPU device per core; no GPU: no NVIDIA GPU device (/dev/nvidia*) on this machine)" \
    <(head -1 "$tmp/default.out") && pass || fail "default devices line: $(head -1 "$tmp/default.out")"
  [[ -z $(loaded_cuda default) ]] && pass || fail "the default-devices decision loaded $(loaded_cuda default)"
else
  echo "cli_cuda_module: an NVIDIA device node is here: the no-GPU default is not checked"
fi
for hide in "" "-1"; do
  CUDA_VISIBLE_DEVICES=$hide run hidden "$bin" "${train[@]}"
  [[ $status -eq 0 ]] && pass || fail "CUDA_VISIBLE_DEVICES='$hide': exit $status: $(tail -2 "$tmp/hidden.out")"
  grep -qE "on \[$names\] \(default: one CPU device per core; no GPU: CUDA_VISIBLE_DEVICES (is empty|starts with a negative index) \(it hides every GPU\)\)" \
    <(head -1 "$tmp/hidden.out") && pass || fail "CUDA_VISIBLE_DEVICES='$hide': $(head -1 "$tmp/hidden.out")"
  [[ -z $(loaded_cuda hidden) ]] && pass || fail "CUDA_VISIBLE_DEVICES='$hide' still loaded $(loaded_cuda hidden)"
done

# one_line NAME PATTERN ARGS...: non-zero exit (not a crash), one line of output matching PATTERN
one_line() {
  local name=$1 pattern=$2
  shift 2
  run "$name" "$@"
  [[ $status -ne 0 && $status -lt 128 ]] && pass || fail "$name: exit status $status"
  [[ $(wc -l <"$tmp/$name.out") -eq 1 ]] && pass || fail "$name: want one line, got: $(cat "$tmp/$name.out")"
  grep -qE -- "$pattern" "$tmp/$name.out" && pass || fail "$name: '$(cat "$tmp/$name.out")' lacks /$pattern/"
}

# 3. cuda:0 loads the module (and cudart with it); without a GPU, one line.
no_gpu='^dptrain: cuda:0: (no CUDA GPU|no NVIDIA driver|the CUDA runtime)'
if ! nvidia-smi -L >/dev/null 2>&1; then
  one_line cuda0 "$no_gpu" "$bin" "${train[@]}" --devices cuda:0
  grep -q "file=$module " "$tmp/cuda0.ld" && pass || fail "cuda:0 did not load $module: $(loaded_cuda cuda0)"
  grep -qE 'file=[^ ]*libcudart' "$tmp/cuda0.ld" && pass || fail "cuda:0 did not load cudart: $(loaded_cuda cuda0)"
fi

# 4. Where the module is looked for, and what a missing or wrong one says.
cannot='^dptrain: cuda:0: cannot load the CUDA backend module libdptrain_cuda.so: '
one_line env_missing "${cannot}not found \(tried $tmp/none.so\)\$" \
  env DPTRAIN_CUDA_MODULE="$tmp/none.so" "$bin" "${train[@]}" --devices cuda:0
[[ -z $(loaded_cuda env_missing) ]] && pass || fail "a missing module: loaded $(loaded_cuda env_missing)"
mkdir -p "$tmp/alone/bin"
cp "$bin" "$tmp/alone/bin/dptrain"
# (unless this build was installed: its libdir is the last place looked in)
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir=${libdir:-lib}
[[ "$libdir" == /* ]] && installed_module=$libdir/libdptrain_cuda.so || installed_module=$prefix/$libdir/libdptrain_cuda.so
if [[ ! -e "$installed_module" ]]; then
  one_line copy_missing "${cannot}not found \(tried $tmp/alone/bin/libdptrain_cuda.so, $tmp/alone/bin/lib/libdptrain_cuda.so, $tmp/alone/$libdir/libdptrain_cuda.so, $installed_module\)\$" \
    "$tmp/alone/bin/dptrain" "${train[@]}" --devices cuda:0
else
  echo "cli_cuda_module: $installed_module is installed: the search without a module is not checked"
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  one_line env_found "$no_gpu" env DPTRAIN_CUDA_MODULE="$module" "$tmp/alone/bin/dptrain" "${train[@]}" --devices cuda:0
  mkdir -p "$tmp/alone/bin/lib" && cp "$module" "$tmp/alone/bin/lib/"
  one_line beside_lib "$no_gpu" "$tmp/alone/bin/dptrain" "${train[@]}" --devices cuda:0
  grep -q "file=$tmp/alone/bin/lib/libdptrain_cuda.so " "$tmp/beside_lib.ld" && pass || fail "bin/lib/: $(loaded_cuda beside_lib)"
  rm -r "$tmp/alone/bin/lib"
  mkdir -p "$tmp/alone/${libdir:-lib}" && cp "$module" "$tmp/alone/${libdir:-lib}/"
  one_line install_layout "$no_gpu" "$tmp/alone/bin/dptrain" "${train[@]}" --devices cuda:0
  grep -q "file=$tmp/alone/${libdir:-lib}/libdptrain_cuda.so " "$tmp/install_layout.ld" && pass \
    || fail "../${libdir:-lib}/: $(loaded_cuda install_layout)"
fi
echo "not a shared object" >"$tmp/text.so"
one_line not_elf "${cannot}$tmp/text.so: .*(invalid ELF header|file too short)" \
  env DPTRAIN_CUDA_MODULE="$tmp/text.so" "$bin" "${train[@]}" --devices cuda:0
echo 'int dptrain_something_else(void) { return 1; }' >"$tmp/noentry.c"
"$cc" -shared -fPIC -o "$tmp/noentry.so" "$tmp/noentry.c" && pass || fail "compiling a shared object without entry"
one_line no_entry "${cannot}$tmp/noentry.so: no dp_cuda_module_entry in it \(not a dptrain CUDA module\)" \
  env DPTRAIN_CUDA_MODULE="$tmp/noentry.so" "$bin" "${train[@]}" --devices cuda:0
cat >"$tmp/other.c" <<'C'
#include <stdint.h>
#include <stddef.h>
typedef struct { uint32_t abi, size; void *gpu_count, *backend_open; } table_t;
static const table_t table = {999, sizeof(table_t), 0, 0};
const table_t *dp_cuda_module_entry(const void *host, char *error, size_t size) { (void)host; (void)error; (void)size; return &table; }
C
"$cc" -shared -fPIC -o "$tmp/other.so" "$tmp/other.c" && pass || fail "compiling a module of another interface"
one_line other_abi "${cannot}$tmp/other.so: it answered with another interface version \(a module of another dptrain build\)" \
  env DPTRAIN_CUDA_MODULE="$tmp/other.so" "$bin" "${train[@]}" --devices cuda:0

# 5. The module's side: a host table of another ABI or layout is refused.
cat >"$tmp/host.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "cuda/cuda_module.h"
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
    dp_cuda_module_entry_fn entry = (dp_cuda_module_entry_fn)dlsym(h, DP_CUDA_MODULE_ENTRY);
    if (!entry) { printf("no entry\n"); return 1; }
    dp_cuda_host_t host = {.abi = DP_CUDA_MODULE_ABI, .size = sizeof host, .layout = DP_CUDA_MODULE_LAYOUT};
    char error[512] = "";
    if (strcmp(argv[2], "abi") == 0) host.abi++;
    if (strcmp(argv[2], "layout") == 0) host.layout[0]++;
    const dp_cuda_module_t *m = entry(&host, error, sizeof error);
    if (!m) { printf("refused: %s\n", error); return 2; }
    const char *why = NULL;
    int n = m->gpu_count(&why);
    printf("accepted: abi %u, %d GPUs (%s)\n", m->abi, n, why ? why : "-");
    return 0;
}
C
if "$cc" $cflags -std=c11 -D_DEFAULT_SOURCE -I"$src/include" -I"$src/src/backend" "$tmp/host.c" -o "$tmp/host" -ldl 2>"$tmp/cc.err"; then
  pass
  abi=$(sed -n 's/^#define DP_CUDA_MODULE_ABI \([0-9]*\).*/\1/p' "$src/src/backend/cuda/cuda_module.h")
  out=$("$tmp/host" "$module" abi); rc=$?
  [[ $rc -eq 2 ]] && grep -q "^refused: its interface is version $abi, this dptrain's is $((abi + 1))" <<<"$out" && pass \
    || fail "another ABI: $rc $out"
  out=$("$tmp/host" "$module" layout); rc=$?
  [[ $rc -eq 2 ]] && grep -q "^refused: it was built against other dptrain headers" <<<"$out" && pass || fail "another layout: $rc $out"
  out=$("$tmp/host" "$module" same); rc=$?
  if nvidia-smi -L >/dev/null 2>&1; then
    [[ $rc -eq 0 ]] && grep -qE "^accepted: abi $abi, [1-9][0-9]* GPUs" <<<"$out" && pass || fail "the same ABI: $rc $out"
  else
    [[ $rc -eq 0 ]] && grep -qE "^accepted: abi $abi, 0 GPUs \((no CUDA GPU|no NVIDIA driver|the CUDA runtime)" <<<"$out" && pass \
      || fail "the same ABI: $rc $out"
  fi
else
  fail "compiling the host program: $(head -3 "$tmp/cc.err")"
fi

# 6. Installed: bin/dptrain and a program linked with the installed
#    libdptrain.so each find the module in the install's libdir.
if cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.out" 2>&1; then
  pass
  inst_module=$(find "$tmp/prefix" -name libdptrain_cuda.so | head -1)
  inst_lib=$(dirname "$(find "$tmp/prefix" -name libdptrain.so | head -1)")
  [[ -n "$inst_module" && "$(dirname "$inst_module")" == "$inst_lib" ]] && pass \
    || fail "the module is not installed beside libdptrain.so: '$inst_module' vs '$inst_lib'"
  [[ "$(exports "$inst_module")" == "dp_cuda_module_entry " ]] && pass \
    || fail "the installed module exports more than its entry: $(exports "$inst_module" | cut -c1-300)"
  readelf -d "$inst_lib/libdptrain.so" | grep -qE "NEEDED.*$cuda_libs" && fail "libdptrain.so needs a CUDA library" || pass
  if ! nvidia-smi -L >/dev/null 2>&1; then
    one_line installed "$no_gpu" "$tmp/prefix/bin/dptrain" "${train[@]}" --devices cuda:0
    grep -q "file=$inst_module " "$tmp/installed.ld" && pass || fail "installed dptrain: $(loaded_cuda installed)"
    cat >"$tmp/shared.c" <<'C'
#include <stdio.h>
#include "dptrain/backend.h"
int main(void) {
    const dp_backend_t *be = NULL;
    dp_status_t st = dp_backend_by_name("cuda", 0, &be);
    printf("dptrain: %s\n", st == DP_OK ? "cuda:0 opened" : dp_error_message());
    return st == DP_OK ? 0 : 1;
}
C
    if "$cc" $cflags -std=c11 -I"$tmp/prefix/include" "$tmp/shared.c" -o "$tmp/shared" -L"$inst_lib" -ldptrain \
         -Wl,-rpath,"$inst_lib" 2>"$tmp/cc.err"; then
      one_line shared_lib "$no_gpu" "$tmp/shared"
      grep -q "file=$inst_module " "$tmp/shared_lib.ld" && pass || fail "libdptrain.so: $(loaded_cuda shared_lib)"
    else
      fail "compiling against the installed libdptrain.so: $(head -3 "$tmp/cc.err")"
    fi
  fi
else
  fail "cmake --install: $(tail -3 "$tmp/install.out")"
fi
testing_finish cli_cuda_module
