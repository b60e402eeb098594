/* ops_cuda_common.h - what the CUDA op files share (ops_cuda_common.c):
 * a launch's error as the context's failure, an op's output allocation,
 * stored activations (float, or bf16 with --precision bf16), cuDNN's
 * workspace, a bias gradient through reductions.cu's two passes, the
 * bf16 operands of --precision bf16, and
 * the convolution ops of conv_cuda.c that ops_cuda.c's table names. Every
 * function runs under the context's lock, as an op does. */
#ifndef DPTRAIN_OPS_CUDA_COMMON_H
#define DPTRAIN_OPS_CUDA_COMMON_H

#include "cuda_context.h"
#include "dptrain/ops.h"

/* err as the context's failure (the first one is kept) and its status */
dp_status_t dp_cuda_launch(dp_cuda_ctx_t *c, cudaError_t err, const char *what);
/* "cuda:N: WHAT: cuDNN: REASON" as the failure */
dp_status_t dp_cuda_cudnn_fail(dp_cuda_ctx_t *c, cudnnStatus_t s, const char *what);
/* db (+)= the per-channel sums of dy (N, C, L) (kernels_common.cuh's two
 * passes, reductions.cu; their partials from the arena); with y, of dy
 * masked by y > 0, written to masked (bf16 bits: y, masked; kernels.h). */
dp_status_t dp_cuda_op_bias_grad(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *dy, const void *y, void *masked,
                                 int bf16, dp_tensor_t *b, int N, int C, size_t L, const char *what);
/* Output data (and an unset grad when `want_grad`) of the shape's floats;
 * out of memory: one line naming the op, the shape and what to change. */
dp_status_t dp_cuda_output(dp_node_t *node, const char *op, int ndim, const int *shape, int want_grad,
                           dp_arena_t *arena);
/* The same as a stored activation (layout_cuda.h), in layout `layout`
 * (DP_CUDA_NCHW or DP_CUDA_NHWC): with --precision bf16 and 3 or more dims
 * its data bf16 (half the bytes) and marked DP_CUDA_BF16, else floats;
 * grad (when want_grad) floats either way. */
dp_status_t dp_cuda_act_output(const dp_cuda_ctx_t *c, dp_node_t *node, const char *op, int ndim, const int *shape,
                               int want_grad, dp_arena_t *arena, int layout);
/* The same over x's memory (an op written in place: ops.h's in_place), in
 * x's shape and layout, when the output's format is x's: returns 1 and the
 * status in *status; 0 (nothing done) when the formats differ. */
int dp_cuda_act_output_over(const dp_cuda_ctx_t *c, dp_node_t *node, const char *op, dp_tensor_t *x, int want_grad,
                            dp_arena_t *arena, dp_status_t *status);
/* cuDNN's workspace of at least `bytes`. */
dp_status_t dp_cuda_workspace(dp_cuda_ctx_t *c, size_t bytes);
/* --precision bf16: the context's bf16 scratch, at least `values` bf16
 * values, in *out: one op's operands and results that live no longer than
 * the op (a convolution's bf16 output gradient, its bf16 results on their
 * way to an FP32 gradient), so that they take no arena memory for the rest
 * of the step. Grown as cuDNN's workspace is; the ops of a context run in
 * its stream's order, so the next op's use waits for the last one's. */
dp_status_t dp_cuda_bf16_scratch(dp_cuda_ctx_t *c, size_t values, uint16_t **out);

/* --precision bf16 (precision.h): a bf16 copy of src (n floats) in the
 * arena. */
dp_status_t dp_cuda_bf16_copy(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *src, size_t n, const uint16_t **out,
                              const char *what);
/* The bf16 operands of a convolution or a linear layer: copies of its
 * input x (nx floats) and weight w (nw), made by the first call of a step
 * (the forward, after dp_cuda_output) and kept in node->saved, the same
 * copies for the backward: the weight is cast once per step, the input
 * kept in bf16 for the weight gradient. x_bf16: x holds bf16 values
 * already (a stored activation, layout_cuda.h), *xb is x itself and only
 * w is copied. */
dp_status_t dp_cuda_bf16_operands(dp_cuda_ctx_t *c, dp_arena_t *arena, dp_node_t *node, const void *x, int x_bf16,
                                  size_t nx, const float *w, size_t nw, const uint16_t **xb, const uint16_t **wb,
                                  const char *op);

/* conv_cuda.c: conv and conv_transpose (1-D to 3-D) with cuDNN */
dp_status_t dp_cuda_conv_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_cuda_conv_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_cuda_conv_transpose_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_cuda_conv_transpose_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);

#endif
