/* fit.c - dp_fit, the epoch loop (fit.h): schedule, steps, per-epoch
 * evaluation, metrics, plot, checkpoint per epoch, resume, stop-after.
 *
 * Resume policy (what resume_path accepts):
 * - refused: another model (the first mismatching tensor is named), another
 *   optimizer kind, a batch size, seed or training-set size (--limit) other
 *   than the checkpoint's (the loader's order and position would not mean
 *   the same batches), another --normalize (the parameters were fitted to
 *   inputs scaled otherwise: continuing would silently train a different
 *   problem), other class names than the checkpoint's (an image folder's
 *   classes: the labels would mean other classes), another learning-rate
 *   schedule: kind, step length,
 *   gamma, minimum, warm-up, and for cosine its length (--epochs; a cosine
 *   run is interrupted on purpose with --stop-after, not with a smaller
 *   --epochs), since the lr of every later step would differ; another
 *   label smoothing (--label-smoothing: another loss); other frozen
 *   layers than the checkpoint's (--freeze: the optimizer's state holds
 *   the parameters that trained, and what trains defines the run; a new
 *   freeze is a new run, --init);
 * - warned about, then used: another learning rate (the schedule's base
 *   lr), weight decay or optimizer hyper-parameter (momentum, nesterov,
 *   betas, eps) or gradient clipping (--clip-grad-norm, also turned on or
 *   off): a deliberate change, the run is then no longer the
 *   uninterrupted one; another device or rank count (the gradient sums are
 *   added in another order: the same up to float rounding, not bit for
 *   bit); another --augment (a deliberate change of the data's
 *   randomisation, as torchvision users do between phases of a run).
 *   Extending a constant or step schedule with a larger --epochs is
 *   not a change: those schedules do not depend on the length.
 * Messages name the `dptrain train` option each field comes from, since
 * that is where most runs are configured.
 *
 * A step's loss and correct count are summed on the devices
 * (dp_trainer_step with NULL pointers: no host wait) and folded into the
 * epoch's host sums at fixed steps only: a save_every_steps step and the
 * epoch's last. The rounding of the sums therefore depends on the steps
 * and the save_every_steps setting, never on timing, and a run resumed at
 * a checkpoint folds where the uninterrupted one did. The progress
 * callback's mean loss is read at those folds and, between them, peeked
 * (read, not folded: no rounding changes) at most every DP_FIT_PEEK_SEC.
 *
 * A checkpoint inside an epoch (save_every_steps) holds the step reached
 * (loader.batch) and the epoch's loss and correct sums so far, per rank:
 * the resumed epoch seeks the loader to that step and starts from those
 * sums, so its metrics line and every later checkpoint are the
 * uninterrupted run's (the images per second count this call's part).
 *
 * A new run from a checkpoint's weights (init_path, --init) loads them
 * into every replica before the first epoch; only the parameters and
 * batch norm statistics come from the file (fit.h says what else does not).
 *
 * Runs on the caller's thread; the trainer's devices do the work.
 */
#include "dptrain/fit.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/batch_loader.h"
#include "dptrain/checkpoint.h"
#include "dptrain/cpu.h"
#include "dptrain/io.h"
#include "fit_finite.h"
#include "fit_log.h"
#include "fit_stop.h"
#include "replica.h" /* dp_trainer_optimizers_uploaded */

/* The progress callback's mean loss is read from the devices (a host wait
 * on a GPU) at most this often, besides the fixed folds. */
#define DP_FIT_PEEK_SEC 0.25

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- resume and save ------------------------------------------------------------- */
static void warn(const dp_fit_config_t *config, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void warn(const dp_fit_config_t *config, void *ctx, const char *fmt, ...) {
    if (!config->on_warning) return;
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    config->on_warning(message, ctx);
}

/* "lr 0.1, weight decay 0" and the kind's own hyper-parameters (%.9g: exact). */
static void describe_optim(const dp_optim_config_t *o, char *text, size_t size) {
    int used = snprintf(text, size, "lr %.9g, weight decay %.9g", o->lr, o->weight_decay);
    if (used >= 0 && (size_t)used < size && o->has_norm_weight_decay)
        used += snprintf(text + used, size - (size_t)used, ", norm weight decay %.9g", o->norm_weight_decay);
    if (used >= 0 && (size_t)used < size && o->has_bias_weight_decay)
        used += snprintf(text + used, size - (size_t)used, ", bias weight decay %.9g", o->bias_weight_decay);
    if (used < 0 || (size_t)used >= size) return;
    if (o->kind == DP_OPTIM_MOMENTUM)
        snprintf(text + used, size - (size_t)used, ", momentum %.9g%s", o->momentum, o->nesterov ? ", nesterov" : "");
    else if (o->kind == DP_OPTIM_ADAM || o->kind == DP_OPTIM_ADAMW)
        snprintf(text + used, size - (size_t)used, ", beta1 %.9g, beta2 %.9g, eps %.9g", o->beta1, o->beta2, o->eps);
    else if (o->kind == DP_OPTIM_ADAGRAD)
        snprintf(text + used, size - (size_t)used, ", eps %.9g", o->eps);
}

/* The schedule's shape must be the saved one (its base lr is --lr, which may
 * change with a warning): another shape would not continue the same run. */
static dp_status_t check_schedule(const char *path, const dp_lr_schedule_t *saved, const dp_lr_schedule_t *now) {
    if (saved->kind != now->kind)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --lr-schedule %s, this run has %s (resuming would not "
                       "continue the same run; use the saved schedule)", path, dp_lr_schedule_kind_name(saved->kind),
                       dp_lr_schedule_kind_name(now->kind));
    if (saved->warmup_method != now->warmup_method)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --warmup-method %s, this run has %s (resuming would not "
                       "continue the same run; use the saved method)", path,
                       dp_lr_warmup_method_name(saved->warmup_method), dp_lr_warmup_method_name(now->warmup_method));
    struct { const char *what; double saved, now; } must_match[] = {
        {"--lr-step-epochs", saved->step_epochs, now->step_epochs},
        {"--lr-gamma", saved->gamma, now->gamma},
        {"--epochs (the length of the cosine schedule)", saved->total_epochs, now->total_epochs},
        {"--lr-min", saved->min_lr, now->min_lr},
        {"--warmup-epochs", saved->warmup_epochs, now->warmup_epochs},
        {"--warmup-steps", (double)saved->warmup_steps, (double)now->warmup_steps},
        {"--warmup-start (0: not given, 1 / W)", saved->warmup_start, now->warmup_start},
        {"--warmup-sequential (1: on)", saved->warmup_sequential, now->warmup_sequential},
    };
    for (size_t i = 0; i < sizeof must_match / sizeof must_match[0]; i++)
        if (must_match[i].saved != must_match[i].now)
            return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s %.9g, this run has %.9g (another lr schedule "
                           "would not continue the same run; use the saved value)", path, must_match[i].what,
                           must_match[i].saved, must_match[i].now);
    return DP_OK;
}

/* Whether two normalisation texts ("M0,..,S0,..", "" for none) scale
 * alike: the same floats, whatever their spelling ("0.485" and
 * "0.485000014", tools/import_torchvision.py's and dptrain's), one pair
 * standing for every channel. */
static int same_normalize(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    if (!a[0] || !b[0]) return 0;
    int na, nb;
    float ma[DP_DATA_MAX_CHANNELS], sa[DP_DATA_MAX_CHANNELS], mb[DP_DATA_MAX_CHANNELS], sb[DP_DATA_MAX_CHANNELS];
    if (dp_normalize_parse(a, &na, ma, sa) != DP_OK || dp_normalize_parse(b, &nb, mb, sb) != DP_OK) return 0;
    if (na != nb && na != 1 && nb != 1) return 0;
    for (int i = 0; i < (na > nb ? na : nb); i++) {
        const int ia = na == 1 ? 0 : i, ib = nb == 1 ? 0 : i;
        if (ma[ia] != mb[ib] || sa[ia] != sb[ib]) return 0;
    }
    return 1;
}

/* What must be as saved for the loader to mean the same batches. */
static dp_status_t check_position(const char *path, const dp_checkpoint_info_t *saved,
                                  const dp_checkpoint_info_t *run) {
    if (!!saved->holdout[0] != !!run->holdout[0] ||
        (saved->holdout[0] && strtod(saved->holdout, NULL) != strtod(run->holdout, NULL)))
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s%s, this run %s%s (another test split, other training "
                       "images; use the saved value)", path, saved->holdout[0] ? "--holdout " : "a test folder",
                       saved->holdout, run->holdout[0] ? "has --holdout " : "has a test folder", run->holdout);
    struct { const char *what; uint64_t saved, now; } must_match[] = {
        {"--batch-size", (uint64_t)saved->batch_size, (uint64_t)run->batch_size},
        {"--seed", saved->seed, run->seed},
        {"training-set size (--limit)", (uint64_t)saved->train_examples, (uint64_t)run->train_examples},
        {"--ra-reps (0: no --ra-sampler)", (uint64_t)saved->ra_reps, (uint64_t)run->ra_reps},
    };
    for (size_t i = 0; i < sizeof must_match / sizeof must_match[0]; i++)
        if (must_match[i].saved != must_match[i].now)
            return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s %" PRIu64 ", this run has %" PRIu64
                           " (resuming would not continue the same run; use the saved value)", path,
                           must_match[i].what, must_match[i].saved, must_match[i].now);
    if (saved->loader_batch < 0 || (uint64_t)saved->loader_batch >= run->steps_per_epoch)
        return dp_fail(DP_ERR_ARG, "--resume %s: loader.batch %d is not a step inside an epoch of %" PRIu64
                       " steps", path, saved->loader_batch, run->steps_per_epoch);
    if (!same_normalize(saved->normalize, run->normalize))
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --normalize %s, this run has %s (the model was "
                       "trained on differently scaled inputs; use the saved value)", path,
                       saved->normalize[0] ? saved->normalize : "(none)", run->normalize[0] ? run->normalize : "(none)");
    return DP_OK;
}

