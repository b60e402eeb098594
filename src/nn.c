/* nn.c - sequential models: layer list, shape inference, parameter table,
 * initialisation, forward on the tape, and the built-in networks. */
#include "dptrain/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { LAYER_CONV, LAYER_POOL, LAYER_RELU, LAYER_FLATTEN, LAYER_LINEAR } layer_kind_t;

typedef struct {
    layer_kind_t kind;
    dp_op_kind_t op;   /* the op the layer runs */
    dp_op_attr_t attr;
    int weight, bias;  /* parameter indices, -1 if none */
    int out_ndim;
    int out_shape[DP_MAX_DIMS]; /* without the batch dim: (C, H, W) or (F) */
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
    size_t total;
};

const char *const dp_builtin_models[] = {"lenet", "lenet-paddle", NULL};

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
    free(m);
}

/* The shape the last layer produces (without batch), or the input's. */
static const int *current_shape(const dp_model_t *m, int *ndim) {
    if (m->num_layers == 0) {
        *ndim = 3;
        return m->in_shape;
    }
    const layer_t *last = &m->layers[m->num_layers - 1];
    *ndim = last->out_ndim;
    return last->out_shape;
}

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
    l->weight = l->bias = -1;
    return l;
}

static int add_param(dp_model_t *m, const char *layer, const char *suffix, int ndim,
                     const int *shape) {
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
    p->offset = m->total;
    p->trainable = 1;
    m->total += p->numel;
    return index;
nomem:
    dp_fail(DP_ERR_NOMEM, "out of memory adding parameter %s.%s", layer, suffix);
    return -1;
}

dp_status_t dp_model_add_conv(dp_model_t *m, const char *name, int out_channels,
                              int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                              int bias) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    if (ndim != 3)
        return dp_fail(DP_ERR_SHAPE, "model %s: layer %s: conv needs a (C, H, W) input, found %d dims",
                       m->name, name, ndim);
    dp_op_attr_t a = attr ? *attr : dp_op_attr_default();
    if (out_channels < 1 || kernel_h < 1 || kernel_w < 1 || a.groups < 1)
        return dp_fail(DP_ERR_ARG, "model %s: layer %s: channels, kernel and groups must be >= 1",
                       m->name, name);
    if (in[0] % a.groups || out_channels % a.groups)
        return dp_fail(DP_ERR_SHAPE,
                       "model %s: layer %s: groups %d must divide input channels %d and output channels %d",
                       m->name, name, a.groups, in[0], out_channels);
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
    l->weight = add_param(m, name, "weight", 4, wshape);
    if (l->weight < 0) return DP_ERR_NOMEM;
    if (bias) {
        l->bias = add_param(m, name, "bias", 1, &out_channels);
        if (l->bias < 0) return DP_ERR_NOMEM;
    }
    l->out_ndim = 3;
    memcpy(l->out_shape, out, sizeof out);
    m->num_layers++;
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
    int out[3] = {in[0], 0, 0};
    for (int d = 0; d < 2; d++) {
        out[1 + d] = dp_conv_out_size(in[1 + d], attr->kernel[d], attr->stride[d], attr->pad[d], 1);
        if (attr->kernel[d] < 1 || attr->stride[d] < 1 || out[1 + d] < 1)
            return dp_fail(DP_ERR_SHAPE, "model %s: layer %d: %s window %dx%d does not fit input %dx%d",
                           m->name, m->num_layers + 1, what, attr->kernel[0], attr->kernel[1],
                           in[1], in[2]);
    }
    layer_t *l = push_layer(m, LAYER_POOL, kind);
    if (!l) return DP_ERR_NOMEM;
    l->attr = *attr;
    l->out_ndim = 3;
    memcpy(l->out_shape, out, sizeof out);
    m->num_layers++;
    return DP_OK;
}

dp_status_t dp_model_add_relu(dp_model_t *m) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    int shape[DP_MAX_DIMS];
    memcpy(shape, in, sizeof(int) * (size_t)ndim);
    layer_t *l = push_layer(m, LAYER_RELU, DP_OP_RELU);
    if (!l) return DP_ERR_NOMEM;
    l->out_ndim = ndim;
    memcpy(l->out_shape, shape, sizeof(int) * (size_t)ndim);
    m->num_layers++;
    return DP_OK;
}

