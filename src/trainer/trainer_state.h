/* trainer_state.h - the trainer's state (struct dp_trainer): what
 * trainer.c owns and the strategies, replica.c, replica_collectives.c and
 * buckets.c read. Types only; library internal.
 */
#ifndef DPTRAIN_TRAINER_STATE_H
#define DPTRAIN_TRAINER_STATE_H

#include <pthread.h>

#include "replica.h"

struct dp_sync_strategy;

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
    const struct dp_sync_strategy *sync;
    void *sync_state;        /* the strategy's own */
    size_t num_params;
    size_t num_trainable;    /* the first num_trainable floats have gradients */
    size_t buffers_at;       /* the buffers (running statistics) are [buffers_at, num_params); the frozen
                                parameters (dp_model_freeze) lie between: [num_trainable, buffers_at) */
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
    double *host_metrics;    /* (2m x num_devices, m = DP_METRICS_SUMS) a metrics block's
                                download [0, mk), the sums per device in device order
                                [mk, 2mk) */
    float *host_stage;       /* (num_params + 1) with ranks > 1 on a backend without host_memory:
                                what MPI sums and broadcasts, staged through host memory */
    double sync_sec;         /* time in phases 2 and 3, all steps */
    double mpi_sec;          /* the part of it inside MPI_Allreduce */
    uint64_t step_count;     /* steps taken since initialisation (checkpoints restore it) */
    float last_grad_norm;    /* clipping: the last step's total gradient norm (NaN: none yet) */
    float clip_coef;         /* clipping: the factor of this step's gradients (clip_grad.c) */
    dp_grad_norm_stats_t norm_stats; /* clipping: the norms since dp_trainer_grad_norms last reset them */
    uint64_t ema_updates;    /* model_ema: the updates the average counts (0: the next copies the model) */
    int ema_swapped;         /* model_ema: the replicas' params hold the average (dp_trainer_ema_swap) */
    float ema_decay, ema_one_minus_decay; /* model_ema: the current update's factors */
    int micro, last_micro;   /* the micro-batch phase 1 runs now, and the step's last one */
    /* Mixup, CutMix and random erasing (step_input.c): this step's draw,
     * and what the devices read beside the batch: host memory, at the
     * positions of this rank's shards */
    dp_mix_t mix;
    dp_batch_t mix_partner_batch;
    const dp_batch_t *mix_partners; /* this step's partners (&mix_partner_batch), NULL: no mixing */
    uint8_t *mix_partner;    /* (mix_cap, C, H, W) the partners' bytes */
    int32_t *mix_labels;     /* (mix_cap) the partners' labels */
    int32_t *input_boxes;    /* (3, mix_cap, 4) each example's erasing, its partner's, CutMix's:
                                {y1, y2, x1, x2} (backend.h paste_boxes) */
    size_t mix_cap, mix_example_bytes;
    int empty_shards;        /* this step has devices without examples (a short last batch with
                                fewer examples than devices of all ranks: the same on every rank) */
    /* the parameter server (sync_ps.c) */
    dp_device_t *server;
    float *server_params, *server_grads; /* (num_params), (num_trainable + 1): server device memory */
    dp_optimizer_t *server_optimizer;
    /* sync batch norm (sync_batch_norm.c) */
    dp_stat_barrier_t barrier;
    int barrier_ready;
    dp_status_t stat_status; /* device 0's failure inside a forward */
    struct dp_confusion *confusion; /* an evaluation's confusion matrix being counted (confusion.h), or NULL */
    char stat_error[512];
    char device_names[4096]; /* "cpu:0,cpu:1,...": room for 256 ids up to 4095 */
    /* sync_peer.c: the NCCL group of every device of every rank (NULL: the
     * host paths), and what dp_trainer_allreduce says */
    dp_peer_group_t *peer_group;
    char allreduce[160];
    /* step_graph.c: why steps are not captured as graphs (NULL: they are),
     * the graphs per step shape, and what they did */
    const char *graph_why;
    struct dp_step_graph *graphs;
    dp_cuda_graph_counts_t graph_counts;
    const struct dp_step_graph *graph_launch; /* the shape each device thread launches now, and its seeds */
    const uint64_t *graph_seeds;
    int graph_seed_pairs;
};

/* trainer.c: the step's device work as made (uncaptured, or while a step
 * graph captures it): its micro-batches on every device, the strategy's
 * sums and updates, the step count. */
dp_status_t dp_trainer_step_devices(dp_trainer_t *t, const dp_batch_t *batch, int micros);

/* step_graph.c: why this trainer's steps cannot be captured (a static line;
 * NULL: they can); a step as a graph (warm-up steps of a new shape, and a
 * shape beyond the cache, run as made: *done = 0 and nothing ran);
 * the graphs freed. */
const char *dp_step_graph_why(const dp_trainer_t *t);
dp_status_t dp_step_graph_step(dp_trainer_t *t, const dp_batch_t *batch, int micros, int *done);
void dp_step_graph_release(dp_trainer_t *t);

#endif
