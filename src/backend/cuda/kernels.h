/* kernels.h - the launchers of the CUDA backend's own kernels (the *.cu
 * files beside it, one per op family, sharing kernels_common.cuh): plain C
 * declarations, callable from the C11 host files, in one section per file;
 * each launches on `stream` and returns the launch error. Needs only the CUDA
 * runtime's types (no context: the callers pass a stream and device
 * pointers).
 *
 * Stored activations are float or, with --precision bf16, bf16 (uint16_t:
 * layout_cuda.h's DP_CUDA_BF16 mark): a launcher whose activation pointers
 * are `void *` takes `bf16`, one bit per such pointer in argument order
 * (bit 0 the first), set when it holds bf16 values. Gradients are float. */
#ifndef DPTRAIN_CUDA_KERNELS_H
#define DPTRAIN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- reductions.cu: the sum of replicas, bias gradients, metrics -------------------------- */
#define DP_CUDA_REDUCE_MAX_SRC 16
cudaError_t dp_cuda_reduce(cudaStream_t stream, float *dst, const float *const *src, int k, size_t count);
/* Per-channel sums over (N, C, L) run in two passes (kernels_common.cuh):
 * the first writes partial sums to scratch, dp_cuda_channel_partials(N, C,
 * L) values per summed quantity, a function of the shape only. */
size_t dp_cuda_channel_partials(int N, int C, size_t L);
/* db[c] (+)= sum over n, l of dy (N, C, L); partials: dp_cuda_channel_partials
 * floats of scratch. With y (not NULL) the sum is of the gradient through a
 * ReLU, masked = dy where y > 0 else 0, which is written too (N C L; bf16
 * bits: y, masked). */
cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, const void *y, void *masked, float *db, int N,
                              int C, size_t L, int add, float *partials, int bf16);
/* backend.h's count_metrics: sums[0] += loss[0] * scale (loss may be NULL),
 * sums[1] += the rows of logits (n, k) whose first largest entry is labels[i],
 * sums[2] += the rows whose label is among the 5 largest (backend.h's rule) */
cudaError_t dp_cuda_count_metrics(cudaStream_t stream, double *sums, const float *loss, double scale,
                                  const float *logits, const int32_t *labels, int n, int k);

/* Gradient clipping's sum of squares (backend.h sum_squares): x[0, n)
 * squared and summed in double in a fixed geometry (each of
 * DP_CUDA_SQUARES_BLOCKS blocks' threads a strided share in order, a tree
 * in each block, a tree over the blocks): the same bits every run on any
 * GPU. scratch: DP_CUDA_SQUARES_BLOCKS + 1 doubles of device memory; the
 * sum is left in scratch[DP_CUDA_SQUARES_BLOCKS]. */
#define DP_CUDA_SQUARES_BLOCKS 256
cudaError_t dp_cuda_sum_squares(cudaStream_t stream, const float *x, size_t n, double *scratch);

/* --- data.cu: a batch's bytes as the model's input ------------------------------------------ */
/* dp_pixels_to_input's values (data.h): p * (1/255), or with `normalize`
 * (p * (1/255) - mean[c]) / std[c] for channel c = (offset in the example) / plane */
typedef struct {
    int normalize;
    int channels;
    size_t plane; /* H * W */
    float mean[4], std[4];
} dp_cuda_pixel_map_t;
/* x = the input of `values` bytes (n examples of channels x plane) */
/* x[i, c, y1:y2, x1:x2] = src ? src[same] : 0 for each example i's box {y1, y2, x1, x2}
 * = boxes[4i ..] (device memory; empty: none), every channel (backend.h paste_boxes) */
cudaError_t dp_cuda_paste_boxes(cudaStream_t stream, float *x, const float *src, int n, int channels, int height,
                                int width, const int32_t *boxes);
cudaError_t dp_cuda_input_from_bytes(cudaStream_t stream, const uint8_t *pixels, size_t values,
                                     const dp_cuda_pixel_map_t *map, float *x);

