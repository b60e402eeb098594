/* train.h - what `dptrain train`'s option parsing and run (train.c) and
 * its output (train_output.c) share: the options and the printer that
 * dp_fit's callbacks write through.
 */
#ifndef DPTRAIN_CLI_TRAIN_H
#define DPTRAIN_CLI_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "dptrain/checkpoint.h"
#include "dptrain/comm.h"
#include "dptrain/data.h"
#include "dptrain/fit.h"
#include "dptrain/io.h"
#include "data_options.h"
#include "dptrain/parallel.h"
#include "devices.h"
#include "rank_record.h"

typedef struct {
    const char *model;               /* NULL: not given (lenet, or the checkpoint's with --resume) */
    const char *data_dir;
    int batch_size;
    int batch_size_given;            /* 0: --batch-size not given (256, the default) */
    float lr;                        /* NAN until the optimizer's default fills it in */
    float weight_decay;              /* likewise (train_default_weight_decay: 0.01 adamw, 0 the others) */
    float norm_weight_decay, bias_weight_decay; /* NAN: not given (their tensors decay by weight_decay) */
    /* the optimizer and the learning-rate schedule (NAN or 0: not given) */
    const char *optimizer, *lr_schedule;
    float momentum, beta1, beta2, eps, lr_gamma, lr_min, warmup_epochs;
    int nesterov, lr_step_epochs, warmup_steps;
    const char *warmup_method; /* "linear" (the default) or "constant" */
    float warmup_start;        /* NAN: not given (1 / W) */
    int warmup_sequential;
    int epochs;
    int stop_after; /* 0: run all the epochs */
    uint64_t seed;
    int limit;
    int threads_per_device;
    const char *devices;
    const char *allreduce;
    const char *overlap;
    const char *cuda_graph; /* --cuda-graph on|off; NULL: not given (on) */
    const char *sync;
    float comm_timeout;
    int sync_batch_norm;
    float label_smoothing;           /* --label-smoothing: the training loss's, in [0, 1) (0: none) */
    float clip_grad_norm;            /* --clip-grad-norm: the gradients' max total norm (0: no clipping) */
    float mixup_alpha, cutmix_alpha; /* --mixup-alpha, --cutmix-alpha (batch_mix.h; 0: off) */
    float random_erase;              /* --random-erase: the probability (random_erase.h; 0: none) */
    int model_ema;                   /* --model-ema: keep and evaluate a moving average of the model */
    int model_ema_steps;             /* --model-ema-steps: steps between its updates (default 32) */
    double model_ema_decay;          /* --model-ema-decay: torchvision's base decay (default 0.99998) */
    const char *metrics_path;
    const char *plot_path;
    const char *save_path, *resume_path;
    const char *save_best_path;      /* --save-best: the best epoch's checkpoint (never taken by a resume) */
    int early_stop;                  /* --early-stop N: patience in epochs (0: none); a resume takes it */
    int ra_sampler, ra_reps;         /* --ra-sampler, --ra-reps N: repeated augmentation, N copies of each
                                        sample (default 3: torchvision's); fit.h ra_reps; a resume takes them */
    int quiet;
    const char *normalize, *augment; /* NULL: none */
    int accumulate;                  /* micro-batches per step, 1: none */
    int save_every_steps;            /* 0: checkpoints at epoch ends only */
    int log_every_steps;             /* 0: no lines inside an epoch (fit.h log_every_steps) */
    int tf32;                        /* --tf32: --precision tf32 */
    const char *precision_text;      /* --precision as given (NULL: not given) */
    int precision;                   /* dp_precision_t: --precision, or tf32 with --tf32 (default fp32) */
    int winograd;                    /* CPU devices: Winograd 5x5 convolutions (off by default) */
    const char *channels_last_text;  /* --channels-last on|off (NULL: not given: cli_channels_last_default) */
    int channels_last;               /* 1: channels-last on (GPU devices: NHWC activations), the default included */
    int profile;                     /* --profile: per-layer times (profile.h) */
    const char *profile_steps;       /* --profile-steps WARMUP,STEPS (implies --profile) */
    const char *init_path;           /* --init FILE: a new run from a checkpoint's weights (NULL: none) */
    int fresh_head;                  /* --fresh-head: with --init, the head afresh whatever its outputs */
    const char *freeze;              /* --freeze LAYERS (NULL: not given; with --resume, the checkpoint's) */
    int freeze_backbone;             /* --freeze-backbone: every layer but the last linear one */
    int num_classes;                 /* --num-classes N: the last linear layer's outputs (0: the model's) */
    const char *image_size;          /* --image-size N|HxW: the model's input height and width (NULL: its own) */
    const char *val_image_size;      /* --val-image-size N|HxW: the per-epoch test's input size (NULL: the
                                        model's; with --resume, the checkpoint's data.val_image_size) */
    cli_data_options_t data;         /* image folders' options (data_options.h); dir, limit, normalize,
                                        augment copied from the fields above */
    size_t given[72 + CLI_DATA_OPTIONS]; /* the options the command line gave: their fields' offsets in this
                                            struct (train_option_given) */
    int num_given;
} train_options_t;

