/* checkpoint_meta.c - a checkpoint's metadata (checkpoint.h lists the
 * keys): dp_checkpoint_info_t written as the safetensors __metadata__
 * strings, and read back with every value parsed and checked whole (the
 * optimizer's and the schedule's hyper-parameters, where training stands,
 * the optional keys of an older file). checkpoint.c writes and reads the
 * tensors around it.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "dptrain/json.h"
#include "dptrain/random_erase.h"

/* The metadata keys, in the order they are written (checkpoint.h says what each holds). */
enum {
    META_FORMAT, META_FORMAT_VERSION, META_DPTRAIN_VERSION, META_MODEL, META_FINGERPRINT, META_OPTIMIZER,
    META_LR, META_WEIGHT_DECAY, META_MOMENTUM, META_NESTEROV, META_BETA1, META_BETA2, META_EPS,
    META_OPTIMIZER_STATES, META_OPTIMIZER_STEPS, META_SCHEDULE, META_SCHEDULE_LR, META_SCHEDULE_STEP_EPOCHS,
    META_SCHEDULE_GAMMA, META_SCHEDULE_TOTAL_EPOCHS, META_SCHEDULE_MIN_LR, META_SCHEDULE_WARMUP_EPOCHS,
    META_SCHEDULE_WARMUP_STEPS, META_SCHEDULE_STEPS_PER_EPOCH, META_SCHEDULE_TOTAL_STEPS, META_STEP_COUNT,
    META_EPOCHS, META_LOADER_EPOCH, META_LOADER_BATCH, META_SEED, META_BATCH_SIZE, META_TRAIN_EXAMPLES,
    META_DEVICES, META_RANKS, META_NORMALIZE, META_AUGMENT, META_EPOCH_LOSS, META_EPOCH_CORRECT,
    META_EPOCH_EXAMPLES, META_ACCUMULATE, META_EPOCHS_PLANNED, META_SYNC_BATCH_NORM, META_COUNT
};
static const char *const meta_keys[META_COUNT] = {
    "format", "format_version", "dptrain_version", "model", "model_fingerprint", "optimizer",
    "optimizer.lr", "optimizer.weight_decay", "optimizer.momentum", "optimizer.nesterov",
    "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.states", "optimizer.steps",
    "lr_schedule", "lr_schedule.lr", "lr_schedule.step_epochs", "lr_schedule.gamma",
    "lr_schedule.total_epochs", "lr_schedule.min_lr", "lr_schedule.warmup_epochs", "lr_schedule.warmup_steps",
    "lr_schedule.steps_per_epoch", "lr_schedule.total_steps", "step_count", "epochs_completed",
    "loader.epoch", "loader.batch", "seed", "batch_size", "train_examples", "devices", "ranks",
    "data.normalize", "data.augment", "epoch.loss_sums", "epoch.correct", "epoch.examples", "accumulate",
    "epochs_planned", "sync_batch_norm",
};
_Static_assert(META_COUNT == DP_CHECKPOINT_META_KEYS, "DP_CHECKPOINT_META_KEYS counts the keys");
#define FORMAT_NAME "dptrain-checkpoint"

/* cosine's T; 0 for the schedules that have no length */
static uint64_t schedule_total_steps(const dp_checkpoint_info_t *info) {
    return info->schedule.kind == DP_LR_COSINE ? (uint64_t)info->schedule.total_epochs * info->steps_per_epoch : 0;
}

/* The current error message, prefixed with `path: ` (the schedule and
 * optimizer checks do not know the file). */
dp_status_t dp_checkpoint_fail_in(dp_status_t status, const char *path, const char *what) {
    char message[1024];
    snprintf(message, sizeof message, "%s", dp_error_message());
    return dp_fail(status, "%s: %s: %s", path, what, message);
}

/* --- class names: data.classes, a JSON array of strings --- */

/* The JSON array of `names` ["a","b"] (quotes and backslashes escaped; the
 * names are checked UTF-8 without control characters), allocated. */
static dp_status_t class_names_json(char *const *names, int count, char **out) {
    size_t size = 3;
    for (int i = 0; i < count; i++) size += 2 * strlen(names[i]) + 3;
    char *text = dp_alloc(size, "class names");
    if (!text) return DP_ERR_NOMEM;
    size_t used = 0;
    text[used++] = '[';
    for (int i = 0; i < count; i++) {
        if (i) text[used++] = ',';
        text[used++] = '"';
        for (const char *c = names[i]; *c; c++) {
            if (*c == '"' || *c == '\\') text[used++] = '\\';
            text[used++] = *c;
        }
        text[used++] = '"';
    }
    text[used++] = ']';
    text[used] = '\0';
    *out = text;
    return DP_OK;
}

/* Whether one name may be a class name; `problem` says why not. */
static int class_name_ok(const char *name, const char **problem) {
    size_t n = strlen(name);
    *problem = n == 0 ? "is empty" : n > DP_CHECKPOINT_MAX_CLASS_NAME ? "is too long" : NULL;
    for (size_t i = 0; i < n && !*problem; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) *problem = "holds a control character";
    if (!*problem && !dp_utf8_valid(name, n)) *problem = "is not valid UTF-8"; /* what the JSON parser reads back */
    return !*problem;
}

dp_status_t dp_checkpoint_check_class_names(char *const *names, int count) {
    for (int i = 0; i < count; i++) {
        const char *problem;
        if (!class_name_ok(names[i], &problem))
            return dp_fail(DP_ERR_ARG, "class %d's name '%s' %s: a checkpoint holds class names of 1 to %d "
                           "bytes of UTF-8 text", i, dp_json_show(names[i]).text, problem,
                           DP_CHECKPOINT_MAX_CLASS_NAME);
    }
    return DP_OK;
}

void dp_checkpoint_meta_free(dp_checkpoint_meta_t *m) {
    free(m->classes);
    free(m->conv_algorithms);
    free(m->model_text);
    m->classes = m->conv_algorithms = m->model_text = NULL;
}

/* --- model_text: the model file's text --- */

/* The model's model file text as written: a copy, its bytes >= 0x80 made
 * '?' unless it is valid UTF-8 (a model file has them in comments only, so
 * the model is the same). NULL: a built-in network. */
static dp_status_t model_text(const dp_model_t *model, char **out) {
    size_t len;
    const char *text = dp_model_source(model, &len);
    *out = NULL;
    if (!text) return DP_OK;
    char *copy = dp_alloc(len + 1, "model file text");
    if (!copy) return DP_ERR_NOMEM;
    memcpy(copy, text, len + 1);
    if (!dp_utf8_valid(copy, len)) /* what the JSON parser reads back */
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)copy[i] >= 0x80) copy[i] = '?';
    *out = copy;
    return DP_OK;
}

