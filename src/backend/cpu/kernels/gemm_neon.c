/* gemm_neon.c - the NEON (aarch64 Advanced SIMD) kernels of dp_gemm
 * (gemm.c, gemm.h). NEON is part of every aarch64 CPU, so this file needs no
 * extra flags; it is still called only through the kernel table.
 *
 * The AVX-512 / AVX2 files' structure: the BLIS loops around an 8 x 8
 * register tile (16 q-register accumulators, A broadcast by lane with
 * vfmaq_laneq_f32 from 2 q registers, B in 2), B (not transposed) read in
 * place for full 8-column panels, packed (zero padded) otherwise; edges
 * through a small buffer. A B^T with long K and a narrow C: 4 x 4 blocks of
 * 4-lane partial sums (16 accumulators), scalar K tail.
 * Tested under qemu-user (scripts/check_arm64.sh); not yet tuned on
 * hardware.
 */
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

enum { MR = 8, NR = 8, KC = 256, MC = 128, NC = 2048 };
_Static_assert((size_t)MC * KC <= DP_GEMM_PACK_A && (size_t)KC * NC <= DP_GEMM_PACK_B, "packing buffers");

static void pack_b(bool trans_b, const float *B, int ldb, int k0, int kc, int j0, int nc, float *packed) {
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        float *dst = packed + (size_t)p * kc;
        for (int k = 0; k < kc; k++) {
            float *row = dst + (size_t)k * NR;
            for (int c = 0; c < NR; c++)
                row[c] = c >= cols ? 0.0f
                         : trans_b ? B[(size_t)(j0 + p + c) * ldb + k0 + k]
                                   : B[(size_t)(k0 + k) * ldb + j0 + p + c];
        }
    }
}

/* C[0..rows, 0..cols) (ldc) = beta C + alpha Ap Bp; Ap (kc, MR) packed, Bp
 * (kc, NR) with rows ldbp apart. */
static void kernel_8x8(int kc, const float *Ap, const float *Bp, size_t ldbp, float *C, int ldc, int rows, int cols,
                       float alpha, float beta) {
    float32x4_t acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    for (int k = 0; k < kc; k++) {
        const float32x4_t b0 = vld1q_f32(Bp), b1 = vld1q_f32(Bp + 4);
        const float32x4_t a0 = vld1q_f32(Ap), a1 = vld1q_f32(Ap + 4);
        acc[0][0] = vfmaq_laneq_f32(acc[0][0], b0, a0, 0), acc[0][1] = vfmaq_laneq_f32(acc[0][1], b1, a0, 0);
        acc[1][0] = vfmaq_laneq_f32(acc[1][0], b0, a0, 1), acc[1][1] = vfmaq_laneq_f32(acc[1][1], b1, a0, 1);
        acc[2][0] = vfmaq_laneq_f32(acc[2][0], b0, a0, 2), acc[2][1] = vfmaq_laneq_f32(acc[2][1], b1, a0, 2);
        acc[3][0] = vfmaq_laneq_f32(acc[3][0], b0, a0, 3), acc[3][1] = vfmaq_laneq_f32(acc[3][1], b1, a0, 3);
        acc[4][0] = vfmaq_laneq_f32(acc[4][0], b0, a1, 0), acc[4][1] = vfmaq_laneq_f32(acc[4][1], b1, a1, 0);
        acc[5][0] = vfmaq_laneq_f32(acc[5][0], b0, a1, 1), acc[5][1] = vfmaq_laneq_f32(acc[5][1], b1, a1, 1);
        acc[6][0] = vfmaq_laneq_f32(acc[6][0], b0, a1, 2), acc[6][1] = vfmaq_laneq_f32(acc[6][1], b1, a1, 2);
        acc[7][0] = vfmaq_laneq_f32(acc[7][0], b0, a1, 3), acc[7][1] = vfmaq_laneq_f32(acc[7][1], b1, a1, 3);
        Ap += MR;
        Bp += ldbp;
    }
    const float32x4_t va = vdupq_n_f32(alpha);
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)r * ldc;
        float32x4_t lo = vmulq_f32(va, acc[r][0]), hi = vmulq_f32(va, acc[r][1]);
        if (cols == NR) {
            if (beta != 0.0f) {
                lo = vfmaq_n_f32(lo, vld1q_f32(c), beta);
                hi = vfmaq_n_f32(hi, vld1q_f32(c + 4), beta);
            }
            vst1q_f32(c, lo);
            vst1q_f32(c + 4, hi);
        } else {
            float tile[NR];
            vst1q_f32(tile, lo);
            vst1q_f32(tile + 4, hi);
            for (int j = 0; j < cols; j++) c[j] = beta == 0.0f ? tile[j] : beta * c[j] + tile[j];
        }
    }
}

