/* fit.h - the epoch loop: what `dptrain train` does between parsing its
 * options and printing its lines, for any C program.
 *
 *   dp_fit_config_t fc = {.trainer = trainer, .model = model, .model_name = "lenet",
 *                         .train_set = &train, .test_set = &test, .batch_size = 256,
 *                         .epochs = 10, .seed = 0, .schedule = {.lr = 0.2},
 *                         .metrics_path = "m.jsonl", .save_path = "ck.safetensors"};
 *   dp_fit_result_t r;
 *   if (dp_fit(&fc, on_epoch, ctx, &r) != DP_OK) fprintf(stderr, "%s\n", dp_error_message());
 *
 * One call runs epochs [first, last): first is 0, or with resume_path the
 * checkpoint's completed epochs; last is `epochs`, or `stop_after` when it
 * is smaller (a planned interruption: schedule and checkpoints are those of
 * the whole run). Every epoch: a seeded shuffle (seed, epoch), one
 * dp_trainer_step per global batch with the schedule's learning rate for
 * that step (from the trainer's step count, so a resumed run agrees), the
 * epoch's loss (the trainer's: smoothed with its config.label_smoothing,
 * parallel.h) and accuracy summed across ranks, the test accuracy
 * (dp_trainer_evaluate), then the callback, then (rank 0 only) the metrics
 * line, the plot of this call's epochs and the checkpoint. At the end every
 * replica on every rank must hold the same parameters
 * (dp_trainer_check_replicas); when there was nothing to train, the saved
 * model's test accuracy is evaluated instead. Keras' model.fit and
 * PyTorch Lightning's Trainer.fit are the models; what `dptrain train`
 * prints is built from the callbacks and the result.
 *
 * Before anything runs, dp_fit refuses (one line) a model that is not
 * the trainer's (dp_trainer_model), data whose samples are not the
 * model's input shape, a trainer that has already stepped (an earlier
 * dp_fit or dp_trainer_step) unless resume_path is given, and (rank 0) a
 * save, metrics or plot path that is a directory or whose directory is
 * missing or not writable (DP_ERR_IO). One trainer is one run: a second
 * dp_fit continues only through resume_path.
 *
 * Resume (resume_path) restores the parameters into every replica, the
 * optimizer state into every device's optimizer and the step count, and
 * refuses (DP_ERR_ARG, one line naming the `dptrain train` option the field
 * comes from): another model (the first mismatching tensor is named),
 * another optimizer kind, batch size, seed or training-set size, another
 * normalisation of the data (train_set's), another lr schedule (kind, step
 * length, gamma, minimum, warm-up, and for cosine its length), another
 * label smoothing (the trainer's config.label_smoothing, parallel.h: the
 * loss; a checkpoint without one was saved with 0). Another lr,
 * weight decay or optimizer hyper-parameter, or another device or rank
 * count, or another augmentation, is allowed with a warning (on_warning).
 * A checkpoint written inside an epoch (save_every_steps) resumes at its
 * step: the loader seeks there (dp_batch_loader_seek), the epoch's loss and
 * correct sums so far are restored (per rank, when the rank count is the
 * saved one), so the epoch's metrics line and every later checkpoint are
 * those of the uninterrupted run, bit for bit (same devices and ranks).
 *
 * A model with frozen layers (nn.h: dp_model_freeze, before the trainer
 * was made) records its freeze list in every checkpoint (model.freeze),
 * and resume refuses a model frozen otherwise than the file says (the
 * optimizer's state covers the parameters that trained, and a run that
 * changes what trains is a new run: init_path): the caller freezes the
 * model with the file's list (dptrain train does, unless --freeze is given).
 *
 * init_path starts a new run from a checkpoint's weights (torch's
 * load_state_dict): before the first epoch every replica gets the file's
 * parameters and batch norm statistics by name
 * (checkpoint.h: dp_checkpoint_load_init), but the last linear layer when
 * the file's has another output count, which keeps the trainer's own
 * initialisation (a new head for other classes); not the optimizer's
 * state, step count, schedule or position: epochs, schedule and the
 * optimizer start afresh. The run's data decides the class names and the
 * normalisation (a checkpoint saved later records those of this run's
 * data); another normalisation than the file's is warned about (the
 * weights were fitted to inputs scaled that way). Any other mismatch is
 * refused before anything is written; init_path with resume_path is
 * refused.
 *
 * Under MPI every rank calls dp_fit with the same config (world: this
 * rank); only rank 0 writes the metrics, plot and checkpoint, every rank
 * reads resume_path and init_path. Every rank starts training, or none: a
 * failure before the first step (a check, the resume, the init) is agreed
 * among the ranks (dp_world_agree), so every rank returns it; a failure during training
 * is this rank's own (the others may be waiting for it: the caller ends
 * the job, `dptrain` by dp_world_leave). At each step boundary the
 * environment variable DPTRAIN_FAULT may inject a fault (docs/testing.md).
 */
