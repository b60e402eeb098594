/* conv_winograd.h - library-internal: the Winograd convolution of the CPU
 * backend (conv_winograd.c) for 2-D, stride-1 convolutions with a 5x5
 * kernel, which ops_conv.c routes to it (forward and backward). Not
 * installed, not part of the public API. */
#ifndef DPTRAIN_CONV_WINOGRAD_H
#define DPTRAIN_CONV_WINOGRAD_H

#include "conv_common.h"

/* Which convolutions take the Winograd path: DP_WINO_OFF (none: the
 * default, im2col + GEMM everywhere), DP_WINO_ON (those it was measured
 * faster on: 5x5 kernels with at least 8 input and output channels; the
 * backend's set_winograd, `dptrain train --winograd`, or the environment's
 * DPTRAIN_CONV=winograd), DP_WINO_ALL (every 5x5 convolution it can
 * compute: for tests). Off by default because its rounding errors are
 * larger: about 3e-6 of the largest output against im2col's 6e-7 on
 * LeNet's conv2 (tests/test_conv_winograd.c). */
typedef enum { DP_WINO_OFF = 0, DP_WINO_ON = 1, DP_WINO_ALL = 2 } dp_wino_mode_t;

/* Sets the mode for the whole process; returns the previous one. Without
 * a call, the first use reads DPTRAIN_CONV (winograd = on, im2col = off;
 * another value is off, with one warning line). */
dp_wino_mode_t dp_conv_winograd_set_mode(dp_wino_mode_t mode);

/* DP_ERR_ARG naming the variable and its values when DPTRAIN_CONV is set
 * to something else than winograd or im2col (dp_cpu_init calls it). */
dp_status_t dp_conv_winograd_check_env(void);

/* The mode in use. */
dp_wino_mode_t dp_conv_winograd_mode(void);

/* 1 when the node's geometry goes to the Winograd path under the current
 * mode: 2-D, one group, stride 1, dilation 1, a 5x5 kernel, pad < 5. */
int dp_conv_winograd_applies(const dp_conv_geom_t *g);

/* y (N, OC, OH, OW) = conv(x (N, C, H, W), w (OC, C, k, k)) + bias, ReLU
 * when relu is set; bias may be NULL. Buffers from the arena. */
dp_status_t dp_conv_winograd_forward(const dp_conv_geom_t *g, const float *x, const float *w, const float *bias,
                                     int relu, float *y, dp_arena_t *arena);

/* The backward: with dyr = dy where y > 0 (relu set) or dy: dx += the
 * data gradient, dw += the weight gradient (each may be NULL), and
 * bias_sum[oc] += the sum of dyr's rows, image by image, in the order of
 * ops_conv.c's im2col path (same bits); bias_sum may be NULL. */
dp_status_t dp_conv_winograd_backward(const dp_conv_geom_t *g, const float *x, const float *w, const float *y,
                                      const float *dy, int relu, float *dx, float *dw, double *bias_sum,
                                      dp_arena_t *arena);

#endif
