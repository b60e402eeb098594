/* sync_peer.c - devices on distinct GPUs sum their gradients with the
 * backend's peer collectives (NCCL; backend.h peer_*), in one process and
 * across ranks, with and without overlap; and the choice between that and
 * the host paths (replica_collectives.c, sync_mpi.c).
 *
 * The choice (dp_sync_peer_choose, at dp_trainer_new): NCCL when every
 * device of this process is on a table of its own with peer collectives
 * and a GPU of its own (distinct peer_ids), with the chunked allreduce
 * (with or without --overlap; --allreduce naive and --sync ps keep their
 * host paths), and, with several ranks, when that holds on every rank and
 * no two devices of the whole world share a GPU (NCCL refuses two members
 * on one GPU: two ranks sharing one GPU sum through host memory and MPI).
 * Each rank's facts are gathered through MPI (dp_world_allgather_bytes),
 * so every rank decides alike. At least two members in all, or one with
 * DPTRAIN_NCCL=1 (a one-GPU machine runs NCCL with a group of one);
 * DPTRAIN_NCCL=0: never. Rank 0 makes the group's unique id and MPI
 * broadcasts it; member numbers go in rank order, then device order.
 *
 * A step: every replica's gradient range is summed in place in every
 * replica (no reduce-to-first, no broadcast), then each replica updates
 * its own range, as the host paths do; the buffers (batch norm's running
 * statistics) go from the first replica of rank 0 to every other with
 * NCCL's broadcast. Across ranks the step makes no MPI call (one group over
 * every rank's GPUs; step_graph.c's one byte per rank aside), and no host
 * synchronisation anywhere (but gradient clipping's: clip_grad.c reads
 * the norm of replica 0's sum, then scales every replica's). The sums go bucket by bucket
 * (DP_BUCKET_FLOATS ranges, in the order nb-1, ..., 0) with and without
 * overlap, so that both give the same bits also where NCCL's order of
 * summation depends on the message size.
 *
 * DESIGN (overlap). The bucket counter (buckets.c) calls
 * bucket_complete on the device thread that counts a bucket last. NCCL
 * needs every member to issue the same collectives in the same order, and
 * two device threads may complete two buckets in either order: under
 * `lock` the bucket is marked, and the buckets that are ready are summed
 * strictly in the order nb-1, ..., 0 (bucket b only after b + 1), by
 * whichever thread finds them ready. The backend queues each sum on NCCL's
 * streams and returns (a GPU's host does not wait); the rest of the
 * backward pass runs beside it on the GPUs. end_step (after phase 1: every
 * sum queued) joins the sums (peer_join: the GPUs' streams wait for them)
 * and queues each replica's update over the whole range, as without
 * overlap. A failed sum is kept (first one, under lock) and end_step
 * reports it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "buckets.h"
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

#define PEER_MAX_LOCAL 16

/* Why a rank cannot use NCCL (CAN: it can). */
enum { CAN, NO_PEER, NO_NCCL, MIXED, SHARED_TABLE, SAME_GPU, TOO_MANY, NO_ID, PS, NAIVE };
static const char *const reasons[] = {
    [NO_PEER] = "devices without NCCL",
    [NO_NCCL] = "this CUDA module was built without NCCL",
    [MIXED] = "devices of several backends",
    [SHARED_TABLE] = "devices sharing a GPU",
    [SAME_GPU] = "devices sharing a GPU",
    [TOO_MANY] = "more than 16 devices in a process",
    [NO_ID] = "a GPU's identity could not be read",
    [PS] = "--sync ps",
    [NAIVE] = "--allreduce naive",
};

/* What a rank tells the others (the same bytes on every machine: the ranks
 * run one build). */
typedef struct {
    int32_t mode;   /* DPTRAIN_NCCL: 0 off, 1 on (also for one member), 2 unset */
    int32_t reason; /* CAN or why not */
    int32_t k;      /* its devices */
    unsigned char ids[PEER_MAX_LOCAL][16];
} peer_facts_t;

static int32_t local_reason(dp_trainer_t *t, peer_facts_t *f) {
    int k = t->num_devices;
    for (int d = 0; d < k; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (!be->peer_group_new || !be->peer_allreduce || !be->peer_broadcast || !be->peer_join || !be->peer_id)
            return strcmp(be->name, "cuda") == 0 ? NO_NCCL : NO_PEER;
        if (be->peer_group_new != t->replicas[0].backend->peer_group_new) return MIXED;
        for (int e = 0; e < d; e++)
            if (t->replicas[e].backend == be) return SHARED_TABLE;
    }
    if (t->config.sync == DP_SYNC_PS) return PS;
    if (t->config.allreduce == DP_ALLREDUCE_NAIVE) return NAIVE;
    if (k > PEER_MAX_LOCAL) return TOO_MANY;
    for (int d = 0; d < k; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (be->peer_id(be->ctx, f->ids[d]) != DP_OK) return NO_ID;
        for (int e = 0; e < d; e++)
            if (memcmp(f->ids[e], f->ids[d], 16) == 0) return SAME_GPU;
    }
    return CAN;
}

