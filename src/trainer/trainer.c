/* trainer.c - the data-parallel trainer (parallel.h): the replicas, the step
 * skeleton, evaluation, and the host copies of the parameters. How the
 * replicas agree on each step's update is a synchronisation strategy
 * (sync_strategy.h, one sync_*.c file each), built on the operations over
 * every replica (replica.h: replica.c, replica_collectives.c) and the
 * gradient buckets (buckets.h); the loss and accuracy sums counted on the
 * devices are trainer_metrics.c's.
 *
 * DESIGN. Replica d (params, grads, arena, tape, optimizer) belongs to
 * device d and lives in its backend's memory: only tasks on device d touch
 * its arena and tape, and this file reads or writes a replica only through
 * the backend (upload, download, copy, zero, input_from_bytes). A step
 * takes a host batch of bytes and labels (batch_source.h: the data never
 * enters the device interface): on a backend without host memory each
 * replica's shards are uploaded into its input buffers before the step
 * (stage_input), on host memory they are read where they are; each device
 * turns its shard into the normalised input itself. Nothing here assumes
 * host memory: what MPI reads or writes
 * goes through t->host_stage when the backend's memory is not host memory
 * (dp_trainer_stage_down/up), and an optimizer whose state the backend keeps
 * on the device is downloaded by dp_trainer_optimizer (what a checkpoint
 * saves) and uploaded after a restore (dp_trainer_optimizers_uploaded). The caller's
 * thread drives a step and waits for every device after each phase:
 *   phase 1, on every device (shard_task): convert the shard's bytes,
 *            forward, loss scaled by the global batch size, backward into
 *            the replica's grads; the shard's summed loss and correct count
 *            are added to the replica's train_sums on the device
 *            (count_metrics: nothing downloaded; dp_trainer_read_metrics
 *            reads them, on the caller's thread between steps, one download
 *            per backend table). With an overlapping strategy
 *            the tape hook (backward_hook) moves the replica's final suffix
 *            of the gradients down after every node and calls the
 *            strategy's range_final, which may sum and update parts of the
 *            buffers while other devices are still in backward;
 *   phase 2 and later: the strategy's drain and end_step, on the caller's
 *            thread, submitting tasks of their own.
 * With gradient accumulation (config.accumulate = N), phase 1 runs N times,
 * once per micro-batch, each time on every device and waited for: the
 * gradients are zeroed before the first and summed into by the others'
 * backward; the strategy's begin_step comes before the last micro-batch and
 * its tape hook (range_final) fires during the last one's backward only, so
 * every strategy sees one step as before, with the sum of N backward passes
 * in the replicas' grads (DDP's no_sync for the first N - 1). A failure in
 * a micro-batch ends the step at once (the job is ended with it).
 * Only the first num_trainable floats of the flat buffers are gradients:
 * every sum and update covers those. Frozen parameters (nn.h:
 * dp_model_freeze) come next, [num_trainable, buffers_at): the model lays
 * them out there so that no sum, bucket or update of any strategy (local,
 * MPI, NCCL, parameter server) ever covers them, without a strategy
 * knowing of them; they are equal on every replica from the start and
 * nothing writes them. The tape gives them no gradient, so backward stops
 * below the lowest layer that trains. The rest are buffers (batch norm's
 * running statistics), which each replica updates in its forward (but
 * those of frozen batch norm layers, which use them as they are); after
 * each step dp_trainer_sync_buffers copies replica 0's buffers to the others
 * and, with several ranks, first broadcasts rank 0's (PyTorch DDP's
 * broadcast_buffers), so the replicas stay identical; with --sync-batch-norm
 * there is nothing to copy (every replica computed the same statistics) and
 * the parameter server's pull carries them.
 * The waits are the only other synchronisation: between phases every
 * replica's buffers are quiescent, and the caller reads results (and the
 * host copies of dp_trainer_params) only after a wait.
 * On one CUDA device a step may instead be one launch of a CUDA graph
 * (step_graph.c): dp_trainer_step_devices is then run once per step shape
 * inside a capture (the shards converting the bytes uploaded before it),
 * and later steps redo only its host part (the strategy's begin_step, the
 * step count) before the launch; where that cannot hold, t->graph_why says
 * why and every step runs as made, and a shape whose capture CUDA or NCCL
 * refused runs as made from that step on (step_graph.c puts the step's
 * host part back first).
 */
#include "dptrain/parallel.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dptrain/no_grad.h"
#include "dptrain/profile.h"

#include "dptrain/batch_loader.h"
#include "dptrain/random_erase.h"

#include "buckets.h"
#include "confusion.h"
#include "step_input.h"
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_metrics.h"
#include "trainer_state.h"

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

void dp_trainer_free(dp_trainer_t *t) {
    if (!t) return;
    if (t->sync && t->sync->release) t->sync->release(t); /* nothing of the strategy runs any more */
    dp_step_graph_release(t);
    dp_sync_peer_release(t);
    for (int d = 0; t->replicas && d < t->num_devices; d++)
        if (t->replicas[d].backend) dp_replica_free(&t->replicas[d]);
    free(t->replicas);
    free(t->devices);
    free(t->grad_buffers);
    free(t->param_buffers);
    free(t->host_stage);
    free(t->host_metrics);
    free(t->split_sum);
    free(t->split_part);
    dp_step_input_free(t);
    dp_sync_batch_norm_release(t);
    free(t);
}

/* The strategy for a configuration (parallel.h). */
/* Activation gradients placed by liveness (grad_plan.h), the default: over
 * the activations backward is done with, and beside each other where they
 * do not meet. DPTRAIN_GRAD_LIVENESS=apart keeps them out of the
 * activations' memory (sharing only among themselves), =off gives each its
 * own memory for the whole step, as before (the benchmarks' A/B). *mode:
 * 2 (on), 1 (apart) or 0 (off); another value is refused. */