#ifndef DPTRAIN_FIT_H
#define DPTRAIN_FIT_H

#include <signal.h>
#include <stdint.h>

#include "dptrain/batch_source.h"
#include "dptrain/comm.h"
#include "dptrain/data.h"
#include "dptrain/io.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/schedule.h"
#include "dptrain/status.h"

/* What dp_fit tells on_step: an epoch begins (step 0), a step ended
 * (step 1..steps, mean_loss over this rank's examples so far), the epoch's
 * steps ended (also after a failed step).
 * The steps' figures are summed on the devices and read only now and then
 * (a read waits for the devices: a host synchronisation on a GPU), so a
 * DP_FIT_STEP_END's mean_loss is read at the epoch's first step, its last
 * step, every save_every_steps step, and otherwise at most every 0.25 s of
 * wall time; in between it repeats the last value read (its step's mean
 * then). Without on_step only the fixed steps read (the last, the
 * save_every_steps ones). DP_FIT_STEPS_END's mean_loss is the epoch's. */
typedef enum { DP_FIT_EPOCH_BEGIN, DP_FIT_STEP_END, DP_FIT_STEPS_END } dp_fit_event_t;

typedef struct {
    dp_fit_event_t event;
    int epoch;        /* 1-based */
    int step, steps;  /* steps: global batches per epoch */
    double mean_loss; /* DP_FIT_STEP_END: this rank's summed loss / examples seen, at the
                         last read (see above) */
} dp_fit_step_t;

/* What dp_fit tells on_log (every rank) after every log_every_steps-th step
 * of an epoch but its last (the epoch's line follows that): the epoch's
 * figures so far over every rank's examples, read without folding them
 * (a peek: the epoch's sums round as without) and summed across ranks at
 * that step, so a run prints the same numbers every time; and the pace. */
typedef struct {
    int epoch, step, steps; /* 1-based epoch; its step (1..steps - 1) of steps */
    double mean_loss;       /* summed loss / examples seen this epoch, all ranks */
    double train_acc;       /* correct / examples seen this epoch, all ranks */
    double lr;              /* the step's learning rate */
    double images_per_sec;  /* examples (all ranks) since the last line, or the epoch's (resumed) start,
                               over the wall seconds between */
    double eta_sec;         /* the epoch's steps left at its mean step time so far */
} dp_fit_log_t;

/* Where the run starts, told once (on_begin) after resume and before the
 * first epoch. */
typedef struct {
    int first_epoch;      /* 0-based epoch trained first (= epochs a checkpoint holds) */
    int last_epoch;       /* trains [first_epoch, last_epoch); equal: nothing to train */
    int steps_per_epoch;
    const char *devices;  /* this rank's devices, "cpu:0,cpu:1" */
    const char *allreduce; /* dp_trainer_allreduce: "nccl", "host (why)", "" */
    int resumed;          /* 1: from resume_path, at first_step of epoch first_epoch (0-based) */
    int stopped_early;    /* 1: nothing to train, the resumed run had stopped early (early_stop) */
    int best_epoch;       /* the run's best epoch so far (checkpoint.h best.epoch; 0: none) */
    int first_step;       /* steps of that epoch already done (a checkpoint inside an epoch) */
    uint64_t step_count;  /* steps of the run already done */
    const char *init;     /* with init_path, what it loaded, one line ("initialised from FILE (...); fc
                             initialised afresh: ..."); NULL otherwise */
} dp_fit_begin_t;

/* Called after each epoch's evaluation, before its metrics, plot and
 * checkpoint are written, with the numbers the metrics line holds. A status
 * other than DP_OK stops dp_fit, which returns it (set a message with
 * dp_fail). */