/* After the META_COUNT keys, the first optional ones: the warm-up's shape,
 * each only when not its default (schedule.h), so that a run without the
 * options writes the bytes it wrote before them. */
static void start_optional_keys(dp_checkpoint_meta_t *m, const dp_lr_schedule_t *sc) {
    m->count = META_COUNT;
    if (sc->warmup_method != DP_WARMUP_LINEAR)
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_WARMUP_METHOD_KEY,
                                                dp_lr_warmup_method_name(sc->warmup_method)};
    if (sc->warmup_start != 0.0) {
        snprintf(m->warmup_start, sizeof m->warmup_start, "%.17g", sc->warmup_start);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_WARMUP_START_KEY, m->warmup_start};
    }
    if (sc->warmup_sequential) m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_WARMUP_SEQUENTIAL_KEY, "1"};
}

/* The optional counts: the best epoch so far (train --save-best), early_stop, data.ra_reps. */
static dp_status_t add_counts(dp_checkpoint_meta_t *m, const dp_checkpoint_info_t *info) {
    if (info->best_epoch > 0) { /* the best epoch so far (train --save-best) */
        if (info->best_count <= 0 || info->best_correct < 0 || info->best_correct > info->best_count)
            return dp_fail(DP_ERR_ARG, "checkpoint: the best epoch's test set, %d of %d correct, is not a count",
                           info->best_correct, info->best_count);
        const char *keys[3] = {DP_CHECKPOINT_BEST_EPOCH_KEY, DP_CHECKPOINT_BEST_CORRECT_KEY,
                               DP_CHECKPOINT_BEST_COUNT_KEY};
        const int values[3] = {info->best_epoch, info->best_correct, info->best_count};
        for (int k = 0; k < 3; k++) {
            snprintf(m->best[k], sizeof m->best[k], "%d", values[k]);
            m->entries[m->count++] = (dp_st_meta_t){keys[k], m->best[k]};
        }
    }
    if (info->early_stop > 0) {
        snprintf(m->early_stop, sizeof m->early_stop, "%d", info->early_stop);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_EARLY_STOP_KEY, m->early_stop};
    }
    if (info->ra_reps < 0 || info->ra_reps == 1 || info->ra_reps > DP_RA_REPS_LIMIT)
        return dp_fail(DP_ERR_ARG, "checkpoint: repeated augmentation's %d repeats (0: none, or 2 to %d)",
                       info->ra_reps, DP_RA_REPS_LIMIT);
    if (info->ra_reps > 1) {
        snprintf(m->ra_reps, sizeof m->ra_reps, "%d", info->ra_reps);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_RA_REPS_KEY, m->ra_reps};
    }
    return DP_OK;
}

