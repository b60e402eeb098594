/* test_loader.c - the batch loader and dataset helpers: batch counts and the
 * short last batch, every index once per epoch, reproducible and
 * epoch-dependent shuffles, identity order without shuffle, argument errors,
 * dp_dataset_from_memory / truncate, and dp_dataset_fill's scaling.
 */
#include <stdlib.h>
#include <string.h>

#include "dptrain/data.h"
#include "testing.h"

/* Runs one epoch; the concatenated indices go to order (count), the batch
 * sizes to sizes; returns the number of batches. */
static int run_epoch(dp_loader_t *loader, int epoch, int count, int *order, int *sizes) {
    dp_loader_start_epoch(loader, epoch);
    int batches = 0, at = 0;
    const int *indices;
    int n;
    while ((n = dp_loader_next(loader, &indices)) > 0) {
        if (at + n > count) return -1;
        memcpy(order + at, indices, (size_t)n * sizeof *indices);
        at += n;
        sizes[batches++] = n;
    }
    return at == count ? batches : -1;
}

static int is_permutation(const int *order, int count) {
    char *seen = calloc((size_t)count, 1);
    int ok = 1;
    for (int i = 0; i < count && ok; i++) {
        if (order[i] < 0 || order[i] >= count || seen[order[i]]) ok = 0;
        else seen[order[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_batches(void) {
    const int count = 1003;
    int *order = malloc(count * sizeof *order);
    int *sizes = malloc(count * sizeof *sizes);
    const int batch_sizes[] = {1, 7, 100, 1000, 1003};
    for (size_t b = 0; b < sizeof batch_sizes / sizeof *batch_sizes; b++) {
        int bs = batch_sizes[b];
        dp_loader_t *loader = NULL;
        dp_status_t st = dp_loader_new(count, bs, 1, 42, &loader);
        CHECK(st == DP_OK, "new(%d, %d): %s", count, bs, dp_error_message());
        if (st != DP_OK) continue;
        int expected = (count + bs - 1) / bs;
        CHECK(dp_loader_num_batches(loader) == expected, "num_batches %d, expected %d",
              dp_loader_num_batches(loader), expected);
        int batches = run_epoch(loader, 0, count, order, sizes);
        CHECK(batches == expected, "B=%d: %d batches, expected %d", bs, batches, expected);
        int sizes_ok = batches > 0;
        for (int i = 0; i + 1 < batches; i++) sizes_ok &= sizes[i] == bs;
        int last = count - (expected - 1) * bs;
        if (batches > 0) sizes_ok &= sizes[batches - 1] == last;
        CHECK(sizes_ok, "B=%d: full batches then a last batch of %d", bs, last);
        CHECK(is_permutation(order, count), "B=%d: every index exactly once", bs);
        const int *indices;
        CHECK(dp_loader_next(loader, &indices) == 0, "0 after the epoch ends");
        dp_loader_free(loader);
    }
    free(order);
    free(sizes);
}

static void test_shuffle(void) {
    const int count = 500;
    int *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
    int *sizes = malloc(count * sizeof *sizes);
    dp_loader_t *l1 = NULL, *l2 = NULL, *l3 = NULL, *plain = NULL;
    CHECK(dp_loader_new(count, 64, 1, 7, &l1) == DP_OK, "l1");
    CHECK(dp_loader_new(count, 64, 1, 7, &l2) == DP_OK, "l2");
    CHECK(dp_loader_new(count, 64, 1, 8, &l3) == DP_OK, "l3");
    CHECK(dp_loader_new(count, 64, 0, 7, &plain) == DP_OK, "plain");
    if (!l1 || !l2 || !l3 || !plain) return;

    /* Same (seed, epoch): same order, even on a loader that saw other epochs. */
    run_epoch(l1, 3, count, a, sizes);
    run_epoch(l2, 0, count, b, sizes);
    run_epoch(l2, 1, count, b, sizes);
    run_epoch(l2, 3, count, b, sizes);
    CHECK(memcmp(a, b, count * sizeof *a) == 0, "same seed and epoch give the same order");
    CHECK(is_permutation(a, count), "shuffled epoch is a permutation");

    int identity = 1;
    for (int i = 0; i < count; i++) identity &= a[i] == i;
    CHECK(!identity, "shuffle changes the order");

    /* Different epochs, different seeds: different orders. */
    run_epoch(l1, 4, count, b, sizes);
    CHECK(memcmp(a, b, count * sizeof *a) != 0, "epochs 3 and 4 differ");
    run_epoch(l3, 3, count, b, sizes);
    CHECK(memcmp(a, b, count * sizeof *a) != 0, "seeds 7 and 8 differ");
    int distinct = 1;
    int *prev = malloc(count * sizeof *prev);
    run_epoch(l1, 0, count, prev, sizes);
    for (int e = 1; e < 20; e++) {
        run_epoch(l1, e, count, a, sizes);
        distinct &= memcmp(a, prev, count * sizeof *a) != 0;
        memcpy(prev, a, count * sizeof *a);
    }
    CHECK(distinct, "20 consecutive epochs all differ from the previous one");

    /* Restarting an epoch mid-way rewinds it. */
    const int *indices;
    dp_loader_start_epoch(l1, 5);
    dp_loader_next(l1, &indices);
    int first = indices[0];
    dp_loader_next(l1, &indices);
    dp_loader_start_epoch(l1, 5);
    dp_loader_next(l1, &indices);
    CHECK(indices[0] == first, "start_epoch rewinds");

    /* No shuffle: identity order in every epoch. */
    for (int e = 0; e < 3; e++) {
        run_epoch(plain, e, count, a, sizes);
        identity = 1;
        for (int i = 0; i < count; i++) identity &= a[i] == i;
        CHECK(identity, "no shuffle, epoch %d: identity order", e);
    }

    /* A new loader starts at epoch 0 without an explicit start_epoch. */
    dp_loader_t *fresh = NULL;
    CHECK(dp_loader_new(count, 64, 1, 7, &fresh) == DP_OK, "fresh");
    run_epoch(l1, 0, count, a, sizes);
    int at = 0, n;
    while ((n = dp_loader_next(fresh, &indices)) > 0) {
        memcpy(b + at, indices, (size_t)n * sizeof *indices);
        at += n;
    }
    CHECK(at == count && memcmp(a, b, count * sizeof *a) == 0, "new loader = epoch 0");

    /* Rough uniformity: position of example 0 over many epochs. */
    int hits_front = 0;
    for (int e = 0; e < 2000; e++) {
        run_epoch(l1, e, count, a, sizes);
        for (int i = 0; i < count / 2; i++) hits_front += a[i] == 0;
    }
    CHECK(hits_front > 850 && hits_front < 1150, "example 0 in the first half %d/2000 times",
          hits_front);

    dp_loader_free(l1);
    dp_loader_free(l2);
    dp_loader_free(l3);
    dp_loader_free(plain);
    dp_loader_free(fresh);
    free(a);
    free(b);
    free(prev);
    free(sizes);
}

static void test_errors(void) {
    static char sentinel;
    dp_loader_t *loader = (dp_loader_t *)&sentinel; /* must be reset to NULL */
    dp_status_t st = dp_loader_new(60000, 0, 1, 1, &loader);
    CHECK(st == DP_ERR_ARG && loader == NULL, "batch 0: %s", dp_status_name(st));
    CHECK(strstr(dp_error_message(), "batch size 0 must be at least 1") != NULL, "message: %s",
          dp_error_message());
    st = dp_loader_new(60000, -5, 1, 1, &loader);
    CHECK(st == DP_ERR_ARG, "negative batch: %s", dp_status_name(st));
    st = dp_loader_new(60000, 70000, 1, 1, &loader);
    CHECK(st == DP_ERR_ARG, "batch > count: %s", dp_status_name(st));
    CHECK(strstr(dp_error_message(),
                 "batch size 70000 is larger than the dataset (60000 examples)") != NULL,
          "message: %s", dp_error_message());
    st = dp_loader_new(0, 1, 1, 1, &loader);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "empty"), "empty dataset: %s",
          dp_error_message());
    dp_loader_free(NULL);
}

static void test_dataset(void) {
    /* 3 examples of (1, 2, 2). */
    const uint8_t pixels[12] = {0, 255, 128, 1, 10, 20, 30, 40, 255, 0, 254, 51};
    const uint8_t labels[3] = {4, 9, 0};
    dp_dataset_t ds;
    dp_status_t st = dp_dataset_from_memory(&ds, 3, 1, 2, 2, 10, pixels, labels);
    CHECK(st == DP_OK, "from_memory: %s", dp_error_message());
    if (st != DP_OK) return;
    CHECK(ds.pixels != pixels && ds.labels != labels, "from_memory copies");

    const int indices[4] = {2, 0, 0, 1};
    float x[16];
    int32_t y[4];
    dp_dataset_fill(&ds, indices, 4, x, y);
    CHECK(y[0] == 0 && y[1] == 4 && y[2] == 4 && y[3] == 9, "labels %d %d %d %d", y[0], y[1],
          y[2], y[3]);
    CHECK(x[0] == 1.0f && x[1] == 0.0f, "255 -> 1.0 exactly (%.9g), 0 -> 0.0 (%.9g)", x[0], x[1]);
    CHECK(x[4] == 0.0f && x[5] == 1.0f, "example 0: 0 -> 0, 255 -> 1 (%.9g %.9g)", x[4], x[5]);
    float expected[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) expected[i * 4 + j] = pixels[indices[i] * 4 + j] / 255.0f;
    size_t worst;
    double v = testing_max_violation(x, expected, 16, 1e-6, 1e-7, &worst);
    CHECK(v <= 1, "x = pixels / 255 (worst at %zu: %.9g vs %.9g)", worst, x[worst],
          expected[worst]);
    int all_in_range = 1;
    for (int p = 0; p < 256; p++) {
        uint8_t px = (uint8_t)p;
        dp_dataset_t one;
        if (dp_dataset_from_memory(&one, 1, 1, 1, 1, 10, &px, labels) != DP_OK) continue;
        int idx0 = 0;
        float xv;
        dp_dataset_fill(&one, &idx0, 1, &xv, NULL);
        all_in_range &= xv >= 0.0f && xv <= 1.0f && xv == xv;
        all_in_range &= (p == 0) == (xv == 0.0f) && (p == 255) == (xv == 1.0f);
        dp_dataset_free(&one);
    }
    CHECK(all_in_range, "every byte maps into [0, 1], only 0 to 0 and only 255 to 1");

    dp_dataset_truncate(&ds, 0);
    CHECK(ds.count == 3, "truncate(0) is a no-op");
    dp_dataset_truncate(&ds, 5);
    CHECK(ds.count == 3, "truncate beyond count is a no-op");
    dp_dataset_truncate(&ds, 2);
    CHECK(ds.count == 2, "truncate(2)");
    dp_dataset_free(&ds);
    CHECK(ds.pixels == NULL && ds.count == 0, "free clears");
    dp_dataset_free(&ds); /* twice is harmless */

    const uint8_t bad_labels[3] = {4, 10, 0};
    st = dp_dataset_from_memory(&ds, 3, 1, 2, 2, 10, pixels, bad_labels);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "label 10 at index 1"),
          "label out of range: %s", dp_error_message());
    st = dp_dataset_from_memory(&ds, 3, 0, 2, 2, 10, pixels, labels);
    CHECK(st == DP_ERR_ARG, "zero channels rejected: %s", dp_error_message());
}

