/* image_transform.h - torchvision 0.14's image transforms on 8-bit images,
 * with their exact semantics on PIL images:
 * - RandomResizedCrop's crop box (RandomResizedCrop.get_params) from a
 *   source of 32-bit random words, drawn and turned into numbers as
 *   torch's CPU generator does: a uniform float in [a, b) is
 *   (word & (2^24 - 1)) * 2^-24 * (b - a) + a in float32 (no fused
 *   multiply-add), torch.randint(0, n) is word % n, the log and exp of the
 *   aspect ratio are float32 (logf, expf), round() is Python's (halves to
 *   even); 10 attempts, then the central fallback;
 * - resizing: Pillow 9's Image.resize(size, BILINEAR or BICUBIC) (what
 *   torchvision's F.resize does to a PIL image with its `interpolation`):
 *   a triangle (bilinear) or Keys cubic with a = -0.5 (bicubic) filter
 *   whose support widens by the shrink factor (antialiased), weights in
 *   22-bit fixed point (the cubic's negative ones rounded away from 0),
 *   the horizontal pass first, each pass rounded to 8 bits. Crop and resize
 *   are one pass (F.resized_crop: crop, then resize, so the filter never
 *   reads outside the crop);
 * - Resize(S) (shorter side to S, the longer int(S * long / short)), then
 *   CenterCrop(H, W) with its offsets int(round((size - crop) / 2.0)) and
 *   its zero padding where the crop is larger than the image;
 * - RandomHorizontalFlip(p): flipped when torch.rand(1) < p.
 * Outputs are planar (C, H, W) uint8, the layout of a batch.
 * Everything is thread-safe: no global state, scratch allocated per call.
 */
#ifndef DPTRAIN_IMAGE_TRANSFORM_H
#define DPTRAIN_IMAGE_TRANSFORM_H

#include <stdint.h>

#include "dptrain/image.h"
#include "dptrain/rng.h"

/* A rectangle of an image: rows [top, top + height), columns [left, left + width). */
typedef struct {
    int top, left, height, width;
} dp_crop_box_t;

/* A source of uniform 32-bit words (torch's generator->random()). */
typedef uint32_t (*dp_draw_fn)(void *state);

/* dp_draw_fn over a dp_rng_t: the upper 32 bits of dp_rng_next. */
uint32_t dp_rng_draw32(void *rng);

/* torchvision's InterpolationMode for the resizes: Pillow's filter. */
typedef enum {
    DP_INTERP_BILINEAR, /* torchvision's default: the triangle, support 1 */
    DP_INTERP_BICUBIC,  /* the cubic convolution with a = -0.5, support 2 (timm's evaluation) */
} dp_interpolation_t;

/* "bilinear" or "bicubic". */
const char *dp_interpolation_name(dp_interpolation_t interpolation);

/* RandomResizedCrop's ranges: scale of the area, aspect ratio w / h. */
typedef struct {
    double scale_min, scale_max; /* torchvision: 0.08, 1 */
    double ratio_min, ratio_max; /* torchvision: 3/4, 4/3 */
} dp_rrc_range_t;

/* torchvision's defaults (0.08, 1) and (3/4, 4/3). */
dp_rrc_range_t dp_rrc_default_range(void);

/* RandomResizedCrop.get_params(img of height x width, scale, ratio) with
 * its draws taken from `draw`: per attempt one word for the area, one for
 * the ratio, and when the box fits one for the top, one for the left. */
dp_crop_box_t dp_rrc_box(int height, int width, const dp_rrc_range_t *range, dp_draw_fn draw, void *state);

/* RandomHorizontalFlip(p): one word, 1 when its uniform float is < p. */
int dp_flip_draw(double p, dp_draw_fn draw, void *state);

/* Resize(size) with one int: the shorter side becomes `size`, the longer
 * int(size * long / short); *out_height, *out_width. */
void dp_resize_shorter(int height, int width, int size, int *out_height, int *out_width);

/* The evaluation's default resize: round(max(height, width) * 256 / 224)
 * (halves to even): 256 for 224, 32 for 28; never smaller than the crop,
 * so the center crop needs no padding. */
int dp_eval_resize_default(int height, int width);

/* CenterCrop(crop_height, crop_width) of a height x width image: the box
 * in the image's coordinates; top or left is negative where the crop is
 * larger than the image (torchvision pads with zeros there). */
dp_crop_box_t dp_center_crop_box(int height, int width, int crop_height, int crop_width);

/* F.resized_crop(img, box, (out_height, out_width), interpolation) on a PIL
 * image, then a horizontal flip if `flip`: `image` (1 or 3 channels,
 * interleaved) cropped to `box` (inside the image) and resized; writes
 * image->channels x out_height x out_width bytes, planar, to `out`. */
dp_status_t dp_image_resized_crop(const dp_image_t *image, dp_crop_box_t box, int out_height, int out_width,
                                  int flip, dp_interpolation_t interpolation, unsigned char *out);

/* Resize(resize_size, interpolation) then CenterCrop((out_height, out_width))
 * (torchvision's evaluation transform), planar to `out` (image->channels x out_height x
 * out_width bytes). Only the output's pixels are computed. */
dp_status_t dp_image_resize_center_crop(const dp_image_t *image, int resize_size, int out_height, int out_width,
                                        dp_interpolation_t interpolation, unsigned char *out);

#endif
