/* gemm_avx2.c - the AVX2+FMA kernels of dp_gemm (gemm.c, gemm.h), for x86
 * CPUs without AVX-512 (Haswell to Alder Lake, AMD Zen 1-3). Compiled with
 * -mavx2 -mfma; called only through the kernel table (kernels/kernels.h).
 *
 * The AVX-512 file's structure with 16 ymm registers instead of 32 zmm: the
 * BLIS loops around a 6 x 16 register tile (12 ymm accumulators, 2 for a row
 * of B, 1 broadcast of A); B (not transposed) read in place for full
 * 16-column panels, packed (zero padded) otherwise; A packed into 6-row
 * panels. Edges are stored with row counts and maskstore column masks.
 * A B^T with long K and a narrow C goes to a dot-product kernel (2 x 4
 * blocks of 8-lane partial sums, masked loads for the K tail).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* MC x KC floats of A (120 KB) stay in L2 next to the C tile; KC rows of a
 * B panel (16 KB) in L1. */
enum { MR = 6, NR = 16, KC = 256, MC = 120, NC = 2048 };
_Static_assert((size_t)MC * KC <= DP_GEMM_PACK_A && (size_t)KC * NC <= DP_GEMM_PACK_B, "packing buffers");

/* Lanes [0, n) of a maskload / maskstore mask (n may be <= 0 or >= 8). */
static inline __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[k] = (r[0][k], ..., r[7][k]): an 8 x 8 transpose in registers
 * (unpack, shuffle, then swap 128-bit halves). */
static inline void transpose_8x8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* One panel of a transposed B: dst[k * NR + c] = src[c * ldb + k] for
 * c < cols (zeros for c >= cols), k < kc. Blocks of 8 x 8 are loaded as
 * rows of B, transposed in registers and stored as panel rows; the last
 * k < 8 are copied one by one. (The scalar loop this replaces cost 60% of
 * the packed product's own time on LeNet's weight gradient.) */
static void pack_b_transposed(const float *src, int ldb, int kc, int cols, float *dst) {
    const int k8 = kc - kc % 8;
    for (int c0 = 0; c0 < NR; c0 += 8) {
        const int n = cols - c0;
        if (n <= 0) {
            for (int k = 0; k < kc; k++) _mm256_storeu_ps(dst + (size_t)k * NR + c0, _mm256_setzero_ps());
            continue;
        }
        const float *base = src + (size_t)c0 * ldb;
        for (int k0 = 0; k0 < k8; k0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < n ? _mm256_loadu_ps(base + (size_t)i * ldb + k0) : _mm256_setzero_ps();
            transpose_8x8(r);
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + (size_t)(k0 + k) * NR + c0, r[k]);
        }
        for (int k = k8; k < kc; k++)
            for (int i = 0; i < 8; i++) dst[(size_t)k * NR + c0 + i] = i < n ? base[(size_t)i * ldb + k] : 0.0f;
    }
}

/* A slice of op(B): k [k0, k0+kc), columns [j0, j0+nc) into NR-column
 * panels, each panel k-major: panel[k * NR + c], columns past nc zero. */
static void pack_b(bool trans_b, const float *B, int ldb, int k0, int kc, int j0, int nc, float *packed) {
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        float *dst = packed + (size_t)p * kc;
        if (!trans_b) {
            for (int k = 0; k < kc; k++) {
                const float *src = B + (size_t)(k0 + k) * ldb + j0 + p;
                float *row = dst + (size_t)k * NR;
                /* masked loads, zeros past cols (a short memcpy / memset
                 * compiles to slow-starting rep movs / rep stos) */
                _mm256_storeu_ps(row, _mm256_maskload_ps(src, lane_mask(cols)));
                _mm256_storeu_ps(row + 8, _mm256_maskload_ps(src + 8, lane_mask(cols - 8)));
            }
        } else { /* op(B)[k][j] = B[j][k]: column c of the panel is a row of B */
            pack_b_transposed(B + (size_t)(j0 + p) * ldb + k0, ldb, kc, cols, dst);
        }
    }
}

/* C[0..rows, 0..cols) (ldc) = beta * C + alpha * Ap Bp over the first NV
 * 8-column vectors of the tile (cols <= 8 * NV) and its first ROWS rows
 * (rows <= ROWS): the last panel of an M that is no multiple of 6 (LeNet's
 * 20 and 50 output channels leave 2) computes only its rows, not 6. Each
 * entry is the same chain of FMAs in every variant. Ap: (kc, MR) packed;
 * Bp: (kc, NR) with rows ldbp floats apart. */
