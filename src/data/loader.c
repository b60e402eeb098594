/* loader.c - the batch loader: hands out example indices, a seeded
 * Fisher-Yates permutation per epoch, in batches of B with the last short
 * batch kept. With repeats R > 1 (repeated augmentation, torchvision's
 * RASampler) the epoch's order is the permutation's first ceil(count / R)
 * samples, each R times in a row, cut to count positions: an epoch has as
 * many positions and steps as without, over fewer distinct samples.
 *
 * Epoch e's order is drawn from a generator seeded by
 *     seed XOR ((e + 1) * 0x9e3779b97f4a7c15)
 * (an odd constant, so for a given seed every epoch gets its own stream;
 * dp_rng_seed then mixes the value through splitmix64). The shuffle always
 * starts from the identity, so an epoch's order depends only on
 * (seed, epoch, count) and can be reproduced without replaying earlier
 * epochs, e.g. when resuming from a checkpoint.
 */
#include "dptrain/data.h"

#include <stdlib.h>

struct dp_loader {
    int count;      /* examples per epoch */
    int batch_size; /* B */
    int shuffle;    /* 0: identity order every epoch */
    int repeats;    /* R: each sample of the permutation R times in a row (1: none) */
    uint64_t seed;
    int position;   /* next index into order */
    int *order;     /* (count) the epoch's permutation of 0..count-1 */
};

static uint64_t epoch_seed(uint64_t seed, int epoch) {
    return seed ^ ((uint64_t)(uint32_t)epoch + 1) * 0x9e3779b97f4a7c15ULL;
}

dp_status_t dp_loader_new(int count, int batch_size, int shuffle, uint64_t seed,
                          dp_loader_t **out) {
    *out = NULL;
    if (count < 1) return dp_fail(DP_ERR_ARG, "the dataset is empty (%d examples)", count);
    if (batch_size < 1)
        return dp_fail(DP_ERR_ARG, "batch size %d must be at least 1", batch_size);
    if (batch_size > count)
        return dp_fail(DP_ERR_ARG, "batch size %d is larger than the dataset (%d examples)",
                       batch_size, count);
    dp_loader_t *loader = dp_alloc_zeroed(1, sizeof *loader, "batch loader");
    if (!loader) return DP_ERR_NOMEM;
    loader->order = dp_alloc((size_t)count * sizeof *loader->order, "batch loader order");
    if (!loader->order) {
        free(loader);
        return DP_ERR_NOMEM;
    }
    loader->count = count;
    loader->batch_size = batch_size;
    loader->shuffle = shuffle;
    loader->repeats = 1;
    loader->seed = seed;
    dp_loader_start_epoch(loader, 0);
    *out = loader;
    return DP_OK;
}

void dp_loader_free(dp_loader_t *loader) {
    if (!loader) return;
    free(loader->order);
    free(loader);
}

void dp_loader_start_epoch(dp_loader_t *loader, int epoch) {
    int *order = loader->order;
    for (int i = 0; i < loader->count; i++) order[i] = i;
    if (loader->shuffle) {
        dp_rng_t rng;
        dp_rng_seed(&rng, epoch_seed(loader->seed, epoch));
        for (int i = loader->count - 1; i > 0; i--) {
            int j = (int)dp_rng_below(&rng, (uint64_t)i + 1);
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    /* order[i] = permutation[i / R], from the end: order[i / R] is still the permutation's when read */
    for (int i = loader->count - 1; loader->repeats > 1 && i > 0; i--) order[i] = order[i / loader->repeats];
    loader->position = 0;
}

dp_status_t dp_loader_set_repeats(dp_loader_t *loader, int repeats) {
    if (repeats < 1 || repeats > loader->count)
        return dp_fail(DP_ERR_ARG, "loader: %d repeats of each sample (1 to the %d examples)", repeats, loader->count);
    loader->repeats = repeats;
    dp_loader_start_epoch(loader, 0);
    return DP_OK;
}

int dp_loader_next(dp_loader_t *loader, const int **indices) {
    int left = loader->count - loader->position;
    int n = left < loader->batch_size ? left : loader->batch_size;
    *indices = loader->order + loader->position;
    loader->position += n;
    return n;
}

int dp_loader_num_batches(const dp_loader_t *loader) {
    return loader->count / loader->batch_size + (loader->count % loader->batch_size != 0);
}

int dp_loader_step(const dp_loader_t *loader) {
    return loader->position / loader->batch_size + (loader->position % loader->batch_size != 0);
}

dp_status_t dp_loader_seek(dp_loader_t *loader, int step) {
    int batches = dp_loader_num_batches(loader);
    if (step < 0 || step > batches)
        return dp_fail(DP_ERR_ARG, "loader: step %d is outside the epoch's 0..%d batches", step, batches);
    long long position = (long long)step * loader->batch_size;
    loader->position = position > loader->count ? loader->count : (int)position;
    return DP_OK;
}
