/* nn.c - models as layer graphs: layer list, shape inference, parameter
 * table, initialisation, and forward on the tape. The built-in networks,
 * made with this file's builder API, are builtin_models.c's.
 *
 * Layers run in the order they were added; each reads the previous output,
 * except a route (which makes output `from` the next layer's input, like
 * Darknet's [route]) and a residual or a channel scaling (which also read
 * output `from`). So
 * the list is already a topological order and the tape records it as such.
 *
 * The flat buffer is laid out [trained parameters | frozen parameters |
 * buffers]: offsets are reassigned after every parameter added and by
 * dp_model_freeze (relayout), each part in table order. Without frozen
 * layers that is [all trainable parameters | all buffers]. The table keeps
 * the order layers added them (PyTorch's state_dict order within a layer:
 * weight, bias, running_mean, running_var). Which layers a freeze list
 * names is freeze.c's. The layers no backward reads (a pass without
 * gradients, a training pass's frozen prefix) may run through no_grad.c's
 * runner (dp_forward_opts_t.no_grad), the others on the caller's tape. */
#include "dptrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward_internal.h"
#include "model_file_internal.h" /* dp_model_set_source */

typedef enum {
    LAYER_CONV,
    LAYER_CONV_TRANSPOSE,
    LAYER_POOL,
    LAYER_ACTIVATION, /* relu, relu6, sigmoid, tanh, hardswish, hardsigmoid, gelu, silu */
    LAYER_FLATTEN,
    LAYER_LINEAR,
    LAYER_BATCH_NORM,
    LAYER_DROPOUT,
    LAYER_GLOBAL_AVG_POOL,
    LAYER_ROUTE,    /* no op: its output is output `input` */
    LAYER_RESIDUAL, /* add: output `input` + output `other` */
    LAYER_SCALE_CHANNELS, /* scale_channels: output `other` times output `input` (N, C, 1, 1) */
    LAYER_LAYER_NORM, /* layer_norm over the channels at every position */
    LAYER_LAYER_SCALE, /* scale_channels by the (C, 1, 1) parameter `weight`, shared by the batch */
    LAYER_DROP_PATH, /* drop_path (stochastic depth): as dropout, one draw per example */
    LAYER_CONCAT,   /* concat: output `other`'s channels, then output `input`'s */
} layer_kind_t;

typedef struct {
    layer_kind_t kind;
    dp_op_kind_t op;   /* the op the layer runs */
    dp_op_attr_t attr;
    int input;         /* the output it reads (0 = the model's input) */
    int other;         /* residual, scale_channels, concat: the second output it reads; -1 */
    int readers;       /* layers that read this layer's output */
    int weight, bias;  /* parameter indices, -1 if none */
    int running_mean, running_var; /* batch norm's buffers, -1 if none */
    int out_ndim;
    int out_shape[DP_MAX_DIMS]; /* without the batch dim: (C, H, W) or (F) */
    char label[64]; /* the profiler's name (layer_label) */
    int own_init;   /* 1: init and init_scale below, else the model's */
    dp_init_kind_t init;
    float init_scale;
    int needs_grad; /* its output carries a gradient in training (dp_model_output_needs_grad) */
} layer_t;

#define MAX_NAME 64

struct dp_model {
    char name[MAX_NAME];
    dp_init_kind_t init;
    float init_scale;
    int in_shape[3];
    layer_t *layers;
    int num_layers, layer_capacity;
    dp_param_info_t *params;
    char (*param_names)[MAX_NAME];
    int num_params, param_capacity;
    size_t total, trainable, frozen; /* floats: all, trained, frozen */
    char *source;       /* the model file's text (NUL-terminated), NULL when not built from one */
    size_t source_len;
    char *freeze_text;  /* dp_model_freeze's list, NULL: nothing frozen */
};

const char *const dp_builtin_models[] = {"lenet", "lenet-paddle", "resnet18", "alexnet", NULL};

dp_status_t dp_model_new(const char *name, int channels, int height, int width,
                         dp_init_kind_t init, float init_scale, dp_model_t **out) {
    *out = NULL;
    if (channels < 1 || height < 1 || width < 1)
        return dp_fail(DP_ERR_ARG, "model %s: input shape (%d, %d, %d) must be positive",
                       name, channels, height, width);
    dp_model_t *m = dp_alloc_zeroed(1, sizeof *m, "model");
    if (!m) return DP_ERR_NOMEM;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->init = init;
    m->init_scale = init_scale;
    m->in_shape[0] = channels;
    m->in_shape[1] = height;
    m->in_shape[2] = width;
    *out = m;
    return DP_OK;
}

void dp_model_free(dp_model_t *m) {
    if (!m) return;
    free(m->layers);
    free(m->params);
    free(m->param_names);
    free(m->source);
    free(m->freeze_text);
    free(m);
}

dp_status_t dp_model_check_classes(const dp_model_t *m, const char *name, int classes, const char *data,
                                   char *warning, size_t size) {
    int outputs = dp_model_num_outputs(m);
    int low = outputs < classes ? outputs : classes, high = (outputs < classes ? classes : outputs) - 1;
    char range[64]; /* after "label" or "output": " 9" or "s 3 to 9" */
    if (low == high) snprintf(range, sizeof range, " %d", low);
    else snprintf(range, sizeof range, "s %d to %d", low, high);
    if (size) warning[0] = '\0';
    if (outputs < classes)
        return dp_fail(DP_ERR_ARG, "model %s has %d outputs, fewer than the %s's %d classes: label%s %s no "
                       "output (give the model's last layer %d outputs)", name, outputs, data, classes, range,
                       low == high ? "has" : "have", classes);
    if (outputs > classes && size)
        snprintf(warning, size, "model %s has %d outputs, more than the %s's %d classes: output%s %s no class",
                 name, outputs, data, classes, range, low == high ? "is" : "are");
    return DP_OK;
}

dp_status_t dp_model_check_input(const dp_model_t *m, const char *name, const char *what, int c, int h, int w) {
    const int *in = m->in_shape;
    if (c == in[0] && h == in[1] && w == in[2]) return DP_OK;
    return dp_fail(DP_ERR_ARG, "%s samples are %d x %d x %d (C x H x W), model %s takes %d x %d x %d", what, c, h, w,
                   name, in[0], in[1], in[2]);
}

dp_status_t dp_model_set_source(dp_model_t *m, const char *text, size_t len) {
    char *copy = dp_alloc(len + 1, "model file text");
    if (!copy) return DP_ERR_NOMEM;
    memcpy(copy, text, len);
    copy[len] = '\0';
    free(m->source);
    m->source = copy;
    m->source_len = len;
    return DP_OK;
}

