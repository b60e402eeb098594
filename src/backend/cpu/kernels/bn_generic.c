/* bn_generic.c - batch norm's per-plane sums (ops_batch_norm.c) in
 * portable C: double sums in 4 lanes (so that they vectorize on any ISA),
 * the reference the SIMD versions approximate within float rounding. */
#include "kernels.h"

void dp_bn_shifted_sums_generic(const float *x, size_t n, double shift, double *s1, double *s2) {
    double l1[4] = {0}, l2[4] = {0};
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - shift;
        l1[i % 4] += d;
        l2[i % 4] += d * d;
    }
    *s1 += (l1[0] + l1[1]) + (l1[2] + l1[3]);
    *s2 += (l2[0] + l2[1]) + (l2[2] + l2[3]);
}

void dp_bn_grad_sums_generic(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx) {
    double l1[4] = {0}, l2[4] = {0};
    for (size_t i = 0; i < n; i++) {
        l1[i % 4] += (double)dy[i];
        l2[i % 4] += (double)dy[i] * ((double)x[i] - mean);
    }
    *s_dy += (l1[0] + l1[1]) + (l1[2] + l1[3]);
    *s_dyx += (l2[0] + l2[1]) + (l2[2] + l2[3]);
}
