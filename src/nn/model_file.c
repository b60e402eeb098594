/* model_file.c - the model-file reader: text -> blocks of key = value
 * entries -> a dp_model_t built through nn.h's builder API; this file is
 * pass 2 (blocks into layers) and the entry points, model_file_syntax.c
 * pass 1 (text into blocks).
 *
 * Two passes. dp_model_file_split_blocks() cuts a private copy of the text into lines,
 * checks every byte and line length, and groups `key = value` lines under
 * their `[type]` header, rejecting unknown types, unknown and duplicate keys
 * as it goes. build_model() then walks the blocks in order, reads and checks
 * each value, resolves route/residual targets (a relative -k or a label of an
 * earlier block) and calls the builder, prefixing the builder's message with
 * FILE:LINE when a layer does not fit. Every error is one line,
 * "FILE:LINE: problem"; user text quoted in a message is shortened and made
 * printable. The grammar is documented in docs/model-format.md.
 */
#include "dptrain/model_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_file_internal.h"

typedef dp_status_t (*build_fn_t)(parser_t *p, int index);

static dp_status_t build_conv(parser_t *p, int index);
static dp_status_t build_pool(parser_t *p, int index);
static dp_status_t build_global_avgpool(parser_t *p, int index);
static dp_status_t build_batchnorm(parser_t *p, int index);
static dp_status_t build_dropout(parser_t *p, int index);
static dp_status_t build_activation(parser_t *p, int index);
static dp_status_t build_flatten(parser_t *p, int index);
static dp_status_t build_linear(parser_t *p, int index);
static dp_status_t build_route(parser_t *p, int index);
static dp_status_t build_residual(parser_t *p, int index);
static dp_status_t build_scale_channels(parser_t *p, int index);
static dp_status_t build_layernorm(parser_t *p, int index);
static dp_status_t build_layer_scale(parser_t *p, int index);
static dp_status_t build_drop_path(parser_t *p, int index);
static dp_status_t build_concat(parser_t *p, int index);

/* The builder of each block type, in dp_model_file_block_types' order
 * (NULL for [net]). */
static const build_fn_t builders[] = {
    NULL,            /* net */
    build_conv,      /* conv */
    build_conv,      /* conv_transpose */
    build_pool,      /* maxpool */
    build_pool,      /* avgpool */
    build_global_avgpool, /* global_avgpool */
    build_batchnorm, /* batchnorm */
    build_dropout,   /* dropout */
    build_activation, /* relu */
    build_activation, /* relu6 */
    build_activation, /* sigmoid */
    build_activation, /* tanh */
    build_flatten,   /* flatten */
    build_linear,    /* linear */
    build_route,     /* route */
    build_residual,  /* residual */
    build_activation, /* hardswish */
    build_activation, /* hardsigmoid */
    build_scale_channels, /* scale_channels */
    build_activation, /* gelu */
    build_layernorm, /* layernorm */
    build_layer_scale, /* layer_scale */
    build_activation, /* silu */
    build_drop_path, /* drop_path */
    build_concat,    /* concat */
};
_Static_assert(sizeof builders / sizeof builders[0] == DP_MODEL_FILE_NUM_BLOCK_TYPES,
               "one builder per block type");

static int has_params(int type) {
    return dp_model_file_in_word_list("conv conv_transpose batchnorm linear layernorm layer_scale", dp_model_file_block_types[type].name);
}



/* A builder call failed: its message, prefixed with where the layer is. */
static dp_status_t builder_failed(const parser_t *p, const block_t *b, dp_status_t status) {
    char message[768];
    snprintf(message, sizeof message, "%s", dp_error_message());
    return dp_fail(status, "%s:%d: [%s] %s", p->file, b->line, dp_model_file_block_types[b->type].name, message);
}

#define BUILD(p, b, call)                                                      \
    do {                                                                       \
        dp_status_t build_status_ = (call);                                    \
        if (build_status_ != DP_OK) return builder_failed(p, b, build_status_); \
    } while (0)


/* --- Values ---------------------------------------------------------------------- */