const char *dp_model_source(const dp_model_t *m, size_t *len) {
    if (len) *len = m->source ? m->source_len : 0;
    return m->source;
}

int dp_model_num_layers(const dp_model_t *m) { return m->num_layers; }

/* The shape of output i (0: the input), without the batch dim. */
static const int *output_shape(const dp_model_t *m, int output, int *ndim) {
    if (output == 0) {
        *ndim = 3;
        return m->in_shape;
    }
    const layer_t *l = &m->layers[output - 1];
    *ndim = l->out_ndim;
    return l->out_shape;
}

size_t dp_model_inference_bytes(const dp_model_t *m, int examples) {
    size_t floats = 0; /* per example: every output, the input included */
    for (int i = 0; i <= m->num_layers; i++) {
        int ndim;
        const int *s = output_shape(m, i, &ndim);
        size_t n = 1;
        for (int d = 0; d < ndim; d++) n *= (size_t)s[d];
        floats += n;
    }
    return 2 * sizeof(float) * (floats ? floats : 1) * (size_t)(examples > 0 ? examples : 0); /* x2: scratch */
}

int dp_model_inference_batch_cap(const dp_model_t *m, size_t bytes) {
    size_t cap = bytes / dp_model_inference_bytes(m, 1);
    return cap < 1 ? 1 : cap > INT32_MAX ? INT32_MAX : (int)cap;
}

int dp_model_output_shape(const dp_model_t *m, int output, int shape[DP_MAX_DIMS]) {
    if (output < 0 || output > m->num_layers) return -1;
    int ndim;
    const int *s = output_shape(m, output, &ndim);
    memcpy(shape, s, sizeof(int) * (size_t)ndim);
    return ndim;
}

/* The shape the last layer produces (without batch), or the input's. */
static const int *current_shape(const dp_model_t *m, int *ndim) {
    return output_shape(m, m->num_layers, ndim);
}

/* A new layer reading the previous output; committed by commit_layer once
 * its shape and parameters are in place. */
static layer_t *push_layer(dp_model_t *m, layer_kind_t kind, dp_op_kind_t op) {
    if (m->num_layers == m->layer_capacity) {
        int capacity = m->layer_capacity ? m->layer_capacity * 2 : 16;
        layer_t *layers = realloc(m->layers, sizeof *layers * (size_t)capacity);
        if (!layers) {
            dp_fail(DP_ERR_NOMEM, "out of memory adding a layer to model %s", m->name);
            return NULL;
        }
        m->layers = layers;
        m->layer_capacity = capacity;
    }
    layer_t *l = &m->layers[m->num_layers];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->op = op;
    l->attr = dp_op_attr_default();
    l->input = m->num_layers;
    l->other = -1;
    l->weight = l->bias = l->running_mean = l->running_var = -1;
    return l;
}

/* What the profile calls a layer: a layer with parameters by their
 * prefix ("conv1"), another by its kind and its rank among the model's
 * layers of that kind ("relu1", "avgpool2", "flatten1", "add3"). */
static void layer_label(const dp_model_t *m, layer_t *l) {
    if (l->weight >= 0) { /* "conv1.weight", "features.1.0.layer_scale": the prefix */
        const char *name = m->param_names[l->weight], *dot = strrchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : strlen(name);
        snprintf(l->label, sizeof l->label, "%.*s", (int)len, name);
        return;
    }
    const char *kind = l->kind == LAYER_POOL    ? (l->op == DP_OP_MAX_POOL ? "maxpool" : "avgpool")
                       : l->kind == LAYER_FLATTEN ? "flatten"
                       : l->kind == LAYER_DROPOUT ? "dropout"
                       : l->kind == LAYER_ROUTE   ? "route"
                       : l->kind == LAYER_RESIDUAL ? "add"
                       : l->kind == LAYER_SCALE_CHANNELS ? "scale_channels"
                       : l->kind == LAYER_LAYER_NORM ? "layernorm"
                       : l->kind == LAYER_CONCAT ? "concat"
                       : l->kind == LAYER_GLOBAL_AVG_POOL ? "global_avg_pool"
                                                   : dp_op_table[l->op].name; /* relu, relu6, sigmoid, ... */
    int rank = 1;
    for (int i = 0; i < m->num_layers; i++) {
        const layer_t *o = &m->layers[i];
        int same_op = (l->kind != LAYER_POOL && l->kind != LAYER_ACTIVATION) || o->op == l->op;
        rank += o->kind == l->kind && same_op;
    }
    snprintf(l->label, sizeof l->label, "%s%d", kind, rank);
}

/* Whether layer l has parameters that train; whether dp_model_freeze froze it. */
static int layer_trains(const dp_model_t *m, const layer_t *l) {
    return l->weight >= 0 && !m->params[l->weight].frozen;
}
static int layer_frozen(const dp_model_t *m, const layer_t *l) {
    return l->weight >= 0 && m->params[l->weight].frozen;
}

/* l->needs_grad from its own parameters and its inputs' (earlier layers:
 * marked first). */
static void mark_needs_grad(dp_model_t *m, layer_t *l) {
    int input = l->input > 0 && m->layers[l->input - 1].needs_grad;
    int other = l->other > 0 && m->layers[l->other - 1].needs_grad;
    l->needs_grad = layer_trains(m, l) || input || other;
}

static void commit_layer(dp_model_t *m, layer_t *l, int ndim, const int *shape) {
    layer_label(m, l);
    mark_needs_grad(m, l);
    l->out_ndim = ndim;
    memcpy(l->out_shape, shape, sizeof(int) * (size_t)ndim);
    if (l->input > 0) m->layers[l->input - 1].readers++;
    if (l->other > 0) m->layers[l->other - 1].readers++;
    m->num_layers++;
}

/* Offsets: every trained tensor in table order, then every frozen one,
 * then every buffer. */
static void relayout(dp_model_t *m) {
    size_t offset = 0;
    for (int pass = 0; pass < 3; pass++) { /* 0: trained, 1: frozen, 2: buffers */
        for (int i = 0; i < m->num_params; i++) {
            dp_param_info_t *p = &m->params[i];
            int part = !p->trainable ? 2 : p->frozen ? 1 : 0;
            if (part != pass) continue;
            p->offset = offset;
            offset += p->numel;
        }
        if (pass == 0) m->trainable = offset;
        if (pass == 1) m->frozen = offset - m->trainable;
    }
    m->total = offset;
}

