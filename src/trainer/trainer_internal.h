/* trainer_internal.h - what the trainer (trainer.c) and its synchronisation
 * strategies (sync_*.c) share: the replica, the trainer's state, and the
 * small interface every strategy implements. Library internal.
 *
 * A step (trainer.c) is: the strategy's begin_step on the caller's thread;
 * phase 1 on every device (forward, backward), during which an overlapping
 * strategy's range_final is called on the device's thread each time more of
 * that replica's gradients are final; then, on the caller's thread, the
 * strategy's drain (work it still has in flight, also after a failure) and,
 * if phase 1 succeeded, its end_step (the sum and the update of whatever
 * was not done during backward, and the buffers). One file per strategy:
 *   sync_local_chunked.c  one process, reduce-scatter + all-gather over shared memory
 *   sync_local_naive.c    one process, device 0 sums everything (the seeds' version)
 *   sync_overlap.c        one process, buckets summed while backward runs
 *   sync_mpi.c            several processes, hierarchical, with or without overlap
 *   sync_ps.c             the parameter server
 *   sync_peer.c           devices on distinct GPUs: NCCL (the backend's peer
 *                         collectives), in one process or across ranks,
 *                         with or without overlap
 * and sync_batch_norm.c: batch statistics summed across devices inside the
 * forward (orthogonal to the strategy).
 * Every memory access to a replica goes through its device's backend
 * (backend.h): the strategies sum, copy and update ranges with its
 * reduce_range, broadcast_range and optimizer_update; what MPI reads or
 * writes is staged through host memory (dp_trainer_stage_down/up) when the
 * backend's memory is not host memory.
 */
#ifndef DPTRAIN_TRAINER_INTERNAL_H
#define DPTRAIN_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "dptrain/autograd.h"
#include "dptrain/backend.h"
#include "dptrain/device.h"
#include "dptrain/parallel.h"

/* Gradient bucket size for the overlapped and the MPI sums: 64 KB. LeNet's
 * 129,068 parameters make 8 buckets. */
#define DP_BUCKET_FLOATS ((size_t)16384)

typedef struct dp_replica {
    float *params; /* (num_params) this replica's copy of the parameters; device memory */
    float *grads;  /* (num_trainable + 1) gradient of the global mean loss, this shard's part; device memory */
    dp_arena_t *arena; /* device memory: activations, the batch */
    dp_tape_t *tape;
    dp_optimizer_t *optimizer;
    dp_device_t *device;
    const dp_backend_t *backend; /* the device's */
    float *host_params;  /* (num_params) host copy made by dp_trainer_params / check_replicas */
    int *host_indices;   /* (eval_batch) evaluation: the examples of one batch */
    float *host_batch;   /* (host_batch_size) a shard augmented on the host, for a backend */
    int32_t *host_labels; /* without load_batch_augmented: uploaded from here */
    size_t host_batch_size, host_labels_size;
    /* the current task's arguments and results */
    dp_trainer_t *trainer;
    int index;
    const dp_dataset_t *ds;
    const int *indices;
    int count, denominator, eval_batch;
    /* device memory the backend's count_metrics adds a batch's figures to:
     * train_sums (2: loss, correct) the steps' not read yet
     * (dp_trainer_read_metrics), eval_sums (2) an evaluation's; both in
     * the block of the first replica on the same backend table
     * (metrics_owner), so that reading every device on one GPU is one
     * download */
    double *train_sums, *eval_sums;
    double *metrics_block; /* the owner's: (4 x metrics_slots) [training | evaluation], else NULL */
    int metrics_owner, metrics_slot, metrics_slots;
    size_t ready_from; /* overlap: grads at offsets >= this are final this step */
    long next_bucket;  /* overlap: the highest bucket this device has not counted yet */
    int64_t example_offset; /* global index of the shard's first example in the minibatch */
    dp_stat_sync_t stat_sync; /* sync batch norm: stat_sum over this replica */
    double *stat_values;      /* sync batch norm: this device's sums, while they are combined */
    int stat_count;
} dp_replica_t;

