/* bn_avx2.c - batch norm's per-plane sums (ops_batch_norm.c) with AVX2 +
 * FMA: float partial sums in one ymm per sum, the tail by a masked load,
 * reduced and added to the double totals once per plane (as bn_avx512.c,
 * which explains the float partials and the mean_f correction). */
#include <immintrin.h>

#include "kernels.h"

static inline __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void dp_bn_shifted_sums_avx2(const float *x, size_t n, double shift, double *s1, double *s2) {
    const __m256 k = _mm256_set1_ps((float)shift); /* the shift is one of the x values: exact */
    __m256 a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), k);
        a1 = _mm256_add_ps(a1, d);
        a2 = _mm256_fmadd_ps(d, d, a2);
    }
    if (i < n) {
        __m256i m = lane_mask((int)(n - i));
        /* masked-off lanes load 0; 0 - k is masked to 0 again */
        __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), k), _mm256_castsi256_ps(m));
        a1 = _mm256_add_ps(a1, d);
        a2 = _mm256_fmadd_ps(d, d, a2);
    }
    *s1 += (double)hsum(a1);
    *s2 += (double)hsum(a2);
}

void dp_bn_grad_sums_avx2(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx) {
    const float mean_f = (float)mean;
    const __m256 mv = _mm256_set1_ps(mean_f);
    __m256 a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(dy + i);
        a1 = _mm256_add_ps(a1, g);
        a2 = _mm256_fmadd_ps(g, _mm256_sub_ps(_mm256_loadu_ps(x + i), mv), a2);
    }
    if (i < n) {
        __m256i m = lane_mask((int)(n - i));
        __m256 g = _mm256_maskload_ps(dy + i, m); /* 0 in the masked-off lanes: their products vanish */
        a1 = _mm256_add_ps(a1, g);
        a2 = _mm256_fmadd_ps(g, _mm256_sub_ps(_mm256_maskload_ps(x + i, m), mv), a2);
    }
    double t1 = (double)hsum(a1);
    *s_dy += t1;
    *s_dyx += (double)hsum(a2) - (mean - (double)mean_f) * t1;
}
