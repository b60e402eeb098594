/* checkpoint.c - dptrain's checkpoints (checkpoint.h) on top of the
 * safetensors writer and reader (safetensors.c): the parameter table under
 * its names, the optimizer state as "optimizer.<param>.<state>", and the
 * metadata keys, each parsed and checked whole on reading.
 */
#include "dptrain/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- dptrain checkpoints ------------------------------------------------------------- */
#define OPTIMIZER_PREFIX "optimizer."

uint64_t dp_model_fingerprint(const dp_model_t *model) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 */
#define FNV_BYTE(b) (h = (h ^ (unsigned char)(b)) * 0x100000001b3ULL)
    for (int i = 0; i < dp_model_num_param_tensors(model); i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        for (const char *c = p->name; *c; c++) FNV_BYTE(*c);
        FNV_BYTE(0);
        FNV_BYTE(p->ndim);
        for (int d = 0; d < p->ndim; d++)
            for (int b = 0; b < 4; b++) FNV_BYTE((uint32_t)p->shape[d] >> (8 * b));
        FNV_BYTE(p->trainable ? 1 : 0);
    }
#undef FNV_BYTE
    return h;
}

static void param_tensor(const dp_param_info_t *p, const float *data, const char *name, dp_st_tensor_t *t) {
    t->name = name;
    t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
    t->data = data;
}

/* The metadata keys, in the order they are written (checkpoint.h says what each holds). */
enum {
    META_FORMAT, META_FORMAT_VERSION, META_DPTRAIN_VERSION, META_MODEL, META_FINGERPRINT, META_OPTIMIZER,
    META_LR, META_WEIGHT_DECAY, META_MOMENTUM, META_NESTEROV, META_BETA1, META_BETA2, META_EPS,
    META_OPTIMIZER_STATES, META_OPTIMIZER_STEPS, META_SCHEDULE, META_SCHEDULE_LR, META_SCHEDULE_STEP_EPOCHS,
    META_SCHEDULE_GAMMA, META_SCHEDULE_TOTAL_EPOCHS, META_SCHEDULE_MIN_LR, META_SCHEDULE_WARMUP_EPOCHS,
    META_SCHEDULE_WARMUP_STEPS, META_SCHEDULE_STEPS_PER_EPOCH, META_SCHEDULE_TOTAL_STEPS, META_STEP_COUNT,
    META_EPOCHS, META_LOADER_EPOCH, META_LOADER_BATCH, META_SEED, META_BATCH_SIZE, META_TRAIN_EXAMPLES,
    META_DEVICES, META_RANKS, META_NORMALIZE, META_AUGMENT, META_EPOCH_LOSS, META_EPOCH_CORRECT,
    META_EPOCH_EXAMPLES, META_COUNT
};
static const char *const meta_keys[META_COUNT] = {
    "format", "format_version", "dptrain_version", "model", "model_fingerprint", "optimizer",
    "optimizer.lr", "optimizer.weight_decay", "optimizer.momentum", "optimizer.nesterov",
    "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.states", "optimizer.steps",
    "lr_schedule", "lr_schedule.lr", "lr_schedule.step_epochs", "lr_schedule.gamma",
    "lr_schedule.total_epochs", "lr_schedule.min_lr", "lr_schedule.warmup_epochs", "lr_schedule.warmup_steps",
    "lr_schedule.steps_per_epoch", "lr_schedule.total_steps", "step_count", "epochs_completed",
    "loader.epoch", "loader.batch", "seed", "batch_size", "train_examples", "devices", "ranks",
    "data.normalize", "data.augment", "epoch.loss_sums", "epoch.correct", "epoch.examples",
};
#define FORMAT_NAME "dptrain-checkpoint"

/* cosine's T; 0 for the schedules that have no length */
static uint64_t schedule_total_steps(const dp_checkpoint_info_t *info) {
    return info->schedule.kind == DP_LR_COSINE ? (uint64_t)info->schedule.total_epochs * info->steps_per_epoch : 0;
}

