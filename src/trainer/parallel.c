/* parallel.c - the data-parallel trainer.
 *
 * DESIGN. Replica d (params, grads, arena, tape, optimizer) belongs to
 * device d: only tasks on device d touch its arena and tape. The caller's
 * thread drives a step in two phases and waits for every device after each:
 *   phase 1, on every device: fill the shard's batch, forward, loss scaled by
 *            the global batch size, backward into the replica's grads;
 *   phase 2, ring:  device d sums chunk d of the gradients over all replicas,
 *            writes the sum back to every replica and updates chunk d of
 *            every replica's parameters (disjoint chunks, so no locks);
 *            naive: device 0 sums everything and copies it back (one task),
 *            then every device updates its own replica.
 * With one device both are just the update (nothing to sum).
 *   overlap (ring, config.overlap): no phase 2. The gradients are grouped
 *            in buckets of BUCKET_FLOATS of the flat buffer. Parameters lie
 *            in layer order and backward visits layers in reverse, so after
 *            each tape node the gradients that are final form a suffix of
 *            the buffer; the tape hook (backward_hook) advances each
 *            device's suffix and counts every bucket it covers on an atomic
 *            per-bucket counter. The device that brings a bucket's count to
 *            k sums that bucket over all replicas and updates it in every
 *            replica, while the other devices are still in backward on
 *            earlier layers (PyTorch DDP's and Horovod's overlap). A
 *            bucket's parameters and gradients are not touched again by any
 *            device in the step once all k have counted it. The sums and
 *            updates are those of phase 2 ring, element by element, so the
 *            results are the same bits.
 *   several ranks (MPI), hierarchical: local reduce, across ranks, local
 *            broadcast. Every MPI call is made by comm_mpi.c's communication
 *            thread; the sum across ranks goes bucket by bucket (the same
 *            BUCKET_FLOATS ranges with and without overlap, because MPI's
 *            order of summation may depend on the message size: Open MPI's
 *            ring with 3 ranks sums a bucket in another order than the
 *            whole buffer).
 *            overlap: the device that brings a bucket's count to k sums it
 *            over the replicas into replica 0 and marks it summed; under
 *            publish_lock, the summed buckets are handed to the
 *            communication thread strictly in the order nb-1, ..., 0 (every
 *            rank must queue the same collectives in the same order, and
 *            two devices may finish buckets in either order). After each
 *            bucket's MPI_Allreduce the communication thread copies it to
 *            the other replicas and updates it in every replica
 *            (bucket_summed_across_ranks), while the devices are still in
 *            backward on earlier layers. The caller waits for all of it
 *            (dp_world_drain) after the devices: that wait is the exposed
 *            sync time.
 *            no overlap: phase 2 is the local ring allreduce (also with
 *            --allreduce naive, which only chooses the single-process
 *            algorithm); the caller queues the buckets of replica 0's
 *            gradients and waits for them; phase 3: device d copies chunk d
 *            of the global sum to the other replicas and updates chunk d of
 *            every replica.
 *   parameter server (config.sync == DP_SYNC_PS): phase 2 on the server
 *            device: sum every replica's gradients (in device order, the
 *            allreduce's sum) into the server's buffer and, on rank 0, update
 *            the server's parameters (with several ranks the caller first
 *            MPI_Reduces the sums to rank 0, and afterwards MPI_Bcasts the
 *            parameters); phase 3 on every device: pull (copy) the server's
 *            parameters into its replica.
 * Only the first num_trainable floats of the flat buffers are gradients:
 * every sum and update above covers those. The rest are buffers (batch
 * norm's running statistics), which each replica updates in its forward;
 * after each step the caller copies replica 0's buffers to the others and,
 * with several ranks, first broadcasts rank 0's (PyTorch DDP's
 * broadcast_buffers), so the replicas stay identical.
 *   sync batch norm (config.sync_batch_norm): the forward tasks meet inside
 *            each batch norm op: stat_sum is called by every device with its
 *            partial sums; a barrier; device 0 adds the k arrays in device
 *            order and (several ranks) has them summed across ranks by the
 *            communication thread (dp_world_sum_doubles, a blocking call
 *            queued like any other; no bucket is queued during a forward);
 *            a barrier; the others copy
 *            device 0's result; a last barrier before device 0's array may
 *            change. A task that fails breaks the barrier so that no device
 *            waits for it; the caller re-arms it before each step.
 * The waits are the only other synchronisation: between phases every
 * replica's buffers are quiescent, and the caller reads results only after a
 * wait.
 */
#include "dptrain/parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dptrain/device.h"

typedef struct dp_trainer dp_trainer_t;

/* A bucket handed to the communication thread: what its callback needs. */
struct bucket_job {
    dp_trainer_t *trainer;
    long bucket;
};

/* Gradient bucket size for the overlapped allreduce: 64 KB. LeNet's 129,068
 * parameters make 8 buckets. */
