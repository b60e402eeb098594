/* kernels.cu - the CUDA backend's own kernels: the device-order sum of
 * replicas, the batch gather, the four optimizers, bias/ReLU, pooling (1-D
 * to 3-D), conv_transpose's window copy and softmax cross-entropy. Each has
 * a plain C launcher (cuda_internal.h).
 *
 * Floating point follows the CPU code it replaces: the build passes
 * -fmad=false, so a * b + c rounds twice unless written fmaf(a, b, c), which
 * is written exactly where the CPU code calls its mul_add (optim.c). Sums
 * run in the CPU's order where one thread owns an output: reduce and global
 * average pooling give the CPU's bits, the cross-entropy loss its order
 * (its terms use the GPU's expf and log), the metrics (count_metrics) the
 * host's bits. The per-channel sums (bias
 * gradients, batch norm, MSE) are one block each, fixed strided partials
 * and a fixed tree: not the CPU's order, but the same bits every run. Pool
 * backward is a gather (one thread per input element, its outputs in
 * order). No atomics anywhere. */
#include <math.h>

#include "cuda_internal.h"

#define THREADS 256

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535u * 16u ? (b ? b : 1) : 65535u * 16u);
}

#define GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* --- reduce: dst = src[0] + ... + src[k-1], left to right ------------------- */
typedef struct {
    const float *p[DP_CUDA_REDUCE_MAX_SRC];
} src_list_t;

/* __grid_constant__ (here and in gather_kernel): the parameter's array,
 * indexed at run time, is read where it is; a plain by-value parameter is
 * copied to every thread's local memory first (ptxas -warn-lmem-usage). */
__global__ void reduce_kernel(float *dst, const __grid_constant__ src_list_t src, int k, int first, size_t n) {
    GRID_LOOP(i, n) {
        float s = first ? src.p[0][i] : dst[i];
        for (int r = first ? 1 : 0; r < k; r++) s = __fadd_rn(s, src.p[r][i]);
        dst[i] = s;
    }
}

extern "C" cudaError_t dp_cuda_reduce(cudaStream_t stream, float *dst, const float *const *src, int k, size_t count) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    /* chunks of up to 16 sources; later chunks add onto dst, so the order stays 0, 1, ..., k-1 */
    for (int base = 0; base < k; base += DP_CUDA_REDUCE_MAX_SRC) {
        src_list_t list;
        int m = k - base < DP_CUDA_REDUCE_MAX_SRC ? k - base : DP_CUDA_REDUCE_MAX_SRC;
        for (int r = 0; r < m; r++) list.p[r] = src[base + r];
        reduce_kernel<<<blocks_for(count), THREADS, 0, stream>>>(dst, list, m, base == 0, count);
    }
    return cudaGetLastError();
}

/* --- batch: x = pixels[indices] as dp_dataset_fill (/ 255, then normalised), y = labels[indices] --- */
__global__ void gather_kernel(const uint8_t *pixels, const uint8_t *labels, const int *indices, int n, size_t example,
                              const __grid_constant__ dp_cuda_pixel_map_t map, float *x, int32_t *y) {
    const float scale = 1.0f / 255.0f;
    GRID_LOOP(i, (size_t)n * example) {
        size_t e = i / example, j = i % example;
        int index = indices[e];
        float v = __fmul_rn((float)pixels[(size_t)index * example + j], scale);
        if (map.normalize) {
            int c = (int)(j / map.plane);
            v = __fdiv_rn(__fsub_rn(v, map.mean[c]), map.std[c]); /* dataset.c's table, one rounding each */
        }
        x[i] = v;
        if (j == 0) y[e] = labels[index];
    }
}

extern "C" cudaError_t dp_cuda_gather_batch(cudaStream_t stream, const uint8_t *pixels, const uint8_t *labels,
                                            const int *indices, int n, size_t example, const dp_cuda_pixel_map_t *map,
                                            float *x, int32_t *y) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    gather_kernel<<<blocks_for((size_t)n * example), THREADS, 0, stream>>>(pixels, labels, indices, n, example, *map,
                                                                           x, y);
    return cudaGetLastError();
}

