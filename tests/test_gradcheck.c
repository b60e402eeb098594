/* test_gradcheck.c - finite-difference gradient check of every op in
 * dp_op_table.
 *
 * For each op, several seeded random configurations (conv: 1-D, 2-D and
 * 3-D with random kernel, stride, pad, dilation, groups, bias; pools with
 * random windows and padding; ...). The loss is L = sum(y * r) for a fixed
 * random r of y's shape (for softmax_xent y is the scalar loss and r one
 * random number, which also checks the scaling by out.grad). The analytic
 * gradient of every input (x, weight, bias) comes from one backward with
 * out.grad = r; the numerical one from central differences
 *     (L(v + EPS) - L(v - EPS)) / (2 EPS)
 * with the ops run in float and L summed in double. They must agree within
 * |analytic - numeric| <= ATOL + RTOL |numeric|.
 *
 * Kinks are avoided by construction: relu inputs are at least RELU_MARGIN
 * away from 0 and max-pool inputs are distinct values at least
 * MAX_POOL_SPACING apart, both larger than 2 EPS, so no perturbation moves
 * an input across a kink or changes a window's maximum.
 *
 * Batch norm is checked in training mode (batch statistics: every x moves
 * the mean and variance) through x, weight and bias, and in inference
 * mode; dropout in training mode with its fixed, seeded mask (a pure
 * function of seed and element, so the perturbed runs see the same mask);
 * mse's target and inputs without a grad are not checked.
 *
 * The loop runs over the table: an op without a case generator here fails.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "dptrain/rng.h"
#include "testing.h"

#define EPS 1e-2f
#define RTOL 1e-2
#define ATOL 1e-3
#define RELU_MARGIN 0.1f
#define MAX_POOL_SPACING 0.05f

typedef struct {
    char label[256];
    dp_node_t node;
    dp_tensor_t inputs[3];
    int32_t labels[64];
    float running_mean[16], running_var[16]; /* batch_norm */
} gc_case_t;

/* A case generator fills `c` for variant v and returns 1, or returns 0
 * when there are no more variants. */
typedef int (*case_maker_t)(int v, dp_rng_t *rng, gc_case_t *c);

static float randn(dp_rng_t *rng) { return (float)dp_rng_normal(rng); }

static dp_tensor_t *new_input(gc_case_t *c, int i, int ndim, const int *shape, dp_rng_t *rng) {
    dp_tensor_t *t = &c->inputs[i];
    dp_tensor_set_shape(t, ndim, shape);
    size_t n = dp_tensor_numel(t);
    t->data = malloc(n * sizeof(float));
    t->grad = calloc(n, sizeof(float));
    for (size_t j = 0; j < n; j++) t->data[j] = randn(rng);
    c->node.in[i] = t;
    return t;
}

static void case_free(gc_case_t *c) {
    for (int i = 0; i < 3; i++)
        if (c->node.in[i]) {
            free(c->node.in[i]->data);
            free(c->node.in[i]->grad);
        }
}

static int rand_int(dp_rng_t *rng, int lo, int hi) { /* in [lo, hi] */
    return lo + (int)dp_rng_below(rng, (uint64_t)(hi - lo + 1));
}