/* The current error message, prefixed with `path: ` (the schedule and
 * optimizer checks do not know the file). */
static dp_status_t fail_in(dp_status_t status, const char *path, const char *what) {
    char message[1024];
    snprintf(message, sizeof message, "%s", dp_error_message());
    return dp_fail(status, "%s: %s: %s", path, what, message);
}

/* Refuses what would make a file that cannot be loaded back. */
static dp_status_t check_save(const char *path, const dp_model_t *model, const dp_optimizer_t *opt,
                              const dp_checkpoint_info_t *info) {
    if (opt && dp_optimizer_kind(opt) != info->optim.kind)
        return dp_fail(DP_ERR_ARG, "%s: the checkpoint info says optimizer '%s', the optimizer saved is '%s'",
                       path, dp_optim_kind_name(info->optim.kind), dp_optim_kind_name(dp_optimizer_kind(opt)));
    if (opt && dp_optimizer_num_params(opt) < dp_model_num_trainable(model))
        return dp_fail(DP_ERR_ARG, "%s: the optimizer updates %zu floats, model %s has %zu trainable ones", path,
                       dp_optimizer_num_params(opt), dp_model_name(model), dp_model_num_trainable(model));
    if (dp_lr_schedule_check(&info->schedule) != DP_OK) return fail_in(DP_ERR_ARG, path, "lr_schedule");
    if (info->steps_per_epoch < 1)
        return dp_fail(DP_ERR_ARG, "%s: lr_schedule.steps_per_epoch must be >= 1, found 0", path);
    return DP_OK;
}

