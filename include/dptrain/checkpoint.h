/* checkpoint.h - training checkpoints: what a run saves to continue
 * exactly, in the safetensors format (safetensors.h, which this includes).
 *
 * Every entry of the model's parameter table (weights, biases and buffers
 * such as "bn1.running_mean") under its own name; the optimizer's state as
 * "optimizer.<param>.<state>" (e.g. "optimizer.conv1.weight.exp_avg"), one
 * tensor per trainable parameter that is not frozen (nn.h: dp_model_freeze)
 * with that parameter's shape; and the
 * metadata (dp_checkpoint_info_t plus the format version and the model's
 * parameter-table fingerprint). A PyTorch user reads it with
 * safetensors.torch.load_file, a numpy user with tools/read_checkpoint.py.
 *
 * Files are written atomically (io.h's dp_file_begin/dp_file_commit: a
 * temporary file in the same directory, fflush, fsync, rename, fsync of the
 * directory): readers see the old file or the new one, never a torn file,
 * and a failed write leaves the old file as it was.
 */
#ifndef DPTRAIN_CHECKPOINT_H
#define DPTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h" /* dp_conv_algo_t */
#include "dptrain/batch_mix.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/safetensors.h"
#include "dptrain/schedule.h"
#include "dptrain/status.h"

/* --- checkpoints ---------------------------------------------------------------- */
/* The library's version, recorded in every checkpoint ("dptrain_version"). */
#define DPTRAIN_VERSION "0.1.0"

/* Metadata "format_version"; readers refuse other versions (1: before the
 * learning-rate schedule keys). */
#define DP_CHECKPOINT_VERSION 2

