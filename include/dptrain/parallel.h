/* parallel.h - the data-parallel trainer: replicate, split, step, evaluate.
 *
 * One step on a global minibatch of n examples and k devices (d2l 12.5):
 *   1. split the minibatch into k shards whose sizes differ by at most one
 *      (split_batch; with n < k, a short last batch, the last k - n shards
 *      are empty: those devices contribute nothing to the sums);
 *   2. every device runs forward and backward on its shard with its own
 *      replica of the parameters; the loss is divided by the global n, so
 *      the gradients are parts of the global mean gradient;
 *   3. gradients are summed across the replicas (allreduce);
 *   4. every replica applies the same update, so replicas stay identical.
 * Each replica lives on its own device (device.h) in that device's memory
 * (backend.h): the caller submits one task per device per phase
 * (forward+backward of the shard; then the allreduce and update) and waits
 * for all devices between phases, and reads or writes replicas only through
 * the device (dp_trainer_params returns a host copy).
 *
 * Only the model's trainable parameters (the first dp_model_num_trainable
 * floats) are summed and updated. Parameters of frozen layers (nn.h:
 * dp_model_freeze, before the trainer is made) lie after them, so that no
 * sum, bucket or update covers them: they have no gradient and no optimizer
 * state and never change. Its buffers (batch norm's running
 * statistics) are computed by each replica from its shard; after each step
 * rank 0's replica 0 buffers are copied to every replica (PyTorch DDP's
 * broadcast_buffers), so replicas stay identical. With sync_batch_norm
 * nothing is copied: every replica computed the same statistics from the
 * same global sums. Training passes run with
 * dropout masks drawn from (seed, step count, global example index), which
 * do not depend on how the batch is split.
 */
#ifndef DPTRAIN_PARALLEL_H
#define DPTRAIN_PARALLEL_H

#include <stdint.h>

#include "dptrain/backend.h"
#include "dptrain/batch_mix.h"
#include "dptrain/batch_source.h"
#include "dptrain/comm.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/profile.h"

/* How the replicas agree on each step's update. */
typedef enum {
    DP_SYNC_ALLREDUCE, /* every replica sums the gradients and updates itself */
    DP_SYNC_PS,        /* the Paddle seed's parameter server: a server device holds the
                          parameters and the optimizer; workers push gradients, the server
                          sums them and updates, workers pull the parameters (across ranks:
                          rank 0's server, MPI_Reduce then MPI_Bcast) */
} dp_sync_kind_t;