typedef dp_status_t (*dp_fit_epoch_fn)(const dp_epoch_stats_t *stats, void *ctx);

typedef struct {
    /* what to train: the caller made both and frees them */
    dp_trainer_t *trainer;
    const dp_model_t *model;       /* the trainer's */
    const char *model_name;        /* recorded in checkpoints (--model: a built-in name or a
                                      model file's path, < 1024 bytes); NULL: dp_model_name */
    dp_batch_source_t *train_source; /* the loader shuffles [0, count) (batch_loader.h) */
    dp_batch_source_t *test_source;  /* evaluated after every epoch (at val_height x val_width with a
                                        val_trainer) */
    /* testing at another input size (FixRes: torchvision's --val-crop-size), NULL / 0 for none: an
     * evaluation-only trainer (never steps) of the same network and parameter table at val_height x
     * val_width on the same devices and ranks; before every test it gets the trainer's replica 0
     * parameters and batch-norm statistics (the moving average's for that figure), the checkpoints'
     * own; recorded (checkpoint.h data.val_image_size), a resume must give the same */
    dp_trainer_t *val_trainer;
    int val_height, val_width;
    /* or, with both sources NULL, datasets in memory: dp_fit makes in-memory
     * sources over them (batch_source.h), the training one with `augment` */
    const dp_dataset_t *train_set;
    const dp_dataset_t *test_set;
    dp_augment_t augment;          /* train_set's augmentation (zeros: none) */
    int loader_threads;            /* threads filling the training batches ahead of the steps
                                      (batch_loader.h); 0: each batch filled on the caller's thread */
    int loader_depth;              /* with loader_threads: batches filled ahead (0: 2) */
    dp_world_t world;              /* this rank, as given to the trainer (zeros: one process) */
    /* the run */
    int batch_size;                /* global minibatch, ranks x devices <= batch_size <= count */
    int epochs;                    /* counted from the start of training, >= 1 */
    int stop_after;                /* 0: none; else stop after this epoch of `epochs` */
    uint64_t seed;                 /* the shuffle's; recorded (the trainer's initialisation) */
    int ra_reps;                   /* repeated augmentation (torchvision's --ra-sampler --ra-reps): each epoch
                                      the shuffle's first ceil(count / ra_reps) samples, each ra_reps times in
                                      a row, each copy augmented its own way (data.h dp_loader_set_repeats);
                                      0 or 1: none; at most DP_RA_REPS_LIMIT; recorded, a resume must match */
    dp_lr_schedule_t schedule;     /* its lr is the base lr (the trainer's optim.lr);
                                      {.kind = DP_LR_CONSTANT, .lr = lr} for none */
    int eval_batch_size;           /* 0: 1000 */
    /* the model's moving average (a trainer with config.model_ema; parallel.h): updated with
     * model_ema_decay after the steps whose index in the epoch (from 0) is a multiple of
     * model_ema_steps, a copy of the model while the lr warms up (torchvision's reference), and
     * evaluated after every epoch (dp_epoch_stats_t test_acc_ema); recorded in checkpoints */
    double model_ema_decay;        /* in [0, 1] (optim.h dp_ema_decay: torchvision's from its options) */
    int model_ema_steps;           /* >= 1 with a trainer's model_ema; 0 otherwise */
    /* files, NULL for none; only rank 0 writes them */
    const char *metrics_path;      /* one JSON line appended per epoch (dp_metrics_append) */
    const char *plot_path;         /* SVG of this call's epochs, rewritten every epoch */
    const char *save_path;         /* checkpoint after every epoch, atomically */
    int early_stop;                /* 0: none; else the run stops after an epoch that is early_stop epochs
                                      past its best (best.*: Keras' EarlyStopping(patience)), recorded in
                                      checkpoints; a resume of a run that stopped so trains nothing */
    const char *save_best_path;    /* the checkpoint of each epoch whose test accuracy beats every earlier
                                      epoch's of the run (a resumed run's included: checkpoints record the
                                      best so far, best.*), atomically, after save_path's; another path */
    const char *resume_path;       /* start from this checkpoint (an epoch's end or inside one) */
    const char *init_path;         /* a new run from this checkpoint's weights (see above); NULL: the
                                      trainer's initialisation */
    int init_fresh_head;           /* with init_path: the last linear layer keeps the trainer's
                                      initialisation whatever its output count (dp_checkpoint_load_init) */
    int log_every_steps;           /* 0: none; else on_log after every N-th step of an epoch (a collective:
                                      give the same on every rank) */
    int save_every_steps;          /* 0: none; else also a checkpoint every N steps inside an
                                      epoch (with the loader position and the epoch's sums so
                                      far), so that a resume continues exactly; give it on every
                                      rank (they sum the epoch's sums), save_path on rank 0 */
    const char *augment_text;      /* the training data's augmentation as --augment wrote it (recorded
                                      in checkpoints; resume warns when it differs); NULL: none */
    const char *transform_text;    /* the data's evaluation transform (checkpoint.h data.transform); NULL: none */
    const char *train_transform_text; /* an image folder's training transform (checkpoint.h
                                      data.train_transform; resume warns when it differs); NULL: none */
    const char *holdout_text;      /* the fraction held out as the test split (checkpoint.h data.holdout); a
                                      resume must give the same; NULL: the data's own test split */
    int train_total;               /* the training split's size before --limit (checkpoint.h
                                      data.train_total: a resume on changed data is told); 0: not recorded */
    const char *data_dir_text;     /* the training data's directory, absolute (checkpoint.h data.dir: what
                                      a resume or eval without --data reads); NULL, or longer than
                                      DP_CHECKPOINT_MAX_DATA_DIR bytes: not recorded */
    const char *dptrain_version;   /* recorded in checkpoints; NULL: DPTRAIN_VERSION */
    const char *precision;         /* the devices' (backend.h set_precision), named in the
                                      metrics: "fp32", "tf32", "bf16"; NULL: fp32 */
    const char *layout;            /* the devices' activations (backend.h set_channels_last),
                                      named in the metrics: "nchw", "nhwc"; NULL: nchw */
    /* preemption and a watcher's view (NULL: none; give the same on every rank) */
    const volatile sig_atomic_t *stop_request; /* once non-zero (a SIGTERM handler may set it), every rank
                                      stops at the next step boundary inside an epoch that all ranks
                                      have agreed on (one float summed per step, read a step later),
                                      writes save_path there as save_every_steps would, and dp_fit
                                      returns DP_ERR_PREEMPTED saying where (resume_path continues
                                      from it bit for bit) */
    volatile uint64_t *step_reached; /* the trainer's step count, stored after every step (memory a
                                      launcher reads, for instance) */
    /* optional callbacks (NULL: none), given `ctx` */
    void (*on_begin)(const dp_fit_begin_t *begin, void *ctx);
    void (*on_step)(const dp_fit_step_t *step, void *ctx); /* progress bars */
    void (*on_log)(const dp_fit_log_t *log, void *ctx);    /* log_every_steps' lines */
    void (*on_warning)(const char *message, void *ctx);    /* resume's warnings */
} dp_fit_config_t;

typedef struct {
    int first_epoch, last_epoch;  /* as dp_fit_begin_t */
    int test_correct, test_count; /* the last epoch's test set (nothing trained: the saved model's) */
    double test_acc;              /* test_correct / test_count */
    double mean_epoch_sec;        /* over the trained epochs (0 when none) */
    uint64_t step_count;          /* the trainer's, at the end */
    int stopped_early;            /* the epoch after which early_stop ended the run (0: it did not) */
    int best_epoch, best_correct, best_count; /* the run's best epoch so far (a resumed run's earlier epochs
                                     included: checkpoint.h best.*), its test set's correct answers and size;
                                     0: none (nothing trained, from a file without the record) */
} dp_fit_result_t;

/* Trains as described at the top. on_epoch and result may be NULL. On
 * failure files already written (earlier epochs' checkpoint, metrics lines)
 * stay as they are; a checkpoint is never half-written. A model whose
 * floats (parameters, running statistics) are no longer all finite at an
 * epoch's end or before a checkpoint inside one: DP_ERR_DIVERGED, on every
 * rank, and nothing saved from them. */
dp_status_t dp_fit(const dp_fit_config_t *config, dp_fit_epoch_fn on_epoch, void *ctx, dp_fit_result_t *result);

#endif
