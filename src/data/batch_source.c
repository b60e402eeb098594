/* batch_source.c - the batch source interface (batch_source.h): a table of
 * functions over an implementation's state, with the shape, classes and
 * normalisation every source has. The implementations are files of their
 * own (memory_source.c, ...).
 */
#include "dptrain/batch_source.h"

#include <stdlib.h>
#include <string.h>

struct dp_batch_source {
    const dp_batch_source_ops_t *ops;
    void *self;
    dp_source_info_t info;
};

dp_status_t dp_batch_source_new(const dp_batch_source_ops_t *ops, void *self, const dp_source_info_t *info,
                                dp_batch_source_t **out) {
    *out = NULL;
    if (info->count < 1 || info->channels < 1 || info->height < 1 || info->width < 1 || info->num_classes < 1) {
        if (ops->free) ops->free(self);
        return dp_fail(DP_ERR_ARG, "batch source (%s): %d samples of %d x %d x %d, %d classes: every one must be "
                       ">= 1", ops->kind, info->count, info->channels, info->height, info->width, info->num_classes);
    }
    dp_batch_source_t *src = dp_alloc_zeroed(1, sizeof *src, "batch source");
    if (!src) {
        if (ops->free) ops->free(self);
        return DP_ERR_NOMEM;
    }
    src->ops = ops;
    src->self = self;
    src->info = *info;
    *out = src;
    return DP_OK;
}

void dp_batch_source_free(dp_batch_source_t *src) {
    if (!src) return;
    if (src->ops->free) src->ops->free(src->self);
    free(src);
}

void *dp_batch_source_impl(const dp_batch_source_t *src, const dp_batch_source_ops_t *ops) {
    return src && src->ops == ops ? src->self : NULL;
}

const dp_source_info_t *dp_batch_source_info(const dp_batch_source_t *src) { return &src->info; }

size_t dp_batch_source_sample_bytes(const dp_batch_source_t *src) {
    return (size_t)src->info.channels * (size_t)src->info.height * (size_t)src->info.width;
}

dp_status_t dp_batch_source_fill(dp_batch_source_t *src, const int *samples, int n, const dp_fill_keys_t *keys,
                                 uint8_t *pixels, int32_t *labels) {
    for (int i = 0; i < n; i++)
        DP_ASSERT(samples[i] >= 0 && samples[i] < src->info.count);
    return src->ops->fill(src->self, samples, n, keys, pixels, labels);
}

dp_status_t dp_batch_source_fill_batch(dp_batch_source_t *src, const int *samples, int n, const dp_fill_keys_t *keys,
                                       uint8_t *pixels, int32_t *labels, dp_batch_t *out) {
    *out = (dp_batch_t){.n = n, .channels = src->info.channels, .height = src->info.height,
                        .width = src->info.width, .pixels = pixels, .labels = labels,
                        .normalize = &src->info.normalize};
    return dp_batch_source_fill(src, samples, n, keys, pixels, labels);
}

dp_status_t dp_batch_source_set_normalize(dp_batch_source_t *src, int n, const float *mean, const float *std) {
    return dp_normalize_make(src->info.channels, n, mean, std, &src->info.normalize);
}
