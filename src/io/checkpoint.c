/* checkpoint.c - dptrain's checkpoints (checkpoint.h) on top of the
 * safetensors writer and reader (safetensors.c): the parameter table under
 * its names and the optimizer state as "optimizer.<param>.<state>", each
 * checked against the model on loading; the metadata keys are
 * checkpoint_meta.c's.
 */
#include "dptrain/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "dptrain/model_file.h"
#include "../core/hash.h"

/* --- dptrain checkpoints ------------------------------------------------------------- */

uint64_t dp_model_fingerprint(const dp_model_t *model) {
    uint64_t h = DP_FNV1A_SEED;
    for (int i = 0; i < dp_model_num_param_tensors(model); i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        h = dp_fnv1a(h, p->name, strlen(p->name) + 1);
        unsigned char bytes[1 + 4 * DP_MAX_DIMS + 1], *b = bytes; /* ndim, each dim little-endian, trainable */
        *b++ = (unsigned char)p->ndim;
        for (int d = 0; d < p->ndim; d++)
            for (int k = 0; k < 4; k++) *b++ = (unsigned char)((uint32_t)p->shape[d] >> (8 * k));
        *b++ = p->trainable ? 1 : 0;
        h = dp_fnv1a(h, bytes, (size_t)(b - bytes));
    }
    return h;
}

/* Whether the optimizer holds state for p: a trainable parameter not frozen
 * (nn.h: dp_model_freeze; frozen ones lie beyond the optimizer's floats). */
static int trains(const dp_param_info_t *p) { return p->trainable && !p->frozen; }

static void param_tensor(const dp_param_info_t *p, const float *data, const char *name, dp_st_tensor_t *t) {
    t->name = name;
    t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
    t->data = data;
}

/* Refuses what would make a file that cannot be loaded back. */
static dp_status_t check_save(const char *path, const dp_model_t *model, const float *params, const dp_optimizer_t *opt,
                              const dp_checkpoint_info_t *info) {
    if (!path || !*path) return dp_fail(DP_ERR_ARG, "checkpoint: no path given (%s)", path ? "\"\"" : "NULL");
    if (!model || !params || !info)
        return dp_fail(DP_ERR_ARG, "%s: no %s given (NULL)", path, !model ? "model" : !params ? "parameters" : "info");
    if (opt && dp_optimizer_kind(opt) != info->optim.kind)
        return dp_fail(DP_ERR_ARG, "%s: the checkpoint info says optimizer '%s', the optimizer saved is '%s'",
                       path, dp_optim_kind_name(info->optim.kind), dp_optim_kind_name(dp_optimizer_kind(opt)));
    if (opt && dp_optimizer_num_params(opt) < dp_model_num_trainable(model))
        return dp_fail(DP_ERR_ARG, "%s: the optimizer updates %zu floats, model %s has %zu trainable ones", path,
                       dp_optimizer_num_params(opt), dp_model_name(model), dp_model_num_trainable(model));
    /* what dp_checkpoint_open refuses is not written: a file no reader takes */
    if (dp_optim_config_check(&info->optim) != DP_OK) return dp_checkpoint_fail_in(DP_ERR_ARG, path, "optimizer");
    if (dp_lr_schedule_check(&info->schedule) != DP_OK) return dp_checkpoint_fail_in(DP_ERR_ARG, path, "lr_schedule");
    if (info->steps_per_epoch < 1)
        return dp_fail(DP_ERR_ARG, "%s: lr_schedule.steps_per_epoch must be >= 1, found 0", path);
    const struct { const char *key, *text; } lines[] = {
        {"model", info->model}, {"dptrain_version", info->dptrain_version}, {"data.normalize", info->normalize},
        {"data.augment", info->augment}, {DP_CHECKPOINT_FREEZE_KEY, info->freeze},
        {DP_CHECKPOINT_DATA_DIR_KEY, info->data_dir},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        for (const unsigned char *b = (const unsigned char *)lines[i].text; *b; b++)
            if (*b < 0x20 || *b == 0x7f)
                return dp_fail(DP_ERR_ARG, "%s: %s \"%s\" holds a control character: a checkpoint holds one line "
                               "there", path, lines[i].key, dp_json_show(lines[i].text).text);
        if (!dp_utf8_valid(lines[i].text, strlen(lines[i].text))) /* the writer's \udcXX, which no reader takes */
            return dp_fail(DP_ERR_ARG, "%s: %s \"%s\" is not UTF-8 (a name in another encoding?): a checkpoint "
                           "holds UTF-8 text there", path, lines[i].key, dp_json_show(lines[i].text).text);
    }
    if (info->num_class_names < 0 || (info->num_class_names > 0 && !info->class_names))
        return dp_fail(DP_ERR_ARG, "%s: %d class names given without names", path, info->num_class_names);
    if (dp_checkpoint_check_class_names(info->class_names, info->num_class_names) != DP_OK)
        return dp_checkpoint_fail_in(DP_ERR_ARG, path, "data.classes");
    if (dp_checkpoint_check_conv_algos(info->conv_algorithms, info->num_conv_algorithms) != DP_OK)
        return dp_checkpoint_fail_in(DP_ERR_ARG, path, DP_CHECKPOINT_CONV_ALGOS_KEY);
    if (info->model_ema_steps < 0 || (info->model_ema_steps > 0) != (info->model_ema != NULL) ||
        !(info->model_ema_steps == 0 || (info->model_ema_decay >= 0.0 && info->model_ema_decay <= 1.0)))
        return dp_fail(DP_ERR_ARG, "%s: a moving average of %d steps, decay %g, %s its floats: expected steps >= 1 "
                       "with the floats and a decay in [0, 1], or 0 without them", path, info->model_ema_steps,
                       info->model_ema_decay, info->model_ema ? "with" : "without");
    return DP_OK;
}

