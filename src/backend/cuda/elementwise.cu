/* elementwise.cu - one element per thread: rows filled with a bias, bias
 * and ReLU, ReLU forward and backward (and its mask), sigmoid, tanh, relu6,
 * hardswish, hardsigmoid, gelu, silu, add (with ReLU), the channel scaling of a
 * squeeze-excitation block (ops_scale_channels.c), channel concatenation (ops_concat.c), gradient accumulation, dropout (ops_elementwise.c's and
 * ops_dropout.c's arithmetic), the NCHW <-> NHWC layout copies,
 * gradient clipping's scale and the model's moving average. The
 * activations they read or write (not the gradients) are float or bf16
 * (the launchers' `bf16` bits, kernels.h; kernels_common.cuh's ld/st). */
#include "kernels_common.cuh"

/* --- bias, ReLU --------------------------------------------------------------- */
__global__ void fill_rows_kernel(float *y, const float *b, int rows, int cols) {
    GRID_LOOP(i, (size_t)rows * cols) y[i] = b[i % cols];
}

extern "C" cudaError_t dp_cuda_fill_rows(cudaStream_t stream, float *y, const float *b, int rows, int cols) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    fill_rows_kernel<<<blocks_for((size_t)rows * cols), THREADS, 0, stream>>>(y, b, rows, cols);
    return cudaGetLastError();
}

template <typename I, typename T>
__device__ static void bias_act_loop(T *y, const float *b, const chan_index_t &ci, I n, int relu) {
    GRID_LOOP_T(I, i, n) {
        float v = ld(y, i);
        if (b) v = __fadd_rn(v, b[channel_of(ci, i)]);
        if (relu) v = v < 0.0f ? 0.0f : v;
        st(y, i, v);
    }
}

__global__ void bias_act_kernel(void *y, const float *b, chan_index_t ci, size_t n, int relu, int bf16) {
    FORMAT1(bf16, T, if (ci.narrow) bias_act_loop<uint32_t>((T *)y, b, ci, (uint32_t)n, relu);
            else bias_act_loop<size_t>((T *)y, b, ci, n, relu));
}

extern "C" cudaError_t dp_cuda_bias_act(cudaStream_t stream, void *y, const float *b, int N, int C, size_t L,
                                        int relu, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * L;
    bias_act_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, b, chan_index(N, C, L), n, relu, bf16);
    return cudaGetLastError();
}

template <typename I, typename T, typename TO>
__device__ static void relu_mask_loop(const T *y, const float *dy, TO *out, I n) {
    GRID_LOOP_T(I, i, n) st(out, i, ld(y, i) > 0.0f ? dy[i] : 0.0f);
}

__global__ void relu_mask_kernel(const void *y, const float *dy, void *out, size_t n, int bf16) {
    FORMAT2(bf16, T, TO, if (n <= NARROW_MAX) relu_mask_loop<uint32_t>((const T *)y, dy, (TO *)out, (uint32_t)n);
            else relu_mask_loop<size_t>((const T *)y, dy, (TO *)out, n));
}

extern "C" cudaError_t dp_cuda_relu_mask(cudaStream_t stream, const void *y, const float *dy, void *out, size_t n,
                                         int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_mask_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, out, n, bf16);
    return cudaGetLastError();
}

template <typename I, typename TX, typename TY> __device__ static void relu_forward_loop(const TX *x, TY *y, I n) {
    GRID_LOOP_T(I, i, n) {
        float v = ld(x, i);
        st(y, i, v < 0.0f ? 0.0f : v); /* NaN stays NaN, as the CPU's */
    }
}

__global__ void relu_forward_kernel(const void *x, void *y, size_t n, int bf16) {
    FORMAT2(bf16, TX, TY, if (n <= NARROW_MAX) relu_forward_loop<uint32_t>((const TX *)x, (TY *)y, (uint32_t)n);
            else relu_forward_loop<size_t>((const TX *)x, (TY *)y, n));
}

