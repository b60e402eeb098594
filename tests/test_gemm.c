/* test_gemm.c - dp_gemm against a plain double-precision triple loop, over
 * every path it has (packed, B read in place, transposed-B packing with its
 * 16x16 blocks and gathered tail, the A B^T dot kernel, the BLAS fallback)
 * and the edges of each: sizes that are not multiples of the tiles (6 rows,
 * 64 / 16 / 8 columns, 16-wide transposes, K slices of 128 / 256 / 384),
 * alpha and beta, leading dimensions larger than the matrix. ctest runs it
 * once per ISA the CPU has (DPTRAIN_ISA, tests/isa_run.sh); it checks that
 * the kernels it tests are the ones asked for. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/cpu.h"
#include "dptrain/gemm.h"
#include "dptrain/rng.h"
#include "testing.h"

static void check_case(bool ta, bool tb, int M, int N, int K, float alpha, float beta, dp_rng_t *rng) {
    int pad = 3; /* leading dimensions larger than the rows */
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc);
    float *want = malloc(sizeof(float) * nc);
    for (size_t i = 0; i < na; i++) A[i] = (float)dp_rng_normal(rng);
    for (size_t i = 0; i < nb; i++) B[i] = (float)dp_rng_normal(rng);
    for (size_t i = 0; i < nc; i++) C[i] = want[i] = (float)dp_rng_normal(rng);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                sum += a * b;
            }
            double c = beta == 0.0f ? 0.0 : beta * (double)want[(size_t)i * ldc + j];
            want[(size_t)i * ldc + j] = (float)(alpha * sum + c);
        }
    dp_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    /* float32 sums of K products of N(0,1) values: error ~ 1e-7 sqrt(K) * sqrt(K) */
    double atol = 1e-5 * (K + 1), worst = 0.0;
    int padding_intact = 1;
    for (int i = 0; i < M; i++) {
        size_t at;
        double v = testing_max_violation(C + (size_t)i * ldc, want + (size_t)i * ldc, (size_t)N, 1e-5, atol, &at);
        if (v > worst) worst = v;
        for (int j = N; j < ldc; j++) padding_intact &= C[(size_t)i * ldc + j] == want[(size_t)i * ldc + j];
    }
    CHECK(worst <= 1.0, "%s: ta %d tb %d M %d N %d K %d alpha %g beta %g: violation %g", dp_gemm_backend(), ta,
          tb, M, N, K, alpha, beta, worst);
    CHECK(padding_intact, "ta %d tb %d M %d N %d K %d: wrote past column N", ta, tb, M, N, K);
    free(A);
    free(B);
    free(C);
    free(want);
}

int main(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 2024);
    static const int sizes[] = {1, 5, 6, 7, 16, 17, 31, 32, 63, 64, 65, 129, 200};
    int count = (int)(sizeof sizes / sizeof sizes[0]);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int trial = 0; trial < 40; trial++) {
                int M = sizes[dp_rng_below(&rng, (uint64_t)count)];
                int N = sizes[dp_rng_below(&rng, (uint64_t)count)];
                int K = sizes[dp_rng_below(&rng, (uint64_t)count)];
                float alpha = trial % 3 == 0 ? 1.0f : 0.5f, beta = (float)(trial % 3) * 0.5f;
                check_case(ta, tb, M, N, K, alpha, beta, &rng);
            }
    /* The shapes LeNet's layers give, and the A B^T kernel (long K). */
    check_case(false, false, 50, 405, 500, 1.0f, 0.0f, &rng);  /* conv2 forward, a chunk of 5 images */
    check_case(true, false, 500, 405, 50, 1.0f, 0.0f, &rng);   /* conv2 input gradient */
    check_case(false, true, 50, 500, 405, 1.0f, 1.0f, &rng);   /* conv2 weight gradient */
    check_case(false, true, 20, 9, 676, 1.0f, 1.0f, &rng);     /* conv1 weight gradient: dot kernel */
    check_case(false, true, 7, 3, 300, 0.5f, 0.5f, &rng);      /* dot kernel, ragged blocks */
    check_case(false, false, 300, 10, 128, 1.0f, 0.0f, &rng);  /* narrow C: BLAS */
    check_case(false, false, 40, 3000, 70, 1.0f, 1.0f, &rng);  /* more columns than one NC block */
    check_case(true, true, 13, 70, 270, 2.0f, 0.0f, &rng);     /* transposed tails in both */
    /* The AVX2 tile's edges: 8-lane halves, 6 rows, K slices of 256; and the
     * AVX-512 tile's K slices of 384. */
    static const int narrow[] = {8, 9, 12, 15, 16, 23, 24, 33};
    for (int i = 0; i < (int)(sizeof narrow / sizeof narrow[0]); i++) {
        check_case(false, false, 13, narrow[i], 257, 1.0f, 0.5f, &rng);
        check_case(true, true, 7, narrow[i], 31, 0.5f, 0.0f, &rng);
        check_case(false, true, 1, narrow[i], 300, 1.0f, 1.0f, &rng); /* dot kernel, one row */
    }
    check_case(false, false, 125, 70, 800, 1.0f, 1.0f, &rng); /* several K slices and MC blocks */

    /* The kernels under test are the ones DPTRAIN_ISA asked for. */
    const char *want = getenv("DPTRAIN_ISA");
    const char *isa = dp_isa_name(dp_cpu_isa());
    CHECK(dp_cpu_init() == DP_OK, "dp_cpu_init: %s", dp_error_message());
    if (want && want[0]) {
        CHECK(strcmp(isa, want) == 0, "DPTRAIN_ISA=%s but the kernels are %s", want, isa);
        const char *backend = strcmp(want, "generic") == 0 ? "blas" : want;
        CHECK(strcmp(dp_gemm_backend(), backend) == 0, "DPTRAIN_ISA=%s: gemm backend %s, expected %s", want,
              dp_gemm_backend(), backend);
    } else {
        CHECK(dp_cpu_isa() == dp_cpu_best_isa(), "no DPTRAIN_ISA: kernels %s, best %s", isa,
              dp_isa_name(dp_cpu_best_isa()));
    }
    printf("gemm backend: %s (isa %s)\n", dp_gemm_backend(), isa);
    return testing_finish("test_gemm");
}
