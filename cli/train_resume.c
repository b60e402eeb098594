/* train_resume.c - `dptrain train --resume FILE` continues the run as it
 * was saved, as PyTorch Lightning's fit(ckpt_path=...) and Keras'
 * BackupAndRestore do: every run-defining option the command line does
 * not give is the checkpoint's (the optimizer and its hyper-parameters,
 * the lr schedule and its parameters, --epochs, --batch-size and
 * --accumulate, --seed, --sync-batch-norm, --label-smoothing, --clip-grad-norm,
 * --model-ema and its steps and decay, --early-stop, --ra-sampler and
 * --ra-reps, --limit,
 * --augment, an image folder's --transform, --auto-augment, --ra-magnitude,
 * --color-jitter and --holdout); then the line
 * saying which of them are not at their defaults. Where it saves is not
 * taken: without --save a resume writes nothing (train_output.c warns once
 * it starts), so that the file it resumes is never replaced unasked. An
 * option given keeps the resume's rules (fit.c: refused where it
 * contradicts the checkpoint, as --seed and --label-smoothing, warned about
 * where a change is allowed). --model, --freeze and
 * --normalize come from the checkpoint as well (train.c, train_init.c);
 * the devices and threads are this machine's, never the checkpoint's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/color_jitter.h"
#include "dptrain/image_folder.h"
#include "dptrain/io.h"
#include "train.h"
#include "../src/core/hash.h"

#define GIVEN(field) train_option_given(o, &o->field)

/* The optimizer and the hyper-parameters of its kind; none when --optimizer
 * names another (the resume refuses it). */
static void take_optimizer(train_options_t *o, const dp_optim_config_t *saved) {
    const char *name = dp_optim_kind_name(saved->kind);
    if (GIVEN(optimizer) && strcmp(o->optimizer, name) != 0) return;
    o->optimizer = name;
    if (!GIVEN(lr)) o->lr = saved->lr;
    if (!GIVEN(weight_decay)) o->weight_decay = saved->weight_decay;
    if (!GIVEN(norm_weight_decay)) o->norm_weight_decay = saved->has_norm_weight_decay ? saved->norm_weight_decay : NAN;
    if (!GIVEN(bias_weight_decay)) o->bias_weight_decay = saved->has_bias_weight_decay ? saved->bias_weight_decay : NAN;
    if (saved->kind == DP_OPTIM_MOMENTUM && !GIVEN(momentum)) o->momentum = saved->momentum;
    if (saved->kind == DP_OPTIM_MOMENTUM && !GIVEN(nesterov)) o->nesterov = saved->nesterov;
    const int adam = saved->kind == DP_OPTIM_ADAM || saved->kind == DP_OPTIM_ADAMW;
    if (adam && !GIVEN(beta1)) o->beta1 = saved->beta1;
    if (adam && !GIVEN(beta2)) o->beta2 = saved->beta2;
    if ((adam || saved->kind == DP_OPTIM_ADAGRAD) && !GIVEN(eps)) o->eps = saved->eps;
}

/* The schedule and its parameters (floats: the file holds each as the
 * shortest decimal of the float given, which rounds back to it); none when
 * --lr-schedule names another (refused). The warm-up, in epochs or steps,
 * only when neither is given; its method, start and placement each when
 * not given. */
static void take_schedule(train_options_t *o, const dp_lr_schedule_t *saved) {
    const char *name = dp_lr_schedule_kind_name(saved->kind);
    if (GIVEN(lr_schedule) && strcmp(o->lr_schedule, name) != 0) return;
    o->lr_schedule = name;
    if (!GIVEN(lr_step_epochs) && saved->step_epochs > 0) o->lr_step_epochs = saved->step_epochs;
    if (!GIVEN(lr_gamma) && saved->gamma > 0.0) o->lr_gamma = (float)saved->gamma;
    if (!GIVEN(lr_min)) o->lr_min = (float)saved->min_lr;
    if (!GIVEN(warmup_epochs) && !GIVEN(warmup_steps) && saved->warmup_steps <= (1u << 30)) {
        o->warmup_epochs = (float)saved->warmup_epochs;
        o->warmup_steps = (int)saved->warmup_steps;
    }
    if (!GIVEN(warmup_method)) o->warmup_method = dp_lr_warmup_method_name(saved->warmup_method);
    if (!GIVEN(warmup_start) && saved->warmup_start != 0.0) o->warmup_start = (float)saved->warmup_start;
    if (!GIVEN(warmup_sequential)) o->warmup_sequential = saved->warmup_sequential;
}