extern "C" cudaError_t dp_cuda_relu_forward(cudaStream_t stream, const void *x, void *y, size_t n, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n, bf16);
    return cudaGetLastError();
}

/* dx0 (+)= g, then dx1 (+)= g (each may be NULL; the same pointer adds
 * twice), g = dy where y > 0 else 0 */
template <typename I, typename T> __device__ static void relu_backward_loop(const T *y, const float *dy, float *dx0,
                                                                            int add0, float *dx1, int add1, I n) {
    GRID_LOOP_T(I, i, n) {
        float g = ld(y, i) > 0.0f ? dy[i] : 0.0f;
        if (dx0) dx0[i] = add0 ? __fadd_rn(dx0[i], g) : g;
        if (dx1) dx1[i] = add1 ? __fadd_rn(dx1[i], g) : g;
    }
}

__global__ void relu_backward_kernel(const void *y, const float *dy, float *dx0, int add0, float *dx1, int add1,
                                     size_t n, int bf16) {
    FORMAT1(bf16, T, if (n <= NARROW_MAX) relu_backward_loop<uint32_t>((const T *)y, dy, dx0, add0, dx1, add1, (uint32_t)n);
            else relu_backward_loop<size_t>((const T *)y, dy, dx0, add0, dx1, add1, n));
}

extern "C" cudaError_t dp_cuda_relu_backward(cudaStream_t stream, const void *y, const float *dy, float *dx,
                                             size_t n, int add, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, dx, add, NULL, 0, n, bf16);
    return cudaGetLastError();
}

extern "C" cudaError_t dp_cuda_relu_backward_pair(cudaStream_t stream, const void *y, const float *dy, float *dx0,
                                                  int add0, float *dx1, int add1, size_t n, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, dx0, add0, dx1, add1, n, bf16);
    return cudaGetLastError();
}

/* --- sigmoid, tanh, add, dropout (ops_elementwise.c, ops_dropout.c) ----------------- */
template <typename TX, typename TY> __device__ static void unary_forward_loop(int kind, const TX *x, TY *y, size_t n) {
    GRID_LOOP(i, n) {
        float v = ld(x, i);
        if (kind == 0) { /* sigmoid, without overflow */
            float e = expf(-fabsf(v));
            st(y, i, v >= 0.0f ? __fdiv_rn(1.0f, __fadd_rn(1.0f, e)) : __fdiv_rn(e, __fadd_rn(1.0f, e)));
        } else if (kind == 1) {
            st(y, i, tanhf(v));
        } else if (kind == 2) { /* relu6: a NaN fails both tests and passes through, as the CPU op */
            st(y, i, v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v);
        } else if (kind == 6) { /* gelu, exact: in double, rounded once, as the CPU op */
            st(y, i, (float)((double)v * 0.5 * (1.0 + erf((double)v * 0.70710678118654752440))));
        } else if (kind == 5) { /* silu: x / (1 + exp(-x)), as the CPU op */
            st(y, i, __fdiv_rn(v, __fadd_rn(1.0f, expf(-v))));
        } else { /* hardswish (3): (x clamp) / 6, hardsigmoid (4): clamp / 6, clamp = relu6(x + 3) */
            float t = __fadd_rn(v, 3.0f);
            t = t < 0.0f ? 0.0f : t > 6.0f ? 6.0f : t;
            st(y, i, __fdiv_rn(kind == 3 ? __fmul_rn(v, t) : t, 6.0f));
        }
    }
}

__global__ void unary_forward_kernel(int kind, const void *x, void *y, size_t n, int bf16) {
    FORMAT2(bf16, TX, TY, unary_forward_loop(kind, (const TX *)x, (TY *)y, n));
}

extern "C" cudaError_t dp_cuda_unary_forward(cudaStream_t stream, int kind, const void *x, void *y, size_t n,
                                             int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    unary_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(kind, x, y, n, bf16);
    return cudaGetLastError();
}