dp_status_t dp_sync_peer_choose(dp_trainer_t *t) {
    t->peer_group = NULL;
    t->allreduce[0] = 0;
    const char *env = getenv("DPTRAIN_NCCL");
    peer_facts_t mine;
    memset(&mine, 0, sizeof mine);
    mine.mode = 2;
    if (env && *env) {
        if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
            return dp_fail(DP_ERR_ARG, "DPTRAIN_NCCL: expected 0 (never NCCL) or 1 (NCCL also for one GPU), found '%s'",
                           env);
        mine.mode = env[0] - '0';
    }
    mine.k = t->num_devices;
    mine.reason = local_reason(t, &mine);
    int ranks = t->ranks, rank = t->config.world.rank;
    peer_facts_t *all = dp_alloc_zeroed((size_t)ranks, sizeof *all, "the ranks' GPUs");
    if (!all) return DP_ERR_NOMEM;
    dp_status_t status = ranks > 1 ? dp_world_allgather_bytes(&mine, all, sizeof mine) : DP_OK;
    if (ranks == 1) all[0] = mine;
    if (status != DP_OK) {
        free(all);
        return status;
    }
    /* the same decision on every rank, from the same facts */
    int members = 0, first = 0, silent = 1;
    const char *why = NULL;
    int why_rank = -1;
    for (int r = 0; r < ranks; r++) {
        silent &= all[r].reason == NO_PEER; /* CPU devices everywhere: nothing to say */
        if (r < rank) first += all[r].k;
        members += all[r].k;
        if (!why && all[r].reason != CAN) why = reasons[all[r].reason], why_rank = r;
    }
    if (!why)
        for (int r = 0; r < ranks && !why; r++)
            for (int s = 0; s <= r && !why; s++)
                for (int d = 0; d < all[r].k && !why; d++)
                    for (int e = 0; e < (s == r ? d : all[s].k) && !why; e++)
                        if (memcmp(all[r].ids[d], all[s].ids[e], 16) == 0) why = "ranks sharing a GPU";
    int off = 0;
    for (int r = 0; r < ranks; r++) off |= all[r].mode == 0;
    if (!why && off) why = "DPTRAIN_NCCL=0";
    if (!why && members == 1 && all[0].mode != 1) why = "one GPU; DPTRAIN_NCCL=1 uses NCCL for it";
    free(all);
    if (silent) return DP_OK;
    if (why) {
        if (why_rank >= 0 && ranks > 1)
            snprintf(t->allreduce, sizeof t->allreduce, "host (rank %d: %s)", why_rank, why);
        else
            snprintf(t->allreduce, sizeof t->allreduce, "host (%s)", why);
        return DP_OK;
    }
    /* NCCL: rank 0's unique id (with a flag: a failure there fails every rank) */
    const dp_backend_t *be = t->replicas[0].backend;
    unsigned char id[1 + 128] = {0};
    if (rank == 0) id[0] = be->peer_unique_id(be->ctx, id + 1) == DP_OK;
    char made[512] = "";
    if (rank == 0 && !id[0]) snprintf(made, sizeof made, "%s", dp_error_message());
    if (ranks > 1) DP_TRY(dp_world_broadcast_bytes(id, sizeof id));
    if (!id[0]) return dp_fail(DP_ERR_ARG, "%s", rank == 0 ? made : "rank 0 could not make NCCL's unique id");
    const dp_backend_t *tables[PEER_MAX_LOCAL];
    for (int d = 0; d < t->num_devices; d++) tables[d] = t->replicas[d].backend;
    DP_TRY(be->peer_group_new(tables, t->num_devices, id + 1, members, first, dp_world_timeout(), &t->peer_group));
    snprintf(t->allreduce, sizeof t->allreduce, "nccl");
    return DP_OK;
}

void dp_sync_peer_release(dp_trainer_t *t) {
    if (!t->peer_group) return;
    t->replicas[0].backend->peer_group_free(t->peer_group);
    t->peer_group = NULL;
}

/* [start, start + count) of every replica's parameters updated. */
static void update_range(dp_trainer_t *t, size_t start, size_t count) {
    for (int e = 0; e < t->num_devices; e++) {
        dp_replica_t *r = &t->replicas[e];
        r->backend->optimizer_update(r->backend->ctx, r->optimizer, r->params, r->grads, start, count);
    }
}

/* Bucket b summed in every replica of every rank. */
static dp_status_t sum_bucket(dp_trainer_t *t, long b) {
    size_t start, count;
    dp_bucket_range(t, b, &start, &count);
    const dp_backend_t *be = t->replicas[0].backend;
    return be->peer_allreduce(t->peer_group, t->grad_buffers, start, count);
}

