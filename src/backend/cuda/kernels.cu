/* kernels.cu - the CUDA backend's own kernels: the device-order sum of
 * replicas, the batch gather, the four optimizers, bias/ReLU, pooling (1-D
 * to 3-D), conv_transpose's window copy and softmax cross-entropy. Each has
 * a plain C launcher (kernels.h).
 *
 * Floating point follows the CPU code it replaces: the build passes
 * -fmad=false, so a * b + c rounds twice unless written fmaf(a, b, c), which
 * is written exactly where the CPU code calls its mul_add (optim.c). Sums
 * run in the CPU's order where one thread owns an output: reduce and global
 * average pooling give the CPU's bits, the cross-entropy loss its order
 * (its terms use the GPU's expf and log), the metrics (count_metrics) the
 * host's bits. Pool backward is a gather (one thread per input element, its
 * outputs in order). No atomics anywhere.
 *
 * Per-channel sums (bias gradients, batch norm's statistics and gradient
 * sums) spread over the whole grid in two passes (see "per-channel
 * reductions" below); their bits depend only on the shape (N, C, L) and
 * the data: the slice count, each block's slice, each thread's values and
 * order, the order inside a block and the order of the slices' partials
 * are functions of (N, C, L) alone, never of the GPU (its SM count, the
 * blocks' timing), so every GPU and the emulator give the same bits on
 * every run. Not the CPU's order: the tests compare with a tolerance. MSE
 * is one block (a fixed strided split and a fixed tree).
 *
 * Elementwise kernels give the same bits whatever their index arithmetic:
 * where the tensor has fewer than 2^31 elements they use 32-bit offsets and
 * find channels with a multiply-high and a shift (fast_div_t) instead of a
 * 64-bit division per element; batch norm's per-channel coefficients are
 * computed once per channel, by the same operations in the same order as
 * the per-element code they replace. */
#include <math.h>

#include "kernels.h"

#define THREADS 256

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535u * 16u ? (b ? b : 1) : 65535u * 16u);
}

#define GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
/* the same with an index of type I (uint32_t where the count is below 2^31) */
#define GRID_LOOP_T(I, i, n) for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n); i += (I)gridDim.x * (I)blockDim.x)
#define NARROW_MAX ((size_t)0x7fffffff) /* counts up to this run with 32-bit indices */

/* n / d for n < 2^31 without a division: a multiply-high and a shift
 * (Granlund and Montgomery): s is the least with 2^s >= d, m = floor(2^32
 * (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s. Made by the launcher. */
typedef struct {
    uint32_t d, m, s;
} fast_div_t;