static int add_param(dp_model_t *m, const char *layer, const char *suffix, int ndim,
                     const int *shape, int trainable) {
    if (m->num_params == m->param_capacity) {
        int capacity = m->param_capacity ? m->param_capacity * 2 : 16;
        dp_param_info_t *params = realloc(m->params, sizeof *params * (size_t)capacity);
        if (!params) goto nomem;
        m->params = params;
        char(*names)[MAX_NAME] = realloc(m->param_names, sizeof *names * (size_t)capacity);
        if (!names) goto nomem;
        m->param_names = names;
        m->param_capacity = capacity;
        for (int i = 0; i < m->num_params; i++) m->params[i].name = m->param_names[i];
    }
    int index = m->num_params++;
    dp_param_info_t *p = &m->params[index];
    snprintf(m->param_names[index], MAX_NAME, "%s.%s", layer, suffix);
    p->name = m->param_names[index];
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->trainable = trainable;
    p->frozen = 0;
    relayout(m);
    return index;
nomem:
    dp_fail(DP_ERR_NOMEM, "out of memory adding parameter %s.%s", layer, suffix);
    return -1;
}

/* Parameter `index` (the last added, named PREFIX.SUFFIX) moved before the
 * first parameter named PREFIX.<anything> (PyTorch's state_dict order: a
 * module's own parameters before its submodules'); the layers' indices
 * follow. Its new index. */
static int move_param_before_children(dp_model_t *m, int index, const char *prefix) {
    size_t len = strlen(prefix);
    int to = 0;
    while (to < index && !(strncmp(m->param_names[to], prefix, len) == 0 && m->param_names[to][len] == '.')) to++;
    if (to == index) return index;
    dp_param_info_t moved = m->params[index];
    char name[MAX_NAME];
    memcpy(name, m->param_names[index], MAX_NAME);
    memmove(&m->params[to + 1], &m->params[to], sizeof *m->params * (size_t)(index - to));
    memmove(&m->param_names[to + 1], &m->param_names[to], sizeof *m->param_names * (size_t)(index - to));
    m->params[to] = moved;
    memcpy(m->param_names[to], name, MAX_NAME);
    for (int i = 0; i < m->num_params; i++) m->params[i].name = m->param_names[i];
    for (int i = 0; i <= m->num_layers && i < m->layer_capacity; i++) { /* the committed layers and the one being added */
        int *refs[4] = {&m->layers[i].weight, &m->layers[i].bias, &m->layers[i].running_mean,
                        &m->layers[i].running_var};
        for (int k = 0; k < 4; k++)
            if (*refs[k] >= to && *refs[k] < index) (*refs[k])++;
    }
    relayout(m);
    return to;
}

/* The weight (shape wshape) and, if asked, a bias of `channels`. */
static dp_status_t add_weight_bias(dp_model_t *m, layer_t *l, const char *name, int ndim,
                                   const int *wshape, int bias, int channels) {
    l->weight = add_param(m, name, "weight", ndim, wshape, 1);
    if (l->weight < 0) return DP_ERR_NOMEM;
    if (bias) {
        l->bias = add_param(m, name, "bias", 1, &channels, 1);
        if (l->bias < 0) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

/* conv and conv_transpose: the checks both share. */
static dp_status_t check_conv_args(const dp_model_t *m, const char *name, const char *what,
                                   int in_channels, int ndim, int out_channels, int kernel_h,
                                   int kernel_w, const dp_op_attr_t *a) {
    if (ndim != 3)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: %s needs a (C, H, W) input, found %d dims",
                       m->name, name, what, ndim);
    if (out_channels < 1 || kernel_h < 1 || kernel_w < 1 || a->groups < 1)
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: channels, kernel and groups must be >= 1",
                       m->name, name);
    if (in_channels % a->groups || out_channels % a->groups)
        return dp_fail(DP_ERR_SHAPE,
                       "model %s: layer %s: groups %d must divide input channels %d and output channels %d",
                       m->name, name, a->groups, in_channels, out_channels);
    return DP_OK;
}

dp_status_t dp_model_add_conv(dp_model_t *m, const char *name, int out_channels,
                              int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                              int bias) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    dp_op_attr_t a = attr ? *attr : dp_op_attr_default();
    DP_TRY(check_conv_args(m, name, "conv", in[0], ndim, out_channels, kernel_h, kernel_w, &a));
    int kernel[2] = {kernel_h, kernel_w};
    int out[3] = {out_channels, 0, 0};
    for (int d = 0; d < 2; d++) {
        out[1 + d] = dp_conv_out_size(in[1 + d], kernel[d], a.stride[d], a.pad[d], a.dilation[d]);
        if (out[1 + d] < 1)
            return dp_fail(DP_ERR_SHAPE,
                           "model %s: layer %s: kernel %dx%d does not fit input %dx%d (padding %d, %d)",
                           m->name, name, kernel_h, kernel_w, in[1], in[2], a.pad[0], a.pad[1]);
    }
    int in_per_group = in[0] / a.groups;
    layer_t *l = push_layer(m, LAYER_CONV, DP_OP_CONV);
    if (!l) return DP_ERR_NOMEM;
    l->attr = a;
    int wshape[4] = {out_channels, in_per_group, kernel_h, kernel_w};
    DP_TRY(add_weight_bias(m, l, name, 4, wshape, bias, out_channels));
    commit_layer(m, l, 3, out);
    return DP_OK;
}

/* torch.nn.ConvTranspose2d: out = (in - 1) stride - 2 pad + dilation (k - 1)
 * + output_padding + 1; weight (C_in, C_out / groups, kH, kW). */
