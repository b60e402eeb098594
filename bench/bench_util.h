/* bench_util.h - helpers shared by the C benchmarks in bench/ (header only:
 * each benchmark is one program). */
#ifndef DPTRAIN_BENCH_UTIL_H
#define DPTRAIN_BENCH_UTIL_H

#include <stdlib.h>

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