dp_status_t dp_checkpoint_meta_fill(dp_checkpoint_meta_t *m, const dp_model_t *model,
                                    const dp_checkpoint_info_t *info, uint64_t optimizer_steps,
                                    const char *optimizer_states) {
    memset(m->values, 0, sizeof m->values);
    m->classes = m->conv_algorithms = m->model_text = NULL;
    const dp_optim_config_t *o = &info->optim;
    const dp_lr_schedule_t *sc = &info->schedule;
    const char *texts[META_COUNT] = {
        [META_FORMAT] = FORMAT_NAME, [META_DPTRAIN_VERSION] = info->dptrain_version,
        [META_MODEL] = info->model, [META_OPTIMIZER] = dp_optim_kind_name(o->kind),
        [META_SCHEDULE] = dp_lr_schedule_kind_name(sc->kind),
    };
    snprintf(m->values[META_FORMAT_VERSION], 256, "%d", DP_CHECKPOINT_VERSION);
    snprintf(m->values[META_FINGERPRINT], 256, "%016" PRIx64, dp_model_fingerprint(model));
    snprintf(m->values[META_LR], 256, "%.9g", o->lr);
    snprintf(m->values[META_WEIGHT_DECAY], 256, "%.9g", o->weight_decay);
    snprintf(m->values[META_MOMENTUM], 256, "%.9g", o->momentum);
    snprintf(m->values[META_NESTEROV], 256, "%d", o->nesterov ? 1 : 0);
    snprintf(m->values[META_BETA1], 256, "%.9g", o->beta1);
    snprintf(m->values[META_BETA2], 256, "%.9g", o->beta2);
    snprintf(m->values[META_EPS], 256, "%.9g", o->eps);
    snprintf(m->values[META_OPTIMIZER_STEPS], 256, "%" PRIu64, optimizer_steps);
    snprintf(m->values[META_SCHEDULE_LR], 256, "%.17g", sc->lr);
    snprintf(m->values[META_SCHEDULE_STEP_EPOCHS], 256, "%d", sc->step_epochs);
    snprintf(m->values[META_SCHEDULE_GAMMA], 256, "%.17g", sc->gamma);
    snprintf(m->values[META_SCHEDULE_TOTAL_EPOCHS], 256, "%d", sc->total_epochs);
    snprintf(m->values[META_SCHEDULE_MIN_LR], 256, "%.17g", sc->min_lr);
    snprintf(m->values[META_SCHEDULE_WARMUP_EPOCHS], 256, "%.17g", sc->warmup_epochs);
    snprintf(m->values[META_SCHEDULE_WARMUP_STEPS], 256, "%" PRIu64, sc->warmup_steps);
    snprintf(m->values[META_SCHEDULE_STEPS_PER_EPOCH], 256, "%" PRIu64, info->steps_per_epoch);
    snprintf(m->values[META_SCHEDULE_TOTAL_STEPS], 256, "%" PRIu64, schedule_total_steps(info));
    snprintf(m->values[META_STEP_COUNT], 256, "%" PRIu64, info->step_count);
    snprintf(m->values[META_EPOCHS], 256, "%d", info->epochs_completed);
    snprintf(m->values[META_LOADER_EPOCH], 256, "%d", info->loader_epoch);
    snprintf(m->values[META_LOADER_BATCH], 256, "%d", info->loader_batch);
    snprintf(m->values[META_SEED], 256, "%" PRIu64, info->seed);
    snprintf(m->values[META_BATCH_SIZE], 256, "%d", info->batch_size);
    snprintf(m->values[META_TRAIN_EXAMPLES], 256, "%d", info->train_examples);
    snprintf(m->values[META_DEVICES], 256, "%d", info->num_devices);
    snprintf(m->values[META_RANKS], 256, "%d", info->num_ranks > 0 ? info->num_ranks : 1);
    snprintf(m->values[META_NORMALIZE], 256, "%s", info->normalize);
    snprintf(m->values[META_AUGMENT], 256, "%s", info->augment);
    size_t used_loss = 0, used_correct = 0;
    for (int r = 0; r < info->epoch_ranks && r < DP_CHECKPOINT_RANK_SUMS; r++) {
        used_loss += (size_t)snprintf(m->values[META_EPOCH_LOSS] + used_loss, 256 - used_loss, r ? ",%.17g" : "%.17g",
                                      info->epoch_loss[r]);
        used_correct += (size_t)snprintf(m->values[META_EPOCH_CORRECT] + used_correct, 256 - used_correct,
                                         r ? ",%d" : "%d", info->epoch_correct[r]);
    }
    snprintf(m->values[META_EPOCH_EXAMPLES], 256, "%d", info->epoch_examples);
    snprintf(m->values[META_ACCUMULATE], 256, "%d", info->accumulate > 1 ? info->accumulate : 1);
    snprintf(m->values[META_EPOCHS_PLANNED], 256, "%d", info->epochs_planned);
    snprintf(m->values[META_SYNC_BATCH_NORM], 256, "%d", info->sync_batch_norm ? 1 : 0);
    snprintf(m->values[META_OPTIMIZER_STATES], 256, "%s", optimizer_states);
    for (int k = 0; k < META_COUNT; k++)
        m->entries[k] = (dp_st_meta_t){meta_keys[k], texts[k] ? texts[k] : m->values[k]};
    start_optional_keys(m, sc);
    DP_TRY(add_counts(m, info));
    if (o->has_norm_weight_decay) { /* the weight-decay groups' (optim.h), only when given */
        snprintf(m->norm_weight_decay, sizeof m->norm_weight_decay, "%.9g", o->norm_weight_decay);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_NORM_WEIGHT_DECAY_KEY, m->norm_weight_decay};
    }
    if (o->has_bias_weight_decay) {
        snprintf(m->bias_weight_decay, sizeof m->bias_weight_decay, "%.9g", o->bias_weight_decay);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_BIAS_WEIGHT_DECAY_KEY, m->bias_weight_decay};
    }
    if (info->label_smoothing != 0.0f) {
        if (!(info->label_smoothing > 0.0f && info->label_smoothing < 1.0f))
            return dp_fail(DP_ERR_ARG, "checkpoint: the label smoothing %g is not in [0, 1)",
                           (double)info->label_smoothing);
        /* its shortest decimal ("0.1", as given), which strtof reads back to the same float */
        snprintf(m->label_smoothing, sizeof m->label_smoothing, "%.9g", dp_float_decimal(info->label_smoothing));
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_LABEL_SMOOTHING_KEY, m->label_smoothing};
    }
    if (info->clip_grad_norm != 0.0f) {
        if (!(info->clip_grad_norm > 0.0f && info->clip_grad_norm <= DP_CLIP_MAX_NORM_LIMIT))
            return dp_fail(DP_ERR_ARG, "checkpoint: the gradient clipping norm %g is not in (0, %g]",
                           (double)info->clip_grad_norm, (double)DP_CLIP_MAX_NORM_LIMIT);
        snprintf(m->clip_grad_norm, sizeof m->clip_grad_norm, "%.9g", dp_float_decimal(info->clip_grad_norm));
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_CLIP_GRAD_NORM_KEY, m->clip_grad_norm};
    }
    DP_TRY(dp_mix_check(&info->mix, "checkpoint: the "));
    DP_TRY(dp_random_erase_check(info->random_erase, "checkpoint: the random erasing probability"));
    const float alphas[3] = {info->mix.mixup_alpha, info->mix.cutmix_alpha, info->random_erase};
    const char *const alpha_keys[3] = {DP_CHECKPOINT_MIXUP_ALPHA_KEY, DP_CHECKPOINT_CUTMIX_ALPHA_KEY,
                                       DP_CHECKPOINT_RANDOM_ERASE_KEY};
    for (int k = 0; k < 3; k++)
        if (alphas[k] > 0.0f) {
            snprintf(m->mix[k], sizeof m->mix[k], "%.9g", dp_float_decimal(alphas[k]));
            m->entries[m->count++] = (dp_st_meta_t){alpha_keys[k], m->mix[k]};
        }
    if (info->model_ema_steps > 0) { /* the moving average: its tensors are the writer's (checkpoint.c) */
        snprintf(m->ema[0], sizeof m->ema[0], "%d", info->model_ema_steps);
        snprintf(m->ema[1], sizeof m->ema[1], "%.17g", info->model_ema_decay);
        snprintf(m->ema[2], sizeof m->ema[2], "%" PRIu64, info->model_ema_updates);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_EMA_STEPS_KEY, m->ema[0]};
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_EMA_DECAY_KEY, m->ema[1]};
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_EMA_UPDATES_KEY, m->ema[2]};
    }
    if (info->num_class_names > 0) {
        DP_TRY(class_names_json(info->class_names, info->num_class_names, &m->classes));
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_CLASSES_KEY, m->classes};
    }
    if (info->transform[0]) {
        if (strcspn(info->transform, "\"\\") != strlen(info->transform) || strlen(info->transform) >= 128)
            return dp_fail(DP_ERR_ARG, "checkpoint: the data's transform '%s' is not a plain text of < 128 bytes",
                           info->transform);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_TRANSFORM_KEY, info->transform};
    }
    if (info->train_transform[0]) {
        if (strspn(info->train_transform, "abcdefghijklmnopqrstuvwxyz0123456789_-,. ") != strlen(info->train_transform))
            return dp_fail(DP_ERR_ARG, "checkpoint: the training transform '%s' is not lower-case words and numbers",
                           info->train_transform);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_TRAIN_TRANSFORM_KEY, info->train_transform};
    }
    if (info->holdout[0]) {
        if (strspn(info->holdout, "0123456789.eE+-") != strlen(info->holdout))
            return dp_fail(DP_ERR_ARG, "checkpoint: the data's hold-out '%s' is not a number", info->holdout);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_HOLDOUT_KEY, info->holdout};
    }
    if (info->data_train_total > 0) {
        snprintf(m->train_total, sizeof m->train_total, "%d", info->data_train_total);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_TRAIN_TOTAL_KEY, m->train_total};
    }
    if (info->data_dir[0]) m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_DATA_DIR_KEY, info->data_dir};
    if (info->val_height > 0 || info->val_width > 0) {
        if (info->val_height < 1 || info->val_width < 1 || info->val_height > 65536 || info->val_width > 65536)
            return dp_fail(DP_ERR_ARG, "checkpoint: the test size %d x %d is not 1 to 65536 pixels a side",
                           info->val_height, info->val_width);
        snprintf(m->val_size, sizeof m->val_size, "%dx%d", info->val_height, info->val_width);
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_VAL_SIZE_KEY, m->val_size};
    }
    if (info->num_conv_algorithms > 0) {
        DP_TRY(dp_checkpoint_conv_algos_json(info->conv_algorithms, info->num_conv_algorithms, &m->conv_algorithms));
        m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_CONV_ALGOS_KEY, m->conv_algorithms};
    }
    DP_TRY(model_text(model, &m->model_text));
    if (m->model_text) m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_MODEL_TEXT_KEY, m->model_text};
    if (info->freeze[0]) m->entries[m->count++] = (dp_st_meta_t){DP_CHECKPOINT_FREEZE_KEY, info->freeze};
    return DP_OK;
}

