/* test_batch_loader.c - batch sources and the batch loader (batch_source.h,
 * batch_loader.h):
 * - the in-memory source fills the dataset's bytes and labels (int32) as
 *   they are, and with augmentation exactly dp_augment_pixels' bytes;
 *   crop padding 65 and an empty dataset are refused;
 * - the loader hands out, epoch after epoch, batch s = the samples of
 *   dp_loader's order s * B .. (s + 1) * B (the last one short), filled
 *   with keys (seed, epoch, s * B): the same bytes with 0, 1, 2 and 4
 *   loader threads and queue depths 1 and 3;
 * - seek: to a step inside an epoch (as a resume does) and to another
 *   epoch, the batches that follow are the uninterrupted loader's; the
 *   cursor (epoch, step) says where it is; NULL at an epoch's end;
 * - a fill that fails (a source whose sample 7 is broken) makes next()
 *   fail with the source's line, with and without threads, and the loader
 *   is freed cleanly afterwards (also while its threads fill ahead);
 * - bad configurations are refused with one line.
 * Runs under ThreadSanitizer too (label threads).
 */
#include <stdlib.h>
#include <string.h>

#include "dptrain/batch_loader.h"
#include "testing.h"

#define COUNT 203
#define SIDE 6
#define BATCH 16

/* A source whose sample `broken` fails to fill (a file gone bad mid-run). */
typedef struct {
    dp_batch_source_t *inner;
    int broken;
} failing_t;

static dp_status_t failing_fill(void *self, const int *samples, int n, const dp_fill_keys_t *keys, uint8_t *pixels,
                                int32_t *labels) {
    failing_t *f = self;
    for (int i = 0; i < n; i++)
        if (samples[i] == f->broken) return dp_fail(DP_ERR_FORMAT, "sample %d: broken on purpose", samples[i]);
    return dp_batch_source_fill(f->inner, samples, n, keys, pixels, labels);
}

static void failing_free(void *self) { free(self); }

static const dp_batch_source_ops_t failing_ops = {.kind = "failing", .fill = failing_fill, .free = failing_free};

/* Every batch of epochs 0..epochs-1 of a loader over src, concatenated
 * (pixels, then labels), in *out (malloc'd); its length in *bytes. */
static int read_epochs(dp_batch_source_t *src, int threads, int depth, int epochs, uint8_t **out, size_t *bytes) {
    dp_batch_loader_config_t c = {.batch_size = BATCH, .shuffle = 1, .seed = 9, .training = 1, .threads = threads,
                                  .depth = depth};
    dp_batch_loader_t *l = NULL;
    if (dp_batch_loader_new(src, &c, &l) != DP_OK) return 0;
    const size_t example = dp_batch_source_sample_bytes(src);
    size_t cap = (size_t)epochs * COUNT * (example + sizeof(int32_t)), used = 0;
    *out = malloc(cap);
    DP_ASSERT(*out);
    int ok = 1;
    for (int e = 0; e < epochs && ok; e++) {
        ok = dp_batch_loader_seek(l, e, 0) == DP_OK;
        for (int s = 0; ok; s++) {
            const dp_batch_t *b;
            ok = dp_batch_loader_next(l, &b) == DP_OK;
            if (!ok || !b) break;
            ok = dp_batch_loader_epoch(l) == e && dp_batch_loader_step(l) == s + 1 &&
                 b->n == (s == COUNT / BATCH ? COUNT % BATCH : BATCH);
            memcpy(*out + used, b->pixels, (size_t)b->n * example);
            used += (size_t)b->n * example;
            memcpy(*out + used, b->labels, sizeof(int32_t) * (size_t)b->n);
            used += sizeof(int32_t) * (size_t)b->n;
        }
    }
    *bytes = used;
    dp_batch_loader_free(l);
    return ok;
}

/* The expected bytes of epochs 0..epochs-1: dp_loader's order, the source filled directly. */
static uint8_t *expected_epochs(dp_batch_source_t *src, int epochs, size_t *bytes) {
    const size_t example = dp_batch_source_sample_bytes(src);
    uint8_t *out = malloc((size_t)epochs * COUNT * (example + sizeof(int32_t)));
    dp_loader_t *order;
    DP_ASSERT(out && dp_loader_new(COUNT, BATCH, 1, 9, &order) == DP_OK);
    size_t used = 0;
    for (int e = 0; e < epochs; e++) {
        dp_loader_start_epoch(order, e);
        const int *indices;
        int n;
        for (int s = 0; (n = dp_loader_next(order, &indices)) > 0; s++) {
            dp_fill_keys_t keys = {.seed = 9, .epoch = e, .first_position = (int64_t)s * BATCH, .training = 1};
            int32_t labels[BATCH];
            DP_ASSERT(dp_batch_source_fill(src, indices, n, &keys, out + used, labels) == DP_OK);
            used += (size_t)n * example;
            memcpy(out + used, labels, sizeof(int32_t) * (size_t)n);
            used += sizeof(int32_t) * (size_t)n;
        }
    }
    dp_loader_free(order);
    *bytes = used;
    return out;
}