/* Appends to the case's label, printf-style. */
static void describe(gc_case_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void describe(gc_case_t *c, const char *fmt, ...) {
    size_t used = strlen(c->label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->label + used, sizeof c->label - used, fmt, ap);
    va_end(ap);
}

/* " name=[v0,v1]": n values of a shape or a spatial attribute array. */
static void describe_list(gc_case_t *c, const char *name, const int *values, int n) {
    describe(c, " %s=[", name);
    for (int d = 0; d < n; d++) describe(c, d ? ",%d" : "%d", values[d]);
    describe(c, "]");
}

/* --- conv --------------------------------------------------------------- */

/* Fixed configurations for ops_conv.c's tap-plane forward (small padded
 * output planes, one product per kernel tap over the positions that read
 * the input): 2-D 7x6 -> 4x3 with stride 2, pad 1, and 1-D 9 -> 5; the
 * backward then differentiates a forward that it does not share code with. */
static int make_conv_tap_plane(int v, dp_rng_t *rng, gc_case_t *c) {
    dp_op_attr_t *a = &c->node.attr;
    int two_d = v == 0, n = two_d ? 2 : 1;
    int x_shape[4] = {2, 3, 7, 6}, w_shape[4] = {4, 3, 3, 3};
    if (!two_d) {
        x_shape[2] = 9;
        w_shape[2] = 3;
    }
    for (int d = 0; d < n; d++) {
        a->stride[d] = 2;
        a->pad[d] = 1;
        a->dilation[d] = 1;
    }
    a->groups = 1;
    new_input(c, 0, n + 2, x_shape, rng);
    new_input(c, 1, n + 2, w_shape, rng);
    new_input(c, 2, 1, &w_shape[0], rng);
    describe(c, "conv%dd", n);
    describe_list(c, "x", x_shape, n + 2);
    describe(c, " oc=%d", w_shape[0]);
    describe_list(c, "k", w_shape + 2, n);
    describe(c, " stride=2 pad=1 (tap plane)");
    return 1;
}

/* Depthwise 2-D convolutions (groups = input channels, one or two output
 * channels per group: ops_conv.c's direct depthwise path), MobileNetV2's
 * 3x3 with stride 1 and 2, pad 1, then a 5x5 and a 3x5 with dilation. */
static int make_conv_depthwise(int v, dp_rng_t *rng, gc_case_t *c) {
    static const struct { int c, mult, kh, kw, stride, pad, dil, h, w, bias; } cases[] = {
        {3, 1, 3, 3, 1, 1, 1, 6, 7, 1}, {4, 1, 3, 3, 2, 1, 1, 7, 6, 0}, {2, 2, 3, 3, 2, 1, 1, 8, 9, 1},
        {3, 1, 5, 5, 1, 2, 1, 6, 5, 1}, {2, 1, 3, 5, 2, 1, 2, 9, 11, 0}, {5, 1, 3, 3, 1, 0, 1, 5, 5, 1},
    };
    if (v >= (int)(sizeof cases / sizeof cases[0])) return 0;
    dp_op_attr_t *a = &c->node.attr;
    int x_shape[4] = {2, cases[v].c, cases[v].h, cases[v].w};
    int w_shape[4] = {cases[v].c * cases[v].mult, 1, cases[v].kh, cases[v].kw};
    a->groups = cases[v].c;
    for (int d = 0; d < 2; d++) {
        a->stride[d] = cases[v].stride;
        a->pad[d] = cases[v].pad;
        a->dilation[d] = d == 1 ? cases[v].dil : 1;
    }
    new_input(c, 0, 4, x_shape, rng);
    new_input(c, 1, 4, w_shape, rng);
    if (cases[v].bias) new_input(c, 2, 1, &w_shape[0], rng);
    describe(c, "conv2d depthwise");
    describe_list(c, "x", x_shape, 4);
    describe(c, " oc=%d", w_shape[0]);
    describe_list(c, "k", w_shape + 2, 2);
    describe(c, " stride=%d pad=%d dil_w=%d bias=%d", cases[v].stride, cases[v].pad, cases[v].dil, cases[v].bias);
    return 1;
}

static int make_conv(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 26) return 0;
    if (v >= 20) return make_conv_depthwise(v - 20, rng, c);
    if (v >= 18) return make_conv_tap_plane(v - 18, rng, c);
    int n = 1 + v % 3; /* spatial dims */
    dp_op_attr_t *a = &c->node.attr;
    a->groups = v % 2 ? 2 : 1 + (v / 6) % 3; /* 1, 2 or 3 */
    int group_in = rand_int(rng, 1, 2), group_out = rand_int(rng, 1, 2);
    int batch = rand_int(rng, 1, 2);
    int x_shape[5] = {batch, group_in * a->groups}, w_shape[5] = {group_out * a->groups, group_in};
    for (int d = 0; d < n; d++) {
        int k = rand_int(rng, 1, n == 3 ? 2 : 3);
        a->stride[d] = rand_int(rng, 1, 2);
        a->dilation[d] = rand_int(rng, 1, 2);
        a->pad[d] = rand_int(rng, 0, 2);
        if (v < 6) { /* the fast path (stride 1, dilation 1) unpadded, then with padding k / 2 + 1 */
            a->stride[d] = a->dilation[d] = 1;
            a->pad[d] = v < 3 ? 0 : k / 2 + 1;
        }
        int span = a->dilation[d] * (k - 1) + 1;
        int min_in = span - 2 * a->pad[d] > 1 ? span - 2 * a->pad[d] : 1;
        /* at least 3 output rows per dim, so padding clips several rows */
        x_shape[2 + d] = min_in + 2 * a->stride[d] + rand_int(rng, 0, n == 3 ? 1 : 3);
        w_shape[2 + d] = k;
    }
    new_input(c, 0, n + 2, x_shape, rng);
    new_input(c, 1, n + 2, w_shape, rng);
    int has_bias = v % 4 != 3;
    if (has_bias) new_input(c, 2, 1, &w_shape[0], rng);
    describe(c, "conv%dd", n);
    describe_list(c, "x", x_shape, n + 2);
    describe(c, " oc=%d", w_shape[0]);
    describe_list(c, "k", w_shape + 2, n);
    describe_list(c, "stride", a->stride, n);
    describe_list(c, "pad", a->pad, n);
    describe_list(c, "dil", a->dilation, n);
    describe(c, " groups=%d bias=%d", a->groups, has_bias);
    return 1;
}

