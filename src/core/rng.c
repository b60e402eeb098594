/* rng.c - xoshiro256** seeded by splitmix64; Box-Muller normals; Beta
 * draws; seed mixing. */
#include "dptrain/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void dp_rng_seed(dp_rng_t *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dp_rng_next(dp_rng_t *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t dp_rng_below(dp_rng_t *rng, uint64_t bound) {
    /* Rejection sampling: draw until the value falls in a whole number of
     * copies of [0, bound). */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
        r = dp_rng_next(rng);
    } while (r >= limit);
    return r % bound;
}

double dp_rng_uniform(dp_rng_t *rng) {
    return (double)(dp_rng_next(rng) >> 11) * 0x1.0p-53;
}

double dp_rng_normal(dp_rng_t *rng) {
    double u1 = dp_rng_uniform(rng);
    double u2 = dp_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* log of a Gamma(a) draw, a >= 1 (Marsaglia and Tsang, 2000). */
static double log_gamma_draw_large(dp_rng_t *rng, double a) {
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = dp_rng_normal(rng), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = 1.0 - dp_rng_uniform(rng); /* (0, 1]: its log is finite */
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return log(d) + log(v);
    }
}

/* log of a Gamma(a) draw, a > 0: for a < 1, Gamma(a + 1) U^(1/a). */
static double log_gamma_draw(dp_rng_t *rng, double a) {
    if (a >= 1.0) return log_gamma_draw_large(rng, a);
    double g = log_gamma_draw_large(rng, a + 1.0);
    double u = 1.0 - dp_rng_uniform(rng);
    return g + log(u) / a;
}

double dp_rng_beta_symmetric(dp_rng_t *rng, double a) {
    double g1 = log_gamma_draw(rng, a), g2 = log_gamma_draw(rng, a);
    return 1.0 / (1.0 + exp(g2 - g1)); /* G1 / (G1 + G2); exp's overflow gives 0, its underflow 1 */
}

uint64_t dp_seed_mix(uint64_t a, uint64_t b) {
    dp_rng_t rng;
    dp_rng_seed(&rng, a);
    dp_rng_seed(&rng, dp_rng_next(&rng) ^ b);
    return dp_rng_next(&rng);
}
