/* checkpoint_init.c - a new run from a checkpoint's weights
 * (checkpoint.h: dp_checkpoint_load_init, `dptrain train --init`): every
 * parameter and buffer by name, except a head with another output count
 * (or any head, asked: --fresh-head), which keeps the model's own
 * initialisation. Everything is checked before
 * anything is copied, so a refused file leaves the parameters as they were.
 */
#include <stdio.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "dptrain/checkpoint.h"
#include "dptrain/json.h"


/* "(5, 84)" of a model parameter's shape. */
static void model_shape_str(const dp_param_info_t *p, char *buf, size_t size) {
    int64_t shape[DP_ST_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    dp_st_shape_str(buf, size, p->ndim, shape);
}

static int same_shape(const dp_st_entry_t *e, const dp_param_info_t *p) {
    int same = e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
    return same;
}

/* The model's head's (dp_model_head_layer: the last linear layer, or the
 * last conv without one) weight and bias parameter indices (-1 when none). */
static void find_head(const dp_model_t *m, int *weight, int *bias) {
    dp_layer_info_t l;
    *weight = *bias = -1;
    if (dp_model_layer(m, dp_model_head_layer(m), &l) == DP_OK) *weight = l.weight, *bias = l.bias;
}

/* Whether the file's head has another output count over the same inputs:
 * its weight (file_out, in, kernel...) against the model's (out, in,
 * kernel...), and its bias (file_out) where the model has one. */
static int head_differs(const dp_safetensors_t *st, const dp_model_t *m, int weight, int bias, int *file_out) {
    if (weight < 0) return 0;
    const dp_param_info_t *w = dp_model_param(m, weight);
    const dp_st_entry_t *fw = dp_safetensors_find(st, w->name);
    if (!fw || fw->ndim != w->ndim || fw->shape[0] == w->shape[0] || fw->shape[0] < 1 || fw->shape[0] > (1 << 30))
        return 0;
    for (int d = 1; d < w->ndim; d++)
        if (fw->shape[d] != w->shape[d]) return 0;
    if (bias >= 0) {
        const dp_st_entry_t *fb = dp_safetensors_find(st, dp_model_param(m, bias)->name);
        if (!fb || fb->ndim != 1 || fb->shape[0] != fw->shape[0]) return 0;
    }
    *file_out = (int)fw->shape[0];
    return 1;
}

dp_status_t dp_checkpoint_load_init(const dp_checkpoint_t *c, const dp_model_t *model, float *params,
                                    int fresh_head, dp_checkpoint_init_t *out) {
    const dp_safetensors_t *st = dp_checkpoint_tensors(c);
    const char *path = dp_safetensors_path(st), *saved_model = dp_checkpoint_info(c)->model;
    memset(out, 0, sizeof *out);
    int head_weight, head_bias, file_outputs = 0;
    find_head(model, &head_weight, &head_bias);
    int fresh = head_differs(st, model, head_weight, head_bias, &file_outputs);
    if (fresh_head && !fresh && head_weight < 0)
        return dp_fail(DP_ERR_ARG, "--init %s: a fresh head asked, and model %s has no linear or conv layer (the "
                       "head is its last linear layer, or its last conv without one)", path, dp_model_name(model));
    const int asked = fresh_head && !fresh;
    if (asked) {
        fresh = 1;
        const dp_st_entry_t *fw = dp_safetensors_find(st, dp_model_param(model, head_weight)->name);
        file_outputs = fw && fw->ndim >= 2 ? (int)fw->shape[0] : 0; /* 0: the file has no such layer */
    }
    int count = dp_model_num_param_tensors(model);
    for (int i = 0; i < count; i++) { /* every tensor of the model, in the file, of its shape */
        const dp_param_info_t *p = dp_model_param(model, i);
        if (fresh && (i == head_weight || i == head_bias)) continue;
        const dp_st_entry_t *e = dp_safetensors_find(st, p->name);
        if (!e)
            return dp_fail(DP_ERR_FORMAT, "--init %s: has no tensor '%s', which model %s needs (the checkpoint is "
                           "of model %s)", path, p->name, dp_model_name(model), saved_model);
        if (!same_shape(e, p)) {
            char found[200], expected[200];
            dp_st_shape_str(found, sizeof found, e->ndim, e->shape);
            model_shape_str(p, expected, sizeof expected);
            return dp_fail(DP_ERR_FORMAT, "--init %s: tensor '%s' has shape %s, model %s's has shape %s (the "
                           "checkpoint is of model %s; only the head, the last linear layer (or conv without "
                           "one), may have another output count)",
                           path, p->name, found, dp_model_name(model), expected, saved_model);
        }
    }
    for (int i = 0; i < dp_safetensors_count(st); i++) { /* and nothing else but the training state */
        const char *name = dp_safetensors_entry(st, i)->name;
        if (dp_checkpoint_state_tensor(name)) continue;
        int known = 0;
        for (int j = 0; j < count && !known; j++) known = strcmp(dp_model_param(model, j)->name, name) == 0;
        if (!known)
            return dp_fail(DP_ERR_FORMAT, "--init %s: tensor '%s' is not a parameter of model %s (the checkpoint "
                           "is of model %s)", path, dp_json_show(name).text, dp_model_name(model), saved_model);
    }
    for (int i = 0; i < count; i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        if (fresh && (i == head_weight || i == head_bias)) continue;
        dp_safetensors_copy(dp_safetensors_find(st, p->name), params + p->offset);
    }
    if (fresh) {
        const char *name = dp_model_param(model, head_weight)->name;
        snprintf(out->fresh_head, sizeof out->fresh_head, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
        out->model_outputs = dp_model_param(model, head_weight)->shape[0];
        out->file_outputs = file_outputs;
        out->asked = asked;
    }
    return DP_OK;
}
