/* batch_mix.c - Mixup and CutMix (batch_mix.h): the step's draw. The
 * blend and the box run on the devices (the backend's ema_update, which
 * rounds as torch's mul_ and add_, and paste_boxes): the trainer's
 * step_input.c. */
#include "dptrain/batch_mix.h"

#include <math.h>

#include "dptrain/rng.h"

/* What keys the mixing's stream, apart from the run's other draws. */
#define MIX_STREAM 0x6d69787570637574ULL

static dp_status_t check_alpha(float alpha, const char *who, const char *name) {
    if (alpha == 0.0f || (alpha > 0.0f && alpha <= DP_MIX_ALPHA_LIMIT)) return DP_OK;
    return dp_fail(DP_ERR_ARG, "%s%s: expected 0 (off) or a number in (0, %g] (torchvision's recipes: 0.2 to 1), "
                   "found %g", who, name, (double)DP_MIX_ALPHA_LIMIT, (double)alpha);
}

dp_status_t dp_mix_check(const dp_mix_config_t *config, const char *who) {
    DP_TRY(check_alpha(config->mixup_alpha, who, "mixup-alpha"));
    return check_alpha(config->cutmix_alpha, who, "cutmix-alpha");
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

dp_mix_t dp_mix_draw(const dp_mix_config_t *config, uint64_t seed, uint64_t step, int height, int width) {
    dp_mix_t mix = {.kind = DP_MIX_NONE, .lam = 1.0};
    if (!dp_mix_on(config)) return mix;
    dp_rng_t rng;
    dp_rng_seed(&rng, dp_seed_mix(dp_seed_mix(seed, MIX_STREAM), step));
    int cutmix = config->cutmix_alpha > 0.0f;
    if (cutmix && config->mixup_alpha > 0.0f) cutmix = dp_rng_uniform(&rng) >= 0.5; /* RandomChoice */
    mix.kind = cutmix ? DP_MIX_CUTMIX : DP_MIX_MIXUP;
    mix.lam = dp_rng_beta_symmetric(&rng, cutmix ? config->cutmix_alpha : config->mixup_alpha);
    if (!cutmix) return mix;
    /* torchvision's RandomCutmix: a centre, half-sides int(r W) and int(r H), r = sqrt(1 - lam) / 2 */
    int cx = (int)dp_rng_below(&rng, (uint64_t)width), cy = (int)dp_rng_below(&rng, (uint64_t)height);
    double r = 0.5 * sqrt(1.0 - mix.lam);
    int half_w = (int)(r * width), half_h = (int)(r * height);
    mix.x1 = clamp_int(cx - half_w, 0, width);
    mix.y1 = clamp_int(cy - half_h, 0, height);
    mix.x2 = clamp_int(cx + half_w, 0, width);
    mix.y2 = clamp_int(cy + half_h, 0, height);
    mix.lam = 1.0 - (double)((mix.x2 - mix.x1) * (mix.y2 - mix.y1)) / ((double)width * height);
    return mix;
}