/* After the step's sums (queued): every replica's update, ordered after
 * them on its device (peer_join), one over the whole range per replica: the
 * optimizers are elementwise, so that is per-bucket updates' bits in one
 * launch per replica instead of one per bucket (LeNet: 8). */
static dp_status_t join_update(dp_trainer_t *t) {
    const dp_backend_t *be = t->replicas[0].backend;
    DP_TRY(be->peer_join(t->peer_group));
    if (dp_clipping(t)) { /* every replica holds the sum: replica 0's norm, every replica scaled */
        DP_TRY(dp_clip_gradients(t, be, t->grad_buffers[0]));
        for (int d = 1; d < t->num_devices; d++) dp_clip_scale(t, t->replicas[d].backend, t->grad_buffers[d]);
    }
    update_range(t, 0, t->num_trainable);
    return dp_trainer_sync_buffers(t); /* NCCL's broadcast of the buffers (replica.c) */
}

/* --- No overlap ------------------------------------------------------------- */

/* The sums bucket by bucket (overlap's sizes and order: its bits), then the update. */
static dp_status_t peer_end_step(dp_trainer_t *t) {
    for (long b = t->num_buckets - 1; b >= 0; b--) DP_TRY(sum_bucket(t, b));
    return join_update(t);
}

const dp_sync_strategy_t dp_sync_peer = {
    .name = "nccl",
    .begin_step = dp_trainer_begin_optimizer_steps,
    .end_step = peer_end_step,
};

/* --- Overlap ---------------------------------------------------------------- */

typedef struct {
    dp_bucket_counter_t counter;
    pthread_mutex_t lock;
    int lock_ready;
    unsigned char *complete; /* (num_buckets) counted by every device this step; under lock */
    long next;               /* the bucket to sum next (nb-1, ..., 0); under lock */
    dp_status_t failure;     /* the step's first failed sum; under lock */
    char message[512];
} peer_overlap_t;

/* Bucket b is final on every device of this process (device thread). */
static void bucket_complete(dp_trainer_t *t, long b) {
    peer_overlap_t *s = t->sync_state;
    pthread_mutex_lock(&s->lock);
    s->complete[b] = 1;
    while (s->next >= 0 && s->complete[s->next]) { /* in order: every rank sums the same buckets alike */
        dp_status_t status = sum_bucket(t, s->next--);
        if (status != DP_OK && s->failure == DP_OK) {
            s->failure = status;
            snprintf(s->message, sizeof s->message, "%s", dp_error_message());
        }
    }
    pthread_mutex_unlock(&s->lock);
}

static void peer_overlap_release(dp_trainer_t *t) {
    peer_overlap_t *s = t->sync_state;
    if (!s) return;
    if (s->lock_ready) pthread_mutex_destroy(&s->lock);
    dp_bucket_counter_release(&s->counter);
    free(s->complete);
    free(s);
    t->sync_state = NULL;
}

static dp_status_t peer_overlap_init(dp_trainer_t *t) {
    peer_overlap_t *s = dp_alloc_zeroed(1, sizeof *s, "bucket state");
    if (!s) return DP_ERR_NOMEM;
    t->sync_state = s;
    DP_TRY(dp_bucket_counter_init(&s->counter, t, bucket_complete));
    s->complete = dp_alloc_zeroed((size_t)t->num_buckets + 1, 1, "bucket flags");
    if (!s->complete || pthread_mutex_init(&s->lock, NULL) != 0) return DP_ERR_NOMEM;
    s->lock_ready = 1;
    return DP_OK;
}

static void peer_overlap_begin_step(dp_trainer_t *t) {
    peer_overlap_t *s = t->sync_state;
    dp_trainer_begin_optimizer_steps(t);
    dp_bucket_counter_begin_step(&s->counter, t);
    memset(s->complete, 0, (size_t)t->num_buckets);
    s->next = t->num_buckets - 1;
    s->failure = DP_OK;
}

static void peer_overlap_range_final(dp_replica_t *r) {
    peer_overlap_t *s = r->trainer->sync_state;
    dp_bucket_counter_count(&s->counter, r);
}

static dp_status_t peer_overlap_end_step(dp_trainer_t *t) {
    peer_overlap_t *s = t->sync_state; /* phase 1 is over: no device thread sums any more */
    if (s->failure != DP_OK) return dp_fail(s->failure, "%s", s->message);
    return join_update(t);
}

const dp_sync_strategy_t dp_sync_peer_overlap = {
    .name = "nccl-overlap",
    .init = peer_overlap_init,
    .release = peer_overlap_release,
    .begin_step = peer_overlap_begin_step,
    .range_final = peer_overlap_range_final,
    .end_step = peer_overlap_end_step,
};