static dp_status_t parse_int(const parser_t *p, const entry_t *e, long lo, long hi, int *out) {
    const char *s = e->value;
    int negative = *s == '-';
    if (*s == '-' || *s == '+') s++;
    if (*s < '0' || *s > '9')
        return dp_model_file_fail_at(p, e->line, "%s = %s is not an integer", e->key,
                                     dp_model_file_show(e->value).text);
    long long v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (v <= 1000000000000LL) v = 10 * v + (*s - '0'); /* larger is out of range anyway */
    if (*s)
        return dp_model_file_fail_at(p, e->line, "%s = %s is not an integer", e->key,
                                     dp_model_file_show(e->value).text);
    if (negative) v = -v;
    if (v < lo || v > hi)
        return dp_model_file_fail_at(p, e->line, "%s = %s is out of range (expected %ld to %ld)", e->key,
                                     dp_model_file_show(e->value).text, lo, hi);
    *out = (int)v;
    return DP_OK;
}

/* A float in [lo, hi], or [lo, hi) when hi_open. */
static dp_status_t parse_float(const parser_t *p, const entry_t *e, double lo, double hi, int hi_open,
                               float *out) {
    const char *s = e->value;
    char *end;
    double v = 0.0;
    int plain = strspn(s, "0123456789+-.eE") == strlen(s);
    if (plain) v = strtod(s, &end);
    if (!plain || end == s || *end)
        return dp_model_file_fail_at(p, e->line, "%s = %s is not a number", e->key, dp_model_file_show(e->value).text);
    if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
        return dp_model_file_fail_at(p, e->line, "%s = %s is out of range (expected %g to %g%s)", e->key,
                                     dp_model_file_show(e->value).text, lo, hi, hi_open ? ", exclusive" : "");
    *out = (float)v;
    return DP_OK;
}

/* An integer key that may be absent (then `fallback`). */
static dp_status_t get_int(const parser_t *p, const block_t *b, const char *key, int fallback, long lo,
                           long hi, int *out) {
    const entry_t *e = dp_model_file_find_entry(b, key);
    if (!e) {
        *out = fallback;
        return DP_OK;
    }
    return parse_int(p, e, lo, hi, out);
}

static dp_status_t get_float(const parser_t *p, const block_t *b, const char *key, float fallback, double lo,
                             double hi, int hi_open, float *out) {
    const entry_t *e = dp_model_file_find_entry(b, key);
    if (!e) {
        *out = fallback;
        return DP_OK;
    }
    return parse_float(p, e, lo, hi, hi_open, out);
}

static dp_status_t get_flag(const parser_t *p, const block_t *b, const char *key, int fallback, int *out) {
    const entry_t *e = dp_model_file_find_entry(b, key);
    *out = fallback;
    if (!e) return DP_OK;
    if (strcmp(e->value, "0") != 0 && strcmp(e->value, "1") != 0)
        return dp_model_file_fail_at(p, e->line, "%s = %s: expected 0 or 1", key, dp_model_file_show(e->value).text);
    *out = e->value[0] == '1';
    return DP_OK;
}

/* A spatial pair: `key` for both dims, or key_h and key_w. */
static dp_status_t get_pair(const parser_t *p, const block_t *b, const char *key, int required,
                            const int fallback[2], long lo, long hi, int out[2]) {
    char key_h[32], key_w[32];
    snprintf(key_h, sizeof key_h, "%s_h", key);
    snprintf(key_w, sizeof key_w, "%s_w", key);
    const entry_t *both = dp_model_file_find_entry(b, key), *h = dp_model_file_find_entry(b, key_h),
                  *w = dp_model_file_find_entry(b, key_w);
    if (both && (h || w)) {
        const entry_t *second = h ? h : w;
        return dp_model_file_fail_at(p, second->line, "%s and %s both given (line %d): give %s, or %s and %s", key,
                       second->key, both->line, key, key_h, key_w);
    }
    if (both) {
        DP_TRY(parse_int(p, both, lo, hi, &out[0]));
        out[1] = out[0];
        return DP_OK;
    }
    if (required && !h && !w)
        return dp_model_file_fail_at(p, b->line, "[%s] needs %s (or %s and %s)",
                                     dp_model_file_block_types[b->type].name, key, key_h, key_w);
    if (required && (!h || !w))
        return dp_model_file_fail_at(p, (h ? h : w)->line, "%s given without %s", (h ? h : w)->key, h ? key_w : key_h);
    /* an optional pair: a dim not given keeps its default */
    if (h) DP_TRY(parse_int(p, h, lo, hi, &out[0]));
    else out[0] = fallback[0];
    if (w) DP_TRY(parse_int(p, w, lo, hi, &out[1]));
    else out[1] = fallback[1];
    return DP_OK;
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

/* A name made of letters, digits, '_', '.', '-': 1 to max characters. */
static dp_status_t check_name(const parser_t *p, const entry_t *e, size_t max) {
    size_t n = strlen(e->value);
    if (n > max)
        return dp_model_file_fail_at(p, e->line, "%s = %s is longer than %zu characters", e->key,
                                     dp_model_file_show(e->value).text, max);
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(e->value[i]))
            return dp_model_file_fail_at(p, e->line, "%s = %s: use letters, digits, '_', '.' and '-' only", e->key,
                           dp_model_file_show(e->value).text);
    return DP_OK;
}

