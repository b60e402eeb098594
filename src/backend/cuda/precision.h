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

#ifdef __cplusplus
}
#endif

#endif
