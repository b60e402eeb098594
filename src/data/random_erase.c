/* random_erase.c - random erasing's rectangles (random_erase.h); the
 * trainer's step_input.c erases them on the devices (backend.h
 * paste_boxes). */
#include "dptrain/random_erase.h"

#include <math.h>

#include "dptrain/rng.h"

/* What keys random erasing's stream, apart from the run's other draws. */
#define ERASE_STREAM 0x6572617365626f78ULL

dp_status_t dp_random_erase_check(float p, const char *who) {
    if (p >= 0.0f && p <= 1.0f) return DP_OK;
    return dp_fail(DP_ERR_ARG, "%s: expected a probability in [0, 1] (torchvision's recipes: 0.1 or 0.25), found %g",
                   who, (double)p);
}

void dp_random_erase_box(float p, uint64_t seed, uint64_t step, int64_t position, int height, int width,
                         int32_t box[4]) {
    box[0] = box[1] = box[2] = box[3] = 0;
    if (!(p > 0.0f)) return;
    dp_rng_t rng;
    dp_rng_seed(&rng, dp_seed_mix(dp_seed_mix(dp_seed_mix(seed, ERASE_STREAM), step), (uint64_t)position));
    if (!(dp_rng_uniform(&rng) < (double)p)) return;
    const double area = (double)height * width, log_low = log(0.3), log_high = log(3.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double erase_area = area * (0.02 + (0.33 - 0.02) * dp_rng_uniform(&rng));
        const double ratio = exp(log_low + (log_high - log_low) * dp_rng_uniform(&rng));
        const int h = (int)nearbyint(sqrt(erase_area * ratio)), w = (int)nearbyint(sqrt(erase_area / ratio));
        if (!(h < height && w < width)) continue;
        const int y = (int)dp_rng_below(&rng, (uint64_t)(height - h + 1));
        const int x = (int)dp_rng_below(&rng, (uint64_t)(width - w + 1));
        box[0] = y;
        box[1] = y + h;
        box[2] = x;
        box[3] = x + w;
        return;
    }
}
