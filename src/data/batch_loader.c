/* batch_loader.c - the batch loader (batch_loader.h): a source's batches in
 * the epoch's order, filled ahead of the caller by loader threads.
 *
 * DESIGN. One mutex guards the queue: `depth + 1` slots, each free (step
 * -1) or holding batch `step` of the current epoch, cut into chunks of
 * samples. A loader thread takes the next chunk of the lowest step that has
 * one left; with none, it gives a free slot to the next step not scheduled
 * yet (steps are scheduled in order, at most depth + 1 ahead of the cursor
 * counting the one handed out), or waits on `work`. It fills its chunk
 * without the lock (the source's fill may run on many threads at once:
 * disjoint rows of the slot's buffers), then counts it done and signals
 * `ready`. next() frees the slot it handed out before (signalling `work`),
 * then waits on `ready` for the slot of the cursor's step to be complete,
 * and hands it out: the caller owns it until its next call. seek() stops
 * new chunks from being taken, waits until none is being filled (`busy`
 * 0), empties the slots and moves the cursor. free() stops the threads the
 * same way, then joins them. Without threads, next() fills the batch on
 * the caller's thread into slot 0.
 */
#include "dptrain/batch_loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int step;                 /* the batch it holds, -1: free */
    int n, chunk, chunks;     /* samples, positions per chunk, chunks */
    int *positions;           /* (B) the positions filled, ascending (this rank's share) */
    int filled;               /* how many */
    int taken, done;          /* chunks taken by a thread, chunks filled */
    int *samples;             /* (B) the batch's sample numbers */
    uint8_t *pixels;          /* (B, C, H, W) */
    int32_t *labels;          /* (B) */
    dp_status_t status;       /* the first failed chunk's */
    char error[1024];
    dp_batch_t batch;
} slot_t;

struct dp_batch_loader {
    dp_batch_source_t *src;
    dp_batch_loader_config_t config;
    size_t sample_bytes;
    int batches;                /* per epoch */
    dp_loader_t *order;         /* the epoch's order (its position moved only under the lock) */
    int epoch, cursor;          /* the batch next() hands out */
    int scheduled;              /* the next step to give a slot */
    int handed;                 /* the slot the caller holds, -1: none */
    int num_slots;
    slot_t *slots;
    int num_threads;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t work, ready;
    int paused, stop, busy;     /* no chunk taken while paused or stopping; chunks being filled */
};

/* Fills positions[first .. first + count) of the slot, a run of
 * consecutive positions at a time. */
static void fill_chunk(dp_batch_loader_t *l, slot_t *s, int first, int count, dp_status_t *status, char *error,
                       size_t error_size) {
    *status = DP_OK;
    for (int i = first; i < first + count && *status == DP_OK;) {
        int p = s->positions[i], run = 1;
        while (i + run < first + count && s->positions[i + run] == p + run) run++;
        const dp_fill_keys_t keys = {.seed = l->config.seed, .epoch = l->epoch,
                                     .first_position = (int64_t)s->step * l->config.batch_size + p,
                                     .training = l->config.training, .repeats = l->config.repeats};
        *status = dp_batch_source_fill(l->src, s->samples + p, run, &keys, s->pixels + (size_t)p * l->sample_bytes,
                                       s->labels + p);
        i += run;
    }
    if (*status != DP_OK) snprintf(error, error_size, "%s", dp_error_message());
}

/* positions = this process's share of a batch of n (all: 0..n-1). */
static int share_positions(const dp_batch_loader_t *l, int n, int *positions) {
    if (!l->config.share) {
        for (int i = 0; i < n; i++) positions[i] = i;
        return n;
    }
    int max = 16, got, *first = NULL, *count = NULL;
    for (;;) {
        free(first);
        free(count);
        first = malloc(sizeof *first * (size_t)max);
        count = malloc(sizeof *count * (size_t)max);
        DP_ASSERT(first && count);
        got = l->config.share(l->config.share_ctx, n, first, count, max);
        if (got <= max) break;
        max = got;
    }
    int filled = 0;
    for (int r = 0; r < got; r++)
        for (int i = 0; i < count[r]; i++) {
            DP_ASSERT(first[r] + i < n && (filled == 0 || first[r] + i > positions[filled - 1]));
            positions[filled++] = first[r] + i;
        }
    free(first);
    free(count);
    return filled;
}