static dp_status_t parse_optional(dp_checkpoint_t *c);

/* --- metadata parsing: every value checked whole --- */
static dp_status_t meta_text(const dp_checkpoint_t *c, int key, const char **out) {
    *out = dp_safetensors_meta(c->st, meta_keys[key]);
    if (!*out)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is missing (not a checkpoint written by dptrain?)",
                       dp_safetensors_path(c->st), meta_keys[key]);
    return DP_OK;
}

/* A value kept as text (a name, a path, a list): one line, since messages
 * and the commands print it as it is. */
static dp_status_t check_one_line(const dp_checkpoint_t *c, const char *key, const char *text) {
    for (const unsigned char *b = (const unsigned char *)text; *b; b++)
        if (*b < 0x20 || *b == 0x7f)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is \"%s\", which holds a control character (byte "
                           "0x%02x at %zu): expected one line of text", dp_safetensors_path(c->st), key,
                           dp_json_show(text).text, *b, (size_t)(b - (const unsigned char *)text));
    return DP_OK;
}

/* An optional text value (key absent: out untouched): 1 to size - 1 bytes, one line. */
static dp_status_t optional_text(const dp_checkpoint_t *c, const char *key, char *out, size_t size) {
    const char *text = dp_safetensors_meta(c->st, key);
    if (!text) return DP_OK;
    if (!*text || strlen(text) >= size)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is %s, expected 1 to %zu bytes", dp_safetensors_path(c->st),
                       key, *text ? "too long" : "empty", size - 1);
    DP_TRY(check_one_line(c, key, text));
    memcpy(out, text, strlen(text) + 1);
    return DP_OK;
}

static dp_status_t meta_copy(const dp_checkpoint_t *c, int key, char *out, size_t size) {
    const char *text;
    DP_TRY(meta_text(c, key, &text));
    DP_TRY(check_one_line(c, meta_keys[key], text));
    if (strlen(text) >= size)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is longer than %zu bytes", dp_safetensors_path(c->st),
                       meta_keys[key], size - 1);
    memcpy(out, text, strlen(text) + 1);
    return DP_OK;
}

static dp_status_t meta_u64(const dp_checkpoint_t *c, int key, uint64_t max, uint64_t *out) {
    const char *text;
    DP_TRY(meta_text(c, key, &text));
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!(text[0] >= '0' && text[0] <= '9') || *end || errno || v > max)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a decimal integer from 0 to %" PRIu64,
                       dp_safetensors_path(c->st), meta_keys[key], dp_json_show(text).text, max);
    *out = v;
    return DP_OK;
}

static dp_status_t meta_int(const dp_checkpoint_t *c, int key, int *out) {
    uint64_t v;
    DP_TRY(meta_u64(c, key, INT32_MAX, &v));
    *out = (int)v;
    return DP_OK;
}

/* A number: float32 when `f` is given, else float64 into `d`. */
static dp_status_t meta_number(const dp_checkpoint_t *c, int key, float *f, double *d) {
    const char *text;
    DP_TRY(meta_text(c, key, &text));
    char *end;
    errno = 0;
    double v = f ? (double)strtof(text, &end) : strtod(text, &end);
    if (!text[0] || strchr(" \t\n\v\f\r+", text[0]) || *end || errno || !isfinite(v)) /* as %.9g / %.17g write it */
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number", dp_safetensors_path(c->st),
                       meta_keys[key], dp_json_show(text).text);
    if (f) *f = (float)v;
    else *d = v;
    return DP_OK;
}

/* The name of a kind (optimizer, schedule) -> the kind, via `from_name`. */
static dp_status_t meta_kind(const dp_checkpoint_t *c, int key, int (*from_name)(const char *), const char *expected,
                             int *out) {
    const char *text;
    DP_TRY(meta_text(c, key, &text));
    *out = from_name(text);
    if (*out < 0)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected %s", dp_safetensors_path(c->st),
                       meta_keys[key], dp_json_show(text).text, expected);
    return DP_OK;
}

static dp_status_t parse_optimizer(dp_checkpoint_t *c) {
    dp_optim_config_t *o = &c->info.optim;
    int kind;
    DP_TRY(meta_kind(c, META_OPTIMIZER, dp_optim_kind_from_name, "sgd, momentum, adagrad, adam or adamw", &kind));
    o->kind = (dp_optim_kind_t)kind;
    DP_TRY(meta_number(c, META_LR, &o->lr, NULL));
    DP_TRY(meta_number(c, META_WEIGHT_DECAY, &o->weight_decay, NULL));
    DP_TRY(meta_number(c, META_MOMENTUM, &o->momentum, NULL));
    DP_TRY(meta_int(c, META_NESTEROV, &o->nesterov));
    DP_TRY(meta_number(c, META_BETA1, &o->beta1, NULL));
    DP_TRY(meta_number(c, META_BETA2, &o->beta2, NULL));
    DP_TRY(meta_number(c, META_EPS, &o->eps, NULL));
    DP_TRY(meta_copy(c, META_OPTIMIZER_STATES, c->states, sizeof c->states));
    DP_TRY(meta_u64(c, META_OPTIMIZER_STEPS, UINT64_MAX, &c->info.optimizer_steps));
    if (dp_optim_config_check(o) != DP_OK)
        return dp_checkpoint_fail_in(DP_ERR_FORMAT, dp_safetensors_path(c->st), "metadata 'optimizer.*'");
    return DP_OK;
}

/* lr_schedule.warmup_method (linear | constant), .warmup_start (a number in
 * (0, 1]), .warmup_sequential (1): each optional, absent its default
 * (linear, 0: not given, 0: chained), as a file of an older dptrain. */
