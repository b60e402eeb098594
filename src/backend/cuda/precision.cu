/* precision.cu - the cast kernels of --precision bf16 (precision.h): FP32
 * tensors to bf16 operands for cuDNN and cuBLAS, bf16 results back to
 * FP32 (written, or added to a gradient), and the conversions of stored
 * activations between formats and layouts (layout_cuda.c's copies for the
 * ops that read FP32 only). Elementwise: the bits do not depend on the
 * grid (kernels_common.cuh's launch geometry). */
#include "kernels_common.cuh"
#include "precision.h"

__global__ void to_bf16_kernel(const float *x, uint16_t *y, size_t n) {
    GRID_LOOP(i, n) y[i] = dp_bf16_from_float(x[i]);
}

__global__ void from_bf16_kernel(const uint16_t *x, float *y, size_t n, int add) {
    GRID_LOOP(i, n) {
        float v = dp_bf16_to_float(x[i]);
        y[i] = add ? __fadd_rn(y[i], v) : v;
    }
}

extern "C" cudaError_t dp_cuda_to_bf16(cudaStream_t stream, const float *x, uint16_t *y, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    to_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dp_cuda_from_bf16(cudaStream_t stream, const uint16_t *x, float *y, size_t n, int add) {
    (void)cudaGetLastError();
    from_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n, add);
    return cudaGetLastError();
}

/* dst's element i from src's layout_source(i, order) (kernels_common.cuh:
 * 0 the same index, 1 into NHWC, 2 into NCHW), converted between formats */
template <typename I, typename TS, typename TD>
__device__ static void activation_copy_loop(const TS *src, TD *dst, const chan_index_t &ci, I n, int order) {
    GRID_LOOP_T(I, i, n) st(dst, i, ld(src, layout_source(ci, i, order)));
}

__global__ void activation_copy_kernel(const void *src, void *dst, chan_index_t ci, size_t n, int order, int bf16) {
    FORMAT2(bf16, TS, TD, if (ci.narrow) activation_copy_loop<uint32_t>((const TS *)src, (TD *)dst, ci, (uint32_t)n, order);
            else activation_copy_loop<size_t>((const TS *)src, (TD *)dst, ci, n, order));
}

extern "C" cudaError_t dp_cuda_activation_copy(cudaStream_t stream, const void *src, void *dst, int N, int C, size_t L,
                                               int order, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t n = (size_t)N * (size_t)C * L;
    activation_copy_kernel<<<blocks_for(n), THREADS, 0, stream>>>(src, dst, chan_index(N, C, L), n, order, bf16);
    return cudaGetLastError();
}