/* What the options make (train_options.c). */
typedef struct {
    dp_optim_config_t optim;
    dp_lr_schedule_t schedule;
    int lr_default;             /* --lr not given: the optimizer's default */
    int weight_decay_default;   /* --weight-decay not given (nor taken from a checkpoint): likewise */
    dp_allreduce_kind_t allreduce;
    dp_sync_kind_t sync;
    int overlap;
    int profile_warmup, profile_window; /* window 0: no --profile */
    dp_augment_t augment;
    int norm_n;                 /* 0: no --normalize */
    float norm_mean[DP_DATA_MAX_CHANNELS], norm_std[DP_DATA_MAX_CHANNELS];
} train_settings_t;

/* train_options.c: the help text; the options of argv[first..argc) into
 * *o over the defaults (o->model and o->lr stay NULL and NAN when not
 * given; what `dptrain launch` checks before it starts any rank); the checks that
 * need neither data nor devices, filling *s (ranks: of the job; a warning
 * is printed where `speaks`); the warning for a --limit above the
 * training set's `train_count` images. */
extern const char train_usage[];
dp_status_t train_options_parse(int argc, char **argv, int first, train_options_t *o, int *help);
dp_status_t train_options_check(train_options_t *o, int ranks, int speaks, train_settings_t *s);
void train_check_limit(const train_options_t *o, int train_count, int speaks);
/* A --warmup-epochs or --warmup-steps given that is longer than the whole
 * run, or that rounds to no step: a warning (the steps per epoch are
 * known once the data is open: step_batch images a step). */
void train_check_warmup(const train_options_t *o, const dp_lr_schedule_t *schedule, int train_count, int step_batch,
                        int speaks);
/* Whether the command line gave the option whose value is `field` (a
 * field of *o, e.g. &o->seed), rather than its default. */
int train_option_given(const train_options_t *o, const void *field);
/* The learning rate without --lr: the optimizer's own default. */
float train_default_lr(dp_optim_kind_t kind);
/* The weight decay without --weight-decay: torch.optim's default of the
 * kind, 0.01 for adamw (decoupled), 0 for the others. */
float train_default_weight_decay(dp_optim_kind_t kind);

/* What `dptrain train` prints, from dp_fit's callbacks. */
typedef struct {
    const train_options_t *o;
    const dp_world_t *world;
    int speaks;
    int lr_default;   /* the first line says the lr is the optimizer's default */
    int weight_decay_default; /* adamw's first line says its weight decay is the default */
    int train_count, test_count;
    const char *holdout;      /* the fraction of the training folders held out as the test split; NULL: none */
    const char *test_folder;  /* "val" when the test split is DIR/val (said on the first line); NULL: otherwise */
    char devices[5000]; /* "[cpu:0, cpu:1]": the names plus ", " separators, up to 256 devices */
    const char *devices_note; /* without --devices: why these (on the first line) */
    char allreduce[200];      /* ", allreduce: nccl" on GPUs (first line); "" otherwise */
    char cuda_graph[200];     /* ", cuda graph: on" or "off (why)" with a CUDA device or --cuda-graph (first
                                 line); "" otherwise */
    char frozen[1200];        /* "frozen: LIST (...)" with frozen layers (a line after the first two); "" */
    char normalized[1300];    /* train_saved_t's normalize_note (after the --init line); "" */
    char resumed[1600];       /* train_resume_note's line (before "resuming from"); "" */
    dp_progress_t bar;
    int bar_open;
    int started;              /* on_begin was called: every rank trains */
    dp_trainer_t *trainer;
    rank_record_t *record;    /* the launcher's record of this rank (NULL: none) */
} train_printer_t;

/* train_signals.c: SIGTERM and SIGUSR1 set the returned flag (a stop at the
 * next step boundary, fit.h's stop_request); a second SIGTERM, SIGINT, or
 * (under_mpirun) a SIGTERM from the parent end the process at once by
 * that signal; every signal is noted in `record` (may be NULL). `speaks`:
 * say so on stderr. Called again, it keeps the flag and takes the new
 * record and settings. */
