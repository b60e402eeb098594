/* replica.h - a replica (one device's copy of the model, its gradients,
 * optimizer and scratch) and the operations over every replica of a trainer
 * that the synchronisation strategies (sync_*.c) and the trainer (trainer.c)
 * share: replica.c (tasks on every device, the optimizers, the buffers after
 * a step, MPI's host staging), replica_collectives.c (sums and copies
 * among the replicas) and clip_grad.c (gradient clipping). Library
 * internal; below the strategies and the trainer: nothing here calls
 * either.
 */
#ifndef DPTRAIN_REPLICA_H
#define DPTRAIN_REPLICA_H

#include "dptrain/autograd.h"
#include "dptrain/backend.h"
#include "dptrain/batch_source.h"
#include "dptrain/device.h"
#include "dptrain/parallel.h"

/* Device memory a batch's shards are uploaded into (trainer.c's
 * stage_input): this replica's shards of every micro-batch, one after the
 * other, grown when a larger batch comes (which frees device memory). */
typedef struct {
    uint8_t *pixels;      /* (cap, C, H, W) */
    int32_t *labels;      /* (cap) */
    size_t cap, pixel_bytes; /* examples, bytes */
    size_t used;          /* examples of them the earlier micro-batches took */
} dp_input_buffers_t;

typedef struct dp_replica {
    float *params; /* (num_params) this replica's copy of the parameters; device memory */
    float *ema;    /* (num_params) the model's moving average (config.model_ema), else NULL; device memory */
    float *grads;  /* (num_trainable + 1) gradient of the global mean loss, this shard's part; device memory */
    dp_arena_t *arena; /* device memory: activations, the batch */
    dp_tape_t *tape;
    struct dp_no_grad *no_grad; /* the layers no backward reads: an evaluation's, a fine-tuning step's frozen
                                   prefix (no_grad.h); NULL with DPTRAIN_FORWARD_LIVENESS=off */
    dp_profiler_t *profiler; /* config.profile_steps > 0: the tape's (profile.h); else NULL */
    dp_optimizer_t *optimizer;
    dp_device_t *device;
    const dp_backend_t *backend; /* the device's */
    float *host_params;  /* (num_params) host copy made by dp_trainer_params / check_replicas */
    /* the input on a backend without host memory (dp_input_buffers_t):
     * a training step's (a step graph reads them there) and an
     * evaluation's, apart, so that an evaluation's larger batches leave
     * the graphs' buffers as they are; host memory: the batch's own */
    dp_input_buffers_t step_in, eval_in;
    dp_input_buffers_t mix_in;    /* Mixup and CutMix: the partners' bytes and labels (step_input.c) */
    /* the current task's arguments and results */
    dp_trainer_t *trainer;
    int index;
    const dp_batch_t *batch;      /* the step's or the evaluation's */
    const uint8_t *shard_pixels;  /* the current shard (training): device memory of the backend */
    const int32_t *shard_labels;
    const uint8_t *partner_pixels; /* Mixup and CutMix: the shard's partners' bytes (batch_mix.h), device memory */
    const int32_t *partner_labels; /* Mixup and CutMix: their labels, device memory */
    int count, denominator;
    /* device memory the backend's count_metrics adds a batch's figures to:
     * train_sums (DP_METRICS_SUMS: loss, correct, top-5) the steps' not
     * read yet (dp_trainer_read_metrics), eval_sums (DP_METRICS_SUMS) an
     * evaluation's; both in
     * the block of the first replica on the same backend table
     * (metrics_owner), so that reading every device on one GPU is one
     * download */
    double *train_sums, *eval_sums;
    double *metrics_block; /* the owner's: (2 DP_METRICS_SUMS x metrics_slots) [training | evaluation],
                              else NULL */
    int metrics_owner, metrics_slot, metrics_slots;
    size_t ready_from; /* overlap: grads at offsets >= this are final this step */
    long next_bucket;  /* overlap: the highest bucket this device has not counted yet */
    int64_t example_offset; /* global index of the shard's first example in the minibatch */
    dp_stat_sync_t stat_sync; /* sync batch norm: stat_sum over this replica */
    double *stat_values;      /* sync batch norm: this device's sums, while they are combined */
    int stat_count;
} dp_replica_t;

