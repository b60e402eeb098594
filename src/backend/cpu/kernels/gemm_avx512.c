/* gemm_avx512.c - the AVX-512 kernels of dp_gemm (gemm.c, gemm.h).
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma; called
 * only through the kernel table (kernels/kernels.h) on CPUs that have them.
 *
 * Loop structure (BLIS): for each NC-wide block of columns and KC-deep slice
 * of K, pack B's slice into NR-wide panels; for each MC-tall block of rows,
 * pack A's block into MR-tall panels; then run the MR x NR micro-kernel over
 * every (panel of A, panel of B) pair. Packing pads with zeros, so the
 * kernel always computes a full 6 x 64 tile (24 zmm accumulators); edges are
 * stored with row counts and column masks. Transposed operands are handled
 * in packing only.
 *
 * Why our own: OpenBLAS builds are often pinned to their AVX2 (Haswell)
 * kernels, which leave half of an AVX-512 core unused; convolutions spend
 * almost all their time here.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* KC = 384: long K (the im2col rows of wide 3x3 convs, thousands) then
 * reloads the C tile 3x less often than at 128; measured 156 -> 225 GFLOP/s
 * for (512 x 4608) (4608 x 512), no change on LeNet's shapes. */
enum { MR = 6, NR = 64, KC = 384, MC = 240, NC = 2048 };
_Static_assert((size_t)MC * KC <= DP_GEMM_PACK_A && (size_t)KC * NC <= DP_GEMM_PACK_B, "packing buffers");

/* --- Packing ---------------------------------------------------------------- */

/* out[k] = (r[0][k], ..., r[15][k]): a 16 x 16 transpose in registers.
 * Pairs of rows interleave (unpack ps, then pd), which leaves, in 128-bit
 * lane l of u[4g + j], column 4l + j of rows 4g..4g+3; a 4 x 4 transpose of
 * those lanes (two rounds of shuffle_f32x4) finishes it. */
static inline void transpose_16x16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
        __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        r[0 + j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* One panel of a transposed B: dst[k * NR + c] = src[c * ldb + k] for
 * c < cols (zeros for c >= cols), k < kc. Blocks of 16 x 16 are loaded as
 * rows, transposed in registers and stored as panel rows; a last k < 16 is
 * fetched with gathers. */
static void pack_b_transposed(const float *src, int ldb,
                                                                  int kc, int cols, float *dst) {
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(ldb));
    const int k16 = kc - kc % 16;
    for (int c0 = 0; c0 < NR; c0 += 16) {
        int n = cols - c0;
        if (n <= 0) {
            for (int k = 0; k < kc; k++) _mm512_storeu_ps(dst + (size_t)k * NR + c0, _mm512_setzero_ps());
            continue;
        }
        const float *base = src + (size_t)c0 * ldb;
        for (int k0 = 0; k0 < k16; k0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < n ? _mm512_loadu_ps(base + (size_t)i * ldb + k0) : _mm512_setzero_ps();
            transpose_16x16(r);
            for (int k = 0; k < 16; k++) _mm512_storeu_ps(dst + (size_t)(k0 + k) * NR + c0, r[k]);
        }
        __mmask16 mask = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
        for (int k = k16; k < kc; k++)
            _mm512_storeu_ps(dst + (size_t)k * NR + c0,
                             _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, rows, base + k, 4));
    }
}

/* A slice of op(B): k [k0, k0+kc), columns [j0, j0+nc) into NR-column
 * panels, each panel k-major: panel[k * NR + c]. */
static void pack_b(bool trans_b, const float *B, int ldb, int k0, int kc, int j0, int nc,
                   float *packed) {
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        float *dst = packed + (size_t)p * kc;
        if (!trans_b) {
            for (int k = 0; k < kc; k++) {
                const float *src = B + (size_t)(k0 + k) * ldb + j0 + p;
                float *row = dst + (size_t)k * NR;
                /* masked vector moves, zeros past cols: memcpy / memset of
                 * a short variable length compile to rep movs / rep stos
                 * (slow to start) under the portable build's tuning */
                for (int c = 0; c < NR; c += 16) {
                    int left = cols - c;
                    __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                    _mm512_storeu_ps(row + c, _mm512_maskz_loadu_ps(m, src + c));
                }
            }
        } else { /* op(B)[k][j] = B[j][k] */
            pack_b_transposed(B + (size_t)(j0 + p) * ldb + k0, ldb, kc, cols, dst);
        }
    }
}