dp_status_t dp_model_add_conv_transpose(dp_model_t *m, const char *name, int out_channels,
                                        int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                                        int bias) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    dp_op_attr_t a = attr ? *attr : dp_op_attr_default();
    DP_TRY(check_conv_args(m, name, "conv_transpose", in[0], ndim, out_channels, kernel_h, kernel_w, &a));
    int kernel[2] = {kernel_h, kernel_w};
    int out[3] = {out_channels, 0, 0};
    for (int d = 0; d < 2; d++) {
        if (a.stride[d] < 1 || a.dilation[d] < 1 || a.pad[d] < 0 || a.output_padding[d] < 0 ||
            (a.output_padding[d] >= a.stride[d] && a.output_padding[d] >= a.dilation[d]))
            return dp_fail(DP_ERR_ARG,
                           "model %s: layer %s: conv_transpose needs stride, dilation >= 1, pad >= 0 and "
                           "0 <= output_padding < stride or dilation (found stride %d, dilation %d, pad %d, "
                           "output_padding %d)",
                           m->name, name, a.stride[d], a.dilation[d], a.pad[d], a.output_padding[d]);
        out[1 + d] = (in[1 + d] - 1) * a.stride[d] - 2 * a.pad[d] + a.dilation[d] * (kernel[d] - 1) +
                     a.output_padding[d] + 1;
        if (out[1 + d] < 1)
            return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: conv_transpose of input %dx%d gives no output "
                           "(padding %d, %d)", m->name, name, in[1], in[2], a.pad[0], a.pad[1]);
    }
    layer_t *l = push_layer(m, LAYER_CONV_TRANSPOSE, DP_OP_CONV_TRANSPOSE);
    if (!l) return DP_ERR_NOMEM;
    l->attr = a;
    int wshape[4] = {in[0], out_channels / a.groups, kernel_h, kernel_w};
    DP_TRY(add_weight_bias(m, l, name, 4, wshape, bias, out_channels));
    commit_layer(m, l, 3, out);
    return DP_OK;
}

dp_status_t dp_model_add_pool(dp_model_t *m, dp_op_kind_t kind, const dp_op_attr_t *attr) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    const char *what = kind == DP_OP_MAX_POOL ? "max pool" : "avg pool";
    if (kind != DP_OP_MAX_POOL && kind != DP_OP_AVG_POOL)
        return dp_fail(DP_ERR_ARG, "model %s: pooling must be max or avg", m->name);
    if (ndim != 3)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: %s needs a (C, H, W) input",
                       m->name, m->num_layers + 1, what);
    if (kind != DP_OP_MAX_POOL && attr->ceil_mode)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: ceil_mode is for max pooling only", m->name, m->num_layers + 1);
    int out[3] = {in[0], 0, 0};
    for (int d = 0; d < 2; d++) {
        out[1 + d] = dp_pool_out_size(in[1 + d], attr->kernel[d], attr->stride[d], attr->pad[d], 1, attr->ceil_mode);
        if (attr->kernel[d] < 1 || attr->stride[d] < 1 || out[1 + d] < 1)
            return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: %s window %dx%d does not fit input %dx%d",
                           m->name, m->num_layers + 1, what, attr->kernel[0], attr->kernel[1],
                           in[1], in[2]);
    }
    layer_t *l = push_layer(m, LAYER_POOL, kind);
    if (!l) return DP_ERR_NOMEM;
    l->attr = *attr;
    commit_layer(m, l, 3, out);
    return DP_OK;
}

/* A layer whose output has its input's shape. */
static dp_status_t add_same_shape(dp_model_t *m, layer_kind_t kind, dp_op_kind_t op, layer_t **out) {
    int ndim, shape[DP_MAX_DIMS];
    memcpy(shape, current_shape(m, &ndim), sizeof shape);
    layer_t *l = push_layer(m, kind, op);
    if (!l) return DP_ERR_NOMEM;
    commit_layer(m, l, ndim, shape);
    if (out) *out = l;
    return DP_OK;
}

dp_status_t dp_model_add_relu(dp_model_t *m) {
    return add_same_shape(m, LAYER_ACTIVATION, DP_OP_RELU, NULL);
}

dp_status_t dp_model_add_activation(dp_model_t *m, dp_op_kind_t kind) {
    if (kind != DP_OP_RELU && kind != DP_OP_RELU6 && kind != DP_OP_SIGMOID && kind != DP_OP_TANH &&
        kind != DP_OP_HARDSWISH && kind != DP_OP_HARDSIGMOID && kind != DP_OP_GELU && kind != DP_OP_SILU)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: an activation must be relu, relu6, sigmoid, tanh, "
                       "hardswish, hardsigmoid, gelu or silu, found op %d", m->name, m->num_layers + 1, (int)kind);
    return add_same_shape(m, LAYER_ACTIVATION, kind, NULL);
}

dp_status_t dp_model_set_layer_init(dp_model_t *m, dp_init_kind_t init, float init_scale) {
    layer_t *l = m->num_layers > 0 ? &m->layers[m->num_layers - 1] : NULL;
    if (!l || l->weight < 0 || l->kind == LAYER_BATCH_NORM || l->kind == LAYER_LAYER_NORM)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: only a conv, conv_transpose or linear layer has an "
                       "initialisation of its own", m->name, m->num_layers);
    if (init != DP_INIT_NORMAL && init != DP_INIT_TORCH_DEFAULT && init != DP_INIT_KAIMING_FAN_OUT &&
        init != DP_INIT_UNIFORM_FAN_OUT && init != DP_INIT_KAIMING_FAN_OUT_TORCH_BIAS && init != DP_INIT_KAIMING_FAN_IN &&
        init != DP_INIT_TORCH_ZERO_BIAS && init != DP_INIT_KAIMING_UNIFORM)
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: unknown initialisation %d", m->name, l->label, (int)init);
    l->own_init = 1;
    l->init = init;
    l->init_scale = init_scale;
    return DP_OK;
}

dp_status_t dp_model_add_dropout(dp_model_t *m, float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: dropout probability must be in [0, 1), found %g",
                       m->name, m->num_layers + 1, p);
    layer_t *l;
    DP_TRY(add_same_shape(m, LAYER_DROPOUT, DP_OP_DROPOUT, &l));
    l->attr.dropout_p = p;
    return DP_OK;
}

dp_status_t dp_model_add_drop_path(dp_model_t *m, float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: drop path probability must be in [0, 1), found %g",
                       m->name, m->num_layers + 1, p);
    layer_t *l;
    DP_TRY(add_same_shape(m, LAYER_DROP_PATH, DP_OP_DROP_PATH, &l));
    l->attr.dropout_p = p;
    return DP_OK;
}

dp_status_t dp_model_add_flatten(dp_model_t *m) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    int features = 1;
    for (int i = 0; i < ndim; i++) features *= in[i];
    layer_t *l = push_layer(m, LAYER_FLATTEN, DP_OP_FLATTEN);
    if (!l) return DP_ERR_NOMEM;
    commit_layer(m, l, 1, &features);
    return DP_OK;
}

dp_status_t dp_model_add_global_avg_pool(dp_model_t *m) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    if (ndim != 3)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: global avg pool needs a (C, H, W) input, found %d dims",
                       m->name, m->num_layers + 1, ndim);
    int out[3] = {in[0], 1, 1};
    layer_t *l = push_layer(m, LAYER_GLOBAL_AVG_POOL, DP_OP_GLOBAL_AVG_POOL);
    if (!l) return DP_ERR_NOMEM;
    commit_layer(m, l, 3, out);
    return DP_OK;
}

