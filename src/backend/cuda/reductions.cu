/* reductions.cu - the sums: the device-order sum of replicas
 * (dp_cuda_reduce), bias gradients (per-channel sums over the whole grid,
 * kernels_common.cuh's two passes; dp_cuda_channel_partials sizes their
 * scratch), a batch's metrics (its loss, correct and top-5 counts) and
 * gradient clipping's sum of squares. */
#include "kernels_common.cuh"

/* --- reduce: dst = src[0] + ... + src[k-1], left to right ------------------- */
typedef struct {
    const float *p[DP_CUDA_REDUCE_MAX_SRC];
} src_list_t;

/* __grid_constant__ (here and in data.cu's gather_kernel): the parameter's
 * array, indexed at run time, is read where it is; a plain by-value
 * parameter is copied to every thread's local memory first (ptxas
 * -warn-lmem-usage). */
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

extern "C" size_t dp_cuda_channel_partials(int N, int C, size_t L) {
    red_geom_t g = red_geometry(N, C, L);
    return (size_t)g.slices * (size_t)g.C;
}

/* --- bias gradients: per-channel sums of dy (kernels_common.cuh's two passes) ------- */
/* Bias gradient values: dy, or with y the gradient through a ReLU (dy
 * where y > 0, else 0), which is also written to `masked` (rounded to
 * bf16 there for a bf16 convolution's operand); y and masked float or
 * bf16, the sum of the FP32 values either way. */
template <typename T, typename TM> struct bias_sum {
    typedef float value_t;
    static const int K = 1;
    const float *dy;
    const T *y;
    TM *masked;
    float v[1];
    __device__ void start(int c) { (void)c; }
    template <typename I> __device__ void add(I at) {
        float g = dy[at];
        if (y) {
            g = ld(y, at) > 0.0f ? g : 0.0f;
            st(masked, at, g);
        }
        v[0] = __fadd_rn(v[0], g);
    }
};

__global__ void bias_grad_kernel(red_geom_t g, const float *dy, const void *y, void *masked, float *partials,
                                 int bf16) {
    FORMAT2(bf16, T, TM, bias_sum<T, TM> a = {dy, (const T *)y, (TM *)masked, {0.0f}}; channel_partials(g, a, partials));
}

__global__ void bias_combine_kernel(const float *partials, int slices, int C, float *db, int add) {
    const int c = (int)blockIdx.x;
    float v[1];
    combine_slices<float, 1>(partials, slices, C, c, v);
    if (threadIdx.x == 0) db[c] = add ? __fadd_rn(db[c], v[0]) : v[0];
}

extern "C" cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, const void *y, void *masked,
                                         float *db, int N, int C, size_t L, int add, float *partials, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    red_geom_t g = red_geometry(N, C, L);
    bias_grad_kernel<<<red_blocks(&g), RED_THREADS, 0, stream>>>(g, dy, y, masked, partials, bf16);
    bias_combine_kernel<<<C, COMBINE_THREADS, 0, stream>>>(partials, g.slices, C, db, add);
    return cudaGetLastError();
}

/* --- metrics: a batch's loss, correct and top-5 counts added to three doubles (backend.h count_metrics) --- */
/* backend.h's top-5 rule: 1 when fewer than 5 entries of row (k) outrank
 * the label's (larger, or equal at a lower index); a NaN at the label is
 * ranked last, a NaN elsewhere outranks nothing (its comparisons are false). */
__device__ int top5_hit(const float *row, int k, int label) {
    if (label < 0 || label >= k) return 0;
    const float v = row[label];
    if (isnan(v)) return k <= 5;
    int rank = 0;
    for (int j = 0; j < k && rank < 5; j++)
        rank += row[j] > v || (row[j] == v && j < label);
    return rank < 5;
}

/* One block: each thread counts its strided rows (trainer.c's rule: the
 * first largest entry; and the top-5 rule), a fixed tree adds the counts
 * (integers: exact), thread 0 adds to the sums with one rounding per
 * operation (__dmul_rn, __dadd_rn: never a fused multiply-add), the host's
 * bits. */
__global__ void count_metrics_kernel(double *sums, const float *loss, double scale, const float *logits,
                                     const int32_t *labels, int n, int k) {
    __shared__ int part[THREADS], part5[THREADS];
    int correct = 0, top5 = 0;
    for (int i = (int)threadIdx.x; i < n; i += THREADS) {
        const float *row = logits + (size_t)i * k; /* (k) */
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        correct += best == labels[i];
        top5 += top5_hit(row, k, labels[i]);
    }
    part[threadIdx.x] = correct;
    part5[threadIdx.x] = top5;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            part[threadIdx.x] += part[threadIdx.x + w];
            part5[threadIdx.x] += part5[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (loss) sums[0] = __dadd_rn(sums[0], __dmul_rn((double)loss[0], scale));
        sums[1] = __dadd_rn(sums[1], (double)part[0]);
        sums[2] = __dadd_rn(sums[2], (double)part5[0]);
    }
}

extern "C" cudaError_t dp_cuda_count_metrics(cudaStream_t stream, double *sums, const float *loss, double scale,
                                             const float *logits, const int32_t *labels, int n, int k) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    count_metrics_kernel<<<1, THREADS, 0, stream>>>(sums, loss, scale, logits, labels, n, k);
    return cudaGetLastError();
}

/* --- gradient clipping: the sum of squares in double (backend.h sum_squares) ---------------- */
/* part[0] = part[0] + ... + part[THREADS - 1] by a fixed tree (one rounding per add) */
__device__ void tree_sum(double *part) {
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] = __dadd_rn(part[threadIdx.x], part[threadIdx.x + w]);
        __syncthreads();
    }
}

/* A block's threads each add their strided squares in order (a float's
 * square is exact in double), then the block's tree. */
__global__ void squares_kernel(const float *x, size_t n, double *partials) {
    __shared__ double part[THREADS];
    double s = 0.0;
    GRID_LOOP(i, n) {
        const double v = (double)x[i];
        s = __dadd_rn(s, __dmul_rn(v, v));
    }
    part[threadIdx.x] = s;
    tree_sum(part);
    if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

__global__ void squares_combine_kernel(double *partials, int count) {
    __shared__ double part[THREADS];
    part[threadIdx.x] = (int)threadIdx.x < count ? partials[threadIdx.x] : 0.0;
    tree_sum(part);
    if (threadIdx.x == 0) partials[count] = part[0];
}

extern "C" cudaError_t dp_cuda_sum_squares(cudaStream_t stream, const float *x, size_t n, double *scratch) {
    static_assert(DP_CUDA_SQUARES_BLOCKS <= THREADS, "one block combines the partial sums");
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    squares_kernel<<<DP_CUDA_SQUARES_BLOCKS, THREADS, 0, stream>>>(x, n, scratch);
    squares_combine_kernel<<<1, THREADS, 0, stream>>>(scratch, DP_CUDA_SQUARES_BLOCKS);
    return cudaGetLastError();
}
