/* norms.cu - batch norm: the statistics (per-channel sums over the whole
 * grid, kernels_common.cuh's two passes), finalize (mean, invstd, running
 * statistics and the per-channel coefficients), apply, the gradient sums
 * (with dgamma, dbeta) and dx. x and y (the activations) are float or bf16
 * (the launchers' `bf16` bits, kernels.h); the gradients and every sum FP32
 * or double. */
#include "kernels_common.cuh"

/* --- batch norm (ops_batch_norm.c's formulas; sums in double) ------------------------------ */
/* Statistics values: d = x - K and d^2, K = 0 (use_shift 0) or the
 * channel's first value. */
template <typename T> struct bn_stats_sum {
    typedef double value_t;
    static const int K = 2;
    const T *x;
    size_t plane;
    int use_shift;
    double shift, v[2];
    __device__ void start(int c) { shift = use_shift ? (double)ld(x, (size_t)c * plane) : 0.0; }
    template <typename I> __device__ void add(I at) {
        double d = (double)ld(x, at) - shift;
        v[0] += d;
        v[1] += d * d;
    }
};

__global__ void bn_stats_kernel(red_geom_t g, const void *x, size_t plane, int use_shift, double *partials, int bf16) {
    FORMAT1(bf16, T, bn_stats_sum<T> a = {(const T *)x, plane, use_shift, 0.0, {0.0, 0.0}};
            channel_partials(g, a, partials));
}

/* sums[1 + c] = sum (x - K), sums[1 + C + c] = sum (x - K)^2, sums[0] = N
 * plane: the format SyncBatchNorm sums across devices (without it the
 * statistics go from the partials to bn_finalize_kernel directly) */
__global__ void bn_stats_combine_kernel(const double *partials, int slices, int C, double count, double *sums) {
    const int c = (int)blockIdx.x;
    double v[2];
    combine_slices<double, 2>(partials, slices, C, c, v);
    if (threadIdx.x == 0) {
        sums[1 + c] = v[0];
        sums[1 + C + c] = v[1];
        if (c == 0) sums[0] = count;
    }
}

extern "C" cudaError_t dp_cuda_bn_stats(cudaStream_t stream, const void *x, int N, int C, size_t plane, int use_shift,
                                        double *partials, double *sums, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_stats_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, x, plane, use_shift, partials, bf16);
    if (sums)
        bn_stats_combine_kernel<<<C, COMBINE_THREADS, 0, stream>>>(partials, g.slices, C, (double)N * (double)plane,
                                                                   sums);
    return cudaGetLastError();
}

/* Block c: saved = [mean (C), invstd (C), m]; training: from the
 * statistics (partials: combined here, the second pass of the sums; else
 * sums) and the shift K, m = count, updating the running stats; inference:
 * from the running stats. Then bn_apply's coefficients per channel, coef =
 * [mean_hi (C), scale (C), shift (C)]: the CPU forward's, computed as its
 * per-element code did. */