/* Where training stands, saved in the metadata. The RNG state is the seed:
 * the initialisation, each epoch's shuffle (seed, epoch) and the dropout
 * masks (seed, step_count) are pure functions of it; so is the learning
 * rate (schedule, step_count, steps_per_epoch).
 *
 * The metadata keys (all strings; integers in decimal, float32 values as
 * %.9g and float64 values as %.17g, both exact when read back):
 *   format                  "dptrain-checkpoint"
 *   format_version          DP_CHECKPOINT_VERSION
 *   dptrain_version         of the writer, informational
 *   model                   what --model was given: a built-in name or a model file's path
 *   model_fingerprint       16 hex digits, dp_model_fingerprint
 *   optimizer               sgd | momentum | adagrad | adam | adamw
 *   optimizer.lr            the base learning rate (--lr), float32
 *   optimizer.weight_decay, optimizer.momentum, optimizer.nesterov (0/1),
 *   optimizer.beta1, optimizer.beta2, optimizer.eps
 *                           the hyper-parameters, defaults filled in; 0 where
 *                           they do not apply to the kind
 *   optimizer.states        the state names, comma-separated ("exp_avg,exp_avg_sq"; "" for sgd)
 *   optimizer.steps         dp_optimizer_steps (Adam's and AdamW's bias correction)
 *   lr_schedule             constant | step | cosine | exponential
 *   lr_schedule.lr          the schedule's base lr, float64
 *   lr_schedule.step_epochs, lr_schedule.gamma (float64)       step decay (gamma: exponential too)
 *   lr_schedule.total_epochs, lr_schedule.min_lr (float64)     cosine
 *   lr_schedule.warmup_epochs (float64), lr_schedule.warmup_steps
 *                           as in dp_lr_schedule_t (0 where they do not apply)
 *   lr_schedule.warmup_method     constant; written only when not linear
 *                           (absent: linear)
 *   lr_schedule.warmup_start      the warm-up's start factor F (%.17g) in
 *                           (0, 1]; written only when given (absent: 1 / W)
 *   lr_schedule.warmup_sequential 1: the schedule starts after the warm-up;
 *                           written only then (absent: chained). A resume
 *                           must use the same three (schedule.h)
 *   lr_schedule.steps_per_epoch   N of the schedule's formulas
 *   lr_schedule.total_steps       total_epochs x steps_per_epoch (cosine's T; 0 otherwise)
 *   step_count              trainer steps taken (dropout masks, the schedule)
 *   epochs_completed, loader.epoch, loader.batch   the position (batch 0: an epoch's start)
 *   seed, batch_size, train_examples               must match to resume
 *                           (batch_size: the global batch of an optimizer step)
 *   accumulate              micro-batches per step (--accumulate; 1 without):
 *                           batch_size / accumulate is the run's --batch-size
 *   epochs_planned          the run's --epochs (its planned length; with
 *                           --stop-after it stops before): what a resume
 *                           without --epochs trains to
 *   sync_batch_norm         1: batch norm used the whole minibatch's
 *                           statistics (--sync-batch-norm), else 0
 *   best.epoch, best.test_correct, best.test_count
 *                           the run's epoch with the highest test accuracy
 *                           so far (the earlier of equals; what train
 *                           --save-best keeps), its correct answers and
 *                           test-set size; written from the first epoch's
 *                           end on (absent: none recorded)
 *   early_stop              train --early-stop's patience in epochs (fit.h
 *                           early_stop), written when not 0 (absent: none)
 *   data.ra_reps            repeated augmentation's repeats (train
 *                           --ra-sampler --ra-reps, fit.h ra_reps), 2 to
 *                           DP_RA_REPS_LIMIT, written when on (absent:
 *                           none); a resume must use the same
 *   optimizer.norm_weight_decay, optimizer.bias_weight_decay
 *                           the weight-decay groups' decays (optim.h's
 *                           has_norm_weight_decay ...), %.9g; written only
 *                           when the group has its own (absent: none, the
 *                           tensors decay by optimizer.weight_decay)
 *   label_smoothing         the training loss's label smoothing
 *                           (--label-smoothing, parallel.h's
 *                           config.label_smoothing), float32 in (0, 1)
 *                           as its shortest decimal ("0.1"); written only
 *                           when not 0 (absent: 0, none). A resume must use
 *                           the same
 *   model_ema.steps, model_ema.decay, model_ema.updates
 *                           the model's moving average (--model-ema): its
 *                           steps between updates, decay (%.17g) and
 *                           updates so far; all three or none (none: no
 *                           average); with them an ema.NAME tensor for
 *                           every parameter and buffer NAME
 *   mixup_alpha, cutmix_alpha
 *                           Mixup's and CutMix's alphas (--mixup-alpha,
 *                           --cutmix-alpha, parallel.h's config.mix), float32
 *                           in (0, 1000] as their shortest decimals; each
 *                           written only when on (absent: 0, off). A resume
 *                           must use the same
 *   random_erase            random erasing's probability (--random-erase,
 *                           config.random_erase), float32 in (0, 1]
 *                           likewise (absent: 0, none); a resume must use
 *                           the same
 *   clip_grad_norm          gradient clipping's max norm (--clip-grad-norm,
 *                           parallel.h's config.clip_grad_norm), float32 in
 *                           (0, 1e30] as its shortest decimal; written only
 *                           when clipping (absent: 0, none). A resume takes
 *                           it; another value is allowed, with a warning
 *   devices, ranks          of the run that saved, informational
 *   data.normalize          "" or the --normalize values, per channel:
 *                           "M0,..,S0,.." (%.9g); a resume must use the same
 *   data.augment            "" or --augment's text ("crop:4,flip")
 *   epoch.loss_sums, epoch.correct, epoch.examples
 *                           a checkpoint inside an epoch (loader.batch > 0):
 *                           the epoch's summed loss (%.17g) and correct count
 *                           so far, one per rank, comma-separated (or one
 *                           total when the run had more than
 *                           DP_CHECKPOINT_RANK_SUMS ranks), and its examples
 *                           so far (global); "", "" and 0 at an epoch's end
 *   data.transform          the evaluation transform of an image folder,
 *                           "resize S" (+ ", exif ignore") (+ ", bicubic"):
 *                           Resize(S), then CenterCrop to the model's
 *                           input, Pillow's bilinear filter unless
 *                           bicubic; written only for image folders
 *   data.train_transform    the training transform of an image folder:
 *                           "center", "squash" or "resized-crop" (+ ",
 *                           dct-scale off") (+ ", bicubic") (+ ",
 *                           auto-augment ta_wide" or
 *                           ", auto-augment ra N", or ", color-jitter
 *                           B,C,S,H"); its resize and EXIF
 *                           setting are data.transform's. Written only for
 *                           image folders; a resume with another warns,
 *                           with another --interpolation, --auto-augment,
 *                           --ra-magnitude or --color-jitter is refused
 *   data.holdout            the fraction of each class of an image folder
 *                           without a test folder held out as its test split
 *                           (--holdout, as given: "0.1"); written only then.
 *                           eval holds out the same files; a resume must too
 *   data.val_image_size     "HxW": the input size the run tested at every
 *                           epoch (train --val-image-size, FixRes) where it
 *                           is not the model's own; data.transform is then
 *                           the transform to that size. eval and predict
 *                           test at it unless given another --image-size;
 *                           a resume keeps it. Written only then
 *   data.train_total        the training split's image count before --limit
 *                           (an image folder's training files, after any
 *                           hold-out); written when the run gives it. A
 *                           resume on the same data must find as many
 *                           (the CLI: train.c; 0 when absent: not checked)
 *   data.dir                the training data's directory as an absolute
 *                           path (--data, or the default); written when
 *                           the run names one. A resume or eval without
 *                           --data reads it (the CLI: train_resume.c)
 *   data.classes            the training data's class names in label order
 *                           (an image folder's class folders) as a JSON
 *                           array of strings, ["cat","dog"]; written only
 *                           when the data has such names
 *   cuda.conv_algorithms    the cuDNN convolution algorithms the run's CUDA
 *                           devices chose (backend.h conv_algorithms), as a
 *                           JSON array of {"key": KEY, "algo": N} sorted by
 *                           key; written only when a CUDA device ran a
 *                           convolution. A resume installs them, so that it
 *                           computes with the same algorithms on any GPU
 *   model_text              the model file's text (dp_model_source), when
 *                           the model was built from a model file (bytes
 *                           >= 0x80 of a file that is not UTF-8 made '?':
 *                           they are in its comments); written only then.
 *                           eval, predict, export and resume rebuild the
 *                           model from it (dp_checkpoint_load_model), so a
 *                           checkpoint needs its model file nowhere
 *   model.freeze            the layers the run froze (nn.h dp_model_freeze's
 *                           list, as --freeze gave it); written only when
 *                           layers are frozen. The optimizer's state then
 *                           covers the parameters that trained only; a
 *                           resume keeps the freeze (fit.h)
 * accumulate, epochs_planned, sync_batch_norm, label_smoothing and the last
 * fourteen are optional when read (an older file: 0 for the four, not
 * recorded; none, none, an epoch's end, no transform, no training
 * transform, no hold-out, no data directory, no test size (the model's), no class names: the data's
 * built-in ones, no algorithm choices: the GPU's own, no model file text:
 * `model` is looked for as --model is, model_file.h, and nothing frozen).
 *
 * The values kept as text (model, dptrain_version, optimizer.states,
 * data.normalize, data.augment, data.transform, data.train_transform,
 * data.dir, model.freeze) are one line: a control character in one is refused on
 * reading (DP_ERR_FORMAT) and on saving (DP_ERR_ARG). Messages show text
 * from the file (tensor names, values) with control characters escaped.
 *
 * A weights-only checkpoint (parameters and buffers from elsewhere, e.g.
 * tools/import_torchvision.py's from a torchvision state_dict) has
 *   weights_only            "1"
 * and needs only format, format_version, model and its tensors (every
 * parameter and buffer of the model, no optimizer state); model_text,
 * data.normalize and data.classes are read when present; model_fingerprint,
 * when present, is checked, and without it the tensors are checked by name
 * and shape (order and trainable flags are the model's). The other keys are not read:
 * info holds zeros there (optimizer sgd, a constant schedule, epoch 0).
 * Such a file loads (dp_checkpoint_load_params) for eval, predict, export
 * and inspect, and is refused by dp_checkpoint_load_optimizer (so by
 * train --resume): it has nothing to resume.
 */