/* The `name` of a layer with parameters: well formed and not used before. */
static dp_status_t get_param_name(const parser_t *p, int index, const char **out) {
    const entry_t *e = dp_model_file_find_entry(&p->blocks[index], "name");
    DP_ASSERT(e); /* a required key */
    DP_TRY(check_name(p, e, MAX_PARAM_NAME));
    for (int i = 1; i < index; i++) {
        const entry_t *other = dp_model_file_find_entry(&p->blocks[i], "name");
        if (other && has_params(p->blocks[i].type) && strcmp(other->value, e->value) == 0)
            return dp_model_file_fail_at(p, e->line, "name = %s is already the name of the layer on line %d", e->value,
                           p->blocks[i].line);
    }
    *out = e->value;
    return DP_OK;
}

/* init = normal | torch | kaiming_fan_out | uniform_fan_out | kaiming_fan_out_torch_bias | kaiming_fan_in |
 * torch_zero_bias | kaiming_uniform ([net], conv, linear). */
static dp_status_t parse_init(const parser_t *p, const entry_t *e, dp_init_kind_t *out) {
    if (strcmp(e->value, "normal") == 0) *out = DP_INIT_NORMAL;
    else if (strcmp(e->value, "torch") == 0) *out = DP_INIT_TORCH_DEFAULT;
    else if (strcmp(e->value, "kaiming_fan_out") == 0) *out = DP_INIT_KAIMING_FAN_OUT;
    else if (strcmp(e->value, "uniform_fan_out") == 0) *out = DP_INIT_UNIFORM_FAN_OUT;
    else if (strcmp(e->value, "kaiming_fan_out_torch_bias") == 0) *out = DP_INIT_KAIMING_FAN_OUT_TORCH_BIAS;
    else if (strcmp(e->value, "kaiming_fan_in") == 0) *out = DP_INIT_KAIMING_FAN_IN;
    else if (strcmp(e->value, "torch_zero_bias") == 0) *out = DP_INIT_TORCH_ZERO_BIAS;
    else if (strcmp(e->value, "kaiming_uniform") == 0) *out = DP_INIT_KAIMING_UNIFORM;
    else
        return dp_model_file_fail_at(p, e->line, "init = %s: expected normal, torch, kaiming_fan_out, "
                                     "uniform_fan_out, kaiming_fan_out_torch_bias, kaiming_fan_in, torch_zero_bias or "
                                     "kaiming_uniform",
                                     dp_model_file_show(e->value).text);
    return DP_OK;
}

/* A conv or linear layer's own `init` (and `init_scale`, which needs
 * init = normal in the same block), applied to the layer just built. */
static dp_status_t apply_layer_init(parser_t *p, const block_t *b) {
    const entry_t *e = dp_model_file_find_entry(b, "init"), *scale = dp_model_file_find_entry(b, "init_scale");
    dp_init_kind_t init = DP_INIT_NORMAL;
    if (e) DP_TRY(parse_init(p, e, &init));
    if (scale && (!e || init != DP_INIT_NORMAL))
        return dp_model_file_fail_at(p, scale->line, "init_scale is the standard deviation of init = normal: give "
                                     "init = normal in this block too");
    if (!e) return DP_OK;
    float value = 0.01f;
    if (scale) DP_TRY(parse_float(p, scale, 1e-30, 1e3, 0, &value));
    BUILD(p, b, dp_model_set_layer_init(p->model, init, value));
    return DP_OK;
}