dp_status_t dp_model_add_linear(dp_model_t *m, const char *name, int out_features, int bias) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    if (ndim != 1)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: linear needs a flat input (add a flatten layer)",
                       m->name, name);
    if (out_features < 1)
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: output features must be >= 1", m->name, name);
    int in_features = in[0];
    layer_t *l = push_layer(m, LAYER_LINEAR, DP_OP_LINEAR);
    if (!l) return DP_ERR_NOMEM;
    int wshape[2] = {out_features, in_features};
    DP_TRY(add_weight_bias(m, l, name, 2, wshape, bias, out_features));
    commit_layer(m, l, 1, &out_features);
    return DP_OK;
}

dp_status_t dp_model_add_batch_norm(dp_model_t *m, const char *name, const dp_op_attr_t *attr) {
    int ndim, shape[DP_MAX_DIMS];
    memcpy(shape, current_shape(m, &ndim), sizeof shape);
    if (ndim != 3 && ndim != 1)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: batch norm needs a (C, H, W) or (F) input, found %d dims",
                       m->name, name, ndim);
    dp_op_attr_t a = attr ? *attr : dp_op_attr_default();
    if (!(a.eps > 0.0f) || !(a.momentum >= 0.0f && a.momentum <= 1.0f))
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: batch norm needs eps > 0 and momentum in [0, 1], "
                       "found eps %g, momentum %g", m->name, name, a.eps, a.momentum);
    layer_t *l = push_layer(m, LAYER_BATCH_NORM, DP_OP_BATCH_NORM);
    if (!l) return DP_ERR_NOMEM;
    l->attr.eps = a.eps;
    l->attr.momentum = a.momentum;
    int channels = shape[0];
    DP_TRY(add_weight_bias(m, l, name, 1, &channels, 1, channels));
    l->running_mean = add_param(m, name, "running_mean", 1, &channels, 0);
    if (l->running_mean < 0) return DP_ERR_NOMEM;
    l->running_var = add_param(m, name, "running_var", 1, &channels, 0);
    if (l->running_var < 0) return DP_ERR_NOMEM;
    commit_layer(m, l, ndim, shape);
    return DP_OK;
}

dp_status_t dp_model_add_layer_norm(dp_model_t *m, const char *name, float eps) {
    int ndim, shape[DP_MAX_DIMS];
    memcpy(shape, current_shape(m, &ndim), sizeof shape);
    if (ndim != 3 && ndim != 1)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: layer norm needs a (C, H, W) or (F) input, found %d dims",
                       m->name, name, ndim);
    if (!(eps > 0.0f) || isinf(eps))
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: layer norm needs a finite eps > 0, found %g", m->name, name,
                       (double)eps);
    layer_t *l = push_layer(m, LAYER_LAYER_NORM, DP_OP_LAYER_NORM);
    if (!l) return DP_ERR_NOMEM;
    l->attr.eps = eps;
    int channels = shape[0];
    DP_TRY(add_weight_bias(m, l, name, 1, &channels, 1, channels));
    commit_layer(m, l, ndim, shape);
    return DP_OK;
}

dp_status_t dp_model_set_conv_weight_2d(dp_model_t *m) {
    layer_t *l = m->num_layers > 0 ? &m->layers[m->num_layers - 1] : NULL;
    if (!l || l->kind != LAYER_CONV)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: only a convolution's weight can be stored as a linear "
                       "layer's", m->name, m->num_layers);
    dp_param_info_t *w = &m->params[l->weight];
    if (w->ndim != 4 || w->shape[2] != 1 || w->shape[3] != 1 || l->attr.groups != 1 || l->attr.stride[0] != 1 ||
        l->attr.stride[1] != 1 || l->attr.pad[0] != 0 || l->attr.pad[1] != 0)
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: a weight stored as a linear layer's needs a 1x1 convolution "
                       "with stride 1, no padding and no groups", m->name, l->label);
    w->ndim = 2; /* (OUT, IN): the op's view gets its 1 x 1 back (dp_model_forward_layers) */
    return DP_OK;
}

dp_status_t dp_model_add_layer_scale(dp_model_t *m, const char *name, float init) {
    int ndim, shape[DP_MAX_DIMS];
    memcpy(shape, current_shape(m, &ndim), sizeof shape);
    if (ndim != 3 && ndim != 1)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: a layer scale needs a (C, H, W) or (F) input, found %d dims",
                       m->name, name, ndim);
    if (!isfinite(init))
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: a layer scale's initial value must be finite", m->name, name);
    layer_t *l = push_layer(m, LAYER_LAYER_SCALE, DP_OP_SCALE_CHANNELS);
    if (!l) return DP_ERR_NOMEM;
    int scale_shape[3] = {shape[0], 1, 1};
    l->weight = add_param(m, name, "layer_scale", ndim, scale_shape, 1);
    if (l->weight < 0) return DP_ERR_NOMEM;
    l->weight = move_param_before_children(m, l->weight, name); /* torchvision's order: before NAME.block.* */
    l->init_scale = init;
    commit_layer(m, l, ndim, shape);
    return DP_OK;
}

dp_status_t dp_model_add_route(dp_model_t *m, int from) {
    if (from < 0 || from > m->num_layers)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: route from output %d, expected 0 to %d",
                       m->name, m->num_layers + 1, from, m->num_layers);
    int ndim, shape[DP_MAX_DIMS];
    memcpy(shape, output_shape(m, from, &ndim), sizeof shape);
    layer_t *l = push_layer(m, LAYER_ROUTE, DP_OP_COUNT);
    if (!l) return DP_ERR_NOMEM;
    l->input = from;
    commit_layer(m, l, ndim, shape);
    return DP_OK;
}