#define DP_CHECKPOINT_RANK_SUMS 8
/* The longest freeze list a checkpoint holds, in bytes. */
#define DP_CHECKPOINT_MAX_FREEZE 1023
/* The longest data directory (data.dir) a checkpoint holds, in bytes. */
#define DP_CHECKPOINT_MAX_DATA_DIR 4095
typedef struct {
    char model[1024];           /* --model: a built-in name or a model file's path */
    char dptrain_version[32];   /* of the writer, informational */
    dp_optim_config_t optim;    /* kind and hyper-parameters (lr: the base lr, --lr) */
    dp_lr_schedule_t schedule;  /* the learning-rate schedule */
    uint64_t steps_per_epoch;   /* of the schedule (loader batches per epoch) */
    uint64_t step_count;        /* trainer steps taken (dp_trainer_step_count) */
    uint64_t optimizer_steps;   /* dp_optimizer_steps (saving with an optimizer: its own count) */
    int epochs_completed;
    int loader_epoch;           /* the epoch training continues with (0-based) */
    int loader_batch;           /* the batch within it (0: its start) */
    uint64_t seed;
    int batch_size;             /* global minibatch */
    int train_examples;         /* size of the training set (after --limit) */
    int accumulate;             /* micro-batches per step (read: 0 when the file does not record it) */
    int epochs_planned;         /* the run's --epochs (read: 0 when the file does not record it) */
    int sync_batch_norm;        /* 1: synchronised batch norm (read: 0 when the file does not record it) */
    float label_smoothing;      /* the training loss's label smoothing, in [0, 1) (read: 0 when the file
                                   does not record it) */
    float clip_grad_norm;       /* gradient clipping's max norm, 0: none (read: 0 when not recorded) */
    dp_mix_config_t mix;        /* Mixup's and CutMix's alphas, 0: off (read: 0 when not recorded) */
    float random_erase;         /* random erasing's probability, 0: none (read: 0 when not recorded) */
    /* the model's moving average (fit.h model_ema_*): its steps (0: none kept), decay and updates;
     * model_ema: what dp_checkpoint_save writes as the ema.* tensors (dp_model_num_params floats of
     * host memory; NULL: none), never set by a read (dp_checkpoint_load_ema) */
    int model_ema_steps;
    double model_ema_decay;
    uint64_t model_ema_updates;
    const float *model_ema;
    int best_epoch;             /* the run's epoch (1-based) with the highest test accuracy so far (the
                                   earlier of equals), 0: none recorded (no epoch yet, or an older file) */
    int best_correct, best_count; /* its test set's correct answers and size */
    int early_stop;             /* the run's patience (train --early-stop; read: 0 when not recorded) */
    int ra_reps;                /* repeated augmentation's repeats, 0: none (train --ra-sampler; read: 0 when not
                                   recorded) */
    int num_devices, num_ranks; /* of the run that saved, informational */
    char normalize[160];        /* "" or "M0,..,S0,..": the training data's normalisation */
    char augment[32];           /* "" or the augmentation's text */
    char transform[128];        /* data.transform: "" (data of the model's size: none) or the evaluation
                                   transform of an image folder, "resize S" (Resize(S) then CenterCrop to
                                   the model's input), then ", exif ignore" when the EXIF orientation was
                                   not applied: what eval, predict and export apply */
    char holdout[32];           /* data.holdout: "" (the data's own test split) or the fraction held out */
    int epoch_ranks;            /* 0 at an epoch's end; else the entries of the sums below */
    double epoch_loss[DP_CHECKPOINT_RANK_SUMS]; /* the current epoch's loss sum so far, per rank */
    int epoch_correct[DP_CHECKPOINT_RANK_SUMS]; /* its correct count so far, per rank */
    int epoch_examples;         /* its examples so far, all ranks */
    /* data.classes: (num_class_names) UTF-8 names, each 1 to
     * DP_CHECKPOINT_MAX_CLASS_NAME bytes; 0 / NULL: none. Read: owned by
     * the dp_checkpoint_t. */
    int num_class_names;
    char **class_names;
    /* cuda.conv_algorithms: (num_conv_algorithms) choices, keys of 1 to
     * DP_CONV_ALGO_KEY_MAX - 1 bytes without control characters,
     * algorithms 0 to DP_CHECKPOINT_MAX_CONV_ALGO; 0 / NULL: none. Read:
     * owned by the dp_checkpoint_t. */
    int num_conv_algorithms;
    dp_conv_algo_t *conv_algorithms;
    /* model_text: read, owned by the dp_checkpoint_t; NULL: none. Written
     * from the model (dp_model_source), not from here. */
    const char *model_text;
    int weights_only;           /* read: 1 for a weights-only file (above); dp_checkpoint_save ignores it */
    char freeze[DP_CHECKPOINT_MAX_FREEZE + 1]; /* model.freeze: "" or the frozen layers' list */
    char train_transform[160];  /* data.train_transform: "" (not an image folder, or a file of an older
                                   dptrain) or the training transform of an image folder */
    int data_train_total;       /* data.train_total: the training split's size before --limit; 0: not recorded */
    char data_dir[DP_CHECKPOINT_MAX_DATA_DIR + 1]; /* data.dir: "" (none recorded) or the training data's
                                   directory, an absolute path */
    int val_height, val_width;  /* data.val_image_size: the input size of the run's per-epoch test; 0 x 0:
                                   the model's own (not recorded) */
} dp_checkpoint_info_t;