/* --- optimizers.cu: sgd, momentum, adagrad, adam, adamw ----------------------------------- */
/* kind: dp_optim_kind_t; states as dp_optimizer_state; decay: adamw's 1 - lr * weight_decay */
typedef struct {
    int kind, nesterov;
    float neg_lr, wd, momentum, eps, b1, b2, one_minus_b1, one_minus_b2, neg_step_size, correction2_sqrt, decay;
} dp_cuda_optim_args_t;
/* device_args: one dp_cuda_optim_args_t in device memory, read by the kernel when it runs */
cudaError_t dp_cuda_optim(cudaStream_t stream, const dp_cuda_optim_args_t *device_args, float *p, const float *g,
                          float *s0, float *s1, size_t n);

/* --- elementwise.cu: bias, ReLU, sigmoid, tanh, add, dropout, scale ----------------------- */
/* x[0, n) *= factor, one rounding each (backend.h scale_range) */
cudaError_t dp_cuda_scale(cudaStream_t stream, float *x, float factor, size_t n);
/* avg[0, n) = decay * avg + one_minus_decay * x, each product and the sum rounded (backend.h ema_update) */
cudaError_t dp_cuda_ema(cudaStream_t stream, float *avg, const float *x, float decay, float one_minus_decay, size_t n);
cudaError_t dp_cuda_fill_rows(cudaStream_t stream, float *y, const float *b, int rows, int cols);
/* y (N, C, L) = relu(y + b[c]) (b may be NULL; relu when fuse_relu) */
cudaError_t dp_cuda_bias_act(cudaStream_t stream, void *y, const float *b, int N, int C, size_t L, int relu,
                             int bf16);
/* out = dy where y > 0 else 0 (n; bf16 bits: y, out) */
cudaError_t dp_cuda_relu_mask(cudaStream_t stream, const void *y, const float *dy, void *out, size_t n, int bf16);
cudaError_t dp_cuda_relu_forward(cudaStream_t stream, const void *x, void *y, size_t n, int bf16);
/* dx (+)= dy where y > 0 */
cudaError_t dp_cuda_relu_backward(cudaStream_t stream, const void *y, const float *dy, float *dx, size_t n, int add,
                                  int bf16);
/* the same into two grads in one pass, dx0 then dx1 (either NULL: none; the
 * same pointer twice: added twice, in that order) */
cudaError_t dp_cuda_relu_backward_pair(cudaStream_t stream, const void *y, const float *dy, float *dx0, int add0,
                                       float *dx1, int add1, size_t n, int bf16);
/* kind 0: sigmoid, 1: tanh, 2: relu6, 3: hardswish, 4: hardsigmoid, 5: silu, 6: gelu; backward from y (kinds
 * 0 to 2) or from x (3 to 6: pass x as y, its bf16 bit as bf16) */
cudaError_t dp_cuda_unary_forward(cudaStream_t stream, int kind, const void *x, void *y, size_t n, int bf16);
cudaError_t dp_cuda_unary_backward(cudaStream_t stream, int kind, const void *y, const float *dy, float *dx,
                                   size_t n, int add, int bf16);
/* y (N C planes of `plane` floats) = x s, s one factor per plane (shared 0) or per channel (shared = C: s
 * (1, C, 1, 1) broadcast over the batch); backward dx (+)= dy s, ds (+)= the sum of dy x over the factor's
 * planes (either NULL: none) */
cudaError_t dp_cuda_scale_channels(cudaStream_t stream, const float *x, const float *s, float *y, size_t n, size_t plane,
                                   size_t shared);
/* y (rows, na + nb) = each row of a (rows, na) then of b (rows, nb); backward: da, db (+)= their slices of dy */
cudaError_t dp_cuda_concat(cudaStream_t stream, const float *a, const float *b, float *y, size_t rows, size_t na,
                           size_t nb);
cudaError_t dp_cuda_concat_backward(cudaStream_t stream, const float *dy, float *da, int add_da, float *db, int add_db,
                                    size_t rows, size_t na, size_t nb);
cudaError_t dp_cuda_scale_channels_backward(cudaStream_t stream, const float *dy, const float *x, const float *s,
                                            float *dx, int add_dx, float *ds, int add_ds, size_t n, size_t plane,
                                            size_t shared);
/* layer norm over the C channels of every position of x (N, C, S), FP32 (ops_layer_norm.c): saved
 * (2 N S doubles) = [mean (N S), rstd (N S)]; w, b (C) or NULL; backward: dx, dw, db each NULL
 * (none) or written / added (add_*) */
