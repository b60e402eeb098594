/* ops_cuda.c - the op table of a CUDA device (ops.h semantics, on device
 * pointers): conv and conv_transpose from conv_cuda.c (cuDNN), linear with cuBLAS
 * (pedantic FP32; --precision bf16: cublasGemmEx on bf16 copies of x, W
 * and dy with FP32 compute and FP32 results, the copies of x and W made
 * once per step and kept for the backward), ReLU, max and average pooling (1-D to 3-D), softmax
 * cross-entropy, sigmoid, tanh, relu6, hardswish, hardsigmoid, silu, add (+ fused ReLU),
 * a squeeze-excitation block's channel scaling (NCHW FP32 only), dropout and drop path (the CPU's
 * counter-based mask: the same elements dropped), global average pooling
 * and MSE with own kernels (the *.cu files); flatten is the CPU's (a view: no
 * data touched); batch norm with own kernels (double sums per channel spread
 * over the grid; SyncBatchNorm's statistics go through the host hook: a
 * download, the sum, an upload). Every op of the table is done.
 *
 * An op's grad of an input is written when still unset (dp_grad_claim) and
 * added to otherwise, as the CPU ops do. Labels (softmax_xent) are device
 * memory, as load_batch leaves them; a label outside [0, K) gives a NaN loss
 * (the host cannot check device labels without a synchronisation).
 *
 * Channels-last (set_channels_last, layout_cuda.h): relu, sigmoid, tanh, relu6,
 * hardswish, hardsigmoid, silu, add, batch norm (over an (N H W, C) matrix), max and average pooling,
 * global average pooling and dropout also take NHWC inputs and keep their
 * layout; the wrappers convert the inputs of the others (and of flatten,
 * now a wrapper of the CPU's view) to NCHW and their gradients back.
 *
 * --precision bf16 (layout_cuda.h): the same ops (and conv) store their
 * outputs of 3 or more dims in bf16 (dp_cuda_act_output) and read inputs
 * in either format (the kernels' `bf16` bits, from the marks:
 * dp_cuda_bf16_bits); their backwards read the saved bf16 data (ReLU's and
 * sigmoid's y, batch norm's x) and write FP32 gradients. Linear, flatten,
 * the losses and conv_transpose get FP32 copies from the wrappers.
 *
 * Ops have no context argument, so each GPU gets its own table of small
 * wrappers (OP_WRAPPERS) that select its context, take its lock, convert
 * inputs to the op's layouts and report a failure of any asynchronous work
 * queued so far. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../op_checks.h"
#include "cuda_context.h"
#include "cuda_parts.h"
#include "kernels.h"
#include "layout_cuda.h"
#include "ops_cuda_common.h"
#include "precision.h"
#include "dptrain/ops.h"

/* The CPU's flatten: a view over x, no arithmetic (ops_elementwise.c). */
dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena);

static const float one = 1.0f;

/* --- linear: cuBLAS is column-major, so row-major y (N, OUT) is y^T ---------------- */

static dp_status_t cublas_status(dp_cuda_ctx_t *c, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return DP_OK;
    dp_status_t status = s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_NOT_SUPPORTED ? DP_ERR_ARG
                         : s == CUBLAS_STATUS_ALLOC_FAILED                                    ? DP_ERR_NOMEM
                                                                                              : DP_ERR_DEVICE;
    return dp_fail(status, "%s: %s: cuBLAS status %d", c->name, what, (int)s);
}

static dp_status_t linear_check(const dp_node_t *node, int *N, int *IN, int *OUT) {
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    char xs[64], ws[64];
    if (!x || !w || !x->data || !w->data) return dp_fail(DP_ERR_ARG, "linear: needs an input and a weight with data");
    if (x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1] || x->shape[0] < 1 || x->shape[1] < 1 ||
        w->shape[0] < 1)
        return dp_fail(DP_ERR_SHAPE, "linear: weight %s does not fit input %s (expected (OUT, IN) and (N, IN))",
                       dp_tensor_shape_str(w, ws, sizeof ws), dp_tensor_shape_str(x, xs, sizeof xs));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0] || !b->data))
        return dp_fail(DP_ERR_SHAPE, "linear: bias must be (%d)", w->shape[0]);
    *N = x->shape[0], *IN = x->shape[1], *OUT = w->shape[0];
    return DP_OK;
}

/* C (m, n) = op(A) op(B) + beta C, column-major, C FP32: cublasSgemm on
 * FP32 operands, or with --precision bf16 cublasGemmEx on bf16 ones (A, B
 * then uint16_t) with FP32 compute. */
static cublasStatus_t gemm(dp_cuda_ctx_t *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    if (c->precision != DP_PRECISION_BF16)
        return cublasSgemm(c->cublas, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc);
    return cublasGemmEx(c->cublas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F,
                        ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* The operands of a product: x's and W's data, or in bf16 their copies
 * (made by the forward, kept for the backward). */
static dp_status_t linear_operands(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, const void **x,
                                   const void **w) {
    *x = node->in[0]->data, *w = node->in[1]->data;
    if (c->precision != DP_PRECISION_BF16) return DP_OK;
    const uint16_t *xb, *wb;
    DP_TRY(dp_cuda_bf16_operands(c, arena, node, *x, 0, dp_tensor_numel(node->in[0]), *w, dp_tensor_numel(node->in[1]),
                                 &xb, &wb, "linear"));
    *x = xb, *w = wb;
    return DP_OK;
}

static dp_status_t linear_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    int N = 0, IN = 0, OUT = 0;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[2] = {N, OUT};
    DP_TRY(dp_cuda_output(node, "linear", 2, shape, x->grad || w->grad || (b && b->grad), arena));
    float beta = 0.0f;
    if (b) { /* start from the bias, then add x W^T (as the CPU op) */
        DP_TRY(dp_cuda_launch(c, dp_cuda_fill_rows(c->stream, node->out.data, b->data, N, OUT), "linear bias"));
        beta = 1.0f;
    }
    const void *xa, *wa;
    DP_TRY(linear_operands(c, node, arena, &xa, &wa));
    /* y^T (OUT, N) = W (OUT, IN) x^T: W is column-major (IN, OUT), transposed */
    return cublas_status(c, gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, wa, IN, xa, IN, beta, node->out.data, OUT),
                         "linear forward");
}

