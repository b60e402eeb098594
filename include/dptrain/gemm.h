/* gemm.h - single-precision matrix product, the kernel under convolution
 * and linear layers.
 *
 * dp_gemm computes C = alpha * op(A) op(B) + beta * C for row-major
 * matrices, with the arguments of cblas_sgemm(CblasRowMajor, ...): op(A) is
 * (M, K), op(B) is (K, N), C is (M, N). On processors with AVX-512 it runs
 * dptrain's own kernels: a packed one (the BLIS loop structure around a 6x64
 * register tile) and, for A B^T with long K and a narrow C (weight
 * gradients), row-by-row dot products. Shapes those do not suit (C narrower
 * than 32 columns otherwise), other processors, and DPTRAIN_GEMM=blas in the
 * environment go to the BLAS library. The own kernels use only the calling
 * thread.
 */
#ifndef DPTRAIN_GEMM_H
#define DPTRAIN_GEMM_H

#include <stdbool.h>

void dp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Which implementation dp_gemm uses: "avx512" or "blas". */
const char *dp_gemm_backend(void);

#endif
