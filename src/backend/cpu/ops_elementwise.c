/* ops_elementwise.c - element-wise ops, forward and backward: DP_OP_RELU,
 * DP_OP_RELU6, DP_OP_HARDSWISH, DP_OP_HARDSIGMOID, DP_OP_GELU, DP_OP_SILU,
 * DP_OP_SIGMOID, DP_OP_TANH, DP_OP_ADD and DP_OP_FLATTEN.
 *
 * relu: y = max(x, 0), torch.relu
 *   (https://pytorch.org/docs/stable/generated/torch.nn.functional.relu.html);
 *   a NaN input stays NaN; backward dx += dy where y > 0 (the gradient at 0
 *   is 0, as PyTorch's threshold_backward).
 * relu6: y = min(max(x, 0), 6), torch.nn.functional.relu6
 *   (https://pytorch.org/docs/stable/generated/torch.nn.functional.relu6.html,
 *   hardtanh(x, 0, 6)); a NaN input stays NaN; backward dx += dy where
 *   0 < y < 6, which is 0 < x < 6 (PyTorch's hardtanh_backward: no gradient
 *   at either kink).
 * hardswish: y = x min(max(x + 3, 0), 6) / 6, torch.nn.functional.hardswish
 *   (https://pytorch.org/docs/stable/generated/torch.nn.Hardswish.html, aten's
 *   hardswish_kernel: (x * clamp) / 6 in that order); a NaN stays NaN.
 *   Backward from x (y does not determine x), aten's hardswish_backward:
 *   0 where x < -3, dy (x / 3 + 0.5) where -3 <= x <= 3 (so -dy / 2 at -3 and
 *   3 dy / 2 at 3), dy above 3 (and for a NaN x).
 * hardsigmoid: y = min(max(x + 3, 0), 6) / 6, torch.nn.functional.hardsigmoid
 *   (https://pytorch.org/docs/stable/generated/torch.nn.Hardsigmoid.html); a
 *   NaN stays NaN. Backward from x, aten's hardsigmoid_backward: dy / 6 where
 *   -3 < x < 3, else 0 (no gradient at either kink, nor for a NaN).
 * gelu: y = x (1 + erf(x / sqrt 2)) / 2, torch.nn.GELU() (approximate='none',
 *   https://pytorch.org/docs/stable/generated/torch.nn.GELU.html; aten's
 *   GeluKernel: x * 0.5 * (1 + erf(x * M_SQRT1_2))), computed as x cdf with
 *   cdf = erfc(-x / sqrt 2) / 2 in float (so that the tail x << 0 keeps its
 *   relative accuracy, which 1 + erf loses).
 *   Backward from x, aten's GeluBackwardKernel: dy (cdf + x pdf), cdf =
 *   (1 + erf(x / sqrt 2)) / 2, pdf = exp(-x^2 / 2) / sqrt(2 pi).
 * silu: y = x / (1 + exp(-x)), torch.nn.functional.silu
 *   (https://pytorch.org/docs/stable/generated/torch.nn.SiLU.html, aten's
 *   silu_kernel in that form: -0 for large negative x, a NaN stays NaN).
 *   Backward from x, aten's silu_backward_kernel: dy s (1 + x (1 - s)) with
 *   s = 1 / (1 + exp(-x)).
 * sigmoid: y = 1 / (1 + exp(-x)), torch.sigmoid
 *   (https://pytorch.org/docs/stable/generated/torch.sigmoid.html); for
 *   x < 0 computed as e / (1 + e) with e = exp(x), so that no exp
 *   overflows: exact 0 / 1 limits for large |x|, no NaN. Backward
 *   dx += dy y (1 - y).
 * gelu, silu and sigmoid run in the CPU backend's per-ISA loops
 *   (kernels/loops_impl.h), their exp and erfc branch-free float code
 *   (kernels/loops_math.h: a polynomial after range reduction, 2^n from
 *   exponent bits; erfc = e^(-a^2) t Q(t)) that the compiler vectorizes,
 *   the same bits on every ISA. Their largest errors over every 1/1024 in
 *   [-100, 100] (tests/test_cpu_activations.c: ulps of the exact value, a
 *   gradient's in ulps of its larger term): exp 0.96 ulp, erf 9.5e-8
 *   absolute; silu 2.05 and its gradient 16.4 ulp, as with libm's expf
 *   (aten's formulas' own rounding: 1 - s near 1); sigmoid 1.97 ulp; gelu
 *   10.9 and its gradient 11.6 ulp, the most at subnormal results (x <
 *   -13; the double 1 + erf(x / sqrt 2) used before cancels in that tail:
 *   1.7e7 ulp off over the same sweep).
 * tanh: torch.tanh (https://pytorch.org/docs/stable/generated/torch.tanh.html),
 *   libm's tanhf (saturates to +-1 without overflow). Backward
 *   dx += dy (1 - y^2).
 * add: y = x + z for two inputs of the same shape (skip connections); with
 *   attr.fuse_relu (DP_FUSE_RELU only) y = relu(x + z) in the same pass and
 *   the gradient is masked by y > 0. Backward adds the (masked) dy into both inputs; the
 *   two inputs may be the same tensor (x + x gets 2 dy).
 * flatten: torch.flatten(x, 1)
 *   (https://pytorch.org/docs/stable/generated/torch.flatten.html), (N, ...)
 *   -> (N, prod of the rest). A view: out.data = in.data, and out.grad =
 *   in.grad (NULL when the input has none), so the gradient that later ops
 *   add into out.grad lands in in.grad directly. Its backward therefore
 *   does nothing; it allocates nothing.
 *
 * The backward of relu, relu6, hardswish, hardsigmoid, gelu, silu, sigmoid, tanh and add
 * writes an input grad that is still unset (dp_grad_claim) and adds
 * otherwise. Nothing is saved: the gradients are functions of y, or of x
 * (hardswish, hardsigmoid, gelu, silu), which the tape keeps.
 */