static dp_status_t parse_warmup_shape(dp_checkpoint_t *c, dp_lr_schedule_t *s) {
    const char *path = dp_safetensors_path(c->st);
    const char *method = dp_safetensors_meta(c->st, DP_CHECKPOINT_WARMUP_METHOD_KEY);
    if (method) {
        int m = dp_lr_warmup_method_from_name(method);
        if (m < 0)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected linear or constant", path,
                           DP_CHECKPOINT_WARMUP_METHOD_KEY, dp_json_show(method).text);
        s->warmup_method = (dp_lr_warmup_method_t)m;
    }
    const char *start = dp_safetensors_meta(c->st, DP_CHECKPOINT_WARMUP_START_KEY);
    if (start) {
        char *end;
        errno = 0;
        double v = strtod(start, &end);
        if (!start[0] || strchr(" \t\n\v\f\r+", start[0]) || *end || errno || !(v > 0.0 && v <= 1.0))
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number in (0, 1]", path,
                           DP_CHECKPOINT_WARMUP_START_KEY, dp_json_show(start).text);
        s->warmup_start = v;
    }
    const char *sequential = dp_safetensors_meta(c->st, DP_CHECKPOINT_WARMUP_SEQUENTIAL_KEY);
    if (sequential && strcmp(sequential, "1") != 0)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected 1 (or no such key)", path,
                       DP_CHECKPOINT_WARMUP_SEQUENTIAL_KEY, dp_json_show(sequential).text);
    s->warmup_sequential = sequential != NULL;
    return DP_OK;
}

static dp_status_t parse_schedule(dp_checkpoint_t *c) {
    const char *path = dp_safetensors_path(c->st);
    dp_checkpoint_info_t *info = &c->info;
    dp_lr_schedule_t *s = &info->schedule;
    int kind;
    DP_TRY(meta_kind(c, META_SCHEDULE, dp_lr_schedule_kind_from_name, "constant, step, cosine or exponential",
                     &kind));
    s->kind = (dp_lr_schedule_kind_t)kind;
    DP_TRY(meta_number(c, META_SCHEDULE_LR, NULL, &s->lr));
    DP_TRY(meta_int(c, META_SCHEDULE_STEP_EPOCHS, &s->step_epochs));
    DP_TRY(meta_number(c, META_SCHEDULE_GAMMA, NULL, &s->gamma));
    DP_TRY(meta_int(c, META_SCHEDULE_TOTAL_EPOCHS, &s->total_epochs));
    DP_TRY(meta_number(c, META_SCHEDULE_MIN_LR, NULL, &s->min_lr));
    DP_TRY(meta_number(c, META_SCHEDULE_WARMUP_EPOCHS, NULL, &s->warmup_epochs));
    DP_TRY(meta_u64(c, META_SCHEDULE_WARMUP_STEPS, UINT64_MAX, &s->warmup_steps));
    DP_TRY(parse_warmup_shape(c, s));
    DP_TRY(meta_u64(c, META_SCHEDULE_STEPS_PER_EPOCH, UINT32_MAX, &info->steps_per_epoch));
    uint64_t total_steps;
    DP_TRY(meta_u64(c, META_SCHEDULE_TOTAL_STEPS, UINT64_MAX, &total_steps));
    if (dp_lr_schedule_check(s) != DP_OK) return dp_checkpoint_fail_in(DP_ERR_FORMAT, path, "metadata 'lr_schedule.*'");
    if (info->steps_per_epoch < 1)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'lr_schedule.steps_per_epoch' is 0, expected >= 1", path);
    if (total_steps != schedule_total_steps(info))
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'lr_schedule.total_steps' is %" PRIu64 ", expected %" PRIu64
                       " (total_epochs x steps_per_epoch for cosine, else 0)", path, total_steps,
                       schedule_total_steps(info));
    return DP_OK;
}

dp_status_t dp_checkpoint_parse_meta(dp_checkpoint_t *c) {
    const char *path = dp_safetensors_path(c->st);
    dp_checkpoint_info_t *info = &c->info;
    if (!dp_safetensors_meta(c->st, "format") || strcmp(dp_safetensors_meta(c->st, "format"), FORMAT_NAME))
        return dp_fail(DP_ERR_FORMAT, "%s: a safetensors file but not a dptrain checkpoint (metadata 'format' "
                       "is not '" FORMAT_NAME "')", path);
    int version;
    DP_TRY(meta_int(c, META_FORMAT_VERSION, &version));
    if (version != DP_CHECKPOINT_VERSION)
        return dp_fail(DP_ERR_FORMAT, "%s: checkpoint format version %d, this dptrain reads version %d", path,
                       version, DP_CHECKPOINT_VERSION);
    DP_TRY(meta_copy(c, META_MODEL, info->model, sizeof info->model));
    const char *weights_only = dp_safetensors_meta(c->st, DP_CHECKPOINT_WEIGHTS_ONLY_KEY);
    if (weights_only && strcmp(weights_only, "1") != 0)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '" DP_CHECKPOINT_WEIGHTS_ONLY_KEY "' is '%s', expected 1 (or "
                       "no such key)", path, dp_json_show(weights_only).text);
    info->weights_only = weights_only != NULL;
    /* a weights-only file (checkpoint.h) may leave out the version and the fingerprint */
    if (!info->weights_only || dp_safetensors_meta(c->st, meta_keys[META_DPTRAIN_VERSION]))
        DP_TRY(meta_copy(c, META_DPTRAIN_VERSION, info->dptrain_version, sizeof info->dptrain_version));
    c->has_fingerprint = !info->weights_only || dp_safetensors_meta(c->st, meta_keys[META_FINGERPRINT]);
    if (c->has_fingerprint) {
        const char *fingerprint;
        DP_TRY(meta_text(c, META_FINGERPRINT, &fingerprint));
        char *end;
        c->fingerprint = strtoull(fingerprint, &end, 16);
        if (strlen(fingerprint) != 16 || strspn(fingerprint, "0123456789abcdefABCDEF") != 16 || *end)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata 'model_fingerprint' is '%s', expected 16 hex digits", path,
                           dp_json_show(fingerprint).text);
    }
    if (info->weights_only) { /* no optimizer, schedule or position: a new run's, never resumed */
        info->optim = (dp_optim_config_t){.kind = DP_OPTIM_SGD};
        info->schedule = (dp_lr_schedule_t){.kind = DP_LR_CONSTANT};
        info->steps_per_epoch = 1;
        return parse_optional(c);
    }
    DP_TRY(parse_optimizer(c));
    DP_TRY(parse_schedule(c));
    DP_TRY(meta_u64(c, META_STEP_COUNT, UINT64_MAX, &info->step_count));
    DP_TRY(meta_int(c, META_EPOCHS, &info->epochs_completed));
    DP_TRY(meta_int(c, META_LOADER_EPOCH, &info->loader_epoch));
    DP_TRY(meta_int(c, META_LOADER_BATCH, &info->loader_batch));
    DP_TRY(meta_u64(c, META_SEED, UINT64_MAX, &info->seed));
    DP_TRY(meta_int(c, META_BATCH_SIZE, &info->batch_size));
    DP_TRY(meta_int(c, META_TRAIN_EXAMPLES, &info->train_examples));
    DP_TRY(meta_int(c, META_DEVICES, &info->num_devices));
    DP_TRY(meta_int(c, META_RANKS, &info->num_ranks));
    return parse_optional(c);
}