/* The activation blocks and the `activation` key's values, with their ops
 * (relu: dp_model_add_relu, as the built-in models). */
static const struct {
    const char *name;
    dp_op_kind_t op;
} activations[] = {
    {"relu", DP_OP_RELU},           {"relu6", DP_OP_RELU6},         {"sigmoid", DP_OP_SIGMOID},
    {"tanh", DP_OP_TANH},           {"hardswish", DP_OP_HARDSWISH}, {"hardsigmoid", DP_OP_HARDSIGMOID},
    {"gelu", DP_OP_GELU},
    {"silu", DP_OP_SILU},
};

/* Adds the activation `name`; 0 when there is none of that name. */
static int add_named_activation(parser_t *p, const block_t *b, const char *name, dp_status_t *status) {
    for (size_t k = 0; k < sizeof activations / sizeof activations[0]; k++) {
        if (strcmp(activations[k].name, name) != 0) continue;
        dp_status_t s = activations[k].op == DP_OP_RELU ? dp_model_add_relu(p->model)
                                                        : dp_model_add_activation(p->model, activations[k].op);
        *status = s == DP_OK ? DP_OK : builder_failed(p, b, s);
        return 1;
    }
    return 0;
}

/* activation = relu | relu6 | sigmoid | tanh | hardswish | hardsigmoid | gelu | silu | linear (none), after a conv
 * or linear. */
static dp_status_t add_activation_key(parser_t *p, const block_t *b) {
    const entry_t *e = dp_model_file_find_entry(b, "activation");
    if (!e || strcmp(e->value, "linear") == 0) return DP_OK;
    dp_status_t status = DP_OK;
    if (!add_named_activation(p, b, e->value, &status))
        return dp_model_file_fail_at(p, e->line, "activation = %s: expected relu, relu6, sigmoid, tanh, hardswish, "
                                     "hardsigmoid, gelu, silu or linear", dp_model_file_show(e->value).text);
    return status;
}

/* `from`: -k (k blocks back; -1 is the block just before, the [net] block is
 * the input) or the label of an earlier block ("input": the model's input). */
static dp_status_t resolve_from(const parser_t *p, int index, int *output) {
    const entry_t *e = dp_model_file_find_entry(&p->blocks[index], "from");
    DP_ASSERT(e);
    const char *v = e->value;
    if (*v == '-' || *v == '+' || (*v >= '0' && *v <= '9')) {
        int k;
        DP_TRY(parse_int(p, e, -MAX_BLOCKS - 1, MAX_BLOCKS + 1, &k));
        if (k >= 0)
            return dp_model_file_fail_at(
                p, e->line, "from = %s: expected a negative offset (-1 is the layer before) or a label", v);
        if (index + k < 0)
            return dp_model_file_fail_at(
                p, e->line, "from = %s reaches before the input (this is layer %d: -1 to -%d are possible)", v, index,
                index);
        *output = p->blocks[index + k].output;
        return DP_OK;
    }
    if (strcmp(v, "input") == 0) {
        *output = 0;
        return DP_OK;
    }
    for (int i = 1; i < p->num_blocks; i++) {
        const entry_t *label = dp_model_file_find_entry(&p->blocks[i], "label");
        if (!label || strcmp(label->value, v) != 0) continue;
        if (i >= index)
            return dp_model_file_fail_at(p, e->line,
                                         "from = %s: that label is on %s (line %d); from must name an earlier layer", v,
                                         i == index ? "this layer" : "a later layer", label->line);
        *output = p->blocks[i].output;
        return DP_OK;
    }
    return dp_model_file_fail_at(p, e->line, "from = %s: no layer has that label", dp_model_file_show(v).text);
}

/* --- Pass 2: blocks into layers --------------------------------------------------- */