dp_status_t dp_model_add_flatten(dp_model_t *m) {
    int ndim;
    const int *in = current_shape(m, &ndim);
    int features = 1;
    for (int i = 0; i < ndim; i++) features *= in[i];
    layer_t *l = push_layer(m, LAYER_FLATTEN, DP_OP_FLATTEN);
    if (!l) return DP_ERR_NOMEM;
    l->out_ndim = 1;
    l->out_shape[0] = features;
    m->num_layers++;
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
    l->weight = add_param(m, name, "weight", 2, wshape);
    if (l->weight < 0) return DP_ERR_NOMEM;
    if (bias) {
        l->bias = add_param(m, name, "bias", 1, &out_features);
        if (l->bias < 0) return DP_ERR_NOMEM;
    }
    l->out_ndim = 1;
    l->out_shape[0] = out_features;
    m->num_layers++;
    return DP_OK;
}

const char *dp_model_name(const dp_model_t *m) { return m->name; }
size_t dp_model_num_params(const dp_model_t *m) { return m->total; }
size_t dp_model_num_trainable(const dp_model_t *m) { return m->total; }
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

void dp_model_init_params(const dp_model_t *m, float *params, dp_rng_t *rng) {
    for (int i = 0; i < m->num_layers; i++) {
        const layer_t *l = &m->layers[i];
        if (l->weight < 0) continue;
        const dp_param_info_t *w = &m->params[l->weight];
        /* fan_in: input features of one output unit (C/groups * kH * kW, or IN) */
        size_t fan_in = w->numel / (size_t)w->shape[0];
        if (m->init == DP_INIT_NORMAL) {
            for (size_t k = 0; k < w->numel; k++)
                params[w->offset + k] = (float)(m->init_scale * dp_rng_normal(rng));
            if (l->bias >= 0) {
                const dp_param_info_t *b = &m->params[l->bias];
                memset(params + b->offset, 0, sizeof(float) * b->numel);
            }
        } else {
            double bound = 1.0 / sqrt((double)fan_in);
            for (size_t k = 0; k < w->numel; k++)
                params[w->offset + k] = (float)((2.0 * dp_rng_uniform(rng) - 1.0) * bound);
            if (l->bias >= 0) {
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
    t->grad = grads ? grads + p->offset : NULL;
    return t;
}

dp_status_t dp_model_forward(const dp_model_t *m, dp_tape_t *tape, float *params,
                             float *grads, dp_tensor_t *x, dp_tensor_t **logits) {
    dp_tensor_t *h = x;
    for (int i = 0; i < m->num_layers; i++) {
        const layer_t *l = &m->layers[i];
        dp_tensor_t *w = NULL, *b = NULL;
        if (l->weight >= 0 && !(w = param_view(m, tape, l->weight, params, grads)))
            return DP_ERR_NOMEM;
        if (l->bias >= 0 && !(b = param_view(m, tape, l->bias, params, grads)))
            return DP_ERR_NOMEM;
        dp_op_attr_t attr = l->attr;
        /* A conv followed by a ReLU runs as one op (ops.h: fuse_relu). */
        if (l->kind == LAYER_CONV && i + 1 < m->num_layers && m->layers[i + 1].kind == LAYER_RELU) {
            attr.fuse_relu = 1;
            i++;
        }
        h = dp_tape_op(tape, l->op, &attr, h, w, b, NULL);
        if (!h) return DP_ERR_SHAPE;
    }
    *logits = h;
    return DP_OK;
}

/* --- Built-in networks ----------------------------------------------------- */

static dp_op_attr_t pool_attr(int kernel, int stride, int pad) {
    dp_op_attr_t a = dp_op_attr_default();
    a.kernel[0] = a.kernel[1] = kernel;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    return a;
}

/* d2l 12.5: conv 3x3 -> 20, ReLU, avg-pool 2/2, conv 5x5 -> 50, ReLU,
 * avg-pool 2/2, flatten, linear 800 -> 128, ReLU, linear 128 -> 10;
 * weights ~ N(0, 0.01^2), biases 0. */
static dp_status_t build_lenet(dp_model_t *m) {
    dp_op_attr_t pool = pool_attr(2, 2, 0);
    DP_TRY(dp_model_add_conv(m, "conv1", 20, 3, 3, NULL, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_AVG_POOL, &pool));
    DP_TRY(dp_model_add_conv(m, "conv2", 50, 5, 5, NULL, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_AVG_POOL, &pool));
    DP_TRY(dp_model_add_flatten(m));
    DP_TRY(dp_model_add_linear(m, "fc1", 128, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_linear(m, "fc2", 10, 1));
    return DP_OK;
}

/* PaddlePaddle's MNIST tutorial: conv 5x5 -> 20 pad 2, ReLU, max-pool 2/2,
 * conv 5x5 -> 20 pad 2, ReLU, max-pool 2/2, linear 980 -> 10; PyTorch's
 * default initialisation. */
static dp_status_t build_lenet_paddle(dp_model_t *m) {
    dp_op_attr_t conv = dp_op_attr_default();
    conv.pad[0] = conv.pad[1] = 2;
    dp_op_attr_t pool = pool_attr(2, 2, 0);
    DP_TRY(dp_model_add_conv(m, "conv1", 20, 5, 5, &conv, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_MAX_POOL, &pool));
    DP_TRY(dp_model_add_conv(m, "conv2", 20, 5, 5, &conv, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_MAX_POOL, &pool));
    DP_TRY(dp_model_add_flatten(m));
    DP_TRY(dp_model_add_linear(m, "fc", 10, 1));
    return DP_OK;
}

dp_status_t dp_model_builtin(const char *name, dp_model_t **out) {
    dp_status_t (*build)(dp_model_t *) = NULL;
    dp_init_kind_t init = DP_INIT_TORCH_DEFAULT;
    if (strcmp(name, "lenet") == 0) {
        build = build_lenet;
        init = DP_INIT_NORMAL;
    } else if (strcmp(name, "lenet-paddle") == 0) {
        build = build_lenet_paddle;
    } else {
        *out = NULL;
        return dp_fail(DP_ERR_ARG, "unknown model '%s' (built-in models: lenet, lenet-paddle)", name);
    }
    DP_TRY(dp_model_new(name, 1, 28, 28, init, 0.01f, out));
    dp_status_t status = build(*out);
    if (status != DP_OK) {
        dp_model_free(*out);
        *out = NULL;
    }
    return status;
}

/* --- Placeholders for the issue-5 layers (being written) ---------------------- */
int dp_model_num_layers(const dp_model_t *m) { return m->num_layers; }
int dp_model_output_shape(const dp_model_t *m, int output, int shape[DP_MAX_DIMS]) {
    const int *s = output == 0 ? m->in_shape : m->layers[output - 1].out_shape;
    int ndim = output == 0 ? 3 : m->layers[output - 1].out_ndim;
    memcpy(shape, s, sizeof(int) * (size_t)ndim);
    return ndim;
}
static dp_status_t not_yet(const dp_model_t *m, const char *what) {
    return dp_fail(DP_ERR_ARG, "model %s: %s layers are not implemented yet", m->name, what);
}
dp_status_t dp_model_add_conv_transpose(dp_model_t *m, const char *name, int out_channels,
                                        int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                                        int bias) {
    (void)name; (void)out_channels; (void)kernel_h; (void)kernel_w; (void)attr; (void)bias;
    return not_yet(m, "conv_transpose");
}
dp_status_t dp_model_add_batch_norm(dp_model_t *m, const char *name, const dp_op_attr_t *attr) {
    (void)name; (void)attr;
    return not_yet(m, "batch_norm");
}
dp_status_t dp_model_add_dropout(dp_model_t *m, float p) { (void)p; return not_yet(m, "dropout"); }
dp_status_t dp_model_add_activation(dp_model_t *m, dp_op_kind_t kind) {
    if (kind == DP_OP_RELU) return dp_model_add_relu(m);
    return not_yet(m, "sigmoid/tanh");
}
dp_status_t dp_model_add_global_avg_pool(dp_model_t *m) { return not_yet(m, "global_avg_pool"); }
dp_status_t dp_model_add_route(dp_model_t *m, int from) { (void)from; return not_yet(m, "route"); }
dp_status_t dp_model_add_residual(dp_model_t *m, int from, int relu) {
    (void)from; (void)relu;
    return not_yet(m, "residual");
}
dp_status_t dp_model_forward_opts(const dp_model_t *m, dp_tape_t *tape, float *params,
                                  float *grads, dp_tensor_t *x, const dp_forward_opts_t *opts,
                                  dp_tensor_t **logits) {
    (void)opts;
    return dp_model_forward(m, tape, params, grads, x, logits);
}