/* Under the lock: slot s takes the next step (its samples from the order). */
static void schedule(dp_batch_loader_t *l, slot_t *s) {
    const int *indices;
    DP_ASSERT(dp_loader_seek(l->order, l->scheduled) == DP_OK);
    int n = dp_loader_next(l->order, &indices);
    memcpy(s->samples, indices, sizeof(int) * (size_t)n);
    int parts = l->num_threads > 0 ? 2 * l->num_threads : 1;
    s->step = l->scheduled++;
    s->n = n;
    s->filled = share_positions(l, n, s->positions);
    s->chunk = s->filled > 0 ? (s->filled + parts - 1) / parts : 1;
    s->chunks = (s->filled + s->chunk - 1) / s->chunk;
    s->taken = s->done = 0;
    s->status = DP_OK;
    s->error[0] = '\0';
}

/* Under the lock: the slot with a chunk left of the lowest step, giving a
 * free slot a step first when one can be scheduled; NULL: nothing to do. */
static slot_t *next_work(dp_batch_loader_t *l) {
    slot_t *best = NULL, *free_slot = NULL;
    for (int i = 0; i < l->num_slots; i++) {
        slot_t *s = &l->slots[i];
        if (s->step < 0) {
            if (!free_slot && i != l->handed) free_slot = s;
        } else if (s->taken < s->chunks && (!best || s->step < best->step)) {
            best = s;
        }
    }
    if (best) return best;
    if (free_slot && l->scheduled < l->batches) {
        schedule(l, free_slot);
        return free_slot;
    }
    return NULL;
}

static void *loader_thread(void *arg) {
    dp_batch_loader_t *l = arg;
    char error[1024];
    pthread_mutex_lock(&l->lock);
    while (!l->stop) {
        slot_t *s = l->paused ? NULL : next_work(l);
        if (!s) {
            pthread_cond_wait(&l->work, &l->lock);
            continue;
        }
        int c = s->taken++, first = c * s->chunk, count = s->filled - first < s->chunk ? s->filled - first : s->chunk;
        l->busy++;
        pthread_mutex_unlock(&l->lock);
        dp_status_t status;
        fill_chunk(l, s, first, count, &status, error, sizeof error);
        pthread_mutex_lock(&l->lock);
        l->busy--;
        if (status != DP_OK && s->status == DP_OK) {
            s->status = status;
            snprintf(s->error, sizeof s->error, "%s", error);
        }
        s->done++;
        pthread_cond_broadcast(&l->ready);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* Under the lock: no chunk taken from now on, none being filled. */
static void quiesce(dp_batch_loader_t *l) {
    l->paused = 1;
    while (l->busy > 0) pthread_cond_wait(&l->ready, &l->lock);
}

static void release_slots(dp_batch_loader_t *l) {
    for (int i = 0; l->slots && i < l->num_slots; i++) {
        free(l->slots[i].samples);
        free(l->slots[i].positions);
        free(l->slots[i].pixels);
        free(l->slots[i].labels);
    }
    free(l->slots);
}

void dp_batch_loader_free(dp_batch_loader_t *l) {
    if (!l) return;
    if (l->threads) {
        pthread_mutex_lock(&l->lock);
        quiesce(l);
        l->stop = 1;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->lock);
        for (int i = 0; i < l->num_threads; i++) pthread_join(l->threads[i], NULL);
        free(l->threads);
    }
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->ready);
    release_slots(l);
    dp_loader_free(l->order);
    free(l);
}

static dp_status_t check_config(const dp_batch_source_t *src, const dp_batch_loader_config_t *c) {
    const int count = dp_batch_source_info(src)->count;
    if (c->batch_size < 1 || c->batch_size > count)
        return dp_fail(DP_ERR_ARG, "batch loader: batch size %d must be from 1 to the data's %d samples",
                       c->batch_size, count);
    if (c->threads < 0 || c->threads > 256)
        return dp_fail(DP_ERR_ARG, "batch loader: %d threads (0 to 256)", c->threads);
    if (c->depth < 0 || c->depth > 64) return dp_fail(DP_ERR_ARG, "batch loader: depth %d (0 to 64)", c->depth);
    return DP_OK;
}