static dp_status_t grad_liveness(int *mode) {
    const char *env = getenv("DPTRAIN_GRAD_LIVENESS");
    *mode = 2;
    if (!env || !*env || !strcmp(env, "on") || !strcmp(env, "1")) return DP_OK;
    if (!strcmp(env, "apart")) {
        *mode = 1;
        return DP_OK;
    }
    if (!strcmp(env, "off") || !strcmp(env, "0")) {
        *mode = 0;
        return DP_OK;
    }
    return dp_fail(DP_ERR_ARG, "DPTRAIN_GRAD_LIVENESS=%s: expected on, apart or off", env);
}

static const dp_sync_strategy_t *choose_sync(const dp_trainer_config_t *config, int ranks) {
    if (config->sync == DP_SYNC_PS) return &dp_sync_ps;
    int overlap = config->overlap && config->allreduce == DP_ALLREDUCE_CHUNKED;
    if (ranks > 1) return overlap ? &dp_sync_mpi_overlap : &dp_sync_mpi;
    if (overlap) return &dp_sync_overlap;
    return config->allreduce == DP_ALLREDUCE_NAIVE ? &dp_sync_local_naive : &dp_sync_local_chunked;
}

/* The configuration's fields, each out of range one line (before anything is made). */
static dp_status_t check_config(const dp_trainer_config_t *config) {
    if (!config->model) return dp_fail(DP_ERR_ARG, "trainer: no model given (config.model is NULL)");
    if (config->num_devices < 1)
        return dp_fail(DP_ERR_ARG, "number of devices must be >= 1, found %d", config->num_devices);
    if (config->sync != DP_SYNC_ALLREDUCE && config->sync != DP_SYNC_PS)
        return dp_fail(DP_ERR_ARG, "trainer: unknown sync kind %d (expected DP_SYNC_ALLREDUCE or DP_SYNC_PS)",
                       (int)config->sync);
    if (config->allreduce != DP_ALLREDUCE_NAIVE && config->allreduce != DP_ALLREDUCE_CHUNKED)
        return dp_fail(DP_ERR_ARG, "trainer: unknown allreduce kind %d (expected DP_ALLREDUCE_CHUNKED or "
                       "DP_ALLREDUCE_NAIVE)", (int)config->allreduce);
    if (config->world.size < 0 || config->world.rank < 0 ||
        config->world.rank >= (config->world.size > 1 ? config->world.size : 1))
        return dp_fail(DP_ERR_ARG, "trainer: world rank %d of %d ranks (expected 0 <= rank < size; zeros: one "
                       "process)", config->world.rank, config->world.size);
    if (config->accumulate < 0)
        return dp_fail(DP_ERR_ARG, "accumulate: micro-batches per step must be >= 1, found %d", config->accumulate);
    if (!(config->label_smoothing >= 0.0f && config->label_smoothing < 1.0f))
        return dp_fail(DP_ERR_ARG, "trainer: label_smoothing must be in [0, 1), found %g",
                       (double)config->label_smoothing);
    if (!(config->clip_grad_norm >= 0.0f && config->clip_grad_norm <= DP_CLIP_MAX_NORM_LIMIT))
        return dp_fail(DP_ERR_ARG, "trainer: clip_grad_norm must be > 0 (0: no clipping) and at most %g, found %g",
                       (double)DP_CLIP_MAX_NORM_LIMIT, (double)config->clip_grad_norm);
    DP_TRY(dp_mix_check(&config->mix, "trainer: mix."));
    DP_TRY(dp_random_erase_check(config->random_erase, "trainer: random_erase"));
    if (config->threads_per_device < 1 || config->threads_per_device > DP_TRAINER_MAX_THREADS)
        return dp_fail(DP_ERR_ARG, "threads per device must be 1 to %d, found %d", DP_TRAINER_MAX_THREADS,
                       config->threads_per_device);
    for (int d = 0; config->device_ids && d < config->num_devices; d++)
        if (config->device_ids[d] < 0)
            return dp_fail(DP_ERR_ARG, "trainer: device_ids[%d] is %d (device numbers are 0 or more)", d,
                           config->device_ids[d]);
    return DP_OK;
}