/* A synchronisation strategy. NULL members do nothing. */
typedef struct dp_sync_strategy {
    const char *name;
    /* After the replicas exist (parameters initialised, equal); allocates
     * the strategy's state. release undoes it and waits for anything the
     * strategy still has in flight; it may run after a failed init. */
    dp_status_t (*init)(dp_trainer_t *t);
    void (*release)(dp_trainer_t *t);
    /* Caller's thread, before phase 1. */
    void (*begin_step)(dp_trainer_t *t);
    /* Device r's thread, during backward: r->ready_from has moved down,
     * gradients at offsets >= r->ready_from are final for this step (0:
     * all, also when the device failed). Set only by overlapping strategies. */
    void (*range_final)(dp_replica_t *r);
    /* Caller's thread after phase 1, even when it failed: waits for what is
     * in flight. A strategy with a drain is timed in MPI from before phase 1. */
    dp_status_t (*drain)(dp_trainer_t *t);
    /* Caller's thread after a successful phase 1: the rest of the sum and
     * the update, and the buffers (dp_trainer_sync_buffers). */
    dp_status_t (*end_step)(dp_trainer_t *t);
} dp_sync_strategy_t;

extern const dp_sync_strategy_t dp_sync_local_chunked, dp_sync_local_naive, dp_sync_overlap,
    dp_sync_mpi, dp_sync_mpi_overlap, dp_sync_ps, dp_sync_peer, dp_sync_peer_overlap;

/* A reusable barrier for the k forward tasks of one step (sync batch norm)
 * that a failing task can break. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int count, waiting, broken;
    unsigned long generation;
} dp_stat_barrier_t;

struct dp_trainer {
    dp_trainer_config_t config;
    const dp_model_t *model;
    const dp_backend_t *backend; /* device 0's (every device's unless split_sum) */
    const dp_sync_strategy_t *sync;
    void *sync_state;        /* the strategy's own */
    size_t num_params;
    size_t num_trainable;    /* the first num_trainable floats have gradients */
    long num_buckets;        /* DP_BUCKET_FLOATS ranges of the gradients */
    int num_devices;
    dp_replica_t *replicas;
    dp_device_t **devices;   /* (num_devices) */
    float **grad_buffers;    /* (num_devices) replicas[d].grads */
    float **param_buffers;   /* (num_devices) replicas[d].params */
    int ranks;               /* config.world.size, >= 1 */
    float *split_sum, *split_part; /* (num_params + 1) each when the devices are on several
                                backend tables (config.backends): replica_collectives.c's host
                                buffers; NULL: one table */
    double *host_metrics;    /* (4 x num_devices) a metrics block's download [0, 2k), the
                                sums per device in device order [2k, 4k) */
    float *host_stage;       /* (num_params + 1) with ranks > 1 on a backend without host_memory:
                                what MPI sums and broadcasts, staged through host memory */
    double sync_sec;         /* time in phases 2 and 3, all steps */
    double mpi_sec;          /* the part of it inside MPI_Allreduce */
    uint64_t step_count;     /* steps taken since initialisation (checkpoints restore it) */
    int epoch;               /* dp_trainer_set_position: augmentation's epoch ... */
    int64_t first_position;  /* ... and the position of the step's first example in it */
    int augment;             /* config.augment asks for anything */
    int micro, last_micro;   /* the micro-batch phase 1 runs now, and the step's last one */
    /* the parameter server (sync_ps.c) */
    dp_device_t *server;
    float *server_params, *server_grads; /* (num_params), (num_trainable + 1): server device memory */
    dp_optimizer_t *server_optimizer;
    /* sync batch norm (sync_batch_norm.c) */
    dp_stat_barrier_t barrier;
    int barrier_ready;
    dp_status_t stat_status; /* device 0's failure inside a forward */
    char stat_error[512];
    char device_names[4096]; /* "cpu:0,cpu:1,...": room for 256 ids up to 4095 */
    /* sync_peer.c: the NCCL group of every device of every rank (NULL: the
     * host paths), and what dp_trainer_allreduce says */
    dp_peer_group_t *peer_group;
    char allreduce[160];
};