/* Writes "(64, 14, 14)". */
static const char *shape_str(int ndim, const int *shape, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %d" : "%d", shape[i]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

/* A layer that also reads output `from`: an earlier one. */
static dp_status_t check_from(const dp_model_t *m, int from, const char *what) {
    if (from < 0 || from >= m->num_layers)
        return dp_fail(DP_ERR_ARG, "model %s: layer %d: %s from output %d, expected 0 to %d", m->name,
                       m->num_layers + 1, what, from, m->num_layers - 1);
    return DP_OK;
}

dp_status_t dp_model_add_residual(dp_model_t *m, int from, int relu) {
    int last = m->num_layers;
    DP_TRY(check_from(m, from, "residual"));
    int ndim, from_ndim;
    const int *shape = output_shape(m, last, &ndim), *from_shape = output_shape(m, from, &from_ndim);
    if (ndim != from_ndim || memcmp(shape, from_shape, sizeof(int) * (size_t)ndim) != 0) {
        char a[96], b[96];
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: residual adds output %d %s to output %d %s: "
                       "the shapes must be equal", m->name, last + 1, last, shape_str(ndim, shape, a, sizeof a),
                       from, shape_str(from_ndim, from_shape, b, sizeof b));
    }
    int copy[DP_MAX_DIMS];
    memcpy(copy, shape, sizeof(int) * (size_t)ndim);
    layer_t *l = push_layer(m, LAYER_RESIDUAL, DP_OP_ADD);
    if (!l) return DP_ERR_NOMEM;
    l->other = from;
    l->attr.fuse_relu = relu != 0;
    commit_layer(m, l, ndim, copy);
    return DP_OK;
}

dp_status_t dp_model_add_scale_channels(dp_model_t *m, int from) {
    int last = m->num_layers;
    DP_TRY(check_from(m, from, "scale_channels"));
    int ndim, from_ndim;
    const int *scale = output_shape(m, last, &ndim), *x = output_shape(m, from, &from_ndim);
    int fits = from_ndim >= 2 && ndim == from_ndim && scale[0] == x[0];
    for (int d = 1; fits && d < ndim; d++) fits = scale[d] == 1;
    if (!fits) {
        char a[96], b[96];
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: scale_channels multiplies output %d %s by output %d %s: "
                       "expected a scale of (%d, 1, 1) for it", m->name, last + 1, from,
                       shape_str(from_ndim, x, a, sizeof a), last, shape_str(ndim, scale, b, sizeof b),
                       from_ndim >= 1 ? x[0] : 0);
    }
    int copy[DP_MAX_DIMS];
    memcpy(copy, x, sizeof(int) * (size_t)from_ndim);
    layer_t *l = push_layer(m, LAYER_SCALE_CHANNELS, DP_OP_SCALE_CHANNELS);
    if (!l) return DP_ERR_NOMEM;
    l->other = from;
    commit_layer(m, l, from_ndim, copy);
    return DP_OK;
}

dp_status_t dp_model_add_concat(dp_model_t *m, int from) {
    int last = m->num_layers;
    DP_TRY(check_from(m, from, "concat"));
    int ndim, from_ndim;
    const int *b = output_shape(m, last, &ndim), *a = output_shape(m, from, &from_ndim);
    int fits = from_ndim >= 1 && ndim == from_ndim;
    for (int d = 1; fits && d < ndim; d++) fits = a[d] == b[d];
    if (!fits) {
        char as[96], bs[96];
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: concat joins output %d %s and output %d %s: "
                       "they must differ in their channels alone", m->name, last + 1, from,
                       shape_str(from_ndim, a, as, sizeof as), last, shape_str(ndim, b, bs, sizeof bs));
    }
    int shape[DP_MAX_DIMS];
    memcpy(shape, a, sizeof(int) * (size_t)from_ndim);
    shape[0] = a[0] + b[0];
    layer_t *l = push_layer(m, LAYER_CONCAT, DP_OP_CONCAT);
    if (!l) return DP_ERR_NOMEM;
    l->other = from;
    commit_layer(m, l, from_ndim, shape);
    return DP_OK;
}

const char *dp_model_name(const dp_model_t *m) { return m->name; }
size_t dp_model_num_params(const dp_model_t *m) { return m->total; }
size_t dp_model_num_trainable(const dp_model_t *m) { return m->trainable; }
size_t dp_model_num_frozen(const dp_model_t *m) { return m->frozen; }
const char *dp_model_frozen(const dp_model_t *m) { return m->freeze_text ? m->freeze_text : ""; }

dp_status_t dp_model_freeze(dp_model_t *m, const char *layers) {
    unsigned char *mask = dp_alloc_zeroed((size_t)m->num_params + 1, 1, "frozen parameters");
    if (!mask) return DP_ERR_NOMEM;
    char *text = NULL;
    dp_status_t status = dp_model_freeze_mask(m, layers, mask);
    if (status == DP_OK && layers && *layers) {
        text = dp_alloc(strlen(layers) + 1, "freeze list");
        if (text) memcpy(text, layers, strlen(layers) + 1);
        else status = DP_ERR_NOMEM;
    }
    if (status == DP_OK) {
        for (int i = 0; i < m->num_params; i++) m->params[i].frozen = mask[i];
        free(m->freeze_text);
        m->freeze_text = text;
        relayout(m);
        for (int i = 0; i < m->num_layers; i++) mark_needs_grad(m, &m->layers[i]); /* in layer order */
    }
    free(mask);
    return status;
}

int dp_model_frozen_prefix(const dp_model_t *m) {
    int p = 0;
    while (p < m->num_layers && !m->layers[p].needs_grad) p++;
    return p;
}

int dp_model_output_needs_grad(const dp_model_t *m, int output) {
    return output > 0 && output <= m->num_layers && m->layers[output - 1].needs_grad;
}
int dp_model_num_param_tensors(const dp_model_t *m) { return m->num_params; }

const dp_param_info_t *dp_model_param(const dp_model_t *m, int i) {
    DP_ASSERT(i >= 0 && i < m->num_params);
    return &m->params[i];
}

void dp_model_input_shape(const dp_model_t *m, int *channels, int *height, int *width) {
    *channels = m->in_shape[0];
    *height = m->in_shape[1];
    *width = m->in_shape[2];
}

int dp_model_num_outputs(const dp_model_t *m) {
    int ndim;
    const int *shape = current_shape(m, &ndim);
    return ndim == 1 ? shape[0] : 0;
}

static void fill(float *params, const dp_param_info_t *p, float value) {
    for (size_t k = 0; k < p->numel; k++) params[p->offset + k] = value;
}

