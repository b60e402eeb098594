/* ops_scale_channels.c - DP_OP_SCALE_CHANNELS, forward and backward: the
 * channel scaling of a squeeze-excitation block (torchvision's
 * SqueezeExcitation, `scale * input`; Darknet's [scale_channels]) and
 * ConvNeXt's layer scale (`self.layer_scale * self.block(input)`, a
 * learned (C, 1, 1) factor shared by the batch).
 *
 * y = x * s with x (N, C, ...) and s (N, C, 1, ...) - one factor per
 * example and channel - or (1, C, 1, ...) - one per channel, broadcast over
 * the batch too - as torch.mul's broadcasting
 * (https://pytorch.org/docs/stable/generated/torch.mul.html). Backward:
 * dx (+)= dy s; ds (+)= the sum over the spatial dims (and, for a (1, C,
 * ...) scale, the examples) of dy x (summed in double, in index order, then
 * rounded once: the same bits every run). Nothing is saved: x and s stay
 * on the tape.
 */
#include "dptrain/ops.h"

/* Whether s is (N, C, 1, ...) or (1, C, 1, ...) for x (N, C, ...). */
static int scale_fits(const dp_tensor_t *x, const dp_tensor_t *s) {
    if (x->ndim < 2 || s->ndim != x->ndim || (s->shape[0] != x->shape[0] && s->shape[0] != 1) ||
        s->shape[1] != x->shape[1])
        return 0;
    for (int d = 2; d < s->ndim; d++)
        if (s->shape[d] != 1) return 0;
    return 1;
}

/* The factor of (example, channel) plane p: s[p], or s[p % C] broadcast over the batch. */
static inline size_t scale_index(size_t p, size_t channels, int shared) { return shared ? p % channels : p; }

dp_status_t dp_scale_channels_forward(dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0], *s = node->in[1];
    char xs[64], ss[64];
    if (!x || !s || !x->data || !s->data)
        return dp_fail(DP_ERR_ARG, "scale_channels: needs two inputs (in[0] x, in[1] s) with data");
    if (!scale_fits(x, s))
        return dp_fail(DP_ERR_SHAPE, "scale_channels: the scale must be (N, C, 1, 1) or (1, C, 1, 1) for an input %s, "
                       "found %s", dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(s, ss, sizeof ss));
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    size_t numel = dp_tensor_numel(x);
    int want_grad = x->grad || s->grad;
    node->out.data = dp_arena_floats(arena, numel); /* (N, C, ...) as x */
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "scale_channels: out of arena memory for an output of %zu floats", numel);
    size_t channels = (size_t)x->shape[1], planes = (size_t)x->shape[0] * channels, plane = numel / planes;
    int shared = s->shape[0] != x->shape[0]; /* (1, C, 1, ...) for N > 1 */
    const float *in = x->data, *scale = s->data;
    float *y = node->out.data;
    for (size_t p = 0; p < planes; p++) {
        const float f = scale[scale_index(p, channels, shared)];
        for (size_t i = p * plane; i < (p + 1) * plane; i++) y[i] = in[i] * f;
    }
    return DP_OK;
}

dp_status_t dp_scale_channels_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad;
    dp_tensor_t *x = node->in[0], *s = node->in[1];
    if (!dy) return DP_OK;
    size_t channels = (size_t)x->shape[1], planes = (size_t)x->shape[0] * channels;
    size_t plane = dp_tensor_numel(x) / planes;
    int shared = s->shape[0] != x->shape[0];
    if (x->grad) {
        float *dx = x->grad;
        const float *scale = s->data;
        int write = dp_grad_claim(x);
        for (size_t p = 0; p < planes; p++) {
            const float f = scale[scale_index(p, channels, shared)];
            for (size_t i = p * plane; i < (p + 1) * plane; i++) dx[i] = write ? dy[i] * f : dx[i] + dy[i] * f;
        }
    }
    if (s->grad) {
        float *ds = s->grad;
        const float *in = x->data;
        int write = dp_grad_claim(s);
        size_t factors = dp_tensor_numel(s), step = shared ? channels : planes; /* planes of one factor: f, f + step, ... */
        for (size_t f = 0; f < factors; f++) {
            double sum = 0.0;
            for (size_t p = f; p < planes; p += step)
                for (size_t i = p * plane; i < (p + 1) * plane; i++) sum += (double)dy[i] * in[i];
            ds[f] = write ? (float)sum : ds[f] + (float)sum;
        }
    }
    return DP_OK;
}