static void test_memory_source(dp_dataset_t *ds) {
    dp_batch_source_t *plain = NULL, *aug = NULL;
    const dp_augment_t crop = {.crop_padding = 2, .flip = 1};
    CHECK(dp_memory_source_new(ds, NULL, 0, &plain) == DP_OK && dp_memory_source_new(ds, &crop, 0, &aug) == DP_OK,
          "sources: %s", dp_error_message());
    if (!plain || !aug) return;
    const dp_source_info_t *info = dp_batch_source_info(plain);
    CHECK(info->count == COUNT && info->channels == 3 && info->height == SIDE && info->width == SIDE &&
              info->num_classes == 7 && !info->normalize.enabled,
          "info: %d samples of %dx%dx%d, %d classes", info->count, info->channels, info->height, info->width,
          info->num_classes);
    const size_t example = 3 * SIDE * SIDE;
    int samples[3] = {5, 0, 202};
    uint8_t got[3 * 3 * SIDE * SIDE], want[3 * SIDE * SIDE];
    int32_t labels[3];
    dp_fill_keys_t keys = {.seed = 4, .epoch = 2, .first_position = 40, .training = 1};
    CHECK(dp_batch_source_fill(plain, samples, 3, &keys, got, labels) == DP_OK, "fill");
    int same = 1;
    for (int i = 0; i < 3; i++)
        same &= memcmp(got + i * example, ds->pixels + (size_t)samples[i] * example, example) == 0 &&
                labels[i] == ds->labels[samples[i]];
    CHECK(same, "the in-memory source's bytes and labels are the dataset's");
    CHECK(dp_batch_source_fill(aug, samples, 3, &keys, got, labels) == DP_OK, "augmented fill");
    int augmented_same = 1, changed = 0;
    for (int i = 0; i < 3; i++) {
        dp_augment_pixels(&crop, 4, 2, 40 + i, ds->pixels + (size_t)samples[i] * example, 3, SIDE, SIDE, want);
        augmented_same &= memcmp(got + i * example, want, example) == 0;
        changed |= memcmp(want, ds->pixels + (size_t)samples[i] * example, example) != 0;
    }
    CHECK(augmented_same && changed, "augmented fill = dp_augment_pixels at positions 40.. (and it changes them)");
    keys.training = 0; /* evaluation: never augmented */
    CHECK(dp_batch_source_fill(aug, samples, 3, &keys, got, labels) == DP_OK &&
              memcmp(got, ds->pixels + (size_t)5 * example, example) == 0,
          "an evaluation fill is not augmented");
    dp_batch_source_free(plain);
    dp_batch_source_free(aug);
    const dp_augment_t wide = {.crop_padding = 65};
    dp_batch_source_t *bad = NULL;
    CHECK(dp_memory_source_new(ds, &wide, 0, &bad) == DP_ERR_ARG && !bad && strstr(dp_error_message(), "crop padding"),
          "crop padding 65: %s", dp_error_message());
    dp_dataset_t empty = {.channels = 1, .height = 2, .width = 2, .num_classes = 2};
    CHECK(dp_memory_source_new(&empty, NULL, 0, &bad) == DP_ERR_ARG && !bad && strstr(dp_error_message(), ">= 1"),
          "an empty dataset: %s", dp_error_message());
}

static void test_threads_and_depths(dp_batch_source_t *src) {
    size_t want_bytes;
    uint8_t *want = expected_epochs(src, 3, &want_bytes);
    const int threads[] = {0, 1, 2, 4}, depths[] = {1, 3};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
        for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
            uint8_t *got = NULL;
            size_t got_bytes = 0;
            int ok = read_epochs(src, threads[t], depths[d], 3, &got, &got_bytes);
            CHECK(ok && got_bytes == want_bytes && memcmp(got, want, want_bytes) == 0,
                  "%d threads, depth %d: 3 epochs are not the source's batches in the loader's order (%s)",
                  threads[t], depths[d], dp_error_message());
            free(got);
        }
    free(want);
}

