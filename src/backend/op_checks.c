/* op_checks.c - the node checks that the CPU ops and the CUDA module share
 * (op_checks.h): one copy of each message, so that a bad node is refused in
 * the same words on every device. */
#include "op_checks.h"

#include <math.h>

dp_status_t dp_norm_check(const dp_node_t *node, const char *op, int *N, int *C, size_t *S) {
    const dp_tensor_t *x = node->in[0];
    char xs[64], ps[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    if (x->ndim < 2 || x->ndim > 5 || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, C) or (N, C, [D,] [H,] W), none empty, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    *N = x->shape[0];
    *C = x->shape[1];
    *S = dp_tensor_numel(x) / ((size_t)*N * (size_t)*C);
    for (int i = 1; i < 3; i++) {
        const dp_tensor_t *p = node->in[i];
        if (p && (!p->data || p->ndim != 1 || p->shape[0] != *C))
            return dp_fail(DP_ERR_SHAPE, "%s: %s must be (%d) for input %s, found %s", op, i == 1 ? "weight" : "bias",
                           *C, dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(p, ps, sizeof ps));
    }
    if (!(node->attr.eps >= 0.0f) || isinf(node->attr.eps))
        return dp_fail(DP_ERR_ARG, "%s: eps must be finite and >= 0, found %g", op, (double)node->attr.eps);
    return DP_OK;
}

dp_status_t dp_batch_norm_check(const dp_node_t *node, int *N, int *C, size_t *S) {
    DP_TRY(dp_norm_check(node, "batch_norm", N, C, S));
    const dp_op_attr_t *a = &node->attr;
    if (a->training && !(a->momentum >= 0.0f && a->momentum <= 1.0f))
        return dp_fail(DP_ERR_ARG, "batch_norm: momentum must be in [0, 1], found %g", (double)a->momentum);
    if ((a->running_mean == NULL) != (a->running_var == NULL))
        return dp_fail(DP_ERR_ARG, "batch_norm: running_mean and running_var must both be given or both NULL");
    if (!a->training && !a->running_mean)
        return dp_fail(DP_ERR_ARG, "batch_norm: inference (training = 0) needs running_mean and running_var");
    if (a->fuse_relu != 0 && a->fuse_relu != DP_FUSE_RELU && a->fuse_relu != DP_FUSE_RELU6)
        return dp_fail(DP_ERR_ARG, "batch_norm: fuse_relu must be 0, DP_FUSE_RELU or DP_FUSE_RELU6, found %d",
                       a->fuse_relu);
    return DP_OK;
}

dp_status_t dp_masked_check(const dp_node_t *node, const char *op) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    if (x->ndim < 1 || x->shape[0] < 1)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, ...) with N >= 1, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (!(a->dropout_p >= 0.0f && a->dropout_p < 1.0f))
        return dp_fail(DP_ERR_ARG, "%s: dropout_p must be in [0, 1), found %g", op, (double)a->dropout_p);
    if (a->example_offset < 0)
        return dp_fail(DP_ERR_ARG, "%s: example_offset must be >= 0, found %lld", op, (long long)a->example_offset);
    return DP_OK;
}

/* The denominator of a loss: attr.loss_denominator, or `fallback` when it is 0. */
static dp_status_t loss_denominator(const char *op, const dp_op_attr_t *attr, double fallback, double *denominator) {
    float d = attr->loss_denominator;
    if (!(d >= 0.0f) || isinf(d))
        return dp_fail(DP_ERR_ARG, "%s: loss_denominator must be finite and >= 0 (0 means the default), found %g", op,
                       (double)d);
    *denominator = d > 0.0f ? (double)d : fallback;
    return DP_OK;
}

dp_status_t dp_xent_check(const dp_node_t *node, int *N, int *K, double *D) {
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "softmax_xent: needs logits (in[0]) with data");
    if (!node->labels) return dp_fail(DP_ERR_ARG, "softmax_xent: needs labels (node->labels is NULL)");
    if (x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1)
        return dp_fail(DP_ERR_SHAPE, "softmax_xent: logits must be (N, K) with N, K >= 1, found %s",
                       dp_tensor_shape_str(x, xs, sizeof xs));
    const float eps = node->attr.label_smoothing;
    if (!(eps >= 0.0f && eps < 1.0f))
        return dp_fail(DP_ERR_ARG, "softmax_xent: label_smoothing must be in [0, 1), found %g", (double)eps);
    *N = x->shape[0];
    *K = x->shape[1];
    return loss_denominator("softmax_xent", &node->attr, (double)*N, D);
}

dp_status_t dp_mse_check(const dp_node_t *node, double *D) {
    const dp_tensor_t *x = node->in[0], *t = node->in[1];
    char xs[64], ts[64];
    if (!x || !t || !x->data || !t->data)
        return dp_fail(DP_ERR_ARG, "mse: needs a prediction (in[0]) and a target (in[1]) with data");
    int same = x->ndim == t->ndim && dp_tensor_numel(x) > 0;
    for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == t->shape[d];
    if (!same)
        return dp_fail(DP_ERR_SHAPE, "mse: prediction %s and target %s must have the same, non-empty shape",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(t, ts, sizeof ts));
    return loss_denominator("mse", &node->attr, (double)dp_tensor_numel(x), D);
}
