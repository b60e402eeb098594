/* metrics_checks.h - the checks of a backend's count_metrics (backend.h),
 * shared by test_metrics.c (the CPU, staged and split backends) and
 * test_cuda_backend.c (the CUDA backend, on a GPU or the CUDA emulator).
 * Everything goes through the table (alloc, upload, download), so the same
 * checks hold for device memory. What they assert:
 *   - the correct count: the first largest entry of a row wins (ties go to
 *     the lower index; a row of equal values is index 0), a NaN entry after
 *     the first never wins, a NaN first entry keeps index 0; infinities;
 *     1000 random rows of 10 (more rows than a GPU block's threads) against
 *     a host count; n = 0 adds nothing;
 *   - the loss: sums[0] + (double)loss * scale with one rounding per
 *     operation (the host's `sum += (double)loss * scale`), bit for bit, on
 *     values where a fused multiply-add gives other bits (found by search,
 *     50 such cases, so the check can fail; the scales are not whole
 *     numbers: the trainer's, a batch size, make the product exact); a NaN loss makes
 *     sums[0] NaN and still counts; loss NULL leaves sums[0]'s bits;
 *   - sums add up over calls, and sums of another slot are not touched. */
#ifndef DPTRAIN_METRICS_CHECKS_H
#define DPTRAIN_METRICS_CHECKS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/rng.h"
#include "testing.h"

/* The host's rule (trainer.c's former count_correct). */
static inline int metrics_host_correct(const float *logits, const int32_t *labels, int n, int k) {
    int correct = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        correct += best == labels[i];
    }
    return correct;
}

/* One count_metrics call on device copies; sums (4 doubles: the call's 2
 * at [0, 2), a neighbour slot at [2, 4)) in and out through host memory. */
static inline void metrics_call(const dp_backend_t *be, double sums[4], const float *loss, double scale,
                                const float *logits, const int32_t *labels, int n, int k) {
    double *d_sums = be->alloc(be->ctx, 4 * sizeof(double), "test sums");
    float *d_loss = loss ? be->alloc(be->ctx, sizeof(float), "test loss") : NULL;
    float *d_logits = be->alloc(be->ctx, sizeof(float) * ((size_t)n * k + 1), "test logits");
    int32_t *d_labels = be->alloc(be->ctx, sizeof(int32_t) * ((size_t)n + 1), "test labels");
    DP_ASSERT(d_sums && (d_loss || !loss) && d_logits && d_labels);
    be->upload(be->ctx, d_sums, sums, 4 * sizeof(double));
    if (loss) be->upload(be->ctx, d_loss, loss, sizeof(float));
    if (n) {
        be->upload(be->ctx, d_logits, logits, sizeof(float) * (size_t)n * k);
        be->upload(be->ctx, d_labels, labels, sizeof(int32_t) * (size_t)n);
    }
    be->count_metrics(be->ctx, d_sums, d_loss, scale, d_logits, d_labels, n, k);
    be->download(be->ctx, sums, d_sums, 4 * sizeof(double));
    be->free(be->ctx, d_sums);
    be->free(be->ctx, d_loss);
    be->free(be->ctx, d_logits);
    be->free(be->ctx, d_labels);
}