__global__ void bn_finalize_kernel(const void *x, int x_bf16, int C, size_t plane, int use_shift, const double *partials,
                                   int slices, const double *sums, int training, double eps, double momentum,
                                   float *running_mean, float *running_var, double *saved, double count, const float *w,
                                   const float *b, float *coef) {
    const int c = (int)blockIdx.x;
    double v[2] = {0.0, 0.0};
    if (training && partials) combine_slices<double, 2>(partials, slices, C, c, v);
    if (threadIdx.x == 0) {
        if (training) {
            double m = count;
            double s1 = partials ? v[0] : sums[1 + c], s2 = partials ? v[1] : sums[1 + C + c];
            double shifted_mean = s1 / m;
            double var = s2 / m - shifted_mean * shifted_mean;
            if (var < 0.0) var = 0.0;
            const size_t first = (size_t)c * plane; /* the shift K */
            double mean =
                (use_shift ? (double)(x_bf16 ? ld((const uint16_t *)x, first) : ld((const float *)x, first)) : 0.0) +
                shifted_mean;
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
        double scale = saved[C + c] * (w ? (double)w[c] : 1.0);
        float mean_hi = (float)saved[c];
        coef[c] = mean_hi;
        coef[C + c] = (float)scale;
        coef[2 * C + c] = (float)((b ? (double)b[c] : 0.0) - (saved[c] - (double)mean_hi) * scale);
    }
}

extern "C" cudaError_t dp_cuda_bn_finalize(cudaStream_t stream, const void *x, int N, int C, size_t plane,
                                           int use_shift, const double *partials, const double *sums, int training,
                                           double eps, double momentum, float *running_mean, float *running_var,
                                           double *saved, double count, const float *w, const float *b, float *coef,
                                           int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_finalize_kernel<<<C, COMBINE_THREADS, 0, stream>>>(x, bf16 & 1, C, plane, use_shift, partials, g.slices, sums, training,
                                                          eps, momentum, running_mean, running_var, saved, count, w, b,
                                                          coef);
    return cudaGetLastError();
}

/* y = (x - mean_hi) scale + shift, as the CPU's forward (coef: bn_finalize's);
 * fuse 1: y = relu of that, 2: relu6 of that, as the relu and relu6 ops
 * (fuse_relu; a NaN fails both tests and passes through). A bf16 y is
 * rounded after the clamp, the ops' after the batch norm: the same values
 * (rounding is monotone, 0 and 6 are bf16 values), a zero's sign aside
 * (a v that rounds to -0: -0 there, +0 here; relu alike) */
template <typename I, typename TX, typename TY>
__device__ static void bn_apply_loop(const TX *x, TY *y, const chan_index_t &ci, I n, const float *coef, int fuse) {
    GRID_LOOP_T(I, j, n) {
        int c = channel_of(ci, j);
        float v = __fadd_rn(__fmul_rn(__fsub_rn(ld(x, j), coef[c]), coef[ci.C + c]), coef[2 * ci.C + c]);
        if (fuse == 1) v = v < 0.0f ? 0.0f : v;
        else if (fuse == 2) v = v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v;
        st(y, j, v);
    }
}

__global__ void bn_apply_kernel(const void *x, void *y, chan_index_t ci, size_t n, const float *coef, int fuse,
                                int bf16) {
    FORMAT2(bf16, TX, TY, if (ci.narrow) bn_apply_loop<uint32_t>((const TX *)x, (TY *)y, ci, (uint32_t)n, coef, fuse);
            else bn_apply_loop<size_t>((const TX *)x, (TY *)y, ci, n, coef, fuse));
}

extern "C" cudaError_t dp_cuda_bn_apply(cudaStream_t stream, const void *x, void *y, int N, int C, size_t plane,
                                        const float *coef, int fuse, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * plane;
    bn_apply_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, chan_index(N, C, plane), n, coef, fuse, bf16);
    return cudaGetLastError();
}

/* Gradient sums' values: dy and dy (x - mean); with y (fuse_relu) dy is
 * first the gradient through the activation (relu: dy where y > 0; relu6,
 * `six`: where 0 < y < 6; else 0), written back in place for bn_dx (each
 * element read and written by one thread). */
template <typename TX, typename TY> struct bn_grad_sum {
    typedef double value_t;
    static const int K = 2;
    const TX *x;
    const TY *y;
    int six;
    float *dy;
    const double *saved;
    double mean, v[2];
    __device__ void start(int c) { mean = saved[c]; }
    template <typename I> __device__ void add(I at) {
        float g = dy[at];
        if (y) {
            float yv = ld(y, at);
            g = yv > 0.0f && (!six || yv < 6.0f) ? g : 0.0f;
            dy[at] = g;
        }
        v[0] += (double)g;
        v[1] += (double)g * ((double)ld(x, at) - mean);
    }
};

__global__ void bn_grad_sums_kernel(red_geom_t g, const void *x, const void *y, int fuse, float *dy,
                                    const double *saved, double *partials, int bf16) {
    FORMAT2(bf16, TX, TY, bn_grad_sum<TX, TY> a = {(const TX *)x, (const TY *)y, fuse == 2, dy, saved, 0.0, {0.0, 0.0}};
            channel_partials(g, a, partials));
}

/* Block c, the second pass: gsums[c] = sum dy, gsums[C + c] = sum dy (x -
 * mean); then dgamma (+)= sum_dyx invstd, dbeta (+)= sum_dy (dw, db NULL:
 * none) */