/* --- optimizers: optim.c's loops, one element per thread --------------------- */
__global__ void optim_kernel(dp_cuda_optim_args_t a, float *p, const float *g, float *s0, float *s1, size_t n) {
    GRID_LOOP(i, n) {
        float pi = p[i];
        switch (a.kind) {
        case 0: /* sgd */
            p[i] = a.wd == 0.0f ? fmaf(a.neg_lr, g[i], pi) : fmaf(a.neg_lr, fmaf(a.wd, pi, g[i]), pi);
            break;
        case 1: { /* momentum */
            float d = fmaf(a.wd, pi, g[i]);
            float b = __fadd_rn(__fmul_rn(s0[i], a.momentum), d);
            s0[i] = b;
            p[i] = fmaf(a.neg_lr, a.nesterov ? fmaf(a.momentum, b, d) : b, pi);
            break;
        }
        case 2: { /* adagrad */
            float d = fmaf(a.wd, pi, g[i]);
            float s = fmaf(d, d, s0[i]);
            s0[i] = s;
            p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(a.neg_lr, d), __fadd_rn(__fsqrt_rn(s), a.eps)));
            break;
        }
        case 3: { /* adam */
            float d = fmaf(a.wd, pi, g[i]);
            float mi = fmaf(a.one_minus_b1, d, __fmul_rn(s0[i], a.b1));
            float vi = fmaf(__fmul_rn(a.one_minus_b2, d), d, __fmul_rn(s1[i], a.b2));
            s0[i] = mi;
            s1[i] = vi;
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.correction2_sqrt), a.eps);
            p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(a.neg_step_size, mi), denom));
            break;
        }
        }
    }
}

extern "C" cudaError_t dp_cuda_optim(cudaStream_t stream, const dp_cuda_optim_args_t *a, float *p, const float *g,
                                     float *s0, float *s1, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (n == 0) return cudaSuccess;
    optim_kernel<<<blocks_for(n), THREADS, 0, stream>>>(*a, p, g, s0, s1, n);
    return cudaGetLastError();
}

/* --- bias, ReLU --------------------------------------------------------------- */
__global__ void fill_rows_kernel(float *y, const float *b, int rows, int cols) {
    GRID_LOOP(i, (size_t)rows * cols) y[i] = b[i % cols];
}

extern "C" cudaError_t dp_cuda_fill_rows(cudaStream_t stream, float *y, const float *b, int rows, int cols) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    fill_rows_kernel<<<blocks_for((size_t)rows * cols), THREADS, 0, stream>>>(y, b, rows, cols);
    return cudaGetLastError();
}

__global__ void bias_act_kernel(float *y, const float *b, int N, int C, size_t L, int relu) {
    GRID_LOOP(i, (size_t)N * C * L) {
        float v = y[i];
        if (b) v = __fadd_rn(v, b[(i / L) % C]);
        if (relu) v = v < 0.0f ? 0.0f : v;
        y[i] = v;
    }
}

extern "C" cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *b, int N, int C, size_t L,
                                        int relu) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bias_act_kernel<<<blocks_for((size_t)N * C * L), THREADS, 0, stream>>>(y, b, N, C, L, relu);
    return cudaGetLastError();
}

/* One block per channel: each thread sums a strided part of the channel in
 * a fixed order, then a fixed tree combines the threads; the same bits every
 * run (not the CPU's order: a tolerance applies). */
__global__ void bias_grad_kernel(const float *dy, float *db, int N, int C, size_t L, int add) {
    __shared__ float part[THREADS];
    int c = blockIdx.x;
    size_t total = (size_t)N * L;
    float s = 0.0f;
    for (size_t j = threadIdx.x; j < total; j += THREADS) {
        size_t n = j / L, l = j % L;
        s = __fadd_rn(s, dy[((size_t)n * C + c) * L + l]);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] = __fadd_rn(part[threadIdx.x], part[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) db[c] = add ? __fadd_rn(db[c], part[0]) : part[0];
}

extern "C" cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, float *db, int N, int C, size_t L,
                                         int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bias_grad_kernel<<<C, THREADS, 0, stream>>>(dy, db, N, C, L, add);
    return cudaGetLastError();
}

__global__ void relu_mask_kernel(const float *y, const float *dy, float *out, size_t n) {
    GRID_LOOP(i, n) out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

extern "C" cudaError_t dp_cuda_relu_mask(cudaStream_t stream, const float *y, const float *dy, float *out, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_mask_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, out, n);
    return cudaGetLastError();
}