/* gelu's dy (cdf + x pdf) in double, as the CPU op (aten's GeluBackwardKernel) */
__device__ static float gelu_grad(float x, float dy) {
    const double cdf = 0.5 * (1.0 + erf((double)x * 0.70710678118654752440));
    const double pdf = exp(-0.5 * (double)x * (double)x) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */
    return (float)((double)dy * (cdf + (double)x * pdf));
}

/* silu's dy s (1 + x (1 - s)), s = sigmoid(x), as the CPU op */
__device__ static inline float silu_grad(float x, float dy) {
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
    return __fmul_rn(__fmul_rn(dy, s), __fadd_rn(1.0f, __fmul_rn(x, __fsub_rn(1.0f, s))));
}

template <typename T>
__device__ static void unary_backward_loop(int kind, const T *y, const float *dy, float *dx, size_t n, int add) {
    GRID_LOOP(i, n) {
        float yi = ld(y, i);
        float g = kind == 0   ? __fmul_rn(__fmul_rn(dy[i], yi), __fsub_rn(1.0f, yi))
                  : kind == 1 ? __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(yi, yi)))
                  : kind == 2 ? (yi > 0.0f && yi < 6.0f ? dy[i] : 0.0f) /* relu6 */
                  : kind == 6 ? gelu_grad(yi, dy[i]) /* yi is x */
                  : kind == 3 ? (yi < -3.0f ? 0.0f /* hardswish, yi is x */
                                 : yi <= 3.0f ? __fmul_rn(dy[i], __fadd_rn(__fdiv_rn(yi, 3.0f), 0.5f)) : dy[i])
                  : kind == 4 ? (yi > -3.0f && yi < 3.0f ? __fmul_rn(dy[i], 1.0f / 6.0f) : 0.0f) /* hardsigmoid */
                              : silu_grad(yi, dy[i]); /* silu (5), yi is x */
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

__global__ void unary_backward_kernel(int kind, const void *y, const float *dy, float *dx, size_t n, int add,
                                      int bf16) {
    FORMAT1(bf16, T, unary_backward_loop(kind, (const T *)y, dy, dx, n, add));
}

extern "C" cudaError_t dp_cuda_unary_backward(cudaStream_t stream, int kind, const void *y, const float *dy, float *dx,
                                              size_t n, int add, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    unary_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(kind, y, dy, dx, n, add, bf16);
    return cudaGetLastError();
}

template <typename TA, typename TB, typename TY>
__device__ static void add_loop(const TA *a, const TB *b, TY *y, size_t n, int relu) {
    GRID_LOOP(i, n) {
        float v = __fadd_rn(ld(a, i), ld(b, i));
        st(y, i, relu && v < 0.0f ? 0.0f : v);
    }
}

__global__ void add_kernel(const void *a, const void *b, void *y, size_t n, int relu, int bf16) {
    FORMAT3(bf16, TA, TB, TY, add_loop((const TA *)a, (const TB *)b, (TY *)y, n, relu));
}

extern "C" cudaError_t dp_cuda_add(cudaStream_t stream, const void *a, const void *b, void *y, size_t n, int relu,
                                   int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    add_kernel<<<blocks_for(n), THREADS, 0, stream>>>(a, b, y, n, relu, bf16);
    return cudaGetLastError();
}

/* --- channel scaling (ops_scale_channels.c): y = x s, s one factor per (N, C) plane, or per channel
 * (shared = C: a (1, C, 1, 1) scale broadcast over the batch, ConvNeXt's layer scale) ----------- */
__device__ static __forceinline__ size_t scale_of(size_t i, size_t plane, size_t shared) {
    return shared ? (i / plane) % shared : i / plane;
}

__global__ void scale_channels_kernel(const float *x, const float *s, float *y, size_t n, size_t plane, size_t shared) {
    GRID_LOOP(i, n) y[i] = __fmul_rn(x[i], s[scale_of(i, plane, shared)]);
}

extern "C" cudaError_t dp_cuda_scale_channels(cudaStream_t stream, const float *x, const float *s, float *y, size_t n,
                                              size_t plane, size_t shared) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    scale_channels_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, s, y, n, plane, shared);
    return cudaGetLastError();
}

