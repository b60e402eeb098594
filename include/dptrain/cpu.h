/* cpu.h - what the processor offers and which kernels run on it.
 *
 * One portable binary: the library is built for the baseline ISA of the
 * machine family (x86-64, aarch64), and the SIMD kernels (GEMM, the conv
 * fast paths, batch norm sums) exist once per ISA, each compiled for its
 * own instruction set (src/backend/cpu/kernels/). At the first use the best
 * ISA the CPU and the OS support is chosen, once for the process; the
 * environment variable DPTRAIN_ISA=avx512|avx2|neon|generic caps it (to
 * test or measure a lower path on a bigger CPU).
 *
 * DPTRAIN_ISA with an unknown name, or naming an ISA this CPU lacks, is an
 * error, not a silent fall-back: a test or benchmark that asks for a path
 * must not measure another. dp_cpu_init() reports it (the CLI calls it at
 * start-up and exits); library users that never call it get the best ISA
 * under the cap and one warning line on stderr. The same goes for
 * DPTRAIN_CONV (winograd, or im2col: the default; devices.md).
 */
#ifndef DPTRAIN_CPU_H
#define DPTRAIN_CPU_H

#include "dptrain/status.h"

typedef enum {
    DP_ISA_GENERIC = 0, /* portable C (+ the BLAS library for GEMM) */
    DP_ISA_NEON,        /* aarch64 Advanced SIMD */
    DP_ISA_AVX2,        /* x86-64 AVX2 + FMA */
    DP_ISA_AVX512,      /* x86-64 AVX-512 F/BW/DQ/VL */
} dp_isa_t;

/* Chooses the kernels (once per process; later calls return the first
 * result). DP_ERR_ARG with a one-line message for a bad DPTRAIN_ISA. */
dp_status_t dp_cpu_init(void);

/* The ISA whose kernels run (after the DPTRAIN_ISA cap). */
dp_isa_t dp_cpu_isa(void);

/* The best ISA this CPU and OS support, ignoring DPTRAIN_ISA. */
dp_isa_t dp_cpu_best_isa(void);

/* "avx512", "avx2", "neon", "generic". */
const char *dp_isa_name(dp_isa_t isa);

/* The processor's model name ("Intel(R) Xeon(R) Processor"), or a
 * description built from what the OS says about it. */
const char *dp_cpu_model(void);

/* The BLAS library behind the GEMM fall-back, with its kernel set
 * ("OpenBLAS 0.3.21, Haswell kernels"). */
const char *dp_cpu_blas(void);

/* One line for people: "kernels avx2 (best avx512) on Intel(R) Xeon(R)
 * Processor, BLAS OpenBLAS 0.3.21, Haswell kernels". */
const char *dp_cpu_summary(void);

#endif