/* Bucket b of the gradients: [*start, *start + *count). */
static inline void dp_bucket_range(const dp_trainer_t *t, long b, size_t *start, size_t *count) {
    *start = (size_t)b * DP_BUCKET_FLOATS;
    *count = t->num_trainable - *start < DP_BUCKET_FLOATS ? t->num_trainable - *start : DP_BUCKET_FLOATS;
}

/* replica_collectives.c: the sums and copies among the replicas, through
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

/* trainer.c: with a host staging buffer (t->host_stage: a backend without
 * host_memory and several ranks), these move [start, start + count) of a
 * device buffer to the same offsets of host_stage and back; without one
 * they return the device pointer itself (MPI may use it). */
float *dp_trainer_stage_down(dp_trainer_t *t, const float *device_buffer, size_t start, size_t count);
void dp_trainer_stage_up(dp_trainer_t *t, float *device_buffer, size_t start, size_t count);
/* trainer.c: every optimizer's device copy = its host buffers (after a
 * restore wrote them: fit.c's resume). */
void dp_trainer_optimizers_uploaded(dp_trainer_t *t);

/* trainer.c: submits fn(replica d) to every device and waits for all. */
dp_status_t dp_trainer_run_on_all(dp_trainer_t *t, dp_task_fn fn);
/* trainer.c: dp_optimizer_begin_step on every replica's optimizer. */
void dp_trainer_begin_optimizer_steps(dp_trainer_t *t);
/* trainer.c: buffers (running statistics) after a step: rank 0's replica 0
 * everywhere. */
dp_status_t dp_trainer_sync_buffers(dp_trainer_t *t);

/* trainer.c: replica 0's gradient range holds the sum: copy it to the
 * other replicas and update the range in every replica. */
void dp_sync_broadcast_update(dp_trainer_t *t, size_t start, size_t count);
/* trainer.c: sums the gradient range over all replicas into replica 0
 * (device order). */
void dp_sync_reduce_to_first(dp_trainer_t *t, size_t start, size_t count);

/* sync_overlap.c: the bucket counting that the overlapping strategies share.
 * The device that counts bucket b last calls complete(t, b). */
typedef struct dp_bucket_counter {
    atomic_int *done; /* (num_buckets) devices that have counted the bucket this step */
    void (*complete)(dp_trainer_t *t, long b);
} dp_bucket_counter_t;
dp_status_t dp_bucket_counter_init(dp_bucket_counter_t *c, const dp_trainer_t *t,
                                   void (*complete)(dp_trainer_t *t, long b));
void dp_bucket_counter_release(dp_bucket_counter_t *c);
void dp_bucket_counter_begin_step(dp_bucket_counter_t *c, dp_trainer_t *t);
void dp_bucket_counter_count(dp_bucket_counter_t *c, dp_replica_t *r);

/* sync_peer.c: with the replicas made, chooses NCCL or the host paths
 * (the same choice on every rank: a collective with ranks > 1) and makes
 * t->peer_group for NCCL; dp_sync_peer_release frees it. */
dp_status_t dp_sync_peer_choose(dp_trainer_t *t);
void dp_sync_peer_release(dp_trainer_t *t);

/* sync_batch_norm.c */
dp_status_t dp_sync_batch_norm_init(dp_trainer_t *t);
void dp_sync_batch_norm_release(dp_trainer_t *t);
void dp_sync_batch_norm_rearm(dp_trainer_t *t);
void dp_sync_batch_norm_break(dp_trainer_t *t);
/* dp_stat_sync_t.sum (ctx: the replica) */
void dp_sync_batch_norm_sum(void *ctx, double *values, int count);

#endif