/* dx (+)= dy s, one thread per element */
__global__ void scale_channels_dx_kernel(const float *dy, const float *s, float *dx, size_t n, size_t plane,
                                         size_t shared, int add) {
    GRID_LOOP(i, n) {
        const float g = __fmul_rn(dy[i], s[scale_of(i, plane, shared)]);
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

/* ds (+)= sum of dy x over the planes of a factor (f, f + step, ...), one thread per factor, in double and
 * in index order as the CPU op */
__global__ void scale_channels_ds_kernel(const float *dy, const float *x, float *ds, size_t factors, size_t step,
                                         size_t planes, size_t plane, int add) {
    GRID_LOOP(f, factors) {
        double sum = 0.0;
        for (size_t p = f; p < planes; p += step)
            for (size_t i = p * plane; i < (p + 1) * plane; i++) sum += (double)dy[i] * (double)x[i];
        ds[f] = add ? __fadd_rn(ds[f], (float)sum) : (float)sum;
    }
}

extern "C" cudaError_t dp_cuda_scale_channels_backward(cudaStream_t stream, const float *dy, const float *x,
                                                       const float *s, float *dx, int add_dx, float *ds, int add_ds,
                                                       size_t n, size_t plane, size_t shared) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    const size_t planes = n / plane, factors = shared ? shared : planes;
    if (dx) scale_channels_dx_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dy, s, dx, n, plane, shared, add_dx);
    if (ds)
        scale_channels_ds_kernel<<<blocks_for(factors), THREADS, 0, stream>>>(dy, x, ds, factors, shared ? shared : planes,
                                                                            planes, plane, add_ds);
    return cudaGetLastError();
}

/* --- channel concatenation (ops_concat.c): y (N, Ca + Cb, L) from a (N, Ca, L), b (N, Cb, L) -- */
__global__ void concat_kernel(const float *a, const float *b, float *y, size_t n, size_t na, size_t nb) {
    GRID_LOOP(i, n) {
        const size_t row = i / (na + nb), j = i % (na + nb);
        y[i] = j < na ? a[row * na + j] : b[row * nb + (j - na)];
    }
}

extern "C" cudaError_t dp_cuda_concat(cudaStream_t stream, const float *a, const float *b, float *y, size_t rows,
                                      size_t na, size_t nb) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = rows * (na + nb);
    concat_kernel<<<blocks_for(n), THREADS, 0, stream>>>(a, b, y, n, na, nb);
    return cudaGetLastError();
}

/* g (+)= each row's len values of dy from offset on (a row of dy: `row` values) */
__global__ void concat_slice_kernel(const float *dy, float *g, size_t n, size_t len, size_t offset, size_t row,
                                    int add) {
    GRID_LOOP(i, n) {
        const float v = dy[(i / len) * row + offset + i % len];
        g[i] = add ? __fadd_rn(g[i], v) : v;
    }
}

extern "C" cudaError_t dp_cuda_concat_backward(cudaStream_t stream, const float *dy, float *da, int add_da, float *db,
                                               int add_db, size_t rows, size_t na, size_t nb) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (da && rows * na != 0)
        concat_slice_kernel<<<blocks_for(rows * na), THREADS, 0, stream>>>(dy, da, rows * na, na, 0, na + nb, add_da);
    if (db && rows * nb != 0)
        concat_slice_kernel<<<blocks_for(rows * nb), THREADS, 0, stream>>>(dy, db, rows * nb, nb, na, na + nb, add_db);
    return cudaGetLastError();
}

/* --- layouts: (N, C, L) <-> (N, L, C), one thread per element of dst ----------------
 * (kernels_common.cuh's layout_source: 32-bit indices below 2^31 elements) */
template <typename I> __device__ static void layout_copy_loop(const float *src, float *dst, const chan_index_t &ci, I n,
                                                             int to_nhwc, int add) {
    GRID_LOOP_T(I, i, n) {
        const float v = src[layout_source(ci, i, to_nhwc ? 1 : 2)];
        dst[i] = add ? __fadd_rn(dst[i], v) : v;
    }
}