cudaError_t dp_cuda_ln_forward(cudaStream_t stream, const float *x, const float *w, const float *b, float *y,
                               double *saved, int N, int C, size_t S, double eps);
cudaError_t dp_cuda_ln_backward(cudaStream_t stream, const float *x, const float *w, const float *dy,
                                const double *saved, float *dx, int add_dx, float *dw, int add_w, float *db, int add_b,
                                int N, int C, size_t S);
cudaError_t dp_cuda_add(cudaStream_t stream, const void *a, const void *b, void *y, size_t n, int relu, int bf16);
/* The layouts of an (N, C, L) tensor: to_nhwc 1: dst (N, L, C) (+)= src (N, C, L); 0: dst (N, C, L)
 * (+)= src (N, L, C). Activations (L = H W) and filters (N = K, C = C / groups, L = R S: KCRS to
 * KRSC) alike; each element copied (add 0) or added (add 1) alone: the same bits both ways. */
cudaError_t dp_cuda_layout_copy(cudaStream_t stream, const float *src, float *dst, int N, int C, size_t L, int to_nhwc,
                                int add);
/* dx (+)= dy */
cudaError_t dp_cuda_accumulate(cudaStream_t stream, const float *dy, float *dx, size_t n, int add);
/* y (+)= x * scale where ops_dropout.c's mask keeps the element, else 0; the mask's seed is *seed_at
 * (device memory, read when the kernel runs) when seed_at is not NULL, else seed; C > 0: x and y
 * NHWC with C channels, each element's mask that of its NCHW index (the same elements dropped); C < 0:
 * drop path, every element takes the mask of its example's element 0 (either layout) */
cudaError_t dp_cuda_dropout(cudaStream_t stream, const void *x, void *y, int N, size_t per_example, uint64_t seed,
                            const uint64_t *seed_at, int64_t offset, uint64_t threshold, float scale, int add, int C,
                            int bf16);

/* --- conv_direct.cu: a direct convolution forward for few inputs per output --------------- */
/* A 2-D convolution of one group over NCHW FP32 tensors: x (N, C, H, W), w
 * (K, C, kh, kw), y (N, K, OH, OW); stride, padding and dilation per dim. */
typedef struct {
    int N, C, H, W, K, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
} dp_cuda_conv_direct_t;
#define DP_CUDA_DIRECT_MAX 80 /* C kh kw at most this (a CIFAR 3x5x5 layer's 75) */
/* 1 when the kernel takes g: C kh kw <= DP_CUDA_DIRECT_MAX, x's and y's elements below 2^31 */
int dp_cuda_conv_direct_fits(const dp_cuda_conv_direct_t *g);
/* y = relu(conv(x, w) + bias) (bias may be NULL; relu when set); cudaErrorInvalidValue where it does not fit */
cudaError_t dp_cuda_conv_direct_forward(cudaStream_t stream, const dp_cuda_conv_direct_t *g, const float *x,
                                        const float *w, const float *bias, float *y, int relu);

/* --- pooling.cu: pooling, global average pooling, window copy ----------------------------- */
/* pooling over (planes, D, H, W) -> (planes, OD, OH, OW); 1-D and 2-D have
 * D (and H) = 1 with a window of 1 there (kernel 1, stride 1, pad 0, dilation 1).
 * C = 0: planes in NC(D)HW order; C > 0: x and y NHWC (2-D; planes = N C), the
 * same sums in the same order per element. */
typedef struct {
    int planes, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, count_include_pad;
    int C;
} dp_cuda_pool_t;
cudaError_t dp_cuda_max_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const void *x, void *y,
                                     int32_t *argmax, int bf16);
cudaError_t dp_cuda_max_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                      const int32_t *argmax, float *dx, int add);
cudaError_t dp_cuda_avg_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const void *x, void *y, int bf16);
cudaError_t dp_cuda_avg_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy, float *dx,
                                      int add);
/* global average pooling of (planes, plane) values; C > 0: x (and dx) NHWC, planes = N C, y (N, C) */
cudaError_t dp_cuda_global_avg_forward(cudaStream_t stream, const void *x, void *y, size_t planes, size_t plane,
                                       int C, int bf16);
