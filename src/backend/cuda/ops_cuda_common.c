/* ops_cuda_common.c - the helpers every CUDA op file uses
 * (ops_cuda_common.h): failures, outputs, cuDNN's workspace, bias
 * gradients, bf16 operands. */
#include <stdio.h>

#include "kernels.h"
#include "precision.h"
#include "ops_cuda_common.h"

dp_status_t dp_cuda_cudnn_fail(dp_cuda_ctx_t *c, cudnnStatus_t s, const char *what) {
    return dp_fail(DP_ERR_ARG, "%s: %s: cuDNN: %s", c->name, what, cudnnGetErrorString(s));
}

dp_status_t dp_cuda_launch(dp_cuda_ctx_t *c, cudaError_t err, const char *what) {
    return dp_cuda_check(c, err, what) ? dp_cuda_status(c) : DP_OK;
}

/* db (+)= the per-channel sums of dy (N, C, L) (kernels_common.cuh's two
 * passes, reductions.cu; their partials from the arena); with y, of dy
 * masked by y > 0, written to masked. */
dp_status_t dp_cuda_op_bias_grad(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *dy, const float *y, float *masked,
                             dp_tensor_t *b, int N, int C, size_t L, const char *what) {
    size_t count = dp_cuda_channel_partials(N, C, L);
    float *partials = dp_arena_floats(arena, count);
    if (!partials) return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for %zu partial sums", what, count);
    int add = !dp_grad_claim(b);
    return dp_cuda_launch(c, dp_cuda_bias_grad(c->stream, dy, y, masked, b->grad, N, C, L, add, partials), what);
}

/* Output data (and an unset grad when `want_grad`) of `numel` floats. */
dp_status_t dp_cuda_output(dp_node_t *node, const char *op, int ndim, const int *shape, int want_grad,
                          dp_arena_t *arena) {
    dp_tensor_set_shape(&node->out, ndim, shape);
    node->out.layout = 0; /* NCHW; an op with an NHWC output marks it after (layout_cuda.h) */
    size_t numel = dp_tensor_numel(&node->out);
    node->out.data = dp_arena_floats(arena, numel);
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad)) {
        char dims[96];
        return dp_fail(DP_ERR_NOMEM,
                       "%s: out of GPU memory for its output %s (%zu floats, %.1f MiB%s): use a smaller --batch-size, "
                       "or more devices",
                       op, dp_tensor_shape_str(&node->out, dims, sizeof dims), numel, numel * 4.0 / 1048576.0,
                       want_grad ? ", and as much for its gradient" : "");
    }
    return DP_OK;
}

/* cuDNN's workspace of at least `bytes`. */
dp_status_t dp_cuda_workspace(dp_cuda_ctx_t *c, size_t bytes) {
    if (bytes <= c->workspace_bytes) return DP_OK;
    dp_cuda_free_idle(c, c->workspace, "a cuDNN workspace"); /* after the work that used it */
    c->workspace = NULL;
    c->workspace_bytes = 0;
    cudaError_t err = dp_cuda_malloc(c, &c->workspace, bytes);
    if (err != cudaSuccess && err != cudaErrorMemoryAllocation) /* a fault the GPU keeps: the context's failure */
        return dp_cuda_launch(c, err, "allocating a cuDNN workspace");
    if (err != cudaSuccess) return dp_cuda_out_of_memory(c, "a cuDNN workspace", bytes);
    c->workspace_bytes = bytes;
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
 * first, w's from the next multiple of 64 values (128-byte aligned) */
#define BF16_ALIGN ((size_t)64)

dp_status_t dp_cuda_bf16_operands(dp_cuda_ctx_t *c, dp_arena_t *arena, dp_node_t *node, const float *x, size_t nx,
                                  const float *w, size_t nw, const uint16_t **xb, const uint16_t **wb, const char *op) {
    const size_t w_at = (nx + BF16_ALIGN - 1) / BF16_ALIGN * BF16_ALIGN;
    uint16_t *kept = node->saved;
    if (!kept) {
        if (!(kept = dp_arena_alloc(arena, sizeof *kept * (w_at + nw))))
            return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for bf16 copies of its input and weight (%zu values): "
                           "use a smaller --batch-size, or more devices", op, w_at + nw);
        DP_TRY(dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, x, kept, nx), op));
        DP_TRY(dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, w, kept + w_at, nw), op));
        node->saved = kept;
    }
    *xb = kept, *wb = kept + w_at;
    return DP_OK;
}