void dp_model_init_params(const dp_model_t *m, float *params, dp_rng_t *rng) {
    for (int i = 0; i < m->num_layers; i++) {
        const layer_t *l = &m->layers[i];
        if (l->kind == LAYER_BATCH_NORM) { /* torch.nn.BatchNorm: weight 1, bias 0, mean 0, var 1 */
            fill(params, &m->params[l->weight], 1.0f);
            fill(params, &m->params[l->bias], 0.0f);
            fill(params, &m->params[l->running_mean], 0.0f);
            fill(params, &m->params[l->running_var], 1.0f);
            continue;
        }
        if (l->kind == LAYER_LAYER_SCALE) { /* torchvision's ConvNeXt: torch.ones(C, 1, 1) * layer_scale */
            fill(params, &m->params[l->weight], l->init_scale);
            continue;
        }
        if (l->kind == LAYER_LAYER_NORM) { /* torch.nn.LayerNorm: weight 1, bias 0 */
            fill(params, &m->params[l->weight], 1.0f);
            fill(params, &m->params[l->bias], 0.0f);
            continue;
        }
        if (l->weight < 0) continue;
        const dp_param_info_t *w = &m->params[l->weight];
        /* fan_in: input features of one output unit (C/groups * kH * kW, or IN;
         * conv_transpose: C_out/groups * kH * kW, as PyTorch computes it);
         * fan_out: shape[0] x the kernel's size (PyTorch's, without groups) */
        size_t fan_in = w->numel / (size_t)w->shape[0];
        size_t fan_out = w->ndim > 2 ? (size_t)w->shape[0] * (w->numel / ((size_t)w->shape[0] * w->shape[1]))
                                     : (size_t)w->shape[0];
        dp_init_kind_t init = l->own_init ? l->init : m->init;
        double scale = l->own_init ? l->init_scale : m->init_scale;
        if (init == DP_INIT_NORMAL || init == DP_INIT_KAIMING_FAN_OUT || init == DP_INIT_KAIMING_FAN_OUT_TORCH_BIAS ||
            init == DP_INIT_KAIMING_FAN_IN) { /* normal weights */
            if (init == DP_INIT_KAIMING_FAN_IN) scale = sqrt(2.0 / (double)fan_in); /* gain sqrt(2) / sqrt(fan_in) */
            else if (init != DP_INIT_NORMAL) scale = sqrt(2.0 / (double)fan_out); /* gain sqrt(2) / sqrt(fan_out) */
            for (size_t k = 0; k < w->numel; k++)
                params[w->offset + k] = (float)(scale * dp_rng_normal(rng));
            if (l->bias >= 0 && init == DP_INIT_KAIMING_FAN_OUT_TORCH_BIAS) {
                const dp_param_info_t *b = &m->params[l->bias];
                double bound = 1.0 / sqrt((double)fan_in);
                for (size_t k = 0; k < b->numel; k++)
                    params[b->offset + k] = (float)((2.0 * dp_rng_uniform(rng) - 1.0) * bound);
            } else if (l->bias >= 0) {
                fill(params, &m->params[l->bias], 0.0f);
            }
        } else if (init == DP_INIT_UNIFORM_FAN_OUT || init == DP_INIT_KAIMING_UNIFORM) {
            /* torchvision's EfficientNet: uniform_(-r, r), r = 1/sqrt(out); SqueezeNet:
             * kaiming_uniform_'s r = gain sqrt(3 / fan_in) = sqrt(6 / fan_in) */
            double bound = init == DP_INIT_KAIMING_UNIFORM ? sqrt(6.0 / (double)fan_in)
                                                           : 1.0 / sqrt((double)fan_out);
            for (size_t k = 0; k < w->numel; k++)
                params[w->offset + k] = (float)((2.0 * dp_rng_uniform(rng) - 1.0) * bound);
            if (l->bias >= 0) fill(params, &m->params[l->bias], 0.0f);
        } else {
            double bound = 1.0 / sqrt((double)fan_in);
            for (size_t k = 0; k < w->numel; k++)
                params[w->offset + k] = (float)((2.0 * dp_rng_uniform(rng) - 1.0) * bound);
            if (l->bias >= 0 && init == DP_INIT_TORCH_ZERO_BIAS) {
                fill(params, &m->params[l->bias], 0.0f);
            } else if (l->bias >= 0) {
                const dp_param_info_t *b = &m->params[l->bias];
                for (size_t k = 0; k < b->numel; k++)
                    params[b->offset + k] = (float)((2.0 * dp_rng_uniform(rng) - 1.0) * bound);
            }
        }
    }
}

static dp_tensor_t *param_view(const dp_model_t *m, dp_tape_t *tape, int index, float *params,
                               float *grads) {
    const dp_param_info_t *p = &m->params[index];
    dp_tensor_t *t = dp_tape_tensor(tape, p->ndim, p->shape);
    if (!t) return NULL;
    t->data = params + p->offset;
    t->grad = grads && p->trainable && !p->frozen ? grads + p->offset : NULL;
    return t;
}

dp_status_t dp_model_forward(const dp_model_t *m, dp_tape_t *tape, float *params,
                             float *grads, dp_tensor_t *x, dp_tensor_t **logits) {
    dp_forward_opts_t opts = {.training = grads != NULL};
    return dp_model_forward_opts(m, tape, params, grads, x, &opts, logits);
}

/* Output tensors of models up to this many layers live on the stack. */
#define STACK_OUTPUTS 256

/* A conv or batch norm followed by a ReLU, or a batch norm followed by a
 * ReLU6 (`relu6`: the op takes DP_FUSE_RELU6), runs as one op (ops.h:
 * fuse_relu), unless another layer also reads its output before the
 * activation: the activation layer is skipped (*i moves past it) and its
 * output buffer and gradient are never made. */
static void fuse_next_relu(const dp_model_t *m, dp_tape_t *tape, int *i, int to, int relu6, dp_op_attr_t *attr,
                           dp_tensor_t **outs) {
    const layer_t *l = &m->layers[*i];
    if (*i + 1 >= to || m->layers[*i + 1].kind != LAYER_ACTIVATION || l->readers != 1) return;
    const dp_op_kind_t op = m->layers[*i + 1].op;
    int fuse = op == DP_OP_RELU ? DP_FUSE_RELU : op == DP_OP_RELU6 && relu6 ? DP_FUSE_RELU6 : 0;
    if (!fuse) return;
    attr->fuse_relu = fuse;
    dp_tape_set_label(tape, l->label, m->layers[*i + 1].label);
    ++*i;
    outs[*i] = NULL; /* never read: readers == 1 */
}

/* A residual may write its sum over one of its inputs (ops.h: in_place),
 * as torchvision's `out += identity` over bn3's output, when that input
 * (output `over`; the other is output `other`) is the output of a batch
 * norm that nothing else reads and that is not fused with a ReLU (whose
 * backward would read it): batch norm's backward reads its input and
 * statistics, never its output. */