#define BUCKET_FLOATS ((size_t)16384)

/* A reusable barrier for the k forward tasks of one step (sync batch norm)
 * that a failing task can break. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int count, waiting, broken;
    unsigned long generation;
} stat_barrier_t;

typedef struct {
    float *params; /* (num_params) this replica's copy of the parameters */
    float *grads;  /* (num_trainable) gradient of the global mean loss, this shard's part */
    dp_arena_t *arena;
    dp_tape_t *tape;
    dp_optimizer_t *optimizer;
    dp_device_t *device;
    /* the current task's arguments and results */
    dp_trainer_t *trainer;
    int index;
    const dp_dataset_t *ds;
    const int *indices;
    int count, denominator, eval_batch;
    double loss_sum;
    int correct;
    size_t ready_from; /* overlap: grads at offsets >= this are final this step */
    long next_bucket;  /* overlap: the highest bucket this device has not counted yet */
    int64_t example_offset; /* global index of the shard's first example in the minibatch */
    dp_stat_sync_t stat_sync; /* sync batch norm: stat_sum over this replica */
    double *stat_values;      /* sync batch norm: this device's sums, while they are combined */
    int stat_count;
} replica_t;

struct dp_trainer {
    dp_trainer_config_t config;
    const dp_model_t *model;
    size_t num_params;
    size_t num_trainable;    /* the first num_trainable floats have gradients */
    int num_devices;
    replica_t *replicas;
    dp_device_t **devices; /* (num_devices) */
    float **grad_buffers;  /* (num_devices) replicas[d].grads, for the allreduce */
    int overlap;             /* config.overlap with the ring allreduce */
    int ranks;               /* config.world.size, >= 1 */
    double sync_sec;         /* time in phases 2 and 3, all steps */
    double mpi_sec;          /* the part of it inside MPI_Allreduce */
    uint64_t step_count;     /* steps taken since initialisation (checkpoints restore it) */
    /* the parameter server (sync == DP_SYNC_PS) */
    dp_device_t *server;
    float *server_params, *server_grads; /* (num_params), (num_trainable) */
    dp_optimizer_t *server_optimizer;
    long num_buckets;
    atomic_int *bucket_done; /* (num_buckets) devices that have counted the bucket this step */
    /* overlap across ranks: buckets locally summed, handed to the communication thread in order */
    pthread_mutex_t publish_lock;
    int publish_ready;
    unsigned char *bucket_summed; /* (num_buckets) locally summed this step; under publish_lock */
    long next_publish;            /* the bucket to hand over next (they go in order nb-1, ..., 0) */
    struct bucket_job *bucket_jobs; /* (num_buckets) the completion contexts */
    stat_barrier_t barrier;  /* sync batch norm */
    int barrier_ready;
    dp_status_t stat_status; /* sync batch norm: device 0's failure inside a forward */
    char stat_error[512];
    char device_names[4096]; /* "cpu:0,cpu:1,...": room for 256 ids up to 4095 */
};

void dp_blas_set_threads(int threads) { openblas_set_num_threads(threads); }

static double monotonic_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dp_split_batch(int n, int k, int d, int *start, int *count) {
    int base = n / k, extra = n % k;
    *count = base + (d < extra ? 1 : 0);
    *start = d * base + (d < extra ? d : extra);
}

static void replica_free(replica_t *r) {
    dp_device_free(r->device); /* first: runs what is queued, then joins */
    free(r->params);
    free(r->grads);
    dp_tape_free(r->tape);
    dp_arena_free(r->arena);
    dp_optimizer_free(r->optimizer);
}

void dp_trainer_free(dp_trainer_t *t) {
    if (!t) return;
    if (t->publish_ready) { /* no bucket callback may still be running */
        dp_world_drain();
        pthread_mutex_destroy(&t->publish_lock);
    }
    free(t->bucket_summed);
    free(t->bucket_jobs);
    for (int d = 0; t->replicas && d < t->num_devices; d++) replica_free(&t->replicas[d]);
    free(t->replicas);
    free(t->devices);
    free(t->grad_buffers);
    free(t->bucket_done);
    dp_device_free(t->server);
    free(t->server_params);
    free(t->server_grads);
    dp_optimizer_free(t->server_optimizer);
    if (t->barrier_ready) {
        pthread_mutex_destroy(&t->barrier.lock);
        pthread_cond_destroy(&t->barrier.cond);
    }
    free(t);
}

/* --- Sync batch norm: the barrier and the sum ----------------------------- */

/* 0 when all `count` tasks arrived, -1 when the barrier is (or gets) broken. */
static int barrier_wait(stat_barrier_t *b) {
    pthread_mutex_lock(&b->lock);
    unsigned long generation = b->generation;
    if (!b->broken && ++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cond);
    } else {
        while (!b->broken && b->generation == generation) pthread_cond_wait(&b->cond, &b->lock);
    }
    int broken = b->broken;
    pthread_mutex_unlock(&b->lock);
    return broken ? -1 : 0;
}