/* --- pools -------------------------------------------------------------- */

/* Random n-d pooling window and an input it fits; returns the input shape. */
static void random_pool(int v, int n, int allow_dilation, dp_rng_t *rng, gc_case_t *c, int *x_shape) {
    dp_op_attr_t *a = &c->node.attr;
    x_shape[0] = rand_int(rng, 1, 2);
    x_shape[1] = rand_int(rng, 1, 3);
    for (int d = 0; d < n; d++) {
        int k = rand_int(rng, 1, 3);
        if (v < 3) k = 2; /* the common 2-window, stride 2 */
        a->kernel[d] = k;
        a->stride[d] = v < 3 ? 2 : rand_int(rng, 1, 2);
        a->pad[d] = v < 3 ? 0 : rand_int(rng, 0, k / 2);
        a->dilation[d] = allow_dilation && v >= 3 ? rand_int(rng, 1, 2) : 1;
        int span = a->dilation[d] * (k - 1) + 1;
        int min_in = span - 2 * a->pad[d] > 1 ? span - 2 * a->pad[d] : 1;
        x_shape[2 + d] = min_in + rand_int(rng, 0, n == 3 ? 2 : 4);
    }
}

static void describe_pool(gc_case_t *c, const char *op, int n, const int *x_shape) {
    describe(c, "%s%dd", op, n);
    describe_list(c, "x", x_shape, n + 2);
    describe_list(c, "k", c->node.attr.kernel, n);
    describe_list(c, "stride", c->node.attr.stride, n);
    describe_list(c, "pad", c->node.attr.pad, n);
}

static int make_max_pool(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 12) return 0;
    int n = 1 + v % 3, x_shape[5];
    random_pool(v, n, 1, rng, c, x_shape);
    dp_tensor_t *x = new_input(c, 0, n + 2, x_shape, rng);
    /* distinct values MAX_POOL_SPACING apart, shuffled: no ties, and a
     * perturbation of EPS never changes which one is largest */
    size_t count = dp_tensor_numel(x);
    for (size_t j = 0; j < count; j++) x->data[j] = ((float)j - (float)count / 2) * MAX_POOL_SPACING;
    for (size_t j = count - 1; j > 0; j--) {
        size_t k = (size_t)dp_rng_below(rng, j + 1);
        float t = x->data[j];
        x->data[j] = x->data[k];
        x->data[k] = t;
    }
    describe_pool(c, "max_pool", n, x_shape);
    describe_list(c, "dil", c->node.attr.dilation, n);
    return 1;
}

static int make_avg_pool(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 12) return 0;
    int n = 1 + v % 3, x_shape[5];
    random_pool(v, n, 0, rng, c, x_shape);
    c->node.attr.count_include_pad = (v / 3) % 2;
    new_input(c, 0, n + 2, x_shape, rng);
    describe_pool(c, "avg_pool", n, x_shape);
    describe(c, " count_include_pad=%d", c->node.attr.count_include_pad);
    return 1;
}

/* --- linear, relu, flatten, softmax_xent -------------------------------- */

static int make_linear(int v, dp_rng_t *rng, gc_case_t *c) {
    static const int sizes[][4] = {{3, 5, 4, 1}, {1, 7, 3, 0}, {4, 1, 6, 1}, {5, 12, 2, 1}};
    if (v >= 4) return 0;
    int x_shape[2] = {sizes[v][0], sizes[v][1]}, w_shape[2] = {sizes[v][2], sizes[v][1]};
    new_input(c, 0, 2, x_shape, rng);
    new_input(c, 1, 2, w_shape, rng);
    if (sizes[v][3]) new_input(c, 2, 1, &w_shape[0], rng);
    snprintf(c->label, sizeof c->label, "linear N=%d IN=%d OUT=%d bias=%d", sizes[v][0], sizes[v][1], sizes[v][2],
             sizes[v][3]);
    return 1;
}