dp_status_t dp_trainer_new(const dp_trainer_config_t *config, dp_trainer_t **out) {
    if (!out) return dp_fail(DP_ERR_ARG, "trainer: no place for the trainer given (out is NULL)");
    *out = NULL;
    if (!config) return dp_fail(DP_ERR_ARG, "trainer: no configuration given (NULL)");
    DP_TRY(check_config(config));
    int liveness, forward_live;
    DP_TRY(grad_liveness(&liveness));
    DP_TRY(dp_no_grad_wanted(&forward_live));
    dp_status_t status = DP_ERR_NOMEM;
    dp_trainer_t *t = dp_alloc_zeroed(1, sizeof *t, "trainer");
    if (!t) return DP_ERR_NOMEM;
    t->config = *config;
    t->config.device_ids = NULL; /* not kept: the caller's array */
    if (t->config.world.size < 1) t->config.world.size = 1;
    t->ranks = t->config.world.size;
    t->last_grad_norm = NAN;
    if (t->config.accumulate < 1) t->config.accumulate = 1;
    t->backend = config->backend ? config->backend : dp_backend_cpu();
    t->model = config->model;
    t->num_params = dp_model_num_params(config->model);
    t->num_trainable = dp_model_num_trainable(config->model);
    t->buffers_at = t->num_trainable + dp_model_num_frozen(config->model);
    t->num_buckets = (long)((t->num_trainable + DP_BUCKET_FLOATS - 1) / DP_BUCKET_FLOATS);
    t->num_devices = config->num_devices;
    t->replicas = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->replicas, "replicas");
    t->devices = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->devices, "devices");
    t->grad_buffers = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->grad_buffers, "gradient list");
    t->param_buffers = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->param_buffers, "parameter list");
    if (!t->replicas || !t->devices || !t->grad_buffers || !t->param_buffers) goto fail;
    if (config->backends) { /* devices on several tables: sums through host memory */
        int split = 0;
        for (int d = 0; d < t->num_devices; d++) {
            if (!config->backends[d]) {
                status = dp_fail(DP_ERR_ARG, "device %d has no backend", d);
                goto fail;
            }
            split |= config->backends[d] != config->backends[0];
        }
        t->backend = config->backends[0];
        if (split && (!(t->split_sum = dp_alloc_aligned(sizeof(float) * (t->num_params + 1), "host buffer for sums")) ||
                      !(t->split_part = dp_alloc_aligned(sizeof(float) * (t->num_params + 1), "host buffer for sums"))))
            goto fail;
    }
    if (t->ranks > 1 && !t->backend->host_memory &&
        !(t->host_stage = dp_alloc_aligned(sizeof(float) * (t->num_params + 1), "host staging buffer for MPI")))
        goto fail;
    if (config->sync_batch_norm && (status = dp_sync_batch_norm_init(t)) != DP_OK) goto fail;
    status = DP_ERR_NOMEM;

    /* get_params: initialise once on the host, upload onto every device. */
    float *init = NULL;
    size_t used = 0;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    size_t param_bytes = sizeof(float) * t->num_params;
    for (int d = 0; d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        const dp_backend_t *be = config->backends ? config->backends[d] : t->backend;
        int id = config->device_ids ? config->device_ids[d] : d;
        if (!be->count_metrics) {
            status = dp_fail(DP_ERR_ARG, "device %d: backend '%s' has no count_metrics (backend.h): it cannot "
                             "train here", d, be->name);
            goto fail;
        }
        if (config->clip_grad_norm > 0.0f && (!be->sum_squares || !be->scale_range)) {
            status = dp_fail(DP_ERR_ARG, "device %d: backend '%s' cannot clip gradients (no sum_squares or "
                             "scale_range, backend.h)", d, be->name);
            goto fail;
        }
        if ((config->mix.mixup_alpha > 0.0f && !be->ema_update) ||
            ((config->mix.cutmix_alpha > 0.0f || config->random_erase > 0.0f) && !be->paste_boxes)) {
            status = dp_fail(DP_ERR_ARG, "device %d: backend '%s' cannot %s (no %s, backend.h)", d, be->name,
                             be->ema_update ? "paste CutMix's or erase random boxes" : "blend Mixup's inputs",
                             be->ema_update ? "paste_boxes" : "ema_update");
            goto fail;
        }
        if (used < sizeof t->device_names)
            used += (size_t)snprintf(t->device_names + used, sizeof t->device_names - used,
                                     d ? ",%s:%d" : "%s:%d", be->name, id);
        r->trainer = t;
        r->index = d;
        r->backend = be;
        r->stat_sync.sum = dp_sync_batch_norm_sum;
        r->stat_sync.ctx = r;
        r->host_params = dp_alloc_aligned(param_bytes, "host copy of the parameters");
        r->params = be->alloc(be->ctx, param_bytes, "parameters");
        r->grads = be->alloc(be->ctx, sizeof(float) * (t->num_trainable + 1), "gradients");
        r->arena = dp_arena_new_on(be, (size_t)1 << 24);
        if (r->arena) {
            dp_arena_defer_grads(r->arena, liveness > 0);
            dp_arena_record_forward(r->arena, liveness == 2);
        }
        r->tape = r->arena ? dp_tape_new_on(be, r->arena) : NULL;
        if (!r->host_params || !r->params || !r->grads || !r->tape) goto fail;
        if (config->profile_steps > 0) {
            status = dp_profiler_new(be, config->profile_warmup, config->profile_steps, &r->profiler);
            if (status != DP_OK) goto fail;
            status = DP_ERR_NOMEM;
            dp_tape_set_profiler(r->tape, r->profiler);
        }
        if (forward_live) {
            if (!(r->no_grad = dp_no_grad_new(be))) goto fail;
            dp_no_grad_set_profiler(r->no_grad, r->profiler);
        }
        status = dp_trainer_optimizer_new(t, &r->optimizer);
        if (status != DP_OK) goto fail;
        /* Pin only when several devices share the machine: a lone device
         * pinned to core 0 would collide with every other such process. */
        int pin = t->num_devices > 1 && cores > 0 ? id % cores : -1;
        status = dp_device_new_on(be, id, pin, &r->device);
        if (status != DP_OK) goto fail;
        status = DP_ERR_NOMEM;
        t->devices[d] = r->device;
        t->grad_buffers[d] = r->grads;
        t->param_buffers[d] = r->params;
        if (d == 0) { /* in replica 0's own memory where that is host memory: no host copy touched */
            init = be->host_memory ? r->params : r->host_params;
            dp_rng_t rng;
            dp_rng_seed(&rng, config->seed);
            dp_model_init_params(t->model, init, &rng);
        }
        if (r->params != init) be->upload(be->ctx, r->params, init, param_bytes);
    }
    if ((status = dp_trainer_metrics_alloc(t)) != DP_OK) goto fail;
    if (config->model_ema && (status = dp_model_ema_init(t)) != DP_OK) goto fail; /* model_ema.c */
    if ((status = dp_sync_peer_choose(t)) != DP_OK) goto fail; /* NCCL, or the host paths */
    t->sync = !t->peer_group ? choose_sync(config, t->ranks) : config->overlap ? &dp_sync_peer_overlap : &dp_sync_peer;
    if (t->sync->init && (status = t->sync->init(t)) != DP_OK) goto fail;
    t->graph_why = dp_step_graph_why(t);
    dp_blas_set_threads(config->threads_per_device);
    *out = t;
    return DP_OK;
fail:
    dp_trainer_free(t);
    return status;
}

uint64_t dp_trainer_step_count(const dp_trainer_t *t) { return t->step_count; }

const char *dp_trainer_cuda_graph(const dp_trainer_t *t, dp_cuda_graph_counts_t *counts) {
    if (counts) *counts = t->graph_counts;
    return t->graph_why;
}
void dp_trainer_set_step_count(dp_trainer_t *t, uint64_t steps) { t->step_count = steps; }

