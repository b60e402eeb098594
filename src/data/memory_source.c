/* memory_source.c - the in-memory batch source (batch_source.h): a
 * dp_dataset_t's bytes (IDX, CIFAR records, an image folder decoded into
 * memory), gathered into a batch, augmented for training when asked
 * (dp_augment_pixels: keyed by the run's seed, the epoch and the sample's
 * position in the epoch), labels widened to int32. Fills only read the
 * dataset: any number of threads may fill at once.
 */
#include <stdlib.h>
#include <string.h>

#include "dptrain/batch_source.h"

typedef struct {
    dp_dataset_t *ds;   /* &own when the source took the dataset, else the caller's */
    dp_dataset_t own;
    dp_augment_t augment;
} memory_source_t;

static dp_status_t memory_fill(void *self, const int *samples, int n, const dp_fill_keys_t *keys, uint8_t *pixels,
                               int32_t *labels) {
    const memory_source_t *m = self;
    const dp_dataset_t *ds = m->ds;
    const size_t example = (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width;
    const int augment = keys->training && (m->augment.crop_padding || m->augment.flip);
    for (int i = 0; i < n; i++) {
        const uint8_t *src = ds->pixels + (size_t)samples[i] * example;
        uint8_t *dst = pixels + (size_t)i * example;
        if (augment)
            dp_augment_pixels(&m->augment, keys->seed, keys->epoch, keys->first_position + i, src, ds->channels,
                              ds->height, ds->width, dst);
        else
            memcpy(dst, src, example);
        labels[i] = ds->labels[samples[i]];
    }
    return DP_OK;
}

static void memory_free(void *self) {
    memory_source_t *m = self;
    if (!m) return;
    if (m->ds == &m->own) dp_dataset_free(&m->own);
    free(m);
}

static const dp_batch_source_ops_t memory_ops = {.kind = "memory", .fill = memory_fill, .free = memory_free};

dp_status_t dp_memory_source_new(dp_dataset_t *ds, const dp_augment_t *augment, int take, dp_batch_source_t **out) {
    *out = NULL;
    if (augment && (augment->crop_padding < 0 || augment->crop_padding > 64 || augment->flip < 0 || augment->flip > 1)) {
        if (take) dp_dataset_free(ds);
        return dp_fail(DP_ERR_ARG, "augment: crop padding must be from 0 to 64 and flip 0 or 1, found %d and %d",
                       augment->crop_padding, augment->flip);
    }
    memory_source_t *m = dp_alloc_zeroed(1, sizeof *m, "in-memory batch source");
    if (!m) {
        if (take) dp_dataset_free(ds);
        return DP_ERR_NOMEM;
    }
    if (take) {
        m->own = *ds;
        memset(ds, 0, sizeof *ds);
        m->ds = &m->own;
    } else {
        m->ds = ds;
    }
    if (augment) m->augment = *augment;
    const dp_dataset_t *d = m->ds;
    dp_source_info_t info = {.count = d->count, .channels = d->channels, .height = d->height, .width = d->width,
                             .num_classes = d->num_classes, .class_names = (const char *const *)d->class_names};
    dp_dataset_normalization(d, &info.normalize);
    return dp_batch_source_new(&memory_ops, m, &info, out);
}