dp_status_t dp_checkpoint_save(const char *path, const dp_model_t *model, const float *params,
                               dp_optimizer_t *opt, const dp_checkpoint_info_t *info) {
    DP_TRY(check_save(path, model, params, opt, info));
    int num_params = dp_model_num_param_tensors(model), num_trainable = 0;
    for (int i = 0; i < num_params; i++) num_trainable += trains(dp_model_param(model, i));
    int num_states = opt ? dp_optimizer_num_states(opt) : 0;
    const int ema = info->model_ema != NULL;
    int count = num_params + num_states * num_trainable + (ema ? num_params : 0);
    dp_st_tensor_t *tensors = dp_alloc_zeroed((size_t)count + 1, sizeof *tensors, "checkpoint tensors");
    char **names = dp_alloc_zeroed((size_t)count + 1, sizeof *names, "checkpoint names");
    char states[256] = ""; /* the optimizer's state names, comma-separated */
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
        states_used += (size_t)snprintf(states + states_used, sizeof states - states_used, s ? ",%s" : "%s",
                                        state_name);
        for (int i = 0; i < num_params && status == DP_OK; i++) {
            const dp_param_info_t *p = dp_model_param(model, i);
            if (!trains(p)) continue;
            size_t size = strlen(DP_CHECKPOINT_OPTIMIZER_PREFIX) + strlen(p->name) + strlen(state_name) + 2;
            names[t] = dp_alloc(size, "checkpoint tensor name");
            if (!names[t]) {
                status = DP_ERR_NOMEM;
                break;
            }
            snprintf(names[t], size, DP_CHECKPOINT_OPTIMIZER_PREFIX "%s.%s", p->name, state_name);
            param_tensor(p, state + p->offset, names[t], &tensors[t]);
            t++;
        }
    }
    for (int i = 0; ema && i < num_params && status == DP_OK; i++) { /* the moving average: ema.NAME */
        const dp_param_info_t *p = dp_model_param(model, i);
        size_t size = strlen(DP_CHECKPOINT_EMA_PREFIX) + strlen(p->name) + 1;
        if (!(names[t] = dp_alloc(size, "checkpoint tensor name"))) {
            status = DP_ERR_NOMEM;
            break;
        }
        snprintf(names[t], size, DP_CHECKPOINT_EMA_PREFIX "%s", p->name);
        param_tensor(p, info->model_ema + p->offset, names[t], &tensors[t]);
        t++;
    }
    if (status == DP_OK) {
        dp_checkpoint_meta_t meta;
        status = dp_checkpoint_meta_fill(&meta, model, info, opt ? dp_optimizer_steps(opt) : info->optimizer_steps,
                                         states);
        if (status == DP_OK) status = dp_safetensors_write(path, tensors, t, meta.entries, meta.count);
        dp_checkpoint_meta_free(&meta);
    }
    for (int i = 0; names && i < count; i++) free(names[i]);
    free(names);
    free(tensors);
    return status;
}

dp_status_t dp_checkpoint_open(const char *path, dp_checkpoint_t **out) {
    *out = NULL;
    if (!path) return dp_fail(DP_ERR_ARG, "checkpoint: no path given (NULL)");
    dp_checkpoint_t *c = dp_alloc_zeroed(1, sizeof *c, "checkpoint");
    if (!c) return DP_ERR_NOMEM;
    dp_status_t status = dp_safetensors_read(path, &c->st);
    if (status == DP_OK) status = dp_checkpoint_parse_meta(c);
    if (status != DP_OK) {
        dp_checkpoint_close(c);
        return status;
    }
    *out = c;
    return DP_OK;
}