/* A backend that keeps the optimizer state in device memory: its host
 * buffers are brought up to date first, so that what the caller reads (a
 * checkpoint) is the state. */
dp_optimizer_t *dp_trainer_optimizer(dp_trainer_t *t, int device) {
    if (device < 0 || device >= t->num_devices) {
        dp_fail(DP_ERR_ARG, "trainer: device %d of %d (expected 0..%d)", device, t->num_devices, t->num_devices - 1);
        return NULL;
    }
    int ps = t->config.sync == DP_SYNC_PS;
    dp_optimizer_t *opt = ps ? t->server_optimizer : t->replicas[device].optimizer;
    const dp_backend_t *be = ps ? t->backend : t->replicas[device].backend; /* the server's is device 0's */
    if (be->optimizer_download) be->optimizer_download(be->ctx, opt);
    return opt;
}

void dp_trainer_set_lr(dp_trainer_t *t, float lr) {
    for (int d = 0; d < t->num_devices; d++) dp_optimizer_set_lr(t->replicas[d].optimizer, lr);
    if (t->server_optimizer) dp_optimizer_set_lr(t->server_optimizer, lr);
}

void dp_trainer_set_params(dp_trainer_t *t, const float *params) {
    size_t bytes = sizeof(float) * t->num_params;
    for (int d = 0; d < t->num_devices; d++) dp_device_upload(t->devices[d], t->replicas[d].params, params, bytes);
    if (t->server_params) dp_device_upload(t->server, t->server_params, params, bytes);
}

float *dp_trainer_params(dp_trainer_t *t, int device) {
    if (device < 0 || device >= t->num_devices) {
        dp_fail(DP_ERR_ARG, "trainer: device %d of %d (expected 0..%d)", device, t->num_devices, t->num_devices - 1);
        return NULL;
    }
    dp_replica_t *r = &t->replicas[device];
    dp_device_download(r->device, r->host_params, r->params, sizeof(float) * t->num_params);
    return r->host_params;
}

void dp_trainer_read_grads(dp_trainer_t *t, float *out) {
    if (t->server) /* --sync ps: the server summed and updated */
        dp_device_download(t->server, out, t->server_grads, sizeof(float) * t->num_trainable);
    else
        dp_device_download(t->devices[0], out, t->replicas[0].grads, sizeof(float) * t->num_trainable);
}

dp_status_t dp_trainer_check_devices(const dp_trainer_t *t) {
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (be->failure) DP_TRY(be->failure(be->ctx));
    }
    if (t->backend->failure) DP_TRY(t->backend->failure(t->backend->ctx)); /* the server's (--sync ps) */
    return DP_OK;
}

int dp_trainer_num_devices(const dp_trainer_t *t) { return t->num_devices; }
int dp_trainer_accumulate(const dp_trainer_t *t) { return t->config.accumulate; }
int dp_trainer_sync_batch_norm(const dp_trainer_t *t) { return t->config.sync_batch_norm != 0; }
float dp_trainer_label_smoothing(const dp_trainer_t *t) { return t->config.label_smoothing; }
float dp_trainer_clip_grad_norm(const dp_trainer_t *t) { return t->config.clip_grad_norm; }
dp_mix_config_t dp_trainer_mix(const dp_trainer_t *t) { return t->config.mix; }
float dp_trainer_random_erase(const dp_trainer_t *t) { return t->config.random_erase; }
float dp_trainer_last_grad_norm(const dp_trainer_t *t) { return t->last_grad_norm; }
const dp_model_t *dp_trainer_model(const dp_trainer_t *t) { return t->model; }
const char *dp_trainer_device_names(const dp_trainer_t *t) { return t->device_names; }
const dp_backend_t *dp_trainer_backend(const dp_trainer_t *t) { return t->backend; }

size_t dp_trainer_device_memory_peak(const dp_trainer_t *t) {
    size_t peak = 0;
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        size_t p = be->memory_peak ? be->memory_peak(be->ctx) : 0;
        if (p > peak) peak = p;
    }
    return peak;
}
const char *dp_trainer_allreduce(const dp_trainer_t *t) { return t->allreduce; }

const char *dp_trainer_sync_strategy(const dp_trainer_t *t) { return t->sync->name; }

/* The shard's input x (n, C, H, W) in the replica's arena, converted from
 * its bytes (device memory of the backend), and its labels y. */
static dp_status_t load_shard(dp_replica_t *r, const dp_batch_t *shape, const uint8_t *pixels,
                              const int32_t *labels, int n, dp_tensor_t **x, const int32_t **y) {
    int dims[4] = {n, shape->channels, shape->height, shape->width};
    *x = dp_tape_tensor(r->tape, 4, dims);
    if (!*x) return DP_ERR_NOMEM;
    (*x)->data = dp_arena_floats(r->arena, dp_tensor_numel(*x));
    if (!(*x)->data) return DP_ERR_NOMEM;
    const dp_backend_t *be = r->backend;
    be->input_from_bytes(be->ctx, (*x)->data, pixels, n, shape->channels, (size_t)shape->height * shape->width,
                         shape->normalize);
    *y = labels;
    return be->failure ? be->failure(be->ctx) : DP_OK; /* an upload's failure named as itself */
}

/* The tape hook: after a node's backward, its parameters' gradients are
 * final (each parameter is used by one node, and nodes run in layer order,
 * which is parameter order, also with routes and skip connections). Only
 * pointers are compared: no gradient is read. */
static void backward_hook(void *ctx, int node_index, const dp_node_t *node) {
    dp_replica_t *r = ctx;
    (void)node_index;
    for (int i = 1; i < 3; i++) {
        const dp_tensor_t *p = node->in[i];
        if (p && p->grad >= r->grads && p->grad < r->grads + r->trainer->num_trainable) {
            size_t offset = (size_t)(p->grad - r->grads);
            if (offset < r->ready_from) r->ready_from = offset;
        }
    }
    r->trainer->sync->range_final(r);
}

