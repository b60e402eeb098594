/* conv_shape.h - the checks and sizes of a convolution node that every
 * backend needs (ops.h's DP_OP_CONV and DP_OP_CONV_TRANSPOSE): the tensors
 * and attributes checked with the CPU op's one-line messages, the sizes
 * per spatial dim (D, H, W; 1 for the dims the input lacks). A transposed
 * convolution is described as the convolution it transposes (its adjoint:
 * in = the op's output, out = the op's input), which is how both backends
 * run it. The CPU ops (ops_conv.c, ops_conv_transpose.c) call these
 * directly, the CUDA module through the host's table (cuda_module.h), so a
 * node is refused alike on every device. Library internal. */
#ifndef DPTRAIN_CONV_SHAPE_H
#define DPTRAIN_CONV_SHAPE_H

#include "dptrain/ops.h"

typedef struct {
    int ndim;              /* of the input: 3, 4 or 5 */
    int batch, in_ch, out_ch, groups; /* of the convolution (conv_transpose: its adjoint's) */
    int in_size[3];        /* (D, H, W) of the convolution's input */
    int out_size[3];       /* (OD, OH, OW) of its output */
    int kernel[3], stride[3], pad[3], dilation[3];
    int output_padding[3]; /* conv_transpose: the op's, 0 otherwise */
} dp_conv_shape_t;

/* conv: x (N, C, [D,] [H,] W), w (OC, C / groups, k...), b (OC) or NULL. */
dp_status_t dp_conv_shape(const dp_node_t *node, dp_conv_shape_t *s);

/* conv_transpose: x (N, C_in, I...), w (C_in, C_out / groups, k...), b
 * (C_out) or NULL; s is the adjoint convolution's: in_ch = C_out, out_ch =
 * C_in, in_size = the op's output size (I - 1) stride - 2 pad +
 * dilation (k - 1) + output_padding + 1, out_size = I. */
dp_status_t dp_conv_transpose_shape(const dp_node_t *node, dp_conv_shape_t *s);

#endif