static inline int metrics_same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static inline void check_count_metrics(const dp_backend_t *be, const char *name) {
    CHECK(be->count_metrics != NULL, "%s: no count_metrics", name);
    if (!be->count_metrics) return;
    const float nan = NAN, inf = INFINITY;
    enum { K = 6 };
    /* rows (K) and labels: which ones count */
    const float rows[][K] = {
        {0, 1, 5, 2, 2, 5},       /* tie of 5 at 2 and 5: 2 wins */
        {0, 1, 5, 2, 2, 5},       /* the same row, label 5: not counted */
        {3, 3, 3, 3, 3, 3},       /* all equal: 0 */
        {1, 2, 3, nan, 0, 0},     /* NaN after the first never wins: 2 */
        {nan, 9, 9, 9, 9, 9},     /* NaN first: every comparison false, 0 stays */
        {-inf, -inf, -1, -inf, -inf, -inf}, /* 2 */
        {inf, inf, 1, 2, 3, 4},   /* tie of infinities: 0 */
        {-1, -2, -3, -4, -5, -6}, /* 0 */
        {0, 0, 0, 0, 0, 1e-30f},  /* 5 */
    };
    const int32_t labels[] = {2, 5, 0, 2, 0, 2, 0, 1, 5};
    const int n = (int)(sizeof labels / sizeof labels[0]);
    const int want = 1 + 0 + 1 + 1 + 1 + 1 + 1 + 0 + 1;
    CHECK(metrics_host_correct(&rows[0][0], labels, n, K) == want, "%s: the host rule counts %d, not %d", name,
          metrics_host_correct(&rows[0][0], labels, n, K), want);
    float loss = 0.6931472f;
    double sums[4] = {10.0, 3.0, -7.5, 42.0};
    metrics_call(be, sums, &loss, 96.0, &rows[0][0], labels, n, K);
    volatile double product = (double)loss * 96.0;
    double expect = 10.0 + product;
    CHECK(metrics_same_bits(sums[0], expect), "%s: loss sum %.17g, want %.17g", name, sums[0], expect);
    CHECK(sums[1] == 3.0 + want, "%s: correct sum %g, want %d (ties, NaN, infinities)", name, sums[1], 3 + want);
    CHECK(sums[2] == -7.5 && sums[3] == 42.0, "%s: the neighbour slot changed: %g %g", name, sums[2], sums[3]);
    /* added up over calls */
    metrics_call(be, sums, &loss, 96.0, &rows[0][0], labels, n, K);
    volatile double again = expect + product;
    CHECK(metrics_same_bits(sums[0], again) && sums[1] == 3.0 + 2 * want, "%s: a second call: %.17g %g", name,
          sums[0], sums[1]);

    /* NaN loss: NaN sum, the count still added */
    float nan_loss = nan;
    double nan_sums[4] = {1.0, 0.0, 0.0, 0.0};
    metrics_call(be, nan_sums, &nan_loss, 96.0, &rows[0][0], labels, n, K);
    CHECK(isnan(nan_sums[0]) && nan_sums[1] == want, "%s: NaN loss: %g, %g correct", name, nan_sums[0], nan_sums[1]);
    /* loss NULL: sums[0]'s bits untouched (an evaluation); n = 0: nothing counted */
    double keep[4] = {0.1, 5.0, 0.0, 0.0};
    metrics_call(be, keep, NULL, 96.0, &rows[0][0], labels, n, K);
    CHECK(metrics_same_bits(keep[0], 0.1) && keep[1] == 5.0 + want, "%s: no loss: %.17g, %g", name, keep[0],
          keep[1]);
    double empty[4] = {2.0, 7.0, 0.0, 0.0};
    metrics_call(be, empty, &loss, 1.0, NULL, NULL, 0, K);
    volatile double empty_product = (double)loss * 1.0;
    double empty_expect = 2.0 + empty_product;
    CHECK(metrics_same_bits(empty[0], empty_expect) && empty[1] == 7.0, "%s: n = 0: %.17g, %g", name, empty[0],
          empty[1]);

    /* one rounding per operation: values where fma gives other bits */
    dp_rng_t rng;
    dp_rng_seed(&rng, 77);
    int fused_differs = 0, tried = 0, wrong = 0;
    while (fused_differs < 50 && tried < 100000) {
        tried++;
        float l = (float)(2.3 + dp_rng_normal(&rng));
        /* not a whole number: a float times an integer below 2^29 is exact in double (the trainer's
         * case), where fused and not fused agree */
        double scale = 1.0 + 300.0 * dp_rng_uniform(&rng), start = 1000.0 * dp_rng_uniform(&rng);
        volatile double p = (double)l * scale;
        double unfused = start + p;
        if (metrics_same_bits(fma((double)l, scale, start), unfused)) continue;
        fused_differs++;
        double s[4] = {start, 0.0, 0.0, 0.0};
        metrics_call(be, s, &l, scale, NULL, NULL, 0, K);
        wrong += !metrics_same_bits(s[0], unfused);
    }
    CHECK(fused_differs == 50, "%s: only %d of %d cases where a fused multiply-add differs", name, fused_differs,
          tried);
    CHECK(wrong == 0, "%s: %d of %d loss sums are not the host's one-rounding-each bits (fused?)", name, wrong,
          fused_differs);

    /* many rows: more than a GPU block's threads */
    enum { ROWS = 1000, CLASSES = 10 };
    float *many = malloc(sizeof(float) * ROWS * CLASSES);
    int32_t *many_labels = malloc(sizeof(int32_t) * ROWS);
    DP_ASSERT(many && many_labels);
    for (int i = 0; i < ROWS * CLASSES; i++) many[i] = (float)(int)(4.0f * dp_rng_uniform(&rng)); /* many ties */
    for (int i = 0; i < ROWS; i++) many_labels[i] = (int32_t)(dp_rng_uniform(&rng) * CLASSES) % CLASSES;
    int host = metrics_host_correct(many, many_labels, ROWS, CLASSES);
    double big[4] = {0.0, 0.0, 0.0, 0.0};
    metrics_call(be, big, NULL, 0.0, many, many_labels, ROWS, CLASSES);
    CHECK(big[1] == host && host > 0, "%s: %d rows: %g correct, the host counts %d", name, ROWS, big[1], host);
    free(many);
    free(many_labels);
}

#endif