/* Phase 1 on a device without examples (a short last batch with fewer
 * examples than devices): it contributes nothing, zero gradients and no
 * figures, yet takes part in whatever the others meet in: synchronised
 * batch norm's sums and, with an overlapping strategy, the buckets, all
 * final at once. */
static dp_status_t empty_shard(dp_replica_t *r, int last) {
    dp_trainer_t *t = r->trainer;
    if (t->config.sync_batch_norm) DP_TRY(dp_sync_batch_norm_absent(r));
    if (t->sync->range_final && last) {
        r->ready_from = 0;
        t->sync->range_final(r);
    }
    return DP_OK;
}

/* Phase 1 on device d (d2l's per-GPU part of train_batch): forward and
 * backward of the shard; the loss is divided by the global batch size.
 * With an overlapping strategy, backward also sums and applies finished
 * ranges. */
static dp_status_t shard_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    const int last = t->micro == t->last_micro; /* only then the hook and the strategy */
    dp_arena_reset(r->arena);
    dp_tape_reset(r->tape);
    if (t->micro == 0) { /* later micro-batches add to the gradients */
        r->backend->zero(r->backend->ctx, r->grads, sizeof(float) * t->num_trainable);
    }
    r->ready_from = t->num_trainable;
    if (r->count == 0) return empty_shard(r, last);
    dp_tensor_t *x, *logits, *loss;
    const int32_t *y;
    DP_TRY(load_shard(r, r->batch, r->shard_pixels, r->shard_labels, r->count, &x, &y));
    DP_TRY(dp_step_input_transform(r, x)); /* random erasing, Mixup, CutMix (step_input.c) */
    dp_forward_opts_t opts = {
        .training = 1,
        .seed = dp_seed_mix(t->config.seed, t->step_count),
        .example_offset = r->example_offset,
        .stat_sync = t->config.sync_batch_norm ? &r->stat_sync : NULL,
        .no_grad = r->no_grad,
    };
    DP_TRY(dp_model_forward_opts(t->model, r->tape, r->params, r->grads, x, &opts, &logits));
    dp_op_attr_t attr = dp_op_attr_default();
    attr.loss_denominator = (float)r->denominator;
    attr.label_smoothing = t->config.label_smoothing;
    const int32_t *answers; /* the labels the accuracy counts: y, or Mixup's and CutMix's heavier ones */
    loss = dp_mix_loss(r, logits, y, &attr, &answers); /* the cross-entropy; mixed targets' with mixing */
    if (!loss) return dp_error_status() != DP_OK ? dp_error_status() : DP_ERR_ARG;
    /* the shard's summed loss and correct count, added up on the device (read when asked for) */
    r->backend->count_metrics(r->backend->ctx, r->train_sums, loss->data, (double)r->denominator, logits->data,
                              answers, r->count, logits->shape[1]);
    if (!t->sync->range_final || !last) return dp_tape_backward(r->tape, loss, NULL, NULL);
    DP_TRY(dp_tape_backward(r->tape, loss, backward_hook, r));
    r->ready_from = 0; /* every gradient is final now */
    t->sync->range_final(r);
    return DP_OK;
}

/* Phase 1 as the device's task: with sync batch norm, a failure breaks the
 * barrier so that the other devices do not wait for this one. With an
 * overlapping strategy, a failed device still declares all its gradients
 * final, so that every bucket is summed and handed over as on the other
 * ranks (which would otherwise wait for it) and the step can be drained;
 * the step fails all the same. */
static dp_status_t shard_task_guarded(void *arg) {
    dp_replica_t *r = arg;
    dp_status_t status = shard_task(r);
    if (status != DP_OK && r->trainer->config.sync_batch_norm) dp_sync_batch_norm_break(r->trainer);
    if (status != DP_OK && r->trainer->sync->range_final && r->trainer->micro == r->trainer->last_micro) {
        r->ready_from = 0;
        r->trainer->sync->range_final(r);
    }
    return status;
}

/* Shard d of micro-batch `micro` of a step's batch of n: its first example
 * in the batch and its count (distributed_batch_reader across the ranks,
 * then split_and_load across this rank's devices). */
void dp_trainer_step_shard(const dp_trainer_t *t, int n, int micros, int micro, int d, int *first, int *count) {
    int micro_start, micro_count, rank_start, rank_count, start;
    dp_split_batch(n, micros, micro, &micro_start, &micro_count);
    dp_split_batch(micro_count, t->config.world.size, t->config.world.rank, &rank_start, &rank_count);
    dp_split_batch(rank_count, t->num_devices, d, &start, count);
    *first = micro_start + rank_start + start;
}

/* Which of a replica's input buffers a batch goes to. */
typedef enum { INPUT_STEP, INPUT_EVAL, INPUT_MIX_PARTNERS } input_kind_t;

static dp_input_buffers_t *input_buffers(dp_replica_t *r, input_kind_t kind) {
    return kind == INPUT_EVAL ? &r->eval_in : kind == INPUT_MIX_PARTNERS ? &r->mix_in : &r->step_in;
}

/* The input of a batch on every replica of a backend without host memory:
 * its shards of every micro-batch, one after the other, uploaded into the
 * replica's buffers (input_buffers: an evaluation's, a step's, or Mixup's
 * and CutMix's partners'; grown when a larger batch comes: that frees
 * device memory, so step graphs pointing there go stale and are captured
 * again). On host memory the shards are read from the batch itself. */