static void barrier_break(stat_barrier_t *b) {
    pthread_mutex_lock(&b->lock);
    b->broken = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* dp_stat_sync_t.sum: every device of every rank gets the sum of all. */
static void stat_sum(void *ctx, double *values, int count) {
    replica_t *r = ctx;
    dp_trainer_t *t = r->trainer;
    r->stat_values = values;
    r->stat_count = count;
    if (barrier_wait(&t->barrier) != 0) return;
    if (r->index == 0) {
        for (int d = 1; d < t->num_devices && t->stat_status == DP_OK; d++) {
            const replica_t *other = &t->replicas[d];
            if (other->stat_count != count) {
                t->stat_status = DP_ERR_SHAPE;
                snprintf(t->stat_error, sizeof t->stat_error,
                         "sync batch norm: %s summed %d statistics, %s %d", dp_device_name(t->devices[0]), count,
                         dp_device_name(t->devices[d]), other->stat_count);
                break;
            }
            for (int i = 0; i < count; i++) values[i] += other->stat_values[i];
        }
        if (t->config.world.size > 1 && t->stat_status == DP_OK &&
            dp_world_sum_doubles(values, count) != DP_OK) {
            t->stat_status = DP_ERR_IO;
            snprintf(t->stat_error, sizeof t->stat_error, "sync batch norm: %s", dp_error_message());
        }
    }
    if (barrier_wait(&t->barrier) != 0) return;
    if (r->index != 0) memcpy(values, t->replicas[0].stat_values, sizeof(double) * (size_t)count);
    barrier_wait(&t->barrier); /* device 0's array stays as it is until everyone has copied it */
}

dp_status_t dp_trainer_new(const dp_trainer_config_t *config, dp_trainer_t **out) {
    *out = NULL;
    if (config->num_devices < 1)
        return dp_fail(DP_ERR_ARG, "number of devices must be >= 1, found %d", config->num_devices);
    if (config->threads_per_device < 1)
        return dp_fail(DP_ERR_ARG, "threads per device must be >= 1, found %d",
                       config->threads_per_device);
    dp_status_t status = DP_ERR_NOMEM;
    dp_trainer_t *t = dp_alloc_zeroed(1, sizeof *t, "trainer");
    if (!t) return DP_ERR_NOMEM;
    t->config = *config;
    t->config.device_ids = NULL; /* not kept: the caller's array */
    t->overlap = config->overlap && config->allreduce == DP_ALLREDUCE_RING && config->sync == DP_SYNC_ALLREDUCE;
    if (t->config.world.size < 1) t->config.world.size = 1;
    t->ranks = t->config.world.size;
    t->model = config->model;
    t->num_params = dp_model_num_params(config->model);
    t->num_trainable = dp_model_num_trainable(config->model);
    t->num_devices = config->num_devices;
    t->replicas = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->replicas, "replicas");
    t->devices = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->devices, "devices");
    t->grad_buffers = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->grad_buffers, "gradient list");
    t->num_buckets = (long)((t->num_trainable + BUCKET_FLOATS - 1) / BUCKET_FLOATS);
    t->bucket_done = dp_alloc_zeroed((size_t)t->num_buckets + 1, sizeof *t->bucket_done, "bucket counters");
    if (!t->replicas || !t->devices || !t->grad_buffers || !t->bucket_done) goto fail;
    if (t->overlap && t->ranks > 1) {
        t->bucket_summed = dp_alloc_zeroed((size_t)t->num_buckets + 1, 1, "bucket flags");
        t->bucket_jobs = dp_alloc_zeroed((size_t)t->num_buckets + 1, sizeof *t->bucket_jobs, "bucket jobs");
        if (!t->bucket_summed || !t->bucket_jobs || pthread_mutex_init(&t->publish_lock, NULL) != 0) goto fail;
        t->publish_ready = 1;
        for (long b = 0; b < t->num_buckets; b++) t->bucket_jobs[b] = (struct bucket_job){t, b};
    }
    if (config->sync_batch_norm) {
        if (pthread_mutex_init(&t->barrier.lock, NULL) != 0) goto fail;
        if (pthread_cond_init(&t->barrier.cond, NULL) != 0) {
            pthread_mutex_destroy(&t->barrier.lock);
            goto fail;
        }
        t->barrier_ready = 1;
        t->barrier.count = t->num_devices;
    }

    /* get_params: initialise once, copy onto every device. */
    size_t used = 0;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int d = 0; d < t->num_devices; d++) {
        replica_t *r = &t->replicas[d];
        int id = config->device_ids ? config->device_ids[d] : d;
        if (used < sizeof t->device_names)
            used += (size_t)snprintf(t->device_names + used, sizeof t->device_names - used,
                                     d ? ",cpu:%d" : "cpu:%d", id);
        r->trainer = t;
        r->index = d;
        r->stat_sync.sum = stat_sum;
        r->stat_sync.ctx = r;
        r->params = dp_alloc_aligned(sizeof(float) * t->num_params, "parameters");
        r->grads = dp_alloc_aligned(sizeof(float) * (t->num_trainable + 1), "gradients");
        r->arena = dp_arena_new((size_t)1 << 24);
        r->tape = r->arena ? dp_tape_new(r->arena) : NULL;
        if (!r->params || !r->grads || !r->tape) goto fail;
        status = dp_optimizer_new(&config->optim, t->num_trainable, &r->optimizer);
        if (status != DP_OK) goto fail;
        /* Pin only when several devices share the machine: a lone device
         * pinned to core 0 would collide with every other such process. */
        int pin = t->num_devices > 1 && cores > 0 ? id % cores : -1;
        status = dp_device_new(id, pin, &r->device);
        if (status != DP_OK) goto fail;
        status = DP_ERR_NOMEM;
        t->devices[d] = r->device;
        t->grad_buffers[d] = r->grads;
        if (d == 0) {
            dp_rng_t rng;
            dp_rng_seed(&rng, config->seed);
            dp_model_init_params(t->model, r->params, &rng);
        } else {
            memcpy(r->params, t->replicas[0].params, sizeof(float) * t->num_params);
        }
    }
    if (config->sync == DP_SYNC_PS) {
        t->server_params = dp_alloc_aligned(sizeof(float) * t->num_params, "server parameters");
        t->server_grads = dp_alloc_aligned(sizeof(float) * (t->num_trainable + 1), "server gradients");
        if (!t->server_params || !t->server_grads) goto fail;
        memcpy(t->server_params, t->replicas[0].params, sizeof(float) * t->num_params);
        status = dp_optimizer_new(&config->optim, t->num_trainable, &t->server_optimizer);
        if (status != DP_OK) goto fail;
        status = dp_device_new(t->num_devices, -1, &t->server);
        if (status != DP_OK) goto fail;
        dp_device_set_name(t->server, "ps");
        status = DP_ERR_NOMEM;
    }
    dp_blas_set_threads(config->threads_per_device);
    *out = t;
    return DP_OK;