__global__ void bn_grad_finish_kernel(const double *partials, int slices, int C, const double *saved, double *gsums,
                                      float *dw, int add_w, float *db, int add_b) {
    const int c = (int)blockIdx.x;
    double v[2];
    combine_slices<double, 2>(partials, slices, C, c, v);
    if (threadIdx.x == 0) {
        gsums[c] = v[0];
        gsums[C + c] = v[1];
        if (dw) {
            float g = (float)(v[1] * saved[C + c]);
            dw[c] = add_w ? __fadd_rn(dw[c], g) : g;
        }
        if (db) {
            float g = (float)v[0];
            db[c] = add_b ? __fadd_rn(db[c], g) : g;
        }
    }
}

extern "C" cudaError_t dp_cuda_bn_grad_sums(cudaStream_t stream, const void *x, const void *y, int fuse, float *dy,
                                            int N, int C, size_t plane, const double *saved, double *partials,
                                            double *gsums, float *dw, int add_w, float *db, int add_b, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_grad_sums_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, x, y, fuse, dy, saved, partials, bf16);
    bn_grad_finish_kernel<<<C, COMBINE_THREADS, 0, stream>>>(partials, g.slices, C, saved, gsums, dw, add_w, db, add_b);
    return cudaGetLastError();
}

/* The CPU's dx coefficients per channel, coef = [k_dy (C), k_x (C), k_0 (C),
 * mean_f (C)], as its per-element code computed them: dx = k_dy dy + k_x
 * (x - mean_f) + k_0. */
__global__ void bn_dx_coef_kernel(int C, const double *saved, const double *gsums, const float *w, int training,
                                  float *coef) {
    GRID_LOOP(c, (size_t)C) {
        double invstd = saved[C + c], gamma = w ? (double)w[c] : 1.0, m = saved[2 * C];
        float k_dy = (float)(gamma * invstd), k_x = 0.0f, k_0 = 0.0f;
        if (training) {
            k_x = (float)(-gamma * invstd * invstd * invstd * gsums[C + c] / m);
            k_0 = (float)(-gamma * invstd * gsums[c] / m);
        }
        float mean = (float)saved[c];
        coef[c] = k_dy;
        coef[C + c] = k_x;
        coef[2 * C + c] = __fadd_rn(k_0, (float)(-(double)k_x * (saved[c] - (double)mean)));
        coef[3 * C + c] = mean;
    }
}

/* dx (+)= k_dy dy + k_x (x - mean_f) + k_0 */
template <typename I, typename T>
__device__ static void bn_dx_loop(const T *x, const float *dy, float *dx, const chan_index_t &ci, I n, const float *coef,
                                  int add) {
    const int C = ci.C;
    GRID_LOOP_T(I, j, n) {
        int c = channel_of(ci, j);
        float g = __fadd_rn(__fadd_rn(__fmul_rn(coef[c], dy[j]), __fmul_rn(coef[C + c], __fsub_rn(ld(x, j), coef[3 * C + c]))),
                            coef[2 * C + c]);
        dx[j] = add ? __fadd_rn(dx[j], g) : g;
    }
}

__global__ void bn_dx_kernel(const void *x, const float *dy, float *dx, chan_index_t ci, size_t n, const float *coef,
                             int add, int bf16) {
    FORMAT1(bf16, T, if (ci.narrow) bn_dx_loop<uint32_t>((const T *)x, dy, dx, ci, (uint32_t)n, coef, add);
            else bn_dx_loop<size_t>((const T *)x, dy, dx, ci, n, coef, add));
}

extern "C" cudaError_t dp_cuda_bn_dx(cudaStream_t stream, const void *x, const float *dy, float *dx, int N, int C,
                                     size_t plane, const double *saved, const double *gsums, const float *w,
                                     int training, int add, float *coef, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * plane;
    bn_dx_coef_kernel<<<blocks_for((size_t)C), THREADS, 0, stream>>>(C, saved, gsums, w, training, coef);
    bn_dx_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, dy, dx, chan_index(N, C, plane), n, coef, add, bf16);
    return cudaGetLastError();
}

/* --- layer norm over the channels at every position (ops_layer_norm.c's formulas and order, in
 * double): one thread per (n, s) position, its C values strided by S (neighbouring threads read
 * neighbouring floats); the parameter gradients one thread per channel. FP32 NCHW data. -------- */