static const int elementwise_shapes[][6] = {/* ndim, shape */
                                            {2, 3, 4}, {3, 2, 3, 5}, {4, 2, 3, 2, 3}, {5, 1, 2, 3, 2, 2}};

static int make_relu(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v][0], elementwise_shapes[v] + 1, rng);
    for (size_t j = 0; j < dp_tensor_numel(x); j++) /* at least RELU_MARGIN from the kink */
        x->data[j] = x->data[j] < 0 ? x->data[j] - RELU_MARGIN : x->data[j] + RELU_MARGIN;
    snprintf(c->label, sizeof c->label, "relu %d-D", x->ndim);
    return 1;
}

/* relu6: x spread over [-4, 10], every value at least RELU_MARGIN from
 * both kinks (0 and 6), so values fall in all three pieces. */
static int make_relu6(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v][0], elementwise_shapes[v] + 1, rng);
    for (size_t j = 0; j < dp_tensor_numel(x); j++) {
        float t = 3.0f + 3.5f * x->data[j];
        if (fabsf(t) < RELU_MARGIN) t = t < 0 ? t - RELU_MARGIN : t + RELU_MARGIN;
        if (fabsf(t - 6.0f) < RELU_MARGIN) t = t < 6.0f ? t - RELU_MARGIN : t + RELU_MARGIN;
        x->data[j] = t;
    }
    snprintf(c->label, sizeof c->label, "relu6 %d-D", x->ndim);
    return 1;
}

/* hardswish, hardsigmoid: x spread over [-7, 7], every value at least
 * RELU_MARGIN from both kinks (-3 and 3), so values fall in all three
 * pieces (hardswish is smooth at 0, its quadratic piece's vertex -1.5 too). */
static int make_hard(int v, dp_rng_t *rng, gc_case_t *c, const char *name) {
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v][0], elementwise_shapes[v] + 1, rng);
    for (size_t j = 0; j < dp_tensor_numel(x); j++) {
        float t = 3.5f * x->data[j];
        for (float kink = -3.0f; kink <= 3.0f; kink += 6.0f)
            if (fabsf(t - kink) < RELU_MARGIN) t = t < kink ? t - RELU_MARGIN : t + RELU_MARGIN;
        x->data[j] = t;
    }
    snprintf(c->label, sizeof c->label, "%s %d-D", name, x->ndim);
    return 1;
}
static int make_hardswish(int v, dp_rng_t *rng, gc_case_t *c) { return make_hard(v, rng, c, "hardswish"); }
static int make_hardsigmoid(int v, dp_rng_t *rng, gc_case_t *c) { return make_hard(v, rng, c, "hardsigmoid"); }

/* scale_channels: x (N, C, ...) 3-D to 5-D and its scale (N, C, 1, ...);
 * variants 3 to 5 the same with a scale (1, C, 1, ...) shared by the batch
 * (ConvNeXt's layer scale). */
static int make_scale_channels(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 6) return 0;
    const int *shape = elementwise_shapes[v % 3 + 1];
    int scale_shape[5] = {v >= 3 ? 1 : shape[1], shape[2], 1, 1, 1};
    dp_tensor_t *x = new_input(c, 0, shape[0], shape + 1, rng);
    new_input(c, 1, shape[0], scale_shape, rng);
    snprintf(c->label, sizeof c->label, "scale_channels %d-D%s", x->ndim, v >= 3 ? " shared by the batch" : "");
    return 1;
}

/* concat: a (N, Ca, ...) and b (N, Cb, ...), 2-D to 5-D, Cb = Ca + 1 (other channel counts). */
static int make_concat(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 4) return 0;
    const int *shape = elementwise_shapes[v];
    int other[5];
    for (int d = 0; d < shape[0]; d++) other[d] = shape[1 + d];
    other[1] += 1;
    dp_tensor_t *a = new_input(c, 0, shape[0], shape + 1, rng);
    new_input(c, 1, shape[0], other, rng);
    snprintf(c->label, sizeof c->label, "concat %d-D", a->ndim);
    return 1;
}

