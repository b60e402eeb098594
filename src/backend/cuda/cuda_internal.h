/* cuda_internal.h - what the CUDA backend's files share: the per-GPU context
 * and the kernel launchers of kernels.cu (plain C declarations, callable
 * from the C11 host files). Internal to the module libdptrain_cuda.so.
 *
 * DESIGN. One context per GPU: one stream, one cuBLAS and one cuDNN handle,
 * a mutex. Every backend function and every op takes the mutex, selects the
 * GPU, and queues its work on the stream; several dptrain devices on one GPU
 * (several worker threads) therefore queue onto the same in-order stream,
 * so whatever a thread queued before a host-side synchronisation (a device
 * wait) runs before what any thread queues after it: the seam's ordering
 * rules carry over without events. Downloads wait for their copy (the host
 * reads the memory at once); so do uploads of more than DP_CUDA_STAGE_BYTES
 * (parameters, optimizer state, an augmented shard: not per step, except
 * the last). A small upload is copied into a pinned staging slot under the
 * lock and queued from there: the caller may reuse its memory at once, the
 * slot is not written again before its copy's event is done (the slots'
 * state is the context's, under the lock). Device memory is
 * freed only after the stream's queued work (dp_cuda_free_idle). An op
 * holds the lock from start to end, except around SyncBatchNorm's host
 * hook (ops_cuda.c bn_sync), which waits at a barrier for every device,
 * those on this GPU included. A failure (a launch, a copy, a fault of
 * asynchronous work seen at a download) is kept in the context (`failed`,
 * `error`, the first one) and every later op fails with it.
 */
#ifndef DPTRAIN_CUDA_INTERNAL_H
#define DPTRAIN_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "dptrain/backend.h"

#define DP_CUDA_MAX_GPUS 8
#define DP_CUDA_MAX_DATASETS 4
#define DP_CUDA_MAX_OPTIMIZERS 64
#define DP_CUDA_STAGE_SLOTS 8
#define DP_CUDA_STAGE_BYTES ((size_t)65536)

typedef struct {
    const uint8_t *host_pixels, *host_labels; /* the host dataset's, with the shape as a key */
    int count, channels, height, width;
    uint8_t *pixels;  /* (count, C, H, W) device copy */
    uint8_t *labels;  /* (count) */
    uint64_t last_use;
} dp_cuda_dataset_t;

typedef struct {
    const dp_optimizer_t *optimizer; /* the host optimizer, as a key */
    size_t n;
    int kind;         /* dp_optim_kind_t */
    uint64_t steps;   /* its step count at the last update */
    float *state[2];  /* (n) device copies of its state buffers */
} dp_cuda_optim_state_t;

typedef struct dp_cuda_context {
    int gpu;
    char name[16]; /* "cuda:N" */
    pthread_mutex_t lock;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    void *workspace; /* cuDNN's, grown on demand */
    size_t workspace_bytes;
    int *indices;    /* (indices_cap) a batch's example indices */
    /* small uploads (<= DP_CUDA_STAGE_BYTES: a batch's indices, the loss
     * seed) are copied into a slot of pinned host memory and queued from
     * there, without a wait: the slots in turn, an event recorded after
     * each slot's copy and waited for (only when not done yet) before the
     * slot is written again */
    uint8_t *stage;  /* (DP_CUDA_STAGE_SLOTS x DP_CUDA_STAGE_BYTES) pinned; NULL until the first */
    cudaEvent_t stage_done[DP_CUDA_STAGE_SLOTS];
    int stage_recorded[DP_CUDA_STAGE_SLOTS];
    int stage_next;
    int stage_refused; /* no pinned memory or events: every upload waits, as larger ones do */
    int indices_cap;
    dp_cuda_dataset_t datasets[DP_CUDA_MAX_DATASETS];
    uint64_t uses;
    dp_cuda_optim_state_t optims[DP_CUDA_MAX_OPTIMIZERS];
    int tf32;        /* --tf32: TF32 math in cuBLAS and cuDNN convolutions (off: FP32) */
    struct dp_cuda_conv_plans *conv_plans; /* ops_cuda.c's cuDNN convolution plans per shape; NULL until the first */
    dp_peer_group_t *peer; /* peer_nccl.c: the NCCL group this GPU sums in (NULL: none); its waits watch the other members */
    /* device memory held through dp_cuda_malloc (every allocation of the backend): the blocks
     * and their sizes, the bytes held now and the most held at once */
    struct dp_cuda_block *blocks;
    int block_count, block_cap;
    size_t mem_in_use, mem_peak;
    int failed;
    char error[256];
    dp_backend_t table;
} dp_cuda_ctx_t;

