/* cpu_features.c - CPU feature detection, the DPTRAIN_ISA cap, and the
 * per-process table of kernels (cpu.h, kernels/kernels.h).
 *
 * x86-64: __builtin_cpu_supports, which reads cpuid and also checks with
 * xgetbv that the OS saves the YMM / ZMM state (a CPU with AVX-512 under an
 * OS that does not enable it reports no AVX-512). The model name is cpuid's
 * brand string. aarch64: getauxval(AT_HWCAP) & HWCAP_ASIMD; the model is
 * built from /proc/cpuinfo's implementer and part numbers.
 *
 * The choice is made once (pthread_once) at the first dp_cpu_* call or
 * kernel use, so the kernels cost one indirect call per product or plane,
 * never a test per element. This is the one file that names every ISA.
 *
 * DESIGN (threads): the table and the strings are written once inside
 * pthread_once and only read afterwards, from any thread.
 */
#include "dptrain/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_winograd.h" /* DPTRAIN_CONV */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#endif

/* OpenBLAS's own entry points (cblas.h of other builds lacks them). */
char *openblas_get_config(void);
char *openblas_get_corename(void);

static const char *const isa_names[] = {"generic", "neon", "avx2", "avx512"};

static const dp_cpu_kernels_t kernels_generic = {
    .isa = DP_ISA_GENERIC,
    .loops = &dp_cpu_loops_generic,
    .bn_shifted_sums = dp_bn_shifted_sums_generic,
    .bn_grad_sums = dp_bn_grad_sums_generic,
};
#if defined(__x86_64__) || defined(__i386__)
static const dp_cpu_kernels_t kernels_avx2 = {
    .isa = DP_ISA_AVX2,
    .loops = &dp_cpu_loops_avx2,
    .gemm = dp_gemm_avx2,
    .bn_shifted_sums = dp_bn_shifted_sums_avx2,
    .bn_grad_sums = dp_bn_grad_sums_avx2,
    .conv_im2col_narrow = dp_conv_im2col_narrow_avx2,
    .conv_col2im_narrow = dp_conv_col2im_narrow_avx2,
    .conv_im2col_small = dp_conv_im2col_small_avx2,
    .conv_col2im_small = dp_conv_col2im_small_avx2,
};
static const dp_cpu_kernels_t kernels_avx512 = {
    .isa = DP_ISA_AVX512,
    .loops = &dp_cpu_loops_avx512,
    .gemm = dp_gemm_avx512,
    .bn_shifted_sums = dp_bn_shifted_sums_avx512,
    .bn_grad_sums = dp_bn_grad_sums_avx512,
    .conv_im2col_narrow = dp_conv_im2col_narrow_avx512,
    .conv_col2im_narrow = dp_conv_col2im_narrow_avx512,
    .conv_im2col_small = dp_conv_im2col_small_avx512,
    .conv_col2im_small = dp_conv_col2im_small_avx512,
};
#endif
#if defined(__aarch64__)
static const dp_cpu_kernels_t kernels_neon = {
    .isa = DP_ISA_NEON,
    .loops = &dp_cpu_loops_generic, /* NEON is aarch64's baseline */
    .gemm = dp_gemm_neon,
    .bn_shifted_sums = dp_bn_shifted_sums_neon,
    .bn_grad_sums = dp_bn_grad_sums_neon,
};
#endif

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static const dp_cpu_kernels_t *table = &kernels_generic;
static dp_isa_t best_isa = DP_ISA_GENERIC;
static char isa_error[256]; /* "" when DPTRAIN_ISA is fine */
static char model[128], blas[160], summary[512];

static dp_isa_t detect_best(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
        return DP_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return DP_ISA_AVX2;
#elif defined(__aarch64__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMD) return DP_ISA_NEON;
#endif
    return DP_ISA_GENERIC;
}

static const dp_cpu_kernels_t *table_for(dp_isa_t isa) {
    switch (isa) {
#if defined(__x86_64__) || defined(__i386__)
    case DP_ISA_AVX512: return &kernels_avx512;
    case DP_ISA_AVX2: return &kernels_avx2;
#endif
#if defined(__aarch64__)
    case DP_ISA_NEON: return &kernels_neon;
#endif
    default: return &kernels_generic;
    }
}

/* Whether `isa` can run here: the generic path always, the others when
 * the best ISA is of the same family and at least as wide. */
static int available(dp_isa_t isa) {
    if (isa == DP_ISA_GENERIC || isa == best_isa) return 1;
    return isa == DP_ISA_AVX2 && best_isa == DP_ISA_AVX512;
}

static void read_model(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned int regs[12];
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned int i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
        char brand[49];
        memcpy(brand, regs, 48);
        brand[48] = '\0';
        const char *s = brand;
        while (*s == ' ') s++;
        snprintf(model, sizeof model, "%s", s);
    }