static int make_flatten(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v][0], elementwise_shapes[v] + 1, rng);
    snprintf(c->label, sizeof c->label, "flatten %d-D", x->ndim);
    return 1;
}

/* The last three with label smoothing (torch's label_smoothing: ops.h). */
static int make_softmax_xent(int v, dp_rng_t *rng, gc_case_t *c) {
    /* N, K, denominator, logit offset, label smoothing */
    static const float cases[][5] = {{4, 5, 0, 0, 0},       {3, 7, 10, 0, 0},        {5, 3, 0, 100, 0},
                                     {1, 2, 0.5f, -50, 0},  {6, 10, 0, 0, 0},        {4, 5, 0, 0, 0.1f},
                                     {3, 7, 10, 30, 0.5f},  {5, 2, 0, 0, 0.95f}};
    if (v >= 8) return 0;
    int shape[2] = {(int)cases[v][0], (int)cases[v][1]};
    dp_tensor_t *x = new_input(c, 0, 2, shape, rng);
    for (size_t j = 0; j < dp_tensor_numel(x); j++) x->data[j] = 2.0f * x->data[j] + cases[v][3];
    for (int i = 0; i < shape[0]; i++) c->labels[i] = (int32_t)dp_rng_below(rng, (uint64_t)shape[1]);
    c->node.labels = c->labels;
    c->node.attr.loss_denominator = cases[v][2];
    c->node.attr.label_smoothing = cases[v][4];
    snprintf(c->label, sizeof c->label, "softmax_xent N=%d K=%d denominator=%g offset=%g label_smoothing=%g",
             shape[0], shape[1], (double)cases[v][2], (double)cases[v][3], (double)cases[v][4]);
    return 1;
}

/* --- the ops beyond LeNet's: transposed conv, pooling, batch norm, ... ---- */

static int make_conv_transpose(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 15) return 0;
    int n = 1 + v % 3; /* spatial dims */
    dp_op_attr_t *a = &c->node.attr;
    a->groups = 1 + (v / 3) % 3; /* 1, 2 or 3 */
    int group_in = rand_int(rng, 1, 2), group_out = rand_int(rng, 1, 2);
    int x_shape[5] = {rand_int(rng, 1, 2), group_in * a->groups}, w_shape[5] = {group_in * a->groups, group_out};
    for (int d = 0; d < n; d++) {
        int k = rand_int(rng, 1, n == 3 ? 2 : 3);
        a->stride[d] = v < 3 ? 1 : rand_int(rng, 1, 3);
        a->dilation[d] = v < 3 ? 1 : rand_int(rng, 1, 2);
        int limit = a->stride[d] > a->dilation[d] ? a->stride[d] : a->dilation[d];
        a->output_padding[d] = rand_int(rng, 0, limit - 1);
        x_shape[2 + d] = rand_int(rng, 2, n == 3 ? 3 : 4);
        /* pad up to 2, but keep at least 2 output positions */
        int full = (x_shape[2 + d] - 1) * a->stride[d] + a->dilation[d] * (k - 1) + a->output_padding[d] + 1;
        a->pad[d] = rand_int(rng, 0, 2);
        while (a->pad[d] > 0 && full - 2 * a->pad[d] < 2) a->pad[d]--;
        w_shape[2 + d] = k;
    }
    new_input(c, 0, n + 2, x_shape, rng);
    new_input(c, 1, n + 2, w_shape, rng);
    int has_bias = v % 4 != 3, out_ch = group_out * a->groups;
    if (has_bias) new_input(c, 2, 1, &out_ch, rng);
    describe(c, "conv_transpose%dd", n);
    describe_list(c, "x", x_shape, n + 2);
    describe_list(c, "w", w_shape, n + 2);
    describe_list(c, "stride", a->stride, n);
    describe_list(c, "pad", a->pad, n);
    describe_list(c, "out_pad", a->output_padding, n);
    describe_list(c, "dil", a->dilation, n);
    describe(c, " groups=%d bias=%d", a->groups, has_bias);
    return 1;
}

static int make_global_avg_pool(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 3) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v + 1][0], elementwise_shapes[v + 1] + 1, rng);
    snprintf(c->label, sizeof c->label, "global_avg_pool %d-D", x->ndim);
    return 1;
}