/* The step's batch (the file's batch_size) as the saved --batch-size x
 * --accumulate; --accumulate N alone: the batch that makes the saved step
 * with N (where N divides it); --batch-size B alone: the saved N where B x
 * N is the saved step, else 1 (then B must be the saved step, as before:
 * the resume refuses another product); the seed, --sync-batch-norm,
 * --label-smoothing (0 from a file without it), the training-set size
 * (--limit: the same as the data's when the run had no --limit) and the
 * planned --epochs (only a cosine schedule's length in a file of an older
 * dptrain). */
static void take_position(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    const int step = info->batch_size, accumulate = info->accumulate > 0 ? info->accumulate : 1;
    if (!o->batch_size_given && !GIVEN(accumulate)) {
        o->batch_size = step / accumulate;
        o->accumulate = accumulate;
    } else if (!GIVEN(accumulate)) {
        o->accumulate = (int64_t)o->batch_size * accumulate == step ? accumulate : 1;
    } else if (!o->batch_size_given) {
        o->batch_size = step % o->accumulate == 0 ? step / o->accumulate : step / accumulate;
    }
    if (!GIVEN(seed)) o->seed = info->seed;
    if (!GIVEN(limit)) o->limit = info->train_examples;
    if (!GIVEN(sync_batch_norm)) o->sync_batch_norm = info->sync_batch_norm;
    if (!GIVEN(label_smoothing)) o->label_smoothing = info->label_smoothing;
    if (!GIVEN(clip_grad_norm)) o->clip_grad_norm = info->clip_grad_norm;
    if (!GIVEN(mixup_alpha)) o->mixup_alpha = info->mix.mixup_alpha;
    if (!GIVEN(cutmix_alpha)) o->cutmix_alpha = info->mix.cutmix_alpha;
    if (!GIVEN(random_erase)) o->random_erase = info->random_erase;
    if (!GIVEN(model_ema)) o->model_ema = info->model_ema_steps > 0;
    if (!GIVEN(model_ema_steps) && info->model_ema_steps > 0) o->model_ema_steps = info->model_ema_steps;
    /* the saved decay as it is, unless an option asks for another (--epochs changes torchvision's too) */
    r->ema_taken = o->model_ema && info->model_ema_steps > 0 && !GIVEN(model_ema_steps) && !GIVEN(model_ema_decay) &&
                   !GIVEN(epochs);
    r->ema_decay = info->model_ema_decay;
    if (!GIVEN(early_stop)) o->early_stop = info->early_stop;
    if (!GIVEN(ra_sampler)) o->ra_sampler = info->ra_reps > 0;
    if (!GIVEN(ra_reps) && info->ra_reps > 0) o->ra_reps = info->ra_reps;
    if (GIVEN(epochs)) return;
    if (info->epochs_planned > 0) o->epochs = info->epochs_planned;
    else if (info->schedule.kind == DP_LR_COSINE) o->epochs = info->schedule.total_epochs;
    else r->epochs_unrecorded = 1;
}

/* The auto-augmentation of a saved training transform ("..., auto-augment ra 9", ", aa-interpolation nearest"; none:
 * the resize's filter, ", bicubic" or bilinear):
 * its kind, RandAugment's bin and the interpolation taken; another (--auto-augment, --ra-magnitude,
 * --auto-augment-interpolation) refused: other augmentation would not continue the same run. */
