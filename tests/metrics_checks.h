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
 *   - the top-5 count (sums[2]): hand-made rows of 8 whose expected hits
 *     are written out: the rank-5 boundary (4 outranking entries: a hit, 5:
 *     not), ties at the boundary going to the lower index, 0.0 equal to
 *     -0.0, infinities, NaNs elsewhere outranking nothing, a NaN at the
 *     label never a hit (also at index 0, where top-1 counts it), labels
 *     outside 0..k-1 never; k = 3 and 5 (every valid label a hit, a NaN at
 *     it too) and k = 6 (the 6th is not); and random rows with many ties and
 *     some NaNs (1000 of 10, 300 of 1000 classes) against a host count
 *     written another way (metrics_host_top5: five picks of the first
 *     largest);
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

/* The top-5 rule (backend.h) written another way: pick the row's entries
 * one at a time, each the first largest of those not picked yet (a NaN is
 * never picked), five times; a hit when the label is picked; with k <= 5
 * every label in 0..k-1. */
static inline int metrics_host_top5(const float *logits, const int32_t *labels, int n, int k) {
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k;
        const int label = labels[i];
        if (label < 0 || label >= k) continue;
        if (k <= 5) {
            hits++;
            continue;
        }
        int picked[5], hit = 0;
        for (int p = 0; p < 5 && !hit; p++) {
            int best = -1;
            for (int j = 0; j < k; j++) {
                int taken = isnan(row[j]);
                for (int q = 0; q < p; q++) taken |= picked[q] == j;
                if (!taken && (best < 0 || row[j] > row[best])) best = j;
            }
            if (best < 0) break;
            picked[p] = best;
            hit = best == label;
        }
        hits += hit;
    }
    return hits;
}

enum { METRICS_SLOT = DP_METRICS_SUMS, METRICS_TWO = 2 * DP_METRICS_SUMS };

/* One count_metrics call on device copies; sums (METRICS_TWO doubles: the
 * call's at [0, 3), a neighbour slot at [3, 6)) in and out through host
 * memory. */
static inline void metrics_call(const dp_backend_t *be, double sums[METRICS_TWO], const float *loss, double scale,
                                const float *logits, const int32_t *labels, int n, int k) {
    double *d_sums = be->alloc(be->ctx, METRICS_TWO * sizeof(double), "test sums");
    float *d_loss = loss ? be->alloc(be->ctx, sizeof(float), "test loss") : NULL;
    float *d_logits = be->alloc(be->ctx, sizeof(float) * ((size_t)n * k + 1), "test logits");
    int32_t *d_labels = be->alloc(be->ctx, sizeof(int32_t) * ((size_t)n + 1), "test labels");
    DP_ASSERT(d_sums && (d_loss || !loss) && d_logits && d_labels);
    be->upload(be->ctx, d_sums, sums, METRICS_TWO * sizeof(double));
    if (loss) be->upload(be->ctx, d_loss, loss, sizeof(float));
    if (n) {
        be->upload(be->ctx, d_logits, logits, sizeof(float) * (size_t)n * k);
        be->upload(be->ctx, d_labels, labels, sizeof(int32_t) * (size_t)n);
    }
    be->count_metrics(be->ctx, d_sums, d_loss, scale, d_logits, d_labels, n, k);
    be->download(be->ctx, sums, d_sums, METRICS_TWO * sizeof(double));
    be->free(be->ctx, d_sums);
    be->free(be->ctx, d_loss);
    be->free(be->ctx, d_logits);
    be->free(be->ctx, d_labels);
}

static inline int metrics_same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* count_metrics' top-5 count (sums[2]) of rows (n, k) against `want`, and
 * against the host's count written another way; sums[1] against the
 * host's top-1. */
