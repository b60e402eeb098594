/* ops_cuda_common.c - the helpers every CUDA op file uses
 * (ops_cuda_common.h): failures, outputs, cuDNN's workspace, bias
 * gradients, bf16 operands. */
#include <stdio.h>

#include "kernels.h"
#include "precision.h"
#include "ops_cuda_common.h"
#include "layout_cuda.h"

dp_status_t dp_cuda_cudnn_fail(dp_cuda_ctx_t *c, cudnnStatus_t s, const char *what) {
    /* what cuDNN cannot do with these shapes is the model's, what fails while it runs the GPU's */
    dp_status_t status = s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM ? DP_ERR_ARG
                         : s == CUDNN_STATUS_ALLOC_FAILED                              ? DP_ERR_NOMEM
                                                                                       : DP_ERR_DEVICE;
    return dp_fail(status, "%s: %s: cuDNN: %s", c->name, what, cudnnGetErrorString(s));
}

dp_status_t dp_cuda_launch(dp_cuda_ctx_t *c, cudaError_t err, const char *what) {
    return dp_cuda_check(c, err, what) ? dp_cuda_status(c) : DP_OK;
}

/* db (+)= the per-channel sums of dy (N, C, L) (kernels_common.cuh's two
 * passes, reductions.cu; their partials from the arena); with y, of dy
 * masked by y > 0, written to masked (bf16 bits: y, masked; kernels.h). */
dp_status_t dp_cuda_op_bias_grad(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *dy, const void *y, void *masked,
                                 int bf16, dp_tensor_t *b, int N, int C, size_t L, const char *what) {
    size_t count = dp_cuda_channel_partials(N, C, L);
    float *partials = dp_arena_floats(arena, count);
    if (!partials) return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for %zu partial sums", what, count);
    int add = !dp_grad_claim(b);
    return dp_cuda_launch(c, dp_cuda_bias_grad(c->stream, dy, y, masked, b->grad, N, C, L, add, partials, bf16), what);
}

/* Output data of `numel` values of elem_size bytes (and an unset grad of
 * numel floats when `want_grad`); over: the data's memory (an input's, for
 * an op written in place), NULL: from the arena. */
static dp_status_t output_of(dp_node_t *node, const char *op, int ndim, const int *shape, int want_grad,
                             dp_arena_t *arena, size_t elem_size, float *over) {
    dp_tensor_set_shape(&node->out, ndim, shape);
    node->out.layout = 0; /* NCHW; an op with an NHWC or bf16 output marks it after (layout_cuda.h) */
    size_t numel = dp_tensor_numel(&node->out);
    node->out.data = over ? over : dp_arena_alloc(arena, numel * elem_size);
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad)) {
        char dims[96];
        return dp_fail(DP_ERR_NOMEM,
                       "%s: out of GPU memory for its output %s (%zu %s, %.1f MiB%s): use a smaller --batch-size, "
                       "or more devices",
                       op, dp_tensor_shape_str(&node->out, dims, sizeof dims), numel,
                       elem_size == sizeof(float) ? "floats" : "bf16 values", (double)(numel * elem_size) / 1048576.0,
                       !want_grad ? "" : elem_size == sizeof(float) ? ", and as much for its gradient"
                                                                    : ", and twice as much for its float gradient");
    }
    return DP_OK;
}

dp_status_t dp_cuda_output(dp_node_t *node, const char *op, int ndim, const int *shape, int want_grad,
                           dp_arena_t *arena) {
    return output_of(node, op, ndim, shape, want_grad, arena, sizeof(float), NULL);
}

dp_status_t dp_cuda_act_output(const dp_cuda_ctx_t *c, dp_node_t *node, const char *op, int ndim, const int *shape,
                               int want_grad, dp_arena_t *arena, int layout) {
    const int bf16 = c->precision == DP_PRECISION_BF16 && ndim >= 3;
    DP_TRY(output_of(node, op, ndim, shape, want_grad, arena, bf16 ? sizeof(uint16_t) : sizeof(float), NULL));
    node->out.layout = layout | (bf16 ? DP_CUDA_BF16 : 0);
    return DP_OK;
}