#define DEFINE_KERNEL(NV, ROWS)                                                                            \
    static void kernel_##ROWS##x##NV(int kc, const float *Ap, const float *Bp, size_t ldbp, float *C,      \
                                     int ldc, int rows, int cols, float alpha, float beta) {               \
        __m256 acc[ROWS][NV];                                                                              \
        _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++)                                             \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();          \
        for (int k = 0; k < kc; k++) {                                                                     \
            __m256 b[NV];                                                                                  \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) b[v] = _mm256_loadu_ps(Bp + 8 * v);       \
            _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++) {                                       \
                __m256 a = _mm256_broadcast_ss(Ap + r);                                                    \
                _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++)                                       \
                    acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);                                       \
            }                                                                                              \
            Ap += MR;                                                                                      \
            Bp += ldbp;                                                                                    \
        }                                                                                                  \
        const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);                                \
        _Pragma("GCC unroll 6") for (int r = 0; r < ROWS; r++) {                                           \
            if (r >= rows) break;                                                                          \
            float *c = C + (size_t)r * ldc;                                                                \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) {                                         \
                int left = cols - 8 * v;                                                                   \
                if (left <= 0) break;                                                                      \
                __m256 result = _mm256_mul_ps(va, acc[r][v]);                                              \
                if (left >= 8) {                                                                           \
                    if (beta != 0.0f) result = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8 * v), result);     \
                    _mm256_storeu_ps(c + 8 * v, result);                                                   \
                } else {                                                                                   \
                    __m256i mask = lane_mask(left);                                                        \
                    if (beta != 0.0f)                                                                      \
                        result = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + 8 * v, mask), result);         \
                    _mm256_maskstore_ps(c + 8 * v, mask, result);                                          \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }
#define DEFINE_KERNELS(ROWS) DEFINE_KERNEL(1, ROWS) DEFINE_KERNEL(2, ROWS)
DEFINE_KERNELS(1)
DEFINE_KERNELS(2)
DEFINE_KERNELS(3)
DEFINE_KERNELS(4)
DEFINE_KERNELS(5)
DEFINE_KERNELS(6)

typedef void (*kernel_fn)(int, const float *, const float *, size_t, float *, int, int, int, float, float);
/* kernels[rows][v]: the kernel for `rows` rows and at most 8 * v columns */
static const kernel_fn kernels[MR + 1][3] = {
    {NULL, NULL, NULL},          {NULL, kernel_1x1, kernel_1x2}, {NULL, kernel_2x1, kernel_2x2},
    {NULL, kernel_3x1, kernel_3x2}, {NULL, kernel_4x1, kernel_4x2}, {NULL, kernel_5x1, kernel_5x2},
    {NULL, kernel_6x1, kernel_6x2},
};

static void gemm_packed(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc, float *packed_a,
                        float *packed_b) {
    for (int j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? N - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            /* The first K slice applies beta; later slices accumulate. */
            float slice_beta = k0 == 0 ? beta : 1.0f;
            int full = trans_b ? 0 : nc / NR * NR; /* columns read in place */
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
                        float *c = C + (size_t)(i0 + ir) * ldc + j0 + jr;
                        kernels[rows][cols > 8 ? 2 : 1](kc, packed_a + (size_t)ir * kc, bp, ldbp, c, ldc, rows, cols,
                                                        alpha, slice_beta);
                    }
                }
            }
        }
    }
}

/* C (M, N) = alpha A B^T + beta C, A (M, K) and B (N, K) row-major: every
 * entry a dot product of two contiguous rows (weight gradients). Blocks of
 * 2 x 4 entries accumulate in 8 ymm registers along K, then reduce. */
static void gemm_nt_dot(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc) {
    const int K8 = K - K % 8;
    const __m256i tail = lane_mask(K % 8);
    for (int i0 = 0; i0 < M; i0 += 2) {
        int mi = M - i0 < 2 ? M - i0 : 2;
        for (int j0 = 0; j0 < N; j0 += 4) {
            int nj = N - j0 < 4 ? N - j0 : 4;
            __m256 acc[2][4];
            const float *a[2], *b[4];
            for (int r = 0; r < 2; r++) /* rows past the edge repeat the last; their sums are dropped */
                a[r] = A + (size_t)(i0 + (r < mi ? r : mi - 1)) * lda;
            for (int c = 0; c < 4; c++) b[c] = B + (size_t)(j0 + (c < nj ? c : nj - 1)) * ldb;
#pragma GCC unroll 2
            for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) acc[r][c] = _mm256_setzero_ps();
            for (int k = 0; k < K8; k += 8) {
                __m256 vb[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) vb[c] = _mm256_loadu_ps(b[c] + k);
#pragma GCC unroll 2
                for (int r = 0; r < 2; r++) {
                    __m256 va = _mm256_loadu_ps(a[r] + k);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) acc[r][c] = _mm256_fmadd_ps(va, vb[c], acc[r][c]);
                }
            }
            if (K8 < K) {
                __m256 vb[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) vb[c] = _mm256_maskload_ps(b[c] + K8, tail);
#pragma GCC unroll 2
                for (int r = 0; r < 2; r++) {
                    __m256 va = _mm256_maskload_ps(a[r] + K8, tail);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) acc[r][c] = _mm256_fmadd_ps(va, vb[c], acc[r][c]);
                }
            }
            for (int r = 0; r < mi; r++)
                for (int c = 0; c < nj; c++) {
                    float *out = C + (size_t)(i0 + r) * ldc + j0 + c;
                    float dot = alpha * hsum(acc[r][c]);
                    *out = beta == 0.0f ? dot : beta * *out + dot;
                }
        }
    }
}

bool dp_gemm_avx2(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    /* Long dot products with a narrow result: no packing, no padding. */
    if (!trans_a && trans_b && K >= 256 && (N < NR || M < MR * 4)) {
        gemm_nt_dot(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    /* A C narrower than one 8-lane vector is mostly padding: BLAS. */
    float *packed_a, *packed_b;
    if (N < NR / 2 || !dp_gemm_buffers(&packed_a, &packed_b)) return false;
    gemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, packed_a, packed_b);
    return true;
}