static dp_status_t linear_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const float *dy = node->out.grad; /* (N, OUT) */
    if (!dy) return DP_OK;
    int N = 0, IN = 0, OUT = 0;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const void *xa = NULL, *wa = NULL, *dya = dy;
    if (x->grad || w->grad) {
        DP_TRY(linear_operands(c, node, arena, &xa, &wa));
        if (c->precision == DP_PRECISION_BF16) {
            const uint16_t *dyb;
            DP_TRY(dp_cuda_bf16_copy(c, arena, dy, (size_t)N * OUT, &dyb, "linear gradient"));
            dya = dyb;
        }
    }
    if (x->grad) { /* dx^T (IN, N) = W^T dy^T: W column-major (IN, OUT), dy^T (OUT, N) */
        const float beta = dp_grad_claim(x) ? 0.0f : 1.0f;
        DP_TRY(cublas_status(c, gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, IN, N, OUT, wa, IN, dya, OUT, beta, x->grad, IN),
                             "linear input gradient"));
    }
    if (w->grad) { /* dW^T (IN, OUT) = x^T (IN, N) dy (N, OUT) */
        const float beta = dp_grad_claim(w) ? 0.0f : 1.0f;
        DP_TRY(cublas_status(c, gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, IN, OUT, N, xa, IN, dya, OUT, beta, w->grad, IN),
                             "linear weight gradient"));
    }
    if (b && b->grad) /* column sums of dy: dy is (N, OUT, 1) */
        DP_TRY(dp_cuda_op_bias_grad(c, arena, dy, NULL, NULL, 0, b, N, OUT, 1, "linear bias gradient"));
    return DP_OK;
}

/* The layout of an output that keeps its input's (an op of either layout). */
static int same_layout(const dp_tensor_t *x) { return dp_cuda_is_nhwc(x) ? DP_CUDA_NHWC : DP_CUDA_NCHW; }

/* --- relu ------------------------------------------------------------------------ */

static dp_status_t relu_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "relu: needs an input (in[0]) with data");
    DP_TRY(dp_cuda_act_output(c, node, "relu", x->ndim, x->shape, x->grad != NULL, arena, same_layout(x)));
    return dp_cuda_launch(c, dp_cuda_relu_forward(c->stream, x->data, node->out.data, dp_tensor_numel(x),
                                                  dp_cuda_bf16_bits(x, &node->out, NULL)),
                          "relu");
}

static dp_status_t relu_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_relu_backward(c->stream, node->out.data, node->out.grad, x->grad,
                                                   dp_tensor_numel(&node->out), add, dp_cuda_is_bf16(&node->out)),
                          "relu backward");
}

/* --- pooling (1-D to 3-D; ops_pool.c's geometry and messages) ----------------------- */

static const char *const dim_names[3] = {"D", "H", "W"};

static dp_status_t pool_geometry(const dp_node_t *node, const char *op, int dilation, dp_cuda_pool_t *g) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    if (x->ndim < 3 || x->ndim > 5)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (x->shape[0] < 1 || x->shape[1] < 1 || (long)x->shape[0] * x->shape[1] > INT32_MAX)
        return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
    if (!dilation && a->ceil_mode) return dp_fail(DP_ERR_ARG, "%s: ceil_mode is for max pooling only", op);
    int in[3], out[3], k[3], s[3], p[3], d[3];
    int spatial = x->ndim - 2, first = 3 - spatial;
    for (int i = 0; i < 3; i++) {
        int j = i - first; /* index into the attribute arrays, < 0 for missing dims */
        in[i] = j < 0 ? 1 : x->shape[2 + j];
        k[i] = j < 0 ? 1 : a->kernel[j];
        s[i] = j < 0 ? 1 : a->stride[j];
        p[i] = j < 0 ? 0 : a->pad[j];
        d[i] = j < 0 ? 1 : a->dilation[j];
        if (k[i] < 1 || s[i] < 1 || d[i] < 1)
            return dp_fail(DP_ERR_ARG, "%s: along %s kernel %d, stride %d and dilation %d must be >= 1", op,
                           dim_names[i], k[i], s[i], d[i]);
        if (!dilation && d[i] != 1) /* as ops_pool.c: avg pool has none */
            return dp_fail(DP_ERR_ARG, "%s: dilation must be 1, found %d along %s", op, d[i], dim_names[i]);
        if (p[i] < 0 || 2 * p[i] > k[i])
            return dp_fail(DP_ERR_ARG, "%s: pad %d along %s must be between 0 and half the kernel %d", op, p[i],
                           dim_names[i], k[i]);
        if (in[i] < 1) return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
        out[i] = dp_pool_out_size(in[i], k[i], s[i], p[i], d[i], a->ceil_mode);
        if (out[i] < 1)
            return dp_fail(DP_ERR_SHAPE,
                           "%s: output size along %s is %d < 1 (input %s, kernel %d, stride %d, pad %d, dilation %d)",
                           op, dim_names[i], out[i], dp_tensor_shape_str(x, xs, sizeof xs), k[i], s[i], p[i], d[i]);
    }
    *g = (dp_cuda_pool_t){.planes = x->shape[0] * x->shape[1], .D = in[0], .H = in[1], .W = in[2],
                          .OD = out[0], .OH = out[1], .OW = out[2], .kd = k[0], .kh = k[1], .kw = k[2],
                          .sd = s[0], .sh = s[1], .sw = s[2], .pd = p[0], .ph = p[1], .pw = p[2],
                          .dd = d[0], .dh = d[1], .dw = d[2], .count_include_pad = a->count_include_pad,
                          .C = dp_cuda_is_nhwc(x) ? x->shape[1] : 0};
    return DP_OK;
}