/* --- The AVX-512 micro-kernel ----------------------------------------------- */

/* C[0..rows, 0..cols) (ldc) = beta * C + alpha * Ap Bp, over the first NV
 * 16-column vectors of the tile (cols <= 16 * NV) and its first ROWS rows
 * (rows <= ROWS): a last, narrow panel (a conv chunk of 196 columns leaves
 * 4) costs 1/4 of a full one, not all, and the last panel of an M that is
 * no multiple of 6 (LeNet's 20 and 50 output channels leave 2) computes
 * only its rows. Each entry is the same chain of FMAs in every variant.
 * Ap: (kc, MR) packed; Bp: (kc, NR) with rows ldbp floats apart (NR when
 * packed, or B's own row stride when B is read in place). */
#define DEFINE_KERNEL(NV, ROWS)                                                                     \
    static void kernel_##ROWS##x##NV(                                                               \
        int kc, const float *Ap, const float *Bp, size_t ldbp, float *C, int ldc, int rows,         \
        int cols, float alpha, float beta) {                                                        \
        __m512 acc[ROWS][NV];                                                                       \
        _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++)                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();   \
        for (int k = 0; k < kc; k++) {                                                              \
            __m512 b[NV];                                                                           \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(Bp + 16 * v); \
            _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++) {                                \
                __m512 a = _mm512_set1_ps(Ap[r]);                                                   \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                \
                    acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);                                \
            }                                                                                       \
            Ap += MR;                                                                               \
            Bp += ldbp;                                                                             \
        }                                                                                           \
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);                               \
        _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++) {                                    \
            if (r >= rows) break;                                                                   \
            float *c = C + (size_t)r * ldc;                                                         \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                  \
                int left = cols - 16 * v;                                                           \
                if (left <= 0) break;                                                               \
                __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);    \
                __m512 result = _mm512_mul_ps(va, acc[r][v]);                                       \
                if (beta != 0.0f)                                                                   \
                    result = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, c + 16 * v), result);  \
                _mm512_mask_storeu_ps(c + 16 * v, mask, result);                                    \
            }                                                                                       \
        }                                                                                           \
    }
#define DEFINE_KERNELS(ROWS) DEFINE_KERNEL(1, ROWS) DEFINE_KERNEL(2, ROWS) DEFINE_KERNEL(3, ROWS) DEFINE_KERNEL(4, ROWS)
DEFINE_KERNELS(1)
DEFINE_KERNELS(2)
DEFINE_KERNELS(3)
DEFINE_KERNELS(4)
DEFINE_KERNELS(5)
DEFINE_KERNELS(6)

typedef void (*kernel_fn)(int, const float *, const float *, size_t, float *, int, int, int, float,
                          float);
/* kernels[rows][v]: the kernel for `rows` rows and at most 16 * v columns */
#define KERNEL_ROW(ROWS) {NULL, kernel_##ROWS##x1, kernel_##ROWS##x2, kernel_##ROWS##x3, kernel_##ROWS##x4}
static const kernel_fn kernels[MR + 1][5] = {
    {NULL, NULL, NULL, NULL, NULL}, KERNEL_ROW(1), KERNEL_ROW(2), KERNEL_ROW(3), KERNEL_ROW(4), KERNEL_ROW(5),
    KERNEL_ROW(6),
};

/* --- The A B^T kernel for long K ---------------------------------------------
 * C (M, N) = alpha A B^T + beta C with A (M, K) and B (N, K) both row-major:
 * every entry is a dot product of two contiguous rows. Weight gradients have
 * this shape (dW = dY col^T: M output channels, N kernel taps, K the
 * positions of a chunk of images), often with N far below the 64-wide tile
 * of the packed kernel. Blocks of 4 x 4 entries accumulate in 16 zmm
 * registers along K (masked loads for the tail), then reduce horizontally;
 * no packing is needed. */