__global__ void ln_forward_kernel(const float *x, const float *w, const float *b, float *y, double *saved, int N,
                                  int C, size_t S, double eps) {
    const size_t positions = (size_t)N * S;
    GRID_LOOP(p, positions) {
        const size_t base = (p / S) * (size_t)C * S + p % S;
        double mean = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) mean = __dadd_rn(mean, (double)x[base + (size_t)c * S]);
        mean = mean / C;
        for (int c = 0; c < C; c++) {
            const double d = (double)x[base + (size_t)c * S] - mean;
            var = __dadd_rn(var, __dmul_rn(d, d));
        }
        const double rstd = 1.0 / sqrt(var / C + eps);
        for (int c = 0; c < C; c++) {
            const double gamma = w ? (double)w[c] : 1.0, beta = b ? (double)b[c] : 0.0;
            const size_t i = base + (size_t)c * S;
            y[i] = (float)__dadd_rn(__dmul_rn(__dmul_rn((double)x[i] - mean, rstd), gamma), beta);
        }
        saved[p] = mean;
        saved[positions + p] = rstd;
    }
}

extern "C" cudaError_t dp_cuda_ln_forward(cudaStream_t stream, const float *x, const float *w, const float *b, float *y,
                                          double *saved, int N, int C, size_t S, double eps) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    ln_forward_kernel<<<blocks_for((size_t)N * S), THREADS, 0, stream>>>(x, w, b, y, saved, N, C, S, eps);
    return cudaGetLastError();
}

/* dx (+)= rstd (g - mean_c g - xhat mean_c (g xhat)), g = dy weight */
__global__ void ln_dx_kernel(const float *x, const float *w, const float *dy, float *dx, const double *saved, int N,
                             int C, size_t S, int add) {
    const size_t positions = (size_t)N * S;
    GRID_LOOP(p, positions) {
        const size_t base = (p / S) * (size_t)C * S + p % S;
        const double mean = saved[p], rstd = saved[positions + p];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int c = 0; c < C; c++) {
            const size_t i = base + (size_t)c * S;
            const double g = __dmul_rn((double)dy[i], w ? (double)w[c] : 1.0);
            sum_g = __dadd_rn(sum_g, g);
            sum_gx = __dadd_rn(sum_gx, __dmul_rn(__dmul_rn(g, (double)x[i] - mean), rstd));
        }
        for (int c = 0; c < C; c++) {
            const size_t i = base + (size_t)c * S;
            const double xhat = __dmul_rn((double)x[i] - mean, rstd);
            const double g = __dmul_rn((double)dy[i], w ? (double)w[c] : 1.0);
            const float v = (float)__dmul_rn(rstd, (g - sum_g / C) - __dmul_rn(xhat, sum_gx) / C);
            dx[i] = add ? __fadd_rn(dx[i], v) : v;
        }
    }
}

/* dweight (+)= sum dy xhat, dbias (+)= sum dy over every (n, s), one thread per channel */
__global__ void ln_param_grad_kernel(const float *x, const float *dy, const double *saved, float *dw, int add_w,
                                     float *db, int add_b, int N, int C, size_t S) {
    const size_t positions = (size_t)N * S;
    GRID_LOOP(c, (size_t)C) {
        double sum_dyx = 0.0, sum_dy = 0.0;
        for (int n = 0; n < N; n++) {
            const size_t at = ((size_t)n * C + c) * S;
            for (size_t s = 0; s < S; s++) {
                const size_t p = (size_t)n * S + s;
                sum_dyx = __dadd_rn(sum_dyx, __dmul_rn(__dmul_rn((double)dy[at + s], (double)x[at + s] - saved[p]),
                                                      saved[positions + p]));
                sum_dy = __dadd_rn(sum_dy, (double)dy[at + s]);
            }
        }
        if (dw) dw[c] = add_w ? __fadd_rn(dw[c], (float)sum_dyx) : (float)sum_dyx;
        if (db) db[c] = add_b ? __fadd_rn(db[c], (float)sum_dy) : (float)sum_dy;
    }
}

extern "C" cudaError_t dp_cuda_ln_backward(cudaStream_t stream, const float *x, const float *w, const float *dy,
                                           const double *saved, float *dx, int add_dx, float *dw, int add_w, float *db,
                                           int add_b, int N, int C, size_t S) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (dw || db)
        ln_param_grad_kernel<<<blocks_for((size_t)C), THREADS, 0, stream>>>(x, dy, saved, dw, add_w, db, add_b, N, C, S);
    if (dx) ln_dx_kernel<<<blocks_for((size_t)N * S), THREADS, 0, stream>>>(x, w, dy, dx, saved, N, C, S, add_dx);
    return cudaGetLastError();
}