/* The output shape of a pool: (N, C) and the output sizes of the input's spatial dims. */
static void pool_shape(const dp_tensor_t *x, const dp_cuda_pool_t *g, int shape[DP_MAX_DIMS]) {
    const int out[3] = {g->OD, g->OH, g->OW};
    shape[0] = x->shape[0], shape[1] = x->shape[1];
    for (int s = 0; s < x->ndim - 2; s++) shape[2 + s] = out[3 - (x->ndim - 2) + s];
}

static dp_status_t max_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "max_pool", 1, &g));
    const dp_tensor_t *x = node->in[0];
    int shape[DP_MAX_DIMS];
    pool_shape(x, &g, shape);
    DP_TRY(dp_cuda_act_output(c, node, "max_pool", x->ndim, shape, x->grad != NULL, arena, same_layout(x)));
    int32_t *argmax = dp_arena_alloc(arena, sizeof(int32_t) * (size_t)g.planes * g.OD * g.OH * g.OW);
    if (!argmax) return dp_fail(DP_ERR_NOMEM, "max_pool: out of GPU memory for the argmax");
    node->saved = argmax;
    return dp_cuda_launch(c, dp_cuda_max_pool_forward(c->stream, &g, x->data, node->out.data, argmax,
                                                      dp_cuda_bf16_bits(x, &node->out, NULL)),
                          "max_pool");
}

static dp_status_t max_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "max_pool", 1, &g));
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_max_pool_backward(c->stream, &g, node->out.grad, node->saved, x->grad, add),
                  "max_pool backward");
}

static dp_status_t avg_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    const dp_tensor_t *x = node->in[0];
    int shape[DP_MAX_DIMS];
    pool_shape(x, &g, shape);
    DP_TRY(dp_cuda_act_output(c, node, "avg_pool", x->ndim, shape, x->grad != NULL, arena, same_layout(x)));
    return dp_cuda_launch(c, dp_cuda_avg_pool_forward(c->stream, &g, x->data, node->out.data,
                                                      dp_cuda_bf16_bits(x, &node->out, NULL)),
                          "avg_pool");
}

static dp_status_t avg_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_avg_pool_backward(c->stream, &g, node->out.grad, x->grad, add), "avg_pool backward");
}

/* --- softmax cross-entropy ----------------------------------------------------------- */


static dp_status_t xent_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    int N = 0, K = 0;
    double D = 1.0;
    DP_TRY(dp_xent_check(node, &N, &K, &D));
    const dp_tensor_t *x = node->in[0];
    DP_TRY(dp_cuda_output(node, "softmax_xent", 0, NULL, x->grad != NULL, arena));
    float *probs = dp_arena_floats(arena, (size_t)N * K);         /* (N, K) */
    double *row_loss = dp_arena_alloc(arena, sizeof(double) * N); /* (N) */
    if (!probs || !row_loss) return dp_fail(DP_ERR_NOMEM, "softmax_xent: out of GPU memory for %d x %d", N, K);
    node->saved = probs;
    return dp_cuda_launch(c, dp_cuda_xent_forward(c->stream, x->data, node->labels, N, K, D, node->attr.label_smoothing,
                                                  probs, row_loss, node->out.data),
                          "softmax_xent");
}

static dp_status_t xent_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int N = 0, K = 0;
    double D = 1.0;
    DP_TRY(dp_xent_check(node, &N, &K, &D));
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_xent_backward(c->stream, node->saved, node->labels, node->out.grad, N, K, D,
                                                   node->attr.label_smoothing, x->grad, add),
                          "softmax_xent backward");
}

/* --- sigmoid, tanh, relu6, hardswish, hardsigmoid, silu, gelu ------------------------------------------------------ */

static dp_status_t unary_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, int kind, const char *op) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    DP_TRY(dp_cuda_act_output(c, node, op, x->ndim, x->shape, x->grad != NULL, arena, same_layout(x)));
    return dp_cuda_launch(c, dp_cuda_unary_forward(c->stream, kind, x->data, node->out.data, dp_tensor_numel(x),
                                                   dp_cuda_bf16_bits(x, &node->out, NULL)),
                          op);
}

/* from y, or from x for hardswish, hardsigmoid, silu and gelu (kinds 3 to 6) */
static dp_status_t unary_backward(dp_cuda_ctx_t *c, dp_node_t *node, int kind, const char *op) {
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int add = !dp_grad_claim(x);
    const dp_tensor_t *from = kind >= 3 ? x : &node->out;
    return dp_cuda_launch(c, dp_cuda_unary_backward(c->stream, kind, from->data, node->out.grad, x->grad,
                                                    dp_tensor_numel(&node->out), add, dp_cuda_is_bf16(from)),
                          op);
}

/* name_forward and name_backward of unary kind `kind` (kernels.h) */
#define UNARY_OP(name, kind)                                                                                         \
    static dp_status_t name##_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {                        \
        return unary_forward(c, node, arena, kind, #name);                                                           \
    }                                                                                                                \
    static dp_status_t name##_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {                       \
        (void)arena;                                                                                                 \
        return unary_backward(c, node, kind, #name);                                                                 \
    }
UNARY_OP(sigmoid, 0)
UNARY_OP(tanh, 1)
/* relu6's backward reads y: in a bf16 plan y is rounded, so an x just
 * below 6 may read as 6 and get no gradient (bf16 is approximate anyway) */
UNARY_OP(relu6, 2)
UNARY_OP(hardswish, 3)
UNARY_OP(hardsigmoid, 4)
UNARY_OP(silu, 5)
UNARY_OP(gelu, 6)

/* --- layer_norm over the channels (ConvNeXt): NCHW FP32 inputs (layout_cuda.c), an FP32 output;
 * saved: device doubles [mean (N S), rstd (N S)] ------------------------------------------------- */


