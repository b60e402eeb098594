/* gemm.c - dp_gemm: dispatch to the kernels of the CPU at hand, or BLAS.
 *
 * The per-ISA kernels (kernels/gemm_avx512.c: 6x64 tile; gemm_avx2.c: 6x16;
 * gemm_neon.c: 8x8) each take the shapes they suit and hand the others back;
 * those, and every shape on the generic ISA, go to the BLAS library
 * (cblas_sgemm). Which ISA runs is chosen once per process (cpu.h).
 *
 * Thread safety: packing buffers are per thread (_Thread_local, freed at
 * thread exit), so device workers may call dp_gemm concurrently.
 */
#include "dptrain/gemm.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/status.h"
#include "kernels/kernels.h"

static void gemm_blas(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Per-thread packing buffers, allocated on a thread's first product and
 * freed when the thread exits (the key's destructor), so device workers that
 * come and go with trainers do not leak them. */
static _Thread_local float *packed_a, *packed_b;
static pthread_key_t buffers_key;
static pthread_once_t buffers_once = PTHREAD_ONCE_INIT;

static void free_buffers(void *unused) {
    (void)unused;
    free(packed_a);
    free(packed_b);
    packed_a = packed_b = NULL;
}

static void create_buffers_key(void) { (void)pthread_key_create(&buffers_key, free_buffers); }

bool dp_gemm_buffers(float **a, float **b) {
    if (!packed_a || !packed_b) {
        pthread_once(&buffers_once, create_buffers_key);
        if (!packed_a) packed_a = dp_alloc_aligned(sizeof(float) * DP_GEMM_PACK_A, "gemm packing buffer");
        if (!packed_b) packed_b = dp_alloc_aligned(sizeof(float) * DP_GEMM_PACK_B, "gemm packing buffer");
        /* any non-NULL value makes the destructor run at thread exit */
        (void)pthread_setspecific(buffers_key, (void *)1);
    }
    *a = packed_a;
    *b = packed_b;
    return packed_a && packed_b;
}

const char *dp_gemm_backend(void) {
    const dp_cpu_kernels_t *k = dp_cpu_kernels();
    return k->gemm ? dp_isa_name(k->isa) : "blas";
}

void dp_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    const dp_gemm_kernel_fn kernel = dp_cpu_kernels()->gemm;
    if (kernel && kernel(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
    gemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