#include <math.h>

#include "dptrain/ops.h"
#include "kernels/kernels.h"

/* Output of an element-wise op: x's shape, out.data, and out.grad when
 * `want_grad`. */
static dp_status_t elementwise_output(dp_node_t *node, const char *op, int want_grad, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    size_t numel = dp_tensor_numel(x);
    node->out.data = dp_arena_floats(arena, numel); /* same shape as x */
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "%s: out of arena memory for an output of %zu floats", op, numel);
    return DP_OK;
}

typedef enum {
    UNARY_RELU,
    UNARY_SIGMOID,
    UNARY_TANH,
    UNARY_RELU6,
    UNARY_HARDSWISH,
    UNARY_HARDSIGMOID,
    UNARY_SILU,
    UNARY_GELU
} unary_kind_t;
static const char *const unary_names[] = {"relu",      "sigmoid",     "tanh", "relu6",
                                          "hardswish", "hardsigmoid", "silu", "gelu"};

/* min(max(v, 0), 6) as std::min(std::max(v, 0), 6): a NaN passes through */
static inline float clamp6(float v) { return v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v; }

static inline __attribute__((always_inline)) dp_status_t unary_forward(dp_node_t *node, dp_arena_t *arena, unary_kind_t kind) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", unary_names[kind]);
    DP_TRY(elementwise_output(node, unary_names[kind], x->grad != NULL, arena));
    size_t numel = dp_tensor_numel(x);
    const float *in = x->data;
    float *y = node->out.data;
    switch (kind) {
    case UNARY_RELU:
        for (size_t i = 0; i < numel; i++) y[i] = in[i] < 0.0f ? 0.0f : in[i];
        break;
    case UNARY_SIGMOID: /* e^-|x| in (0, 1]: never overflows */
        dp_cpu_kernels()->loops->sigmoid(y, in, numel);
        break;
    case UNARY_TANH:
        for (size_t i = 0; i < numel; i++) y[i] = tanhf(in[i]);
        break;
    case UNARY_RELU6: /* NaN fails both tests and passes through */
        for (size_t i = 0; i < numel; i++) y[i] = clamp6(in[i]);
        break;
    case UNARY_HARDSWISH:
        for (size_t i = 0; i < numel; i++) y[i] = in[i] * clamp6(in[i] + 3.0f) / 6.0f;
        break;
    case UNARY_HARDSIGMOID:
        for (size_t i = 0; i < numel; i++) y[i] = clamp6(in[i] + 3.0f) / 6.0f;
        break;
    case UNARY_GELU:
        dp_cpu_kernels()->loops->gelu(y, in, numel);
        break;
    case UNARY_SILU: /* aten's silu_kernel: x / (1 + exp(-x)) */
        dp_cpu_kernels()->loops->silu(y, in, numel);
        break;
    }
    return DP_OK;
}

/* f'(x) dy, with f' written in terms of y = f(x); hardswish and
 * hardsigmoid are passed x instead (silu and gelu: the loops' own). */
static inline float unary_grad(unary_kind_t kind, float y, float dy) {
    switch (kind) {
    case UNARY_RELU: return y > 0.0f ? dy : 0.0f;
    case UNARY_SIGMOID: return dy * y * (1.0f - y);
    case UNARY_TANH: return dy * (1.0f - y * y);
    case UNARY_RELU6: return y > 0.0f && y < 6.0f ? dy : 0.0f;
    case UNARY_HARDSWISH: /* y is x here */
        return y < -3.0f ? 0.0f : y <= 3.0f ? dy * (y / 3.0f + 0.5f) : dy;
    case UNARY_HARDSIGMOID: /* y is x here */
        return y > -3.0f && y < 3.0f ? dy * (1.0f / 6.0f) : 0.0f;
    case UNARY_GELU: /* unary_backward calls the loops */
    case UNARY_SILU: break;
    }
    return 0.0f;
}

/* dx = (or +=) f'(x) dy. Always inlined, so that each op's copy has a
 * constant kind and its loops no switch. */