/* A resume tests at the size the run tested at (checkpoint.h data.val_image_size): called where they differ. */
static dp_status_t check_val_size(const char *path, const dp_checkpoint_info_t *saved,
                                  const dp_checkpoint_info_t *run) {
    char was[48] = "its model's input size", now[48] = "the model's input size";
    if (saved->val_height) snprintf(was, sizeof was, "--val-image-size %dx%d", saved->val_height, saved->val_width);
    if (run->val_height) snprintf(now, sizeof now, "--val-image-size %dx%d", run->val_height, run->val_width);
    return dp_fail(DP_ERR_ARG, "--resume %s: its run tested every epoch at %s, this one would at %s: a resume "
                   "tests as the run did (give its size, or none)", path, was, now);
}

/* The loss must be the saved one: other mixing or another label smoothing
 * trains toward other targets (a file without the keys: none). */
static dp_status_t check_loss(const char *path, const dp_checkpoint_info_t *saved, const dp_checkpoint_info_t *run) {
    if (saved->mix.mixup_alpha != run->mix.mixup_alpha || saved->mix.cutmix_alpha != run->mix.cutmix_alpha)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --mixup-alpha %.9g --cutmix-alpha %.9g, this run has "
                       "%.9g and %.9g (other mixing would not continue the same run; use the saved values)", path,
                       dp_float_decimal(saved->mix.mixup_alpha), dp_float_decimal(saved->mix.cutmix_alpha),
                       dp_float_decimal(run->mix.mixup_alpha), dp_float_decimal(run->mix.cutmix_alpha));
    if (saved->random_erase != run->random_erase)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --random-erase %.9g, this run has %.9g (other erasing "
                       "would not continue the same run; use the saved value)", path,
                       dp_float_decimal(saved->random_erase), dp_float_decimal(run->random_erase));
    if (saved->label_smoothing == run->label_smoothing) return DP_OK;
    return dp_fail(DP_ERR_ARG, "--resume %s: saved with --label-smoothing %.9g, this run has %.9g (another loss "
                   "would not continue the same run; use the saved value)", path,
                   dp_float_decimal(saved->label_smoothing), dp_float_decimal(run->label_smoothing));
}

/* "[ant, bee, cat]" (shortened to fit), or the data's built-in names. */
static void describe_classes(const dp_checkpoint_info_t *info, char *text, size_t size) {
    if (info->num_class_names == 0) {
        snprintf(text, size, "the data's built-in class names");
        return;
    }
    size_t used = (size_t)snprintf(text, size, "classes [");
    for (int i = 0; i < info->num_class_names && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, i ? ", %s" : "%s", info->class_names[i]);
    if (used + 1 < size) snprintf(text + used, size - used, "]");
    else if (size > 4) memcpy(text + size - 5, "...]", 5);
}

/* Whether both name their classes alike (the same names in the same
 * order, or neither any: built-in data). */
static int same_classes(const dp_checkpoint_info_t *a, const dp_checkpoint_info_t *b) {
    int same = a->num_class_names == b->num_class_names;
    for (int i = 0; same && i < a->num_class_names; i++) same = strcmp(a->class_names[i], b->class_names[i]) == 0;
    return same;
}

/* The labels must mean the same classes: a checkpoint with class names
 * resumes only on data with the same names in the same order (one without
 * them, of an older dptrain, takes the data's). */
static dp_status_t check_classes(const char *path, const dp_checkpoint_info_t *saved,
                                 const dp_checkpoint_info_t *run) {
    if (saved->num_class_names == 0 || same_classes(saved, run)) return DP_OK;
    char saved_text[480], run_text[480];
    describe_classes(saved, saved_text, sizeof saved_text);
    describe_classes(run, run_text, sizeof run_text);
    return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s, this run's data has %s (the labels would mean other "
                   "classes; use the data the checkpoint was trained on)", path, saved_text, run_text);
}

/* The model must be frozen as the checkpoint's run was (model.freeze):
 * the same parameters, whatever the list's spelling. */