static int residual_in_place(const dp_model_t *m, int over, int other) {
    if (over < 1 || over == other) return 0;
    const layer_t *p = &m->layers[over - 1];
    return p->kind == LAYER_BATCH_NORM && p->readers == 1;
}

/* Layers [from, to) in order (forward_internal.h). */
dp_status_t dp_model_forward_layers(const dp_model_t *m, dp_tape_t *tape, float *params, float *grads,
                                    const dp_forward_opts_t *opts, dp_tensor_t **outs, int from, int to,
                                    dp_layer_hook_t *hook) {
    for (int i = from; i < to; i++) {
        const int first = i; /* the layer whose op runs; i moves past a fused ReLU */
        const layer_t *l = &m->layers[i];
        dp_tensor_t *h = outs[l->input], *w = NULL, *b = NULL;
        if (l->kind == LAYER_ROUTE || ((l->kind == LAYER_DROPOUT || l->kind == LAYER_DROP_PATH) && !opts->training)) {
            outs[i + 1] = h; /* no op: an alias (dropout and drop path are the identity in inference) */
            continue;
        }
        if (l->weight >= 0 && !(w = param_view(m, tape, l->weight, params, grads))) return DP_ERR_NOMEM;
        if (l->bias >= 0 && !(b = param_view(m, tape, l->bias, params, grads))) return DP_ERR_NOMEM;
        dp_op_attr_t attr = l->attr;
        dp_tensor_t *second = w;
        dp_tape_set_label(tape, l->label, NULL);
        switch (l->kind) {
        case LAYER_BATCH_NORM:
            fuse_next_relu(m, tape, &i, to, 1, &attr, outs);
            attr.training = opts->training && !layer_frozen(m, l); /* frozen: the running statistics */
            attr.running_mean = params + m->params[l->running_mean].offset;
            attr.running_var = params + m->params[l->running_var].offset;
            attr.stat_sync = opts->stat_sync;
            break;
        case LAYER_DROPOUT:
        case LAYER_DROP_PATH:
            attr.training = 1;
            attr.dropout_seed = dp_seed_mix(opts->seed, (uint64_t)i);
            attr.example_offset = opts->example_offset;
            break;
        case LAYER_RESIDUAL:
            second = outs[l->other];
            if (residual_in_place(m, l->input, l->other)) {
                attr.in_place = 1;
            } else if (residual_in_place(m, l->other, l->input)) { /* over the other: x + z = z + x, bit for bit */
                attr.in_place = 1;
                second = h;
                h = outs[l->other];
            }
            break;
        case LAYER_CONV: /* a weight stored 2-D (dp_model_set_conv_weight_2d): the op's (OUT, IN, 1, 1) */
            if (w->ndim == 2) {
                w->ndim = 4;
                w->shape[2] = w->shape[3] = 1;
            }
            fuse_next_relu(m, tape, &i, to, 0, &attr, outs);
            break;
        case LAYER_LAYER_SCALE: /* the (C, 1, 1) parameter as a (1, C, 1, 1) scale of the batch */
            w->ndim = l->out_ndim + 1;
            w->shape[0] = 1;
            w->shape[1] = l->out_shape[0];
            for (int d = 2; d < w->ndim; d++) w->shape[d] = 1;
            break;
        case LAYER_SCALE_CHANNELS: /* x is output `other`, its scale the previous output */
        case LAYER_CONCAT:         /* output `other`'s channels first */
            second = h;
            h = outs[l->other];
            break;
        default:
            break;
        }
        if (hook) DP_TRY(hook->before(hook, first, i));
        h = dp_tape_op(tape, l->op, &attr, h, second, b, NULL);
        if (!h) {
            char message[1024];
            snprintf(message, sizeof message, "%s", dp_error_message());
            dp_status_t failed = dp_error_status() != DP_OK ? dp_error_status() : DP_ERR_SHAPE;
            return dp_fail(failed, "model %s: layer %d (%s): %s", m->name, i + 1,
                           dp_op_table[l->op].name, message);
        }
        outs[i + 1] = h;
        if (hook) DP_TRY(hook->after(hook, first, i, outs));
    }
    return DP_OK;
}

dp_status_t dp_model_forward_opts(const dp_model_t *m, dp_tape_t *tape, float *params,
                                  float *grads, dp_tensor_t *x, const dp_forward_opts_t *opts,
                                  dp_tensor_t **logits) {
    dp_forward_opts_t defaults = {.training = grads != NULL};
    if (!opts) opts = &defaults;
    dp_tensor_t *stack[STACK_OUTPUTS + 1], **outs = stack;
    if (m->num_layers > STACK_OUTPUTS) {
        outs = dp_alloc(sizeof *outs * ((size_t)m->num_layers + 1), "layer outputs");
        if (!outs) return DP_ERR_NOMEM;
    }
    outs[0] = x;
    /* the layers no backward reads: with gradients the frozen prefix, without every layer */
    int prefix = !opts->no_grad ? 0 : grads ? dp_model_frozen_prefix(m) : m->num_layers;
    dp_status_t status = DP_OK;
    if (prefix > 0) status = dp_no_grad_forward(opts->no_grad, m, prefix, tape, params, opts, outs); /* no_grad.c */
    if (status == DP_OK)
        status = dp_model_forward_layers(m, tape, params, grads, opts, outs, prefix, m->num_layers, NULL);
    *logits = status == DP_OK ? outs[m->num_layers] : NULL;
    if (outs != stack) free(outs);
    return status;
}

/* --- Reading the layers ------------------------------------------------------ */

_Static_assert((int)LAYER_CONCAT == (int)DP_LAYER_CONCAT && (int)LAYER_CONV == (int)DP_LAYER_CONV,
               "layer_kind_t and dp_layer_kind_t list the same kinds in the same order");

dp_status_t dp_model_layer(const dp_model_t *m, int layer, dp_layer_info_t *out) {
    if (layer < 1 || layer > m->num_layers)
        return dp_fail(DP_ERR_ARG, "model %s: no layer %d (it has %d)", m->name, layer, m->num_layers);
    const layer_t *l = &m->layers[layer - 1];
    memset(out, 0, sizeof *out);
    out->kind = (dp_layer_kind_t)l->kind;
    out->op = l->op;
    out->attr = l->attr;
    out->input = l->input;
    out->other = l->other;
    out->weight = l->weight;
    out->bias = l->bias;
    out->running_mean = l->running_mean;
    out->running_var = l->running_var;
    out->out_ndim = l->out_ndim;
    memcpy(out->out_shape, l->out_shape, sizeof out->out_shape);
    return DP_OK;
}
