/* conv_shape.c - the checks and sizes of conv and conv_transpose nodes,
 * shared by every backend (conv_shape.h). */
#include "conv_shape.h"

static const char *const dim_names[3] = {"D", "H", "W"};

/* The checks both ops share: tensors present, 3 to 5 dims alike, groups. */
static dp_status_t common_checks(const char *op, const dp_node_t *node) {
    const dp_tensor_t *x = node->in[0], *w = node->in[1];
    char xs[64], ws[64];
    if (!x || !w || !x->data || !w->data)
        return dp_fail(DP_ERR_ARG, "%s: needs an input and a weight (in[0], in[1]) with data", op);
    if (x->ndim < 3 || x->ndim > 5)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (w->ndim != x->ndim)
        return dp_fail(DP_ERR_SHAPE, "%s: weight must have %d dims like the input %s, found %s", op, x->ndim,
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(w, ws, sizeof ws));
    if (node->attr.groups < 1) return dp_fail(DP_ERR_ARG, "%s: groups must be >= 1, found %d", op, node->attr.groups);
    return DP_OK;
}

/* Dim d's kernel, stride, pad, dilation (and output padding) from the
 * weight and the attributes; the defaults for the dims the input lacks. */
static dp_status_t dim_attrs(const char *op, const dp_node_t *node, int d, dp_conv_shape_t *s) {
    const dp_tensor_t *w = node->in[1];
    const dp_op_attr_t *a = &node->attr;
    int i = d - (3 - (s->ndim - 2)); /* index into the attribute arrays, < 0 for missing dims */
    s->kernel[d] = i < 0 ? 1 : w->shape[2 + i];
    s->stride[d] = i < 0 ? 1 : a->stride[i];
    s->pad[d] = i < 0 ? 0 : a->pad[i];
    s->dilation[d] = i < 0 ? 1 : a->dilation[i];
    s->output_padding[d] = i < 0 || node->kind != DP_OP_CONV_TRANSPOSE ? 0 : a->output_padding[i];
    if (s->stride[d] < 1 || s->dilation[d] < 1 || s->pad[d] < 0)
        return dp_fail(DP_ERR_ARG, "%s: along %s stride %d and dilation %d must be >= 1, pad %d >= 0", op,
                       dim_names[d], s->stride[d], s->dilation[d], s->pad[d]);
    return DP_OK;
}

/* The node's input size along dim d (1 for a dim it lacks). */
static int input_size(const dp_conv_shape_t *s, const dp_tensor_t *x, int d) {
    int i = d - (3 - (s->ndim - 2));
    return i < 0 ? 1 : x->shape[2 + i];
}

dp_status_t dp_conv_shape(const dp_node_t *node, dp_conv_shape_t *s) {
    DP_TRY(common_checks("conv", node));
    if (node->attr.fuse_relu != 0 && node->attr.fuse_relu != DP_FUSE_RELU)
        return dp_fail(DP_ERR_ARG, "conv: fuse_relu must be 0 or DP_FUSE_RELU, found %d (use a relu6 op)",
                       node->attr.fuse_relu);
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    char xs[64], ws[64], bs[64];
    *s = (dp_conv_shape_t){.ndim = x->ndim, .batch = x->shape[0], .in_ch = x->shape[1], .out_ch = w->shape[0],
                           .groups = node->attr.groups};
    if (s->batch < 1 || s->in_ch < 1 || s->out_ch < 1)
        return dp_fail(DP_ERR_SHAPE, "conv: empty input %s or weight %s", dp_tensor_shape_str(x, xs, sizeof xs),
                       dp_tensor_shape_str(w, ws, sizeof ws));
    if (s->in_ch % s->groups != 0 || s->out_ch % s->groups != 0)
        return dp_fail(DP_ERR_SHAPE, "conv: groups %d must divide input channels %d and output channels %d",
                       s->groups, s->in_ch, s->out_ch);
    if (w->shape[1] != s->in_ch / s->groups)
        return dp_fail(DP_ERR_SHAPE,
                       "conv: weight %s has %d input channels per group, input %s has %d channels / %d groups",
                       dp_tensor_shape_str(w, ws, sizeof ws), w->shape[1], dp_tensor_shape_str(x, xs, sizeof xs),
                       s->in_ch, s->groups);
    if (b && (b->ndim != 1 || b->shape[0] != s->out_ch || !b->data))
        return dp_fail(DP_ERR_SHAPE, "conv: bias must be (%d) for weight %s, found %s", s->out_ch,
                       dp_tensor_shape_str(w, ws, sizeof ws), dp_tensor_shape_str(b, bs, sizeof bs));
    for (int d = 0; d < 3; d++) {
        DP_TRY(dim_attrs("conv", node, d, s));
        s->in_size[d] = input_size(s, x, d);
        if (s->kernel[d] < 1 || s->in_size[d] < 1)
            return dp_fail(DP_ERR_SHAPE, "conv: empty input %s or weight %s", dp_tensor_shape_str(x, xs, sizeof xs),
                           dp_tensor_shape_str(w, ws, sizeof ws));
        s->out_size[d] = dp_conv_out_size(s->in_size[d], s->kernel[d], s->stride[d], s->pad[d], s->dilation[d]);
        if (s->out_size[d] < 1)
            return dp_fail(DP_ERR_SHAPE,
                           "conv: output size along %s is %d < 1 (input %s, kernel %d, stride %d, pad %d, dilation %d)",
                           dim_names[d], s->out_size[d], dp_tensor_shape_str(x, xs, sizeof xs), s->kernel[d],
                           s->stride[d], s->pad[d], s->dilation[d]);
    }
    return DP_OK;
}

