/* rng.h - a small seeded random number generator (xoshiro256**).
 *
 * Every random choice in dptrain (weight initialisation, the per-epoch
 * shuffle, dropout) draws from one of these, so a seed fixes a run. The
 * state is a plain struct: it can be copied, saved in a checkpoint and
 * restored.
 */
#ifndef DPTRAIN_RNG_H
#define DPTRAIN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} dp_rng_t;

/* Seeds the generator from one 64-bit value (splitmix64 expansion). */
void dp_rng_seed(dp_rng_t *rng, uint64_t seed);

/* Uniform 64-bit value. */
uint64_t dp_rng_next(dp_rng_t *rng);

/* Uniform integer in [0, bound), bound > 0, without modulo bias. */
uint64_t dp_rng_below(dp_rng_t *rng, uint64_t bound);

/* Uniform double in [0, 1). */
double dp_rng_uniform(dp_rng_t *rng);

/* Standard normal N(0, 1) (Box-Muller, no cached second value, so the
 * stream position depends only on the number of calls). */
double dp_rng_normal(dp_rng_t *rng);

/* Beta(a, a), a > 0 (torch._sample_dirichlet([a, a])[0], torchvision's
 * Mixup and CutMix weight): G1 / (G1 + G2) of two Gamma(a) draws
 * (Marsaglia and Tsang's method; for a < 1, Gamma(a + 1) U^(1/a), taken in
 * logarithms, so that a small a gives 0 or 1, never NaN). A value in
 * [0, 1]. */
double dp_rng_beta_symmetric(dp_rng_t *rng, double a);

/* A seed mixed from two values, well spread even when they differ in one
 * bit (dropout: the trainer's seed and step count, then that and the
 * layer's index). */
uint64_t dp_seed_mix(uint64_t a, uint64_t b);

#endif