/* The context of GPU g (NULL until opened). */
dp_cuda_ctx_t *dp_cuda_ctx(int gpu);

/* Takes the lock and selects the GPU / releases the lock. */
void dp_cuda_enter(dp_cuda_ctx_t *c);
void dp_cuda_leave(dp_cuda_ctx_t *c);

/* Records a CUDA runtime failure (the first is kept); returns 0 on success. */
int dp_cuda_check(dp_cuda_ctx_t *c, cudaError_t err, const char *what);
/* The context failed: "NAME: " + the formatted message becomes its sticky
 * error, unless it failed already (the first failure is kept). Under the
 * lock. */
void dp_cuda_fail(dp_cuda_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sticky failure as a status (DP_OK when none), with its message. */
dp_status_t dp_cuda_status(dp_cuda_ctx_t *c);

/* Waits for `event` (NULL: everything queued on the context's stream).
 * In an NCCL group it polls instead (dp_cuda_peer_wait): a sum that waits
 * for a member whose GPU failed never ends, and the wait then aborts the
 * group's communicators. Under the lock. */
cudaError_t dp_cuda_wait(dp_cuda_ctx_t *c, cudaEvent_t event);
cudaError_t dp_cuda_peer_wait(dp_cuda_ctx_t *c, cudaEvent_t event);

/* cudaMalloc of `bytes` (at least 1), counted in the context's memory
 * figures; cudaErrorMemoryAllocation also when the count cannot grow.
 * Under the lock. */
cudaError_t dp_cuda_malloc(dp_cuda_ctx_t *c, void **ptr, size_t bytes);
/* "cuda:N: out of GPU memory: WHAT needs B bytes (... held, peak ...): use a
 * smaller --batch-size, or more devices" as the failure (dp_fail), after
 * clearing the runtime's last error; returns DP_ERR_NOMEM. Under the lock. */
dp_status_t dp_cuda_out_of_memory(dp_cuda_ctx_t *c, const char *what, size_t bytes);

/* cudaFree(ptr) once the stream's queued work is done (cudaFree itself only
 * "may" synchronise: cuda_runtime_api.h); NULL is a no-op. Under the lock. */
void dp_cuda_free_idle(dp_cuda_ctx_t *c, void *ptr, const char *what);

/* peer_nccl.c: sets the table's peer members (backend.h) when built with
 * NCCL; leaves them NULL otherwise. */
void dp_cuda_peer_register(dp_backend_t *table);
/* timer_cuda.c: sets the table's timing marks (backend.h: timer_*). */
void dp_cuda_timer_register(dp_backend_t *table);

/* The op table of GPU g (ops_cuda.c). */
const dp_op_def_t *dp_cuda_op_table(int gpu);

#ifdef __cplusplus
extern "C" {
#endif

/* --- kernels.cu: each launches on `stream` and returns the launch error --- */
#define DP_CUDA_REDUCE_MAX_SRC 16
cudaError_t dp_cuda_reduce(cudaStream_t stream, float *dst, const float *const *src, int k, size_t count);
/* dp_dataset_fill's pixel values: p / 255, or with `normalize`
 * (p / 255 - mean[c]) / std[c] for channel c = (offset in the example) / plane */
typedef struct {
    int normalize;
    size_t plane; /* H * W */
    float mean[4], std[4];
} dp_cuda_pixel_map_t;
cudaError_t dp_cuda_gather_batch(cudaStream_t stream, const uint8_t *pixels, const uint8_t *labels,
                                 const int *indices, int n, size_t example, const dp_cuda_pixel_map_t *map, float *x,
                                 int32_t *y);
/* kind: dp_optim_kind_t; states as dp_optimizer_state */
typedef struct {
    int kind, nesterov;
    float neg_lr, wd, momentum, eps, b1, b2, one_minus_b1, one_minus_b2, neg_step_size, correction2_sqrt;
} dp_cuda_optim_args_t;
cudaError_t dp_cuda_optim(cudaStream_t stream, const dp_cuda_optim_args_t *a, float *p, const float *g, float *s0,
                          float *s1, size_t n);
cudaError_t dp_cuda_fill_rows(cudaStream_t stream, float *y, const float *b, int rows, int cols);
/* y (N, C, L) = relu(y + b[c]) (b may be NULL; relu when fuse_relu) */
cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *b, int N, int C, size_t L, int relu);
/* Per-channel sums over (N, C, L) run in two passes (kernels.cu): the first
 * writes partial sums to scratch, dp_cuda_channel_partials(N, C, L) values
 * per summed quantity, a function of the shape only. */
size_t dp_cuda_channel_partials(int N, int C, size_t L);
/* db[c] (+)= sum over n, l of dy (N, C, L); partials: dp_cuda_channel_partials
 * floats of scratch. With y (not NULL) the sum is of the gradient through a
 * ReLU, masked = dy where y > 0 else 0, which is written too (N C L). */
cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, const float *y, float *masked, float *db, int N,
                              int C, size_t L, int add, float *partials);