static dp_status_t build_conv(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    const char *name;
    int filters, groups, bias, kernel[2], stride[2], pad[2], dilation[2];
    static const int one[2] = {1, 1}, zero[2] = {0, 0};
    DP_TRY(get_param_name(p, index, &name));
    DP_TRY(get_int(p, b, "filters", 0, 1, MAX_CHANNELS, &filters));
    DP_TRY(get_pair(p, b, "size", 1, NULL, 1, MAX_WINDOW, kernel));
    DP_TRY(get_pair(p, b, "stride", 0, one, 1, MAX_WINDOW, stride));
    DP_TRY(get_pair(p, b, "pad", 0, zero, 0, MAX_WINDOW, pad));
    DP_TRY(get_pair(p, b, "dilation", 0, one, 1, MAX_WINDOW, dilation));
    DP_TRY(get_int(p, b, "groups", 1, 1, MAX_CHANNELS, &groups));
    DP_TRY(get_flag(p, b, "bias", 1, &bias));
    dp_op_attr_t attr = dp_op_attr_default();
    for (int d = 0; d < 2; d++) {
        attr.stride[d] = stride[d];
        attr.pad[d] = pad[d];
        attr.dilation[d] = dilation[d];
    }
    attr.groups = groups;
    if (strcmp(dp_model_file_block_types[b->type].name, "conv_transpose") == 0) {
        int output_padding[2];
        DP_TRY(get_pair(p, b, "output_padding", 0, zero, 0, MAX_WINDOW, output_padding));
        attr.output_padding[0] = output_padding[0];
        attr.output_padding[1] = output_padding[1];
        BUILD(p, b, dp_model_add_conv_transpose(p->model, name, filters, kernel[0], kernel[1], &attr, bias));
    } else {
        BUILD(p, b, dp_model_add_conv(p->model, name, filters, kernel[0], kernel[1], &attr, bias));
        const entry_t *shape = dp_model_file_find_entry(b, "weight_shape");
        if (shape && strcmp(shape->value, "linear") == 0) BUILD(p, b, dp_model_set_conv_weight_2d(p->model));
        else if (shape && strcmp(shape->value, "conv") != 0)
            return dp_model_file_fail_at(p, shape->line, "weight_shape = %s: expected conv or linear",
                                         dp_model_file_show(shape->value).text);
    }
    DP_TRY(apply_layer_init(p, b));
    return add_activation_key(p, b);
}

static dp_status_t build_pool(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    int kernel[2], stride[2], pad[2], include_pad, ceil_mode;
    static const int zero[2] = {0, 0};
    DP_TRY(get_pair(p, b, "size", 1, NULL, 1, MAX_WINDOW, kernel));
    DP_TRY(get_pair(p, b, "stride", 0, kernel, 1, MAX_WINDOW, stride)); /* PyTorch: stride = size */
    DP_TRY(get_pair(p, b, "pad", 0, zero, 0, MAX_WINDOW, pad));
    DP_TRY(get_flag(p, b, "count_include_pad", 1, &include_pad));
    DP_TRY(get_flag(p, b, "ceil_mode", 0, &ceil_mode)); /* a key of [maxpool] only (model_file_syntax.c) */
    for (int d = 0; d < 2; d++)
        if (2 * pad[d] > kernel[d])
            return dp_model_file_fail_at(p, b->line, "[%s] pad %d must be at most half of size %d (as in PyTorch)",
                           dp_model_file_block_types[b->type].name, pad[d], kernel[d]);
    dp_op_attr_t attr = dp_op_attr_default();
    for (int d = 0; d < 2; d++) {
        attr.kernel[d] = kernel[d];
        attr.stride[d] = stride[d];
        attr.pad[d] = pad[d];
    }
    attr.count_include_pad = include_pad;
    attr.ceil_mode = ceil_mode;
    int max = strcmp(dp_model_file_block_types[b->type].name, "maxpool") == 0;
    BUILD(p, b, dp_model_add_pool(p->model, max ? DP_OP_MAX_POOL : DP_OP_AVG_POOL, &attr));
    return DP_OK;
}

static dp_status_t build_global_avgpool(parser_t *p, int index) {
    BUILD(p, &p->blocks[index], dp_model_add_global_avg_pool(p->model));
    return DP_OK;
}