/* The epoch's sums so far: "a,b,..." (at most DP_CHECKPOINT_RANK_SUMS). */
static dp_status_t parse_sums(const dp_checkpoint_t *c, int key, double *doubles, int *ints, int *count) {
    const char *text = dp_safetensors_meta(c->st, meta_keys[key]);
    *count = 0;
    if (!text || !*text) return DP_OK;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        if (*count == DP_CHECKPOINT_RANK_SUMS || !*p || strchr(" \t\n\v\f\r+", *p)) goto bad; /* as written */
        if (doubles) {
            doubles[*count] = strtod(p, &end);
        } else {
            long v = strtol(p, &end, 10);
            if (v < 0 || v > INT32_MAX) goto bad;
            ints[*count] = (int)v;
        }
        if (end == p || errno) goto bad;
        (*count)++;
        if (*end == '\0') return DP_OK;
        if (*end != ',') goto bad;
        p = end + 1;
    }
bad:
    return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected up to %d comma-separated numbers",
                   dp_safetensors_path(c->st), meta_keys[key], dp_json_show(text).text, DP_CHECKPOINT_RANK_SUMS);
}

dp_status_t dp_checkpoint_meta_array(const char *path, const char *key, const char *text, const char *items,
                                     char *source, size_t source_size, dp_json_t **out) {
    snprintf(source, source_size, "%s: metadata '%s'", path, key);
    DP_TRY(dp_json_parse(text, strlen(text), source, out));
    if ((*out)->kind == DP_JSON_ARRAY && (*out)->count >= 1) return DP_OK;
    dp_json_free(*out);
    *out = NULL;
    return dp_fail(DP_ERR_FORMAT, "%s is '%s', expected a JSON array of %s", source, dp_json_show(text).text, items);
}

/* data.classes: a JSON array of 1 or more names, each a class name. */
static dp_status_t parse_class_names(dp_checkpoint_t *c, const char *text) {
    char source[4200];
    dp_json_t *v;
    DP_TRY(dp_checkpoint_meta_array(dp_safetensors_path(c->st), DP_CHECKPOINT_CLASSES_KEY, text, "class names", source,
                                    sizeof source, &v));
    dp_status_t status = DP_OK;
    for (int i = 0; status == DP_OK && i < v->count; i++) {
        const char *problem = "is not a string";
        if (v->items[i].kind != DP_JSON_STRING || !class_name_ok(v->items[i].string, &problem))
            status = dp_fail(DP_ERR_FORMAT, "%s: entry %d %s (class names are 1 to %d bytes of UTF-8 text)", source,
                             i, problem, DP_CHECKPOINT_MAX_CLASS_NAME);
    }
    if (status == DP_OK &&
        !(c->info.class_names = dp_alloc_zeroed((size_t)v->count, sizeof *c->info.class_names, "class names")))
        status = DP_ERR_NOMEM;
    for (int i = 0; status == DP_OK && i < v->count; i++) {
        size_t n = strlen(v->items[i].string) + 1;
        if (!(c->info.class_names[i] = dp_alloc(n, "class name"))) {
            status = DP_ERR_NOMEM;
            break;
        }
        memcpy(c->info.class_names[i], v->items[i].string, n);
        c->info.num_class_names = i + 1;
    }
    dp_json_free(v);
    return status;
}

void dp_checkpoint_free_class_names(dp_checkpoint_info_t *info) {
    for (int i = 0; info->class_names && i < info->num_class_names; i++) free(info->class_names[i]);
    free(info->class_names);
    info->class_names = NULL;
    info->num_class_names = 0;
}

/* An optional float32 key, written as a decimal: *present 0 and *out
 * untouched when absent; else in (0, 1) (fraction) or >= 0 and finite. */
static dp_status_t parse_optional_float(dp_checkpoint_t *c, const char *key, int fraction, float *out, int *present) {
    const char *text = dp_safetensors_meta(c->st, key);
    if (present) *present = text != NULL;
    if (!text) return DP_OK;
    char *end;
    errno = 0;
    const float value = strtof(text, &end);
    const int ok = fraction ? value > 0.0f && value < 1.0f : value >= 0.0f && isfinite(value);
    if (!text[0] || strchr(" \t\n\v\f\r+", text[0]) || *end || errno || !ok)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected %s", dp_safetensors_path(c->st), key,
                       dp_json_show(text).text, fraction ? "a number in (0, 1)" : "a number >= 0");
    *out = value;
    return DP_OK;
}

/* best.epoch, best.test_correct, best.test_count: all three or none; the
 * epoch one of those completed, the correct answers at most the count. */
static dp_status_t parse_best(dp_checkpoint_t *c) {
    static const char *const keys[3] = {DP_CHECKPOINT_BEST_EPOCH_KEY, DP_CHECKPOINT_BEST_CORRECT_KEY,
                                        DP_CHECKPOINT_BEST_COUNT_KEY};
    const char *texts[3];
    int present = 0;
    for (int k = 0; k < 3; k++) present += (texts[k] = dp_safetensors_meta(c->st, keys[k])) != NULL;
    if (present == 0) return DP_OK;
    long values[3];
    for (int k = 0; k < 3; k++) {
        if (!texts[k])
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is missing (the file has '%s')", dp_safetensors_path(c->st),
                           keys[k], keys[texts[0] ? 0 : 1]);
        char *end;
        errno = 0;
        values[k] = strtol(texts[k], &end, 10);
        if (!(texts[k][0] >= '0' && texts[k][0] <= '9') || *end || errno || values[k] > INT_MAX)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a decimal integer",
                           dp_safetensors_path(c->st), keys[k], dp_json_show(texts[k]).text);
    }
    dp_checkpoint_info_t *info = &c->info;
    if (values[0] < 1 || values[0] > info->epochs_completed || values[2] < 1 || values[1] > values[2])
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'best.*' says epoch %ld with %ld of %ld correct, expected one of "
                       "the %d epochs completed and at most the test set's count", dp_safetensors_path(c->st),
                       values[0], values[1], values[2], info->epochs_completed);
    info->best_epoch = (int)values[0], info->best_correct = (int)values[1], info->best_count = (int)values[2];
    return DP_OK;
}

