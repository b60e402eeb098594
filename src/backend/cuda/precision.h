/* precision.h - the launchers of precision.cu's cast kernels for
 * --precision bf16 (bf16.h: the numbers and their conversions). */
#ifndef DPTRAIN_CUDA_PRECISION_H
#define DPTRAIN_CUDA_PRECISION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y (n) = bf16 of x (n) */
cudaError_t dp_cuda_to_bf16(cudaStream_t stream, const float *x, uint16_t *y, size_t n);
/* y (n) = x (n) as floats, or y += x (one FP32 addition each) when `add` */
cudaError_t dp_cuda_from_bf16(cudaStream_t stream, const uint16_t *x, float *y, size_t n, int add);
/* A stored activation (N, C, L) copied into dst: order 0 the same order, 1
 * from (N, C, L) to (N, L, C) (NCHW to NHWC), 2 back; src and dst float or
 * bf16 (`bf16` bits 0 and 1, kernels.h): bf16 to float exact, float to
 * bf16 rounded to nearest, ties to even. */
cudaError_t dp_cuda_activation_copy(cudaStream_t stream, const void *src, void *dst, int N, int C, size_t L, int order,
                                    int bf16);

#ifdef __cplusplus
}
#endif

#endif