dp_status_t dp_batch_loader_new(dp_batch_source_t *src, const dp_batch_loader_config_t *config,
                                dp_batch_loader_t **out) {
    *out = NULL;
    DP_TRY(check_config(src, config));
    dp_batch_loader_t *l = dp_alloc_zeroed(1, sizeof *l, "batch loader");
    if (!l) return DP_ERR_NOMEM;
    l->src = src;
    l->config = *config;
    l->sample_bytes = dp_batch_source_sample_bytes(src);
    l->handed = -1;
    l->num_threads = config->threads;
    l->num_slots = config->threads > 0 ? (config->depth > 0 ? config->depth : 2) + 1 : 1;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    const dp_source_info_t *info = dp_batch_source_info(src);
    dp_status_t status = dp_loader_new(info->count, config->batch_size, config->shuffle, config->seed, &l->order);
    if (status == DP_OK && config->repeats > 1) status = dp_loader_set_repeats(l->order, config->repeats);
    if (status != DP_OK) goto fail;
    status = DP_ERR_NOMEM;
    l->batches = dp_loader_num_batches(l->order);
    if (!(l->slots = dp_alloc_zeroed((size_t)l->num_slots, sizeof *l->slots, "batch loader slots"))) goto fail;
    const size_t B = (size_t)config->batch_size;
    for (int i = 0; i < l->num_slots; i++) {
        slot_t *s = &l->slots[i];
        s->step = -1;
        s->samples = dp_alloc(sizeof(int) * B, "a batch's sample numbers");
        s->positions = dp_alloc(sizeof(int) * B, "a batch's positions");
        s->pixels = dp_alloc(B * l->sample_bytes, "a batch's pixels");
        s->labels = dp_alloc(sizeof(int32_t) * B, "a batch's labels");
        if (!s->samples || !s->positions || !s->pixels || !s->labels) goto fail;
        s->batch = (dp_batch_t){.channels = info->channels, .height = info->height, .width = info->width,
                                .pixels = s->pixels, .labels = s->labels, .normalize = &info->normalize};
    }
    if (l->num_threads > 0) {
        if (!(l->threads = dp_alloc_zeroed((size_t)l->num_threads, sizeof *l->threads, "loader threads"))) goto fail;
        for (int i = 0; i < l->num_threads; i++)
            if (pthread_create(&l->threads[i], NULL, loader_thread, l) != 0) {
                l->num_threads = i; /* free() joins those made */
                status = dp_fail(DP_ERR_NOMEM, "batch loader: cannot start loader thread %d", i + 1);
                goto fail;
            }
    }
    *out = l;
    return DP_OK;
fail:
    dp_batch_loader_free(l);
    return status;
}

int dp_batch_loader_num_batches(const dp_batch_loader_t *l) { return l->batches; }
int dp_batch_loader_epoch(const dp_batch_loader_t *l) { return l->epoch; }
int dp_batch_loader_step(const dp_batch_loader_t *l) { return l->cursor; }

dp_status_t dp_batch_loader_seek(dp_batch_loader_t *l, int epoch, int step) {
    if (epoch < 0 || step < 0 || step > l->batches)
        return dp_fail(DP_ERR_ARG, "batch loader: epoch %d, step %d is outside an epoch's 0..%d batches", epoch, step,
                       l->batches);
    pthread_mutex_lock(&l->lock);
    quiesce(l);
    for (int i = 0; i < l->num_slots; i++) l->slots[i].step = -1;
    l->handed = -1;
    if (epoch != l->epoch) dp_loader_start_epoch(l->order, epoch);
    l->epoch = epoch;
    l->cursor = l->scheduled = step;
    l->paused = 0;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->lock);
    return DP_OK;
}

dp_status_t dp_batch_loader_next(dp_batch_loader_t *l, const dp_batch_t **batch) {
    *batch = NULL;
    pthread_mutex_lock(&l->lock);
    if (l->handed >= 0) { /* the caller is done with it */
        l->slots[l->handed].step = -1;
        l->handed = -1;
        pthread_cond_broadcast(&l->work);
    }
    if (l->cursor >= l->batches) {
        pthread_mutex_unlock(&l->lock);
        return DP_OK;
    }
    slot_t *s = NULL;
    if (l->num_threads == 0) { /* filled here, now */
        s = &l->slots[0];
        l->scheduled = l->cursor;
        schedule(l, s);
        pthread_mutex_unlock(&l->lock);
        fill_chunk(l, s, 0, s->filled, &s->status, s->error, sizeof s->error);
        pthread_mutex_lock(&l->lock);
        s->taken = s->done = s->chunks;
    } else {
        for (;;) {
            for (int i = 0; i < l->num_slots && !s; i++)
                if (l->slots[i].step == l->cursor && l->slots[i].done == l->slots[i].chunks) s = &l->slots[i];
            if (s) break;
            pthread_cond_wait(&l->ready, &l->lock);
        }
    }
    l->handed = (int)(s - l->slots);
    l->cursor++;
    dp_status_t status = s->status;
    pthread_mutex_unlock(&l->lock);
    if (status != DP_OK) return dp_fail(status, "%s", s->error);
    s->batch.n = s->n;
    *batch = &s->batch;
    return DP_OK;
}
