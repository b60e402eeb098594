/* layout_cuda.h - channels-last activations on a CUDA device
 * (set_channels_last, layout_cuda.c): the layout marks of dp_tensor_t
 * that only this backend sets and reads, and the conversions that let
 * every op of the table take an input of either layout.
 *
 * DESIGN. A 4-D activation (N, C, H, W) keeps its logical shape; its mark
 * says how data and grad lie in memory: DP_CUDA_NCHW (0, what every tensor
 * made above the backend has) or DP_CUDA_NHWC. Only 4-D tensors are ever
 * NHWC, and only ops' outputs. Before an op runs, ops_cuda.c's wrapper asks
 * dp_cuda_layout_want which layout each activation input must have (the
 * op's NHWC support, the device's mode); an input in the other layout is
 * replaced in node->in[i], for this op alone, by a converted copy in the
 * arena (its header in the arena's host memory, marked as a copy, with a
 * gradient of its own when the original has one). After the op's
 * backward, dp_cuda_layout_restore converts each copy's gradient back
 * and writes or adds it into the original's (dp_grad_claim), and puts the
 * original back in node->in[i]. So correctness never depends on which ops
 * have NHWC kernels: a missing one costs a conversion, not a wrong value.
 * In NCHW mode no op asks for NHWC, nothing is NHWC, nothing is converted. */
#ifndef DPTRAIN_LAYOUT_CUDA_H
#define DPTRAIN_LAYOUT_CUDA_H

#include "cuda_context.h"
#include "dptrain/ops.h"

#define DP_CUDA_NCHW 0
#define DP_CUDA_NHWC 1
#define DP_CUDA_LAYOUT_COPY 0x10 /* or-ed into a converted copy's mark (layout_cuda.c) */
#define DP_CUDA_ANY_LAYOUT (-1)  /* dp_cuda_layout_want: the op takes either */

/* 1 when t's data lie in NHWC order (a 4-D tensor marked so). */
static inline int dp_cuda_is_nhwc(const dp_tensor_t *t) {
    return t && t->ndim == 4 && (t->layout & ~DP_CUDA_LAYOUT_COPY) == DP_CUDA_NHWC;
}

/* want[i] = the layout op `node` needs of its activation input i on
 * context c (DP_CUDA_NCHW, DP_CUDA_NHWC, or DP_CUDA_ANY_LAYOUT: as it
 * comes; parameters and absent inputs: ANY). */
void dp_cuda_layout_want(const dp_cuda_ctx_t *c, const dp_node_t *node, int want[3]);

/* Before an op's forward: each input i of node whose layout is not want[i]
 * replaced by a converted copy (see above); a copy left in node->in[i] by
 * an earlier forward of the same node first gives way to its original. */
dp_status_t dp_cuda_layout_inputs(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, const int want[3]);

/* After an op's backward: each copy's gradient (when written) into its
 * original's gradient in the original's layout, and the originals back in
 * node->in[]. */
dp_status_t dp_cuda_layout_restore(dp_cuda_ctx_t *c, dp_node_t *node);

/* The per-channel kernels' (N, C, L) view of a tensor (N, C, L values per
 * example and channel): in NHWC, an (N L, C, 1) one, the channel of
 * element i being i % C (the columns layout of the per-channel sums). */
static inline void dp_cuda_channel_view(int nhwc, int *N, size_t *L) {
    if (nhwc) {
        *N = (int)((size_t)*N * *L);
        *L = 1;
    }
}

/* A 4-D tensor's (N, C, H W) for the layout kernels. */
static inline size_t dp_cuda_plane(const dp_tensor_t *t) { return (size_t)t->shape[2] * (size_t)t->shape[3]; }

#endif
