/* bn_avx512.c - batch norm's per-plane sums (ops_batch_norm.c) with
 * AVX-512: float partial sums in one zmm per sum, the tail by a masked
 * load, reduced and added to the double totals once per plane. Compiled
 * with the AVX-512 flags; called only through the kernel table. */
#include <immintrin.h>

#include "kernels.h"

void dp_bn_shifted_sums_avx512(const float *x, size_t n, double shift, double *s1, double *s2) {
    const __m512 k = _mm512_set1_ps((float)shift); /* the shift is one of the x values: exact */
    __m512 a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), k);
        a1 = _mm512_add_ps(a1, d);
        a2 = _mm512_fmadd_ps(d, d, a2);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), k);
        a1 = _mm512_add_ps(a1, d);
        a2 = _mm512_fmadd_ps(d, d, a2);
    }
    *s1 += (double)_mm512_reduce_add_ps(a1);
    *s2 += (double)_mm512_reduce_add_ps(a2);
}

void dp_bn_grad_sums_avx512(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx) {
    const float mean_f = (float)mean;
    const __m512 mv = _mm512_set1_ps(mean_f);
    __m512 a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(dy + i);
        a1 = _mm512_add_ps(a1, g);
        a2 = _mm512_fmadd_ps(g, _mm512_sub_ps(_mm512_loadu_ps(x + i), mv), a2);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, dy + i);
        a1 = _mm512_add_ps(a1, g);
        a2 = _mm512_fmadd_ps(g, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv), a2);
    }
    double t1 = (double)_mm512_reduce_add_ps(a1);
    *s_dy += t1;
    *s_dyx += (double)_mm512_reduce_add_ps(a2) - (mean - (double)mean_f) * t1;
}