static void gemm_nt_dot(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc) {
    const __mmask16 tail = (__mmask16)((1u << (K % 16)) - 1);
    const int K16 = K - K % 16;
    for (int i0 = 0; i0 < M; i0 += 4) {
        int mi = M - i0 < 4 ? M - i0 : 4;
        for (int j0 = 0; j0 < N; j0 += 4) {
            int nj = N - j0 < 4 ? N - j0 : 4;
            __m512 acc[4][4];
            const float *a[4], *b[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                /* rows past the edge repeat the last row; their sums are dropped */
                a[r] = A + (size_t)(i0 + (r < mi ? r : mi - 1)) * lda;
                b[r] = B + (size_t)(j0 + (r < nj ? r : nj - 1)) * ldb;
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
            }
            for (int k = 0; k < K16; k += 16) {
                __m512 va[4], vb[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    va[r] = _mm512_loadu_ps(a[r] + k);
                    vb[r] = _mm512_loadu_ps(b[r] + k);
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) acc[r][c] = _mm512_fmadd_ps(va[r], vb[c], acc[r][c]);
            }
            if (tail) {
                __m512 va[4], vb[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    va[r] = _mm512_maskz_loadu_ps(tail, a[r] + K16);
                    vb[r] = _mm512_maskz_loadu_ps(tail, b[r] + K16);
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) acc[r][c] = _mm512_fmadd_ps(va[r], vb[c], acc[r][c]);
            }
            for (int r = 0; r < mi; r++)
                for (int c = 0; c < nj; c++) {
                    float *out = C + (size_t)(i0 + r) * ldc + j0 + c;
                    float dot = alpha * _mm512_reduce_add_ps(acc[r][c]);
                    *out = beta == 0.0f ? dot : beta * *out + dot;
                }
        }
    }
}

/* B (not transposed) is read in place, without packing, for every full
 * 64-column panel: its rows are contiguous, and the blocks the callers pass
 * (an im2col chunk) sit in L2. Only a last, partial panel is packed. */
static void gemm_packed(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc, float *packed_a,
                        float *packed_b) {
    for (int j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? N - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            /* The first K slice applies beta; later slices accumulate. */
            float slice_beta = k0 == 0 ? beta : 1.0f;
            int in_place = !trans_b;
            int full = in_place ? nc / NR * NR : 0; /* columns read in place */
            if (full < nc) pack_b(trans_b, B, ldb, k0, kc, j0 + full, nc - full, packed_b);
            for (int i0 = 0; i0 < M; i0 += MC) {
                int mc = M - i0 < MC ? M - i0 : MC;
                dp_gemm_pack_a(trans_a, A, lda, i0, mc, k0, kc, MR, packed_a);
                for (int jr = 0; jr < nc; jr += NR) {
                    int cols = nc - jr < NR ? nc - jr : NR;
                    const float *bp;
                    size_t ldbp;
                    if (jr < full) {
                        bp = B + (size_t)k0 * ldb + j0 + jr;
                        ldbp = (size_t)ldb;
                    } else {
                        bp = packed_b + (size_t)(jr - full) * kc;
                        ldbp = NR;
                    }
                    for (int ir = 0; ir < mc; ir += MR) {
                        int rows = mc - ir < MR ? mc - ir : MR;
                        kernels[rows][(cols + 15) / 16](kc, packed_a + (size_t)ir * kc, bp, ldbp,
                                    C + (size_t)(i0 + ir) * ldc + j0 + jr, ldc, rows, cols,
                                    alpha, slice_beta);
                    }
                }
            }
        }
    }
}

bool dp_gemm_avx512(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    /* Long dot products with a narrow result: no packing, no padding. */
    if (!trans_a && trans_b && K >= 256 && (N < NR || M < MR * 4)) {
        gemm_nt_dot(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    /* A narrow C would be mostly padding in the 64-wide tile. */
    float *packed_a, *packed_b;
    if (N < NR / 2 || !dp_gemm_buffers(&packed_a, &packed_b)) return false;
    gemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, packed_a, packed_b);
    return true;
}