static fast_div_t fast_div(uint32_t d) {
    uint32_t s = 0;
    while (s < 31 && (1u << s) < d) s++;
    uint64_t m = (((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / d + 1;
    fast_div_t f = {d, (uint32_t)m, s};
    return f;
}

__device__ static __forceinline__ uint32_t div_by(fast_div_t f, uint32_t n) {
    return (uint32_t)(((uint64_t)__umulhi(n, f.m) + n) >> f.s);
}

/* The channel of element j of an (N, C, L) tensor: narrow (N C L < 2^31)
 * with 32-bit j and two fast divisions, else (j / L) % C. */
typedef struct {
    fast_div_t by_L, by_C;
    size_t L;
    int C, narrow;
} chan_index_t;

static chan_index_t chan_index(int N, int C, size_t L) {
    chan_index_t ci;
    ci.narrow = (size_t)N * (size_t)C * L <= NARROW_MAX;
    ci.by_L = fast_div(ci.narrow ? (uint32_t)L : 1u);
    ci.by_C = fast_div(ci.narrow ? (uint32_t)C : 1u);
    ci.L = L;
    ci.C = C;
    return ci;
}

__device__ static __forceinline__ int channel_of(const chan_index_t &ci, uint32_t j) {
    uint32_t p = div_by(ci.by_L, j); /* the plane n C + c */
    return (int)(p - div_by(ci.by_C, p) * (uint32_t)ci.C);
}
__device__ static __forceinline__ int channel_of(const chan_index_t &ci, size_t j) { return (int)((j / ci.L) % ci.C); }

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

/* --- per-channel reductions over the whole grid ---------------------------------------
 * A sum per channel c over the (N, C, L) values of c: bias gradients and
 * batch norm's sums. Pass 1 splits every channel into S slices (S and the
 * slice length `chunk` come from red_geometry: a function of (N, C, L)
 * only) and one block sums one (channel, slice), writing its partial to
 * partials[(k S + s) C + c] (value k of the K an accumulator sums). Pass 2
 * (combine_slices: a block of COMBINE_THREADS per channel) adds a channel's
 * S partials, inside the kernel that uses the sums where there is one
 * (bn_finalize_kernel, bn_grad_finish_kernel with the parameter gradients).
 * With RED_SLICE values a block, LeNet's and ResNet-18's gradients at batch
 * 256 take 1,050 to 12,544 blocks (one to twelve waves of 132 SMs x 8
 * blocks of 256 threads; one block per channel would be 20 to 512). Two
 * layouts:
 *   planes (L > 1: conv, batch norm over planes): slice s of channel c is
 *     its values j in [s chunk, (s + 1) chunk), j = n L + l, n then l;
 *     thread t adds j = s chunk + t, then + blockDim, ... in turn, stepping
 *     (n, l) and the offset without a division;
 *   columns (L = 1: an (N, C) matrix, linear and batch norm over features):
 *     a block covers `cols` adjacent columns (thread t: column t % cols, so
 *     the threads of a row read adjacent floats) and rows [s chunk,
 *     (s + 1) chunk); row group g = t / cols adds rows g, g + groups, ... in
 *     turn.
 * Inside a block the order is fixed too (block_sum, column_sum), written
 * with shared memory only: CUB's BlockReduce (and warp shuffles) would need
 * CUDA's device headers, which the CUDA emulator does not compile, and the
 * order written here is the one the emulator runs, so it gives the GPU's
 * bits. No atomics: the bits never depend on which block ends first. */
#define RED_THREADS 256
#define RED_SLICE 1024     /* the values a block sums (4 per thread) */
#define RED_MAX_SLICES 256 /* slices per channel at most (pass 2 reads them all) */
#define COMBINE_THREADS 32

typedef struct {
    int N, C, slices;
    int cols, col_blocks; /* columns layout: columns per block and blocks across C; cols 0: planes */
    int narrow;           /* N C L < 2^31: 32-bit offsets */
    size_t L, chunk;      /* chunk: a slice's values of a channel (planes) or rows (columns) */
} red_geom_t;

static red_geom_t red_geometry(int N, int C, size_t L) {
    red_geom_t g;
    g.N = N, g.C = C, g.L = L;
    g.narrow = (size_t)N * (size_t)C * L <= NARROW_MAX;
    size_t values = (size_t)N * L, per_slice = RED_SLICE;
    g.cols = 0, g.col_blocks = 0;
    if (L == 1) {
        g.cols = 32;
        while (g.cols < C && g.cols < RED_THREADS) g.cols *= 2;
        g.col_blocks = (C + g.cols - 1) / g.cols;
        per_slice = RED_SLICE / (size_t)g.cols; /* rows */
    }
    size_t slices = (values + per_slice - 1) / per_slice;
    slices = slices < 1 ? 1 : slices > RED_MAX_SLICES ? RED_MAX_SLICES : slices;
    g.slices = (int)slices;
    g.chunk = (values + slices - 1) / slices;
    return g;
}

static unsigned red_blocks(const red_geom_t *g) {
    return (unsigned)((size_t)(g->cols ? g->col_blocks : g->C) * (size_t)g->slices);
}

extern "C" size_t dp_cuda_channel_partials(int N, int C, size_t L) {
    red_geom_t g = red_geometry(N, C, L);
    return (size_t)g.slices * (size_t)g.C;
}

/* Thread 0 gets the sum over the block's threads of v[k]: thread t < 32
 * adds the values of threads t, t + 32, t + 64, ... in turn, then thread 0
 * adds those 32 sums in turn (two barriers). */
template <typename T, int K> __device__ static void block_sum(T v[K]) {
    __shared__ T part[K][RED_THREADS];
    const int t = (int)threadIdx.x, n = (int)blockDim.x;
    for (int k = 0; k < K; k++) part[k][t] = v[k];
    __syncthreads();
    if (t < 32)
        for (int k = 0; k < K; k++) {
            T s = part[k][t];
            for (int u = t + 32; u < n; u += 32) s = s + part[k][u];
            part[k][t] = s;
        }
    __syncthreads();
    if (t == 0)
        for (int k = 0; k < K; k++) {
            T s = part[k][0];
            for (int u = 1; u < 32 && u < n; u++) s = s + part[k][u];
            v[k] = s;
        }
}

/* Thread t < cols gets the sum of v[k] over its column's threads t, t +
 * cols, t + 2 cols, ... in that order. */
template <typename T, int K> __device__ static void column_sum(T v[K], int cols) {
    __shared__ T part[K][RED_THREADS];
    const int t = (int)threadIdx.x, n = (int)blockDim.x;
    for (int k = 0; k < K; k++) part[k][t] = v[k];
    __syncthreads();
    if (t < cols)
        for (int k = 0; k < K; k++)
            for (int u = t + cols; u < n; u += cols) v[k] = v[k] + part[k][u];
}

/* This thread's values of slice s of channel c, planes layout. */
template <typename I, typename Acc> __device__ static void slice_planes(const red_geom_t &g, Acc &a, int c, int s) {
    const I L = (I)g.L, CL = (I)g.C * L, values = (I)g.N * L;
    I j = (I)s * (I)g.chunk + (I)threadIdx.x, end = (I)(s + 1) * (I)g.chunk;
    if (end > values) end = values;
    if (j >= end) return;
    const I step = (I)blockDim.x, rem = step % L, jump = step / L * CL + rem, carry = CL - L;
    I l = j % L, at = j / L * CL + (I)c * L + l; /* the divisions: once per thread */
    for (; j < end; j += step) {
        a.add(at);
        l += rem;
        at += jump;
        if (l >= L) { /* past the row's end: on to the next row */
            l -= L;
            at += carry;
        }
    }
}

/* This thread's values of slice s of column c, columns layout. */
template <typename I, typename Acc> __device__ static void slice_columns(const red_geom_t &g, Acc &a, int c, int s) {
    const I groups = (I)(blockDim.x / g.cols), C = (I)g.C;
    I r = (I)s * (I)g.chunk + (I)(threadIdx.x / g.cols), end = (I)(s + 1) * (I)g.chunk;
    if (end > (I)g.N) end = (I)g.N;
    for (I at = r * C + (I)c; r < end; r += groups, at += groups * C) a.add(at);
}

/* Pass 1: the block's (channel, slice) partials of accumulator a (its
 * values v start at 0; start(c) reads what a channel needs). */
template <typename Acc> __device__ static void channel_partials(const red_geom_t &g, Acc &a,
                                                                typename Acc::value_t *partials) {
    int c, s, active = 1;
    if (g.cols) {
        s = (int)blockIdx.x / g.col_blocks;
        c = (int)blockIdx.x % g.col_blocks * g.cols + (int)threadIdx.x % g.cols;
        active = c < g.C;
    } else {
        c = (int)blockIdx.x / g.slices;
        s = (int)blockIdx.x % g.slices;
    }
    if (active) {
        a.start(c);
        if (g.cols) {
            if (g.narrow) slice_columns<uint32_t>(g, a, c, s);
            else slice_columns<size_t>(g, a, c, s);
        } else {
            if (g.narrow) slice_planes<uint32_t>(g, a, c, s);
            else slice_planes<size_t>(g, a, c, s);
        }
    }
    const size_t at = (size_t)s * g.C + c, stride = (size_t)g.slices * g.C;
    if (g.cols) {
        column_sum<typename Acc::value_t, Acc::K>(a.v, g.cols);
        if (active && (int)threadIdx.x < g.cols)
            for (int k = 0; k < Acc::K; k++) partials[k * stride + at] = a.v[k];
    } else {
        block_sum<typename Acc::value_t, Acc::K>(a.v);
        if (threadIdx.x == 0)
            for (int k = 0; k < Acc::K; k++) partials[k * stride + at] = a.v[k];
    }
}

/* Pass 2: thread 0 gets channel c's sums v[k] of its S partials: thread t
 * adds slices t, t + blockDim, ... in turn, then block_sum. */
template <typename T, int K> __device__ static void combine_slices(const T *partials, int slices, int C, int c, T v[K]) {
    for (int k = 0; k < K; k++) {
        T s = 0;
        for (int u = (int)threadIdx.x; u < slices; u += (int)blockDim.x) s = s + partials[((size_t)k * slices + u) * C + c];
        v[k] = s;
    }
    block_sum<T, K>(v);
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

/* Bias gradient values: dy, or with y the gradient through a ReLU (dy
 * where y > 0, else 0), which is also written to `masked`. */
struct bias_sum {
    typedef float value_t;
    static const int K = 1;
    const float *dy, *y;
    float *masked;
    float v[1];
    __device__ void start(int c) { (void)c; }
    template <typename I> __device__ void add(I at) {
        float g = dy[at];
        if (y) {
            g = y[at] > 0.0f ? g : 0.0f;
            masked[at] = g;
        }
        v[0] = __fadd_rn(v[0], g);
    }
};

__global__ void bias_grad_kernel(red_geom_t g, const float *dy, const float *y, float *masked, float *partials) {
    bias_sum a = {dy, y, masked, {0.0f}};
    channel_partials(g, a, partials);
}

__global__ void bias_combine_kernel(const float *partials, int slices, int C, float *db, int add) {
    const int c = (int)blockIdx.x;
    float v[1];
    combine_slices<float, 1>(partials, slices, C, c, v);
    if (threadIdx.x == 0) db[c] = add ? __fadd_rn(db[c], v[0]) : v[0];
}

extern "C" cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, const float *y, float *masked,
                                         float *db, int N, int C, size_t L, int add, float *partials) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, L);
    bias_grad_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, dy, y, masked, partials);
    bias_combine_kernel<<<C, COMBINE_THREADS, 0, stream>>>(partials, g.slices, C, db, add);
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

/* dx of input element i (plane, d, h, w): its outputs in (od, oh, ow) order,
 * dy / divisor each; the divisor as avg_divisor, its factors hoisted out of
 * the inner loops (the same int product, the same float). */
template <typename I>
__device__ static __forceinline__ void avg_pool_grad_at(const dp_cuda_pool_t &g, const float *dy, float *dx, int add,
                                                        I i, I plane, int d, int h, int w) {
    int d0, d1, h0, h1, w0, w1;
    covering(d, g.kd, g.sd, g.pd, 1, g.OD, &d0, &d1);
    covering(h, g.kh, g.sh, g.ph, 1, g.OH, &h0, &h1);
    covering(w, g.kw, g.sw, g.pw, 1, g.OW, &w0, &w1);
    const I base = plane * (I)(g.OD * g.OH * g.OW);
    const float volume = (float)(g.kd * g.kh * g.kw);
    float s = 0.0f;
    for (int od = d0; od <= d1; od++) {
        const int in_d = inside(od, g.kd, g.sd, g.pd, g.D);
        for (int oh = h0; oh <= h1; oh++) {
            const int in_dh = in_d * inside(oh, g.kh, g.sh, g.ph, g.H);
            const I row = base + ((I)od * (I)g.OH + (I)oh) * (I)g.OW;
            for (int ow = w0; ow <= w1; ow++) {
                float divisor = g.count_include_pad ? volume : (float)(in_dh * inside(ow, g.kw, g.sw, g.pw, g.W));
                s = __fadd_rn(s, __fdiv_rn(dy[row + (I)ow], divisor));
            }
        }
    }
    dx[i] = add ? __fadd_rn(dx[i], s) : s;
}

/* by_plane, by_HW, by_W divide by D H W, H W and W (narrow: planes D H W and
 * planes OD OH OW < 2^31) */
__global__ void avg_pool_backward_kernel(dp_cuda_pool_t g, const float *dy, float *dx, int add, fast_div_t by_plane,
                                         fast_div_t by_HW, fast_div_t by_W, int narrow) {
    const size_t in_plane = (size_t)g.D * g.H * g.W;
    if (narrow) {
        GRID_LOOP_T(uint32_t, i, (uint32_t)((size_t)g.planes * in_plane)) {
            uint32_t plane = div_by(by_plane, i), at = i - plane * (uint32_t)in_plane;
            uint32_t d = div_by(by_HW, at), r = at - d * (uint32_t)(g.H * g.W), h = div_by(by_W, r);
            avg_pool_grad_at<uint32_t>(g, dy, dx, add, i, plane, (int)d, (int)h, (int)(r - h * (uint32_t)g.W));
        }
        return;
    }
    GRID_LOOP(i, (size_t)g.planes * in_plane) {
        size_t plane = i / in_plane;
        int at = (int)(i % in_plane);
        avg_pool_grad_at<size_t>(g, dy, dx, add, i, plane, at / (g.H * g.W), at / g.W % g.H, at % g.W);
    }
}

extern "C" cudaError_t dp_cuda_avg_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                                 float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t in_n = (size_t)g->planes * g->D * g->H * g->W, out_n = (size_t)g->planes * g->OD * g->OH * g->OW;
    int narrow = in_n <= NARROW_MAX && out_n <= NARROW_MAX;
    avg_pool_backward_kernel<<<blocks_for(in_n), THREADS, 0, stream>>>(
        *g, dy, dx, add, fast_div(narrow ? (uint32_t)(g->D * g->H * g->W) : 1u),
        fast_div(narrow ? (uint32_t)(g->H * g->W) : 1u), fast_div(narrow ? (uint32_t)g->W : 1u), narrow);
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
/* Statistics values: d = x - K and d^2, K = 0 (use_shift 0) or the
 * channel's first value. */
struct bn_stats_sum {
    typedef double value_t;
    static const int K = 2;
    const float *x;
    size_t plane;
    int use_shift;
    double shift, v[2];
    __device__ void start(int c) { shift = use_shift ? (double)x[(size_t)c * plane] : 0.0; }
    template <typename I> __device__ void add(I at) {
        double d = (double)x[at] - shift;
        v[0] += d;
        v[1] += d * d;
    }
};

__global__ void bn_stats_kernel(red_geom_t g, const float *x, size_t plane, int use_shift, double *partials) {
    bn_stats_sum a = {x, plane, use_shift, 0.0, {0.0, 0.0}};
    channel_partials(g, a, partials);
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

extern "C" cudaError_t dp_cuda_bn_stats(cudaStream_t stream, const float *x, int N, int C, size_t plane, int use_shift,
                                        double *partials, double *sums) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_stats_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, x, plane, use_shift, partials);
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
__global__ void bn_finalize_kernel(const float *x, int C, size_t plane, int use_shift, const double *partials,
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
            double mean = (use_shift ? (double)x[(size_t)c * plane] : 0.0) + shifted_mean;
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

extern "C" cudaError_t dp_cuda_bn_finalize(cudaStream_t stream, const float *x, int N, int C, size_t plane,
                                           int use_shift, const double *partials, const double *sums, int training,
                                           double eps, double momentum, float *running_mean, float *running_var,
                                           double *saved, double count, const float *w, const float *b, float *coef) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_finalize_kernel<<<C, COMBINE_THREADS, 0, stream>>>(x, C, plane, use_shift, partials, g.slices, sums, training,
                                                          eps, momentum, running_mean, running_var, saved, count, w, b,
                                                          coef);
    return cudaGetLastError();
}

/* y = (x - mean_hi) scale + shift, as the CPU's forward (coef: bn_finalize's) */
template <typename I> __device__ static void bn_apply_loop(const float *x, float *y, const chan_index_t &ci, I n,
                                                           const float *coef) {
    GRID_LOOP_T(I, j, n) {
        int c = channel_of(ci, j);
        y[j] = __fadd_rn(__fmul_rn(__fsub_rn(x[j], coef[c]), coef[ci.C + c]), coef[2 * ci.C + c]);
    }
}

__global__ void bn_apply_kernel(const float *x, float *y, chan_index_t ci, size_t n, const float *coef) {
    if (ci.narrow) bn_apply_loop<uint32_t>(x, y, ci, (uint32_t)n, coef);
    else bn_apply_loop<size_t>(x, y, ci, n, coef);
}

extern "C" cudaError_t dp_cuda_bn_apply(cudaStream_t stream, const float *x, float *y, int N, int C, size_t plane,
                                        const float *coef) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * plane;
    bn_apply_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, chan_index(N, C, plane), n, coef);
    return cudaGetLastError();
}

