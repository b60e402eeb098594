/* clip.c - the arithmetic of gradient clipping by the total norm (optim.h:
 * torch.nn.utils.clip_grad_norm_): the norm from a sum of squares, the
 * coefficient, and the CPU's sum of squares. Where the gradients are summed
 * and scaled is the trainer's (src/trainer/clip_grad.c).
 *
 * The sum of squares runs in double over eight running sums (element i
 * goes to sum i mod 8), added pairwise at the end: one order on every
 * machine. A float's square is exact in double (24 + 24 bits < 53), so a
 * compiler fusing the multiply into the add changes nothing.
 */
#include <math.h>

#include "dptrain/optim.h"

float dp_clip_total_norm(double sum_squares) { return (float)sqrt(sum_squares); }

float dp_clip_coefficient(float total_norm, float max_norm) {
    /* torch: max_norm / (total_norm + 1e-6) on a float32 tensor, which is
     * Tensor.__rtruediv__: the reciprocal times max_norm (a division
     * differs in the last bit for about a quarter of norms: 3,097 of
     * 12,000 measured against torch 1.13); then torch.clamp(max=1.0),
     * which keeps a NaN */
    float reciprocal = 1.0f / (total_norm + 1e-6f);
    float coef = reciprocal * max_norm;
    return coef > 1.0f ? 1.0f : coef;
}

double dp_sum_squares(const float *x, size_t n) {
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i < n; i++, l++) s[l] += (double)x[i] * (double)x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