static dp_status_t layer_norm_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    int N = 0, C = 0;
    size_t S = 0;
    DP_TRY(dp_norm_check(node, "layer_norm", &N, &C, &S));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    DP_TRY(dp_cuda_output(node, "layer_norm", x->ndim, x->shape, x->grad || (w && w->grad) || (b && b->grad), arena));
    double *saved = dp_arena_alloc(arena, sizeof(double) * 2 * (size_t)N * S);
    if (!saved) return dp_fail(DP_ERR_NOMEM, "layer_norm: out of GPU memory for %zu positions", (size_t)N * S);
    node->saved = saved;
    return dp_cuda_launch(c, dp_cuda_ln_forward(c->stream, x->data, w ? w->data : NULL, b ? b->data : NULL,
                                                node->out.data, saved, N, C, S, (double)node->attr.eps),
                          "layer_norm");
}

static dp_status_t layer_norm_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    if (!node->out.grad || !node->saved) return DP_OK;
    int N = x->shape[0], C = x->shape[1];
    size_t S = dp_tensor_numel(x) / ((size_t)N * (size_t)C);
    float *dw = w && w->grad ? w->grad : NULL, *db = b && b->grad ? b->grad : NULL;
    int add_w = dw ? !dp_grad_claim(w) : 0, add_b = db ? !dp_grad_claim(b) : 0, add_dx = x->grad ? !dp_grad_claim(x) : 0;
    return dp_cuda_launch(c, dp_cuda_ln_backward(c->stream, x->data, w ? w->data : NULL, node->out.grad, node->saved,
                                                 x->grad, add_dx, dw, add_w, db, add_b, N, C, S),
                          "layer_norm backward");
}

/* --- scale_channels (squeeze-excitation): NCHW FP32 inputs (layout_cuda.c), an FP32 output ------ */

/* s (N, C, 1, ...) or (1, C, 1, ...) for x (N, C, ...); *shared: C for the second when N > 1, else 0 */
static dp_status_t scale_channels_check(const dp_tensor_t *x, const dp_tensor_t *s, size_t *shared) {
    char xs[64], ss[64];
    if (!x || !s || !x->data || !s->data)
        return dp_fail(DP_ERR_ARG, "scale_channels: needs two inputs (in[0] x, in[1] s) with data");
    int fits = x->ndim >= 2 && s->ndim == x->ndim && (s->shape[0] == x->shape[0] || s->shape[0] == 1) &&
               s->shape[1] == x->shape[1];
    for (int d = 2; fits && d < s->ndim; d++) fits = s->shape[d] == 1;
    if (!fits)
        return dp_fail(DP_ERR_SHAPE, "scale_channels: the scale must be (N, C, 1, 1) or (1, C, 1, 1) for an input %s, "
                       "found %s", dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(s, ss, sizeof ss));
    *shared = s->shape[0] != x->shape[0] ? (size_t)x->shape[1] : 0;
    return DP_OK;
}

static dp_status_t scale_channels_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0], *s = node->in[1];
    size_t shared = 0;
    DP_TRY(scale_channels_check(x, s, &shared));
    DP_TRY(dp_cuda_output(node, "scale_channels", x->ndim, x->shape, x->grad || s->grad, arena));
    size_t n = dp_tensor_numel(x);
    if (n == 0) return DP_OK;
    return dp_cuda_launch(c, dp_cuda_scale_channels(c->stream, x->data, s->data, node->out.data, n,
                                                    n / ((size_t)x->shape[0] * (size_t)x->shape[1]), shared),
                          "scale_channels");
}

static dp_status_t scale_channels_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0], *s = node->in[1];
    size_t n = dp_tensor_numel(x), shared = s->shape[0] != x->shape[0] ? (size_t)x->shape[1] : 0;
    if (!node->out.grad || (!x->grad && !s->grad) || n == 0) return DP_OK;
    int add_dx = x->grad ? !dp_grad_claim(x) : 0, add_ds = s->grad ? !dp_grad_claim(s) : 0;
    return dp_cuda_launch(c, dp_cuda_scale_channels_backward(c->stream, node->out.grad, x->data, s->data, x->grad,
                                                             add_dx, s->grad, add_ds, n,
                                                             n / ((size_t)x->shape[0] * (size_t)x->shape[1]), shared),
                          "scale_channels backward");
}

/* --- concat (DenseNet): NCHW FP32 inputs (layout_cuda.c), an FP32 output ------------------- */

static dp_status_t concat_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *a = node->in[0], *b = node->in[1];
    char as[64], bs[64];
    if (!a || !b || !a->data || !b->data) return dp_fail(DP_ERR_ARG, "concat: needs two inputs (in[0], in[1]) with data");
    int fits = a->ndim >= 2 && b->ndim == a->ndim && a->shape[0] == b->shape[0];
    for (int d = 2; fits && d < a->ndim; d++) fits = a->shape[d] == b->shape[d];
    if (!fits)
        return dp_fail(DP_ERR_SHAPE, "concat: the inputs must differ in their channels alone, found %s and %s",
                       dp_tensor_shape_str(a, as, sizeof as), dp_tensor_shape_str(b, bs, sizeof bs));
    int shape[DP_MAX_DIMS];
    memcpy(shape, a->shape, sizeof(int) * (size_t)a->ndim);
    shape[1] = a->shape[1] + b->shape[1];
    DP_TRY(dp_cuda_output(node, "concat", a->ndim, shape, a->grad || b->grad, arena));
    size_t rows = (size_t)a->shape[0];
    if (dp_tensor_numel(&node->out) == 0) return DP_OK;
    return dp_cuda_launch(c, dp_cuda_concat(c->stream, a->data, b->data, node->out.data, rows,
                                            dp_tensor_numel(a) / rows, dp_tensor_numel(b) / rows),
                          "concat");
}

static dp_status_t concat_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *a = node->in[0], *b = node->in[1];
    size_t rows = (size_t)a->shape[0];
    if (!node->out.grad || (!a->grad && !b->grad) || dp_tensor_numel(&node->out) == 0) return DP_OK;
    int add_da = a->grad ? !dp_grad_claim(a) : 0, add_db = b->grad ? !dp_grad_claim(b) : 0;
    return dp_cuda_launch(c, dp_cuda_concat_backward(c->stream, node->out.grad, a->grad, add_da, b->grad, add_db, rows,
                                                     dp_tensor_numel(a) / rows, dp_tensor_numel(b) / rows),
                          "concat backward");
}

