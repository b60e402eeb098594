/* ops_elementwise.c - DP_OP_RELU and DP_OP_FLATTEN, forward and backward.
 *
 * relu: y = max(x, 0), torch.relu
 *   (https://pytorch.org/docs/stable/generated/torch.nn.functional.relu.html);
 *   a NaN input stays NaN; backward dx += dy where y > 0 (the gradient at 0
 *   is 0, as PyTorch's threshold_backward).
 * flatten: torch.flatten(x, 1)
 *   (https://pytorch.org/docs/stable/generated/torch.flatten.html), (N, ...)
 *   -> (N, prod of the rest). A view: out.data = in.data, and out.grad =
 *   in.grad (NULL when the input has none), so the gradient that later ops
 *   add into out.grad lands in in.grad directly. Its backward therefore
 *   does nothing; it allocates nothing.
 */
#include "dptrain/ops.h"

dp_status_t dp_relu_forward(dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "relu: needs an input (in[0]) with data");
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    size_t numel = dp_tensor_numel(x);
    node->out.data = dp_arena_floats(arena, numel); /* same shape as x */
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (x->grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "relu: out of arena memory for an output of %zu floats", numel);
    const float *in = x->data;
    float *y = node->out.data;
    for (size_t i = 0; i < numel; i++) y[i] = in[i] < 0.0f ? 0.0f : in[i];
    return DP_OK;
}

dp_status_t dp_relu_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad;
    float *dx = node->in[0]->grad;
    if (!dy || !dx) return DP_OK;
    const float *y = node->out.data;
    size_t numel = dp_tensor_numel(&node->out);
    if (dp_grad_claim(node->in[0]))
        for (size_t i = 0; i < numel; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    else
        for (size_t i = 0; i < numel; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
    return DP_OK;
}

dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena; /* a view allocates nothing */
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "flatten: needs an input (in[0]) with data");
    if (x->ndim < 2)
        return dp_fail(DP_ERR_SHAPE, "flatten: input must have at least 2 dims (N, ...), found %s",
                       dp_tensor_shape_str(x, xs, sizeof xs));
    int features = 1;
    for (int i = 1; i < x->ndim; i++) features *= x->shape[i];
    int shape[2] = {x->shape[0], features};
    dp_tensor_set_shape(&node->out, 2, shape);
    node->out.data = x->data; /* a view: (N, C * D * H * W) over x */
    node->out.grad = x->grad;
    node->out.grad_unset = x->grad_unset;
    node->saved = NULL;
    return DP_OK;
}

/* No arithmetic: out.grad is in.grad (see the top of the file); whether the
 * shared buffer has been written is passed on to the input. */
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    if (node->in[0]->grad) node->in[0]->grad_unset = node->out.grad_unset;
    return DP_OK;
}