static dp_status_t build_batchnorm(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    const char *name;
    dp_op_attr_t attr = dp_op_attr_default();
    DP_TRY(get_param_name(p, index, &name));
    DP_TRY(get_float(p, b, "eps", attr.eps, 1e-12, 1.0, 0, &attr.eps));
    DP_TRY(get_float(p, b, "momentum", attr.momentum, 0.0, 1.0, 0, &attr.momentum));
    BUILD(p, b, dp_model_add_batch_norm(p->model, name, &attr));
    return DP_OK;
}

/* layer norm over the channels at every position, ConvNeXt's LayerNorm2d
 * (eps: torch's default 1e-5 unless given) */
static dp_status_t build_layernorm(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    const char *name;
    float eps = 1e-5f;
    DP_TRY(get_param_name(p, index, &name));
    DP_TRY(get_float(p, b, "eps", eps, 1e-12, 1.0, 0, &eps));
    BUILD(p, b, dp_model_add_layer_norm(p->model, name, eps));
    return DP_OK;
}

/* ConvNeXt's layer scale: the parameter name.layer_scale (C, 1, 1), every
 * value `init` (torchvision's default 1e-6) */
static dp_status_t build_layer_scale(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    const char *name;
    float init = 1e-6f;
    DP_TRY(get_param_name(p, index, &name));
    DP_TRY(get_float(p, b, "init", init, -1e6, 1e6, 0, &init));
    BUILD(p, b, dp_model_add_layer_scale(p->model, name, init));
    return DP_OK;
}

static dp_status_t build_dropout(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    float prob = 0.0f; /* set by get_float when it succeeds */
    DP_TRY(get_float(p, b, "p", 0.5f, 0.0, 1.0, 1, &prob));
    BUILD(p, b, dp_model_add_dropout(p->model, prob));
    return DP_OK;
}

/* stochastic depth, torchvision's StochasticDepth(p, "row"): p required (no default to guess) */
static dp_status_t build_drop_path(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    float prob = 0.0f; /* set by get_float when it succeeds */
    DP_TRY(get_float(p, b, "p", 0.0f, 0.0, 1.0, 1, &prob));
    BUILD(p, b, dp_model_add_drop_path(p->model, prob));
    return DP_OK;
}

static dp_status_t build_activation(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    dp_status_t status = DP_OK;
    int found = add_named_activation(p, b, dp_model_file_block_types[b->type].name, &status);
    DP_ASSERT(found); /* every activation block type is in the list */
    return status;
}

static dp_status_t build_flatten(parser_t *p, int index) {
    BUILD(p, &p->blocks[index], dp_model_add_flatten(p->model));
    return DP_OK;
}

static dp_status_t build_linear(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    const char *name;
    int out_features, bias;
    DP_TRY(get_param_name(p, index, &name));
    DP_TRY(get_int(p, b, "out", 0, 1, MAX_FEATURES, &out_features));
    DP_TRY(get_flag(p, b, "bias", 1, &bias));
    BUILD(p, b, dp_model_add_linear(p->model, name, out_features, bias));
    DP_TRY(apply_layer_init(p, b));
    return add_activation_key(p, b);
}

static dp_status_t build_route(parser_t *p, int index) {
    block_t *b = &p->blocks[index];
    int from = 0; /* set by resolve_from when it succeeds */
    DP_TRY(resolve_from(p, index, &from));
    if (index == p->num_blocks - 1)
        return dp_model_file_fail_at(p, b->line,
                                     "[route] cannot be the last layer (the next layer reads what it routes)");
    BUILD(p, b, dp_model_add_route(p->model, from));
    b->output = from;
    return DP_OK;
}

static dp_status_t build_residual(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    int from = 0, relu; /* from: set by resolve_from when it succeeds */
    DP_TRY(resolve_from(p, index, &from));
    DP_TRY(get_flag(p, b, "relu", 0, &relu));
    BUILD(p, b, dp_model_add_residual(p->model, from, relu));
    return DP_OK;
}

/* the current (N, C, 1, 1) output times output `from`, as torchvision's
 * SqueezeExcitation's `scale * input` (Darknet's [scale_channels]) */
