/* ops_conv_depthwise.h - library-internal: DP_OP_CONV's direct depthwise
 * path (ops_conv_depthwise.c), called by ops_conv.c. Not installed. */
#ifndef DPTRAIN_OPS_CONV_DEPTHWISE_H
#define DPTRAIN_OPS_CONV_DEPTHWISE_H

#include "conv_common.h"

/* groups = input channels > 1 (each group one input channel, any number
 * of output channels), 2-D or 1-D. */
int dp_conv_depthwise_applies(const dp_conv_geom_t *g);

/* y (N, OC, OH, OW) = conv(x, w) + bias (NULL: none), clamped at 0 when relu. */
dp_status_t dp_conv_depthwise_forward(dp_conv_geom_t *g, const float *x, const float *w, const float *bias,
                                      int relu, float *y, dp_arena_t *arena);

/* dx (prepared, or NULL) += the input gradient, dw (prepared, or NULL) += the
 * weight gradient, bias_sum[oc] (or NULL) += the sums of dy; the node's
 * out.grad is masked in place when it has fuse_relu. */
dp_status_t dp_conv_depthwise_backward(dp_conv_geom_t *g, const dp_node_t *node, float *dx, float *dw,
                                       double *bias_sum, dp_arena_t *arena);

#endif