fail:
    dp_trainer_free(t);
    return status;
}

uint64_t dp_trainer_step_count(const dp_trainer_t *t) { return t->step_count; }
void dp_trainer_set_step_count(dp_trainer_t *t, uint64_t steps) { t->step_count = steps; }

dp_optimizer_t *dp_trainer_optimizer(dp_trainer_t *t, int device) {
    return t->config.sync == DP_SYNC_PS ? t->server_optimizer : t->replicas[device].optimizer;
}

void dp_trainer_set_lr(dp_trainer_t *t, float lr) {
    for (int d = 0; d < t->num_devices; d++) dp_optimizer_set_lr(t->replicas[d].optimizer, lr);
    if (t->server_optimizer) dp_optimizer_set_lr(t->server_optimizer, lr);
}

void dp_trainer_set_params(dp_trainer_t *t, const float *params) {
    for (int d = 0; d < t->num_devices; d++)
        memcpy(t->replicas[d].params, params, sizeof(float) * t->num_params);
    if (t->server_params) memcpy(t->server_params, params, sizeof(float) * t->num_params);
}

float *dp_trainer_params(dp_trainer_t *t, int device) {
    DP_ASSERT(device >= 0 && device < t->num_devices);
    return t->replicas[device].params;
}

int dp_trainer_num_devices(const dp_trainer_t *t) { return t->num_devices; }
const char *dp_trainer_device_names(const dp_trainer_t *t) { return t->device_names; }