#define DP_TRAINER_MAX_THREADS 1024 /* threads_per_device at most (train --threads-per-device's limit) */
typedef struct {
    const dp_model_t *model; /* not owned; must outlive the trainer */
    int num_devices;         /* replicas, >= 1 */
    int threads_per_device;  /* BLAS threads each device may use, 1 to DP_TRAINER_MAX_THREADS */
    const int *device_ids;   /* (num_devices) N >= 0 of "cpu:N", also the core it is pinned to;
                                NULL: 0, 1, ..., num_devices - 1 */
    dp_sync_kind_t sync;
    dp_allreduce_kind_t allreduce; /* one process: chunked (DP_ALLREDUCE_RING is its old name) or naive */
    int overlap;             /* chunked only: reduce gradient buckets (several ranks: and sum
                                them across ranks on the communication thread) while
                                backward runs; the same bits as without */
    dp_world_t world;        /* this process's rank among `size` (zeros: one process) */
    dp_optim_config_t optim;
    uint64_t seed;           /* parameter initialisation; dropout masks (with the step count) */
    int sync_batch_norm;     /* batch norm uses the statistics of the whole minibatch (all
                                devices of all ranks: PyTorch's SyncBatchNorm) rather than
                                each device's shard (the default, as the book) */
    float label_smoothing;   /* the training loss's, in [0, 1): torch.nn.CrossEntropyLoss(
                                label_smoothing=...), the cross-entropy against (1 - eps) onehot
                                + eps / K (ops.h softmax_xent); 0: none. The steps' loss (and
                                dp_trainer_step's loss_sum, the epoch's train_loss) is this
                                smoothed loss; evaluation counts correct answers, no loss */
    int model_ema;           /* 1: keep a moving average of the model (parameters and running
                                statistics) on every device, torchvision's --model-ema
                                (dp_trainer_ema_update; dp_fit updates it every
                                ema_steps steps); 0: none */
    float clip_grad_norm;    /* > 0: torch.nn.utils.clip_grad_norm_(params, clip_grad_norm) on
                                every step's summed gradient before the update (optim.h
                                dp_clip_*: the total norm of every trained float's gradient,
                                and each multiplied by min(1, max / (norm + 1e-6))); the norm
                                is read on the host (a GPU synchronises once a step), and
                                with --overlap the buckets are still summed during backward
                                but updated after it (DDP's way); 0: none */
    dp_mix_config_t mix;     /* Mixup and CutMix of every training step's batch (batch_mix.h:
                                torchvision's --mixup-alpha, --cutmix-alpha; the whole batch of
                                every rank, so the same for any number of devices and ranks);
                                the steps' loss is then the mixed targets' (with label
                                smoothing, smoothed too); zeros: none */
    float random_erase;      /* the probability that a training example has a rectangle of its
                                input erased to 0 (random_erase.h: torchvision's
                                RandomErasing(p) of its recipes), before any mixing; 0: none */
    const dp_backend_t *backend; /* the devices' backend (backend.h); NULL: the CPU's. Not
                                owned; must outlive the trainer */
    const dp_backend_t *const *backends; /* (num_devices) device d's backend, when the devices
                                are on several backend tables (cuda:0 and cuda:1: one table per
                                GPU); NULL: `backend` for every device. Sums and copies among
                                devices of one table use its reduce_range/broadcast_range; among
                                several they go through host memory (download, the sum in device
                                order on the CPU, upload): the same bits. Not owned */
    int accumulate;          /* micro-batches per step (gradient accumulation), 0 or 1: none.
                                A step's batch of n is cut into `accumulate` micro-batches
                                (dp_split_batch), each split across ranks and devices and run
                                forward and backward, the gradients summed in each replica; the
                                replicas are synchronised and updated once, after the last
                                (DDP's no_sync). The loss is divided by n, so the update equals
                                the one-step update of the whole batch up to float rounding */
    int profile_steps;       /* > 0: every device's per-layer times (profile.h) over this many
                                steps after profile_warmup steps (dp_trainer_profile); 0: off */
    int profile_warmup;
    int cuda_graph_off;      /* 1: every step as made; 0: a step on one CUDA device is captured
                                once per shape as a CUDA graph and replayed, where it can be
                                (dp_trainer_cuda_graph says) */
} dp_trainer_config_t;

typedef struct dp_trainer dp_trainer_t;

/* Initialises the parameters from the seed and replicates them onto every
 * device (get_params). */
dp_status_t dp_trainer_new(const dp_trainer_config_t *config, dp_trainer_t **out);

/* What the steps captured as CUDA graphs did so far: steps launched as a
 * graph (a capture's own step included), graphs captured, and steps run as
 * made meanwhile (a shape's warm-up steps, shapes beyond the graphs kept,
 * shapes whose capture CUDA or NCCL refused: their refused step too). */
typedef struct {
    uint64_t launches, captures, as_made;
} dp_cuda_graph_counts_t;

/* Whether steps are captured as CUDA graphs: NULL when they are (on one
 * CUDA device), else why not, one line ("--cuda-graph off", "not CUDA
 * devices", "--sync-batch-norm (...)", ...); counts (may be NULL) = what
 * they did. */
const char *dp_trainer_cuda_graph(const dp_trainer_t *trainer, dp_cuda_graph_counts_t *counts);
void dp_trainer_free(dp_trainer_t *trainer);

/* Shard d of k for a batch of n: [*start, *start + *count). Sizes differ by
 * at most one, larger shards first. */
void dp_split_batch(int n, int k, int d, int *start, int *count);

/* One training step on the global minibatch `batch` (host memory: every
 * rank passes the same batch; each takes its own shard of it, every
 * device receiving its shard's bytes and labels through its backend's
 * upload, and converting them to the model's input itself). Adds this
 * rank's summed loss over its examples to *loss_sum and its number of
 * correct predictions to *correct; sum them across ranks with
 * dp_world_sum_doubles. n may be smaller than ranks x devices (an epoch's
 * short last batch): the devices without examples add zeros to the sums,
 * so the update is still the mean gradient over the n examples.
 * The figures are summed on each device (the backend's count_metrics) and
 * read by dp_trainer_read_metrics: with loss_sum or correct non-NULL the
 * step ends with dp_trainer_read_metrics(trainer, loss_sum, correct, 1)
 * (a download per backend table, which waits for the device: on a GPU, a
 * host synchronisation per step); with both NULL nothing is read, the
 * figures stay on the devices, added to until read, and the step has no
 * host wait of its own on a GPU (a loop that wants figures now and then
 * calls dp_trainer_read_metrics itself: dp_fit does). The batch may be
 * reused once the call returns. A batch whose samples are not the model's
 * input shape (dp_model_input_shape) is refused before any device reads it.
 * A step that fails on a device (a label out of range) updates nothing and
 * drops the figures not read yet, its own partial ones and those of earlier
 * unread steps with them (a loop that goes on after a failed step reads
 * before each step it may lose). */