/* --- add (skip connections), with fuse_relu ------------------------------------------------ */

static int same_shape(const dp_tensor_t *a, const dp_tensor_t *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static dp_status_t add_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0], *z = node->in[1];
    char xs[64], zs[64];
    if (!x || !z || !x->data || !z->data) return dp_fail(DP_ERR_ARG, "add: needs two inputs (in[0], in[1]) with data");
    if (!same_shape(x, z))
        return dp_fail(DP_ERR_SHAPE, "add: inputs must have the same shape, found %s and %s",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(z, zs, sizeof zs));
    if (node->attr.fuse_relu != 0 && node->attr.fuse_relu != DP_FUSE_RELU)
        return dp_fail(DP_ERR_ARG, "add: fuse_relu must be 0 or DP_FUSE_RELU, found %d", node->attr.fuse_relu);
    /* both inputs in x's layout (layout_cuda.c), each in its own format; in place over x when y's format is x's
     * (the kernel reads each element before it writes it) */
    dp_status_t over = DP_OK;
    if (node->attr.in_place && dp_cuda_act_output_over(c, node, "add", node->in[0], x->grad || z->grad, arena, &over))
        DP_TRY(over);
    else
        DP_TRY(dp_cuda_act_output(c, node, "add", x->ndim, x->shape, x->grad || z->grad, arena, same_layout(x)));
    return dp_cuda_launch(c, dp_cuda_add(c->stream, x->data, z->data, node->out.data, dp_tensor_numel(x),
                                         node->attr.fuse_relu, dp_cuda_bf16_bits(x, z, &node->out)),
                          "add");
}

static dp_status_t add_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    float *dy = node->out.grad;
    if (!dy) return DP_OK;
    size_t n = dp_tensor_numel(&node->out);
    if (node->attr.fuse_relu) { /* dy through the ReLU into both grads in one pass, in order (x + x gets 2 dy) */
        dp_tensor_t *t0 = node->in[0], *t1 = node->in[1];
        int add0 = t0->grad ? !dp_grad_claim(t0) : 0, add1 = t1->grad ? !dp_grad_claim(t1) : 0;
        if (!t0->grad && !t1->grad) return DP_OK;
        return dp_cuda_launch(c, dp_cuda_relu_backward_pair(c->stream, node->out.data, dy, t0->grad, add0, t1->grad,
                                                            add1, n, dp_cuda_is_bf16(&node->out)),
                              "add backward");
    }
    for (int k = 0; k < 2; k++) { /* in order: x + x gets 2 dy */
        dp_tensor_t *t = node->in[k];
        if (t->grad) DP_TRY(dp_cuda_launch(c, dp_cuda_accumulate(c->stream, dy, t->grad, n, !dp_grad_claim(t)), "add backward"));
    }
    return DP_OK;
}

/* --- dropout and drop path (the CPU's counter-based mask: the same elements dropped) ------------- */

static int dropout_identity(const dp_op_attr_t *a) { return !a->training || a->dropout_p == 0.0f; }

/* The mask kernel's C: NHWC's channels for dropout, -1 (one draw per example) for drop path */
static int mask_channels(const dp_tensor_t *x, int drop_path) {
    return drop_path ? -1 : dp_cuda_is_nhwc(x) ? x->shape[1] : 0;
}

static dp_status_t masked_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, const char *op,
                                  int drop_path) {
    DP_TRY(dp_masked_check(node, op));
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    if (dropout_identity(a)) { /* a view, as the CPU's */
        dp_tensor_set_shape(&node->out, x->ndim, x->shape);
        node->saved = NULL;
        node->out.data = x->data;
        node->out.grad = x->grad;
        node->out.grad_unset = x->grad_unset;
        node->out.layout = x->layout; /* its layout and format: the same data */
        return DP_OK;
    }
    DP_TRY(dp_cuda_act_output(c, node, op, x->ndim, x->shape, x->grad != NULL, arena, same_layout(x)));
    const int C = mask_channels(x, drop_path); /* NHWC: each element's NCHW index picks its mask */
    size_t numel = dp_tensor_numel(x);
    const uint64_t *seed_at = NULL; /* a step graph's: the seed changes every step (graph_cuda.c) */
    if (c->capture && !(seed_at = dp_cuda_graph_seed(c, a->dropout_seed))) return dp_cuda_status(c);
    return dp_cuda_launch(c, dp_cuda_dropout(c->stream, x->data, node->out.data, x->shape[0], numel / (size_t)x->shape[0],
                                     a->dropout_seed, seed_at, a->example_offset, (uint64_t)ldexp((double)a->dropout_p, 53),
                                     (float)(1.0 / (1.0 - (double)a->dropout_p)), 0, C,
                                     dp_cuda_bf16_bits(x, &node->out, NULL)),
                  op);
}

static dp_status_t masked_backward(dp_cuda_ctx_t *c, dp_node_t *node, const char *op, int drop_path) {
    dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    if (dropout_identity(a)) {
        if (x->grad) x->grad_unset = node->out.grad_unset;
        return DP_OK;
    }
    if (!node->out.grad || !x->grad) return DP_OK;
    size_t numel = dp_tensor_numel(x);
    int add = !dp_grad_claim(x);
    const uint64_t *seed_at = NULL;
    if (c->capture && !(seed_at = dp_cuda_graph_seed(c, a->dropout_seed))) return dp_cuda_status(c);
    return dp_cuda_launch(c, dp_cuda_dropout(c->stream, node->out.grad, x->grad, x->shape[0], numel / (size_t)x->shape[0],
                                     a->dropout_seed, seed_at, a->example_offset, (uint64_t)ldexp((double)a->dropout_p, 53),
                                     (float)(1.0 / (1.0 - (double)a->dropout_p)), add,
                                     mask_channels(x, drop_path), 0),
                  op);
}