__global__ void relu_forward_kernel(const float *x, float *y, size_t n) {
    GRID_LOOP(i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN stays NaN, as the CPU's */
}

extern "C" cudaError_t dp_cuda_relu_forward(cudaStream_t stream, const float *x, float *y, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}

__global__ void relu_backward_kernel(const float *y, const float *dy, float *dx, size_t n, int add) {
    GRID_LOOP(i, n) {
        float g = y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_relu_backward(cudaStream_t stream, const float *y, const float *dy, float *dx,
                                             size_t n, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, dx, n, add);
    return cudaGetLastError();
}

/* --- pooling, 1-D to 3-D (ops_pool.c's rules): (D, H, W) planes, 1-D and
 * 2-D with the missing leading dims of size 1 and a window of 1 ------------ */
__global__ void max_pool_forward_kernel(dp_cuda_pool_t g, const float *x, float *y, int32_t *argmax) {
    const size_t out_plane = (size_t)g.OD * g.OH * g.OW;
    GRID_LOOP(i, (size_t)g.planes * out_plane) {
        size_t plane = i / out_plane;
        int o = (int)(i % out_plane), od = o / (g.OH * g.OW), oh = o / g.OW % g.OH, ow = o % g.OW;
        const float *xp = x + plane * (size_t)g.D * g.H * g.W;
        float best = -INFINITY;
        int32_t at = -1;
        for (int t = 0; t < g.kd; t++) {
            int d = od * g.sd - g.pd + t * g.dd;
            if (d < 0 || d >= g.D) continue;
            for (int a = 0; a < g.kh; a++) {
                int h = oh * g.sh - g.ph + a * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int b = 0; b < g.kw; b++) {
                    int w = ow * g.sw - g.pw + b * g.dw;
                    if (w < 0 || w >= g.W) continue;
                    int32_t idx = (d * g.H + h) * g.W + w;
                    float v = xp[idx];
                    /* the first maximum in (d, h, w) order wins; a NaN beats everything after it (PyTorch) */
                    if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
                        best = v;
                        at = idx;
                    }
                }
            }
        }
        y[i] = best;
        argmax[i] = at;
    }
}

extern "C" cudaError_t dp_cuda_max_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *x,
                                                float *y, int32_t *argmax) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    max_pool_forward_kernel<<<blocks_for((size_t)g->planes * g->OD * g->OH * g->OW), THREADS, 0, stream>>>(
        *g, x, y, argmax);
    return cudaGetLastError();
}

/* The outputs whose window may hold input row h: oh in [lo, hi]. */
__device__ static void covering(int h, int k, int s, int p, int d, int out, int *lo, int *hi) {
    int span = (k - 1) * d; /* window from oh*s - p to oh*s - p + span */
    int a = h + p - span, b = h + p;
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    *hi = b < 0 ? -1 : b / s;
    if (*hi > out - 1) *hi = out - 1;
}

/* dx of one input element: its outputs in (od, oh, ow) order whose argmax it is */
__global__ void max_pool_backward_kernel(dp_cuda_pool_t g, const float *dy, const int32_t *argmax, float *dx, int add) {
    const size_t in_plane = (size_t)g.D * g.H * g.W, out_plane = (size_t)g.OD * g.OH * g.OW;
    GRID_LOOP(i, (size_t)g.planes * in_plane) {
        size_t plane = i / in_plane;
        int at = (int)(i % in_plane), d = at / (g.H * g.W), h = at / g.W % g.H, w = at % g.W;
        int d0, d1, h0, h1, w0, w1;
        covering(d, g.kd, g.sd, g.pd, g.dd, g.OD, &d0, &d1);
        covering(h, g.kh, g.sh, g.ph, g.dh, g.OH, &h0, &h1);
        covering(w, g.kw, g.sw, g.pw, g.dw, g.OW, &w0, &w1);
        const size_t base = plane * out_plane;
        float s = 0.0f;
        for (int od = d0; od <= d1; od++)
            for (int oh = h0; oh <= h1; oh++)
                for (int ow = w0; ow <= w1; ow++) {
                    size_t o = base + ((size_t)od * g.OH + oh) * g.OW + ow;
                    if (argmax[o] == at) s = __fadd_rn(s, dy[o]);
                }
        dx[i] = add ? __fadd_rn(dx[i], s) : s;
    }
}

extern "C" cudaError_t dp_cuda_max_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                                 const int32_t *argmax, float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    max_pool_backward_kernel<<<blocks_for((size_t)g->planes * g->D * g->H * g->W), THREADS, 0, stream>>>(
        *g, dy, argmax, dx, add);
    return cudaGetLastError();
}

/* The inputs inside [o * s - p, o * s - p + k) along one dim. */
__device__ static int inside(int o, int k, int s, int p, int in) {
    int a = o * s - p;
    return min(a + k, in) - max(a, 0);
}

/* The divisor of output (od, oh, ow): the kernel volume, or the inputs inside the window. */
__device__ static float avg_divisor(const dp_cuda_pool_t *g, int od, int oh, int ow) {
    if (g->count_include_pad) return (float)(g->kd * g->kh * g->kw);
    return (float)(inside(od, g->kd, g->sd, g->pd, g->D) * inside(oh, g->kh, g->sh, g->ph, g->H) *
                   inside(ow, g->kw, g->sw, g->pw, g->W));
}

