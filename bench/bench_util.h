/* bench_util.h - helpers shared by the C benchmarks in bench/ (header only:
 * each benchmark is one program). */
#ifndef DPTRAIN_BENCH_UTIL_H
#define DPTRAIN_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "dptrain/cpu.h"
#include "dptrain/data.h"

static int bench_compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them in place). */
static inline double bench_median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, bench_compare_doubles);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* A whole-number argument: all of `text` a number from min to max, into *out;
 * else one line on stderr, "PROG: WHAT must be a whole number from MIN to
 * MAX, found 'TEXT'" (none when prog is NULL: the other ranks under MPI), and
 * 0 (main returns 2, a usage error). */
static inline int bench_int_arg(const char *prog, const char *what, const char *text, int min, int max, int *out) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || value < min || value > max) {
        if (prog)
            fprintf(stderr, "%s: %s must be a whole number from %d to %d, found '%s'\n", prog, what, min, max, text);
        return 0;
    }
    *out = (int)value;
    return 1;
}

/* Chooses the kernels (a bad DPTRAIN_ISA or DPTRAIN_CONV: one line on
 * stderr and 0) and, when `print`, says on one line which ran on which CPU:
 * "cpu: kernels avx512 (best avx512) on AMD EPYC, BLAS ...": figures are
 * this machine's. */
static inline int bench_cpu_line(const char *prog, int print) {
    if (dp_cpu_init() != DP_OK) {
        fprintf(stderr, "%s: %s\n", prog, dp_error_message());
        return 0;
    }
    if (print) printf("cpu: %s\n", dp_cpu_summary());
    return 1;
}

/* `count` synthetic 1x28x28 images with 10 classes: enough to give every
 * training step a gradient, no file needed. */
static inline dp_status_t bench_synthetic_images(int count, dp_dataset_t *ds) {
    unsigned char *pixels = malloc((size_t)count * 784), *labels = malloc((size_t)count);
    dp_status_t status = DP_ERR_NOMEM;
    if (pixels && labels) {
        for (int i = 0; i < count * 784; i++) pixels[i] = (unsigned char)(i * 7);
        for (int i = 0; i < count; i++) labels[i] = (unsigned char)(i % 10);
        status = dp_dataset_from_memory(ds, count, 1, 28, 28, 10, pixels, labels);
    }
    free(pixels);
    free(labels);
    return status;
}

#endif
