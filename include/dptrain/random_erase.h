/* random_erase.h - random erasing: a rectangle of a training example's
 * input set to 0, torchvision's transforms.RandomErasing(p) as its
 * reference recipe uses it (`--random-erase P`: scale (0.02, 0.33), ratio
 * (0.3, 3.3), value 0, after normalisation: with --normalize the
 * rectangle holds the channels' means, without it black).
 *
 * An example is erased with probability p; then up to 10 tries draw an
 * area of 2% to 33% of the image and a log-uniform aspect ratio in
 * (0.3, 3.3), h = round(sqrt(area x ratio)), w = round(sqrt(area /
 * ratio)) (Python's round: half to even), until h < H and w < W; the
 * rectangle's corner is uniform over the places it fits; no try fitting:
 * no erasing. The draws come from (seed, step, position in the step's
 * batch) alone: the same for any number of devices and ranks, and for a
 * resumed run. dptrain's generator is not torch's: the rule is
 * torchvision's, the draws are not.
 */
#ifndef DPTRAIN_RANDOM_ERASE_H
#define DPTRAIN_RANDOM_ERASE_H

#include <stdint.h>

#include "dptrain/status.h"

/* p in [0, 1]; else one line naming `who` (e.g. "train: --random-erase"). */
dp_status_t dp_random_erase_check(float p, const char *who);

/* box = {y1, y2, x1, x2} of the example at `position` of step `step`'s
 * batch in a run with seed `seed`, for images of height x width; {0, 0,
 * 0, 0} (empty) when it is not erased. */
void dp_random_erase_box(float p, uint64_t seed, uint64_t step, int64_t position, int height, int width,
                         int32_t box[4]);

#endif