/* A seek inside an epoch and to another epoch continues as the uninterrupted loader. */
static void test_seek(dp_batch_source_t *src, int threads) {
    dp_batch_loader_config_t c = {.batch_size = BATCH, .shuffle = 1, .seed = 9, .training = 1, .threads = threads};
    dp_batch_loader_t *straight = NULL, *jumped = NULL;
    CHECK(dp_batch_loader_new(src, &c, &straight) == DP_OK && dp_batch_loader_new(src, &c, &jumped) == DP_OK,
          "loaders");
    if (!straight || !jumped) goto done;
    const size_t example = dp_batch_source_sample_bytes(src);
    const int batches = dp_batch_loader_num_batches(straight);
    CHECK(batches == (COUNT + BATCH - 1) / BATCH, "%d batches per epoch", batches);
    /* the jumped loader reads 2 batches of epoch 1, then seeks to epoch 1 step 5 */
    const dp_batch_t *b;
    DP_ASSERT(dp_batch_loader_seek(jumped, 1, 0) == DP_OK);
    DP_ASSERT(dp_batch_loader_next(jumped, &b) == DP_OK && b && dp_batch_loader_next(jumped, &b) == DP_OK && b);
    CHECK(dp_batch_loader_seek(jumped, 1, 5) == DP_OK && dp_batch_loader_epoch(jumped) == 1 &&
              dp_batch_loader_step(jumped) == 5,
          "seek to epoch 1 step 5");
    DP_ASSERT(dp_batch_loader_seek(straight, 1, 0) == DP_OK);
    int same = 1;
    for (int s = 0; s < batches; s++) {
        const dp_batch_t *want;
        DP_ASSERT(dp_batch_loader_next(straight, &want) == DP_OK && want);
        if (s < 5) continue;
        uint8_t copy[BATCH * 3 * SIDE * SIDE];
        int32_t labels[BATCH];
        int n = want->n;
        memcpy(copy, want->pixels, (size_t)n * example);
        memcpy(labels, want->labels, sizeof(int32_t) * (size_t)n);
        const dp_batch_t *got;
        same &= dp_batch_loader_next(jumped, &got) == DP_OK && got && got->n == n &&
                memcmp(got->pixels, copy, (size_t)n * example) == 0 &&
                memcmp(got->labels, labels, sizeof(int32_t) * (size_t)n) == 0;
    }
    CHECK(same, "%d threads: after a seek to step 5 the batches are the uninterrupted epoch's", threads);
    const dp_batch_t *end = (const dp_batch_t *)1;
    CHECK(dp_batch_loader_next(jumped, &end) == DP_OK && end == NULL && dp_batch_loader_step(jumped) == batches,
          "the epoch's end: NULL, cursor at %d", batches);
    CHECK(dp_batch_loader_seek(jumped, 0, batches + 1) == DP_ERR_ARG && strstr(dp_error_message(), "outside"),
          "a seek past the epoch: %s", dp_error_message());
done:
    dp_batch_loader_free(straight);
    dp_batch_loader_free(jumped);
}

static void test_failure(dp_batch_source_t *inner, int threads) {
    failing_t *f = malloc(sizeof *f);
    DP_ASSERT(f);
    f->inner = inner;
    f->broken = 7;
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_batch_source_new(&failing_ops, f, dp_batch_source_info(inner), &src) == DP_OK);
    dp_batch_loader_config_t c = {.batch_size = BATCH, .shuffle = 0, .seed = 1, .threads = threads, .depth = 2};
    dp_batch_loader_t *l = NULL;
    DP_ASSERT(dp_batch_loader_new(src, &c, &l) == DP_OK);
    const dp_batch_t *b = NULL;
    /* no shuffle: sample 7 is in the first batch */
    CHECK(dp_batch_loader_next(l, &b) == DP_ERR_FORMAT && strstr(dp_error_message(), "sample 7: broken on purpose"),
          "%d threads: a failed fill: %s", threads, dp_error_message());
    dp_batch_loader_free(l);
    /* freed while the threads fill ahead: joined cleanly */
    DP_ASSERT(dp_batch_loader_new(src, &c, &l) == DP_OK);
    DP_ASSERT(dp_batch_loader_seek(l, 0, 2) == DP_OK);
    dp_batch_loader_free(l);
    dp_batch_source_free(src);
}

static void test_bad_config(dp_batch_source_t *src) {
    struct {
        dp_batch_loader_config_t c;
        const char *says;
    } bad[] = {
        {{.batch_size = 0}, "batch size 0"},
        {{.batch_size = COUNT + 1}, "batch size 204"},
        {{.batch_size = 4, .threads = -1}, "-1 threads"},
        {{.batch_size = 4, .threads = 1, .depth = 65}, "depth 65"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dp_batch_loader_t *l = (dp_batch_loader_t *)1;
        CHECK(dp_batch_loader_new(src, &bad[i].c, &l) == DP_ERR_ARG && !l && strstr(dp_error_message(), bad[i].says),
              "bad config %zu: '%s'", i, dp_error_message());
    }
}

int main(void) {
    uint8_t *pixels = malloc((size_t)COUNT * 3 * SIDE * SIDE), labels[COUNT];
    DP_ASSERT(pixels);
    for (size_t i = 0; i < (size_t)COUNT * 3 * SIDE * SIDE; i++) pixels[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int i = 0; i < COUNT; i++) labels[i] = (uint8_t)(i % 7);
    dp_dataset_t ds;
    DP_ASSERT(dp_dataset_from_memory(&ds, COUNT, 3, SIDE, SIDE, 7, pixels, labels) == DP_OK);
    free(pixels);
    test_memory_source(&ds);
    const dp_augment_t crop = {.crop_padding = 2, .flip = 1};
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_memory_source_new(&ds, &crop, 0, &src) == DP_OK);
    test_threads_and_depths(src);
    test_seek(src, 0);
    test_seek(src, 3);
    test_failure(src, 0);
    test_failure(src, 2);
    test_bad_config(src);
    dp_batch_source_free(src);
    dp_dataset_free(&ds);
    return testing_finish("test_batch_loader");
}