/* Repeated augmentation: epoch e's order is the plain permutation's first ceil(count / R) samples, each R times
 * in a row, count positions in all; R = 1 is the plain order; R out of range refused. */
static void test_repeats(void) {
    const int count = 100, B = 16;
    for (int R = 1; R <= 7; R += 3) {
        dp_loader_t *plain = NULL, *rep = NULL;
        DP_ASSERT(dp_loader_new(count, B, 1, 5, &plain) == DP_OK && dp_loader_new(count, B, 1, 5, &rep) == DP_OK);
        CHECK(dp_loader_set_repeats(rep, R) == DP_OK, "R %d: %s", R, dp_error_message());
        for (int epoch = 0; epoch < 3; epoch++) {
            dp_loader_start_epoch(plain, epoch);
            dp_loader_start_epoch(rep, epoch);
            int perm[100], order[100], n = 0, m = 0;
            const int *idx;
            for (int k; (k = dp_loader_next(plain, &idx)) > 0; n += k) memcpy(perm + n, idx, sizeof(int) * k);
            for (int k; (k = dp_loader_next(rep, &idx)) > 0; m += k) memcpy(order + m, idx, sizeof(int) * k);
            int wrong = 0;
            for (int i = 0; i < count; i++) wrong += order[i] != perm[i / R];
            CHECK(n == count && m == count && wrong == 0, "R %d, epoch %d: %d positions (of %d) not perm[i / R]", R,
                  epoch, wrong, m);
        }
        CHECK(dp_loader_num_batches(rep) == dp_loader_num_batches(plain), "R %d: other steps per epoch", R);
        dp_loader_free(plain);
        dp_loader_free(rep);
    }
    dp_loader_t *l = NULL;
    DP_ASSERT(dp_loader_new(10, 2, 1, 1, &l) == DP_OK);
    CHECK(dp_loader_set_repeats(l, 0) == DP_ERR_ARG && dp_loader_set_repeats(l, 11) == DP_ERR_ARG &&
              strstr(dp_error_message(), "11 repeats"),
          "repeats 0 and 11 of 10 examples: %s", dp_error_message());
    dp_loader_free(l);
}

int main(void) {
    test_batches();
    test_repeats();
    test_shuffle();
    test_errors();
    test_dataset();
    return testing_finish("test_loader");
}