dp_status_t dp_trainer_step(dp_trainer_t *trainer, const dp_batch_t *batch, double *loss_sum, int *correct);

/* The positions of a step's batch of n that this rank reads (its shard of
 * every micro-batch): up to max ranges [first[i], first[i] + count[i]),
 * ascending; returns how many there are (more than max: call again with
 * room for that many). The rest of the batch need not be filled on this
 * rank: the batch loader's share callback (batch_loader.h; trainer is the
 * dp_trainer_t). */
int dp_trainer_batch_share(void *trainer, int n, int *first, int *count, int max);

/* The training figures not read yet (the steps since the last read with
 * reset, or since the trainer was made): adds this rank's summed loss to
 * *loss_sum and its correct count to *correct (either may be NULL). The
 * devices' sums are added in device order, then to *loss_sum, so steps read
 * one by one give the bits they always gave (total = device 0's + device
 * 1's + ..., then *loss_sum += total). `reset`: the devices' sums are zeroed
 * after the read (0: a peek, they keep adding up). Both pointers NULL with
 * reset: the sums are dropped, nothing is downloaded. Otherwise one
 * download per backend table (every device on one GPU: one host
 * synchronisation). Call between steps, on the caller's thread. Fails (one
 * line naming the device) when a count read is not a count: a failed GPU's
 * download. */
dp_status_t dp_trainer_read_metrics(dp_trainer_t *trainer, double *loss_sum, int *correct, int reset);

/* Number of the source's samples the model classifies correctly: the
 * samples in order, in global batches of batch_size per device (fewer when
 * a batch's activations would take more than about 1 GB per device) filled
 * with the source's evaluation transform, each split across all devices of
 * all ranks (the book's exercise 4), every rank filling only its part;
 * every rank gets the total. A source whose samples are not the model's
 * input shape is refused (DP_ERR_ARG). */
dp_status_t dp_trainer_evaluate(dp_trainer_t *trainer, dp_batch_source_t *source, int batch_size, int *correct);
/* The same with `threads` loader threads filling the evaluation's batches
 * ahead of the devices (batch_loader.h; 0: on the caller's thread, as
 * dp_trainer_evaluate does): for sources whose fill decodes files. */
dp_status_t dp_trainer_evaluate_threads(dp_trainer_t *trainer, dp_batch_source_t *source, int batch_size, int threads,
                                        int *correct);
/* The same, counting the confusion matrix as well: confusion (K x K
 * int64, host memory, K the model's outputs, dp_model_num_outputs) gets
 * [label * K + predicted] = the samples of that label classified as
 * predicted, the row's first largest logit (confusion.h
 * dp_confusion_count: its diagonal sums to *correct; dp_confusion_class
 * reads a class's figures); every rank gets the totals, the same for any
 * device or rank count. Each shard's logits are downloaded to the host for
 * it (an evaluation without it downloads only the counts). NULL: as
 * dp_trainer_evaluate_threads. */
dp_status_t dp_trainer_evaluate_confusion(dp_trainer_t *trainer, dp_batch_source_t *source, int batch_size,
                                          int threads, int64_t *confusion, int *correct);

/* What an evaluation counts (dp_trainer_evaluate_counts), over every rank. */
typedef struct {
    int correct; /* samples whose first largest logit is the label (top-1) */
    int top5;    /* samples whose label is among the 5 largest logits (top-5,
                    torchvision's Acc@5; backend.h count_metrics' rule: ties go
                    to the lower index, a NaN at the label is ranked last); with
                    5 or fewer outputs every sample, so a report shows it only
                    for models of more than 5 */
} dp_eval_counts_t;
/* The same as dp_trainer_evaluate_confusion (confusion may be NULL),
 * counting the top-5 answers as well, on the devices with the correct ones
 * (no extra download), summed across ranks with them: *counts gets both
 * totals. dp_trainer_evaluate, _threads and _confusion are this call's
 * correct count. */