static dp_status_t stage_input(dp_trainer_t *t, const dp_batch_t *batch, int micros, input_kind_t kind) {
    const size_t example = (size_t)batch->channels * batch->height * batch->width;
    const int eval = kind == INPUT_EVAL;
    for (int d = 0; d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        dp_input_buffers_t *in = input_buffers(r, kind);
        const dp_backend_t *be = r->backend;
        if (be->host_memory) continue;
        size_t total = 0;
        for (int m = 0; m < micros; m++) {
            int first, count;
            dp_trainer_step_shard(t, batch->n, micros, m, d, &first, &count);
            total += (size_t)count;
        }
        if (total > in->cap || total * example > in->pixel_bytes) {
            be->free(be->ctx, in->pixels);
            be->free(be->ctx, in->labels);
            in->cap = in->pixel_bytes = 0;
            in->pixels = be->alloc(be->ctx, total * example + 1, eval ? "an evaluation's input bytes"
                                                                      : "a step's input bytes");
            in->labels = in->pixels ? be->alloc(be->ctx, sizeof(int32_t) * total + 1, "a batch's labels") : NULL;
            if (!in->labels) return DP_ERR_NOMEM;
            in->cap = total;
            in->pixel_bytes = total * example;
        }
        size_t used = 0;
        for (int m = 0; m < micros; m++) {
            int first, count;
            dp_trainer_step_shard(t, batch->n, micros, m, d, &first, &count);
            be->upload(be->ctx, in->pixels + used * example, batch->pixels + (size_t)first * example,
                       (size_t)count * example);
            be->upload(be->ctx, in->labels + used, batch->labels + first, sizeof(int32_t) * (size_t)count);
            used += (size_t)count;
        }
        if (be->failure) DP_TRY(be->failure(be->ctx));
    }
    return DP_OK;
}

/* Device r's shard [first, first + count) of a batch of Mixup's and
 * CutMix's partners (step_input.c), in the backend's memory. */
static void assign_partners(dp_replica_t *r, const dp_batch_t *partners, int micro, int first, int count) {
    dp_input_buffers_t *in = &r->mix_in;
    const size_t example = (size_t)partners->channels * partners->height * partners->width;
    if (micro == 0) in->used = 0;
    if (r->backend->host_memory) {
        r->partner_pixels = partners->pixels + (size_t)first * example;
        r->partner_labels = partners->labels + first;
    } else {
        r->partner_pixels = in->pixels + in->used * example;
        r->partner_labels = in->labels + in->used;
        in->used += (size_t)count;
    }
}

/* Every replica's shard of micro-batch `micro` (of micros) of the batch:
 * its count, where it lies in the batch, and its bytes and labels in the
 * backend's memory (the batch itself, or what stage_input uploaded); of a
 * training step that mixes, its partners' too. */
static void assign_shards(dp_trainer_t *t, const dp_batch_t *batch, int micros, int micro, int eval) {
    const size_t example = (size_t)batch->channels * batch->height * batch->width;
    const dp_batch_t *partners = eval ? NULL : t->mix_partners;
    for (int d = 0; d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        dp_input_buffers_t *in = eval ? &r->eval_in : &r->step_in;
        int first, count;
        dp_trainer_step_shard(t, batch->n, micros, micro, d, &first, &count);
        if (micro == 0) in->used = 0;
        r->batch = batch;
        r->count = count;
        r->denominator = batch->n; /* the whole step's batch: the micro-batches' gradients add up */
        r->example_offset = first;
        if (r->backend->host_memory) { /* the batch itself */
            r->shard_pixels = batch->pixels + (size_t)first * example;
            r->shard_labels = batch->labels + first;
        } else { /* what stage_input uploaded */
            r->shard_pixels = in->pixels + in->used * example;
            r->shard_labels = in->labels + in->used;
            in->used += (size_t)count;
        }
        if (partners) assign_partners(r, partners, micro, first, count);
    }
}

/* Micro-batches of a step of n: as many as asked while each still has an
 * example per device; fewer examples than devices (a short last batch):
 * one, some devices empty. */
static int step_micros(const dp_trainer_t *t, int n) {
    int micros = t->config.accumulate;
    while (micros > 1 && n / micros < t->num_devices * t->config.world.size) micros--;
    return micros;
}

/* Adds [start, start + count) to the ascending, disjoint ranges so far
 * (*ranges of them; those past max only counted), merged with the last
 * when it meets it. Ranges come in ascending order of start. */
static void add_range(int start, int count, int *first, int *counts, int max, int *ranges) {
    if (count <= 0) return;
    int last = *ranges - 1;
    if (last >= 0 && last < max && start <= first[last] + counts[last]) {
        int end = start + count > first[last] + counts[last] ? start + count : first[last] + counts[last];
        counts[last] = end - first[last];
        return;
    }
    if (*ranges < max) {
        first[*ranges] = start;
        counts[*ranges] = count;
    }
    (*ranges)++;
}

int dp_trainer_batch_share(void *trainer, int n, int *first, int *count, int max) {
    const dp_trainer_t *t = trainer;
    /* Mixup and CutMix: each example's partner, the one before it (the
     * first's: the last), is read by the same rank (random erasing needs
     * no other example) */
    const int partners = dp_mix_on(&t->config.mix) && t->config.world.size > 1;
    int micros = step_micros(t, n), ranges = 0, wraps = 0;
    for (int m = 0; m < micros; m++) {
        int micro_start, micro_count, rank_start, rank_count;
        dp_split_batch(n, micros, m, &micro_start, &micro_count);
        dp_split_batch(micro_count, t->config.world.size, t->config.world.rank, &rank_start, &rank_count);
        if (rank_count == 0) continue;
        int start = micro_start + rank_start;
        if (partners && start == 0) wraps = 1;
        if (partners && start > 0) add_range(start - 1, rank_count + 1, first, count, max, &ranges);
        else add_range(start, rank_count, first, count, max, &ranges);
    }
    if (wraps) add_range(n - 1, 1, first, count, max, &ranges);
    return ranges;
}