/* replica.c */
/* With a host staging buffer (t->host_stage: a backend without
 * host_memory and several ranks), these move [start, start + count) of a
 * device buffer to the same offsets of host_stage and back; without one
 * they return the device pointer itself (MPI may use it). */
float *dp_trainer_stage_down(dp_trainer_t *t, const float *device_buffer, size_t start, size_t count);
void dp_trainer_stage_up(dp_trainer_t *t, float *device_buffer, size_t start, size_t count);
/* Every optimizer's device copy = its host buffers (after a
 * restore wrote them: fit.c's resume). */
void dp_trainer_optimizers_uploaded(dp_trainer_t *t);

/* Submits fn(replica d) to every device and waits for all. */
dp_status_t dp_trainer_run_on_all(dp_trainer_t *t, dp_task_fn fn);
/* A new optimizer over the trained floats (config.optim), its weight-decay
 * groups said (nn.h dp_model_decay_ranges): a replica's, the server's. */
dp_status_t dp_trainer_optimizer_new(const dp_trainer_t *t, dp_optimizer_t **out);

/* dp_optimizer_begin_step on every replica's optimizer. */
void dp_trainer_begin_optimizer_steps(dp_trainer_t *t);
/* Buffers (running statistics) after a step: rank 0's replica 0
 * everywhere (NCCL's broadcast where the GPUs sum with NCCL, else MPI and
 * host memory). */
dp_status_t dp_trainer_sync_buffers(dp_trainer_t *t);

/* Replica 0's gradient range holds the sum: copy it to the
 * other replicas and update the range in every replica. */
void dp_sync_broadcast_update(dp_trainer_t *t, size_t start, size_t count);
/* Sums the gradient range over all replicas into replica 0
 * (device order). */
void dp_sync_reduce_to_first(dp_trainer_t *t, size_t start, size_t count);

/* The chunks of replica 0's gradients (dp_chunk_range, one per device)
 * copied to every replica and updated there: one task per device, waited
 * for. */
dp_status_t dp_sync_broadcast_update_chunks(dp_trainer_t *t);

/* clip_grad.c: gradient clipping (the trainer's config.clip_grad_norm).
 *   dp_clipping: whether the trainer clips;
 *   dp_clip_gradients: grads (be's memory, num_trainable floats) holds the
 *     step's whole summed gradient: its norm and coefficient kept
 *     (t->last_grad_norm, t->clip_coef) and it is scaled; nothing without
 *     clipping;
 *   dp_clip_scale: another buffer holding the same sum scaled alike. */
int dp_clipping(const dp_trainer_t *t);
/* model_ema.c: every replica's moving average made (its model's copy; a
 * backend without ema_update refused in one line). */
dp_status_t dp_model_ema_init(dp_trainer_t *t);
dp_status_t dp_clip_gradients(dp_trainer_t *t, const dp_backend_t *be, float *grads);
void dp_clip_scale(const dp_trainer_t *t, const dp_backend_t *be, float *grads);

/* replica.c: the replica's device (joined first), memory, tape, optimizer. */
void dp_replica_free(dp_replica_t *r);

/* replica_collectives.c */
/* The sums and copies among the replicas, through
 * the backend's collectives when every device is on one table, through host
 * memory when they are on several (t->split_sum); the same bits either way.
 * Calls at once from several threads must have disjoint ranges.
 *   dp_replicas_reduce: dst[start, start + count) (memory of dst_backend) =
 *     the sum of every replica's grads over the range, in device order;
 *   dp_replicas_broadcast: buffers[e][range] = buffers[source][range] for
 *     every replica e (buffers: t->grad_buffers or t->param_buffers);
 *   dp_replica_copy_in: r->params[range] = src[range] (memory of
 *     src_backend; through r->host_params when the tables differ). */
void dp_replicas_reduce(dp_trainer_t *t, const dp_backend_t *dst_backend, float *dst, size_t start,
                        size_t count);
void dp_replicas_broadcast(dp_trainer_t *t, float *const *buffers, int source, size_t start, size_t count);
void dp_replica_copy_in(dp_replica_t *r, const dp_backend_t *src_backend, const float *src, size_t start,
                        size_t count);

#endif