static int make_batch_norm(int v, dp_rng_t *rng, gc_case_t *c) {
    /* ndim, shape; variants 4.. repeat the shapes with: no affine, inference */
    static const int shapes[][6] = {{2, 6, 3}, {3, 3, 2, 4}, {4, 2, 3, 2, 3}, {5, 2, 2, 2, 3, 2}};
    if (v >= 6) return 0;
    const int *shape = shapes[v % 4];
    dp_op_attr_t *a = &c->node.attr;
    dp_tensor_t *x = new_input(c, 0, shape[0], shape + 1, rng);
    int channels = shape[2];
    for (size_t j = 0; j < dp_tensor_numel(x); j++) x->data[j] = 2.0f * x->data[j] + 1.0f;
    int affine = v != 4;
    if (affine) {
        new_input(c, 1, 1, &channels, rng);
        new_input(c, 2, 1, &channels, rng);
    }
    for (int ch = 0; ch < channels; ch++) {
        c->running_mean[ch] = 0.5f * randn(rng);
        c->running_var[ch] = 0.5f + fabsf(randn(rng));
    }
    a->running_mean = c->running_mean;
    a->running_var = c->running_var;
    a->training = v != 5;
    snprintf(c->label, sizeof c->label, "batch_norm %d-D training=%d affine=%d", x->ndim, a->training, affine);
    describe_list(c, "x", x->shape, x->ndim);
    return 1;
}

/* layer_norm over the channels at every position: 2-D to 5-D, eps 1e-6
 * (ConvNeXt's) and 1e-5; variant 4 without weight and bias */
static int make_layer_norm(int v, dp_rng_t *rng, gc_case_t *c) {
    static const int shapes[][6] = {{2, 6, 3}, {3, 3, 4, 4}, {4, 2, 3, 2, 3}, {5, 2, 5, 2, 3, 2}};
    if (v >= 5) return 0;
    const int *shape = shapes[v % 4];
    dp_tensor_t *x = new_input(c, 0, shape[0], shape + 1, rng);
    int channels = shape[2];
    for (size_t j = 0; j < dp_tensor_numel(x); j++) x->data[j] = 2.0f * x->data[j] + 0.5f;
    int affine = v != 4;
    if (affine) {
        new_input(c, 1, 1, &channels, rng);
        new_input(c, 2, 1, &channels, rng);
    }
    c->node.attr.eps = v % 2 ? 1e-6f : 1e-5f;
    snprintf(c->label, sizeof c->label, "layer_norm %d-D eps=%g affine=%d", x->ndim, (double)c->node.attr.eps, affine);
    describe_list(c, "x", x->shape, x->ndim);
    return 1;
}

static int make_dropout(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 5) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v % 4][0], elementwise_shapes[v % 4] + 1, rng);
    dp_op_attr_t *a = &c->node.attr;
    a->dropout_p = v == 3 ? 0.7f : 0.3f;
    a->dropout_seed = 1000u + (unsigned)v;
    a->example_offset = 5 * v;
    a->training = v != 4;
    snprintf(c->label, sizeof c->label, "dropout %d-D p=%g training=%d", x->ndim, (double)a->dropout_p, a->training);
    return 1;
}

/* drop_path: the seeded per-example mask, fixed across the perturbed runs; N = 6 (some examples dropped) */
static int make_drop_path(int v, dp_rng_t *rng, gc_case_t *c) {
    static const int shapes[][5] = {{2, 6, 5}, {4, 6, 2, 3, 4}, {3, 6, 3, 4}};
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, shapes[v % 3][0], shapes[v % 3] + 1, rng);
    dp_op_attr_t *a = &c->node.attr;
    a->dropout_p = v == 1 ? 0.5f : 0.3f;
    a->dropout_seed = 2000u + (unsigned)v;
    a->example_offset = 3 * v;
    a->training = v != 3;
    snprintf(c->label, sizeof c->label, "drop_path %d-D p=%g training=%d", x->ndim, (double)a->dropout_p,
             a->training);
    return 1;
}

