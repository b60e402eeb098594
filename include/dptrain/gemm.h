/* gemm.h - single-precision matrix product, the kernel under convolution
 * and linear layers.
 *
 * dp_gemm computes C = alpha * op(A) op(B) + beta * C for row-major
 * matrices, with the arguments of cblas_sgemm(CblasRowMajor, ...): op(A) is
 * (M, K), op(B) is (K, N), C is (M, N). It runs dptrain's own kernels for
 * the ISA chosen at start-up (cpu.h): a packed one (the BLIS loop structure
 * around a register tile: 6x64 on AVX-512, 6x16 on AVX2+FMA, 8x8 on NEON)
 * and, for A B^T with long K and a narrow C (weight gradients), row-by-row
 * dot products. Shapes those do not suit (a C much narrower than the tile),
 * and every shape on the generic ISA (DPTRAIN_ISA=generic), go to the BLAS
 * library. The own kernels use only the calling thread.
 */
#ifndef DPTRAIN_GEMM_H
#define DPTRAIN_GEMM_H

#include <stdbool.h>

void dp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Which implementation dp_gemm uses: the ISA of its kernels ("avx512",
 * "avx2", "neon") or "blas". */
const char *dp_gemm_backend(void);

#endif