int dp_cuda_act_output_over(const dp_cuda_ctx_t *c, dp_node_t *node, const char *op, dp_tensor_t *x, int want_grad,
                            dp_arena_t *arena, dp_status_t *status) {
    const int bf16 = c->precision == DP_PRECISION_BF16 && x->ndim >= 3;
    if (bf16 != dp_cuda_is_bf16(x)) return 0; /* another format: its own memory */
    *status = output_of(node, op, x->ndim, x->shape, want_grad, arena, 0, x->data);
    node->out.layout = (dp_cuda_is_nhwc(x) ? DP_CUDA_NHWC : DP_CUDA_NCHW) | (bf16 ? DP_CUDA_BF16 : 0);
    return 1;
}

/* *buf (of *have bytes) grown to at least `bytes`: the old one freed
 * once the work queued so far is done (dp_cuda_free_idle). */
static dp_status_t grow(dp_cuda_ctx_t *c, void **buf, size_t *have, size_t bytes, const char *what) {
    if (bytes <= *have) return DP_OK;
    dp_cuda_free_idle(c, *buf, what); /* after the work that used it */
    *buf = NULL;
    *have = 0;
    cudaError_t err = dp_cuda_malloc(c, buf, bytes);
    if (err != cudaSuccess && err != cudaErrorMemoryAllocation) { /* a fault the GPU keeps: the context's failure */
        char line[96];
        snprintf(line, sizeof line, "allocating %s", what);
        return dp_cuda_launch(c, err, line);
    }
    if (err != cudaSuccess) return dp_cuda_out_of_memory(c, what, bytes);
    *have = bytes;
    return DP_OK;
}

/* cuDNN's workspace of at least `bytes`. */
dp_status_t dp_cuda_workspace(dp_cuda_ctx_t *c, size_t bytes) {
    return grow(c, &c->workspace, &c->workspace_bytes, bytes, "a cuDNN workspace");
}

dp_status_t dp_cuda_bf16_scratch(dp_cuda_ctx_t *c, size_t values, uint16_t **out) {
    *out = NULL;
    DP_TRY(grow(c, &c->bf16_scratch, &c->bf16_scratch_bytes, sizeof(uint16_t) * (values ? values : 1),
                "a bf16 scratch buffer"));
    *out = c->bf16_scratch;
    return DP_OK;
}

dp_status_t dp_cuda_bf16_copy(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *src, size_t n, const uint16_t **out,
                              const char *what) {
    uint16_t *dst = dp_arena_alloc(arena, sizeof *dst * (n ? n : 1));
    *out = dst;
    if (!dst)
        return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for a bf16 copy of %zu values: use a smaller --batch-size, "
                       "or more devices", what, n);
    return dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, src, dst, n), what);
}

/* node->saved: one arena block (device memory) of the two copies, x's
 * first, w's from the next multiple of 64 values (128-byte aligned); w's
 * alone when x holds bf16 already */
#define BF16_ALIGN ((size_t)64)

dp_status_t dp_cuda_bf16_operands(dp_cuda_ctx_t *c, dp_arena_t *arena, dp_node_t *node, const void *x, int x_bf16,
                                  size_t nx, const float *w, size_t nw, const uint16_t **xb, const uint16_t **wb,
                                  const char *op) {
    if (x_bf16) nx = 0; /* no copy of x: its own data */
    const size_t w_at = (nx + BF16_ALIGN - 1) / BF16_ALIGN * BF16_ALIGN;
    uint16_t *kept = node->saved;
    if (!kept) {
        if (!(kept = dp_arena_alloc(arena, sizeof *kept * (w_at + nw))))
            return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for bf16 copies of its input and weight (%zu values): "
                           "use a smaller --batch-size, or more devices", op, w_at + nw);
        if (nx) DP_TRY(dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, x, kept, nx), op));
        DP_TRY(dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, w, kept + w_at, nw), op));
        node->saved = kept;
    }
    *xb = x_bf16 ? x : kept, *wb = kept + w_at;
    return DP_OK;
}