static dp_status_t check_freeze(const char *path, const dp_model_t *model, const char *saved) {
    int count = dp_model_num_param_tensors(model);
    unsigned char *mask = dp_alloc_zeroed((size_t)count + 1, 1, "frozen parameters");
    if (!mask) return DP_ERR_NOMEM;
    dp_status_t status = dp_model_freeze_mask(model, saved, mask);
    int differs = -1;
    for (int i = 0; status == DP_OK && i < count && differs < 0; i++)
        if (mask[i] != dp_model_param(model, i)->frozen) differs = i;
    free(mask);
    const char *now = dp_model_frozen(model);
    if (status != DP_OK) {
        char message[1024];
        snprintf(message, sizeof message, "%s", dp_error_message());
        return dp_fail(DP_ERR_ARG, "--resume %s: its model.freeze: %s", path, message);
    }
    if (differs >= 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --freeze %s, this run has %s (%s %s; a resume keeps "
                       "the freeze: give the saved list or none; to change it, start a new run with --init %s)",
                       path, *saved ? saved : "(none)", *now ? now : "(none)", dp_model_param(model, differs)->name,
                       dp_model_param(model, differs)->frozen ? "frozen now, not then" : "frozen then, not now",
                       path);
    return DP_OK;
}

/* A resume's moving average: the checkpoint's (its updates too), put in
 * every replica while swapped in; a run without one drops it, a file
 * without one starts it afresh, and another decay or step count is taken:
 * each said in a warning. */
static dp_status_t resume_ema(const dp_fit_config_t *config, void *ctx, const dp_checkpoint_t *c) {
    const dp_checkpoint_info_t *saved = dp_checkpoint_info(c);
    const char *path = config->resume_path;
    if (saved->model_ema_steps > 0 && config->model_ema_steps == 0) {
        warn(config, ctx, "--resume %s: its moving average of the model is not kept (this run has no --model-ema)",
             path);
        return DP_OK;
    }
    if (config->model_ema_steps == 0) return DP_OK;
    if (saved->model_ema_steps == 0) {
        warn(config, ctx, "--resume %s: saved without a moving average of the model: it starts now, from the "
             "model", path);
        return DP_OK;
    }
    if (saved->model_ema_steps != config->model_ema_steps || saved->model_ema_decay != config->model_ema_decay)
        warn(config, ctx, "--resume %s: saved with a moving average of decay %.9g every %d steps, continuing with "
             "%.9g every %d (not what an uninterrupted run would do)", path, saved->model_ema_decay,
             saved->model_ema_steps, config->model_ema_decay, config->model_ema_steps);
    const size_t n = dp_model_num_params(config->model);
    float *ema = dp_alloc(sizeof(float) * n, "the resumed moving average");
    if (!ema) return DP_ERR_NOMEM;
    dp_status_t status = dp_checkpoint_load_ema(c, config->model, ema);
    if (status == DP_OK && (status = dp_trainer_ema_swap(config->trainer)) == DP_OK) {
        dp_trainer_set_params(config->trainer, ema); /* --sync ps: the server too; the caller sets it after */
        status = dp_trainer_ema_swap(config->trainer);
        dp_trainer_set_ema_updates(config->trainer, saved->model_ema_updates);
    }
    free(ema);
    return status;
}

/* Checks the checkpoint at `path` against `run` (the policy at the top),
 * loads the parameters into every replica, the optimizer state into every
 * device's optimizer and the step count into the trainer, and copies the
 * saved counters and loader position into `run`. */
static dp_status_t resume(const dp_fit_config_t *config, void *ctx, dp_checkpoint_info_t *run) {
    const char *path = config->resume_path;
    dp_trainer_t *trainer = config->trainer;
    dp_checkpoint_t *c;
    DP_TRY(dp_checkpoint_open(path, &c));
    const dp_checkpoint_info_t *saved = dp_checkpoint_info(c);
    float *params = dp_alloc(sizeof(float) * dp_model_num_params(config->model), "resumed parameters");
    dp_status_t status = params ? dp_checkpoint_load_params(c, config->model, params) : DP_ERR_NOMEM;
    if (status == DP_OK) status = check_freeze(path, config->model, saved->freeze);
    /* every replica's optimizer (with --sync ps: the server's, on every rank) */
    for (int d = 0; d < dp_trainer_num_devices(trainer) && status == DP_OK; d++)
        status = dp_checkpoint_load_optimizer(c, config->model, dp_trainer_optimizer(trainer, d));
    /* the classes first: other data says so, not that its image count (--limit) or batches differ */
    if (status == DP_OK) status = check_classes(path, saved, run);
    if (status == DP_OK) status = check_position(path, saved, run);
    if (status == DP_OK) status = check_schedule(path, &saved->schedule, &run->schedule);
    if (status == DP_OK) status = check_loss(path, saved, run);
    if (status == DP_OK && (saved->val_height != run->val_height || saved->val_width != run->val_width))
        status = check_val_size(path, saved, run);
    /* the GPU convolution algorithms of the saved run, ahead of any other choice: the same bits on any GPU */
    if (status == DP_OK)
        status = dp_trainer_install_conv_algorithms(trainer, saved->conv_algorithms, saved->num_conv_algorithms);
    if (status != DP_OK) goto done;
    char saved_optim[256], run_optim[256];
    describe_optim(&saved->optim, saved_optim, sizeof saved_optim);
    describe_optim(&run->optim, run_optim, sizeof run_optim);
    if (strcmp(saved_optim, run_optim) != 0)
        warn(config, ctx, "--resume %s: saved with %s; continuing with %s (not what an uninterrupted run would do)",
             path, saved_optim, run_optim);
    if (saved->clip_grad_norm != run->clip_grad_norm) {
        char was[40] = "no --clip-grad-norm", now[40] = "none";
        if (saved->clip_grad_norm > 0.0f)
            snprintf(was, sizeof was, "--clip-grad-norm %.9g", dp_float_decimal(saved->clip_grad_norm));
        if (run->clip_grad_norm > 0.0f) snprintf(now, sizeof now, "%.9g", dp_float_decimal(run->clip_grad_norm));
        warn(config, ctx, "--resume %s: saved with %s, continuing with %s (not what an uninterrupted run would do)",
             path, was, now);
    }
    if (strcmp(saved->augment, run->augment) != 0)
        warn(config, ctx, "--resume %s: saved with --augment %s, continuing with %s (not what an uninterrupted "
             "run would do)", path, saved->augment[0] ? saved->augment : "none",
             run->augment[0] ? run->augment : "none");
    /* (a file of an older dptrain recorded no training transform: nothing to compare) */
    if (saved->train_transform[0] && strcmp(saved->train_transform, run->train_transform) != 0)
        warn(config, ctx, "--resume %s: saved with the training transform '%s', continuing with '%s' (not what an "
             "uninterrupted run would do)", path, saved->train_transform,
             run->train_transform[0] ? run->train_transform : "none");
    if (strcmp(saved->transform, run->transform) != 0)
        warn(config, ctx, "--resume %s: saved with the evaluation transform '%s', continuing with '%s'", path,
             saved->transform[0] ? saved->transform : "none", run->transform[0] ? run->transform : "none");
    if (saved->num_devices * saved->num_ranks != run->num_devices * run->num_ranks)
        warn(config, ctx, "--resume %s: saved by %d device(s) x %d rank(s), resuming on %d x %d: equal up to "
             "float rounding, not bit for bit", path, saved->num_devices, saved->num_ranks, run->num_devices,
             run->num_ranks);
    if ((status = resume_ema(config, ctx, c)) != DP_OK) goto done; /* before the model's own parameters */
    dp_trainer_set_params(trainer, params);
    dp_trainer_optimizers_uploaded(trainer); /* a backend with the state in device memory takes it */
    dp_trainer_set_step_count(trainer, saved->step_count);
    run->step_count = saved->step_count;
    run->optimizer_steps = saved->optimizer_steps;
    run->epochs_completed = saved->epochs_completed;
    run->loader_epoch = saved->loader_epoch;
    run->loader_batch = saved->loader_batch;
    run->epoch_examples = saved->epoch_examples;
    run->best_epoch = saved->best_epoch; /* the best so far: a later epoch must beat it */
    run->best_correct = saved->best_correct;
    run->best_count = saved->best_count;
    /* the epoch's sums so far: this rank's own when the rank count is the
     * saved one (the epoch's metrics line is then the uninterrupted one's,
     * bit for bit); else their total on rank 0 */
    run->epoch_ranks = saved->epoch_ranks;
    for (int r = 0; r < saved->epoch_ranks; r++) {
        run->epoch_loss[r] = saved->epoch_loss[r];
        run->epoch_correct[r] = saved->epoch_correct[r];
    }
done:
    free(params);
    dp_checkpoint_close(c);
    return status;
}

/* A new run from the checkpoint at init_path: every replica gets its
 * weights (the head afresh where its output count differs), *note says
 * what in one line; another normalisation than the file's is warned about,
 * a head kept over other class names than the file's, and a test split of
 * the same folder holding out images the file's run trained on. */
static dp_status_t init_from(const dp_fit_config_t *config, void *ctx, const dp_checkpoint_info_t *run, char *note,
                             size_t note_size) {
    const char *path = config->init_path;
    dp_trainer_t *trainer = config->trainer;
    size_t n = dp_model_num_params(config->model);
    float *params = dp_alloc(sizeof(float) * n, "initial parameters");
    if (!params) return DP_ERR_NOMEM;
    dp_checkpoint_t *c = NULL;
    dp_checkpoint_init_t what;
    memcpy(params, dp_trainer_params(trainer, 0), sizeof(float) * n); /* the trainer's initialisation */
    dp_status_t status = dp_trainer_check_devices(trainer);
    if (status == DP_OK) status = dp_checkpoint_open(path, &c);
    if (status == DP_OK) status = dp_checkpoint_load_init(c, config->model, params, config->init_fresh_head, &what);
    if (status == DP_OK) {
        const dp_checkpoint_info_t *saved = dp_checkpoint_info(c);
        int used = saved->weights_only /* imported (tools/import_torchvision.py): no epochs of dptrain's */
                       ? snprintf(note, note_size, "initialised from %s (parameters and batch norm statistics of %s, "
                                  "imported weights)", path, saved->model)
                       : snprintf(note, note_size, "initialised from %s (parameters and batch norm statistics, %d "
                                  "epoch%s of %s)", path, saved->epochs_completed,
                                  saved->epochs_completed == 1 ? "" : "s", saved->model);
        if (what.fresh_head[0] && !what.asked && used > 0 && (size_t)used < note_size)
            snprintf(note + used, note_size - (size_t)used, "; %s initialised afresh: %d outputs, the checkpoint's "
                     "%d", what.fresh_head, what.model_outputs, what.file_outputs);
        else if (what.fresh_head[0] && used > 0 && (size_t)used < note_size)
            snprintf(note + used, note_size - (size_t)used, "; %s initialised afresh: %d outputs (--fresh-head)",
                     what.fresh_head, what.model_outputs);
        /* the head kept, its outputs now other classes (where both name them: built-in data's are unknown here) */
        if (!what.fresh_head[0] && saved->num_class_names && run->num_class_names && !same_classes(saved, run)) {
            char saved_text[480], run_text[480];
            describe_classes(saved, saved_text, sizeof saved_text);
            describe_classes(run, run_text, sizeof run_text);
            warn(config, ctx, "--init %s: trained on %s, this run's data has %s: the last layer keeps the file's "
                 "weights, each output those of the file's class at its position (--fresh-head starts it afresh)",
                 path, saved_text, run_text);
        }
        /* the same folder with more held out: the file's run trained on some of this run's test images (within
         * a class the held-out files are the first of one hash order, image_holdout.c: a larger fraction's
         * include a smaller's and more) */
        if (saved->holdout[0] && run->holdout[0] && saved->data_dir[0] && strcmp(saved->data_dir, run->data_dir) == 0 &&
            strtod(run->holdout, NULL) > strtod(saved->holdout, NULL))
            warn(config, ctx, "--init %s: trained on %s with --holdout %s, this run holds out %s: its test split "
                 "has images the file's run trained on, and its test accuracy will be too high (give --holdout %s "
                 "to test on images neither run trained on)", path, saved->data_dir, saved->holdout, run->holdout,
                 saved->holdout);
        if (!same_normalize(saved->normalize, run->normalize))
            warn(config, ctx, "--init %s: trained with --normalize %s, this run has %s (this run's applies; the "
                 "weights were fitted to inputs scaled the other way)", path,
                 saved->normalize[0] ? saved->normalize : "(none)", run->normalize[0] ? run->normalize : "(none)");
        dp_trainer_set_params(trainer, params);
    }
    dp_checkpoint_close(c);
    free(params);
    return status;
}

/* To `path`: replica 0's parameters, its optimizer's state (--sync ps: the
 * server's), its moving average (model_ema_steps), `run` with the trainer's
 * current step count and its devices' GPU convolution algorithms. */
static dp_status_t save_to(const dp_fit_config_t *config, const char *path, dp_checkpoint_info_t *run) {
    run->step_count = dp_trainer_step_count(config->trainer);
    float *ema = NULL;
    if (config->model_ema_steps > 0) { /* replica 0's average, downloaded while it is swapped in */
        const size_t bytes = sizeof(float) * dp_model_num_params(config->model);
        if (!(ema = dp_alloc(bytes, "the model's moving average"))) return DP_ERR_NOMEM;
        dp_status_t swapped = dp_trainer_ema_swap(config->trainer); /* dp_fit checked model_ema: it cannot fail */
        if (swapped == DP_OK) memcpy(ema, dp_trainer_params(config->trainer, 0), bytes);
        if (swapped == DP_OK) swapped = dp_trainer_ema_swap(config->trainer);
        if (swapped != DP_OK) {
            free(ema);
            return swapped;
        }
        run->model_ema_updates = dp_trainer_ema_updates(config->trainer);
    }
    run->model_ema = ema;
    const float *params = dp_trainer_params(config->trainer, 0);
    dp_optimizer_t *optimizer = dp_trainer_optimizer(config->trainer, 0);
    DP_TRY(dp_trainer_check_devices(config->trainer)); /* never the bytes a failed download left */
    DP_TRY(dp_trainer_conv_algorithms(config->trainer, &run->conv_algorithms, &run->num_conv_algorithms));
    dp_status_t status = dp_checkpoint_save(path, config->model, params, optimizer, run);
    free(ema);
    run->model_ema = NULL;
    free(run->conv_algorithms);
    run->conv_algorithms = NULL;
    run->num_conv_algorithms = 0;
    return status;
}

static dp_status_t save(const dp_fit_config_t *config, dp_checkpoint_info_t *run) {
    return save_to(config, config->save_path, run);
}

/* The model's moving average after a step (torchvision's reference: the
 * update, then during the lr warm-up a reset, so that the next update copies
 * the model again); the warm-up in steps or in epochs of steps_per_epoch. */
static dp_status_t ema_update(const dp_fit_config_t *config, uint64_t steps_per_epoch) {
    DP_TRY(dp_trainer_ema_update(config->trainer, config->model_ema_decay));
    if (dp_trainer_step_count(config->trainer) <= dp_lr_schedule_warmup_steps(&config->schedule, steps_per_epoch))
        dp_trainer_ema_restart(config->trainer);
    return DP_OK;
}

/* The trainer that tests: config->val_trainer given the trainer's replica 0
 * parameters and batch-norm statistics (its moving average's with ema:
 * swapped in and out), else the trainer itself. */
static dp_status_t test_trainer(const dp_fit_config_t *config, int ema, dp_trainer_t **tester) {
    *tester = config->trainer;
    if (!config->val_trainer) return DP_OK;
    if (ema) DP_TRY(dp_trainer_ema_swap(config->trainer));
    const float *params = dp_trainer_params(config->trainer, 0);
    dp_status_t status = params ? dp_trainer_check_devices(config->trainer) : DP_ERR_ARG;
    if (status == DP_OK) dp_trainer_set_params(config->val_trainer, params);
    const dp_status_t back = ema ? dp_trainer_ema_swap(config->trainer) : DP_OK;
    if (status == DP_OK) status = back;
    *tester = config->val_trainer;
    return status;
}

/* The test set's correct answers for the model's moving average (swapped in and out). */
static dp_status_t evaluate_ema(const dp_fit_config_t *config, int eval_batch, int *correct) {
    if (config->val_trainer) {
        dp_trainer_t *tester;
        DP_TRY(test_trainer(config, 1, &tester));
        return dp_trainer_evaluate_threads(tester, config->test_source, eval_batch, config->loader_threads, correct);
    }
    DP_TRY(dp_trainer_ema_swap(config->trainer));
    dp_status_t status = dp_trainer_evaluate_threads(config->trainer, config->test_source, eval_batch,
                                                     config->loader_threads, correct);
    DP_TRY(dp_trainer_ema_swap(config->trainer));
    return status;
}

/* An epoch's test figures into s: the model's top-1 (*correct) and, with
 * more than 5 outputs, top-5 accuracy (with 5 or fewer every answer is in
 * the top 5), and its moving average's top-1 accuracy when there is one. */
static dp_status_t evaluate_epoch(const dp_fit_config_t *config, int eval_batch, int test_count, dp_epoch_stats_t *s,
                                  int *correct) {
    dp_eval_counts_t counts;
    dp_trainer_t *tester;
    DP_TRY(test_trainer(config, 0, &tester));
    DP_TRY(dp_trainer_evaluate_counts(tester, config->test_source, eval_batch, config->loader_threads, NULL,
                                      &counts));
    *correct = counts.correct;
    s->test_acc = (double)counts.correct / test_count;
    s->has_acc5 = dp_model_num_outputs(config->model) > 5;
    s->test_acc5 = s->has_acc5 ? (double)counts.top5 / test_count : 0.0;
    int ema_correct = 0;
    if (config->model_ema_steps > 0) DP_TRY(evaluate_ema(config, eval_batch, &ema_correct));
    s->has_ema = config->model_ema_steps > 0;
    s->test_acc_ema = (double)ema_correct / test_count;
    return DP_OK;
}

/* After `epochs` completed: early_stop epochs or more past the best one. */
static int early_stop_due(const dp_fit_config_t *config, const dp_checkpoint_info_t *run, int epochs) {
    return config->early_stop > 0 && run->best_epoch > 0 && epochs - run->best_epoch >= config->early_stop;
}

/* The epoch just evaluated (1-based), `correct` of `count`: the run's best so
 * far when it beats the recorded one (none: the first), ties keeping the
 * earlier; 1 when it is. */
static int note_best(dp_checkpoint_info_t *run, int epoch, int correct, int count) {
    if (run->best_epoch > 0 && (double)correct * run->best_count <= (double)run->best_correct * count) return 0;
    run->best_epoch = epoch, run->best_correct = correct, run->best_count = count;
    return 1;
}

/* "M0,..,S0,.." (%.9g, exact) of the source's normalisation, "" for none. */
static void describe_normalize(const dp_source_info_t *info, char *text, size_t size) {
    text[0] = '\0';
    if (!info->normalize.enabled) return;
    size_t used = 0;
    for (int i = 0; i < 2 * info->channels && used < size; i++) {
        float v = i < info->channels ? info->normalize.mean[i] : info->normalize.std[i - info->channels];
        used += (size_t)snprintf(text + used, size - used, i ? ",%.9g" : "%.9g", v);
    }
}

/* --- the loop -------------------------------------------------------------------- */
static dp_status_t check_config(const dp_fit_config_t *c) {
    if (!c->trainer || !c->model || !c->train_source || !c->test_source)
        return dp_fail(DP_ERR_ARG, "fit: trainer, model and the training and test data (sources or sets) are "
                       "required");
    const dp_source_info_t *train = dp_batch_source_info(c->train_source);
    if (c->epochs < 1) return dp_fail(DP_ERR_ARG, "fit: epochs must be >= 1, found %d", c->epochs);
    if (c->stop_after < 0) return dp_fail(DP_ERR_ARG, "fit: stop_after must be >= 0, found %d", c->stop_after);
    if (c->early_stop < 0) return dp_fail(DP_ERR_ARG, "fit: early_stop must be >= 0, found %d", c->early_stop);
    if (c->val_trainer && (c->val_height < 1 || c->val_width < 1 ||
                           dp_model_num_params(dp_trainer_model(c->val_trainer)) != dp_model_num_params(c->model)))
        return dp_fail(DP_ERR_ARG, "fit: val_trainer must hold the model's %zu parameters, at val_height x val_width "
                       "of 1 or more; found %zu at %d x %d", dp_model_num_params(c->model),
                       dp_model_num_params(dp_trainer_model(c->val_trainer)), c->val_height, c->val_width);
    if (c->ra_reps < 0 || c->ra_reps > DP_RA_REPS_LIMIT || c->ra_reps > train->count)
        return dp_fail(DP_ERR_ARG, "fit: ra_reps must be 0 (none) to %d and at most the %d training samples, found %d",
                       DP_RA_REPS_LIMIT, train->count, c->ra_reps);
    if (c->model_ema_steps < 0 || (c->model_ema_steps > 0 && !(c->model_ema_decay >= 0.0 && c->model_ema_decay <= 1.0)))
        return dp_fail(DP_ERR_ARG, "fit: model_ema_steps must be >= 0 and model_ema_decay in [0, 1], found %d and %g",
                       c->model_ema_steps, c->model_ema_decay);
    if ((c->model_ema_steps > 0) != (dp_trainer_model_ema(c->trainer) != 0))
        return dp_fail(DP_ERR_ARG, "fit: model_ema_steps %d with a trainer %s a moving average (config.model_ema)",
                       c->model_ema_steps, dp_trainer_model_ema(c->trainer) ? "that keeps" : "without");
    if (c->eval_batch_size < 0)
        return dp_fail(DP_ERR_ARG, "fit: eval_batch_size must be >= 0, found %d", c->eval_batch_size);
    if (c->log_every_steps < 0)
        return dp_fail(DP_ERR_ARG, "fit: log_every_steps must be >= 0, found %d", c->log_every_steps);
    if (c->save_every_steps < 0)
        return dp_fail(DP_ERR_ARG, "fit: save_every_steps must be >= 0, found %d", c->save_every_steps);
    if (c->save_best_path && c->save_path && strcmp(c->save_best_path, c->save_path) == 0)
        return dp_fail(DP_ERR_ARG, "fit: save_best_path is save_path (%s): the best epoch's checkpoint needs a "
                       "file of its own", c->save_path);

    int ranks = c->world.size > 1 ? c->world.size : 1;
    int all_devices = dp_trainer_num_devices(c->trainer) * ranks;
    if (c->batch_size < all_devices)
        return dp_fail(DP_ERR_ARG, "fit: batch size %d is smaller than the number of devices (%d): every device "
                       "needs at least one example", c->batch_size, all_devices);
    if (c->batch_size > train->count)
        return dp_fail(DP_ERR_ARG, "fit: batch size %d is larger than the training set (%d images)",
                       c->batch_size, train->count);
    if (c->loader_threads < 0 || c->loader_depth < 0)
        return dp_fail(DP_ERR_ARG, "fit: loader_threads %d and loader_depth %d must be >= 0", c->loader_threads,
                       c->loader_depth);
    const char *name = c->model_name ? c->model_name : dp_model_name(c->model);
    if (strlen(name) >= sizeof ((dp_checkpoint_info_t *)0)->model)
        return dp_fail(DP_ERR_ARG, "fit: model name: %zu bytes, checkpoints hold up to %zu", strlen(name),
                       sizeof ((dp_checkpoint_info_t *)0)->model - 1);
    DP_TRY(dp_lr_schedule_check(&c->schedule));
    /* the trainer runs its own model: another one here would be trained as the trainer's and
     * saved under this one's name */
    if (dp_trainer_model(c->trainer) != c->model)
        return dp_fail(DP_ERR_ARG, "fit: config.model (%s) is not the trainer's model (%s): give the model the "
                       "trainer was made with", dp_model_name(c->model), dp_model_name(dp_trainer_model(c->trainer)));
    const dp_source_info_t *test = dp_batch_source_info(c->test_source);
    DP_TRY(dp_model_check_input(c->model, name, "fit: the training data's", train->channels, train->height,
                                train->width));
    DP_TRY(dp_model_check_input(c->val_trainer ? dp_trainer_model(c->val_trainer) : c->model, name,
                                "fit: the test data's", test->channels, test->height, test->width));
    /* a trainer that has stepped carries its parameters, optimizer state and step count
     * (the schedule's, the dropout masks') into this call: epochs 0.. again at later steps'
     * learning rates, saved as a checkpoint no resume reproduces */
    if (dp_trainer_step_count(c->trainer) > 0 && !c->resume_path)
        return dp_fail(DP_ERR_ARG, "fit: the trainer has taken %" PRIu64 " steps already (an earlier dp_fit or "
                       "dp_trainer_step): a new run needs a new trainer; to continue, resume from a checkpoint "
                       "(resume_path)", dp_trainer_step_count(c->trainer));
    return DP_OK;
}

/* A file dp_fit writes (rank 0): refused before training when it is a
 * directory or its directory is not there or not writable, so a run does
 * not train an epoch to find out (what dptrain train checks of its options). */
static dp_status_t check_output_path(const char *field, const char *path) {
    if (!path) return DP_OK;
    char what[64];
    snprintf(what, sizeof what, "fit: %s", field);
    return dp_file_check_writable(what, path);
}

static void tell_step(const dp_fit_config_t *config, void *ctx, dp_fit_event_t event, int epoch, int step,
                      int steps, double mean_loss) {
    if (!config->on_step) return;
    dp_fit_step_t s = {.event = event, .epoch = epoch, .step = step, .steps = steps, .mean_loss = mean_loss};
    config->on_step(&s, ctx);
}

/* The epoch's sums so far into `run` (every rank calls it: rank r's
 * loss and correct count go to slot r, added to zeros, so exact). */
static dp_status_t gather_epoch_sums(const dp_fit_config_t *config, double loss_sum, int correct, int seen,
                                     dp_checkpoint_info_t *run) {
    const int ranks = config->world.size > 1 ? config->world.size : 1;
    double *sums = dp_alloc_zeroed((size_t)ranks * 2, sizeof *sums, "epoch sums");
    if (!sums) return DP_ERR_NOMEM;
    sums[2 * config->world.rank] = loss_sum;
    sums[2 * config->world.rank + 1] = correct;
    dp_status_t status = ranks > 1 ? dp_world_sum_doubles(sums, 2 * ranks) : DP_OK;
    if (status == DP_OK) {
        if (ranks <= DP_CHECKPOINT_RANK_SUMS) {
            run->epoch_ranks = ranks;
            for (int r = 0; r < ranks; r++) {
                run->epoch_loss[r] = sums[2 * r];
                run->epoch_correct[r] = (int)sums[2 * r + 1];
            }
        } else { /* too many to list: the total */
            run->epoch_ranks = 1;
            run->epoch_loss[0] = run->epoch_correct[0] = 0;
            for (int r = 0; r < ranks; r++) {
                run->epoch_loss[0] += sums[2 * r];
                run->epoch_correct[0] += (int)sums[2 * r + 1];
            }
        }
        run->epoch_examples = seen;
    }
    free(sums);
    return status;
}

/* One epoch's steps, from step run->loader_batch when resuming inside it
 * (the loader sought there, the sums so far restored): the schedule's lr
 * for each step, the loss and correct count of this rank's examples, the
 * global examples seen, the seconds; every save_every_steps steps a
 * checkpoint (rank 0 writes it). */
static dp_status_t train_epoch(const dp_fit_config_t *config, void *ctx, dp_batch_loader_t *loader, int epoch,
                               dp_checkpoint_info_t *run, double sums[3], double *lr, double *epoch_sec,
                               int *trained, dp_fit_stop_t *stop_state) {
    dp_trainer_t *trainer = config->trainer;
    const int steps = dp_batch_loader_num_batches(loader);
    const int rank = config->world.rank, ranks = config->world.size > 1 ? config->world.size : 1;
    double loss_sum = 0.0;
    int correct = 0, seen = 0, step = 0;
    if (run->loader_epoch == epoch && run->loader_batch > 0) { /* resumed inside this epoch */
        step = run->loader_batch;
        seen = run->epoch_examples;
        if (run->epoch_ranks == ranks) {
            loss_sum = run->epoch_loss[rank];
            correct = run->epoch_correct[rank];
        } else if (rank == 0) {
            for (int r = 0; r < run->epoch_ranks; r++) {
                loss_sum += run->epoch_loss[r];
                correct += run->epoch_correct[r];
            }
        }
    }
    DP_TRY(dp_batch_loader_seek(loader, epoch, step));
    const int first_seen = seen;
    tell_step(config, ctx, DP_FIT_EPOCH_BEGIN, epoch + 1, step, steps, 0.0);
    /* the devices' sums start at zero (a failed call may have left some), and the clipped norms' */
    DP_TRY(dp_trainer_read_metrics(trainer, NULL, NULL, 1));
    dp_grad_norm_stats_t norms;
    dp_trainer_grad_norms(trainer, &norms, 1);
    const dp_batch_t *batch;
    int unread = 0;
    dp_status_t status = DP_OK;
    double start = now_seconds(), shown_loss = 0.0, shown_at = -1.0;
    dp_fit_log_clock_t log_clock;
    dp_fit_log_start(&log_clock, step, seen, start);
    for (;;) {
        if ((status = dp_batch_loader_next(loader, &batch)) != DP_OK || !batch) break;
        /* the schedule's lr for this step, from the step count (a resumed run agrees) */
        *lr = dp_lr_schedule_lr(&config->schedule, dp_trainer_step_count(trainer), (uint64_t)steps);
        dp_trainer_set_lr(trainer, (float)*lr);
        /* the step's figures stay on the devices (no host wait): read at
         * fixed steps only, so their sums' rounding never depends on timing */
        status = dp_trainer_step(trainer, batch, NULL, NULL);
        if (status != DP_OK) break;
        if (config->model_ema_steps > 0 && step % config->model_ema_steps == 0 &&
            (status = ema_update(config, (uint64_t)steps)) != DP_OK)
            break;
        seen += batch->n;
        unread = 1;
        step++;
        int stop = 0; /* preempted: every rank saves here and stops (fit_stop.c) */
        if ((status = dp_fit_stop_vote(stop_state, step < steps, &stop)) != DP_OK) break;
        const int saves = (config->save_every_steps > 0 && step % config->save_every_steps == 0 && step < steps) || stop;
        if (step == steps || saves) { /* folded into the epoch's sums */
            if ((status = dp_trainer_read_metrics(trainer, &loss_sum, &correct, 1)) != DP_OK) break;
            unread = 0;
            shown_loss = loss_sum / seen;
            shown_at = now_seconds();
        } else if (config->on_step && (shown_at < 0.0 || now_seconds() - shown_at >= DP_FIT_PEEK_SEC)) {
            double peek = loss_sum; /* a peek: the sums stay on the devices */
            if ((status = dp_trainer_read_metrics(trainer, &peek, NULL, 0)) != DP_OK) break;
            shown_loss = peek / seen;
            shown_at = now_seconds();
        }
        tell_step(config, ctx, DP_FIT_STEP_END, epoch + 1, step, steps, shown_loss);
        if (config->log_every_steps > 0 && (status = dp_fit_log_step(config, ctx, &log_clock, epoch + 1, step, steps,
                                                                     loss_sum, correct, seen, *lr, now_seconds())) != DP_OK)
            break;
        /* inside the epoch (its end saves anyway); every rank gathers the
         * sums, whether or not it has a save_path (only rank 0 writes) */
        if (saves) {
            if ((status = dp_fit_check_finite(config, stop_state, epoch + 1, step, steps)) != DP_OK) break;
            if ((status = gather_epoch_sums(config, loss_sum, correct, seen, run)) != DP_OK) break;
            run->epochs_completed = run->loader_epoch = epoch;
            run->loader_batch = step;
            if (rank == 0 && config->save_path && (status = save(config, run)) != DP_OK && !stop) break;
            if (rank == 0 && config->save_path && status == DP_OK)
                stop_state->saved = 1, stop_state->saved_epochs = epoch, stop_state->saved_step = step;
        }
        if (stop) {
            status = dp_fit_stop_saved(stop_state, status, epoch, step, steps);
            break;
        }
        dp_fit_stop_after(stop_state, dp_trainer_step_count(trainer));
    }
    if (status == DP_OK && unread) status = dp_trainer_read_metrics(trainer, &loss_sum, &correct, 1);
    *epoch_sec = now_seconds() - start;
    *trained = seen - first_seen;
    tell_step(config, ctx, DP_FIT_STEPS_END, epoch + 1, step, steps, seen ? loss_sum / seen : 0.0);
    sums[0] = loss_sum;
    sums[1] = correct;
    sums[2] = seen;
    return status;
}

/* The model's outputs against the training data's classes: fewer is an
 * error (a label would have no output), more a warning (outputs no label
 * trains), written to warning[] and said once the checkpoints are read (a
 * resume or --init refused is its one line). Before anything runs or is
 * written. */
static dp_status_t check_outputs(const dp_fit_config_t *config, char *warning, size_t size) {
    const char *name = config->model_name ? config->model_name : dp_model_name(config->model);
    return dp_model_check_classes(config->model, name, dp_batch_source_info(config->train_source)->num_classes,
                                  "training data", warning, size);
}

/* *run: what a checkpoint of this run records (the optimizer's
 * hyper-parameters with the defaults filled in, the base lr, the data's
 * description); a resume fills in the saved position. */
static dp_status_t describe_run(const dp_fit_config_t *config, const dp_batch_loader_t *loader,
                                dp_checkpoint_info_t *run) {
    dp_trainer_t *trainer = config->trainer;
    const dp_source_info_t *train = dp_batch_source_info(config->train_source);
    const int ranks = config->world.size > 1 ? config->world.size : 1;
    *run = (dp_checkpoint_info_t){.optim = *dp_optimizer_config(dp_trainer_optimizer(trainer, 0)),
                                  .schedule = config->schedule,
                                  .steps_per_epoch = (uint64_t)dp_batch_loader_num_batches(loader),
                                  .seed = config->seed, .batch_size = config->batch_size,
                                  .train_examples = train->count, .accumulate = dp_trainer_accumulate(trainer),
                                  .epochs_planned = config->epochs,
                                  .sync_batch_norm = dp_trainer_sync_batch_norm(trainer),
                                  .label_smoothing = dp_trainer_label_smoothing(trainer),
                                  .clip_grad_norm = dp_trainer_clip_grad_norm(trainer),
                                  .mix = dp_trainer_mix(trainer),
                                  .random_erase = dp_trainer_random_erase(trainer),
                                  .model_ema_steps = config->model_ema_steps,
                                  .model_ema_decay = config->model_ema_decay,
                                  .early_stop = config->early_stop,
                                  .ra_reps = config->ra_reps > 1 ? config->ra_reps : 0,
                                  .num_devices = dp_trainer_num_devices(trainer), .num_ranks = ranks};
    run->optim.lr = (float)config->schedule.lr;
    if (train->class_names) { /* an image folder's: kept in every checkpoint */
        run->class_names = (char **)train->class_names;
        run->num_class_names = train->num_classes;
        DP_TRY(dp_checkpoint_check_class_names(run->class_names, run->num_class_names));
    }
    describe_normalize(train, run->normalize, sizeof run->normalize);
    snprintf(run->augment, sizeof run->augment, "%s",
             config->augment_text && strcmp(config->augment_text, "none") != 0 ? config->augment_text : "");
    snprintf(run->transform, sizeof run->transform, "%s", config->transform_text ? config->transform_text : "");
    snprintf(run->train_transform, sizeof run->train_transform, "%s",
             config->train_transform_text ? config->train_transform_text : "");
    snprintf(run->holdout, sizeof run->holdout, "%s", config->holdout_text ? config->holdout_text : "");
    run->data_train_total = config->train_total > 0 ? config->train_total : 0;
    if (config->val_trainer) run->val_height = config->val_height, run->val_width = config->val_width;
    if (config->data_dir_text && strlen(config->data_dir_text) < sizeof run->data_dir)
        memcpy(run->data_dir, config->data_dir_text, strlen(config->data_dir_text) + 1);
    snprintf(run->model, sizeof run->model, "%s",
             config->model_name ? config->model_name : dp_model_name(config->model));
    if (strlen(dp_model_frozen(config->model)) > DP_CHECKPOINT_MAX_FREEZE)
        return dp_fail(DP_ERR_ARG, "--freeze: a list of %zu bytes, checkpoints hold up to %d",
                       strlen(dp_model_frozen(config->model)), DP_CHECKPOINT_MAX_FREEZE);
    snprintf(run->freeze, sizeof run->freeze, "%s", dp_model_frozen(config->model));
    snprintf(run->dptrain_version, sizeof run->dptrain_version, "%s",
             config->dptrain_version ? config->dptrain_version : DPTRAIN_VERSION);
    return DP_OK;
}

/* dp_fit over the config's sources. */
/* The epoch's figures that come from the trainer and the sums (every
 * rank's loss, correct count and examples): the loss and accuracy, the
 * devices, the memory, the skipped files, gradient clipping's norms. */
static void fill_epoch_stats(const dp_fit_config_t *config, const double sums[3], dp_epoch_stats_t *s) {
    dp_trainer_t *trainer = config->trainer;
    s->train_loss = sums[0] / sums[2];
    s->label_smoothing = dp_float_decimal(dp_trainer_label_smoothing(trainer));
    s->train_acc = sums[1] / sums[2];
    s->devices = dp_trainer_device_names(trainer);
    s->num_devices = dp_trainer_num_devices(trainer) * (config->world.size > 1 ? config->world.size : 1);
    s->num_ranks = config->world.size;
    s->device_mem_peak = dp_trainer_device_memory_peak(trainer);
    s->skipped_files = dp_batch_source_skipped(config->train_source);
    dp_grad_norm_stats_t norms;
    dp_trainer_grad_norms(trainer, &norms, 1);
    if ((s->grad_norm_steps = norms.steps) > 0) {
        s->grad_norm_mean = norms.norm_sum / norms.steps;
        s->grad_norm_max = norms.norm_max;
        s->clipped_fraction = (double)norms.clipped / norms.steps;
    }
}

static dp_status_t fit_sources(const dp_fit_config_t *config, dp_fit_epoch_fn on_epoch, void *ctx,
                               dp_fit_result_t *result) {
    /* every rank starts training, or none: a failure before it is agreed (dp_world_agree) */
    dp_fit_stop_t stop_state;
    char outputs_warning[512] = "";
    dp_status_t status = check_config(config);
    if (status == DP_OK) status = check_outputs(config, outputs_warning, sizeof outputs_warning);
    if (status == DP_OK && config->world.rank == 0) { /* rank 0 alone writes files */
        const char *fields[4] = {"save_path", "save_best_path", "metrics_path", "plot_path"};
        const char *paths[4] = {config->save_path, config->save_best_path, config->metrics_path, config->plot_path};
        for (int i = 0; i < 4 && status == DP_OK; i++) status = check_output_path(fields[i], paths[i]);
    }
    if (status == DP_OK) status = dp_fit_stop_begin(&stop_state, config);
    if (status != DP_OK) return dp_world_agree(status);
    dp_trainer_t *trainer = config->trainer;
    const dp_world_t *world = &config->world;
    const int writes = world->rank == 0; /* rank 0 alone writes files */
    const int eval_batch = config->eval_batch_size ? config->eval_batch_size : 1000;
    const int test_count = dp_batch_source_info(config->test_source)->count;
    dp_batch_loader_t *loader = NULL;
    dp_epoch_stats_t *history = NULL;
    int agreed = 0; /* the ranks' agreement to start is behind */
    const dp_batch_loader_config_t lc = {.batch_size = config->batch_size, .shuffle = 1, .seed = config->seed,
                                         .training = 1, .repeats = config->ra_reps, .threads = config->loader_threads,
                                         .depth = config->loader_depth, .share = dp_trainer_batch_share,
                                         .share_ctx = trainer};
    status = dp_batch_loader_new(config->train_source, &lc, &loader);
    if (status != DP_OK) goto done;
    history = dp_alloc_zeroed((size_t)config->epochs, sizeof *history, "epoch history");
    if (!history) {
        status = DP_ERR_NOMEM;
        goto done;
    }
    /* what a checkpoint records; resume fills in the saved position */
    dp_checkpoint_info_t run;
    if ((status = describe_run(config, loader, &run)) != DP_OK) goto done;
    char init_note[2048] = "";
    if (config->init_path && config->resume_path) {
        status = dp_fail(DP_ERR_ARG, "--init %s with --resume %s: --init starts a new run from a checkpoint's "
                         "weights, --resume continues the run that saved one; give one of them", config->init_path,
                         config->resume_path);
        goto done;
    }
    if (config->resume_path && (status = resume(config, ctx, &run)) != DP_OK) goto done;
    if (config->resume_path && config->save_path && strcmp(config->resume_path, config->save_path) == 0)
        stop_state.saved = 1, stop_state.saved_epochs = run.epochs_completed, stop_state.saved_step = run.loader_batch;
    if (config->init_path && (status = init_from(config, ctx, &run, init_note, sizeof init_note)) != DP_OK) goto done;
    if (outputs_warning[0]) warn(config, ctx, "%s", outputs_warning);
    agreed = 1;
    if ((status = dp_world_agree(DP_OK)) != DP_OK) goto done;
    const int first_epoch = run.loader_epoch;
    int last_epoch = config->stop_after && config->stop_after < config->epochs ? config->stop_after : config->epochs;
    /* a run that stopped early (at an epoch's end) trains no further */
    const int done_early = early_stop_due(config, &run, first_epoch) && run.loader_batch == 0;
    if (done_early) last_epoch = first_epoch;
    int stopped_early = 0;
    if (config->on_begin) {
        dp_fit_begin_t begin = {.first_epoch = first_epoch, .last_epoch = last_epoch,
                                .steps_per_epoch = dp_batch_loader_num_batches(loader),
                                .devices = dp_trainer_device_names(trainer),
                                .allreduce = dp_trainer_allreduce(trainer),
                                .resumed = config->resume_path != NULL, .first_step = run.loader_batch,
                                .step_count = run.step_count, .init = config->init_path ? init_note : NULL,
                                .stopped_early = done_early, .best_epoch = run.best_epoch};
        config->on_begin(&begin, ctx);
    }
    int test_correct = 0;
    for (int epoch = first_epoch; epoch < last_epoch; epoch++) {
        double sums[3], lr = config->schedule.lr, epoch_sec;
        int trained;
        if ((status = train_epoch(config, ctx, loader, epoch, &run, sums, &lr, &epoch_sec, &trained, &stop_state)) !=
            DP_OK)
            goto done;
        /* this rank's loss and correct count, then every rank's (seen counts
         * the global batches already) */
        if ((status = dp_world_sum_doubles(sums, 2)) != DP_OK) goto done;
        dp_epoch_stats_t *s = &history[epoch];
        if ((status = evaluate_epoch(config, eval_batch, test_count, s, &test_correct)) != DP_OK) goto done;
        s->epoch = epoch + 1;
        s->lr = lr;
        s->epoch_sec = epoch_sec;
        s->images_per_sec = trained / epoch_sec; /* a resumed epoch: the part trained now */
        fill_epoch_stats(config, sums, s);
        const int best = note_best(&run, epoch + 1, test_correct, test_count);
        s->best_epoch = run.best_epoch;
        if (on_epoch && (status = on_epoch(s, ctx)) != DP_OK) goto done;
        /* the metrics also say what ran: the precision, the layout, the gradient sum, the kernels' ISA, the
         * CPU, the BLAS */
        const dp_run_info_t what_ran = {.isa = dp_isa_name(dp_cpu_isa()),
                                        .cpu = dp_cpu_model(),
                                        .blas = dp_cpu_blas(),
                                        .precision = config->precision ? config->precision : "fp32",
                                        .layout = config->layout ? config->layout : "nchw",
                                        .sync = dp_trainer_sync_strategy(trainer)};
        if (writes && config->metrics_path &&
            (status = dp_metrics_append_run(config->metrics_path, s, &what_ran)) != DP_OK)
            goto done;
        if (writes && config->plot_path &&
            (status = dp_plot_write_svg(config->plot_path, history + first_epoch, epoch + 1 - first_epoch)) != DP_OK)
            goto done;
        /* a diverged model stops here, on every rank, before anything is saved from it (fit_finite.c) */
        if ((status = dp_fit_check_finite(config, &stop_state, epoch + 1, dp_batch_loader_num_batches(loader),
                                          dp_batch_loader_num_batches(loader))) != DP_OK)
            goto done;
        run.epochs_completed = run.loader_epoch = epoch + 1;
        run.loader_batch = run.epoch_ranks = run.epoch_examples = 0; /* an epoch's end */
        memset(run.epoch_loss, 0, sizeof run.epoch_loss);
        memset(run.epoch_correct, 0, sizeof run.epoch_correct);
        if (writes && config->save_path && (status = save(config, &run)) != DP_OK) goto done;
        if (writes && config->save_path) stop_state.saved = 1, stop_state.saved_epochs = epoch + 1, stop_state.saved_step = 0;
        if (writes && best && config->save_best_path &&
            (status = save_to(config, config->save_best_path, &run)) != DP_OK)
            goto done;
        if (epoch + 1 < last_epoch && early_stop_due(config, &run, epoch + 1)) { /* the same on every rank */
            stopped_early = last_epoch = epoch + 1;
            break;
        }
    }
    /* Data parallelism's promise: every replica, on every rank, the same. */
    if ((status = dp_trainer_check_replicas(trainer)) != DP_OK) goto done;
    double total_sec = 0.0;
    for (int e = first_epoch; e < last_epoch; e++) total_sec += history[e].epoch_sec;
    if (first_epoch >= last_epoch) { /* the saved model's accuracy instead */
        dp_trainer_t *tester;
        if ((status = test_trainer(config, 0, &tester)) != DP_OK ||
            (status = dp_trainer_evaluate_threads(tester, config->test_source, eval_batch, config->loader_threads,
                                                  &test_correct)) != DP_OK)
            goto done;
    }
    if (result) {
        *result = (dp_fit_result_t){.first_epoch = first_epoch, .last_epoch = last_epoch,
                                    .test_correct = test_correct, .test_count = test_count,
                                    .test_acc = (double)test_correct / test_count,
                                    .mean_epoch_sec = last_epoch > first_epoch
                                                          ? total_sec / (last_epoch - first_epoch) : 0.0,
                                    .step_count = dp_trainer_step_count(trainer),
                                    .stopped_early = stopped_early,
                                    .best_epoch = run.best_epoch, .best_correct = run.best_correct,
                                    .best_count = run.best_count};
        /* the CLI's summary prints the last epoch's accuracy as computed there */
        if (last_epoch > first_epoch) result->test_acc = history[last_epoch - 1].test_acc;
    }
done:
    if (!agreed) status = dp_world_agree(status); /* a failure before training: every rank's */
    dp_fit_stop_end(&stop_state);
    free(history);
    dp_batch_loader_free(loader);
    return status;
}

dp_status_t dp_fit(const dp_fit_config_t *config, dp_fit_epoch_fn on_epoch, void *ctx, dp_fit_result_t *result) {
    if (!config) return dp_fail(DP_ERR_ARG, "fit: no configuration given (NULL)");
    if (config->train_source || config->test_source || !config->train_set || !config->test_set)
        return fit_sources(config, on_epoch, ctx, result);
    /* datasets in memory: sources over them, for this call */
    dp_fit_config_t c = *config;
    dp_status_t status = dp_memory_source_new((dp_dataset_t *)config->train_set, &config->augment, 0,
                                              &c.train_source);
    if (status == DP_OK) status = dp_memory_source_new((dp_dataset_t *)config->test_set, NULL, 0, &c.test_source);
    if (status == DP_OK) status = fit_sources(&c, on_epoch, ctx, result);
    dp_batch_source_free(c.train_source);
    dp_batch_source_free(c.test_source);
    return status;
}