static int make_unary(int v, dp_rng_t *rng, gc_case_t *c, const char *name) {
    if (v >= 4) return 0;
    dp_tensor_t *x = new_input(c, 0, elementwise_shapes[v][0], elementwise_shapes[v] + 1, rng);
    for (size_t j = 0; j < dp_tensor_numel(x); j++) x->data[j] *= 2.0f;
    snprintf(c->label, sizeof c->label, "%s %d-D", name, x->ndim);
    return 1;
}
static int make_sigmoid(int v, dp_rng_t *rng, gc_case_t *c) { return make_unary(v, rng, c, "sigmoid"); }
static int make_tanh(int v, dp_rng_t *rng, gc_case_t *c) { return make_unary(v, rng, c, "tanh"); }
/* gelu: smooth everywhere; x spread over [-4, 4] to reach both tails */
static int make_gelu(int v, dp_rng_t *rng, gc_case_t *c) {
    if (!make_unary(v, rng, c, "gelu")) return 0;
    for (size_t j = 0; j < dp_tensor_numel(c->node.in[0]); j++) c->node.in[0]->data[j] *= 2.0f;
    return 1;
}
/* silu: x spread over about [-6, 6], both tails and the dip near -1.28 */
static int make_silu(int v, dp_rng_t *rng, gc_case_t *c) {
    if (!make_unary(v, rng, c, "silu")) return 0;
    dp_tensor_t *x = c->node.in[0];
    for (size_t j = 0; j < dp_tensor_numel(x); j++) x->data[j] *= 1.75f;
    return 1;
}

static int make_add(int v, dp_rng_t *rng, gc_case_t *c) {
    if (v >= 6) return 0;
    const int *shape = elementwise_shapes[v % 4];
    dp_tensor_t *x = new_input(c, 0, shape[0], shape + 1, rng), *z = new_input(c, 1, shape[0], shape + 1, rng);
    c->node.attr.fuse_relu = v >= 2;
    for (size_t j = 0; j < dp_tensor_numel(x); j++) { /* x + z at least RELU_MARGIN from the kink */
        float sum = x->data[j] + z->data[j];
        if (fabsf(sum) < RELU_MARGIN) z->data[j] += sum < 0 ? -RELU_MARGIN : RELU_MARGIN;
    }
    snprintf(c->label, sizeof c->label, "add %d-D fuse_relu=%d", x->ndim, c->node.attr.fuse_relu);
    return 1;
}

static int make_mse(int v, dp_rng_t *rng, gc_case_t *c) {
    static const float denominators[] = {0, 7, 0.5f, 0};
    if (v >= 4) return 0;
    const int *shape = elementwise_shapes[v];
    new_input(c, 0, shape[0], shape + 1, rng);
    dp_tensor_t *t = new_input(c, 1, shape[0], shape + 1, rng);
    free(t->grad); /* the target gets no gradient */
    t->grad = NULL;
    c->node.attr.loss_denominator = denominators[v];
    snprintf(c->label, sizeof c->label, "mse %d-D denominator=%g", t->ndim, (double)denominators[v]);
    return 1;
}

static const case_maker_t case_makers[DP_OP_COUNT] = {
    [DP_OP_CONV] = make_conv,
    [DP_OP_MAX_POOL] = make_max_pool,
    [DP_OP_AVG_POOL] = make_avg_pool,
    [DP_OP_LINEAR] = make_linear,
    [DP_OP_RELU] = make_relu,
    [DP_OP_FLATTEN] = make_flatten,
    [DP_OP_SOFTMAX_XENT] = make_softmax_xent,
    [DP_OP_CONV_TRANSPOSE] = make_conv_transpose,
    [DP_OP_GLOBAL_AVG_POOL] = make_global_avg_pool,
    [DP_OP_BATCH_NORM] = make_batch_norm,
    [DP_OP_DROPOUT] = make_dropout,
    [DP_OP_SIGMOID] = make_sigmoid,
    [DP_OP_TANH] = make_tanh,
    [DP_OP_ADD] = make_add,
    [DP_OP_MSE] = make_mse,
    [DP_OP_RELU6] = make_relu6,
    [DP_OP_HARDSWISH] = make_hardswish,
    [DP_OP_HARDSIGMOID] = make_hardsigmoid,
    [DP_OP_SCALE_CHANNELS] = make_scale_channels,
    [DP_OP_GELU] = make_gelu,
    [DP_OP_LAYER_NORM] = make_layer_norm,
    [DP_OP_SILU] = make_silu,
    [DP_OP_DROP_PATH] = make_drop_path,
    [DP_OP_CONCAT] = make_concat,
};

/* --- the check ---------------------------------------------------------- */

/* L = sum(y * r), accumulated in double; a fresh arena state per call. */
static double loss(dp_node_t *node, dp_arena_t *arena, const float *r) {
    dp_arena_reset(arena);
    dp_status_t st = dp_op_forward(node, arena);
    DP_ASSERT(st == DP_OK);
    double sum = 0.0;
    size_t n = dp_tensor_numel(&node->out);
    for (size_t i = 0; i < n; i++) sum += (double)node->out.data[i] * r[i];
    return sum;
}

