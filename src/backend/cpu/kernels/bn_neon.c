/* bn_neon.c - batch norm's per-plane sums (ops_batch_norm.c) with NEON:
 * float partial sums in one q register per sum, a scalar tail, reduced and
 * added to the double totals once per plane (as bn_avx512.c, which explains
 * the float partials and the mean_f correction). */
#include <arm_neon.h>

#include "kernels.h"

void dp_bn_shifted_sums_neon(const float *x, size_t n, double shift, double *s1, double *s2) {
    const float k = (float)shift; /* the shift is one of the x values: exact */
    const float32x4_t vk = vdupq_n_f32(k);
    float32x4_t a1 = vdupq_n_f32(0.0f), a2 = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t d = vsubq_f32(vld1q_f32(x + i), vk);
        a1 = vaddq_f32(a1, d);
        a2 = vfmaq_f32(a2, d, d);
    }
    float t1 = vaddvq_f32(a1), t2 = vaddvq_f32(a2);
    for (; i < n; i++) {
        float d = x[i] - k;
        t1 += d;
        t2 += d * d;
    }
    *s1 += (double)t1;
    *s2 += (double)t2;
}

void dp_bn_grad_sums_neon(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx) {
    const float mean_f = (float)mean;
    const float32x4_t mv = vdupq_n_f32(mean_f);
    float32x4_t a1 = vdupq_n_f32(0.0f), a2 = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(dy + i);
        a1 = vaddq_f32(a1, g);
        a2 = vfmaq_f32(a2, g, vsubq_f32(vld1q_f32(x + i), mv));
    }
    float t1 = vaddvq_f32(a1), t2 = vaddvq_f32(a2);
    for (; i < n; i++) {
        t1 += dy[i];
        t2 += dy[i] * (x[i] - mean_f);
    }
    *s_dy += (double)t1;
    *s_dyx += (double)t2 - (mean - (double)mean_f) * (double)t1;
}