__global__ void avg_pool_forward_kernel(dp_cuda_pool_t g, const float *x, float *y) {
    const size_t out_plane = (size_t)g.OD * g.OH * g.OW;
    GRID_LOOP(i, (size_t)g.planes * out_plane) {
        size_t plane = i / out_plane;
        int o = (int)(i % out_plane), od = o / (g.OH * g.OW), oh = o / g.OW % g.OH, ow = o % g.OW;
        const float *xp = x + plane * (size_t)g.D * g.H * g.W;
        float s = 0.0f;
        for (int t = 0; t < g.kd; t++) {
            int d = od * g.sd - g.pd + t;
            if (d < 0 || d >= g.D) continue;
            for (int a = 0; a < g.kh; a++) {
                int h = oh * g.sh - g.ph + a;
                if (h < 0 || h >= g.H) continue;
                for (int b = 0; b < g.kw; b++) {
                    int w = ow * g.sw - g.pw + b;
                    if (w >= 0 && w < g.W) s = __fadd_rn(s, xp[(d * g.H + h) * g.W + w]);
                }
            }
        }
        y[i] = __fdiv_rn(s, avg_divisor(&g, od, oh, ow));
    }
}

extern "C" cudaError_t dp_cuda_avg_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *x,
                                                float *y) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    avg_pool_forward_kernel<<<blocks_for((size_t)g->planes * g->OD * g->OH * g->OW), THREADS, 0, stream>>>(*g, x, y);
    return cudaGetLastError();
}

__global__ void avg_pool_backward_kernel(dp_cuda_pool_t g, const float *dy, float *dx, int add) {
    const size_t in_plane = (size_t)g.D * g.H * g.W, out_plane = (size_t)g.OD * g.OH * g.OW;
    GRID_LOOP(i, (size_t)g.planes * in_plane) {
        size_t plane = i / in_plane;
        int at = (int)(i % in_plane), d = at / (g.H * g.W), h = at / g.W % g.H, w = at % g.W;
        int d0, d1, h0, h1, w0, w1;
        covering(d, g.kd, g.sd, g.pd, 1, g.OD, &d0, &d1);
        covering(h, g.kh, g.sh, g.ph, 1, g.OH, &h0, &h1);
        covering(w, g.kw, g.sw, g.pw, 1, g.OW, &w0, &w1);
        const size_t base = plane * out_plane;
        float s = 0.0f;
        for (int od = d0; od <= d1; od++)
            for (int oh = h0; oh <= h1; oh++)
                for (int ow = w0; ow <= w1; ow++)
                    s = __fadd_rn(s, __fdiv_rn(dy[base + ((size_t)od * g.OH + oh) * g.OW + ow],
                                               avg_divisor(&g, od, oh, ow)));
        dx[i] = add ? __fadd_rn(dx[i], s) : s;
    }
}

extern "C" cudaError_t dp_cuda_avg_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                                 float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    avg_pool_backward_kernel<<<blocks_for((size_t)g->planes * g->D * g->H * g->W), THREADS, 0, stream>>>(*g, dy, dx,
                                                                                                        add);
    return cudaGetLastError();
}

/* --- window copy (conv_transpose's crop and zero padding) ---------------------- */
__global__ void window_copy_kernel(dp_cuda_window_t g, const float *src, float *dst) {
    const size_t dst_plane = (size_t)g.dst[0] * g.dst[1] * g.dst[2];
    GRID_LOOP(i, (size_t)g.planes * dst_plane) {
        size_t plane = i / dst_plane;
        int o = (int)(i % dst_plane);
        int d = o / (g.dst[1] * g.dst[2]) + g.offset[0], h = o / g.dst[2] % g.dst[1] + g.offset[1],
            w = o % g.dst[2] + g.offset[2];
        int in = d >= 0 && d < g.src[0] && h >= 0 && h < g.src[1] && w >= 0 && w < g.src[2];
        dst[i] = in ? src[plane * ((size_t)g.src[0] * g.src[1] * g.src[2]) + ((size_t)d * g.src[1] + h) * g.src[2] + w]
                    : 0.0f;
    }
}

extern "C" cudaError_t dp_cuda_window_copy(cudaStream_t stream, const dp_cuda_window_t *g, const float *src,
                                           float *dst) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    window_copy_kernel<<<blocks_for((size_t)g->planes * g->dst[0] * g->dst[1] * g->dst[2]), THREADS, 0, stream>>>(
        *g, src, dst);
    return cudaGetLastError();
}