void dp_checkpoint_close(dp_checkpoint_t *c) {
    if (!c) return;
    dp_checkpoint_free_class_names(&c->info);
    dp_checkpoint_free_conv_algos(&c->info);
    dp_safetensors_free(c->st);
    free(c);
}

const dp_checkpoint_info_t *dp_checkpoint_info(const dp_checkpoint_t *c) { return &c->info; }

dp_status_t dp_checkpoint_load_model(const dp_checkpoint_t *c, const char *name_or_path, dp_model_t **out) {
    if (name_or_path) return dp_model_load(name_or_path, out);
    if (!c->info.model_text) return dp_model_load(c->info.model, out);
    dp_status_t status = dp_model_parse(c->info.model_text, strlen(c->info.model_text), c->info.model, out);
    if (status != DP_OK) /* a text that parsed when it was saved */
        return dp_checkpoint_fail_in(status, dp_safetensors_path(c->st), "its model file text (model_text)");
    return DP_OK;
}
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
        if (dp_checkpoint_state_tensor(name)) continue;
        int known = 0;
        for (int j = 0; j < num_params && !known; j++) known = strcmp(dp_model_param(model, j)->name, name) == 0;
        if (!known)
            return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' is not a parameter of model %s (the checkpoint is of "
                           "model %s)", path, dp_json_show(name).text, dp_model_name(model), c->info.model);
    }
    if (c->has_fingerprint && c->fingerprint != dp_model_fingerprint(model))
        return dp_fail(DP_ERR_FORMAT, "%s: model_fingerprint %016" PRIx64 " differs from model %s's %016" PRIx64
                       " (same tensors, but another order or other trainable flags)", path, c->fingerprint,
                       dp_model_name(model), dp_model_fingerprint(model));
    for (int i = 0; i < num_params; i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        dp_safetensors_copy(dp_safetensors_find(c->st, p->name), params + p->offset);
    }
    return DP_OK;
}

dp_status_t dp_checkpoint_load_ema(const dp_checkpoint_t *c, const dp_model_t *model, float *params) {
    const char *path = dp_safetensors_path(c->st);
    if (c->info.model_ema_steps == 0)
        return dp_fail(DP_ERR_ARG, "%s: no moving average of the model in this checkpoint (its run had no "
                       "--model-ema)", path);
    int num_params = dp_model_num_param_tensors(model);
    char name[300];
    for (int pass = 0; pass < 2; pass++) /* every tensor checked, then copied: a failure changes nothing */
        for (int i = 0; i < num_params; i++) {
            const dp_param_info_t *p = dp_model_param(model, i);
            snprintf(name, sizeof name, DP_CHECKPOINT_EMA_PREFIX "%s", p->name);
            const dp_st_entry_t *e;
            if (pass == 0) DP_TRY(find_like(c, model, name, p, &e));
            else dp_safetensors_copy(dp_safetensors_find(c->st, name), params + p->offset);
        }
    return DP_OK;
}

dp_status_t dp_checkpoint_load_optimizer(const dp_checkpoint_t *c, const dp_model_t *model,
                                         dp_optimizer_t *opt) {
    const char *path = dp_safetensors_path(c->st);
    if (c->info.weights_only)
        return dp_fail(DP_ERR_ARG, "%s: a weights-only checkpoint (parameters and batch-norm statistics, e.g. "
                       "from tools/import_torchvision.py): it has no optimizer state or training position to "
                       "resume; start a new run from its weights instead", path);
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
                if (!trains(p)) continue;
                char name[512];
                snprintf(name, sizeof name, DP_CHECKPOINT_OPTIMIZER_PREFIX "%s.%s", p->name, state_name);
                const dp_st_entry_t *e;
                DP_TRY(find_like(c, model, name, p, &e));
                if (pass == 1) dp_safetensors_copy(e, state + p->offset);
                else expected++;
            }
        }
        if (pass == 1) break;
        int found = 0;
        for (int i = 0; i < dp_safetensors_count(c->st); i++)
            found += strncmp(dp_safetensors_entry(c->st, i)->name, DP_CHECKPOINT_OPTIMIZER_PREFIX, strlen(DP_CHECKPOINT_OPTIMIZER_PREFIX)) == 0;
        if (found != expected)
            return dp_fail(DP_ERR_FORMAT, "%s: %d optimizer state tensors (states '%s'), the %s optimizer of "
                           "model %s has %d", path, found, c->states, dp_optim_kind_name(c->info.optim.kind),
                           dp_model_name(model), expected);
    }
    dp_optimizer_set_steps(opt, c->info.optimizer_steps);
    return DP_OK;
}