/* out = dy where y > 0 else 0 (n) */
cudaError_t dp_cuda_relu_mask(cudaStream_t stream, const float *y, const float *dy, float *out, size_t n);
cudaError_t dp_cuda_relu_forward(cudaStream_t stream, const float *x, float *y, size_t n);
/* dx (+)= dy where y > 0 */
cudaError_t dp_cuda_relu_backward(cudaStream_t stream, const float *y, const float *dy, float *dx, size_t n,
                                  int add);
/* the same into two grads in one pass, dx0 then dx1 (either NULL: none; the
 * same pointer twice: added twice, in that order) */
cudaError_t dp_cuda_relu_backward_pair(cudaStream_t stream, const float *y, const float *dy, float *dx0, int add0,
                                       float *dx1, int add1, size_t n);
/* pooling over (planes, D, H, W) -> (planes, OD, OH, OW); 1-D and 2-D have
 * D (and H) = 1 with a window of 1 there (kernel 1, stride 1, pad 0, dilation 1) */
typedef struct {
    int planes, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, count_include_pad;
} dp_cuda_pool_t;
cudaError_t dp_cuda_max_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *x, float *y,
                                     int32_t *argmax);
cudaError_t dp_cuda_max_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                      const int32_t *argmax, float *dx, int add);
cudaError_t dp_cuda_avg_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *x, float *y);
cudaError_t dp_cuda_avg_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy, float *dx,
                                      int add);
/* dst (planes, dst[0..2]) = src (planes, src[0..2]) at (d, h, w) + offset, 0
 * where that falls outside src: a crop (offset >= 0) or a zero padding (< 0) */
typedef struct {
    int planes, src[3], dst[3], offset[3];
} dp_cuda_window_t;
cudaError_t dp_cuda_window_copy(cudaStream_t stream, const dp_cuda_window_t *g, const float *src, float *dst);
/* loss[0] = sum_i (logsumexp(x_i) - x_i[label_i]) / denominator; probs (N, K);
 * row_loss (N) doubles of scratch. A label outside [0, K) makes the loss NaN. */
cudaError_t dp_cuda_xent_forward(cudaStream_t stream, const float *x, const int32_t *labels, int N, int K,
                                 double denominator, float *probs, double *row_loss, float *loss);