dp_status_t dp_trainer_step(dp_trainer_t *t, const dp_batch_t *batch, double *loss_sum, int *correct) {
    int k = t->num_devices, n = batch->n;
    if (n < 1) return dp_fail(DP_ERR_ARG, "a step needs at least one example, found a batch of %d", n);
    if (t->ema_swapped) return dp_fail(DP_ERR_ARG, "step: the moving average is swapped in (dp_trainer_ema_swap it back)");
    /* before a device reads its bytes */
    DP_TRY(dp_model_check_input(t->model, dp_model_name(t->model), "step: the batch's", batch->channels,
                                batch->height, batch->width));
    if (!batch->pixels || !batch->labels)
        return dp_fail(DP_ERR_ARG, "step: the batch has no %s (NULL)", !batch->pixels ? "pixels" : "labels");
    int micros = step_micros(t, n);
    for (int d = 0; d < k && t->replicas[0].profiler; d++) DP_TRY(dp_profiler_step_begin(t->replicas[d].profiler));
    /* random erasing, Mixup and CutMix: the boxes, and the partners beside their examples */
    DP_TRY(dp_step_input_prepare(t, batch, micros, &t->mix_partners));
    if (t->mix_partners) DP_TRY(stage_input(t, t->mix_partners, micros, INPUT_MIX_PARTNERS));
    DP_TRY(stage_input(t, batch, micros, INPUT_STEP));
    int done = 0;
    dp_status_t status = t->graph_why ? DP_OK : dp_step_graph_step(t, batch, micros, &done); /* step_graph.c */
    if (status == DP_OK && !done) status = dp_trainer_step_devices(t, batch, micros);
    if (status != DP_OK) { /* the devices that got through added their part: the figures not read are dropped */
        char message[1024];
        snprintf(message, sizeof message, "%s", dp_error_message());
        (void)dp_trainer_read_metrics(t, NULL, NULL, 1);
        return dp_fail(status, "%s", message);
    }
    for (int d = 0; d < k && t->replicas[0].profiler; d++) DP_TRY(dp_profiler_step_end(t->replicas[d].profiler));
    /* asked for: this step's figures (and any unread before it) now, one download per backend table */
    return loss_sum || correct ? dp_trainer_read_metrics(t, loss_sum, correct, 1) : DP_OK;
}

dp_status_t dp_trainer_step_devices(dp_trainer_t *t, const dp_batch_t *batch, int micros) {
    int k = t->num_devices, ranks = t->config.world.size, n = batch->n;
    t->last_micro = micros - 1;
    t->empty_shards = n < k * ranks; /* then micros is 1 (dp_trainer_step) */
    double mpi_start = 0.0;
    dp_status_t status = DP_OK;
    for (t->micro = 0; t->micro < micros && status == DP_OK; t->micro++) {
        assign_shards(t, batch, micros, t->micro, 0);
        if (t->config.sync_batch_norm) dp_sync_batch_norm_rearm(t); /* no device is inside a task now */
        if (t->micro == t->last_micro) {
            if (t->sync->begin_step) t->sync->begin_step(t);
            mpi_start = dp_world_mpi_seconds();
        }
        /* with an overlapping strategy, the last micro-batch also summed and
         * applied every bucket (one rank) or handed it to the communication
         * thread (several) */
        status = dp_trainer_run_on_all(t, shard_task_guarded);
    }
    if (status != DP_OK && t->micro <= t->last_micro) return status; /* the strategy never started */
    double sync_start = monotonic_sec();
    if (t->sync->drain) { /* what is still being summed across ranks */
        dp_status_t drained = t->sync->drain(t);
        if (status == DP_OK) status = drained;
    }
    if (status != DP_OK) return status;
    if (t->stat_status != DP_OK) return dp_fail(t->stat_status, "%s", t->stat_error);
    if (!t->sync->drain) mpi_start = dp_world_mpi_seconds();
    if (t->sync->end_step) DP_TRY(t->sync->end_step(t));
    t->sync_sec += monotonic_sec() - sync_start;
    t->mpi_sec += dp_world_mpi_seconds() - mpi_start;
    t->step_count++;
    return DP_OK;
}

/* Evaluation on device d: forward its shard of an evaluation batch and
 * count it. */
static dp_status_t evaluate_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    if (r->count == 0) return DP_OK;
    dp_arena_reset(r->arena);
    dp_tape_reset(r->tape);
    dp_tensor_t *x, *logits;
    const int32_t *y;
    DP_TRY(load_shard(r, r->batch, r->shard_pixels, r->shard_labels, r->count, &x, &y));
    /* Through the runner (no_grad.h), unless the steps have already made the
     * step's arena larger than every output of this forward would take
     * (the inference cap's count, nn.h): then that memory is there anyway,
     * and the runner's arenas would be more of it. */
    int fits = dp_model_inference_bytes(t->model, r->count) <= dp_arena_peak(r->arena);
    dp_forward_opts_t opts = {.no_grad = fits ? NULL : r->no_grad};
    DP_TRY(dp_model_forward_opts(t->model, r->tape, r->params, NULL, x, &opts, &logits));
    r->backend->count_metrics(r->backend->ctx, r->eval_sums, NULL, 0.0, logits->data, y, r->count, logits->shape[1]);
    if (t->confusion) /* the batch's host labels at the shard's place */
        DP_TRY(dp_confusion_add_shard(t->confusion, r, logits->data, r->batch->labels + r->example_offset, r->count));
    return DP_OK;
}

/* The batch loader's share of an evaluation batch of n: this rank's part. */
static int evaluation_share(void *trainer, int n, int *first, int *count, int max) {
    const dp_trainer_t *t = trainer;
    int start, cnt;
    dp_split_batch(n, t->config.world.size, t->config.world.rank, &start, &cnt);
    if (cnt > 0 && max >= 1) {
        first[0] = start;
        count[0] = cnt;
    }
    return cnt > 0;
}

/* An evaluation batch capped so that every layer's output would fit
 * DP_INFERENCE_ARENA_BYTES (nn.h; the runner, no_grad.h, holds a few at a
 * time, without it the arena holds them all). LeNet's 1000 stays as it is;
 * ResNet-18's 1000 would take over 5 GB per device without the runner. */
static int eval_batch_cap(const dp_model_t *m, int batch_size) {
    int cap = dp_model_inference_batch_cap(m, DP_INFERENCE_ARENA_BYTES);
    return batch_size < cap ? batch_size : cap;
}