static dp_status_t dropout_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    return masked_forward(c, node, arena, "dropout", 0);
}
static dp_status_t dropout_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return masked_backward(c, node, "dropout backward", 0);
}
static dp_status_t drop_path_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    return masked_forward(c, node, arena, "drop_path", 1);
}
static dp_status_t drop_path_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return masked_backward(c, node, "drop_path backward", 1);
}

/* --- global average pooling ------------------------------------------------------------------ */

static dp_status_t global_avg_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "global_avg_pool: needs an input (in[0]) with data");
    if (x->ndim < 3 || x->ndim > 5 || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "global_avg_pool: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, none "
                       "empty, found %s", dp_tensor_shape_str(x, xs, sizeof xs));
    int shape[DP_MAX_DIMS] = {x->shape[0], x->shape[1], 1, 1, 1};
    /* an NHWC x gives (N, C, 1, 1): the same bytes in both layouts, marked NCHW */
    DP_TRY(dp_cuda_act_output(c, node, "global_avg_pool", x->ndim, shape, x->grad != NULL, arena, DP_CUDA_NCHW));
    size_t planes = (size_t)x->shape[0] * (size_t)x->shape[1];
    return dp_cuda_launch(c, dp_cuda_global_avg_forward(c->stream, x->data, node->out.data, planes,
                                                        dp_tensor_numel(x) / planes,
                                                        dp_cuda_is_nhwc(x) ? x->shape[1] : 0,
                                                        dp_cuda_bf16_bits(x, &node->out, NULL)),
                          "global_avg_pool");
}

static dp_status_t global_avg_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    size_t planes = dp_tensor_numel(&node->out);
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_global_avg_backward(c->stream, node->out.grad, x->grad, planes, dp_tensor_numel(x) / planes,
                                                 dp_cuda_is_nhwc(x) ? x->shape[1] : 0, add),
                  "global_avg_pool backward");
}

/* --- MSE ----------------------------------------------------------------------------------------- */


static dp_status_t mse_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    double D = 1.0;
    DP_TRY(dp_mse_check(node, &D));
    const dp_tensor_t *x = node->in[0], *t = node->in[1];
    DP_TRY(dp_cuda_output(node, "mse", 0, NULL, x->grad != NULL, arena));
    return dp_cuda_launch(c, dp_cuda_mse_forward(c->stream, x->data, t->data, dp_tensor_numel(x), D, node->out.data), "mse");
}

static dp_status_t mse_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    double D = 1.0;
    DP_TRY(dp_mse_check(node, &D));
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_mse_backward(c->stream, x->data, node->in[1]->data, node->out.grad, dp_tensor_numel(x), D,
                                          x->grad, add),
                  "mse backward");
}

/* --- batch norm (ops_batch_norm.c's formulas, fused relu / relu6 too; saved: device doubles [mean, invstd, m]) --- */

typedef struct {
    int N, C;
    size_t plane;
} bn_geom_t;

static dp_status_t bn_geometry(const dp_node_t *node, bn_geom_t *g) {
    DP_TRY(dp_batch_norm_check(node, &g->N, &g->C, &g->plane));
    dp_cuda_channel_view(dp_cuda_is_nhwc(node->in[0]), &g->N, &g->plane);
    return DP_OK;
}

/* stat_sync's host hook over `count` device doubles: download, sum across
 * participants, upload (the one host synchronisation SyncBatchNorm needs);
 * *first (when not NULL) = the summed first value (the count m).
 * The context lock is let go around sum(): it waits at a barrier for the
 * other devices, and devices sharing this GPU need the lock to get there
 * (run() holds it exactly once here). The upload is waited for before
 * returning: its source is this frame's array. */
static dp_status_t bn_sync(dp_cuda_ctx_t *c, const dp_stat_sync_t *sync, double *dev, int count, double *first) {
    double host[1 + 2 * 4096];
    if (count > (int)(sizeof host / sizeof host[0]))
        return dp_fail(DP_ERR_ARG, "batch_norm: %s: synchronised statistics of more than 4096 channels are not done",
                       c->name);
    /* the wait first (dp_cuda_wait: in an NCCL group it watches the other
     * members; a copy to pageable memory would block behind a sum that
     * never ends) */
    if (dp_cuda_check(c, dp_cuda_wait(c, NULL), "batch_norm statistics") ||
        dp_cuda_check(c, cudaMemcpyAsync(host, dev, sizeof(double) * (size_t)count, cudaMemcpyDeviceToHost, c->stream),
                      "batch_norm statistics") ||
        dp_cuda_check(c, cudaStreamSynchronize(c->stream), "batch_norm statistics"))
        return dp_cuda_status(c);
    dp_cuda_leave(c);
    sync->sum(sync->ctx, host, count);
    dp_cuda_enter(c);
    if (c->failed) return dp_cuda_status(c);
    if (first) *first = host[0];
    dp_cuda_check(c, cudaMemcpyAsync(dev, host, sizeof(double) * (size_t)count, cudaMemcpyHostToDevice, c->stream),
                  "batch_norm statistics");
    dp_cuda_check(c, dp_cuda_wait(c, NULL), "batch_norm statistics");
    return dp_cuda_status(c);
}