dp_status_t dp_trainer_evaluate_counts(dp_trainer_t *trainer, dp_batch_source_t *source, int batch_size,
                                       int threads, int64_t *confusion, dp_eval_counts_t *counts);

/* A host copy of replica d's parameters (dp_model_num_params floats),
 * downloaded from the device by this call: valid until the next
 * dp_trainer_params or dp_trainer_check_replicas call, step or
 * evaluation of this trainer; writing to it changes no replica (use
 * dp_trainer_set_params). Call between steps. NULL (and a one-line
 * message) when device is not in 0..num_devices - 1. */
float *dp_trainer_params(dp_trainer_t *trainer, int device);
/* out (dp_model_num_trainable floats, host memory) = the gradient the last
 * step's update applied: the sum over every device and rank of the
 * gradient of the global mean loss, clipped when config.clip_grad_norm
 * says (replica 0's; with --sync ps the server's, whose sum is every
 * rank's on rank 0 only). Call between steps, after at least one. */
void dp_trainer_read_grads(dp_trainer_t *trainer, float *out);
/* DP_OK, or the first failure one of the trainer's devices met out of sight
 * of its tasks (backend.h: failure; a GPU's download that failed leaves
 * other bytes in the copy), naming the device and what failed: ask before
 * keeping what dp_trainer_params or dp_trainer_optimizer returned. */
dp_status_t dp_trainer_check_devices(const dp_trainer_t *trainer);
int dp_trainer_num_devices(const dp_trainer_t *trainer);
/* Micro-batches per optimizer step (config.accumulate; 1 without accumulation). */
int dp_trainer_accumulate(const dp_trainer_t *trainer);
/* Whether batch norm uses the whole minibatch's statistics (config.sync_batch_norm). */
int dp_trainer_sync_batch_norm(const dp_trainer_t *trainer);
/* The training loss's label smoothing (config.label_smoothing; 0: none). */
float dp_trainer_label_smoothing(const dp_trainer_t *trainer);
/* Mixup and CutMix (config.mix; zeros: none). */
dp_mix_config_t dp_trainer_mix(const dp_trainer_t *trainer);
/* Random erasing's probability (config.random_erase; 0: none). */
float dp_trainer_random_erase(const dp_trainer_t *trainer);
/* Gradient clipping's max norm (config.clip_grad_norm; 0: none), and the
 * total norm of the last step's summed gradient before clipping (NaN before
 * the first step or without clipping). */
float dp_trainer_clip_grad_norm(const dp_trainer_t *trainer);
float dp_trainer_last_grad_norm(const dp_trainer_t *trainer);
/* The clipping steps' norms since the last reset: steps measured, those
 * clipped (coefficient below 1, or NaN), the norms' sum and largest (NaN
 * once a norm was). Every rank measures the same norms (with --sync ps:
 * rank 0 only). reset: start counting again. */
typedef struct {
    int steps, clipped;
    double norm_sum;
    float norm_max;
} dp_grad_norm_stats_t;
void dp_trainer_grad_norms(dp_trainer_t *trainer, dp_grad_norm_stats_t *out, int reset);

/* The model's moving average (config.model_ema; model_ema.c), between steps:
 *   dp_trainer_ema_update: every replica's average = decay * average +
 *     (1 - decay) * its model (optim.h dp_ema_update), or the model itself
 *     when no update counts yet (the first, or after dp_trainer_ema_restart);
 *     counts one;
 *   dp_trainer_ema_swap: every replica's model and average trade places (a
 *     pointer swap): evaluations, dp_trainer_params and
 *     dp_trainer_set_params then see the average; swap back before the
 *     next step;
 *   dp_trainer_ema_updates / set_ema_updates: the count (checkpoints);
 * DP_ERR_ARG naming it without config.model_ema. */
dp_status_t dp_trainer_ema_update(dp_trainer_t *trainer, double decay);
void dp_trainer_ema_restart(dp_trainer_t *trainer);
dp_status_t dp_trainer_ema_swap(dp_trainer_t *trainer);
uint64_t dp_trainer_ema_updates(const dp_trainer_t *trainer);
void dp_trainer_set_ema_updates(dp_trainer_t *trainer, uint64_t updates);
int dp_trainer_model_ema(const dp_trainer_t *trainer);
/* The model the trainer was made with (config.model). */
const dp_model_t *dp_trainer_model(const dp_trainer_t *trainer);

/* Uploads params (dp_model_num_params floats, host memory) into every
 * replica (and the server): restoring a checkpoint. Call between steps. */
