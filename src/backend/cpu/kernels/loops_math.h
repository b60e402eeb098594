/* loops_math.h - branch-free float e^x, e^(-s x^2) and erfc for the
 * activation loops of loops_impl.h (silu, gelu, sigmoid): plain C without
 * libm calls, so that GCC vectorizes the loops that inline them, and
 * without reassociation or contraction (ISO C mode), so that every ISA
 * gives the same bits. Not installed; included only by loops_impl.h.
 *
 * e^x: x = n ln2 + r with n = round(x / ln2) and ln2 split in two
 * constants (the first with 9 significant bits, so n * it is exact),
 * |r| <= ln2 / 2; e^r = 1 + (r + r^2 P(r)), P of degree 4 fitted to
 * relative error 3.5e-9; then 2^n in two factors 2^(n/2) made from
 * exponent bits, so that subnormal results round once and 2^128
 * overflows as expf does. The input is clamped to [-104, 89] first
 * (e^-104 rounds to 0, e^89 is inf); a NaN fails both tests and stays NaN.
 *
 * erfc(a), a >= 0: e^(-a^2) t Q(t) with t = 1 / (1 + 0.4 a) and Q of
 * degree 9 fitted to erfc(a) e^(a^2) / t on a in [0, 10.6] (relative
 * error 9.3e-9; erfc is below the smallest float beyond). e^(-a^2) comes
 * from e^(-s x^2) with x^2 split exactly into a float and its rounding
 * error (Dekker's product without FMA), so that erfc keeps its relative
 * accuracy in the tail, where -a^2 is large. erf(x) for |x| <= 0.8:
 * x S(x^2), S of degree 5 (relative error 3.0e-9).
 *
 * The polynomials: Lawson's iteration towards the minimax polynomial
 * (weighted least squares on Chebyshev nodes, in double), coefficients
 * rounded to float. The errors of the results, rounding included:
 * ops_elementwise.c's header, tests/test_cpu_activations.c.
 */
#ifndef DPTRAIN_LOOPS_MATH_H
#define DPTRAIN_LOOPS_MATH_H

#include <stdint.h>
#include <string.h>

static inline uint32_t dp_loop_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float dp_loop_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x, within 1 ulp of the exact value (tests/test_cpu_activations.c) */
static inline float dp_loop_exp(float x) {
    x = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;
    const float round_shift = 12582912.0f; /* 1.5 * 2^23: n lands in the low mantissa bits */
    const float shifted = x * 1.44269504f + round_shift;
    const float n = shifted - round_shift; /* round(x / ln2), in [-150, 129] */
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    const float poly = 0.49999994f + r * (0.166665092f + r * (0.0416685268f + r * (0.00837013498f + r * 0.00138116605f)));
    const float exp_r = 1.0f + (r + r * r * poly);
    /* n as an integer: (shifted's bits - round_shift's bits), in two
     * halves so that each 2^half is a normal float */
    const int32_t n_int = (int32_t)(dp_loop_float_bits(shifted) - dp_loop_float_bits(round_shift));
    const int32_t half = n_int >> 1, rest = n_int - half;
    const float scale_half = dp_loop_bits_float(((uint32_t)half + 127u) << 23);
    const float scale_rest = dp_loop_bits_float(((uint32_t)rest + 127u) << 23);
    return exp_r * scale_half * scale_rest;
}

/* e^(-s x^2) for s = 1 or 0.5 (exact scalings), |x| <= 16: x^2 = sq + sq_err
 * exactly (Dekker: x split into two 12-bit halves), e^(-s sq) times
 * (1 - s sq_err) for the rest. */
static inline float dp_loop_exp_neg_square(float x, float s) {
    const float sq = x * x;
    const float split = x * 4097.0f; /* 2^12 + 1 */
    const float x_hi = split - (split - x), x_lo = x - x_hi;
    const float sq_err = ((x_hi * x_hi - sq) + 2.0f * x_hi * x_lo) + x_lo * x_lo;
    return dp_loop_exp(-s * sq) * (1.0f - s * sq_err);
}

/* erfc(a) for 0 <= a <= 10.6 given gauss = e^(-a^2) */
static inline float dp_loop_erfc(float a, float gauss) {
    const float t = 1.0f / (1.0f + 0.4f * a);
    const float q =
        0.22570309f +
        t * (0.22502698f +
             t * (0.214292094f +
                  t * (0.132622674f +
                       t * (0.263510227f +
                            t * (-0.268358469f +
                                 t * (0.528117478f + t * (-0.484280258f + t * (0.191817001f + t * -0.0284507815f))))))));
    return gauss * (t * q);
}

/* erf(x) for |x| <= 0.8: x S(x^2) */
static inline float dp_loop_erf_small(float x) {
    const float sq = x * x;
    const float s = 1.12837911f +
                    sq * (-0.376126021f + sq * (0.112831131f + sq * (-0.0268208142f + sq * (0.0050851414f + sq * -0.000653529714f))));
    return x * s;
}

#endif