static void gemm_packed(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc, float *packed_a,
                        float *packed_b) {
    for (int j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? N - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            float slice_beta = k0 == 0 ? beta : 1.0f; /* later K slices accumulate */
            int full = trans_b ? 0 : nc / NR * NR;     /* columns read in place */
            if (full < nc) pack_b(trans_b, B, ldb, k0, kc, j0 + full, nc - full, packed_b);
            for (int i0 = 0; i0 < M; i0 += MC) {
                int mc = M - i0 < MC ? M - i0 : MC;
                dp_gemm_pack_a(trans_a, A, lda, i0, mc, k0, kc, MR, packed_a);
                for (int jr = 0; jr < nc; jr += NR) {
                    int cols = nc - jr < NR ? nc - jr : NR;
                    const float *bp = jr < full ? B + (size_t)k0 * ldb + j0 + jr : packed_b + (size_t)(jr - full) * kc;
                    size_t ldbp = jr < full ? (size_t)ldb : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int rows = mc - ir < MR ? mc - ir : MR;
                        kernel_8x8(kc, packed_a + (size_t)ir * kc, bp, ldbp, C + (size_t)(i0 + ir) * ldc + j0 + jr,
                                   ldc, rows, cols, alpha, slice_beta);
                    }
                }
            }
        }
    }
}

/* C (M, N) = alpha A B^T + beta C, A (M, K), B (N, K) row-major. */
static void gemm_nt_dot(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc) {
    const int K4 = K - K % 4;
    for (int i0 = 0; i0 < M; i0 += 4) {
        int mi = M - i0 < 4 ? M - i0 : 4;
        for (int j0 = 0; j0 < N; j0 += 4) {
            int nj = N - j0 < 4 ? N - j0 : 4;
            const float *a[4], *b[4];
            float32x4_t acc[4][4];
            for (int r = 0; r < 4; r++) { /* rows past the edge repeat the last; their sums are dropped */
                a[r] = A + (size_t)(i0 + (r < mi ? r : mi - 1)) * lda;
                b[r] = B + (size_t)(j0 + (r < nj ? r : nj - 1)) * ldb;
                for (int c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0.0f);
            }
            for (int k = 0; k < K4; k += 4) {
                float32x4_t va[4], vb[4];
                for (int r = 0; r < 4; r++) va[r] = vld1q_f32(a[r] + k), vb[r] = vld1q_f32(b[r] + k);
                for (int r = 0; r < 4; r++)
                    for (int c = 0; c < 4; c++) acc[r][c] = vfmaq_f32(acc[r][c], va[r], vb[c]);
            }
            for (int r = 0; r < mi; r++)
                for (int c = 0; c < nj; c++) {
                    float dot = vaddvq_f32(acc[r][c]);
                    for (int k = K4; k < K; k++) dot += a[r][k] * b[c][k];
                    float *out = C + (size_t)(i0 + r) * ldc + j0 + c;
                    *out = beta == 0.0f ? alpha * dot : beta * *out + alpha * dot;
                }
        }
    }
}

bool dp_gemm_neon(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (!trans_a && trans_b && K >= 256 && (N < NR || M < MR * 4)) {
        gemm_nt_dot(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    float *packed_a, *packed_b;
    if (N < NR / 2 || !dp_gemm_buffers(&packed_a, &packed_b)) return false;
    gemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, packed_a, packed_b);
    return true;
}