dp_status_t dp_checkpoint_save(const char *path, const dp_model_t *model, const float *params,
                               dp_optimizer_t *opt, const dp_checkpoint_info_t *info) {
    DP_TRY(check_save(path, model, opt, info));
    int num_params = dp_model_num_param_tensors(model), num_trainable = 0;
    for (int i = 0; i < num_params; i++) num_trainable += dp_model_param(model, i)->trainable != 0;
    int num_states = opt ? dp_optimizer_num_states(opt) : 0;
    int count = num_params + num_states * num_trainable;
    dp_st_tensor_t *tensors = dp_alloc_zeroed((size_t)count + 1, sizeof *tensors, "checkpoint tensors");
    char **names = dp_alloc_zeroed((size_t)count + 1, sizeof *names, "checkpoint names");
    char values[META_COUNT][256] = {{0}};
    size_t states_used = 0;
    dp_status_t status = tensors && names ? DP_OK : DP_ERR_NOMEM;
    for (int i = 0; i < num_params && status == DP_OK; i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        param_tensor(p, params + p->offset, p->name, &tensors[i]);
    }
    int t = num_params;
    for (int s = 0; s < num_states && status == DP_OK; s++) {
        const char *state_name;
        const float *state = dp_optimizer_state(opt, s, &state_name);
        states_used += (size_t)snprintf(values[META_OPTIMIZER_STATES] + states_used,
                                        sizeof values[0] - states_used, s ? ",%s" : "%s", state_name);
        for (int i = 0; i < num_params && status == DP_OK; i++) {
            const dp_param_info_t *p = dp_model_param(model, i);
            if (!p->trainable) continue;
            size_t size = strlen(OPTIMIZER_PREFIX) + strlen(p->name) + strlen(state_name) + 2;
            names[t] = dp_alloc(size, "checkpoint tensor name");
            if (!names[t]) {
                status = DP_ERR_NOMEM;
                break;
            }
            snprintf(names[t], size, OPTIMIZER_PREFIX "%s.%s", p->name, state_name);
            param_tensor(p, state + p->offset, names[t], &tensors[t]);
            t++;
        }
    }
    if (status == DP_OK) {
        const dp_optim_config_t *o = &info->optim;
        const dp_lr_schedule_t *sc = &info->schedule;
        const char *texts[META_COUNT] = {
            [META_FORMAT] = FORMAT_NAME, [META_DPTRAIN_VERSION] = info->dptrain_version,
            [META_MODEL] = info->model, [META_OPTIMIZER] = dp_optim_kind_name(o->kind),
            [META_SCHEDULE] = dp_lr_schedule_kind_name(sc->kind),
        };
        snprintf(values[META_FORMAT_VERSION], 256, "%d", DP_CHECKPOINT_VERSION);
        snprintf(values[META_FINGERPRINT], 256, "%016" PRIx64, dp_model_fingerprint(model));
        snprintf(values[META_LR], 256, "%.9g", o->lr);
        snprintf(values[META_WEIGHT_DECAY], 256, "%.9g", o->weight_decay);
        snprintf(values[META_MOMENTUM], 256, "%.9g", o->momentum);
        snprintf(values[META_NESTEROV], 256, "%d", o->nesterov ? 1 : 0);
        snprintf(values[META_BETA1], 256, "%.9g", o->beta1);
        snprintf(values[META_BETA2], 256, "%.9g", o->beta2);
        snprintf(values[META_EPS], 256, "%.9g", o->eps);
        snprintf(values[META_OPTIMIZER_STEPS], 256, "%" PRIu64, opt ? dp_optimizer_steps(opt) : info->optimizer_steps);
        snprintf(values[META_SCHEDULE_LR], 256, "%.17g", sc->lr);
        snprintf(values[META_SCHEDULE_STEP_EPOCHS], 256, "%d", sc->step_epochs);
        snprintf(values[META_SCHEDULE_GAMMA], 256, "%.17g", sc->gamma);
        snprintf(values[META_SCHEDULE_TOTAL_EPOCHS], 256, "%d", sc->total_epochs);
        snprintf(values[META_SCHEDULE_MIN_LR], 256, "%.17g", sc->min_lr);
        snprintf(values[META_SCHEDULE_WARMUP_EPOCHS], 256, "%.17g", sc->warmup_epochs);
        snprintf(values[META_SCHEDULE_WARMUP_STEPS], 256, "%" PRIu64, sc->warmup_steps);
        snprintf(values[META_SCHEDULE_STEPS_PER_EPOCH], 256, "%" PRIu64, info->steps_per_epoch);
        snprintf(values[META_SCHEDULE_TOTAL_STEPS], 256, "%" PRIu64, schedule_total_steps(info));
        snprintf(values[META_STEP_COUNT], 256, "%" PRIu64, info->step_count);
        snprintf(values[META_EPOCHS], 256, "%d", info->epochs_completed);
        snprintf(values[META_LOADER_EPOCH], 256, "%d", info->loader_epoch);
        snprintf(values[META_LOADER_BATCH], 256, "%d", info->loader_batch);
        snprintf(values[META_SEED], 256, "%" PRIu64, info->seed);
        snprintf(values[META_BATCH_SIZE], 256, "%d", info->batch_size);
        snprintf(values[META_TRAIN_EXAMPLES], 256, "%d", info->train_examples);
        snprintf(values[META_DEVICES], 256, "%d", info->num_devices);
        snprintf(values[META_RANKS], 256, "%d", info->num_ranks > 0 ? info->num_ranks : 1);
        snprintf(values[META_NORMALIZE], 256, "%s", info->normalize);
        snprintf(values[META_AUGMENT], 256, "%s", info->augment);
        size_t used_loss = 0, used_correct = 0;
        for (int r = 0; r < info->epoch_ranks && r < DP_CHECKPOINT_RANK_SUMS; r++) {
            used_loss += (size_t)snprintf(values[META_EPOCH_LOSS] + used_loss, 256 - used_loss, r ? ",%.17g" : "%.17g",
                                          info->epoch_loss[r]);
            used_correct += (size_t)snprintf(values[META_EPOCH_CORRECT] + used_correct, 256 - used_correct,
                                             r ? ",%d" : "%d", info->epoch_correct[r]);
        }
        snprintf(values[META_EPOCH_EXAMPLES], 256, "%d", info->epoch_examples);
        dp_st_meta_t meta[META_COUNT];
        for (int k = 0; k < META_COUNT; k++) meta[k] = (dp_st_meta_t){meta_keys[k], texts[k] ? texts[k] : values[k]};
        status = dp_safetensors_write(path, tensors, t, meta, META_COUNT);
    }
    for (int i = 0; names && i < count; i++) free(names[i]);
    free(names);
    free(tensors);
    return status;
}