static inline void check_top5_rows(const dp_backend_t *be, const char *name, const char *what, const float *rows,
                                   const int32_t *labels, int n, int k, int want) {
    const int host5 = metrics_host_top5(rows, labels, n, k), host1 = metrics_host_correct(rows, labels, n, k);
    CHECK(host5 == want, "%s: %s: the host top-5 rule counts %d, not %d", name, what, host5, want);
    double sums[METRICS_TWO] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    metrics_call(be, sums, NULL, 0.0, rows, labels, n, k);
    CHECK(sums[2] == want && sums[1] == host1, "%s: %s: %g top-5 (want %d), %g correct (want %d)", name, what,
          sums[2], want, sums[1], host1);
}

/* The top-5 rule on hand-made rows (the file's comment says which). */
static inline void check_top5(const dp_backend_t *be, const char *name, dp_rng_t *rng) {
    const float nan = NAN, inf = INFINITY;
    enum { K = 8 };
    const float rows[][K] = {
        {7, 6, 5, 4, 3, 2, 1, 0},                /* label 4: rank 4, a hit */
        {7, 6, 5, 4, 3, 2, 1, 0},                /* label 5: rank 5, not */
        {1, 1, 1, 1, 1, 1, 1, 1},                /* label 4: 4 equals before it, a hit */
        {1, 1, 1, 1, 1, 1, 1, 1},                /* label 5: 5 equals before it, not */
        {0, 5, 5, 5, 5, 5, 0, 0},                /* label 0: 5 larger (the equals after it do not count), not */
        {5, 5, 5, 5, 0, 0, 0, 0},                /* label 4: 4 larger, a hit */
        {5, 5, 5, 5, 0, 0, 0, 0},                /* label 7: 4 larger and 3 equals before it, not */
        {-0.0f, 0, 0, 0, 0, 0, 0, 0},            /* label 7: -0.0 == 0.0: 7 equals before it, not */
        {-0.0f, 0, 0, 0, 0, 0, 0, 0},            /* label 0: rank 0, a hit */
        {nan, nan, nan, nan, nan, nan, 0, 1},    /* label 6: NaNs outrank nothing, rank 1, a hit */
        {nan, 9, 9, 9, 9, 9, 9, 9},              /* label 7: rank 6 (the NaN not among them), not */
        {0, 1, 2, nan, 3, 4, 5, 6},              /* label 3: NaN at the label, not */
        {nan, -1, -2, -3, -4, -5, -6, -7},       /* label 0: NaN at the label (top-1 counts it), not */
        {inf, inf, inf, inf, inf, inf, 1, 2},    /* label 6: 6 infinities larger, not */
        {inf, inf, inf, inf, 1, -inf, -inf, -inf}, /* label 4: rank 4, a hit */
        {inf, inf, inf, inf, 1, -inf, -inf, -inf}, /* label 5: 5 larger, not */
        {3, 1, 4, 1, 5, 9, 2, 6},                /* label 8: outside 0..7, never */
        {3, 1, 4, 1, 5, 9, 2, 6},                /* label -1: never */
    };
    const int32_t labels[] = {4, 5, 4, 5, 0, 4, 7, 7, 0, 6, 7, 3, 0, 6, 4, 5, 8, -1};
    const int hits = 1 + 0 + 1 + 0 + 0 + 1 + 0 + 0 + 1 + 1 + 0 + 0 + 0 + 0 + 1 + 0 + 0 + 0;
    check_top5_rows(be, name, "k = 8", &rows[0][0], labels, (int)(sizeof labels / sizeof labels[0]), K, hits);
    /* k <= 5: every label in 0..k-1 is a hit, a NaN at it too; k = 6: the 6th largest is not */
    const float three[][3] = {{nan, 1, 2}, {3, 2, 1}, {3, 2, 1}, {3, 2, 1}};
    const int32_t three_labels[] = {0, 2, 3, -1};
    check_top5_rows(be, name, "k = 3", &three[0][0], three_labels, 4, 3, 2);
    const float five[][5] = {{1, 2, 3, 4, 5}, {nan, 2, 3, 4, 5}};
    const int32_t five_labels[] = {0, 0};
    check_top5_rows(be, name, "k = 5", &five[0][0], five_labels, 2, 5, 2);
    const float six[][6] = {{1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}};
    const int32_t six_labels[] = {0, 1};
    check_top5_rows(be, name, "k = 6", &six[0][0], six_labels, 2, 6, 1);
    /* ImageNet's shape: 300 rows of 1000 classes, values of 400 levels (2.5
     * entries a level: ties everywhere); every other row's label at one of
     * the 4 top levels, around the rank-5 boundary */
    enum { WIDE_ROWS = 300, WIDE = 1000 };
    float *wide = malloc(sizeof(float) * WIDE_ROWS * WIDE);
    int32_t *wide_labels = malloc(sizeof(int32_t) * WIDE_ROWS);
    DP_ASSERT(wide && wide_labels);
    for (int i = 0; i < WIDE_ROWS * WIDE; i++) wide[i] = (float)(int)(400.0f * dp_rng_uniform(rng));
    for (int i = 0; i < WIDE_ROWS; i++) {
        wide_labels[i] = (int32_t)(dp_rng_uniform(rng) * WIDE) % WIDE;
        if (i % 2 == 0) wide[(size_t)i * WIDE + wide_labels[i]] = (float)(399 - (i / 2) % 4);
    }
    const int wide_hits = metrics_host_top5(wide, wide_labels, WIDE_ROWS, WIDE);
    CHECK(wide_hits > WIDE_ROWS / 8 && wide_hits < WIDE_ROWS / 2, "%s: %d top-5 hits of %d rows of %d: the rows "
          "test little", name, wide_hits, WIDE_ROWS, WIDE);
    check_top5_rows(be, name, "1000 classes", wide, wide_labels, WIDE_ROWS, WIDE, wide_hits);
    free(wide);
    free(wide_labels);
}

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
    /* top-5 (k = 6): every row but the one with a NaN at its label 0 */
    const int want5 = n - 1;
    CHECK(metrics_host_top5(&rows[0][0], labels, n, K) == want5, "%s: the host top-5 rule counts %d, not %d", name,
          metrics_host_top5(&rows[0][0], labels, n, K), want5);
    float loss = 0.6931472f;
    double sums[METRICS_TWO] = {10.0, 3.0, 1.0, -7.5, 42.0, 8.0};
    metrics_call(be, sums, &loss, 96.0, &rows[0][0], labels, n, K);
    volatile double product = (double)loss * 96.0;
    double expect = 10.0 + product;
    CHECK(metrics_same_bits(sums[0], expect), "%s: loss sum %.17g, want %.17g", name, sums[0], expect);
    CHECK(sums[1] == 3.0 + want, "%s: correct sum %g, want %d (ties, NaN, infinities)", name, sums[1], 3 + want);
    CHECK(sums[2] == 1.0 + want5, "%s: top-5 sum %g, want %d", name, sums[2], 1 + want5);
    CHECK(sums[3] == -7.5 && sums[4] == 42.0 && sums[5] == 8.0, "%s: the neighbour slot changed: %g %g %g", name,
          sums[3], sums[4], sums[5]);
    /* added up over calls */
    metrics_call(be, sums, &loss, 96.0, &rows[0][0], labels, n, K);
    volatile double again = expect + product;
    CHECK(metrics_same_bits(sums[0], again) && sums[1] == 3.0 + 2 * want && sums[2] == 1.0 + 2 * want5,
          "%s: a second call: %.17g %g %g", name, sums[0], sums[1], sums[2]);

    /* NaN loss: NaN sum, the count still added */
    float nan_loss = nan;
    double nan_sums[METRICS_TWO] = {1.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    metrics_call(be, nan_sums, &nan_loss, 96.0, &rows[0][0], labels, n, K);
    CHECK(isnan(nan_sums[0]) && nan_sums[1] == want && nan_sums[2] == want5, "%s: NaN loss: %g, %g correct, %g top-5",
          name, nan_sums[0], nan_sums[1], nan_sums[2]);
    /* loss NULL: sums[0]'s bits untouched (an evaluation); n = 0: nothing counted */
    double keep[METRICS_TWO] = {0.1, 5.0, 2.0, 0.0, 0.0, 0.0};
    metrics_call(be, keep, NULL, 96.0, &rows[0][0], labels, n, K);
    CHECK(metrics_same_bits(keep[0], 0.1) && keep[1] == 5.0 + want && keep[2] == 2.0 + want5,
          "%s: no loss: %.17g, %g, %g", name, keep[0], keep[1], keep[2]);
    double empty[METRICS_TWO] = {2.0, 7.0, 4.0, 0.0, 0.0, 0.0};
    metrics_call(be, empty, &loss, 1.0, NULL, NULL, 0, K);
    volatile double empty_product = (double)loss * 1.0;
    double empty_expect = 2.0 + empty_product;
    CHECK(metrics_same_bits(empty[0], empty_expect) && empty[1] == 7.0 && empty[2] == 4.0, "%s: n = 0: %.17g, %g, %g",
          name, empty[0], empty[1], empty[2]);

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
        double s[METRICS_TWO] = {start, 0.0, 0.0, 0.0, 0.0, 0.0};
        metrics_call(be, s, &l, scale, NULL, NULL, 0, K);
        wrong += !metrics_same_bits(s[0], unfused);
    }
    CHECK(fused_differs == 50, "%s: only %d of %d cases where a fused multiply-add differs", name, fused_differs,
          tried);
    CHECK(wrong == 0, "%s: %d of %d loss sums are not the host's one-rounding-each bits (fused?)", name, wrong,
          fused_differs);

    /* many rows: more than a GPU block's threads; ties, and NaNs for top-5 */
    enum { ROWS = 1000, CLASSES = 10 };
    float *many = malloc(sizeof(float) * ROWS * CLASSES);
    int32_t *many_labels = malloc(sizeof(int32_t) * ROWS);
    DP_ASSERT(many && many_labels);
    for (int i = 0; i < ROWS * CLASSES; i++) many[i] = (float)(int)(4.0f * dp_rng_uniform(&rng)); /* many ties */
    for (int i = 0; i < ROWS; i++) many_labels[i] = (int32_t)(dp_rng_uniform(&rng) * CLASSES) % CLASSES;
    int host = metrics_host_correct(many, many_labels, ROWS, CLASSES);
    int host5 = metrics_host_top5(many, many_labels, ROWS, CLASSES);
    double big[METRICS_TWO] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    metrics_call(be, big, NULL, 0.0, many, many_labels, ROWS, CLASSES);
    CHECK(big[1] == host && host > 0, "%s: %d rows: %g correct, the host counts %d", name, ROWS, big[1], host);
    CHECK(big[2] == host5 && host5 > host && host5 < ROWS, "%s: %d rows: %g top-5, the host counts %d", name, ROWS,
          big[2], host5);
    for (int i = 0; i < ROWS * CLASSES; i += 7) many[i] = nan; /* NaNs at labels and elsewhere */
    host = metrics_host_correct(many, many_labels, ROWS, CLASSES);
    host5 = metrics_host_top5(many, many_labels, ROWS, CLASSES);
    double with_nan[METRICS_TWO] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    metrics_call(be, with_nan, NULL, 0.0, many, many_labels, ROWS, CLASSES);
    CHECK(with_nan[1] == host && with_nan[2] == host5 && host5 > host, "%s: %d rows with NaNs: %g correct, %g top-5, "
          "the host counts %d, %d", name, ROWS, with_nan[1], with_nan[2], host, host5);
    free(many);
    free(many_labels);
    check_top5(be, name, &rng);
}

#endif