/* Gradient sums' values: dy and dy (x - mean). */
struct bn_grad_sum {
    typedef double value_t;
    static const int K = 2;
    const float *x, *dy;
    const double *saved;
    double mean, v[2];
    __device__ void start(int c) { mean = saved[c]; }
    template <typename I> __device__ void add(I at) {
        v[0] += (double)dy[at];
        v[1] += (double)dy[at] * ((double)x[at] - mean);
    }
};

__global__ void bn_grad_sums_kernel(red_geom_t g, const float *x, const float *dy, const double *saved,
                                    double *partials) {
    bn_grad_sum a = {x, dy, saved, 0.0, {0.0, 0.0}};
    channel_partials(g, a, partials);
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

extern "C" cudaError_t dp_cuda_bn_grad_sums(cudaStream_t stream, const float *x, const float *dy, int N, int C,
                                            size_t plane, const double *saved, double *partials, double *gsums,
                                            float *dw, int add_w, float *db, int add_b) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, plane);
    bn_grad_sums_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, x, dy, saved, partials);
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
template <typename I> __device__ static void bn_dx_loop(const float *x, const float *dy, float *dx, const chan_index_t &ci,
                                                        I n, const float *coef, int add) {
    const int C = ci.C;
    GRID_LOOP_T(I, j, n) {
        int c = channel_of(ci, j);
        float g = __fadd_rn(__fadd_rn(__fmul_rn(coef[c], dy[j]), __fmul_rn(coef[C + c], __fsub_rn(x[j], coef[3 * C + c]))),
                            coef[2 * C + c]);
        dx[j] = add ? __fadd_rn(dx[j], g) : g;
    }
}

__global__ void bn_dx_kernel(const float *x, const float *dy, float *dx, chan_index_t ci, size_t n, const float *coef,
                             int add) {
    if (ci.narrow) bn_dx_loop<uint32_t>(x, dy, dx, ci, (uint32_t)n, coef, add);
    else bn_dx_loop<size_t>(x, dy, dx, ci, n, coef, add);
}

extern "C" cudaError_t dp_cuda_bn_dx(cudaStream_t stream, const float *x, const float *dy, float *dx, int N, int C,
                                     size_t plane, const double *saved, const double *gsums, const float *w,
                                     int training, int add, float *coef) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * C * plane;
    bn_dx_coef_kernel<<<blocks_for((size_t)C), THREADS, 0, stream>>>(C, saved, gsums, w, training, coef);
    bn_dx_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, dy, dx, chan_index(N, C, plane), n, coef, add);
    return cudaGetLastError();
}