dp_status_t dp_trainer_evaluate(dp_trainer_t *t, dp_batch_source_t *source, int batch_size, int *correct) {
    return dp_trainer_evaluate_threads(t, source, batch_size, 0, correct);
}

dp_status_t dp_trainer_evaluate_threads(dp_trainer_t *t, dp_batch_source_t *source, int batch_size, int threads,
                                        int *correct) {
    return dp_trainer_evaluate_confusion(t, source, batch_size, threads, NULL, correct);
}

dp_status_t dp_trainer_evaluate_confusion(dp_trainer_t *t, dp_batch_source_t *source, int batch_size, int threads,
                                          int64_t *confusion, int *correct) {
    if (!source || !correct)
        return dp_fail(DP_ERR_ARG, "evaluate: no %s given (NULL)", !source ? "source" : "place for the count");
    dp_eval_counts_t counts;
    DP_TRY(dp_trainer_evaluate_counts(t, source, batch_size, threads, confusion, &counts));
    *correct = counts.correct;
    return DP_OK;
}

dp_status_t dp_trainer_evaluate_counts(dp_trainer_t *t, dp_batch_source_t *source, int batch_size, int threads,
                                       int64_t *confusion, dp_eval_counts_t *counts) {
    if (batch_size < 1) return dp_fail(DP_ERR_ARG, "evaluation batch size must be >= 1");
    if (!source || !counts)
        return dp_fail(DP_ERR_ARG, "evaluate: no %s given (NULL)", !source ? "source" : "place for the counts");
    const dp_source_info_t *info = dp_batch_source_info(source);
    DP_TRY(dp_model_check_input(t->model, dp_model_name(t->model), "evaluate: the source's", info->channels,
                                info->height, info->width));
    /* global batches of eval_batch per device, the source's samples in order */
    const int count = dp_batch_source_info(source)->count;
    long global = (long)eval_batch_cap(t->model, batch_size) * t->num_devices * t->config.world.size;
    const dp_batch_loader_config_t lc = {.batch_size = global < count ? (int)global : count, .seed = t->config.seed,
                                         .threads = threads, .share = evaluation_share, .share_ctx = t};
    dp_batch_loader_t *loader = NULL;
    dp_confusion_t matrix;
    const int classes = dp_model_num_outputs(t->model);
    if (confusion) DP_TRY(dp_confusion_init(&matrix, t->num_devices, classes));
    dp_status_t status = dp_batch_loader_new(source, &lc, &loader);
    if (status == DP_OK) status = dp_trainer_metrics_move(t, 1, 0, 1); /* zeroed, queued before the tasks' counts */
    t->confusion = confusion ? &matrix : NULL;
    for (;;) {
        const dp_batch_t *batch;
        if (status != DP_OK || (status = dp_batch_loader_next(loader, &batch)) != DP_OK || !batch) break;
        if ((status = stage_input(t, batch, 1, INPUT_EVAL)) != DP_OK) break;
        assign_shards(t, batch, 1, 0, 1);
        status = dp_trainer_run_on_all(t, evaluate_task);
    }
    t->confusion = NULL;
    dp_batch_loader_free(loader);
    if (confusion && status == DP_OK) status = dp_confusion_total(&matrix, confusion);
    if (confusion) dp_confusion_free(&matrix);
    DP_TRY(status);
    DP_TRY(dp_trainer_metrics_move(t, 1, 1, 0)); /* every device's counts: one download per backend table */
    const int m = DP_METRICS_SUMS;
    const double *per_device = t->host_metrics + m * t->num_devices;
    double total[2] = {0.0, 0.0}; /* correct, top-5 */
    for (int d = 0; d < t->num_devices; d++) {
        int device_correct = 0, device_top5 = 0;
        DP_TRY(dp_trainer_metrics_count(t, d, "correct", per_device[m * d + 1], &device_correct));
        DP_TRY(dp_trainer_metrics_count(t, d, "top-5", per_device[m * d + 2], &device_top5));
        total[0] += device_correct;
        total[1] += device_top5;
    }
    DP_TRY(dp_world_sum_doubles(total, 2));
    *counts = (dp_eval_counts_t){.correct = (int)total[0], .top5 = (int)total[1]};
    return DP_OK;
}

double dp_trainer_sync_seconds(const dp_trainer_t *t, double *in_mpi) {
    if (in_mpi) *in_mpi = t->mpi_sec;
    return t->sync_sec;
}

dp_status_t dp_trainer_profile(dp_trainer_t *t, int device, const dp_profile_report_t **out) {
    *out = NULL;
    DP_ASSERT(device >= 0 && device < t->num_devices);
    if (!t->replicas[device].profiler) return dp_fail(DP_ERR_ARG, "profile: this trainer does not profile (profile_steps 0)");
    return dp_profiler_report(t->replicas[device].profiler, out);
}

/* Replica d's parameters as the host reads them: its own memory on a
 * backend of host memory (read in place: no copy of ResNet-50's 102 MB a
 * replica made), else its host copy (dp_trainer_params downloads it). */
static const float *params_on_host(const dp_trainer_t *t, int d) {
    const dp_replica_t *r = &t->replicas[d];
    return r->backend->host_memory ? r->params : r->host_params;
}

dp_status_t dp_trainer_check_replicas(dp_trainer_t *t) {
    size_t bytes = sizeof(float) * t->num_params;
    for (int d = 0; d < t->num_devices; d++)
        if (!t->replicas[d].backend->host_memory) dp_trainer_params(t, d); /* into its host copy */
    DP_TRY(dp_trainer_check_devices(t)); /* a failed download is not a difference */
    const float *first = params_on_host(t, 0);
    for (int d = 1; d < t->num_devices; d++)
        if (memcmp(params_on_host(t, d), first, bytes) != 0)
            return dp_fail(DP_ERR_ARG, "internal error: the parameters of %s differ from %s's",
                           dp_device_name(t->devices[d]), dp_device_name(t->devices[0]));
    return dp_world_check_same(&t->config.world, "parameters", first, bytes);
}