/* --- softmax cross-entropy (ops_loss.c's arithmetic) --------------------------- */
__global__ void xent_rows_kernel(const float *x, const int32_t *labels, int N, int K, float *probs, double *row_loss) {
    GRID_LOOP(i, (size_t)N) {
        const float *row = x + i * K;
        float *p = probs + i * K;
        float mx = row[0];
        for (int k = 1; k < K; k++)
            if (row[k] > mx) mx = row[k];
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(__fsub_rn(row[k], mx));
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] = __fmul_rn(p[k], inv);
        int label = labels[i];
        row_loss[i] = label < 0 || label >= K ? (double)NAN : log(sum) + (double)mx - (double)row[label];
    }
}

/* One thread: the rows in order, as the CPU's loop. */
__global__ void xent_sum_kernel(const double *row_loss, int N, double denominator, float *loss) {
    double s = 0.0;
    for (int i = 0; i < N; i++) s += row_loss[i];
    loss[0] = (float)(s / denominator);
}

extern "C" cudaError_t dp_cuda_xent_forward(cudaStream_t stream, const float *x, const int32_t *labels, int N, int K,
                                            double denominator, float *probs, double *row_loss, float *loss) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    xent_rows_kernel<<<blocks_for((size_t)N), THREADS, 0, stream>>>(x, labels, N, K, probs, row_loss);
    xent_sum_kernel<<<1, 1, 0, stream>>>(row_loss, N, denominator, loss);
    return cudaGetLastError();
}

__global__ void xent_backward_kernel(const float *probs, const int32_t *labels, const float *dy, int N, int K,
                                     double denominator, float *dx, int add) {
    float scale = (float)(dy[0] / denominator);
    GRID_LOOP(i, (size_t)N * K) {
        int n = (int)(i / K), k = (int)(i % K);
        float g = __fmul_rn(scale, __fsub_rn(probs[i], k == labels[n] ? 1.0f : 0.0f));
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_xent_backward(cudaStream_t stream, const float *probs, const int32_t *labels,
                                             const float *dy, int N, int K, double denominator, float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    xent_backward_kernel<<<blocks_for((size_t)N * K), THREADS, 0, stream>>>(probs, labels, dy, N, K, denominator, dx,
                                                                         add);
    return cudaGetLastError();
}

/* --- metrics: a batch's loss and correct count added to two doubles (backend.h count_metrics) --- */
/* One block: each thread counts its strided rows (trainer.c's rule: the
 * first largest entry), a fixed tree adds the counts (integers: exact),
 * thread 0 adds to the sums with one rounding per operation (__dmul_rn,
 * __dadd_rn: never a fused multiply-add), the host's bits. */
__global__ void count_metrics_kernel(double *sums, const float *loss, double scale, const float *logits,
                                     const int32_t *labels, int n, int k) {
    __shared__ int part[THREADS];
    int correct = 0;
    for (int i = (int)threadIdx.x; i < n; i += THREADS) {
        const float *row = logits + (size_t)i * k; /* (k) */
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        correct += best == labels[i];
    }
    part[threadIdx.x] = correct;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (loss) sums[0] = __dadd_rn(sums[0], __dmul_rn((double)loss[0], scale));
        sums[1] = __dadd_rn(sums[1], (double)part[0]);
    }
}

extern "C" cudaError_t dp_cuda_count_metrics(cudaStream_t stream, double *sums, const float *loss, double scale,
                                             const float *logits, const int32_t *labels, int n, int k) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    count_metrics_kernel<<<1, THREADS, 0, stream>>>(sums, loss, scale, logits, labels, n, k);
    return cudaGetLastError();
}

/* --- sigmoid, tanh, add, dropout (ops_elementwise.c, ops_dropout.c) ----------------- */
__global__ void unary_forward_kernel(int kind, const float *x, float *y, size_t n) {
    GRID_LOOP(i, n) {
        float v = x[i];
        if (kind == 0) { /* sigmoid, without overflow */
            float e = expf(-fabsf(v));
            y[i] = v >= 0.0f ? __fdiv_rn(1.0f, __fadd_rn(1.0f, e)) : __fdiv_rn(e, __fadd_rn(1.0f, e));
        } else {
            y[i] = tanhf(v);
        }
    }
}

extern "C" cudaError_t dp_cuda_unary_forward(cudaStream_t stream, int kind, const float *x, float *y, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    unary_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(kind, x, y, n);
    return cudaGetLastError();
}