/* An optional key holding a decimal integer in [min, max] (absent: *value left as it is): early_stop (a
 * patience of 1 or more epochs), data.ra_reps (2 to DP_RA_REPS_LIMIT repeats). */
static dp_status_t parse_optional_int(dp_checkpoint_t *c, const char *key, long min, long max, int *value) {
    const char *text = dp_safetensors_meta(c->st, key);
    if (!text) return DP_OK;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!(text[0] >= '1' && text[0] <= '9') || *end || errno || v < min || v > max)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a decimal integer from %ld to %ld",
                       dp_safetensors_path(c->st), key, dp_json_show(text).text, min, max);
    *value = (int)v;
    return DP_OK;
}

/* model_ema.steps (a positive integer), .decay (a number in [0, 1]),
 * .updates (an integer): all three or none (no moving average). */
static dp_status_t parse_ema(dp_checkpoint_t *c) {
    static const char *const keys[3] = {DP_CHECKPOINT_EMA_STEPS_KEY, DP_CHECKPOINT_EMA_DECAY_KEY,
                                        DP_CHECKPOINT_EMA_UPDATES_KEY};
    const char *texts[3];
    int present = 0;
    for (int k = 0; k < 3; k++) present += (texts[k] = dp_safetensors_meta(c->st, keys[k])) != NULL;
    if (present == 0) return DP_OK;
    const char *path = dp_safetensors_path(c->st);
    for (int k = 0; k < 3; k++)
        if (!texts[k])
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is missing (the file has '%s')", path, keys[k],
                           keys[texts[0] ? 0 : texts[1] ? 1 : 2]);
    char *end;
    errno = 0;
    long steps = strtol(texts[0], &end, 10);
    if (!(texts[0][0] >= '1' && texts[0][0] <= '9') || *end || errno || steps > INT_MAX)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a positive decimal integer", path, keys[0],
                       dp_json_show(texts[0]).text);
    errno = 0;
    double decay = strtod(texts[1], &end);
    if (!texts[1][0] || strchr(" \t\n\v\f\r+", texts[1][0]) || *end || errno || !(decay >= 0.0 && decay <= 1.0))
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number in [0, 1]", path, keys[1],
                       dp_json_show(texts[1]).text);
    errno = 0;
    unsigned long long updates = strtoull(texts[2], &end, 10);
    if (!(texts[2][0] >= '0' && texts[2][0] <= '9') || *end || errno)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a decimal integer", path, keys[2],
                       dp_json_show(texts[2]).text);
    c->info.model_ema_steps = (int)steps;
    c->info.model_ema_decay = decay;
    c->info.model_ema_updates = updates;
    return DP_OK;
}

/* mixup_alpha, cutmix_alpha: float32s in (0, DP_MIX_ALPHA_LIMIT];
 * random_erase: in (0, 1] (absent: 0, off). */
static dp_status_t parse_mix(dp_checkpoint_t *c) {
    const char *const keys[3] = {DP_CHECKPOINT_MIXUP_ALPHA_KEY, DP_CHECKPOINT_CUTMIX_ALPHA_KEY,
                                 DP_CHECKPOINT_RANDOM_ERASE_KEY};
    float *const values[3] = {&c->info.mix.mixup_alpha, &c->info.mix.cutmix_alpha, &c->info.random_erase};
    const float limits[3] = {DP_MIX_ALPHA_LIMIT, DP_MIX_ALPHA_LIMIT, 1.0f};
    for (int k = 0; k < 3; k++) {
        int present;
        DP_TRY(parse_optional_float(c, keys[k], 0, values[k], &present));
        if (present && !(*values[k] > 0.0f && *values[k] <= limits[k]))
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number in (0, %g]",
                           dp_safetensors_path(c->st), keys[k], dp_json_show(dp_safetensors_meta(c->st, keys[k])).text,
                           (double)limits[k]);
    }
    return DP_OK;
}

/* label_smoothing: a float32 in (0, 1), as its shortest decimal (absent:
 * 0); clip_grad_norm: a float32 in (0, DP_CLIP_MAX_NORM_LIMIT] (absent: 0,
 * none); the weight-decay groups' decays (absent: none, the weight
 * decay's); parse_mix's. */
static dp_status_t parse_optional_numbers(dp_checkpoint_t *c) {
    dp_optim_config_t *o = &c->info.optim;
    DP_TRY(parse_optional_float(c, DP_CHECKPOINT_NORM_WEIGHT_DECAY_KEY, 0, &o->norm_weight_decay,
                                &o->has_norm_weight_decay));
    DP_TRY(parse_optional_float(c, DP_CHECKPOINT_BIAS_WEIGHT_DECAY_KEY, 0, &o->bias_weight_decay,
                                &o->has_bias_weight_decay));
    DP_TRY(parse_best(c));
    DP_TRY(parse_optional_int(c, DP_CHECKPOINT_EARLY_STOP_KEY, 1, INT_MAX, &c->info.early_stop));
    DP_TRY(parse_optional_int(c, DP_CHECKPOINT_RA_REPS_KEY, 2, DP_RA_REPS_LIMIT, &c->info.ra_reps));
    DP_TRY(parse_ema(c));
    DP_TRY(parse_mix(c));
    DP_TRY(parse_optional_float(c, DP_CHECKPOINT_CLIP_GRAD_NORM_KEY, 0, &c->info.clip_grad_norm, NULL));
    if (!(c->info.clip_grad_norm >= 0.0f && c->info.clip_grad_norm <= DP_CLIP_MAX_NORM_LIMIT) ||
        (c->info.clip_grad_norm == 0.0f && dp_safetensors_meta(c->st, DP_CHECKPOINT_CLIP_GRAD_NORM_KEY)))
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number in (0, %g]",
                       dp_safetensors_path(c->st), DP_CHECKPOINT_CLIP_GRAD_NORM_KEY,
                       dp_json_show(dp_safetensors_meta(c->st, DP_CHECKPOINT_CLIP_GRAD_NORM_KEY)).text,
                       (double)DP_CLIP_MAX_NORM_LIMIT);
    return parse_optional_float(c, DP_CHECKPOINT_LABEL_SMOOTHING_KEY, 1, &c->info.label_smoothing, NULL);
}