/* The largest algorithm number cuda.conv_algorithms holds (the cache
 * file's limit too, algo_cache.h). */
#define DP_CHECKPOINT_MAX_CONV_ALGO 99

/* The longest class name a checkpoint holds, in bytes. */
#define DP_CHECKPOINT_MAX_CLASS_NAME 255

/* Whether `names` can be saved as data.classes: each valid UTF-8, without
 * control characters, 1 to DP_CHECKPOINT_MAX_CLASS_NAME bytes (DP_ERR_ARG
 * naming the first that cannot). dp_checkpoint_save checks it too. */
dp_status_t dp_checkpoint_check_class_names(char *const *names, int count);

/* Writes params (dp_model_num_params floats: the whole table), the state of
 * `opt` (NULL: none; else an optimizer of kind info->optim.kind over at
 * least the model's dp_model_num_trainable floats, DP_ERR_ARG otherwise)
 * and `info` (its schedule must pass dp_lr_schedule_check). Under data
 * parallelism any replica's optimizer will do, they hold the same state;
 * with a parameter server across ranks only rank 0's server optimizer
 * steps, so rank 0 saves. */
dp_status_t dp_checkpoint_save(const char *path, const dp_model_t *model, const float *params,
                               dp_optimizer_t *opt, const dp_checkpoint_info_t *info);