__global__ void unary_backward_kernel(int kind, const float *y, const float *dy, float *dx, size_t n, int add) {
    GRID_LOOP(i, n) {
        float yi = y[i];
        float g = kind == 0 ? __fmul_rn(__fmul_rn(dy[i], yi), __fsub_rn(1.0f, yi))
                            : __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(yi, yi)));
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_unary_backward(cudaStream_t stream, int kind, const float *y, const float *dy, float *dx,
                                              size_t n, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    unary_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(kind, y, dy, dx, n, add);
    return cudaGetLastError();
}

__global__ void add_kernel(const float *a, const float *b, float *y, size_t n, int relu) {
    GRID_LOOP(i, n) {
        float v = __fadd_rn(a[i], b[i]);
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

extern "C" cudaError_t dp_cuda_add(cudaStream_t stream, const float *a, const float *b, float *y, size_t n, int relu) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    add_kernel<<<blocks_for(n), THREADS, 0, stream>>>(a, b, y, n, relu);
    return cudaGetLastError();
}

/* dx (+)= dy */
__global__ void accumulate_kernel(const float *dy, float *dx, size_t n, int add) {
    GRID_LOOP(i, n) dx[i] = add ? __fadd_rn(dx[i], dy[i]) : dy[i];
}

extern "C" cudaError_t dp_cuda_accumulate(cudaStream_t stream, const float *dy, float *dx, size_t n, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    accumulate_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dy, dx, n, add);
    return cudaGetLastError();
}

#define GOLDEN 0x9E3779B97F4A7C15ull
__device__ static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ops_dropout.c's mask: element i of example e kept when
 * mix64(key(seed, e) + (i + 1) GOLDEN) >> 11 >= threshold. y = x * scale or 0
 * (forward), dx (+)= dy * scale or 0 (backward: x = dy, add). */