static dp_status_t batch_norm_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    DP_TRY(dp_cuda_act_output(c, node, "batch_norm", x->ndim, x->shape, x->grad || (w && w->grad) || (b && b->grad),
                              arena, same_layout(x)));
    const int xb = dp_cuda_is_bf16(x);
    double *saved = dp_arena_alloc(arena, sizeof(double) * (2 * (size_t)g.C + 1)); /* [mean, invstd, m] */
    double *sums = dp_arena_alloc(arena, sizeof(double) * (2 * (size_t)g.C + 1));  /* [m, S1, S2] */
    float *coef = dp_arena_floats(arena, 3 * (size_t)g.C);                          /* bn_apply's, per channel */
    size_t partials = a->training ? 2 * dp_cuda_channel_partials(g.N, g.C, g.plane) : 0;
    double *scratch = a->training ? dp_arena_alloc(arena, sizeof(double) * partials) : NULL;
    if (!saved || !sums || !coef || (a->training && !scratch))
        return dp_fail(DP_ERR_NOMEM, "batch_norm: out of GPU memory for %d channels", g.C);
    node->saved = saved;
    int shift = !a->stat_sync; /* with stat_sync every participant sums around 0, as the CPU op */
    double m = (double)g.N * (double)g.plane;
    if (a->training) {
        DP_TRY(dp_cuda_launch(c, dp_cuda_bn_stats(c->stream, x->data, g.N, g.C, g.plane, shift, scratch,
                                          a->stat_sync ? sums : NULL, xb),
                      "batch_norm statistics"));
        if (a->stat_sync) DP_TRY(bn_sync(c, a->stat_sync, sums, 2 * g.C + 1, &m));
        if (!(m > 1.0))
            return dp_fail(DP_ERR_SHAPE,
                           "batch_norm: training needs more than 1 value per channel (N x spatial%s), found %g",
                           a->stat_sync ? " over all participants" : "", m);
    }
    DP_TRY(dp_cuda_launch(c, dp_cuda_bn_finalize(c->stream, x->data, g.N, g.C, g.plane, shift, a->stat_sync ? NULL : scratch,
                                         sums, a->training, (double)a->eps,
                                         (double)a->momentum, a->running_mean, a->running_var, saved, m,
                                         w ? w->data : NULL, b ? b->data : NULL, coef, xb),
                  "batch_norm statistics"));
    return dp_cuda_launch(c, dp_cuda_bn_apply(c->stream, x->data, node->out.data, g.N, g.C, g.plane, coef, a->fuse_relu,
                                              dp_cuda_bf16_bits(x, &node->out, NULL)),
                          "batch_norm");
}

static dp_status_t batch_norm_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    double *gsums = dp_arena_alloc(arena, sizeof(double) * 2 * (size_t)g.C);
    size_t partials = 2 * dp_cuda_channel_partials(g.N, g.C, g.plane);
    double *scratch = dp_arena_alloc(arena, sizeof(double) * partials);
    float *coef = dp_arena_floats(arena, 4 * (size_t)g.C); /* bn_dx's, per channel */
    if (!gsums || !scratch || !coef)
        return dp_fail(DP_ERR_NOMEM, "batch_norm backward: out of GPU memory for %d channels", g.C);
    float *dw = w && w->grad ? w->grad : NULL, *db = b && b->grad ? b->grad : NULL;
    int add_w = dw ? !dp_grad_claim(w) : 0, add_b = db ? !dp_grad_claim(b) : 0;
    /* fuse_relu: the sums mask out.grad in place (ours and complete), as the CPU op */
    const dp_tensor_t *relu_y = a->fuse_relu ? &node->out : NULL;
    DP_TRY(dp_cuda_launch(c, dp_cuda_bn_grad_sums(c->stream, x->data, relu_y ? relu_y->data : NULL, a->fuse_relu,
                                                  node->out.grad, g.N, g.C, g.plane, node->saved, scratch, gsums, dw,
                                                  add_w, db, add_b, dp_cuda_bf16_bits(x, relu_y, NULL)),
                  "batch_norm gradient sums"));
    if (!x->grad) return DP_OK;
    if (a->training && a->stat_sync) DP_TRY(bn_sync(c, a->stat_sync, gsums, 2 * g.C, NULL));
    int add = !dp_grad_claim(x);
    return dp_cuda_launch(c, dp_cuda_bn_dx(c->stream, x->data, node->out.grad, x->grad, g.N, g.C, g.plane, node->saved, gsums,
                                   w ? w->data : NULL, a->training, add, coef, dp_cuda_is_bf16(x)),
                  "batch_norm backward");
}

/* --- the per-GPU tables ------------------------------------------------------------------ */

typedef dp_status_t (*cuda_op_fn)(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);

/* An op on GPU gpu: forward (backward 0) after converting its inputs to
 * the layouts it takes, backward (1) then the converted inputs' gradients
 * back (layout_cuda.h). */
static dp_status_t run(int gpu, cuda_op_fn fn, dp_node_t *node, dp_arena_t *arena, int backward) {
    dp_cuda_ctx_t *c = dp_cuda_ctx(gpu);
    if (!c) return dp_fail(DP_ERR_ARG, "cuda:%d: the GPU was not opened", gpu);
    dp_cuda_enter(c);
    dp_status_t status = c->failed ? dp_cuda_status(c) : DP_OK;
    if (status == DP_OK && !backward) {
        int want[3];
        dp_cuda_layout_want(c, node, want);
        status = dp_cuda_layout_inputs(c, node, arena, want);
    }
    if (status == DP_OK) status = fn(c, node, arena);
    if (status == DP_OK && backward) status = dp_cuda_layout_restore(c, node);
    if (status == DP_OK) status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

/* flatten: the CPU's view, over an NCHW input (an NHWC one is converted
 * first, so that linear layers see PyTorch's feature order) */
static dp_status_t flatten_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)c;
    return dp_flatten_forward(node, arena);
}
static dp_status_t flatten_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)c;
    return dp_flatten_backward(node, arena);
}

#define WRAP(g, fn)                                                                                                  \
    static dp_status_t fn##_##g(dp_node_t *node, dp_arena_t *arena) { return run(g, fn, node, arena, 0); }
#define WRAP_BACK(g, fn)                                                                                             \
    static dp_status_t fn##_##g(dp_node_t *node, dp_arena_t *arena) { return run(g, fn, node, arena, 1); }
