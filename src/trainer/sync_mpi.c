/* sync_mpi.c - several processes (MPI ranks), the hierarchical allreduce:
 * sum over the local replicas, sum across ranks, copy back to the local
 * replicas and update; without and with overlap.
 *
 * DESIGN. Every MPI call is made by comm_mpi.c's communication thread; the
 * sum across ranks goes bucket by bucket (the same DP_BUCKET_FLOATS ranges
 * with and without overlap, because MPI's order of summation may depend on
 * the message size: Open MPI's ring with 3 ranks sums a bucket in another
 * order than the whole buffer). On a backend whose memory is host memory
 * (host_memory) MPI reads and writes replica 0's gradients directly; on any
 * other (a GPU) each bucket is downloaded into the trainer's host staging
 * buffer (t->host_stage, the same offsets), summed there by MPI and
 * uploaded back into replica 0 before it is copied to the other replicas
 * (dp_trainer_stage_down / dp_trainer_stage_up): the same floats summed in
 * the same order, so the same bits.
 *   no overlap (dp_sync_mpi; also with --allreduce naive, which only chooses
 *            the single-process algorithm): phase 2 is the local chunked
 *            reduce into replica 0 (one task per device, disjoint chunks;
 *            no copy back: phase 3 copies the global sum); the caller
 *            queues the buckets of replica 0's gradients and waits for them;
 *            phase 3: device d copies chunk d of the global sum to the other
 *            replicas and updates chunk d of every replica.
 *   overlap (dp_sync_mpi_overlap): the device that brings a bucket's count
 *            to k (buckets.c's counter) sums it over the replicas into
 *            replica 0 and marks it summed; under publish_lock, the summed
 *            buckets are handed to the communication thread strictly in the
 *            order nb-1, ..., 0 (every rank must queue the same collectives
 *            in the same order, and two devices may finish buckets in either
 *            order). After each bucket's MPI_Allreduce the communication
 *            thread (uploads it, when staged, and) copies it to the other
 *            replicas and updates it in every replica
 *            (bucket_summed_across_ranks), while the devices are
 *            still in backward on earlier layers. The caller waits for all
 *            of it (drain: dp_world_drain) after the devices: that wait is
 *            the exposed sync time. release drains too, so no bucket
 *            callback runs once the trainer is gone.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buckets.h"
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

/* --- No overlap ----------------------------------------------------------- */

/* Device d sums chunk d of the replicas' gradients into replica 0. Nothing
 * is copied back yet: the other replicas receive the global sum after MPI's
 * (dp_sync_broadcast_update_chunks), once. */
static dp_status_t reduce_chunk_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    size_t start, count;
    dp_chunk_range(t->num_trainable, t->num_devices, r->index, &start, &count);
    dp_sync_reduce_to_first(t, start, count);
    return DP_OK;
}

static dp_status_t mpi_end_step(dp_trainer_t *t) {
    if (t->num_devices > 1) DP_TRY(dp_trainer_run_on_all(t, reduce_chunk_task));
    /* bucket by bucket, as with overlap: MPI's order of summation may
     * depend on the message size (Open MPI's ring with 3 ranks does) */
    float *sum = t->grad_buffers[0];
    for (long b = t->num_buckets - 1; b >= 0; b--) {
        size_t start, count;
        dp_bucket_range(t, b, &start, &count);
        dp_world_sum_floats_async(dp_trainer_stage_down(t, sum, start, count), count, NULL, NULL);
    }
    DP_TRY(dp_world_drain());
    dp_trainer_stage_up(t, sum, 0, t->num_trainable);
    DP_TRY(dp_clip_gradients(t, t->backend, sum)); /* replica 0 holds the global sum */
    DP_TRY(dp_sync_broadcast_update_chunks(t));
    return dp_trainer_sync_buffers(t);
}

const dp_sync_strategy_t dp_sync_mpi = {
    .name = "mpi",
    .begin_step = dp_trainer_begin_optimizer_steps,
    .end_step = mpi_end_step,
};

/* --- Overlap -------------------------------------------------------------- */

/* A bucket handed to the communication thread: what its callback needs. */
struct bucket_job {
    dp_trainer_t *trainer;
    long bucket;
};

typedef struct {
    dp_bucket_counter_t counter;
    pthread_mutex_t publish_lock;
    int publish_ready;
    unsigned char *bucket_summed; /* (num_buckets) locally summed this step; under publish_lock */
    float **bucket_sums;          /* (num_buckets) where each bucket's local sum is for MPI; under publish_lock */
    long next_publish;            /* the bucket to hand over next (they go in order nb-1, ..., 0) */
    struct bucket_job *bucket_jobs; /* (num_buckets) the completion contexts */
} overlap_state_t;