static dp_status_t build_scale_channels(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    int from = 0; /* set by resolve_from when it succeeds */
    DP_TRY(resolve_from(p, index, &from));
    BUILD(p, b, dp_model_add_scale_channels(p->model, from));
    return DP_OK;
}

/* output `from`'s channels, then the current output's, as torch.cat([from, x], 1): DenseNet's
 * concatenation of a block's features (Darknet's [route] of two layers) */
static dp_status_t build_concat(parser_t *p, int index) {
    const block_t *b = &p->blocks[index];
    int from = 0; /* set by resolve_from when it succeeds */
    DP_TRY(resolve_from(p, index, &from));
    BUILD(p, b, dp_model_add_concat(p->model, from));
    return DP_OK;
}

static dp_status_t check_required(const parser_t *p, const block_t *b) {
    const char *list = dp_model_file_block_types[b->type].required;
    char key[32];
    while (*list) {
        size_t n = strcspn(list, " ");
        snprintf(key, sizeof key, "%.*s", (int)n, list);
        if (!dp_model_file_find_entry(b, key))
            return dp_model_file_fail_at(p, b->line, "[%s] needs %s", dp_model_file_block_types[b->type].name, key);
        list += n;
        while (*list == ' ') list++;
    }
    return DP_OK;
}

/* A layer's label: well formed, not "input", not used by an earlier layer. */
static dp_status_t check_label(const parser_t *p, int index) {
    const entry_t *e = dp_model_file_find_entry(&p->blocks[index], "label");
    if (!e) return DP_OK;
    DP_TRY(check_name(p, e, MAX_LABEL));
    char c = e->value[0];
    if (c == '-' || c == '+' || (c >= '0' && c <= '9'))
        return dp_model_file_fail_at(p, e->line, "label = %s: a label starts with a letter, '_' or '.'", e->value);
    if (strcmp(e->value, "input") == 0)
        return dp_model_file_fail_at(p, e->line, "label = input is reserved (from = input names the model's input)");
    for (int i = 1; i < index; i++) {
        const entry_t *other = dp_model_file_find_entry(&p->blocks[i], "label");
        if (other && strcmp(other->value, e->value) == 0)
            return dp_model_file_fail_at(p, e->line, "label = %s is already the label of the layer on line %d",
                                         e->value, p->blocks[i].line);
    }
    return DP_OK;
}

/* Keeps every layer's output within sizes the builder's int arithmetic and
 * a training step can hold. */
static dp_status_t check_output_size(const parser_t *p, const block_t *b) {
    int shape[DP_MAX_DIMS];
    int ndim = dp_model_output_shape(p->model, b->output, shape);
    int64_t values = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] > MAX_DIM)
            return dp_model_file_fail_at(p, b->line, "[%s] produces a dim of %d (at most %d)",
                                         dp_model_file_block_types[b->type].name, shape[d], MAX_DIM);
        values *= shape[d];
    }
    if (values > MAX_VALUES)
        return dp_model_file_fail_at(p, b->line, "[%s] produces %lld values per example (at most %d)",
                                     dp_model_file_block_types[b->type].name, (long long)values, MAX_VALUES);
    return DP_OK;
}

/* The model's name: [net] name, else the file's base name without extension. */
static dp_status_t model_name(const parser_t *p, char *name, size_t size) {
    const entry_t *e = dp_model_file_find_entry(&p->blocks[0], "name");
    if (e) {
        DP_TRY(check_name(p, e, 63));
        snprintf(name, size, "%s", e->value);
        return DP_OK;
    }
    const char *base = strrchr(p->file, '/');
    base = base ? base + 1 : p->file;
    size_t n = strcspn(base, ".");
    snprintf(name, size, "%.*s", (int)(n ? n : strlen(base)), base);
    return DP_OK;
}