static inline __attribute__((always_inline)) dp_status_t unary_backward(dp_node_t *node, unary_kind_t kind) {
    const float *dy = node->out.grad;
    float *dx = node->in[0]->grad;
    if (!dy || !dx) return DP_OK;
    const int from_x =
        kind == UNARY_HARDSWISH || kind == UNARY_HARDSIGMOID || kind == UNARY_SILU || kind == UNARY_GELU;
    const float *y = from_x ? node->in[0]->data : node->out.data;
    size_t numel = dp_tensor_numel(&node->out);
    if (kind == UNARY_SILU || kind == UNARY_GELU) { /* dx written when claimed, else added to */
        const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
        (kind == UNARY_SILU ? loops->silu_backward : loops->gelu_backward)(dx, y, dy, numel,
                                                                           dp_grad_claim(node->in[0]));
        return DP_OK;
    }
    if (dp_grad_claim(node->in[0]))
        for (size_t i = 0; i < numel; i++) dx[i] = unary_grad(kind, y[i], dy[i]);
    else
        for (size_t i = 0; i < numel; i++) dx[i] += unary_grad(kind, y[i], dy[i]);
    return DP_OK;
}

dp_status_t dp_relu_forward(dp_node_t *node, dp_arena_t *arena) { return unary_forward(node, arena, UNARY_RELU); }
dp_status_t dp_relu_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_RELU);
}
dp_status_t dp_relu6_forward(dp_node_t *node, dp_arena_t *arena) { return unary_forward(node, arena, UNARY_RELU6); }
dp_status_t dp_relu6_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_RELU6);
}
dp_status_t dp_hardswish_forward(dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(node, arena, UNARY_HARDSWISH);
}
dp_status_t dp_hardswish_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_HARDSWISH);
}
dp_status_t dp_hardsigmoid_forward(dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(node, arena, UNARY_HARDSIGMOID);
}
dp_status_t dp_hardsigmoid_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_HARDSIGMOID);
}
dp_status_t dp_gelu_forward(dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(node, arena, UNARY_GELU);
}
dp_status_t dp_gelu_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_GELU);
}
dp_status_t dp_silu_forward(dp_node_t *node, dp_arena_t *arena) { return unary_forward(node, arena, UNARY_SILU); }
dp_status_t dp_silu_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_SILU);
}
dp_status_t dp_sigmoid_forward(dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(node, arena, UNARY_SIGMOID);
}
dp_status_t dp_sigmoid_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_SIGMOID);
}
dp_status_t dp_tanh_forward(dp_node_t *node, dp_arena_t *arena) { return unary_forward(node, arena, UNARY_TANH); }
dp_status_t dp_tanh_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(node, UNARY_TANH);
}

dp_status_t dp_add_forward(dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0], *z = node->in[1];
    char xs[64], zs[64];
    if (!x || !z || !x->data || !z->data)
        return dp_fail(DP_ERR_ARG, "add: needs two inputs (in[0], in[1]) with data");
    int same = x->ndim == z->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == z->shape[d];
    if (!same)
        return dp_fail(DP_ERR_SHAPE, "add: inputs must have the same shape, found %s and %s",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(z, zs, sizeof zs));
    if (node->attr.fuse_relu != 0 && node->attr.fuse_relu != DP_FUSE_RELU)
        return dp_fail(DP_ERR_ARG, "add: fuse_relu must be 0 or DP_FUSE_RELU, found %d", node->attr.fuse_relu);
    if (node->attr.in_place) { /* y over x: each element read before it is written */
        dp_tensor_set_shape(&node->out, x->ndim, x->shape);
        node->out.data = x->data;
        node->out.grad = NULL;
        node->saved = NULL;
        if ((x->grad || z->grad) && !dp_grad_alloc(arena, &node->out, dp_tensor_numel(x)))
            return dp_fail(DP_ERR_NOMEM, "add: out of arena memory for a gradient of %zu floats", dp_tensor_numel(x));
    } else {
        DP_TRY(elementwise_output(node, "add", x->grad || z->grad, arena));
    }
    size_t numel = dp_tensor_numel(x);
    const float *a = x->data, *b = z->data;
    float *y = node->out.data;
    if (node->attr.fuse_relu)
        for (size_t i = 0; i < numel; i++) {
            float v = a[i] + b[i];
            y[i] = v < 0.0f ? 0.0f : v; /* as the relu op */
        }
    else
        for (size_t i = 0; i < numel; i++) y[i] = a[i] + b[i];
    return DP_OK;
}

dp_status_t dp_add_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    float *dy = node->out.grad;
    if (!dy) return DP_OK;
    size_t numel = dp_tensor_numel(&node->out);
    if (node->attr.fuse_relu) { /* relu'(v) = [y > 0]; out.grad is ours and complete: mask it in place */
        const float *y = node->out.data;
        for (size_t i = 0; i < numel; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
    for (int k = 0; k < 2; k++) {
        dp_tensor_t *t = node->in[k];
        if (!t->grad) continue;
        float *dx = t->grad;
        if (dp_grad_claim(t))
            for (size_t i = 0; i < numel; i++) dx[i] = dy[i];
        else
            for (size_t i = 0; i < numel; i++) dx[i] += dy[i];
    }
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