/* Returns the largest violation of the case. */
static double check_case(gc_case_t *c, dp_rng_t *rng) {
    dp_node_t *node = &c->node;
    dp_arena_t *arena = dp_arena_new(1 << 16);
    dp_status_t st = dp_op_forward(node, arena);
    CHECK(st == DP_OK, "%s: forward failed: %s", c->label, dp_error_message());
    if (st != DP_OK) {
        dp_arena_free(arena);
        return INFINITY;
    }
    size_t out_n = dp_tensor_numel(&node->out);
    float *r = malloc(out_n * sizeof(float));
    for (size_t i = 0; i < out_n; i++) r[i] = randn(rng);
    CHECK(node->out.grad != NULL, "%s: no out.grad although the inputs have grads", c->label);
    if (!node->out.grad) {
        free(r);
        dp_arena_free(arena);
        return INFINITY;
    }
    /* += : for a view (flatten) out.grad is the input's (zeroed) grad; an
     * op's own out.grad is unset until someone writes it */
    dp_grad_prepare(&node->out);
    for (size_t i = 0; i < out_n; i++) node->out.grad[i] += r[i];
    st = dp_op_backward(node, arena);
    CHECK(st == DP_OK, "%s: backward failed: %s", c->label, dp_error_message());

    double worst = 0.0;
    for (int i = 0; i < 3; i++) {
        dp_tensor_t *t = node->in[i];
        if (!t || !t->grad) continue; /* e.g. mse's target */
        size_t n = dp_tensor_numel(t);
        float *analytic = malloc(n * sizeof(float));
        memcpy(analytic, t->grad, n * sizeof(float));
        double input_worst = 0.0;
        size_t worst_j = 0;
        double worst_numeric = 0.0;
        for (size_t j = 0; j < n; j++) {
            float v = t->data[j];
            float up = v + EPS, down = v - EPS;
            t->data[j] = up;
            double loss_up = loss(node, arena, r);
            t->data[j] = down;
            double loss_down = loss(node, arena, r);
            t->data[j] = v;
            double numeric = (loss_up - loss_down) / ((double)up - (double)down);
            double violation = fabs((double)analytic[j] - numeric) / (ATOL + RTOL * fabs(numeric));
            if (violation > input_worst) {
                input_worst = violation;
                worst_j = j;
                worst_numeric = numeric;
            }
        }
        static const char *const names[3] = {"x", "in[1]", "in[2]"};
        CHECK(input_worst <= 1.0, "%s: d%s[%zu] analytic %.6g, numeric %.6g (violation %.3g)", c->label, names[i],
              worst_j, (double)analytic[worst_j], worst_numeric, input_worst);
        if (input_worst > worst) worst = input_worst;
        free(analytic);
    }
    free(r);
    dp_arena_free(arena);
    return worst;
}

int main(void) {
    printf("gradcheck: EPS %g, |analytic - numeric| <= %g + %g |numeric| (violation <= 1 passes)\n", (double)EPS,
           ATOL, RTOL);
    dp_rng_t rng;
    dp_rng_seed(&rng, 20240613);
    for (int kind = 0; kind < DP_OP_COUNT; kind++) {
        const dp_op_def_t *def = &dp_op_table[kind];
        CHECK(def->name && def->forward && def->backward, "dp_op_table[%d] is incomplete", kind);
        if (!def->name || !def->forward || !def->backward) continue;
        CHECK(case_makers[kind] != NULL, "op %s has no gradcheck case: add one to tests/test_gradcheck.c", def->name);
        if (!case_makers[kind]) continue;
        int variants = 0;
        double op_worst = 0.0;
        for (int v = 0;; v++) {
            gc_case_t c;
            memset(&c, 0, sizeof c);
            c.node.kind = (dp_op_kind_t)kind;
            c.node.attr = dp_op_attr_default();
            if (!case_makers[kind](v, &rng, &c)) break;
            double worst = check_case(&c, &rng);
            printf("  %-100s max violation %.3g\n", c.label, worst);
            if (worst > op_worst) op_worst = worst;
            case_free(&c);
            variants++;
        }
        CHECK(variants > 0, "op %s: no gradcheck variants", def->name);
        printf("%s: %d configurations, max violation %.3g\n", def->name, variants, op_worst);
    }
    return testing_finish("test_gradcheck");
}
