/* layout_cuda.c - channels-last and bf16 activations on a CUDA device:
 * which layout and format each op takes, and the converted copies of
 * inputs in another one (layout_cuda.h). */
#include "layout_cuda.h"

#include "kernels.h"
#include "ops_cuda_common.h"
#include "precision.h"

/* A converted copy: t first, so that node->in[i] points at both. */
typedef struct {
    dp_tensor_t t;
    dp_tensor_t *orig;
} layout_copy_t;

void dp_cuda_layout_want(const dp_cuda_ctx_t *c, const dp_node_t *node, int want[3]) {
    const int mode = c->channels_last ? DP_CUDA_NHWC : DP_CUDA_NCHW;
    want[0] = want[1] = want[2] = DP_CUDA_ANY_LAYOUT; /* parameters (in[1], in[2]) are NCHW FP32, never converted */
    switch (node->kind) {
    case DP_OP_CONV: /* NHWC descriptors for 2-D convolutions in channels-last mode; a bf16 input is the bf16
                      * plan's operand, the other precisions' plans read floats */
        want[0] = mode | (c->precision == DP_PRECISION_BF16 ? 0 : DP_CUDA_WANT_FP32);
        break;
    case DP_OP_RELU: /* elementwise, or per channel over an (N H W, C) matrix: either layout, either format */
    case DP_OP_SIGMOID:
    case DP_OP_TANH:
    case DP_OP_RELU6:
    case DP_OP_HARDSWISH:
    case DP_OP_HARDSIGMOID:
    case DP_OP_GELU:
    case DP_OP_SILU:
    case DP_OP_BATCH_NORM:
    case DP_OP_MAX_POOL: /* pooling.cu's NHWC loops */
    case DP_OP_AVG_POOL:
    case DP_OP_GLOBAL_AVG_POOL:
    case DP_OP_DROPOUT: /* the mask of each element's NCHW index */
    case DP_OP_DROP_PATH: /* one mask per example */
        break;
    case DP_OP_ADD: /* elementwise, both in one layout: the mode's when they differ; formats may differ */
        if (node->in[0] && node->in[1] && dp_cuda_is_nhwc(node->in[0]) != dp_cuda_is_nhwc(node->in[1]))
            want[0] = want[1] = mode;
        break;
    case DP_OP_MSE:
    case DP_OP_SCALE_CHANNELS: /* x and its (N, C, 1, 1) scale */
    case DP_OP_CONCAT:         /* a and b joined along NCHW's channels */
        want[0] = want[1] = DP_CUDA_NCHW | DP_CUDA_WANT_FP32;
        break;
    default: /* linear, flatten, conv_transpose, softmax_xent, layer_norm: NCHW FP32 kernels */
        want[0] = DP_CUDA_NCHW | DP_CUDA_WANT_FP32;
        break;
    }
}

/* The kernels' order of a copy of t into layout `to` (precision.h's
 * dp_cuda_activation_copy: 0 the same, 1 to NHWC, 2 to NCHW). */
static int copy_order(const dp_tensor_t *t, int to) {
    if (to == DP_CUDA_ANY_LAYOUT || t->ndim != 4 || dp_cuda_is_nhwc(t) == (to == DP_CUDA_NHWC)) return 0;
    return to == DP_CUDA_NHWC ? 1 : 2;
}

dp_status_t dp_cuda_layout_inputs(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, const int want[3]) {
    for (int i = 0; i < 3; i++) {
        dp_tensor_t *t = node->in[i];
        if (!t) continue;
        if (t->layout & DP_CUDA_LAYOUT_COPY) node->in[i] = t = ((layout_copy_t *)t)->orig;
        if (!t->data) continue;
        const int to = want[i] & ~DP_CUDA_WANT_FP32, order = copy_order(t, to);
        const int widen = (want[i] & DP_CUDA_WANT_FP32) && dp_cuda_is_bf16(t); /* bf16 to float */
        if (!order && !widen) continue;
        const int bf16 = dp_cuda_is_bf16(t) && !widen; /* the copy's format */
        const int layout = order == 1 ? DP_CUDA_NHWC : order == 2 ? DP_CUDA_NCHW : dp_cuda_is_nhwc(t) ? DP_CUDA_NHWC
                                                                                                      : DP_CUDA_NCHW;
        const size_t n = dp_tensor_numel(t);
        layout_copy_t *copy = dp_arena_host_alloc(arena, sizeof *copy);
        if (!copy) return dp_fail(DP_ERR_NOMEM, "%s: out of host memory for a layout copy's record", c->name);
        copy->t = *t;
        copy->orig = t;
        copy->t.layout = layout | (bf16 ? DP_CUDA_BF16 : 0) | DP_CUDA_LAYOUT_COPY;
        copy->t.grad = NULL;
        copy->t.grad_unset = 0;
        /* a change of layout alone over one channel or one pixel: both orders are the same bytes, so the copy is a
         * relabelled view of the data (its gradient still its own, converted back by the same identity mapping) */
        const int same_bytes = !widen && (t->shape[1] == 1 || dp_cuda_plane(t) == 1);
        copy->t.data = same_bytes ? t->data : dp_arena_alloc(arena, n * (bf16 ? sizeof(uint16_t) : sizeof(float)));
        if (!copy->t.data || (t->grad && !dp_grad_alloc(arena, &copy->t, n)))
            return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for a%s %s copy of %zu values: use a smaller "
                           "--batch-size, or more devices", c->name, widen ? "n FP32" : "",
                           layout == DP_CUDA_NHWC ? "NHWC" : "NCHW", n);
        if (same_bytes) {
            node->in[i] = &copy->t;
            continue;
        }
        /* FP32 to FP32 across layouts: the layout kernel; a bf16 source: precision.cu's copy */
        const int N = t->shape[0], C = t->ndim > 1 ? t->shape[1] : 1;
        const size_t L = n / ((size_t)N * (size_t)C);
        cudaError_t err = dp_cuda_is_bf16(t) ? dp_cuda_activation_copy(c->stream, t->data, copy->t.data, N, C, L, order,
                                                                         1 | (bf16 ? 2 : 0))
                                             : dp_cuda_layout_copy(c->stream, t->data, copy->t.data, N, C, L,
                                                                   order == 1, 0);
        DP_TRY(dp_cuda_launch(c, err, "layout conversion"));
        node->in[i] = &copy->t;
    }
    return DP_OK;
}

dp_status_t dp_cuda_layout_restore(dp_cuda_ctx_t *c, dp_node_t *node) {
    for (int i = 0; i < 3; i++) {
        dp_tensor_t *t = node->in[i];
        if (!t || !(t->layout & DP_CUDA_LAYOUT_COPY)) continue;
        dp_tensor_t *orig = ((layout_copy_t *)t)->orig;
        node->in[i] = orig;
        if (!t->grad || t->grad_unset || !orig->grad) continue; /* the op passed nothing to this input */
        const int add = !dp_grad_claim(orig);
        /* the gradients are floats in the copy's and the original's layouts */
        cudaError_t err = dp_cuda_is_nhwc(t) == dp_cuda_is_nhwc(orig)
                              ? dp_cuda_accumulate(c->stream, t->grad, orig->grad, dp_tensor_numel(orig), add)
                              : dp_cuda_layout_copy(c->stream, t->grad, orig->grad, orig->shape[0], orig->shape[1],
                                                    dp_cuda_plane(orig), dp_cuda_is_nhwc(orig), add);
        DP_TRY(dp_cuda_launch(c, err, "layout conversion of a gradient"));
    }
    return DP_OK;
}