/* dp_world_done_fn of a bucket's sum across ranks (communication thread). */
static void bucket_summed_across_ranks(void *ctx) {
    struct bucket_job *job = ctx;
    size_t start, count;
    dp_bucket_range(job->trainer, job->bucket, &start, &count);
    dp_trainer_stage_up(job->trainer, job->trainer->grad_buffers[0], start, count);
    if (!dp_clipping(job->trainer)) dp_sync_broadcast_update(job->trainer, start, count); /* else: end_step */
}

/* Bucket b is complete on every device: sum it locally, then hand every
 * bucket that is ready, in the order nb-1, ..., 0 (the same on every rank,
 * whichever device finished first), to the communication thread. */
static void publish_bucket(dp_trainer_t *t, long b) {
    overlap_state_t *s = t->sync_state;
    size_t start, count;
    dp_bucket_range(t, b, &start, &count);
    dp_sync_reduce_to_first(t, start, count);
    float *sum = dp_trainer_stage_down(t, t->grad_buffers[0], start, count); /* (count) what MPI sums */
    pthread_mutex_lock(&s->publish_lock);
    s->bucket_sums[b] = sum;
    s->bucket_summed[b] = 1;
    while (s->next_publish >= 0 && s->bucket_summed[s->next_publish]) {
        long p = s->next_publish--;
        dp_bucket_range(t, p, &start, &count);
        dp_world_sum_floats_async(s->bucket_sums[p], count, bucket_summed_across_ranks, &s->bucket_jobs[p]);
    }
    pthread_mutex_unlock(&s->publish_lock);
}

static void mpi_overlap_release(dp_trainer_t *t) {
    overlap_state_t *s = t->sync_state;
    if (!s) return;
    if (s->publish_ready) { /* no bucket callback may still be running */
        dp_world_drain();
        pthread_mutex_destroy(&s->publish_lock);
    }
    dp_bucket_counter_release(&s->counter);
    free(s->bucket_summed);
    free(s->bucket_sums);
    free(s->bucket_jobs);
    free(s);
    t->sync_state = NULL;
}

static dp_status_t mpi_overlap_init(dp_trainer_t *t) {
    overlap_state_t *s = dp_alloc_zeroed(1, sizeof *s, "bucket state");
    if (!s) return DP_ERR_NOMEM;
    t->sync_state = s;
    DP_TRY(dp_bucket_counter_init(&s->counter, t, publish_bucket));
    s->bucket_summed = dp_alloc_zeroed((size_t)t->num_buckets + 1, 1, "bucket flags");
    s->bucket_jobs = dp_alloc_zeroed((size_t)t->num_buckets + 1, sizeof *s->bucket_jobs, "bucket jobs");
    s->bucket_sums = dp_alloc_zeroed((size_t)t->num_buckets + 1, sizeof *s->bucket_sums, "bucket sums");
    if (!s->bucket_summed || !s->bucket_jobs || !s->bucket_sums || pthread_mutex_init(&s->publish_lock, NULL) != 0)
        return DP_ERR_NOMEM;
    s->publish_ready = 1;
    for (long b = 0; b < t->num_buckets; b++) s->bucket_jobs[b] = (struct bucket_job){t, b};
    return DP_OK;
}

static void mpi_overlap_begin_step(dp_trainer_t *t) {
    overlap_state_t *s = t->sync_state;
    dp_trainer_begin_optimizer_steps(t);
    dp_bucket_counter_begin_step(&s->counter, t);
    memset(s->bucket_summed, 0, (size_t)t->num_buckets);
    s->next_publish = t->num_buckets - 1;
}

static void mpi_overlap_range_final(dp_replica_t *r) {
    overlap_state_t *s = r->trainer->sync_state;
    dp_bucket_counter_count(&s->counter, r);
}

static dp_status_t mpi_overlap_drain(dp_trainer_t *t) { return dp_world_drain(); }

/* With clipping the buckets were summed but not updated: the norm of the
 * whole sum first (clip_grad.c). */
static dp_status_t mpi_overlap_end_step(dp_trainer_t *t) {
    if (dp_clipping(t)) {
        DP_TRY(dp_clip_gradients(t, t->backend, t->grad_buffers[0]));
        DP_TRY(dp_sync_broadcast_update_chunks(t));
    }
    return dp_trainer_sync_buffers(t);
}

const dp_sync_strategy_t dp_sync_mpi_overlap = {
    .name = "mpi-overlap",
    .init = mpi_overlap_init,
    .release = mpi_overlap_release,
    .begin_step = mpi_overlap_begin_step,
    .range_final = mpi_overlap_range_final,
    .drain = mpi_overlap_drain,
    .end_step = mpi_overlap_end_step,
};