typedef struct dp_checkpoint dp_checkpoint_t;

/* Reads the file and its metadata (every key above must be present and
 * well-formed, the format version known). Tensors are checked against a
 * model by the dp_checkpoint_load_* calls. */
dp_status_t dp_checkpoint_open(const char *path, dp_checkpoint_t **out);
void dp_checkpoint_close(dp_checkpoint_t *c);
const dp_checkpoint_info_t *dp_checkpoint_info(const dp_checkpoint_t *c);
const dp_safetensors_t *dp_checkpoint_tensors(const dp_checkpoint_t *c);

/* The model of checkpoint `c`: `name_or_path` when not NULL (--model:
 * dp_model_load), else the model file text it carries (model_text; parsed
 * as the file named by its `model`, so the model keeps its name), else its
 * `model` (a built-in name, or the model file path of a checkpoint of an
 * older dptrain, looked for as dp_model_load does). dp_checkpoint_load_params
 * then checks the tensors against it. */
dp_status_t dp_checkpoint_load_model(const dp_checkpoint_t *c, const char *name_or_path, dp_model_t **out);

/* Fills params (dp_model_num_params floats). Fails, naming the first
 * mismatching tensor, unless the file holds exactly the model's table
 * (same names, shapes, order and trainable flags: the fingerprint) plus
 * optimizer state. */
dp_status_t dp_checkpoint_load_params(const dp_checkpoint_t *c, const dp_model_t *model, float *params);

/* Restores the state buffers and step count of `opt`. Fails, changing
 * nothing, if the file is weights-only, was saved by another kind of optimizer, `opt` holds
 * fewer than dp_model_num_trainable floats, or the file's state tensors are
 * not exactly those of `opt` for the model's trainable parameters that are
 * not frozen. */
dp_status_t dp_checkpoint_load_optimizer(const dp_checkpoint_t *c, const dp_model_t *model,
                                         dp_optimizer_t *opt);

/* params (dp_model_num_params floats) = the checkpoint's moving average of
 * the model (its ema.NAME tensors, one per parameter and buffer; info's
 * model_ema_steps > 0), checked as dp_checkpoint_load_params checks the
 * parameters; a file without one: DP_ERR_ARG naming it. params unchanged
 * on failure. */
dp_status_t dp_checkpoint_load_ema(const dp_checkpoint_t *c, const dp_model_t *model, float *params);

/* What dp_checkpoint_load_init did with the model's last linear layer (the
 * head): its name, "" when it was loaded like the rest; then its output
 * count in the model and in the file; asked: whether it started afresh
 * because fresh_head asked it to (the same count as the file's). */
typedef struct {
    char fresh_head[64];
    int model_outputs, file_outputs;
    int asked;
} dp_checkpoint_init_t;

/* A new run from a checkpoint's weights (`dptrain train --init`, torch's
 * load_state_dict, then `model.fc = nn.Linear(...)`): params
 * (dp_model_num_params floats) holds the model's own initialisation on
 * entry and gets every parameter and buffer (batch norm's running
 * statistics) of the file by name, whatever the order and the layout
 * (frozen layers too), but the model's last linear layer when the file's
 * has another output count over the same input features, or with
 * fresh_head whatever its count (timm's reset_classifier: the same number
 * of other classes): that layer keeps its initialisation (the file's may
 * lack it then), and *out names it. The optimizer's state, the step
 * count, the schedule, the position and the data's metadata (class names,
 * normalisation) are not read. Fails (DP_ERR_FORMAT, params unchanged)
 * naming the first tensor the model has and the file lacks, the file has
 * and the model lacks, or whose shapes differ (both shapes). */
dp_status_t dp_checkpoint_load_init(const dp_checkpoint_t *c, const dp_model_t *model, float *params,
                                    int fresh_head, dp_checkpoint_init_t *out);

/* The model's parameter-table fingerprint: FNV-1a 64 of the names, shapes
 * and trainable flags in order (not the frozen ones: a frozen model's
 * checkpoint is its model's). */
uint64_t dp_model_fingerprint(const dp_model_t *model);

#endif