#define GPU_FUNCS(g)                                                                                       \
    WRAP(g, dp_cuda_conv_forward) WRAP_BACK(g, dp_cuda_conv_backward) WRAP(g, max_pool_forward) WRAP_BACK(g, max_pool_backward)     \
    WRAP(g, avg_pool_forward) WRAP_BACK(g, avg_pool_backward) WRAP(g, linear_forward) WRAP_BACK(g, linear_backward) \
    WRAP(g, relu_forward) WRAP_BACK(g, relu_backward) WRAP(g, xent_forward) WRAP_BACK(g, xent_backward)   \
    WRAP(g, sigmoid_forward) WRAP_BACK(g, sigmoid_backward) WRAP(g, tanh_forward) WRAP_BACK(g, tanh_backward)         \
    WRAP(g, add_forward) WRAP_BACK(g, add_backward) WRAP(g, dropout_forward) WRAP_BACK(g, dropout_backward)           \
    WRAP(g, global_avg_pool_forward) WRAP_BACK(g, global_avg_pool_backward) WRAP(g, mse_forward) WRAP_BACK(g, mse_backward) \
    WRAP(g, batch_norm_forward) WRAP_BACK(g, batch_norm_backward) \
    WRAP(g, relu6_forward) WRAP_BACK(g, relu6_backward) \
    WRAP(g, hardswish_forward) WRAP_BACK(g, hardswish_backward) \
    WRAP(g, hardsigmoid_forward) WRAP_BACK(g, hardsigmoid_backward) \
    WRAP(g, scale_channels_forward) WRAP_BACK(g, scale_channels_backward) \
    WRAP(g, gelu_forward) WRAP_BACK(g, gelu_backward) \
    WRAP(g, layer_norm_forward) WRAP_BACK(g, layer_norm_backward) \
    WRAP(g, silu_forward) WRAP_BACK(g, silu_backward) \
    WRAP(g, drop_path_forward) WRAP_BACK(g, drop_path_backward) \
    WRAP(g, concat_forward) WRAP_BACK(g, concat_backward) \
    WRAP(g, flatten_forward) WRAP_BACK(g, flatten_backward) \
    WRAP(g, dp_cuda_conv_transpose_forward) WRAP_BACK(g, dp_cuda_conv_transpose_backward)
#define GPU_TABLE(g)                                                                                  \
    {                                                                                                 \
        [DP_OP_CONV] = {"conv", 3, dp_cuda_conv_forward_##g, dp_cuda_conv_backward_##g},                              \
        [DP_OP_MAX_POOL] = {"max_pool", 1, max_pool_forward_##g, max_pool_backward_##g},              \
        [DP_OP_AVG_POOL] = {"avg_pool", 1, avg_pool_forward_##g, avg_pool_backward_##g},              \
        [DP_OP_LINEAR] = {"linear", 3, linear_forward_##g, linear_backward_##g},                      \
        [DP_OP_RELU] = {"relu", 1, relu_forward_##g, relu_backward_##g},                              \
        [DP_OP_FLATTEN] = {"flatten", 1, flatten_forward_##g, flatten_backward_##g},                    \
        [DP_OP_SOFTMAX_XENT] = {"softmax_xent", 1, xent_forward_##g, xent_backward_##g},              \
        [DP_OP_CONV_TRANSPOSE] = {"conv_transpose", 3, dp_cuda_conv_transpose_forward_##g, dp_cuda_conv_transpose_backward_##g},                       \
        [DP_OP_GLOBAL_AVG_POOL] = {"global_avg_pool", 1, global_avg_pool_forward_##g, global_avg_pool_backward_##g},                     \
        [DP_OP_BATCH_NORM] = {"batch_norm", 3, batch_norm_forward_##g, batch_norm_backward_##g},                               \
        [DP_OP_DROPOUT] = {"dropout", 1, dropout_forward_##g, dropout_backward_##g},                                     \
        [DP_OP_SIGMOID] = {"sigmoid", 1, sigmoid_forward_##g, sigmoid_backward_##g},                                     \
        [DP_OP_TANH] = {"tanh", 1, tanh_forward_##g, tanh_backward_##g},                                           \
        [DP_OP_ADD] = {"add", 2, add_forward_##g, add_backward_##g},                                             \
        [DP_OP_MSE] = {"mse", 2, mse_forward_##g, mse_backward_##g},                                             \
        [DP_OP_RELU6] = {"relu6", 1, relu6_forward_##g, relu6_backward_##g},                                     \
        [DP_OP_HARDSWISH] = {"hardswish", 1, hardswish_forward_##g, hardswish_backward_##g},                     \
        [DP_OP_HARDSIGMOID] = {"hardsigmoid", 1, hardsigmoid_forward_##g, hardsigmoid_backward_##g},             \
        [DP_OP_SCALE_CHANNELS] = {"scale_channels", 2, scale_channels_forward_##g, scale_channels_backward_##g}, \
        [DP_OP_GELU] = {"gelu", 1, gelu_forward_##g, gelu_backward_##g},                                       \
        [DP_OP_LAYER_NORM] = {"layer_norm", 3, layer_norm_forward_##g, layer_norm_backward_##g},                 \
        [DP_OP_SILU] = {"silu", 1, silu_forward_##g, silu_backward_##g},                                      \
        [DP_OP_DROP_PATH] = {"drop_path", 1, drop_path_forward_##g, drop_path_backward_##g},                  \
        [DP_OP_CONCAT] = {"concat", 2, concat_forward_##g, concat_backward_##g},                                 \
    }

_Static_assert(DP_OP_COUNT == 24, "ops_cuda.c: a new op needs an entry in GPU_TABLE");
_Static_assert(DP_CUDA_MAX_GPUS == 8, "ops_cuda.c: one GPU_FUNCS / GPU_TABLE per GPU");

GPU_FUNCS(0)
GPU_FUNCS(1)
GPU_FUNCS(2)
GPU_FUNCS(3)
GPU_FUNCS(4)
GPU_FUNCS(5)
GPU_FUNCS(6)
GPU_FUNCS(7)

static const dp_op_def_t tables[DP_CUDA_MAX_GPUS][DP_OP_COUNT] = {
    GPU_TABLE(0), GPU_TABLE(1), GPU_TABLE(2), GPU_TABLE(3), GPU_TABLE(4), GPU_TABLE(5), GPU_TABLE(6), GPU_TABLE(7),
};

const dp_op_def_t *dp_cuda_op_table(int gpu) { return tables[gpu]; }
