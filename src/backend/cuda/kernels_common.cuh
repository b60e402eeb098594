/* kernels_common.cuh - what the CUDA backend's kernel files share (one
 * file per op family: data.cu, elementwise.cu, loss.cu, norms.cu,
 * optimizers.cu, pooling.cu, reductions.cu; their plain C launchers in
 * kernels.h): the launch geometry (THREADS, blocks_for, the grid-stride
 * loops), 32-bit index arithmetic (fast_div_t, chan_index_t) and the
 * per-channel sums over the whole grid (red_geometry, channel_partials,
 * combine_slices). The CUDA emulator's build hands it to host_kernels.pl
 * with each kernel file (its __syncthreads helpers make callers cooperative).
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
 * the per-element code they replace.
 *
 * Stored activations (--precision bf16: layout_cuda.h's DP_CUDA_BF16 mark)
 * are float or bf16: the kernels that read or write them are templates
 * over the element type, reading through ld (bf16 -> float, exact) and
 * writing through st (float -> bf16 rounded to nearest, ties to even: one
 * rounding of the float the FP32 kernel stores); everything between is
 * the FP32 arithmetic, so a bf16 input gives the bits an FP32 input of the
 * same values gives. FORMAT1..3 pick the types from the launchers' `bf16`
 * bits (kernels.h) inside a kernel: one kernel, a branch per launch. */
#ifndef DPTRAIN_CUDA_KERNELS_COMMON_CUH
#define DPTRAIN_CUDA_KERNELS_COMMON_CUH

#include <math.h>

#include "bf16.h"
#include "kernels.h"

#define THREADS 256

static inline unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535u * 16u ? (b ? b : 1) : 65535u * 16u);
}

#define GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
/* the same with an index of type I (uint32_t where the count is below 2^31) */
#define GRID_LOOP_T(I, i, n) for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n); i += (I)gridDim.x * (I)blockDim.x)
#define NARROW_MAX ((size_t)0x7fffffff) /* counts up to this run with 32-bit indices */

/* --- stored activations: float or bf16 (uint16_t) ------------------------------------ */
template <typename I> __device__ static __forceinline__ float ld(const float *p, I i) { return p[i]; }
template <typename I> __device__ static __forceinline__ float ld(const uint16_t *p, I i) { return dp_bf16_to_float(p[i]); }
template <typename I> __device__ static __forceinline__ void st(float *p, I i, float v) { p[i] = v; }
template <typename I> __device__ static __forceinline__ void st(uint16_t *p, I i, float v) { p[i] = dp_bf16_from_float(v); }

/* The statements __VA_ARGS__ with type A = uint16_t when `bit` is set, else
 * float; FORMAT2 and FORMAT3 the same for two and three types, from bits 0,
 * 1 (and 2) of `bits` in that order. */
#define FORMAT1(bit, A, ...)                                                                                         \
    do {                                                                                                             \
        if (bit) {                                                                                                   \
            typedef uint16_t A;                                                                                      \
            __VA_ARGS__;                                                                                             \
        } else {                                                                                                     \
            typedef float A;                                                                                         \
            __VA_ARGS__;                                                                                             \
        }                                                                                                            \
    } while (0)
#define FORMAT2(bits, A, B, ...) FORMAT1((bits) & 1, A, FORMAT1((bits) & 2, B, __VA_ARGS__))
#define FORMAT3(bits, A, B, C, ...) FORMAT1((bits) & 1, A, FORMAT2((bits) >> 1, B, C, __VA_ARGS__))

/* n / d for n < 2^31 without a division: a multiply-high and a shift
 * (Granlund and Montgomery): s is the least with 2^s >= d, m = floor(2^32
 * (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s. Made by the launcher. */
typedef struct {
    uint32_t d, m, s;
} fast_div_t;

static inline fast_div_t fast_div(uint32_t d) {
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

static inline chan_index_t chan_index(int N, int C, size_t L) {
    chan_index_t ci;
    ci.narrow = (size_t)N * (size_t)C * L <= NARROW_MAX;
    ci.by_L = fast_div(ci.narrow ? (uint32_t)L : 1u);
    ci.by_C = fast_div(ci.narrow ? (uint32_t)C : 1u);
    ci.L = L;
    ci.C = C;
    return ci;
}

/* q / d for an index q: a fast division of a 32-bit one (f = fast_div(d)),
 * a plain one of a 64-bit one */
__device__ static __forceinline__ uint32_t quotient(fast_div_t f, uint32_t, uint32_t q) { return div_by(f, q); }
__device__ static __forceinline__ size_t quotient(fast_div_t, size_t d, size_t q) { return q / d; }

/* The source index of element i of a copy of an (N, C, L) tensor (ci:
 * chan_index(N, C, L)): order 0 the same index; 1 into NHWC (i = (b L + l)
 * C + c comes from (b C + c) L + l); 2 into NCHW (the other way round).
 * 32-bit I: the quotients are fast divisions. */
template <typename I> __device__ static __forceinline__ I layout_source(const chan_index_t &ci, I i, int order) {
    const I C = (I)ci.C, L = (I)ci.L;
    if (order == 1) {
        I q = quotient(ci.by_C, C, i), c = i - q * C, b = quotient(ci.by_L, L, q), l = q - b * L;
        return (b * C + c) * L + l;
    }
    if (order == 2) {
        I q = quotient(ci.by_L, L, i), l = i - q * L, b = quotient(ci.by_C, C, q), c = q - b * C;
        return (b * L + l) * C + c;
    }
    return i;
}

__device__ static __forceinline__ int channel_of(const chan_index_t &ci, uint32_t j) {
    uint32_t p = div_by(ci.by_L, j); /* the plane n C + c */
    return (int)(p - div_by(ci.by_C, p) * (uint32_t)ci.C);
}
__device__ static __forceinline__ int channel_of(const chan_index_t &ci, size_t j) { return (int)((j / ci.L) % ci.C); }

/* --- per-channel reductions over the whole grid ---------------------------------------
 * A sum per channel c over the (N, C, L) values of c: bias gradients and
 * batch norm's sums. Pass 1 splits every channel into S slices (S and the
 * slice length `chunk` come from red_geometry: a function of (N, C, L)
 * only) and one block sums one (channel, slice), writing its partial to
 * partials[(k S + s) C + c] (value k of the K an accumulator sums). Pass 2
 * (combine_slices: a block of COMBINE_THREADS per channel) adds a channel's
 * S partials, inside the kernel that uses the sums where there is one
 * (norms.cu's bn_finalize_kernel, bn_grad_finish_kernel with the parameter
 * gradients).
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

static inline red_geom_t red_geometry(int N, int C, size_t L) {
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

static inline unsigned red_blocks(const red_geom_t *g) {
    return (unsigned)((size_t)(g->cols ? g->col_blocks : g->C) * (size_t)g->slices);
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

#endif