struct dp_checkpoint {
    dp_safetensors_t *st;
    dp_checkpoint_info_t info;
    uint64_t fingerprint;
    char states[256];
};

static dp_status_t parse_optional(dp_checkpoint_t *c);

/* --- metadata parsing: every value checked whole --- */
static dp_status_t meta_text(const dp_checkpoint_t *c, int key, const char **out) {
    *out = dp_safetensors_meta(c->st, meta_keys[key]);
    if (!*out)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is missing (not a checkpoint written by dptrain?)",
                       dp_safetensors_path(c->st), meta_keys[key]);
    return DP_OK;
}

static dp_status_t meta_copy(const dp_checkpoint_t *c, int key, char *out, size_t size) {
    const char *text;
    DP_TRY(meta_text(c, key, &text));
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
                       dp_safetensors_path(c->st), meta_keys[key], text, max);
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
    if (!text[0] || *end || errno || !isfinite(v))
        return dp_fail(DP_ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number", dp_safetensors_path(c->st),
                       meta_keys[key], text);
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
                       meta_keys[key], text, expected);
    return DP_OK;
}

static dp_status_t parse_optimizer(dp_checkpoint_t *c) {
    dp_optim_config_t *o = &c->info.optim;
    int kind;
    DP_TRY(meta_kind(c, META_OPTIMIZER, dp_optim_kind_from_name, "sgd, momentum, adagrad or adam", &kind));
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
        return fail_in(DP_ERR_FORMAT, dp_safetensors_path(c->st), "metadata 'optimizer.*'");
    return DP_OK;
}

static dp_status_t parse_schedule(dp_checkpoint_t *c) {
    const char *path = dp_safetensors_path(c->st);
    dp_checkpoint_info_t *info = &c->info;
    dp_lr_schedule_t *s = &info->schedule;
    int kind;
    DP_TRY(meta_kind(c, META_SCHEDULE, dp_lr_schedule_kind_from_name, "constant, step or cosine", &kind));
    s->kind = (dp_lr_schedule_kind_t)kind;
    DP_TRY(meta_number(c, META_SCHEDULE_LR, NULL, &s->lr));
    DP_TRY(meta_int(c, META_SCHEDULE_STEP_EPOCHS, &s->step_epochs));
    DP_TRY(meta_number(c, META_SCHEDULE_GAMMA, NULL, &s->gamma));
    DP_TRY(meta_int(c, META_SCHEDULE_TOTAL_EPOCHS, &s->total_epochs));
    DP_TRY(meta_number(c, META_SCHEDULE_MIN_LR, NULL, &s->min_lr));
    DP_TRY(meta_number(c, META_SCHEDULE_WARMUP_EPOCHS, NULL, &s->warmup_epochs));
    DP_TRY(meta_u64(c, META_SCHEDULE_WARMUP_STEPS, UINT64_MAX, &s->warmup_steps));
    DP_TRY(meta_u64(c, META_SCHEDULE_STEPS_PER_EPOCH, UINT32_MAX, &info->steps_per_epoch));
    uint64_t total_steps;
    DP_TRY(meta_u64(c, META_SCHEDULE_TOTAL_STEPS, UINT64_MAX, &total_steps));
    if (dp_lr_schedule_check(s) != DP_OK) return fail_in(DP_ERR_FORMAT, path, "metadata 'lr_schedule.*'");
    if (info->steps_per_epoch < 1)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'lr_schedule.steps_per_epoch' is 0, expected >= 1", path);
    if (total_steps != schedule_total_steps(info))
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'lr_schedule.total_steps' is %" PRIu64 ", expected %" PRIu64
                       " (total_epochs x steps_per_epoch for cosine, else 0)", path, total_steps,
                       schedule_total_steps(info));
    return DP_OK;
}