void dp_trainer_set_params(dp_trainer_t *trainer, const float *params);

/* Replica d's optimizer (with --sync ps: the server's, whatever d is); every
 * replica's optimizer holds the same state. NULL (and a one-line message)
 * when device is not in 0..num_devices - 1. */
dp_optimizer_t *dp_trainer_optimizer(dp_trainer_t *trainer, int device);

/* Sets the learning rate of every replica's optimizer (and the server's):
 * schedules. Call between steps. */
void dp_trainer_set_lr(dp_trainer_t *trainer, float lr);

/* Steps taken so far (dp_trainer_step counts them); a checkpoint saves it
 * and restores it with dp_trainer_set_step_count. Dropout masks are drawn
 * from (seed, step count), so a resumed run draws the same masks. */
uint64_t dp_trainer_step_count(const dp_trainer_t *trainer);
void dp_trainer_set_step_count(dp_trainer_t *trainer, uint64_t steps);
/* "cpu:0,cpu:1" (comma-separated, no spaces) */
const char *dp_trainer_device_names(const dp_trainer_t *trainer);
/* The most memory one of the trainer's GPUs held through dptrain so far
 * (backend.h memory_peak), in bytes; 0 when no device counts it (CPU). */
size_t dp_trainer_device_memory_peak(const dp_trainer_t *trainer);
/* The backend every device of the trainer runs. */
const dp_backend_t *dp_trainer_backend(const dp_trainer_t *trainer);
/* The GPU convolution algorithms the trainer's devices chose (backend.h
 * conv_algorithms: those that ran and those installed), merged and sorted
 * by key: what a checkpoint keeps as cuda.conv_algorithms. *out is the
 * caller's, to free(); 0 and NULL on devices without such choices (CPU). */
dp_status_t dp_trainer_conv_algorithms(const dp_trainer_t *trainer, dp_conv_algo_t **out, int *count);
/* Installs choices (a checkpoint's) on every device whose backend takes
 * them (backend.h conv_algorithms_install); the others ignore them. Call
 * before the first step or evaluation. */
dp_status_t dp_trainer_install_conv_algorithms(dp_trainer_t *trainer, const dp_conv_algo_t *choices, int count);
/* How the gradients are summed between devices on distinct GPUs: "nccl",
 * or "host (why not NCCL)" when a device is a GPU; "" on devices without
 * NCCL (the CPU's). Chosen by dp_trainer_new, the same on every rank:
 * NCCL when every device of every rank is on a GPU of its own (with the
 * default chunked allreduce, with or without overlap) and at least two
 * devices are (the environment's DPTRAIN_NCCL=1: also one; =0: never). */
const char *dp_trainer_allreduce(const dp_trainer_t *trainer);
/* The strategy that sums the gradients and updates the replicas, as
 * dp_trainer_new chose it from the configuration, the ranks and the
 * devices: "chunked" or "naive" (one process, after backward), "overlap"
 * (one process, during backward), "mpi" or "mpi-overlap" (several ranks,
 * without or with overlap), "nccl" or "nccl-overlap" (GPUs summing with
 * NCCL) or "ps" (the parameter server). The metrics' "sync". */
const char *dp_trainer_sync_strategy(const dp_trainer_t *trainer);

/* Seconds the caller has spent in the gradient sync of all steps so far
 * (after every device's forward/backward; with overlap, only the exposed
 * part: the buckets still being summed and updated when backward ended),
 * and in *in_mpi (may be NULL) the seconds the communication thread spent
 * inside MPI collectives for those steps' sync (dp_world_mpi_seconds;
 * includes waiting for the slowest rank; with overlap, mostly during
 * backward, and with sync batch norm the forward's sums too). For
 * benchmarks. */
double dp_trainer_sync_seconds(const dp_trainer_t *trainer, double *in_mpi);

/* Device d's per-layer times (profile.h) with config.profile_steps > 0;
 * the window's times are read now if it has not closed yet (a wait for the
 * device). Fails when profiling is off or the device failed. Call between
 * steps. */
dp_status_t dp_trainer_profile(dp_trainer_t *trainer, int device, const dp_profile_report_t **out);

/* Checks that every replica on every rank holds the same parameters (bit for
 * bit); fails naming what differs. */
dp_status_t dp_trainer_check_replicas(dp_trainer_t *trainer);

/* Sets how many threads the BLAS library uses (process-wide). */
void dp_blas_set_threads(int threads);

#endif
