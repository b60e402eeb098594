/* augment.c - data augmentation while a batch is filled: torchvision's
 * RandomCrop(padding=P) (zero fill) and RandomHorizontalFlip(0.5), on the
 * byte image, before the conversion to float and the normalisation (as
 * torchvision applies them to the PIL image before ToTensor and Normalize;
 * the padding is byte 0, which the conversion makes 0, or (0 - mean) / std).
 *
 * The draws are counter-based, like dropout's masks (ops_dropout.c): the
 * example at position q of epoch e's order (q = step * B + its index in the
 * global batch) has the key
 *     key = mix(mix(mix(seed) + (e + 1) * GOLDEN) + q * GOLDEN)
 * and draws dy = bounded(mix(key + 1 * GOLDEN), 2P + 1), dx from key +
 * 2 * GOLDEN, flip = the top bit of mix(key + 3 * GOLDEN); mix is
 * splitmix64's output function and bounded(r, n) = ((r >> 32) * n) >> 32.
 * Nothing depends on which device or rank fills the example, on the batch
 * split, or on what was filled before: an epoch can be resumed at any step.
 */
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
#define MAX_CROP_PADDING 64

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline int bounded(uint64_t r, int n) { return (int)(((r >> 32) * (uint64_t)n) >> 32); }

dp_status_t dp_augment_parse(const char *text, dp_augment_t *out) {
    memset(out, 0, sizeof *out);
    if (strcmp(text, "none") == 0) return DP_OK;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 4 && strncmp(p, "flip", 4) == 0) {
            if (out->flip) return dp_fail(DP_ERR_ARG, "augment: '%s': flip given twice", text);
            out->flip = 1;
        } else if (len > 5 && strncmp(p, "crop:", 5) == 0) {
            if (out->crop_padding) return dp_fail(DP_ERR_ARG, "augment: '%s': crop given twice", text);
            char *stop;
            long v = strtol(p + 5, &stop, 10);
            if (stop != p + len || p[5] == '-' || p[5] == '+' || v < 1 || v > MAX_CROP_PADDING)
                return dp_fail(DP_ERR_ARG, "augment: '%.*s': the crop padding must be an integer in 1..%d",
                               (int)len, p, MAX_CROP_PADDING);
            out->crop_padding = (int)v;
        } else {
            return dp_fail(DP_ERR_ARG, "augment: '%s': unknown item '%.*s' (expected crop:P, flip or none)", text,
                           (int)len, p);
        }
        if (!end) break;
        p = end + 1;
        if (!*p) return dp_fail(DP_ERR_ARG, "augment: '%s' ends with a comma", text);
    }
    if (!out->flip && !out->crop_padding) return dp_fail(DP_ERR_ARG, "augment: '%s' is empty", text);
    return DP_OK;
}

void dp_augment_draw(const dp_augment_t *aug, uint64_t seed, int epoch, int64_t position, int *dy, int *dx,
                     int *flip) {
    uint64_t key = mix64(mix64(mix64(seed) + ((uint64_t)(uint32_t)epoch + 1) * GOLDEN) + (uint64_t)position * GOLDEN);
    int range = 2 * aug->crop_padding + 1;
    *dy = aug->crop_padding ? bounded(mix64(key + 1 * GOLDEN), range) : 0;
    *dx = aug->crop_padding ? bounded(mix64(key + 2 * GOLDEN), range) : 0;
    *flip = aug->flip ? (int)(mix64(key + 3 * GOLDEN) >> 63) : 0;
}

void dp_augment_pixels(const dp_augment_t *aug, uint64_t seed, int epoch, int64_t position, const uint8_t *src,
                       int channels, int height, int width, uint8_t *dst) {
    const int C = channels, H = height, W = width;
    const size_t plane = (size_t)H * (size_t)W;
    if (!aug || (!aug->crop_padding && !aug->flip)) {
        memcpy(dst, src, (size_t)C * plane);
        return;
    }
    const int P = aug->crop_padding;
    int dy, dx, flip;
    dp_augment_draw(aug, seed, epoch, position, &dy, &dx, &flip);
    for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++) {
            /* output (h, w) = padded(h + dy, w' + dx), w' = flip ? W-1-w : w;
             * padded(r, s) = src(r - P, s - P), byte 0 outside */
            uint8_t *row = dst + (size_t)c * plane + (size_t)h * W;
            int sr = h + dy - P;
            if (sr < 0 || sr >= H) {
                memset(row, 0, (size_t)W);
                continue;
            }
            const uint8_t *in = src + (size_t)c * plane + (size_t)sr * W;
            /* source column of output w: sc = w + s0 (no flip) or s0 - w (flip);
             * [w_lo, w_hi) is where it falls inside the image */
            int s0 = flip ? W - 1 + dx - P : dx - P;
            int w_lo = flip ? s0 - (W - 1) : -s0, w_hi = flip ? s0 + 1 : W - s0;
            w_lo = w_lo < 0 ? 0 : w_lo > W ? W : w_lo;
            w_hi = w_hi < w_lo ? w_lo : w_hi > W ? W : w_hi;
            memset(row, 0, (size_t)w_lo);
            if (flip)
                for (int w = w_lo; w < w_hi; w++) row[w] = in[s0 - w];
            else
                memcpy(row + w_lo, in + w_lo + s0, (size_t)(w_hi - w_lo));
            memset(row + w_hi, 0, (size_t)(W - w_hi));
        }
}