static dp_status_t parse_info(dp_checkpoint_t *c) {
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
    DP_TRY(meta_copy(c, META_DPTRAIN_VERSION, info->dptrain_version, sizeof info->dptrain_version));
    const char *fingerprint;
    DP_TRY(meta_text(c, META_FINGERPRINT, &fingerprint));
    char *end;
    c->fingerprint = strtoull(fingerprint, &end, 16);
    if (strlen(fingerprint) != 16 || *end)
        return dp_fail(DP_ERR_FORMAT, "%s: metadata 'model_fingerprint' is '%s', expected 16 hex digits", path,
                       fingerprint);
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
        if (*count == DP_CHECKPOINT_RANK_SUMS) goto bad;
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
                   dp_safetensors_path(c->st), meta_keys[key], text, DP_CHECKPOINT_RANK_SUMS);
}

/* The keys a file of an older dptrain may lack: none, none, an epoch's end. */
static dp_status_t parse_optional(dp_checkpoint_t *c) {
    dp_checkpoint_info_t *info = &c->info;
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
    if (info->loader_batch > 0 && losses == 0)
        return dp_fail(DP_ERR_FORMAT, "%s: the checkpoint stops inside epoch %d (batch %d) but has no "
                       "'epoch.loss_sums' (the epoch's sums so far): it cannot be resumed exactly",
                       dp_safetensors_path(c->st), info->loader_epoch + 1, info->loader_batch);
    return DP_OK;
}

dp_status_t dp_checkpoint_open(const char *path, dp_checkpoint_t **out) {
    *out = NULL;
    dp_checkpoint_t *c = dp_alloc_zeroed(1, sizeof *c, "checkpoint");
    if (!c) return DP_ERR_NOMEM;
    dp_status_t status = dp_safetensors_read(path, &c->st);
    if (status == DP_OK) status = parse_info(c);
    if (status != DP_OK) {
        dp_checkpoint_close(c);
        return status;
    }
    *out = c;
    return DP_OK;
}

void dp_checkpoint_close(dp_checkpoint_t *c) {
    if (!c) return;
    dp_safetensors_free(c->st);
    free(c);
}

const dp_checkpoint_info_t *dp_checkpoint_info(const dp_checkpoint_t *c) { return &c->info; }
const dp_safetensors_t *dp_checkpoint_tensors(const dp_checkpoint_t *c) { return c->st; }

/* The entry `name` with parameter p's shape, or a message naming it. */
static dp_status_t find_like(const dp_checkpoint_t *c, const dp_model_t *model, const char *name,
                             const dp_param_info_t *p, const dp_st_entry_t **out) {
    const char *path = dp_safetensors_path(c->st);
    const dp_st_entry_t *e = dp_safetensors_find(c->st, name);
    if (!e)
        return dp_fail(DP_ERR_FORMAT, "%s: has no tensor '%s', which model %s needs (the checkpoint is of "
                       "model %s)", path, name, dp_model_name(model), c->info.model);
    int same = e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
    if (!same) {
        int64_t expected[DP_ST_MAX_DIMS];
        for (int d = 0; d < p->ndim; d++) expected[d] = p->shape[d];
        char found_text[200], expected_text[200];
        dp_st_shape_str(found_text, sizeof found_text, e->ndim, e->shape);
        dp_st_shape_str(expected_text, sizeof expected_text, p->ndim, expected);
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' has shape %s, model %s expects %s (the checkpoint is "
                       "of model %s)", path, name, found_text, dp_model_name(model), expected_text,
                       c->info.model);
    }
    *out = e;
    return DP_OK;
}

