/* precision.cu - the cast kernels of --precision bf16 (precision.h): FP32
 * tensors to bf16 operands for cuDNN and cuBLAS, and bf16 results back to
 * FP32 (written, or added to a gradient). Elementwise: the bits do not
 * depend on the grid (kernels_common.cuh's launch geometry). */
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