/* Rows of logits (n, k) whose largest entry is at the label. */
static int count_correct(const float *logits, const int32_t *labels, int n, int k) {
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

/* Loads the examples indices[0..n) into the replica's arena as a batch. */
static dp_status_t load_shard(replica_t *r, const dp_dataset_t *ds, const int *indices, int n,
                              dp_tensor_t **x, int32_t **y) {
    int shape[4] = {n, ds->channels, ds->height, ds->width};
    *x = dp_tape_tensor(r->tape, 4, shape);
    if (!*x) return DP_ERR_NOMEM;
    (*x)->data = dp_arena_floats(r->arena, dp_tensor_numel(*x));
    *y = dp_arena_alloc(r->arena, sizeof(int32_t) * (size_t)n);
    if (!(*x)->data || !*y) return DP_ERR_NOMEM;
    dp_dataset_fill(ds, indices, n, (*x)->data, *y);
    return DP_OK;
}

static void bucket_range(const dp_trainer_t *t, long b, size_t *start, size_t *count) {
    *start = (size_t)b * BUCKET_FLOATS;
    *count = t->num_trainable - *start < BUCKET_FLOATS ? t->num_trainable - *start : BUCKET_FLOATS;
}

/* Sums bucket b over all replicas into replica 0 (device order, as
 * dp_allreduce_chunk). */
static void sum_bucket_locally(dp_trainer_t *t, long b) {
    size_t start, count;
    bucket_range(t, b, &start, &count);
    float *sum = t->grad_buffers[0] + start;
    for (int r = 1; r < t->num_devices; r++) {
        const float *g = t->grad_buffers[r] + start;
        for (size_t i = 0; i < count; i++) sum[i] += g[i];
    }
}

/* Replica 0's bucket b holds the sum: copy it to the other replicas and
 * update the bucket in every replica. */
static void broadcast_update_bucket(dp_trainer_t *t, long b) {
    size_t start, count;
    bucket_range(t, b, &start, &count);
    for (int r = 0; r < t->num_devices; r++) {
        replica_t *other = &t->replicas[r];
        if (r > 0) memcpy(other->grads + start, t->grad_buffers[0] + start, sizeof(float) * count);
        dp_optimizer_step_range(other->optimizer, other->params, other->grads, start, count);
    }
}

/* dp_world_done_fn of a bucket's sum across ranks (communication thread). */
static void bucket_summed_across_ranks(void *ctx) {
    struct bucket_job *job = ctx;
    broadcast_update_bucket(job->trainer, job->bucket);
}

/* Bucket b is summed locally: hand every bucket that is ready, in the order
 * nb-1, ..., 0 (the same on every rank, whichever device finished first),
 * to the communication thread. */
static void publish_bucket(dp_trainer_t *t, long b) {
    pthread_mutex_lock(&t->publish_lock);
    t->bucket_summed[b] = 1;
    while (t->next_publish >= 0 && t->bucket_summed[t->next_publish]) {
        long p = t->next_publish--;
        size_t start, count;
        bucket_range(t, p, &start, &count);
        dp_world_sum_floats_async(t->grad_buffers[0] + start, count, bucket_summed_across_ranks,
                                  &t->bucket_jobs[p]);
    }
    pthread_mutex_unlock(&t->publish_lock);
}

/* Counts every bucket inside this device's final suffix; the last device
 * to count a bucket reduces it and updates it (one rank), or reduces it
 * and hands it over to be summed across ranks (several). */
static void count_ready_buckets(replica_t *r) {
    dp_trainer_t *t = r->trainer;
    while (r->next_bucket >= 0 && (size_t)r->next_bucket * BUCKET_FLOATS >= r->ready_from) {
        long b = r->next_bucket--;
        if (atomic_fetch_add_explicit(&t->bucket_done[b], 1, memory_order_acq_rel) + 1 != t->num_devices)
            continue;
        sum_bucket_locally(t, b);
        if (t->ranks > 1) publish_bucket(t, b);
        else broadcast_update_bucket(t, b);
    }
}

/* The tape hook: after a node's backward, its parameters' gradients are
 * final (each parameter is used by one node, and nodes run in layer order,
 * which is parameter order, also with routes and skip connections). */
static void backward_hook(void *ctx, int node_index, const dp_node_t *node) {
    replica_t *r = ctx;
    (void)node_index;
    for (int i = 1; i < 3; i++) {
        const dp_tensor_t *p = node->in[i];
        if (p && p->grad >= r->grads && p->grad < r->grads + r->trainer->num_trainable) {
            size_t offset = (size_t)(p->grad - r->grads);
            if (offset < r->ready_from) r->ready_from = offset;
        }
    }
    count_ready_buckets(r);
}

/* Phase 1 on device d (d2l's per-GPU part of train_batch): forward and
 * backward of the shard; the loss is divided by the global batch size.
 * With overlap, backward also reduces and applies finished buckets. */
static dp_status_t shard_task(void *arg) {
    replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    dp_arena_reset(r->arena);
    dp_tape_reset(r->tape);
    memset(r->grads, 0, sizeof(float) * t->num_trainable);
    r->ready_from = t->num_trainable;
    r->next_bucket = t->num_buckets - 1;
    dp_tensor_t *x, *logits, *loss;
    int32_t *y;
    DP_TRY(load_shard(r, r->ds, r->indices, r->count, &x, &y));
    dp_forward_opts_t opts = {
        .training = 1,
        .seed = dp_seed_mix(t->config.seed, t->step_count),
        .example_offset = r->example_offset,
        .stat_sync = t->config.sync_batch_norm ? &r->stat_sync : NULL,
    };
    DP_TRY(dp_model_forward_opts(t->model, r->tape, r->params, r->grads, x, &opts, &logits));
    dp_op_attr_t attr = dp_op_attr_default();
    attr.loss_denominator = (float)r->denominator;
    loss = dp_tape_op(r->tape, DP_OP_SOFTMAX_XENT, &attr, logits, NULL, NULL, y);
    if (!loss) return DP_ERR_ARG;
    r->loss_sum = (double)loss->data[0] * r->denominator;
    r->correct = count_correct(logits->data, y, r->count, logits->shape[1]);
    if (!t->overlap) return dp_tape_backward(r->tape, loss, NULL, NULL);
    DP_TRY(dp_tape_backward(r->tape, loss, backward_hook, r));
    r->ready_from = 0; /* every gradient is final now */
    count_ready_buckets(r);
    return DP_OK;
}

/* Phase 1 as the device's task: with sync batch norm, a failure breaks the
 * barrier so that the other devices do not wait for this one. With
 * overlap, a failed device still counts every bucket it has not counted,
 * so that every bucket is summed and handed over as on the other ranks
 * (which would otherwise wait for it) and the step can be drained; the
 * step fails all the same. */
static dp_status_t shard_task_guarded(void *arg) {
    replica_t *r = arg;
    dp_status_t status = shard_task(r);
    if (status != DP_OK && r->trainer->config.sync_batch_norm) barrier_break(&r->trainer->barrier);
    if (status != DP_OK && r->trainer->overlap) {
        r->ready_from = 0;
        count_ready_buckets(r);
    }
    return status;
}

/* Phase 2, ring: device d reduces chunk d and updates it in every replica. */
static dp_status_t reduce_update_chunk_task(void *arg) {
    replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    int k = t->num_devices;
    dp_allreduce_chunk(t->grad_buffers, k, t->num_trainable, r->index);
    size_t start, count;
    dp_chunk_range(t->num_trainable, k, r->index, &start, &count);
    for (int e = 0; e < k; e++) {
        replica_t *other = &t->replicas[e];
        dp_optimizer_step_range(other->optimizer, other->params, other->grads, start, count);
    }
    return DP_OK;
}

/* Phase 3 with several ranks: replica 0 holds the global sum; device d
 * copies chunk d to the other replicas and updates chunk d everywhere. */
static dp_status_t broadcast_update_chunk_task(void *arg) {
    replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    int k = t->num_devices;
    size_t start, count;
    dp_chunk_range(t->num_trainable, k, r->index, &start, &count);
    for (int e = 0; e < k; e++) {
        replica_t *other = &t->replicas[e];
        if (e > 0) memcpy(other->grads + start, t->replicas[0].grads + start, sizeof(float) * count);
        dp_optimizer_step_range(other->optimizer, other->params, other->grads, start, count);
    }
    return DP_OK;
}

static dp_status_t allreduce_chunk_task(void *arg) {
    replica_t *r = arg;
    dp_allreduce_chunk(r->trainer->grad_buffers, r->trainer->num_devices, r->trainer->num_trainable, r->index);
    return DP_OK;
}

/* Phase 2, naive: device 0 sums and copies back (the seeds' allreduce). */
static dp_status_t reduce_naive_task(void *arg) {
    dp_trainer_t *t = ((replica_t *)arg)->trainer;
    dp_allreduce_naive(t->grad_buffers, t->num_devices, t->num_trainable);
    return DP_OK;
}

static dp_status_t update_task(void *arg) {
    replica_t *r = arg;
    dp_optimizer_step_range(r->optimizer, r->params, r->grads, 0, r->trainer->num_trainable);
    return DP_OK;
}

/* Submits fn(replica d) to every device and waits for all of them; if a
 * submit fails, still waits for the tasks already queued before returning. */
static dp_status_t run_on_all(dp_trainer_t *t, dp_task_fn fn) {
    for (int d = 0; d < t->num_devices; d++) {
        dp_status_t status = dp_device_submit(t->devices[d], fn, &t->replicas[d]);
        if (status != DP_OK) {
            char message[1024];
            snprintf(message, sizeof message, "%s", dp_error_message());
            dp_waitall(t->devices, d);
            return dp_fail(status, "%s", message);
        }
    }
    return dp_waitall(t->devices, t->num_devices);
}

/* Parameter server, phase 2: push. The server sums every replica's
 * gradients (device order, as the allreduce) into its own buffer and takes
 * replica 0's buffers (rank 0's reach every rank with the parameters). */
static dp_status_t ps_push_task(void *arg) {
    dp_trainer_t *t = arg;
    memcpy(t->server_grads, t->replicas[0].grads, sizeof(float) * t->num_trainable);
    for (int d = 1; d < t->num_devices; d++) {
        const float *g = t->replicas[d].grads;
        for (size_t i = 0; i < t->num_trainable; i++) t->server_grads[i] += g[i];
    }
    memcpy(t->server_params + t->num_trainable, t->replicas[0].params + t->num_trainable,
           sizeof(float) * (t->num_params - t->num_trainable));
    return DP_OK;
}

static dp_status_t ps_update_task(void *arg) {
    dp_trainer_t *t = arg;
    dp_optimizer_step(t->server_optimizer, t->server_params, t->server_grads);
    return DP_OK;
}

/* Parameter server, phase 3: every device pulls the parameters. */
static dp_status_t ps_pull_task(void *arg) {
    replica_t *r = arg;
    memcpy(r->params, r->trainer->server_params, sizeof(float) * r->trainer->num_params);
    return DP_OK;
}

/* One parameter-server sync: push, (reduce to rank 0), update on rank 0,
 * (broadcast), pull. MPI calls are made from this, the caller's, thread. */
static dp_status_t ps_sync(dp_trainer_t *t, int ranks) {
    DP_TRY(dp_device_submit(t->server, ps_push_task, t));
    DP_TRY(dp_device_wait(t->server));
    if (ranks > 1) DP_TRY(dp_world_reduce_to_root(t->server_grads, t->num_trainable));
    if (t->config.world.rank == 0) {
        DP_TRY(dp_device_submit(t->server, ps_update_task, t));
        DP_TRY(dp_device_wait(t->server));
    }
    if (ranks > 1) DP_TRY(dp_world_broadcast(t->server_params, t->num_params));
    return run_on_all(t, ps_pull_task);
}

/* Buffers (running statistics) after a step: rank 0's replica 0 everywhere. */
static dp_status_t sync_buffers(dp_trainer_t *t, int ranks) {
    size_t count = t->num_params - t->num_trainable;
    /* With synchronised batch norm every replica on every rank updated its
     * running statistics from the same global sums, in the same order: they
     * are equal already (dp_trainer_check_replicas checks it). */
    if (count == 0 || t->config.sync_batch_norm) return DP_OK;
    float *source = t->replicas[0].params + t->num_trainable;
    if (ranks > 1) DP_TRY(dp_world_broadcast(source, count));
    for (int d = 1; d < t->num_devices; d++)
        memcpy(t->replicas[d].params + t->num_trainable, source, sizeof(float) * count);
    return DP_OK;
}

dp_status_t dp_trainer_step(dp_trainer_t *t, const dp_dataset_t *ds, const int *indices, int n,
                            double *loss_sum, int *correct) {
    int k = t->num_devices, ranks = t->config.world.size;
    if (n < k * ranks)
        return dp_fail(DP_ERR_ARG, "a batch of %d examples cannot be split across %d devices "
                       "(the batch size must be at least the number of devices)", n, k * ranks);
    /* distributed_batch_reader: this rank's shard of the global batch ... */
    int rank_start, rank_count;
    dp_split_batch(n, ranks, t->config.world.rank, &rank_start, &rank_count);
    for (int d = 0; d < k; d++) { /* ... and split_and_load across its devices */
        replica_t *r = &t->replicas[d];
        int start, count;
        dp_split_batch(rank_count, k, d, &start, &count);
        r->ds = ds;
        r->indices = indices + rank_start + start;
        r->count = count;
        r->denominator = n;
        r->example_offset = rank_start + start;
    }
    if (t->config.sync_batch_norm) { /* re-arm: no device is inside a task now */
        t->barrier.broken = 0;
        t->barrier.waiting = 0;
        t->stat_status = DP_OK;
    }
    if (t->config.sync != DP_SYNC_PS) /* the server's optimizer counts its own steps */
        for (int d = 0; d < k; d++) dp_optimizer_begin_step(t->replicas[d].optimizer);
    if (t->overlap)
        for (long b = 0; b < t->num_buckets; b++) atomic_store_explicit(&t->bucket_done[b], 0, memory_order_relaxed);
    if (t->publish_ready) {
        memset(t->bucket_summed, 0, (size_t)t->num_buckets);
        t->next_publish = t->num_buckets - 1;
    }
    double mpi_start = dp_world_mpi_seconds();
    /* with overlap, this also reduced every bucket and applied it (one rank)
     * or handed it to the communication thread (several) */
    dp_status_t status = run_on_all(t, shard_task_guarded);
    double sync_start = monotonic_sec();
    if (t->publish_ready) { /* the buckets still being summed across ranks */
        dp_status_t drained = dp_world_drain();
        if (status == DP_OK) status = drained;
    }
    if (status != DP_OK) return status;
    if (t->stat_status != DP_OK) return dp_fail(t->stat_status, "%s", t->stat_error);
    if (!t->publish_ready) mpi_start = dp_world_mpi_seconds();
    if (t->config.sync == DP_SYNC_PS) {
        DP_TRY(ps_sync(t, ranks));
    } else if (ranks > 1 && !t->overlap) {
        if (k > 1) DP_TRY(run_on_all(t, allreduce_chunk_task));
        /* bucket by bucket, as with overlap: MPI's order of summation may
         * depend on the message size (Open MPI's ring with 3 ranks does) */
        for (long b = t->num_buckets - 1; b >= 0; b--) {
            size_t start, count;
            bucket_range(t, b, &start, &count);
            dp_world_sum_floats_async(t->replicas[0].grads + start, count, NULL, NULL);
        }
        DP_TRY(dp_world_drain());
        DP_TRY(run_on_all(t, broadcast_update_chunk_task));
    } else if (!t->overlap && t->config.allreduce == DP_ALLREDUCE_NAIVE) {
        DP_TRY(dp_device_submit(t->devices[0], reduce_naive_task, &t->replicas[0]));
        DP_TRY(dp_device_wait(t->devices[0]));
        DP_TRY(run_on_all(t, update_task));
    } else if (!t->overlap) {
        DP_TRY(run_on_all(t, reduce_update_chunk_task));
    }
    if (t->config.sync != DP_SYNC_PS) DP_TRY(sync_buffers(t, ranks)); /* ps pulled them */
    t->sync_sec += monotonic_sec() - sync_start;
    t->mpi_sec += dp_world_mpi_seconds() - mpi_start;
    double total_loss = 0.0;
    int total_correct = 0;
    for (int d = 0; d < k; d++) { /* in device order: the same sum every run */
        total_loss += t->replicas[d].loss_sum;
        total_correct += t->replicas[d].correct;
    }
    if (loss_sum) *loss_sum += total_loss;
    if (correct) *correct += total_correct;
    t->step_count++;
    return DP_OK;
}

/* Evaluation on device d: its contiguous share of the examples, in batches. */
static dp_status_t evaluate_task(void *arg) {
    replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    int rank_start, rank_count, start, count;
    dp_split_batch(r->ds->count, t->config.world.size, t->config.world.rank, &rank_start, &rank_count);
    dp_split_batch(rank_count, t->num_devices, r->index, &start, &count);
    start += rank_start;
    r->correct = 0;
    for (int done = 0; done < count; done += r->eval_batch) {
        int n = count - done < r->eval_batch ? count - done : r->eval_batch;
        dp_arena_reset(r->arena);
        dp_tape_reset(r->tape);
        int *indices = dp_arena_alloc(r->arena, sizeof(int) * (size_t)n);
        if (!indices) return DP_ERR_NOMEM;
        for (int i = 0; i < n; i++) indices[i] = start + done + i;
        dp_tensor_t *x, *logits;
        int32_t *y;
        DP_TRY(load_shard(r, r->ds, indices, n, &x, &y));
        DP_TRY(dp_model_forward(t->model, r->tape, r->params, NULL, x, &logits));
        r->correct += count_correct(logits->data, y, n, logits->shape[1]);
    }
    return DP_OK;
}

/* An evaluation batch keeps every layer's output in the device's arena (and
 * conv's im2col scratch): the batch is capped so that they stay under about
 * EVAL_ARENA_BYTES. LeNet's 1000 stays as it is; ResNet-18's 1000 would take
 * over 5 GB per device. */
#define EVAL_ARENA_BYTES ((size_t)1 << 30)

static int eval_batch_cap(const dp_model_t *m, int batch_size) {
    size_t floats = 0; /* per example: every output, the input included */
    for (int i = 0; i <= dp_model_num_layers(m); i++) {
        int shape[DP_MAX_DIMS], ndim = dp_model_output_shape(m, i, shape);
        size_t n = 1;
        for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
        floats += n;
    }
    size_t cap = EVAL_ARENA_BYTES / (2 * sizeof(float) * floats); /* x2: scratch */
    if (cap < 1) cap = 1;
    return (size_t)batch_size < cap ? batch_size : (int)cap;
}

dp_status_t dp_trainer_evaluate(dp_trainer_t *t, const dp_dataset_t *ds, int batch_size,
                                int *correct) {
    if (batch_size < 1) return dp_fail(DP_ERR_ARG, "evaluation batch size must be >= 1");
    int eval_batch = eval_batch_cap(t->model, batch_size);
    for (int d = 0; d < t->num_devices; d++) {
        t->replicas[d].ds = ds;
        t->replicas[d].eval_batch = eval_batch;
    }
    DP_TRY(run_on_all(t, evaluate_task));
    double total = 0;
    for (int d = 0; d < t->num_devices; d++) total += t->replicas[d].correct;
    DP_TRY(dp_world_sum_doubles(&total, 1));
    *correct = (int)total;
    return DP_OK;
}

double dp_trainer_sync_seconds(const dp_trainer_t *t, double *in_mpi) {
    if (in_mpi) *in_mpi = t->mpi_sec;
    return t->sync_sec;
}

dp_status_t dp_trainer_check_replicas(dp_trainer_t *t) {
    size_t bytes = sizeof(float) * t->num_params;
    for (int d = 1; d < t->num_devices; d++)
        if (memcmp(t->replicas[d].params, t->replicas[0].params, bytes) != 0)
            return dp_fail(DP_ERR_ARG, "internal error: the parameters of %s differ from %s's",
                           dp_device_name(t->devices[d]), dp_device_name(t->devices[0]));
    return dp_world_check_same(&t->config.world, "parameters", t->replicas[0].params, bytes);
}
