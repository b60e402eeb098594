/* batch_loader.h - a batch source run ahead of the trainer: the epoch's
 * order (data.h's dp_loader: a seeded shuffle per epoch, batches of B, the
 * last short batch kept), filled by a pool of loader threads into a bounded
 * queue of whole batches while the devices compute, and the cursor
 * (epoch, step) a checkpoint saves and a resume restores.
 *
 * Batch `step` of epoch `epoch` holds the samples order[step * B ...] and
 * is filled with keys (seed, epoch, first_position = step * B), so its
 * bytes are the same for any number of threads, any queue depth, and after
 * a seek: a pure function of the source, (seed, epoch, step) and B.
 * Memory is bounded by the queue: depth + 1 batch buffers (the one handed
 * out and those filled ahead), whatever the source's size.
 */
#ifndef DPTRAIN_BATCH_LOADER_H
#define DPTRAIN_BATCH_LOADER_H

#include "dptrain/batch_source.h"

typedef struct {
    int batch_size;  /* B, 1 <= B <= the source's count */
    int shuffle;     /* 0: the source's order every epoch (evaluation) */
    uint64_t seed;   /* the shuffle's and the fills' keys */
    int training;    /* the fills' dp_fill_keys_t.training */
    int repeats;     /* repeated augmentation: each sample of the shuffle this many times in a row (data.h
                        dp_loader_set_repeats; 0 or 1: none), told to the fills (dp_fill_keys_t.repeats) */
    int threads;     /* loader threads; 0: each batch is filled on the caller's thread by next() */
    int depth;       /* with threads: batches filled ahead of the one handed out (0: 2) */
    /* The positions of a batch of n this process reads (several ranks each
     * take their shard of a batch: parallel.h dp_trainer_batch_share):
     * writes up to max ranges [first[i], first[i] + count[i]) and returns
     * how many (more than max: call again with that many). Only they are
     * filled; the rest of the batch's buffers is left as it was. NULL: all. */
    int (*share)(void *ctx, int n, int *first, int *count, int max);
    void *share_ctx;
} dp_batch_loader_config_t;

typedef struct dp_batch_loader dp_batch_loader_t;

/* A loader over `src` (not owned: it must outlive the loader), at epoch 0,
 * step 0. Fails with one line on a bad configuration. */
dp_status_t dp_batch_loader_new(dp_batch_source_t *src, const dp_batch_loader_config_t *config,
                                dp_batch_loader_t **out);
/* Stops the threads (after the chunks they are filling) and frees. */
void dp_batch_loader_free(dp_batch_loader_t *loader);

/* Batches per epoch: ceil(count / B). */
int dp_batch_loader_num_batches(const dp_batch_loader_t *loader);

/* The cursor: the batch next() hands out next is batch `step` of `epoch`
 * (between epochs, step = num_batches). */
int dp_batch_loader_epoch(const dp_batch_loader_t *loader);
int dp_batch_loader_step(const dp_batch_loader_t *loader);

/* Moves the cursor to batch `step` (0 <= step <= num_batches) of `epoch`:
 * what was filled ahead is dropped; the threads start on the new cursor. */
dp_status_t dp_batch_loader_seek(dp_batch_loader_t *loader, int epoch, int step);

/* *batch = the batch at the cursor, which moves on by one; NULL at the
 * epoch's end (seek to go on). The batch stays valid until the next call
 * of next, seek or free. Fails (one line: the source's) when a fill of
 * that batch failed. */
dp_status_t dp_batch_loader_next(dp_batch_loader_t *loader, const dp_batch_t **batch);

#endif
