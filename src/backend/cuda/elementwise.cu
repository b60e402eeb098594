/* elementwise.cu - one element per thread: rows filled with a bias, bias
 * and ReLU, ReLU forward and backward (and its mask), sigmoid, tanh, add
 * (with ReLU), gradient accumulation, dropout (ops_elementwise.c's and
 * ops_dropout.c's arithmetic) and the NCHW <-> NHWC layout copies. */
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

template <typename I> __device__ static void bias_act_loop(float *y, const float *b, const chan_index_t &ci, I n, int relu) {
    GRID_LOOP_T(I, i, n) {
        float v = y[i];
        if (b) v = __fadd_rn(v, b[channel_of(ci, i)]);
        if (relu) v = v < 0.0f ? 0.0f : v;
        y[i] = v;
    }
}

__global__ void bias_act_kernel(float *y, const float *b, chan_index_t ci, size_t n, int relu) {
    if (ci.narrow) bias_act_loop<uint32_t>(y, b, ci, (uint32_t)n, relu);
    else bias_act_loop<size_t>(y, b, ci, n, relu);
}

extern "C" cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *b, int N, int C, size_t L,
                                        int relu) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * L;
    bias_act_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, b, chan_index(N, C, L), n, relu);
    return cudaGetLastError();
}

template <typename I> __device__ static void relu_mask_loop(const float *y, const float *dy, float *out, I n) {
    GRID_LOOP_T(I, i, n) out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void relu_mask_kernel(const float *y, const float *dy, float *out, size_t n) {
    if (n <= NARROW_MAX) relu_mask_loop<uint32_t>(y, dy, out, (uint32_t)n);
    else relu_mask_loop<size_t>(y, dy, out, n);
}

extern "C" cudaError_t dp_cuda_relu_mask(cudaStream_t stream, const float *y, const float *dy, float *out, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_mask_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, out, n);
    return cudaGetLastError();
}

template <typename I> __device__ static void relu_forward_loop(const float *x, float *y, I n) {
    GRID_LOOP_T(I, i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN stays NaN, as the CPU's */
}

__global__ void relu_forward_kernel(const float *x, float *y, size_t n) {
    if (n <= NARROW_MAX) relu_forward_loop<uint32_t>(x, y, (uint32_t)n);
    else relu_forward_loop<size_t>(x, y, n);
}

extern "C" cudaError_t dp_cuda_relu_forward(cudaStream_t stream, const float *x, float *y, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}

/* dx0 (+)= g, then dx1 (+)= g (each may be NULL; the same pointer adds
 * twice), g = dy where y > 0 else 0 */
template <typename I> __device__ static void relu_backward_loop(const float *y, const float *dy, float *dx0, int add0,
                                                                float *dx1, int add1, I n) {
    GRID_LOOP_T(I, i, n) {
        float g = y[i] > 0.0f ? dy[i] : 0.0f;
        if (dx0) dx0[i] = add0 ? __fadd_rn(dx0[i], g) : g;
        if (dx1) dx1[i] = add1 ? __fadd_rn(dx1[i], g) : g;
    }
}

__global__ void relu_backward_kernel(const float *y, const float *dy, float *dx0, int add0, float *dx1, int add1,
                                     size_t n) {
    if (n <= NARROW_MAX) relu_backward_loop<uint32_t>(y, dy, dx0, add0, dx1, add1, (uint32_t)n);
    else relu_backward_loop<size_t>(y, dy, dx0, add0, dx1, add1, n);
}

extern "C" cudaError_t dp_cuda_relu_backward(cudaStream_t stream, const float *y, const float *dy, float *dx,
                                             size_t n, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, dx, add, NULL, 0, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dp_cuda_relu_backward_pair(cudaStream_t stream, const float *y, const float *dy, float *dx0,
                                                  int add0, float *dx1, int add1, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, dy, dx0, add0, dx1, add1, n);
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

/* --- layouts: (N, C, L) <-> (N, L, C), one thread per element of dst ----------------
 * dst's element i and its source index: to NHWC, i = (b L + l) C + c comes
 * from (b C + c) L + l; to NCHW the other way round. Below 2^31 elements
 * the two quotients are fast divisions of 32-bit indices (fast_div_t). */
template <typename I> __device__ static void layout_copy_loop(const float *src, float *dst, const chan_index_t &ci, I n,
                                                             int to_nhwc, int add) {
    const I C = (I)ci.C, L = (I)ci.L;
    GRID_LOOP_T(I, i, n) {
        I at;
        if (to_nhwc) {
            I q = quotient(ci.by_C, C, i), c = i - q * C, b = quotient(ci.by_L, L, q), l = q - b * L;
            at = (b * C + c) * L + l;
        } else {
            I q = quotient(ci.by_L, L, i), l = i - q * L, b = quotient(ci.by_C, C, q), c = q - b * C;
            at = (b * L + l) * C + c;
        }
        dst[i] = add ? __fadd_rn(dst[i], src[at]) : src[at];
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
 * (forward), dx (+)= dy * scale or 0 (backward: x = dy, add). The seed is
 * *seed_at when seed_at is not NULL (device memory: a step graph's, written
 * before each launch), else `seed`. */
__global__ void dropout_kernel(const float *x, float *y, int N, size_t per_example, uint64_t seed,
                               const uint64_t *seed_at, int64_t offset, uint64_t threshold, float scale, int add, int C) {
    if (seed_at) seed = *seed_at;
    GRID_LOOP(j, (size_t)N * per_example) {
        size_t n = j / per_example, i = j % per_example;
        if (C) i = i % (size_t)C * (per_example / (size_t)C) + i / (size_t)C; /* NHWC (l, c): NCHW index c L + l */
        uint64_t key = mix64(mix64(seed) + (uint64_t)(offset + (int64_t)n) * GOLDEN);
        int kept = (mix64(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= threshold;
        float g = kept ? __fmul_rn(x[j], scale) : 0.0f;
        y[j] = add ? __fadd_rn(y[j], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_dropout(cudaStream_t stream, const float *x, float *y, int N, size_t per_example,
                                       uint64_t seed, const uint64_t *seed_at, int64_t offset, uint64_t threshold,
                                       float scale, int add, int C) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    dropout_kernel<<<blocks_for((size_t)N * per_example), THREADS, 0, stream>>>(x, y, N, per_example, seed, seed_at,
                                                                              offset, threshold, scale, add, C);
    return cudaGetLastError();
}