dp_status_t dp_conv_transpose_shape(const dp_node_t *node, dp_conv_shape_t *s) {
    DP_TRY(common_checks("conv_transpose", node));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    char xs[64], ws[64], bs[64];
    if (a->fuse_relu) return dp_fail(DP_ERR_ARG, "conv_transpose: fuse_relu is not supported (use a relu op)");
    int in_ch = x->shape[1];
    if (x->shape[0] < 1 || in_ch < 1 || w->shape[1] < 1)
        return dp_fail(DP_ERR_SHAPE, "conv_transpose: empty input %s or weight %s",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(w, ws, sizeof ws));
    if (w->shape[0] != in_ch || in_ch % a->groups != 0)
        return dp_fail(DP_ERR_SHAPE,
                       "conv_transpose: weight %s must be (C_in, C_out/groups, k...) with C_in = %d (input %s) "
                       "divisible by groups %d",
                       dp_tensor_shape_str(w, ws, sizeof ws), in_ch, dp_tensor_shape_str(x, xs, sizeof xs), a->groups);
    int out_ch = w->shape[1] * a->groups;
    if (b && (b->ndim != 1 || b->shape[0] != out_ch || !b->data))
        return dp_fail(DP_ERR_SHAPE, "conv_transpose: bias must be (%d) for weight %s and %d groups, found %s", out_ch,
                       dp_tensor_shape_str(w, ws, sizeof ws), a->groups, dp_tensor_shape_str(b, bs, sizeof bs));
    /* the adjoint convolution reads our output and writes our input */
    *s = (dp_conv_shape_t){.ndim = x->ndim, .batch = x->shape[0], .in_ch = out_ch, .out_ch = in_ch,
                           .groups = a->groups};
    for (int d = 0; d < 3; d++) {
        DP_TRY(dim_attrs("conv_transpose", node, d, s));
        int in = input_size(s, x, d), out_pad = s->output_padding[d];
        int limit = s->stride[d] > s->dilation[d] ? s->stride[d] : s->dilation[d];
        if (out_pad < 0 || out_pad >= limit)
            return dp_fail(DP_ERR_ARG,
                           "conv_transpose: output_padding %d along %s must be >= 0 and smaller than stride %d "
                           "or dilation %d",
                           out_pad, dim_names[d], s->stride[d], s->dilation[d]);
        if (s->kernel[d] < 1 || in < 1)
            return dp_fail(DP_ERR_SHAPE, "conv_transpose: empty input %s or weight %s",
                           dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(w, ws, sizeof ws));
        long out = ((long)in - 1) * s->stride[d] - 2L * s->pad[d] + (long)s->dilation[d] * (s->kernel[d] - 1) +
                   out_pad + 1;
        if (out < 1 || out > (1L << 30))
            return dp_fail(DP_ERR_SHAPE,
                           "conv_transpose: output size along %s is %ld, must be >= 1 (input %s, kernel %d, stride %d, "
                           "pad %d, dilation %d, output_padding %d)",
                           dim_names[d], out, dp_tensor_shape_str(x, xs, sizeof xs), s->kernel[d], s->stride[d],
                           s->pad[d], s->dilation[d], out_pad);
        s->in_size[d] = (int)out;
        s->out_size[d] = in;
    }
    return DP_OK;
}