/* The keys a file of an older dptrain may lack: none, none, an epoch's end,
 * no class names, no convolution algorithm choices, no model file text,
 * nothing frozen, no training transform recorded, no accumulation, planned
 * epoch count, synchronised batch norm or label smoothing recorded (0). */
/* data.val_image_size: "HxW", each 1 to 65536 (absent: 0 x 0, the model's own size). */
static dp_status_t parse_val_size(dp_checkpoint_t *c) {
    const char *text = dp_safetensors_meta(c->st, DP_CHECKPOINT_VAL_SIZE_KEY);
    if (!text) return DP_OK;
    const size_t h_digits = strspn(text, "0123456789");
    const char *second = text + h_digits + (text[h_digits] == 'x');
    const size_t w_digits = strspn(second, "0123456789");
    const long h = h_digits && h_digits <= 5 ? strtol(text, NULL, 10) : 0;
    const long w = w_digits && w_digits <= 5 && !second[w_digits] && second > text + h_digits
                       ? strtol(second, NULL, 10) : 0;
    if (h < 1 || w < 1 || h > 65536 || w > 65536)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected HxW (pixels, 1 to 65536: 224x224)",
                       dp_safetensors_path(c->st), DP_CHECKPOINT_VAL_SIZE_KEY, dp_json_show(text).text);
    c->info.val_height = (int)h;
    c->info.val_width = (int)w;
    return DP_OK;
}

static dp_status_t parse_optional(dp_checkpoint_t *c) {
    dp_checkpoint_info_t *info = &c->info;
    DP_TRY(parse_optional_numbers(c));
    if (dp_safetensors_meta(c->st, meta_keys[META_ACCUMULATE])) {
        DP_TRY(meta_int(c, META_ACCUMULATE, &info->accumulate));
        if (info->accumulate < 1 || info->batch_size % info->accumulate != 0)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata 'accumulate' is %d, expected a divisor of 'batch_size' %d",
                           dp_safetensors_path(c->st), info->accumulate, info->batch_size);
    }
    if (dp_safetensors_meta(c->st, meta_keys[META_EPOCHS_PLANNED]))
        DP_TRY(meta_int(c, META_EPOCHS_PLANNED, &info->epochs_planned));
    if (dp_safetensors_meta(c->st, meta_keys[META_SYNC_BATCH_NORM])) {
        uint64_t on;
        DP_TRY(meta_u64(c, META_SYNC_BATCH_NORM, 1, &on));
        info->sync_batch_norm = (int)on;
    }
    if (dp_safetensors_meta(c->st, meta_keys[META_NORMALIZE]))
        DP_TRY(meta_copy(c, META_NORMALIZE, info->normalize, sizeof info->normalize));
    if (dp_safetensors_meta(c->st, meta_keys[META_AUGMENT]))
        DP_TRY(meta_copy(c, META_AUGMENT, info->augment, sizeof info->augment));
    if (dp_safetensors_meta(c->st, meta_keys[META_EPOCH_EXAMPLES]))
        DP_TRY(meta_int(c, META_EPOCH_EXAMPLES, &info->epoch_examples));
    int losses, corrects;
    DP_TRY(parse_sums(c, META_EPOCH_LOSS, info->epoch_loss, NULL, &losses));
    DP_TRY(parse_sums(c, META_EPOCH_CORRECT, NULL, info->epoch_correct, &corrects));
    if (losses != corrects)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'epoch.loss_sums' has %d entries, 'epoch.correct' %d",
                       dp_safetensors_path(c->st), losses, corrects);
    info->epoch_ranks = losses;
    const char *classes = dp_safetensors_meta(c->st, DP_CHECKPOINT_CLASSES_KEY);
    if (classes) DP_TRY(parse_class_names(c, classes));
    const char *transform = dp_safetensors_meta(c->st, DP_CHECKPOINT_TRANSFORM_KEY);
    if (transform) {
        if (strlen(transform) >= sizeof info->transform)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is longer than %zu bytes", dp_safetensors_path(c->st),
                           DP_CHECKPOINT_TRANSFORM_KEY, sizeof info->transform - 1);
        DP_TRY(check_one_line(c, DP_CHECKPOINT_TRANSFORM_KEY, transform));
        snprintf(info->transform, sizeof info->transform, "%s", transform);
    }
    DP_TRY(optional_text(c, DP_CHECKPOINT_TRAIN_TRANSFORM_KEY, info->train_transform, sizeof info->train_transform));
    DP_TRY(optional_text(c, DP_CHECKPOINT_DATA_DIR_KEY, info->data_dir, sizeof info->data_dir));
    const char *holdout = dp_safetensors_meta(c->st, DP_CHECKPOINT_HOLDOUT_KEY);
    if (holdout) {
        if (!*holdout || strlen(holdout) >= sizeof info->holdout ||
            strspn(holdout, "0123456789.eE+-") != strlen(holdout))
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a fraction", dp_safetensors_path(c->st),
                           DP_CHECKPOINT_HOLDOUT_KEY, dp_json_show(holdout).text);
        snprintf(info->holdout, sizeof info->holdout, "%s", holdout);
    }
    const char *train_total = dp_safetensors_meta(c->st, DP_CHECKPOINT_TRAIN_TOTAL_KEY);
    if (train_total) {
        const size_t digits = strspn(train_total, "0123456789");
        const long long total = digits && digits <= 10 && !train_total[digits] ? strtoll(train_total, NULL, 10) : 0;
        if (total < 1 || total > INT32_MAX)
            return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a positive image count",
                           dp_safetensors_path(c->st), DP_CHECKPOINT_TRAIN_TOTAL_KEY, dp_json_show(train_total).text);
        info->data_train_total = (int)total;
    }
    DP_TRY(parse_val_size(c));
    info->model_text = dp_safetensors_meta(c->st, DP_CHECKPOINT_MODEL_TEXT_KEY);
    const char *conv_algorithms = dp_safetensors_meta(c->st, DP_CHECKPOINT_CONV_ALGOS_KEY);
    if (conv_algorithms) DP_TRY(dp_checkpoint_parse_conv_algos(info, dp_safetensors_path(c->st), conv_algorithms));
    DP_TRY(optional_text(c, DP_CHECKPOINT_FREEZE_KEY, info->freeze, sizeof info->freeze));
    if (info->loader_batch > 0 && losses == 0)
        return dp_fail(DP_ERR_FORMAT, "%s: the checkpoint stops inside epoch %d (batch %d) but has no "
                       "'epoch.loss_sums' (the epoch's sums so far): it cannot be resumed exactly",
                       dp_safetensors_path(c->st), info->loader_epoch + 1, info->loader_batch);
    return DP_OK;
}