#else
    /* /proc/cpuinfo: "model name" where the kernel gives one, else the
     * implementer and part numbers (aarch64). */
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256], implementer[32] = "", part[32] = "";
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *value = colon + 1;
        while (*value == ' ' || *value == '\t') value++;
        value[strcspn(value, "\n")] = '\0';
        if (strncmp(line, "model name", 10) == 0 && !model[0]) snprintf(model, sizeof model, "%s", value);
        if (strncmp(line, "CPU implementer", 15) == 0 && !implementer[0]) snprintf(implementer, sizeof implementer, "%s", value);
        if (strncmp(line, "CPU part", 8) == 0 && !part[0]) snprintf(part, sizeof part, "%s", value);
    }
    if (f) fclose(f);
    if (!model[0] && implementer[0])
        snprintf(model, sizeof model, "%s CPU, implementer %s part %s",
#if defined(__aarch64__)
                 "aarch64",
#else
                 "unknown",
#endif
                 implementer, part[0] ? part : "?");
#endif
    if (!model[0]) snprintf(model, sizeof model, "unknown CPU");
}

static void read_blas(void) {
    /* "OpenBLAS 0.3.21 NO_AFFINITY USE_OPENMP SkylakeX MAX_THREADS=64":
     * the name and version are the first two words. */
    const char *config = openblas_get_config(), *core = openblas_get_corename();
    char name[64] = "OpenBLAS";
    if (config) {
        int words = 0;
        size_t n = 0;
        while (config[n] && n < sizeof name - 1) {
            if (config[n] == ' ' && ++words == 2) break;
            n++;
        }
        memcpy(name, config, n);
        name[n] = '\0';
    }
    snprintf(blas, sizeof blas, "%s, %s kernels", name, core && core[0] ? core : "unknown");
}

static void init(void) {
    best_isa = detect_best();
    dp_isa_t isa = best_isa;
    const char *env = getenv("DPTRAIN_ISA");
    if (env && env[0]) {
        int found = -1;
        for (int i = 0; i < (int)(sizeof isa_names / sizeof isa_names[0]); i++)
            if (strcmp(env, isa_names[i]) == 0) found = i;
        if (found < 0)
            snprintf(isa_error, sizeof isa_error,
                     "DPTRAIN_ISA='%s' is not an instruction set (expected avx512, avx2, neon or generic)", env);
        else if (!available((dp_isa_t)found))
            snprintf(isa_error, sizeof isa_error,
                     "DPTRAIN_ISA=%s: this CPU does not support it (it has %s%s)", env, isa_names[best_isa],
                     best_isa == DP_ISA_AVX512 ? ", avx2, generic" : best_isa == DP_ISA_GENERIC ? "" : ", generic");
        else
            isa = (dp_isa_t)found;
    }
    table = table_for(isa);
    read_model();
    read_blas();
    snprintf(summary, sizeof summary, "kernels %s%s%s%s on %s, BLAS %s", isa_names[table->isa],
             isa != best_isa ? " (capped by DPTRAIN_ISA; best " : "", isa != best_isa ? isa_names[best_isa] : "",
             isa != best_isa ? ")" : "", model, blas);
}

dp_status_t dp_cpu_init(void) {
    pthread_once(&init_once, init);
    if (isa_error[0]) return dp_fail(DP_ERR_ARG, "%s", isa_error);
    return dp_conv_winograd_check_env(); /* DPTRAIN_CONV, the other choice of CPU kernels */
}

static void warn_bad_isa(void) {
    fprintf(stderr, "dptrain: warning: %s; using %s\n", isa_error, isa_names[table->isa]);
}

static void ensure_init(void) {
    static pthread_once_t warn_once = PTHREAD_ONCE_INIT;
    pthread_once(&init_once, init);
    if (isa_error[0]) pthread_once(&warn_once, warn_bad_isa);
}

const dp_cpu_kernels_t *dp_cpu_kernels(void) {
    ensure_init();
    return table;
}

dp_isa_t dp_cpu_isa(void) {
    ensure_init();
    return table->isa;
}

dp_isa_t dp_cpu_best_isa(void) {
    ensure_init();
    return best_isa;
}

const char *dp_isa_name(dp_isa_t isa) {
    return (unsigned)isa < sizeof isa_names / sizeof isa_names[0] ? isa_names[isa] : "unknown";
}

const char *dp_cpu_model(void) {
    ensure_init();
    return model;
}

const char *dp_cpu_blas(void) {
    ensure_init();
    return blas;
}

const char *dp_cpu_summary(void) {
    ensure_init();
    return summary;
}