__global__ void dropout_kernel(const float *x, float *y, int N, size_t per_example, uint64_t seed, int64_t offset,
                               uint64_t threshold, float scale, int add) {
    GRID_LOOP(j, (size_t)N * per_example) {
        size_t n = j / per_example, i = j % per_example;
        uint64_t key = mix64(mix64(seed) + (uint64_t)(offset + (int64_t)n) * GOLDEN);
        int kept = (mix64(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= threshold;
        float g = kept ? __fmul_rn(x[j], scale) : 0.0f;
        y[j] = add ? __fadd_rn(y[j], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_dropout(cudaStream_t stream, const float *x, float *y, int N, size_t per_example,
                                       uint64_t seed, int64_t offset, uint64_t threshold, float scale, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    dropout_kernel<<<blocks_for((size_t)N * per_example), THREADS, 0, stream>>>(x, y, N, per_example, seed, offset,
                                                                              threshold, scale, add);
    return cudaGetLastError();
}

/* --- global average pooling, MSE (ops_pool.c, ops_loss.c) ----------------------------- */
/* One thread per plane, the CPU's four double lanes in the same order: its bits. */
__global__ void global_avg_kernel(const float *x, float *y, size_t planes, size_t plane) {
    GRID_LOOP(p, planes) {
        const float *src = x + p * plane;
        double lanes[4] = {0.0, 0.0, 0.0, 0.0};
        size_t i = 0;
        for (; i + 4 <= plane; i += 4)
            for (int j = 0; j < 4; j++) lanes[j] += src[i + j];
        for (; i < plane; i++) lanes[0] += src[i];
        y[p] = (float)(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) / (double)plane);
    }
}

extern "C" cudaError_t dp_cuda_global_avg_forward(cudaStream_t stream, const float *x, float *y, size_t planes,
                                                  size_t plane) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    global_avg_kernel<<<blocks_for(planes), THREADS, 0, stream>>>(x, y, planes, plane);
    return cudaGetLastError();
}

__global__ void global_avg_backward_kernel(const float *dy, float *dx, size_t planes, size_t plane, int add) {
    const float inv = __fdiv_rn(1.0f, (float)plane);
    GRID_LOOP(i, planes * plane) {
        float g = __fmul_rn(dy[i / plane], inv);
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_global_avg_backward(cudaStream_t stream, const float *dy, float *dx, size_t planes,
                                                   size_t plane, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    global_avg_backward_kernel<<<blocks_for(planes * plane), THREADS, 0, stream>>>(dy, dx, planes, plane, add);
    return cudaGetLastError();
}

/* One block: fixed strided partial sums in double, then a fixed tree: the
 * same bits every run (not the CPU's single chain: a tolerance applies). */
__global__ void mse_kernel(const float *x, const float *t, size_t n, double denominator, float *loss) {
    __shared__ double part[THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += THREADS) {
        double d = (double)x[i] - (double)t[i];
        s += d * d;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / denominator);
}

extern "C" cudaError_t dp_cuda_mse_forward(cudaStream_t stream, const float *x, const float *t, size_t n,
                                           double denominator, float *loss) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    mse_kernel<<<1, THREADS, 0, stream>>>(x, t, n, denominator, loss);
    return cudaGetLastError();
}

__global__ void mse_backward_kernel(const float *x, const float *t, const float *dy, size_t n, double denominator,
                                    float *dx, int add) {
    float scale = (float)(2.0 * dy[0] / denominator);
    GRID_LOOP(i, n) {
        float g = __fmul_rn(scale, __fsub_rn(x[i], t[i]));
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_mse_backward(cudaStream_t stream, const float *x, const float *t, const float *dy,
                                            size_t n, double denominator, float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    mse_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, t, dy, n, denominator, dx, add);
    return cudaGetLastError();
}

/* --- batch norm (ops_batch_norm.c's formulas; sums in double) ------------------------------ */
/* One block per channel c: sums[1 + c] = sum (x - K), sums[1 + C + c] = sum
 * (x - K)^2 over the N planes, K = 0 (use_shift 0) or the channel's first
 * value. Fixed strided partials and a fixed tree: the same bits every run. */
__global__ void bn_stats_kernel(const float *x, int N, int C, size_t plane, int use_shift, double *sums) {
    __shared__ double p1[THREADS], p2[THREADS];
    int c = blockIdx.x;
    double k = use_shift ? (double)x[(size_t)c * plane] : 0.0;
    double s1 = 0.0, s2 = 0.0;
    for (size_t j = threadIdx.x; j < (size_t)N * plane; j += THREADS) {
        size_t n = j / plane, i = j % plane;
        double d = (double)x[((size_t)n * C + c) * plane + i] - k;
        s1 += d;
        s2 += d * d;
    }
    p1[threadIdx.x] = s1;
    p2[threadIdx.x] = s2;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            p1[threadIdx.x] += p1[threadIdx.x + w];
            p2[threadIdx.x] += p2[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[1 + c] = p1[0];
        sums[1 + C + c] = p2[0];
        if (c == 0) sums[0] = (double)N * (double)plane;
    }
}

extern "C" cudaError_t dp_cuda_bn_stats(cudaStream_t stream, const float *x, int N, int C, size_t plane, int use_shift,
                                        double *sums) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_stats_kernel<<<C, THREADS, 0, stream>>>(x, N, C, plane, use_shift, sums);
    return cudaGetLastError();
}

/* saved = [mean (C), invstd (C), m]; training: from sums (and the shift
 * K), updating the running stats; inference: from the running stats. */
__global__ void bn_finalize_kernel(const float *x, int C, size_t plane, int use_shift, const double *sums, int training,
                                   double eps, double momentum, float *running_mean, float *running_var, double *saved,
                                   double count) {
    GRID_LOOP(c, (size_t)C) {
        if (training) {
            double m = sums[0];
            double shifted_mean = sums[1 + c] / m;
            double var = sums[1 + C + c] / m - shifted_mean * shifted_mean;
            if (var < 0.0) var = 0.0;
            double mean = (use_shift ? (double)x[c * plane] : 0.0) + shifted_mean;
            saved[c] = mean;
            saved[C + c] = 1.0 / sqrt(var + eps);
            if (running_mean) {
                running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
                running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
            }
            if (c == 0) saved[2 * C] = m;
        } else {
            saved[c] = running_mean[c];
            saved[C + c] = 1.0 / sqrt((double)running_var[c] + eps);
            if (c == 0) saved[2 * C] = count;
        }
    }
}

extern "C" cudaError_t dp_cuda_bn_finalize(cudaStream_t stream, const float *x, int C, size_t plane, int use_shift,
                                           const double *sums, int training, double eps, double momentum,
                                           float *running_mean, float *running_var, double *saved, double count) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_finalize_kernel<<<blocks_for((size_t)C), THREADS, 0, stream>>>(x, C, plane, use_shift, sums, training, eps,
                                                                    momentum, running_mean, running_var, saved, count);
    return cudaGetLastError();
}

/* y = (x - mean_hi) scale + shift, as the CPU's forward */
__global__ void bn_apply_kernel(const float *x, float *y, int N, int C, size_t plane, const double *saved,
                                const float *w, const float *b) {
    GRID_LOOP(j, (size_t)N * C * plane) {
        int c = (int)((j / plane) % C);
        double scale = saved[C + c] * (w ? (double)w[c] : 1.0);
        float mean_hi = (float)saved[c];
        float shift = (float)((b ? (double)b[c] : 0.0) - (saved[c] - (double)mean_hi) * scale);
        y[j] = __fadd_rn(__fmul_rn(__fsub_rn(x[j], mean_hi), (float)scale), shift);
    }
}

extern "C" cudaError_t dp_cuda_bn_apply(cudaStream_t stream, const float *x, float *y, int N, int C, size_t plane,
                                        const double *saved, const float *w, const float *b) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_apply_kernel<<<blocks_for((size_t)N * C * plane), THREADS, 0, stream>>>(x, y, N, C, plane, saved, w, b);
    return cudaGetLastError();
}

/* One block per channel: gsums[c] = sum dy, gsums[C + c] = sum dy (x - mean). */
__global__ void bn_grad_sums_kernel(const float *x, const float *dy, int N, int C, size_t plane, const double *saved,
                                    double *gsums) {
    __shared__ double p1[THREADS], p2[THREADS];
    int c = blockIdx.x;
    double mean = saved[c], s1 = 0.0, s2 = 0.0;
    for (size_t j = threadIdx.x; j < (size_t)N * plane; j += THREADS) {
        size_t at = ((j / plane) * C + c) * plane + j % plane;
        s1 += (double)dy[at];
        s2 += (double)dy[at] * ((double)x[at] - mean);
    }
    p1[threadIdx.x] = s1;
    p2[threadIdx.x] = s2;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            p1[threadIdx.x] += p1[threadIdx.x + w];
            p2[threadIdx.x] += p2[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        gsums[c] = p1[0];
        gsums[C + c] = p2[0];
    }
}

extern "C" cudaError_t dp_cuda_bn_grad_sums(cudaStream_t stream, const float *x, const float *dy, int N, int C,
                                            size_t plane, const double *saved, double *gsums) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_grad_sums_kernel<<<C, THREADS, 0, stream>>>(x, dy, N, C, plane, saved, gsums);
    return cudaGetLastError();
}

/* dgamma (+)= sum_dyx invstd, dbeta (+)= sum_dy */
__global__ void bn_param_grads_kernel(int C, const double *gsums, const double *saved, float *dw, int add_w, float *db,
                                      int add_b) {
    GRID_LOOP(c, (size_t)C) {
        if (dw) {
            float g = (float)(gsums[C + c] * saved[C + c]);
            dw[c] = add_w ? __fadd_rn(dw[c], g) : g;
        }
        if (db) {
            float g = (float)gsums[c];
            db[c] = add_b ? __fadd_rn(db[c], g) : g;
        }
    }
}

extern "C" cudaError_t dp_cuda_bn_param_grads(cudaStream_t stream, int C, const double *gsums, const double *saved,
                                              float *dw, int add_w, float *db, int add_b) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_param_grads_kernel<<<blocks_for((size_t)C), THREADS, 0, stream>>>(C, gsums, saved, dw, add_w, db, add_b);
    return cudaGetLastError();
}