__global__ void layout_copy_kernel(const float *src, float *dst, chan_index_t ci, size_t n, int to_nhwc, int add) {
    if (ci.narrow) layout_copy_loop<uint32_t>(src, dst, ci, (uint32_t)n, to_nhwc, add);
    else layout_copy_loop<size_t>(src, dst, ci, n, to_nhwc, add);
}

extern "C" cudaError_t dp_cuda_layout_copy(cudaStream_t stream, const float *src, float *dst, int N, int C, size_t L,
                                           int to_nhwc, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * (size_t)C * L;
    layout_copy_kernel<<<blocks_for(n), THREADS, 0, stream>>>(src, dst, chan_index(N, C, L), n, to_nhwc, add);
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
 * (forward), dx (+)= dy * scale or 0 (backward: x = dy, add); C < 0: drop path, element 0's mask for the
 * whole example. The seed is
 * *seed_at when seed_at is not NULL (device memory: a step graph's, written
 * before each launch), else `seed`. x and y float or bf16 (bf16 bits 0, 1). */
template <typename TX, typename TY>
__device__ static void dropout_loop(const TX *x, TY *y, int N, size_t per_example, uint64_t seed, int64_t offset,
                                    uint64_t threshold, float scale, int add, int C) {
    GRID_LOOP(j, (size_t)N * per_example) {
        size_t n = j / per_example, i = j % per_example;
        if (C < 0) i = 0; /* drop path: one draw per example */
        else if (C) i = i % (size_t)C * (per_example / (size_t)C) + i / (size_t)C; /* NHWC (l, c): NCHW index c L + l */
        uint64_t key = mix64(mix64(seed) + (uint64_t)(offset + (int64_t)n) * GOLDEN);
        int kept = (mix64(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= threshold;
        float g = kept ? __fmul_rn(ld(x, j), scale) : 0.0f;
        st(y, j, add ? __fadd_rn(ld(y, j), g) : g);
    }
}

__global__ void dropout_kernel(const void *x, void *y, int N, size_t per_example, uint64_t seed,
                               const uint64_t *seed_at, int64_t offset, uint64_t threshold, float scale, int add, int C,
                               int bf16) {
    if (seed_at) seed = *seed_at;
    FORMAT2(bf16, TX, TY,
            dropout_loop((const TX *)x, (TY *)y, N, per_example, seed, offset, threshold, scale, add, C));
}

extern "C" cudaError_t dp_cuda_dropout(cudaStream_t stream, const void *x, void *y, int N, size_t per_example,
                                       uint64_t seed, const uint64_t *seed_at, int64_t offset, uint64_t threshold,
                                       float scale, int add, int C, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    dropout_kernel<<<blocks_for((size_t)N * per_example), THREADS, 0, stream>>>(x, y, N, per_example, seed, seed_at,
                                                                              offset, threshold, scale, add, C, bf16);
    return cudaGetLastError();
}

/* --- scale: gradient clipping's x *= factor (backend.h scale_range) ------------------------- */
__global__ void scale_kernel(float *x, float factor, size_t n) {
    GRID_LOOP(i, n) x[i] = __fmul_rn(x[i], factor);
}

extern "C" cudaError_t dp_cuda_scale(cudaStream_t stream, float *x, float factor, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (n) scale_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, factor, n);
    return cudaGetLastError();
}

/* --- the model's moving average (backend.h ema_update) ---------------------------------------- */
__global__ void ema_kernel(float *avg, const float *x, float decay, float one_minus_decay, size_t n) {
    GRID_LOOP(i, n) avg[i] = __fadd_rn(__fmul_rn(decay, avg[i]), __fmul_rn(one_minus_decay, x[i]));
}

extern "C" cudaError_t dp_cuda_ema(cudaStream_t stream, float *avg, const float *x, float decay, float one_minus_decay,
                                   size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (n) ema_kernel<<<blocks_for(n), THREADS, 0, stream>>>(avg, x, decay, one_minus_decay, n);
    return cudaGetLastError();
}