volatile sig_atomic_t *train_signals_install(rank_record_t *record, int speaks, int under_mpirun);
/* Whether training runs now (the stop's line is said only then). */
void train_signals_training(int on);

/* dp_fit's callbacks (ctx: the train_printer_t). */
void train_print_begin(const dp_fit_begin_t *begin, void *ctx);
void train_draw_progress(const dp_fit_step_t *step, void *ctx);
void train_print_log(const dp_fit_log_t *log, void *ctx);
void train_print_warning(const char *message, void *ctx);
/* "dptrain: warning: ..." on stderr where `speaks` (rank 0, or a worklog). */
void train_warn(int speaks, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
dp_status_t train_print_epoch(const dp_epoch_stats_t *s, void *ctx);
/* After dp_fit: the final line (the book's summary, or the saved model's
 * accuracy when nothing trained) and the CUDA graph counts. */
void train_print_result(const dp_fit_result_t *result, dp_trainer_t *trainer, const train_printer_t *p);

/* train_resume.c: with --resume, the run's options the command line does
 * not give, taken from the checkpoint into the options (before
 * train_options_check); the texts they point to are kept here. */
typedef struct {
    int taken;             /* the checkpoint's options were taken (not with --init, nor of a weights-only file) */
    int epochs_unrecorded; /* --epochs not given, and the file (of an older dptrain) records no planned length */
    char augment[32], transform[64], holdout[32];
    char val_image_size[32]; /* the saved data.val_image_size, "HxW", "" where none */
    char auto_augment[16];  /* the saved --auto-augment (data.train_transform's), "" where none */
    char aa_interpolation[16]; /* the saved --auto-augment-interpolation where recorded (not the resize's), "" */
    int bicubic;            /* the saved --interpolation is bicubic (taken: not given) */
    char color_jitter[64];  /* the saved --color-jitter (data.train_transform's "B,C,S,H"), "" where none */
    char data_dir[DP_CHECKPOINT_MAX_DATA_DIR + 1];
    char normalize[200];    /* its data.normalize where no --normalize is given, for the line; "" */
    int train_examples;     /* the checkpoint's training-set size */
    int data_train_total;   /* its data.train_total (the data's size before --limit); 0: not recorded */
    uint64_t classes_hash;  /* train_classes_hash of its class names (0: none, built-in data's) */
    double ema_decay;       /* its moving average's decay, taken as it is when no --model-ema-* option
                               is given (ema_taken 1); else the options' */
    int ema_taken;
} train_resume_t;
/* FNV-1a 64 of `count` class names, each with its terminating NUL; 0 for none. */
uint64_t train_classes_hash(const char *const *names, int count);
dp_status_t train_resume_take(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r);
/* The line saying which options came from the checkpoint (those not at
 * their defaults; --limit where it is below the data's train_total
 * images); "" when none. */
void train_resume_note(const train_options_t *o, const train_resume_t *r, int train_total, char *note, size_t size);

/* train_init.c: what the --init or --resume checkpoint gives as defaults,
 * read once (a checkpoint is read whole), before the options are checked:
 * with --resume, the run's options (train_resume_take); with --resume and
 * neither --freeze nor --freeze-backbone, its freeze list (a resume keeps
 * the freeze); without --normalize, its normalisation and the line saying
 * it applies. Empty strings where none. */
typedef struct {
    char freeze[DP_CHECKPOINT_MAX_FREEZE + 1];
    char normalize[200];
    char normalize_note[1300]; /* "inputs normalised as FILE's were: --normalize ..." */
    train_resume_t resume;
} train_saved_t;
dp_status_t train_read_saved(train_options_t *o, train_saved_t *saved);
/* --init with --resume: refused (who: the message's prefix, "" or "launch: "). */
dp_status_t train_check_init_resume(const train_options_t *o, const char *who);
/* The model frozen as --freeze or --freeze-backbone says, or with --resume
 * and neither as the checkpoint's model.freeze says (dp_fit refuses a
 * resume frozen otherwise); note = what is frozen, one line ("" when
 * nothing is). Before the trainer is made. */
dp_status_t train_freeze_model(const train_options_t *o, const train_saved_t *saved, dp_model_t *model, char *note,
                               size_t note_size);

/* train_profile.c: --profile-steps's value; the table on stdout (its
 * header names the precision); the metrics file's {"profile": ...} line. */
dp_status_t train_profile_parse(const char *text, int *warmup, int *steps);
dp_status_t train_print_profile(dp_trainer_t *trainer, const char *precision, int channels_last);
dp_status_t train_append_profile(const char *path, dp_trainer_t *trainer);

#endif