static dp_status_t build_net(parser_t *p) {
    const block_t *net = &p->blocks[0];
    DP_TRY(check_required(p, net));
    int channels, height, width;
    DP_TRY(get_int(p, net, "channels", 0, 1, MAX_CHANNELS, &channels));
    DP_TRY(get_int(p, net, "height", 0, 1, MAX_DIM, &height));
    DP_TRY(get_int(p, net, "width", 0, 1, MAX_DIM, &width));
    if ((int64_t)channels * height * width > MAX_VALUES)
        return dp_model_file_fail_at(p, net->line, "input %dx%dx%d has more than %d values", channels, height, width,
                                     MAX_VALUES);
    dp_init_kind_t init = DP_INIT_TORCH_DEFAULT;
    const entry_t *e = dp_model_file_find_entry(net, "init");
    if (e) DP_TRY(parse_init(p, e, &init));
    float scale = 0.01f; /* (set by get_float; initialised for the compiler) */
    DP_TRY(get_float(p, net, "init_scale", 0.01f, 1e-30, 1e3, 0, &scale));
    char name[64];
    DP_TRY(model_name(p, name, sizeof name));
    dp_status_t status = dp_model_new(name, channels, height, width, init, scale, &p->model);
    if (status != DP_OK) return builder_failed(p, net, status);
    return DP_OK;
}

static dp_status_t build_model(parser_t *p) {
    if (p->num_blocks == 0) return dp_model_file_fail_at(p, p->last_line, "no [net] block (the file has no blocks)");
    if (p->num_blocks == 1) return dp_model_file_fail_at(p, p->last_line, "no layers after [net]");
    DP_TRY(build_net(p));
    for (int i = 1; i < p->num_blocks; i++) {
        block_t *b = &p->blocks[i];
        DP_TRY(check_required(p, b));
        DP_TRY(check_label(p, i));
        DP_TRY(builders[b->type](p, i));
        if (strcmp(dp_model_file_block_types[b->type].name, "route") != 0)
            b->output = dp_model_num_layers(p->model);
        DP_TRY(check_output_size(p, b));
    }
    if (dp_model_num_outputs(p->model) < 1) {
        int shape[DP_MAX_DIMS];
        int ndim = dp_model_output_shape(p->model, dp_model_num_layers(p->model), shape);
        return dp_model_file_fail_at(p, p->blocks[p->num_blocks - 1].line,
                       "the network ends with a %d-dim output per example; it must end with a flat vector "
                       "of class scores ([flatten], then [linear])",
                       ndim);
    }
    return DP_OK;
}

/* --- Entry points ------------------------------------------------------------------ */

dp_status_t dp_model_parse(const char *text, size_t len, const char *file_name, dp_model_t **out) {
    *out = NULL;
    parser_t p = {.file = file_name ? file_name : "<model>"};
    if (len == 0) return dp_model_file_fail_at(&p, 1, "empty file (a model file starts with [net])");
    if (len > DP_MODEL_FILE_MAX_BYTES)
        return dp_model_file_fail_at(&p, 1, "larger than %d bytes: not a model file", DP_MODEL_FILE_MAX_BYTES);
    p.text = dp_alloc(len + 1, "model file text");
    if (!p.text) return DP_ERR_NOMEM;
    memcpy(p.text, text, len);
    p.text[len] = '\0';
    dp_status_t status = dp_model_file_split_blocks(&p, len);
    if (status == DP_OK) status = build_model(&p);
    if (status == DP_OK) status = dp_model_set_source(p.model, text, len);
    if (status == DP_OK) {
        *out = p.model;
    } else {
        dp_model_free(p.model);
    }
    free(p.blocks);
    free(p.text);
    return status;
}

dp_status_t dp_model_load_file(const char *path, dp_model_t **out) {
    *out = NULL;
    if (!path) return dp_fail(DP_ERR_ARG, "model file: no path given (NULL)");
    FILE *f = fopen(path, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open model file (%s)", path, strerror(errno));
    char *text = dp_alloc((size_t)DP_MODEL_FILE_MAX_BYTES + 1, "model file");
    if (!text) {
        fclose(f);
        return DP_ERR_NOMEM;
    }
    size_t len = fread(text, 1, (size_t)DP_MODEL_FILE_MAX_BYTES + 1, f);
    int read_error = ferror(f) ? errno : 0;
    fclose(f);
    dp_status_t status;
    if (read_error)
        status = dp_fail(DP_ERR_IO, "%s: cannot read model file (%s)", path, strerror(read_error));
    else
        status = dp_model_parse(text, len, path, out);
    free(text);
    return status;
}