/* dx (+)= dy[0] / denominator * (probs - onehot) */
cudaError_t dp_cuda_xent_backward(cudaStream_t stream, const float *probs, const int32_t *labels, const float *dy,
                                  int N, int K, double denominator, float *dx, int add);

/* backend.h's count_metrics: sums[0] += loss[0] * scale (loss may be NULL),
 * sums[1] += the rows of logits (n, k) whose first largest entry is labels[i] */
cudaError_t dp_cuda_count_metrics(cudaStream_t stream, double *sums, const float *loss, double scale,
                                  const float *logits, const int32_t *labels, int n, int k);

/* kind 0: sigmoid, 1: tanh; backward from y */
cudaError_t dp_cuda_unary_forward(cudaStream_t stream, int kind, const float *x, float *y, size_t n);
cudaError_t dp_cuda_unary_backward(cudaStream_t stream, int kind, const float *y, const float *dy, float *dx,
                                   size_t n, int add);
cudaError_t dp_cuda_add(cudaStream_t stream, const float *a, const float *b, float *y, size_t n, int relu);
/* dx (+)= dy */
cudaError_t dp_cuda_accumulate(cudaStream_t stream, const float *dy, float *dx, size_t n, int add);
/* y (+)= x * scale where ops_dropout.c's mask keeps the element, else 0 */
cudaError_t dp_cuda_dropout(cudaStream_t stream, const float *x, float *y, int N, size_t per_example, uint64_t seed,
                            int64_t offset, uint64_t threshold, float scale, int add);
cudaError_t dp_cuda_global_avg_forward(cudaStream_t stream, const float *x, float *y, size_t planes, size_t plane);
cudaError_t dp_cuda_global_avg_backward(cudaStream_t stream, const float *dy, float *dx, size_t planes, size_t plane,
                                        int add);
cudaError_t dp_cuda_mse_forward(cudaStream_t stream, const float *x, const float *t, size_t n, double denominator,
                                float *loss);
cudaError_t dp_cuda_mse_backward(cudaStream_t stream, const float *x, const float *t, const float *dy, size_t n,
                                 double denominator, float *dx, int add);
/* batch norm: sums [m, S1 (C), S2 (C)] (doubles); saved [mean (C), invstd (C), m];
 * gsums [sum dy (C), sum dy (x - mean) (C)]; partials: 2 x
 * dp_cuda_channel_partials(N, C, plane) doubles of scratch; coef (finalize's
 * output, apply's input): 3 C floats.
 * bn_stats writes the partials, and sums from them when sums is not NULL
 * (SyncBatchNorm sums those across devices); bn_finalize takes the
 * statistics from the partials (not NULL) or from sums, m = count. */
cudaError_t dp_cuda_bn_stats(cudaStream_t stream, const float *x, int N, int C, size_t plane, int use_shift,
                             double *partials, double *sums);
cudaError_t dp_cuda_bn_finalize(cudaStream_t stream, const float *x, int N, int C, size_t plane, int use_shift,
                                const double *partials, const double *sums, int training, double eps, double momentum,
                                float *running_mean, float *running_var, double *saved, double count, const float *w,
                                const float *b, float *coef);
cudaError_t dp_cuda_bn_apply(cudaStream_t stream, const float *x, float *y, int N, int C, size_t plane,
                             const float *coef);
/* gsums, and dgamma (+)= sum_dyx invstd, dbeta (+)= sum_dy (dw, db: NULL for none) */
cudaError_t dp_cuda_bn_grad_sums(cudaStream_t stream, const float *x, const float *dy, int N, int C, size_t plane,
                                 const double *saved, double *partials, double *gsums, float *dw, int add_w, float *db,
                                 int add_b);
/* coef: 4 C floats of scratch */
cudaError_t dp_cuda_bn_dx(cudaStream_t stream, const float *x, const float *dy, float *dx, int N, int C, size_t plane,
                          const double *saved, const double *gsums, const float *w, int training, int add,
                          float *coef);

#ifdef __cplusplus
}
#endif

#endif
