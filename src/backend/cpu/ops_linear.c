/* ops_linear.c - DP_OP_LINEAR, forward and backward: y = x W^T + b,
 * matching torch.nn.functional.linear
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.linear.html).
 *
 *   x (N, IN), W (OUT, IN), b (OUT) or NULL, y (N, OUT)
 *   forward   y   = x W^T + b         one matrix product
 *   backward  dx += dy W              (N, OUT) (OUT, IN)
 *             dW += dy^T x            (OUT, N) (N, IN)
 *             db += sum of dy over N
 * Backward adds into the grads of the inputs that have one.
 */
#include <stdbool.h>

#include "dptrain/gemm.h"
#include "dptrain/ops.h"

static dp_status_t linear_check(const dp_node_t *node, int *batch, int *in_features, int *out_features) {
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    char xs[64], ws[64], bs[64];
    if (!x || !w || !x->data || !w->data)
        return dp_fail(DP_ERR_ARG, "linear: needs an input and a weight (in[0], in[1]) with data");
    if (x->ndim != 2)
        return dp_fail(DP_ERR_SHAPE, "linear: input must be (N, IN), found %s", dp_tensor_shape_str(x, xs, sizeof xs));
    if (w->ndim != 2 || w->shape[1] != x->shape[1])
        return dp_fail(DP_ERR_SHAPE, "linear: weight must be (OUT, %d) for input %s, found %s", x->shape[1],
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(w, ws, sizeof ws));
    if (x->shape[0] < 1 || x->shape[1] < 1 || w->shape[0] < 1)
        return dp_fail(DP_ERR_SHAPE, "linear: empty input %s or weight %s", dp_tensor_shape_str(x, xs, sizeof xs),
                       dp_tensor_shape_str(w, ws, sizeof ws));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0] || !b->data))
        return dp_fail(DP_ERR_SHAPE, "linear: bias must be (%d) for weight %s, found %s", w->shape[0],
                       dp_tensor_shape_str(w, ws, sizeof ws), dp_tensor_shape_str(b, bs, sizeof bs));
    *batch = x->shape[0];
    *in_features = x->shape[1];
    *out_features = w->shape[0];
    return DP_OK;
}

dp_status_t dp_linear_forward(dp_node_t *node, dp_arena_t *arena) {
    int N, IN, OUT;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int any_grad = x->grad || w->grad || (b && b->grad);
    int shape[2] = {N, OUT};
    dp_tensor_set_shape(&node->out, 2, shape);
    size_t numel = (size_t)N * OUT;
    node->out.data = dp_arena_floats(arena, numel); /* (N, OUT) */
    node->out.grad = any_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (any_grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "linear: out of arena memory for an output of %zu floats", numel);
    float *y = node->out.data;
    float beta = 0.0f;
    if (b) { /* start from the bias, then add x W^T */
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) y[(size_t)n * OUT + o] = b->data[o];
        beta = 1.0f;
    }
    dp_gemm(false, true, N, OUT, IN, 1.0f, x->data, IN, w->data, IN, beta, y, OUT);
    return DP_OK;
}

dp_status_t dp_linear_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad; /* (N, OUT) */
    if (!dy) return DP_OK;
    int N, IN, OUT;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    if (x->grad) /* dx (N, IN) += dy (N, OUT) W (OUT, IN); = when dx is unset */
        dp_gemm(false, false, N, IN, OUT, 1.0f, dy, OUT, w->data, IN, dp_grad_claim(x) ? 0.0f : 1.0f, x->grad, IN);
    if (w->grad) dp_grad_prepare(w);
    if (b && b->grad) dp_grad_prepare(b);
    if (w->grad) /* dW (OUT, IN) += dy^T (OUT, N) x (N, IN) */
        dp_gemm(true, false, OUT, IN, N, 1.0f, dy, OUT, x->data, IN, 1.0f, w->grad, IN);
    if (b && b->grad) /* db (OUT) += column sums of dy */
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) b->grad[o] += dy[(size_t)n * OUT + o];
    return DP_OK;
}
