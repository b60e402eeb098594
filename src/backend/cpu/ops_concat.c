/* ops_concat.c - DP_OP_CONCAT, forward and backward: two tensors joined
 * along the channels, torch.cat([a, b], dim=1)
 * (https://pytorch.org/docs/stable/generated/torch.cat.html): DenseNet's
 * concatenation of a block's features (Darknet's [route] of several layers).
 *
 * a (N, Ca, ...) and b (N, Cb, ...) with the same other dims give
 * y (N, Ca + Cb, ...): each example's a, then its b. Backward: da (+)= the
 * first Ca channels of dy, db (+)= the others (copies: exact). Nothing is
 * saved.
 */
#include <string.h>

#include "dptrain/ops.h"

/* Whether a and b differ in dim 1 alone (at least 2 dims). */
static int concat_fits(const dp_tensor_t *a, const dp_tensor_t *b) {
    if (a->ndim < 2 || b->ndim != a->ndim || a->shape[0] != b->shape[0]) return 0;
    for (int d = 2; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

dp_status_t dp_concat_forward(dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *a = node->in[0], *b = node->in[1];
    char as[64], bs[64];
    if (!a || !b || !a->data || !b->data)
        return dp_fail(DP_ERR_ARG, "concat: needs two inputs (in[0], in[1]) with data");
    if (!concat_fits(a, b))
        return dp_fail(DP_ERR_SHAPE, "concat: the inputs must differ in their channels alone, found %s and %s",
                       dp_tensor_shape_str(a, as, sizeof as), dp_tensor_shape_str(b, bs, sizeof bs));
    int shape[DP_MAX_DIMS];
    memcpy(shape, a->shape, sizeof(int) * (size_t)a->ndim);
    shape[1] = a->shape[1] + b->shape[1];
    dp_tensor_set_shape(&node->out, a->ndim, shape);
    size_t numel = dp_tensor_numel(&node->out);
    int want_grad = a->grad || b->grad;
    node->out.data = dp_arena_floats(arena, numel); /* (N, Ca + Cb, ...) */
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "concat: out of arena memory for an output of %zu floats", numel);
    size_t n = (size_t)a->shape[0], na = dp_tensor_numel(a) / n, nb = dp_tensor_numel(b) / n;
    for (size_t i = 0; i < n; i++) {
        memcpy(node->out.data + i * (na + nb), a->data + i * na, sizeof(float) * na);
        memcpy(node->out.data + i * (na + nb) + na, b->data + i * nb, sizeof(float) * nb);
    }
    return DP_OK;
}

/* g (+)= each example's `len` values of dy from `offset` on. */
static void take(float *g, int write, const float *dy, size_t n, size_t len, size_t offset, size_t row) {
    for (size_t i = 0; i < n; i++) {
        const float *src = dy + i * row + offset;
        float *dst = g + i * len;
        if (write) memcpy(dst, src, sizeof(float) * len);
        else
            for (size_t j = 0; j < len; j++) dst[j] += src[j];
    }
}

dp_status_t dp_concat_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad;
    dp_tensor_t *a = node->in[0], *b = node->in[1];
    if (!dy) return DP_OK;
    size_t n = (size_t)a->shape[0], na = dp_tensor_numel(a) / n, nb = dp_tensor_numel(b) / n;
    if (a->grad) take(a->grad, dp_grad_claim(a), dy, n, na, 0, na + nb);
    if (b->grad) take(b->grad, dp_grad_claim(b), dy, n, nb, na, na + nb);
    return DP_OK;
}