cudaError_t dp_cuda_global_avg_backward(cudaStream_t stream, const float *dy, float *dx, size_t planes, size_t plane,
                                        int C, int add);
/* dst (planes, dst[0..2]) = src (planes, src[0..2]) at (d, h, w) + offset, 0
 * where that falls outside src: a crop (offset >= 0) or a zero padding (< 0) */
typedef struct {
    int planes, src[3], dst[3], offset[3];
} dp_cuda_window_t;
cudaError_t dp_cuda_window_copy(cudaStream_t stream, const dp_cuda_window_t *g, const float *src, float *dst);

/* --- loss.cu: softmax cross-entropy, MSE -------------------------------------------------- */
/* loss[0] = sum_i loss_i / denominator, loss_i = (1 - s) (lse_i - x_i[label_i]) + s (lse_i - mean_k x_i[k]),
 * lse_i = logsumexp(x_i), s = smoothing in [0, 1) (0: lse_i - x_i[label_i]); probs (N, K);
 * row_loss (N) doubles of scratch. A label outside [0, K) makes the loss NaN. */
cudaError_t dp_cuda_xent_forward(cudaStream_t stream, const float *x, const int32_t *labels, int N, int K,
                                 double denominator, double smoothing, float *probs, double *row_loss, float *loss);
/* dx (+)= dy[0] / denominator * (probs - ((1 - s) onehot + s / K)) */
cudaError_t dp_cuda_xent_backward(cudaStream_t stream, const float *probs, const int32_t *labels, const float *dy,
                                  int N, int K, double denominator, double smoothing, float *dx, int add);
cudaError_t dp_cuda_mse_forward(cudaStream_t stream, const float *x, const float *t, size_t n, double denominator,
                                float *loss);
cudaError_t dp_cuda_mse_backward(cudaStream_t stream, const float *x, const float *t, const float *dy, size_t n,
                                 double denominator, float *dx, int add);

/* --- norms.cu: batch norm ----------------------------------------------------------------- */
/* batch norm: sums [m, S1 (C), S2 (C)] (doubles); saved [mean (C), invstd (C), m];
 * gsums [sum dy (C), sum dy (x - mean) (C)]; partials: 2 x
 * dp_cuda_channel_partials(N, C, plane) doubles of scratch; coef (finalize's
 * output, apply's input): 3 C floats.
 * bn_stats writes the partials, and sums from them when sums is not NULL
 * (SyncBatchNorm sums those across devices); bn_finalize takes the
 * statistics from the partials (not NULL) or from sums, m = count. */
cudaError_t dp_cuda_bn_stats(cudaStream_t stream, const void *x, int N, int C, size_t plane, int use_shift,
                             double *partials, double *sums, int bf16);
cudaError_t dp_cuda_bn_finalize(cudaStream_t stream, const void *x, int N, int C, size_t plane, int use_shift,
                                const double *partials, const double *sums, int training, double eps, double momentum,
                                float *running_mean, float *running_var, double *saved, double count, const float *w,
                                const float *b, float *coef, int bf16);
/* fuse (ops.h's fuse_relu): 0 none, 1 y = relu(batch norm), 2 y = relu6(batch norm) */
cudaError_t dp_cuda_bn_apply(cudaStream_t stream, const void *x, void *y, int N, int C, size_t plane,
                             const float *coef, int fuse, int bf16);
/* gsums, and dgamma (+)= sum_dyx invstd, dbeta (+)= sum_dy (dw, db: NULL for none); y (fuse_relu's
 * output, else NULL): dy is masked in place first (fuse 1: dy where y > 0; 2: where 0 < y < 6) */
cudaError_t dp_cuda_bn_grad_sums(cudaStream_t stream, const void *x, const void *y, int fuse, float *dy, int N, int C,
                                 size_t plane, const double *saved, double *partials, double *gsums, float *dw,
                                 int add_w, float *db, int add_b, int bf16);
/* coef: 4 C floats of scratch */
cudaError_t dp_cuda_bn_dx(cudaStream_t stream, const void *x, const float *dy, float *dx, int N, int C, size_t plane,
                          const double *saved, const double *gsums, const float *w, int training, int add,
                          float *coef, int bf16);

#ifdef __cplusplus
}
#endif

#endif
