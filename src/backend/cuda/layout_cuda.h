/* layout_cuda.h - channels-last and bf16 activations on a CUDA device
 * (set_channels_last, --precision bf16; layout_cuda.c): the storage marks
 * of dp_tensor_t that only this backend sets and reads, and the
 * conversions that let every op of the table take an input of either
 * layout and either number format.
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
 * In NCHW mode no op asks for NHWC, nothing is NHWC, nothing is converted.
 *
 * Number format. With --precision bf16 the activations an op keeps for the
 * backward are stored in bf16: the outputs of 3 to 5 dims of conv (cuDNN's
 * bf16 result written in place), batch norm, relu, sigmoid, tanh, add,
 * max, average and global average pooling and dropout (dp_cuda_act_output)
 * hold uint16_t values in `data` and carry DP_CUDA_BF16 in their mark; their
 * `grad` stays FP32 (in the tensor's layout), and so does every 2-D output
 * (linear, flatten, the losses): the trainer, eval and predict see FP32.
 * Those ops read an input in either format (their kernels' ld/st,
 * kernels_common.cuh) and conv hands a bf16 input to cuDNN as it is (in a
 * bf16 plan; in another precision it asks for FP32); every other op asks
 * for FP32 (DP_CUDA_WANT_FP32) and gets a converted copy as above, exact
 * (bf16 to float), its gradient added back after the backward.
 * Nothing above the backend ever sees a bf16 tensor, and in the other
 * precisions nothing is bf16. */
#ifndef DPTRAIN_LAYOUT_CUDA_H
#define DPTRAIN_LAYOUT_CUDA_H

#include "cuda_context.h"
#include "dptrain/ops.h"

#define DP_CUDA_NCHW 0
#define DP_CUDA_NHWC 1
#define DP_CUDA_LAYOUT_COPY 0x10 /* or-ed into a converted copy's mark (layout_cuda.c) */
#define DP_CUDA_BF16 0x20        /* or-ed into the mark: data holds bf16 (uint16_t) values */
#define DP_CUDA_ANY_LAYOUT 0x40  /* dp_cuda_layout_want: the op takes either layout */
#define DP_CUDA_WANT_FP32 0x80   /* dp_cuda_layout_want, or-ed: the op reads FP32 data only */

/* 1 when t's data lie in NHWC order (a 4-D tensor marked so). */
static inline int dp_cuda_is_nhwc(const dp_tensor_t *t) {
    return t && t->ndim == 4 && (t->layout & ~(DP_CUDA_LAYOUT_COPY | DP_CUDA_BF16)) == DP_CUDA_NHWC;
}

/* 1 when t's data hold bf16 values (DP_CUDA_BF16), 0 when floats. */
static inline int dp_cuda_is_bf16(const dp_tensor_t *t) { return t && (t->layout & DP_CUDA_BF16) != 0; }

/* The kernels' `bf16` bits (kernels.h) of up to three activations, in
 * argument order (NULL: a float or absent one). */
static inline int dp_cuda_bf16_bits(const dp_tensor_t *a, const dp_tensor_t *b, const dp_tensor_t *c) {
    return dp_cuda_is_bf16(a) | dp_cuda_is_bf16(b) << 1 | dp_cuda_is_bf16(c) << 2;
}

/* want[i] = what op `node` needs of its activation input i on context c:
 * a layout (DP_CUDA_NCHW, DP_CUDA_NHWC) or DP_CUDA_ANY_LAYOUT (as it
 * comes), or-ed with DP_CUDA_WANT_FP32 when it reads floats only
 * (parameters and absent inputs: ANY). */
void dp_cuda_layout_want(const dp_cuda_ctx_t *c, const dp_node_t *node, int want[3]);

/* Before an op's forward: each input i of node whose layout or format is
 * not want[i] replaced by a converted copy (see above); a copy left in
 * node->in[i] by an earlier forward of the same node first gives way to
 * its original. */
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
