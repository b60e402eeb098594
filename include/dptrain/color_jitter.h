/* color_jitter.h - torchvision 0.14's ColorJitter(brightness, contrast,
 * saturation, hue) (transforms.py; timm's --color-jitter) on a planar
 * (C, H, W) uint8 image of 1 or 3 channels, with the pixels PIL 9 gives
 * (the path of a training recipe: ColorJitter on the PIL image after
 * RandomResizedCrop and the flip):
 * - the draw (ColorJitter.get_params): torch.randperm(4)'s order of the
 *   four adjustments (Fisher-Yates, word % (4 - i) for i = 0, 1, 2), then
 *   one factor per adjustment that is on, in the order brightness,
 *   contrast, saturation, hue: uniform in [max(0, 1 - v), 1 + v) (hue in
 *   [-h, h)) as torch.empty(1).uniform_ makes it in float32 (its portable
 *   kernel: two roundings, no fused multiply-add); an
 *   adjustment whose value is 0 draws nothing and is skipped;
 * - the adjustments, in the drawn order: F.adjust_brightness, _contrast,
 *   _saturation (ImageEnhance Brightness, Contrast, Color: auto_augment.h's
 *   DP_AA_BRIGHTNESS, DP_AA_CONTRAST, DP_AA_COLOR at factor - 1) and
 *   F.adjust_hue (PIL: convert("HSV") with Convert.c's float arithmetic,
 *   H + uint8(hue x 255) with numpy's wraparound, back to RGB). On a
 *   1-channel (L) image saturation and hue change nothing (torchvision
 *   returns an L image as it is; Color of L is the image itself); their
 *   factors are drawn all the same.
 * The draws come from the caller's words (image_transform.h dp_draw_fn).
 * dptrain's generator is not torch's: the draws are distributed as
 * torchvision's, not the same numbers.
 * Thread-safe: no global state, scratch allocated per call.
 */
#ifndef DPTRAIN_COLOR_JITTER_H
#define DPTRAIN_COLOR_JITTER_H

#include <stddef.h>

#include "dptrain/image_transform.h"
#include "dptrain/status.h"

/* The adjustments, in torchvision's numbering (fn_id). */
typedef enum { DP_CJ_BRIGHTNESS, DP_CJ_CONTRAST, DP_CJ_SATURATION, DP_CJ_HUE, DP_CJ_OPS } dp_cj_op_t;

#define DP_CJ_MAX_FACTOR 100.0 /* the largest brightness, contrast or saturation value taken */
#define DP_CJ_MAX_HUE 0.5      /* adjust_hue's bound */

/* The jitter's values (0 turns one off; all 0: no jitter). */
typedef struct {
    double value[DP_CJ_OPS]; /* brightness, contrast, saturation, hue */
} dp_color_jitter_t;

/* One draw: the order of the adjustments and their factors. */
typedef struct {
    int order[DP_CJ_OPS];       /* torch.randperm(4) */
    int on[DP_CJ_OPS];          /* 1 where a factor was drawn */
    double factor[DP_CJ_OPS];   /* the float32 factors (hue: the shift, -0.5..0.5) */
} dp_cj_draw_t;

/* torchvision's name of an adjustment ("brightness"). */
const char *dp_cj_op_name(dp_cj_op_t op);

/* Whether any value is above 0. */
int dp_color_jitter_on(const dp_color_jitter_t *jitter);

/* `text` as B (B = C = S, hue 0: timm's rule), B,C,S (hue 0) or B,C,S,H:
 * each a number >= 0, brightness, contrast and saturation at most
 * DP_CJ_MAX_FACTOR, hue at most 0.5; DP_OK, or one line naming `who`. */
dp_status_t dp_color_jitter_parse(const char *text, const char *who, dp_color_jitter_t *jitter);

/* "B,C,S,H", each the shortest decimal that reads back as the same
 * double (0.4,0.4,0.4,0); the length it needs (as snprintf). */
int dp_color_jitter_text(const dp_color_jitter_t *jitter, char *text, size_t size);

/* ColorJitter.get_params from `draw`: 3 words for the order, then one per
 * value above 0. */
void dp_color_jitter_draw(const dp_color_jitter_t *jitter, dp_draw_fn draw, void *state, dp_cj_draw_t *out);

/* One adjustment at `factor` (brightness, contrast, saturation: 0 and
 * above; hue: -0.5 to 0.5) of `pixels` (channels x height x width,
 * planar, channels 1 or 3), in place. */
dp_status_t dp_cj_adjust(dp_cj_op_t op, double factor, unsigned char *pixels, int channels, int height, int width);

/* A draw's adjustments in its order, in place. */
dp_status_t dp_cj_apply_draw(const dp_cj_draw_t *draw, unsigned char *pixels, int channels, int height, int width);

/* The draw, then its adjustments, in place. */
dp_status_t dp_color_jitter_apply(const dp_color_jitter_t *jitter, dp_draw_fn draw, void *state,
                                  unsigned char *pixels, int channels, int height, int width);

/* PIL's convert("HSV") of planar RGB `in` (3 planes of n pixels) into
 * planar H, S, V `out`, and convert("RGB") of HSV back (in and out may be
 * the same). */
void dp_rgb_to_hsv(const unsigned char *in, unsigned char *out, size_t n);
void dp_hsv_to_rgb(const unsigned char *in, unsigned char *out, size_t n);

#endif
