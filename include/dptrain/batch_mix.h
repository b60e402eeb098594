/* batch_mix.h - Mixup and CutMix: a training step's examples blended with
 * their neighbours in the batch, and their labels with them.
 *
 * torchvision's reference recipe (references/classification: RandomMixup
 * and RandomCutmix, one of the two chosen at random for every batch when
 * both are on; `--mixup-alpha`, `--cutmix-alpha`), over the step's whole
 * batch (every device and rank, so the same for any number of them):
 *   partner: example i's is example i - 1 of the batch, the first's the
 *            last (torch's batch.roll(1, 0));
 *   weight:  lam ~ Beta(alpha, alpha), one draw a step;
 *   Mixup:   x_i = lam x_i + (1 - lam) x_partner (each product rounded,
 *            then the sum: torch's mul_ and add_), on the model's input
 *            (after normalisation, as torchvision's);
 *   CutMix:  a box of x_i is replaced by the partner's same box (a centre
 *            drawn uniformly, sides sqrt(1 - lam) of the image's, clipped
 *            by the border), and lam becomes the share of x_i left;
 *   loss:    the cross-entropy against lam onehot(y_i) + (1 - lam)
 *            onehot(y_partner) (with label smoothing: of that target, as
 *            torch's), i.e. lam CE(y_i) + (1 - lam) CE(y_partner); the
 *            training accuracy counts the heavier label (lam >= 0.5: y_i).
 * The step's draws come from (seed, step) alone: a resumed run draws what
 * the uninterrupted one would. dptrain's generator is not torch's, so the
 * draws are not torchvision's; given the same lam and box, the arithmetic
 * is.
 */
#ifndef DPTRAIN_BATCH_MIX_H
#define DPTRAIN_BATCH_MIX_H

#include <stdint.h>

#include "dptrain/status.h"

/* The largest alpha taken (torchvision's recipes use 0.2 to 1). */
#define DP_MIX_ALPHA_LIMIT 1000.0f

typedef enum { DP_MIX_NONE = 0, DP_MIX_MIXUP, DP_MIX_CUTMIX } dp_mix_kind_t;

typedef struct {
    float mixup_alpha;  /* > 0: Mixup, lam ~ Beta(mixup_alpha, mixup_alpha); 0: off */
    float cutmix_alpha; /* > 0: CutMix likewise; both on: one of them per step, each with probability 1/2 */
} dp_mix_config_t;

/* One step's mixing. */
typedef struct {
    dp_mix_kind_t kind; /* DP_MIX_NONE: the batch as it is */
    double lam;         /* the weight of each example's own label (Mixup: of its pixels too), in [0, 1] */
    int x1, y1, x2, y2; /* CutMix: the columns [x1, x2) and rows [y1, y2) taken from the partner */
} dp_mix_t;

/* 1 when config mixes at all. */
static inline int dp_mix_on(const dp_mix_config_t *config) {
    return config->mixup_alpha > 0.0f || config->cutmix_alpha > 0.0f;
}

/* Each alpha 0 or in (0, DP_MIX_ALPHA_LIMIT]; else one line naming it
 * (`who`: the option's prefix, e.g. "train: --"). */
dp_status_t dp_mix_check(const dp_mix_config_t *config, const char *who);

/* The mixing of step `step` (0-based, counted over the run) of a run with
 * seed `seed`, for images of height x width. */
dp_mix_t dp_mix_draw(const dp_mix_config_t *config, uint64_t seed, uint64_t step, int height, int width);

/* Example i's partner in a batch of n (torch's roll(1, 0)). */
static inline int dp_mix_partner(int i, int n) { return i == 0 ? n - 1 : i - 1; }

#endif