dp_status_t dp_checkpoint_load_params(const dp_checkpoint_t *c, const dp_model_t *model, float *params) {
    const char *path = dp_safetensors_path(c->st);
    int num_params = dp_model_num_param_tensors(model);
    for (int i = 0; i < num_params; i++) {
        const dp_st_entry_t *e;
        DP_TRY(find_like(c, model, dp_model_param(model, i)->name, dp_model_param(model, i), &e));
    }
    for (int i = 0; i < dp_safetensors_count(c->st); i++) {
        const char *name = dp_safetensors_entry(c->st, i)->name;
        if (strncmp(name, OPTIMIZER_PREFIX, strlen(OPTIMIZER_PREFIX)) == 0) continue;
        int known = 0;
        for (int j = 0; j < num_params && !known; j++) known = strcmp(dp_model_param(model, j)->name, name) == 0;
        if (!known)
            return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' is not a parameter of model %s (the checkpoint is of "
                           "model %s)", path, name, dp_model_name(model), c->info.model);
    }
    if (c->fingerprint != dp_model_fingerprint(model))
        return dp_fail(DP_ERR_FORMAT, "%s: model_fingerprint %016" PRIx64 " differs from model %s's %016" PRIx64
                       " (same tensors, but another order or other trainable flags)", path, c->fingerprint,
                       dp_model_name(model), dp_model_fingerprint(model));
    for (int i = 0; i < num_params; i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        dp_safetensors_copy(dp_safetensors_find(c->st, p->name), params + p->offset);
    }
    return DP_OK;
}

dp_status_t dp_checkpoint_load_optimizer(const dp_checkpoint_t *c, const dp_model_t *model,
                                         dp_optimizer_t *opt) {
    const char *path = dp_safetensors_path(c->st);
    if (c->info.optim.kind != dp_optimizer_kind(opt))
        return dp_fail(DP_ERR_ARG, "%s: saved with optimizer '%s', this run uses '%s'", path,
                       dp_optim_kind_name(c->info.optim.kind), dp_optim_kind_name(dp_optimizer_kind(opt)));
    if (dp_optimizer_num_params(opt) < dp_model_num_trainable(model))
        return dp_fail(DP_ERR_ARG, "%s: the optimizer updates %zu floats, model %s has %zu trainable ones", path,
                       dp_optimizer_num_params(opt), dp_model_name(model), dp_model_num_trainable(model));
    int num_params = dp_model_num_param_tensors(model), num_states = dp_optimizer_num_states(opt);
    /* First check every state tensor, then copy: a failure changes nothing. */
    int expected = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < num_states; s++) {
            const char *state_name;
            float *state = dp_optimizer_state(opt, s, &state_name);
            for (int i = 0; i < num_params; i++) {
                const dp_param_info_t *p = dp_model_param(model, i);
                if (!p->trainable) continue;
                char name[512];
                snprintf(name, sizeof name, OPTIMIZER_PREFIX "%s.%s", p->name, state_name);
                const dp_st_entry_t *e;
                DP_TRY(find_like(c, model, name, p, &e));
                if (pass == 1) dp_safetensors_copy(e, state + p->offset);
                else expected++;
            }
        }
        if (pass == 1) break;
        int found = 0;
        for (int i = 0; i < dp_safetensors_count(c->st); i++)
            found += strncmp(dp_safetensors_entry(c->st, i)->name, OPTIMIZER_PREFIX, strlen(OPTIMIZER_PREFIX)) == 0;
        if (found != expected)
            return dp_fail(DP_ERR_FORMAT, "%s: %d optimizer state tensors (states '%s'), the %s optimizer of "
                           "model %s has %d", path, found, c->states, dp_optim_kind_name(c->info.optim.kind),
                           dp_model_name(model), expected);
    }
    dp_optimizer_set_steps(opt, c->info.optimizer_steps);
    return DP_OK;
}