static dp_status_t take_auto_augment(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    if (!info->train_transform[0]) return DP_OK; /* not an image folder, or a file of an older dptrain */
    const char *saved = strstr(info->train_transform, "auto-augment ");
    char kind[16] = "none";
    int magnitude = -1;
    if (saved) sscanf(saved, "auto-augment %15[a-z_0-9] %d", kind, &magnitude);
    const char *given = GIVEN(data.auto_augment) ? o->data.auto_augment : NULL;
    if (given && strcmp(given, kind) != 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --auto-augment %s, this run has %s (other augmentation "
                       "would not continue the same run; use the saved value)", o->resume_path, kind, given);
    if (GIVEN(data.ra_magnitude) && magnitude >= 0 && o->data.ra_magnitude != magnitude)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --ra-magnitude %d, this run has %d (other augmentation "
                       "would not continue the same run; use the saved value)", o->resume_path, magnitude,
                       o->data.ra_magnitude);
    if (!saved) return DP_OK;
    /* ", aa-interpolation X" where it is not the resize's filter (", bicubic", else bilinear) */
    char recorded[16] = "";
    const char *mark = strstr(info->train_transform, "aa-interpolation ");
    if (mark) sscanf(mark, "aa-interpolation %15[a-z]", recorded);
    const char *was = recorded[0] ? recorded : strstr(info->train_transform, ", bicubic") ? "bicubic" : "bilinear";
    const char *interpolation = GIVEN(data.aa_interpolation) ? o->data.aa_interpolation : NULL;
    if (interpolation && strcmp(interpolation, was) != 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --auto-augment-interpolation %s, this run has %s (other "
                       "augmentation would not continue the same run; use the saved value)", o->resume_path, was,
                       interpolation);
    if (recorded[0] && !interpolation) {
        snprintf(r->aa_interpolation, sizeof r->aa_interpolation, "%s", recorded);
        o->data.aa_interpolation = r->aa_interpolation;
    }
    snprintf(r->auto_augment, sizeof r->auto_augment, "%s", kind);
    o->data.auto_augment = r->auto_augment;
    if (!GIVEN(data.ra_magnitude) && magnitude >= 0) o->data.ra_magnitude = magnitude;
    return DP_OK;
}

/* The color jitter of a saved training transform ("..., color-jitter 0.4,0.4,0.4,0") into *r; another value of
 * --color-jitter (compared as numbers: 0.4 = 0.4,0.4,0.4,0; 0 = none) refused: other augmentation would not continue
 * the same run. */
static dp_status_t take_color_jitter(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    if (!info->train_transform[0]) return DP_OK; /* not an image folder, or a file of an older dptrain */
    const char *saved = strstr(info->train_transform, "color-jitter ");
    char values[64] = "0";
    if (saved) sscanf(saved, "color-jitter %63[0-9.,e-]", values);
    dp_color_jitter_t was = {{0}}, given = {{0}};
    if (dp_color_jitter_parse(values, "color-jitter", &was) != DP_OK)
        return dp_fail(DP_ERR_FORMAT, "--resume %s: data.train_transform '%s': the color jitter '%s' is not B,C,S,H",
                       o->resume_path, info->train_transform, values);
    if (GIVEN(data.color_jitter) &&
        dp_color_jitter_parse(o->data.color_jitter, "train: --color-jitter", &given) != DP_OK)
        return DP_ERR_ARG; /* its own line */
    if (GIVEN(data.color_jitter) && memcmp(given.value, was.value, sizeof was.value) != 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --color-jitter %s, this run has %s (other augmentation "
                       "would not continue the same run; use the saved value)", o->resume_path,
                       saved ? values : "0 (none)", o->data.color_jitter);
    if (!saved || GIVEN(data.color_jitter)) return DP_OK;
    snprintf(r->color_jitter, sizeof r->color_jitter, "%s", values);
    o->data.color_jitter = r->color_jitter;
    return DP_OK;
}

/* The resize's filter of a saved training transform ("..., bicubic": none is bilinear, as in older files); another
 * --interpolation refused: other pixels would not continue the same run. */
static dp_status_t take_interpolation(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    if (!info->train_transform[0]) return DP_OK; /* not an image folder, or a file of an older dptrain */
    const char *saved = strstr(info->train_transform, ", bicubic") ? "bicubic" : "bilinear";
    const char *given = GIVEN(data.interpolation) ? o->data.interpolation : NULL;
    if (given && strcmp(given, saved) != 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --interpolation %s, this run has %s (other pixels would "
                       "not continue the same run; use the saved value)", o->resume_path, saved, given);
    r->bicubic = !given && !strcmp(saved, "bicubic");
    if (r->bicubic) o->data.interpolation = "bicubic";
    return DP_OK;
}

/* --augment, an image folder's training transform and hold-out (texts kept in *r). */
static void take_data(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    if (!GIVEN(augment) && info->augment[0]) {
        snprintf(r->augment, sizeof r->augment, "%s", info->augment);
        o->augment = r->augment;
    }
    if (!GIVEN(data.transform) && info->train_transform[0]) { /* "resized-crop, dct-scale off" */
        snprintf(r->transform, sizeof r->transform, "%.*s", (int)strcspn(info->train_transform, ","),
                 info->train_transform);
        o->data.transform = r->transform;
        if (!GIVEN(data.dct_scale) && strstr(info->train_transform, "dct-scale off")) o->data.dct_scale = "off";
    }
    if (!GIVEN(normalize) && info->normalize[0]) /* applied by train_init.c; here for the line */
        snprintf(r->normalize, sizeof r->normalize, "%s", info->normalize);
    if (!GIVEN(val_image_size) && info->val_height > 0) { /* the run's test size (a resume tests as it did) */
        snprintf(r->val_image_size, sizeof r->val_image_size, "%dx%d", info->val_height, info->val_width);
        o->val_image_size = r->val_image_size;
    }
    if (!GIVEN(data.holdout) && info->holdout[0]) {
        snprintf(r->holdout, sizeof r->holdout, "%s", info->holdout);
        o->data.holdout_default = r->holdout;
    }
}

uint64_t train_classes_hash(const char *const *names, int count) {
    if (count <= 0 || !names) return 0;
    uint64_t hash = DP_FNV1A_SEED;
    for (int i = 0; i < count; i++) hash = dp_fnv1a(hash, names[i], strlen(names[i]) + 1);
    return hash;
}

dp_status_t train_resume_take(train_options_t *o, const dp_checkpoint_info_t *info, train_resume_t *r) {
    memset(r, 0, sizeof *r);
    if (info->weights_only) /* no run to continue (dp_fit refuses it too): said before the model meets the data */
        return dp_fail(DP_ERR_ARG, "%s: a weights-only checkpoint (parameters and batch-norm statistics, e.g. from "
                       "tools/import_torchvision.py): it has no optimizer state or training position to resume; "
                       "start a new run from its weights instead: --init %s", o->resume_path, o->resume_path);
    r->train_examples = info->train_examples;
    r->data_train_total = info->data_train_total;
    r->classes_hash = train_classes_hash((const char *const *)info->class_names, info->num_class_names);
    if (!GIVEN(data_dir) && info->data_dir[0]) { /* the run's data, where it was: it must still be there */
        DP_TRY(cli_check_saved_data_dir("train --resume", o->resume_path, info->data_dir));
        snprintf(r->data_dir, sizeof r->data_dir, "%s", info->data_dir);
        o->data_dir = r->data_dir;
    }
    r->taken = 1;
    take_optimizer(o, &info->optim);
    take_schedule(o, &info->schedule);
    take_position(o, info, r);
    take_data(o, info, r);
    DP_TRY(take_interpolation(o, info, r));
    DP_TRY(take_auto_augment(o, info, r));
    return take_color_jitter(o, info, r);
}

/* Appends " --NAME VALUE" (VALUE "": a flag) to text[0..size). */
static void list_option(char *text, size_t size, const char *name, const char *value) {
    size_t used = strlen(text);
    if (used < size) snprintf(text + used, size - used, " --%s%s%s", name, *value ? " " : "", value);
}

/* The same for a float (%.9g of its shortest decimal: 0.05, not 0.0500000007). */
static void list_float(char *text, size_t size, const char *name, float value) {
    char number[32];
    snprintf(number, sizeof number, "%.9g", dp_float_decimal(value));
    list_option(text, size, name, number);
}

static void list_int(char *text, size_t size, const char *name, long long value) {
    char number[32];
    snprintf(number, sizeof number, "%lld", value);
    list_option(text, size, name, number);
}

/* The optimizer's options that are not the defaults of a run without them
 * (`plain`: the options of a command line without any). */
static void list_optimizer(const train_options_t *o, const train_options_t *plain, char *text, size_t size) {
    const dp_optim_kind_t kind = (dp_optim_kind_t)dp_optim_kind_from_name(o->optimizer);
    const dp_optim_config_t fresh = dp_optim_config_with_defaults(&(dp_optim_config_t){.kind = kind});
    if (!GIVEN(optimizer) && strcmp(o->optimizer, plain->optimizer) != 0)
        list_option(text, size, "optimizer", o->optimizer);
    if (!GIVEN(lr) && o->lr != train_default_lr(kind)) list_float(text, size, "lr", o->lr);
    if (!GIVEN(weight_decay) && !isnan(o->weight_decay) && o->weight_decay != train_default_weight_decay(kind))
        list_float(text, size, "weight-decay", o->weight_decay);
    if (!GIVEN(norm_weight_decay) && !isnan(o->norm_weight_decay))
        list_float(text, size, "norm-weight-decay", o->norm_weight_decay);
    if (!GIVEN(bias_weight_decay) && !isnan(o->bias_weight_decay))
        list_float(text, size, "bias-weight-decay", o->bias_weight_decay);
    if (!GIVEN(momentum) && !isnan(o->momentum) && o->momentum != fresh.momentum)
        list_float(text, size, "momentum", o->momentum);
    if (!GIVEN(nesterov) && o->nesterov) list_option(text, size, "nesterov", "");
    if (!GIVEN(beta1) && !isnan(o->beta1) && o->beta1 != fresh.beta1) list_float(text, size, "beta1", o->beta1);
    if (!GIVEN(beta2) && !isnan(o->beta2) && o->beta2 != fresh.beta2) list_float(text, size, "beta2", o->beta2);
    if (!GIVEN(eps) && !isnan(o->eps) && o->eps != fresh.eps) list_float(text, size, "eps", o->eps);
}

/* The schedule's, the batch's, the seed's and the data's (its normalisation too). */
static void list_run(const train_options_t *o, const train_resume_t *r, const train_options_t *plain, int train_total,
                     char *text, size_t size) {
    if (!GIVEN(lr_schedule) && strcmp(o->lr_schedule, plain->lr_schedule) != 0)
        list_option(text, size, "lr-schedule", o->lr_schedule);
    if (!GIVEN(lr_step_epochs) && o->lr_step_epochs) list_int(text, size, "lr-step-epochs", o->lr_step_epochs);
    if (!GIVEN(lr_gamma) && !isnan(o->lr_gamma)) list_float(text, size, "lr-gamma", o->lr_gamma);
    if (!GIVEN(lr_min) && o->lr_min != 0.0f) list_float(text, size, "lr-min", o->lr_min);
    if (!GIVEN(warmup_epochs) && o->warmup_epochs != 0.0f) list_float(text, size, "warmup-epochs", o->warmup_epochs);
    if (!GIVEN(warmup_steps) && o->warmup_steps) list_int(text, size, "warmup-steps", o->warmup_steps);
    if (!GIVEN(warmup_method) && strcmp(o->warmup_method, plain->warmup_method) != 0)
        list_option(text, size, "warmup-method", o->warmup_method);
    if (!GIVEN(warmup_start) && !isnan(o->warmup_start)) list_float(text, size, "warmup-start", o->warmup_start);
    if (!GIVEN(warmup_sequential) && o->warmup_sequential) list_option(text, size, "warmup-sequential", "");
    if (!GIVEN(epochs) && o->epochs != plain->epochs) list_int(text, size, "epochs", o->epochs);
    if (!o->batch_size_given && o->batch_size != plain->batch_size) list_int(text, size, "batch-size", o->batch_size);
    if (!GIVEN(accumulate) && o->accumulate > 1) list_int(text, size, "accumulate", o->accumulate);
    if (!GIVEN(seed) && o->seed != plain->seed) list_int(text, size, "seed", (long long)o->seed);
    if (!GIVEN(sync_batch_norm) && o->sync_batch_norm) list_option(text, size, "sync-batch-norm", "");
    if (!GIVEN(label_smoothing) && o->label_smoothing != 0.0f)
        list_float(text, size, "label-smoothing", o->label_smoothing);
    if (!GIVEN(clip_grad_norm) && o->clip_grad_norm != 0.0f)
        list_float(text, size, "clip-grad-norm", o->clip_grad_norm);
    if (!GIVEN(mixup_alpha) && o->mixup_alpha != 0.0f) list_float(text, size, "mixup-alpha", o->mixup_alpha);
    if (!GIVEN(cutmix_alpha) && o->cutmix_alpha != 0.0f) list_float(text, size, "cutmix-alpha", o->cutmix_alpha);
    if (!GIVEN(random_erase) && o->random_erase != 0.0f) list_float(text, size, "random-erase", o->random_erase);
    if (!GIVEN(model_ema) && o->model_ema) list_option(text, size, "model-ema", "");
    if (!GIVEN(model_ema_steps) && o->model_ema && o->model_ema_steps != plain->model_ema_steps)
        list_int(text, size, "model-ema-steps", o->model_ema_steps);
    if (!GIVEN(early_stop) && o->early_stop) list_int(text, size, "early-stop", o->early_stop);
    if (!GIVEN(ra_sampler) && o->ra_sampler) list_option(text, size, "ra-sampler", "");
    if (!GIVEN(ra_reps) && o->ra_sampler && o->ra_reps != plain->ra_reps) list_int(text, size, "ra-reps", o->ra_reps);
    if (!GIVEN(limit) && o->limit > 0 && o->limit < train_total) list_int(text, size, "limit", o->limit);
    if (!GIVEN(data_dir) && strcmp(o->data_dir, plain->data_dir) != 0) list_option(text, size, "data", o->data_dir);
    if (r->normalize[0]) list_option(text, size, "normalize", r->normalize);
    if (!GIVEN(augment) && o->augment) list_option(text, size, "augment", o->augment);
    if (!GIVEN(data.transform) && o->data.transform && strcmp(o->data.transform, "center") != 0)
        list_option(text, size, "transform", o->data.transform);
    if (r->val_image_size[0]) list_option(text, size, "val-image-size", r->val_image_size);
    if (!GIVEN(data.dct_scale) && o->data.dct_scale) list_option(text, size, "dct-scale", o->data.dct_scale);
    if (r->bicubic) list_option(text, size, "interpolation", "bicubic");
    if (!GIVEN(data.auto_augment) && r->auto_augment[0]) list_option(text, size, "auto-augment", r->auto_augment);
    if (r->aa_interpolation[0]) list_option(text, size, "auto-augment-interpolation", r->aa_interpolation);
    if (!GIVEN(data.ra_magnitude) && r->auto_augment[0] && o->data.ra_magnitude >= 0)
        list_int(text, size, "ra-magnitude", o->data.ra_magnitude);
    if (!GIVEN(data.color_jitter) && r->color_jitter[0]) list_option(text, size, "color-jitter", r->color_jitter);
    if (!GIVEN(data.holdout) && o->data.holdout_default && strtod(o->data.holdout_default, NULL) != DP_HOLDOUT_DEFAULT)
        list_option(text, size, "holdout", o->data.holdout_default);
}

void train_resume_note(const train_options_t *o, const train_resume_t *r, int train_total, char *note, size_t size) {
    char listed[1200] = "";
    note[0] = '\0';
    if (!r->taken) return;
    train_options_t plain;
    int help;
    train_options_parse(0, NULL, 0, &plain, &help); /* the defaults */
    list_optimizer(o, &plain, listed, sizeof listed);
    list_run(o, r, &plain, train_total, listed, sizeof listed);
    char epochs[400] = "";
    if (r->epochs_unrecorded)
        snprintf(epochs, sizeof epochs, "%s--epochs %d is the default: %s (of an older dptrain) does not record its "
                 "run's (give --epochs N)", listed[0] ? "; " : " ", o->epochs, o->resume_path);
    if (listed[0] || epochs[0])
        snprintf(note, size, "resuming %s with its run's options:%s%s%s", o->resume_path, listed,
                 listed[0] ? " (the checkpoint's; give an option to change it where a resume allows)" : "",
                 epochs);
}