/* dx (+)= k_dy dy + k_x (x - mean_f) + k_0, the CPU's coefficients per channel */
__global__ void bn_dx_kernel(const float *x, const float *dy, float *dx, int N, int C, size_t plane, const double *saved,
                             const double *gsums, const float *w, int training, int add) {
    GRID_LOOP(j, (size_t)N * C * plane) {
        int c = (int)((j / plane) % C);
        double invstd = saved[C + c], gamma = w ? (double)w[c] : 1.0, m = saved[2 * C];
        float k_dy = (float)(gamma * invstd), k_x = 0.0f, k_0 = 0.0f;
        if (training) {
            k_x = (float)(-gamma * invstd * invstd * invstd * gsums[C + c] / m);
            k_0 = (float)(-gamma * invstd * gsums[c] / m);
        }
        float mean = (float)saved[c];
        k_0 = __fadd_rn(k_0, (float)(-(double)k_x * (saved[c] - (double)mean)));
        float g = __fadd_rn(__fadd_rn(__fmul_rn(k_dy, dy[j]), __fmul_rn(k_x, __fsub_rn(x[j], mean))), k_0);
        dx[j] = add ? __fadd_rn(dx[j], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_bn_dx(cudaStream_t stream, const float *x, const float *dy, float *dx, int N, int C,
                                     size_t plane, const double *saved, const double *gsums, const float *w,
                                     int training, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    bn_dx_kernel<<<blocks_for((size_t)N * C * plane), THREADS, 0, stream>>>(x, dy, dx, N, C, plane, saved, gsums, w,
                                                                          training, add);
    return cudaGetLastError();
}
