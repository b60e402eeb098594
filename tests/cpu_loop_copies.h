/* cpu_loop_copies.h - the per-ISA copies of the CPU backend's loops table
 * (src/backend/cpu/kernels/kernels.h's dp_cpu_loops_t) that the loop tests
 * (test_cpu_loops.c, test_cpu_activations.c) run: every copy of the
 * target family; a test skips those above dp_cpu_best_isa().
 */
#ifndef DPTRAIN_CPU_LOOP_COPIES_H
#define DPTRAIN_CPU_LOOP_COPIES_H

#include "../src/backend/cpu/kernels/kernels.h" /* library-internal: the per-ISA tables */
#include "dptrain/cpu.h"

typedef struct {
    const char *name;
    dp_isa_t isa;
    const dp_cpu_loops_t *loops;
} cpu_loop_copy_t;

static const cpu_loop_copy_t cpu_loop_copies[] = {
    {"generic", DP_ISA_GENERIC, &dp_cpu_loops_generic},
#if defined(__x86_64__) || defined(__i386__)
    {"avx2", DP_ISA_AVX2, &dp_cpu_loops_avx2},
    {"avx512", DP_ISA_AVX512, &dp_cpu_loops_avx512},
#endif
};
#define CPU_LOOP_COPIES (sizeof cpu_loop_copies / sizeof cpu_loop_copies[0])

#endif
