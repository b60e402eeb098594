# isa_info.sh - sourced by the benchmarks that race dptrain against PyTorch:
# caps PyTorch the way DPTRAIN_ISA caps dptrain, and prints what each side
# runs, so every figure names its ISA.
#
# On a bigger CPU, DPTRAIN_ISA=avx2 measures dptrain's AVX2 path; PyTorch is
# then capped alike unless the variables are already set:
#   ONEDNN_MAX_CPU_ISA=AVX2     oneDNN's convolutions
#   ATEN_CPU_CAPABILITY=avx2    ATen's own vectorized kernels
#   OPENBLAS_CORETYPE=Haswell   OpenBLAS's kernels (both sides' BLAS)
# DPTRAIN_ISA=generic: SSE4.1, ATen's default kernels, OpenBLAS Nehalem.
#
# DPTRAIN_CONV=winograd measures dptrain with its Winograd 5x5 convolutions
# (what `dptrain train --winograd` turns on; the default is im2col).
#
# isa_info BIN: prints "dptrain: isa I (best B), CPU, BLAS, conv" and
# "pytorch: oneDNN isa ..., ATen CPU capability ..." lines.
case "${DPTRAIN_ISA:-}" in
  avx2) : "${ONEDNN_MAX_CPU_ISA:=AVX2}" "${ATEN_CPU_CAPABILITY:=avx2}" "${OPENBLAS_CORETYPE:=Haswell}" ;;
  generic) : "${ONEDNN_MAX_CPU_ISA:=SSE41}" "${ATEN_CPU_CAPABILITY:=default}" "${OPENBLAS_CORETYPE:=Nehalem}" ;;
esac
for var in ONEDNN_MAX_CPU_ISA ATEN_CPU_CAPABILITY OPENBLAS_CORETYPE; do
  [[ -n "${!var:-}" ]] && export "${var?}"
done

isa_info() {
  local v
  v=$("$1" version) || return 1
  printf 'dptrain: isa %s (best %s), cpu %s, blas %s, conv %s\n' "$(sed -n 's/^isa: //p' <<<"$v")" \
    "$(sed -n 's/^best isa: //p' <<<"$v")" "$(sed -n 's/^cpu: //p' <<<"$v")" "$(sed -n 's/^blas: //p' <<<"$v")" \
    "$([[ ${DPTRAIN_CONV:-} == winograd ]] && echo "winograd (5x5 layers)" || echo im2col)"
  ONEDNN_VERBOSE=1 OMP_NUM_THREADS=1 /usr/bin/python3 - <<'PY' 2>/dev/null || echo "pytorch: (not available)"
import torch
torch.set_num_threads(1)
# one convolution makes oneDNN print the ISA it dispatches to
torch.nn.functional.conv2d(torch.randn(2, 1, 28, 28), torch.randn(4, 1, 3, 3))
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l]
print("pytorch %s: ATen CPU capability %s" % (torch.__version__, cap[0] if cap else "?"))
PY
}
