/* image_transform.c - torchvision 0.14's RandomResizedCrop.get_params,
 * RandomHorizontalFlip's draw, Resize(int)'s size, CenterCrop's box, and
 * the resized crop and the resize + center crop of a decoded image (the
 * resampler is image_resize.c). The semantics are in image_transform.h;
 * the arithmetic follows torch's CPU kernels on one float32 element, as
 * get_params runs them with torch's scalar (non-vectorised) code:
 * uniform_ is (word & (2^24 - 1)) * 2^-24 * (to - from) + from in float,
 * the log and exp are logf and expf. Python's round() is rint() (the
 * default rounding mode: halves to even).
 */
#include <math.h>
#include <stdlib.h>

#include "dptrain/image_transform.h"
#include "image_internal.h"

uint32_t dp_rng_draw32(void *rng) { return (uint32_t)(dp_rng_next((dp_rng_t *)rng) >> 32); }

const char *dp_interpolation_name(dp_interpolation_t interpolation) {
    return interpolation == DP_INTERP_BICUBIC ? "bicubic" : "bilinear";
}

dp_rrc_range_t dp_rrc_default_range(void) {
    dp_rrc_range_t r = {0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0};
    return r;
}

/* torch.empty(1).uniform_(from, to).item() for one word of the generator. */
float dp_torch_uniform(uint32_t word, float from, float to) {
    float x = (float)(word & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
    float spread = to - from;
    float scaled = x * spread; /* two statements: no fused multiply-add */
    return scaled + from;
}

/* Python's int(round(x)) for |x| < 2^31. */
static int python_round(double x) { return (int)rint(x); }

dp_crop_box_t dp_rrc_box(int height, int width, const dp_rrc_range_t *range, dp_draw_fn draw, void *state) {
    double area = (double)height * (double)width;
    float log_lo = logf((float)range->ratio_min), log_hi = logf((float)range->ratio_max);
    float scale_lo = (float)range->scale_min, scale_hi = (float)range->scale_max;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target_area = area * (double)dp_torch_uniform(draw(state), scale_lo, scale_hi);
        double aspect_ratio = (double)expf(dp_torch_uniform(draw(state), log_lo, log_hi));
        int w = python_round(sqrt(target_area * aspect_ratio));
        int h = python_round(sqrt(target_area / aspect_ratio));
        if (0 < w && w <= width && 0 < h && h <= height) {
            int top = (int)(draw(state) % (uint32_t)(height - h + 1));
            int left = (int)(draw(state) % (uint32_t)(width - w + 1));
            return (dp_crop_box_t){.top = top, .left = left, .height = h, .width = w};
        }
    }
    /* the central fallback */
    double in_ratio = (double)width / (double)height;
    int w = width, h = height;
    if (in_ratio < range->ratio_min) {
        h = python_round(w / range->ratio_min);
    } else if (in_ratio > range->ratio_max) {
        w = python_round(h * range->ratio_max);
    }
    return (dp_crop_box_t){.top = (height - h) / 2, .left = (width - w) / 2, .height = h, .width = w};
}

int dp_flip_draw(double p, dp_draw_fn draw, void *state) { return dp_torch_uniform(draw(state), 0.0f, 1.0f) < (float)p; }

void dp_resize_shorter(int height, int width, int size, int *out_height, int *out_width) {
    int shorter = width <= height ? width : height, longer = width <= height ? height : width;
    int new_long = (int)((double)size * (double)longer / (double)shorter); /* int(size * long / short) */
    *out_width = width <= height ? size : new_long;
    *out_height = width <= height ? new_long : size;
}

int dp_eval_resize_default(int height, int width) {
    long side = height > width ? height : width;
    long q = side * 256 / 224, r = side * 256 % 224;
    return (int)(2 * r > 224 || (2 * r == 224 && (q & 1)) ? q + 1 : q);
}

/* CenterCrop's offset on one axis: negative (half the padding, rounded
 * down) where the crop is larger; int(round((size - crop) / 2.0)) else. */
static int center_offset(int size, int crop) {
    if (crop > size) return -((crop - size) / 2);
    return python_round((size - crop) / 2.0);
}

dp_crop_box_t dp_center_crop_box(int height, int width, int crop_height, int crop_width) {
    dp_crop_box_t box = {.top = center_offset(height, crop_height), .left = center_offset(width, crop_width),
                         .height = crop_height, .width = crop_width};
    return box;
}

static dp_status_t check_image(const dp_image_t *image, int out_height, int out_width) {
    if (!image || !image->pixels || (image->channels != 1 && image->channels != 3) || image->width <= 0 ||
        image->height <= 0)
        return dp_fail(DP_ERR_ARG, "resize: not a decoded 1- or 3-channel image");
    if (out_height <= 0 || out_width <= 0)
        return dp_fail(DP_ERR_ARG, "resize: output of %d x %d pixels", out_height, out_width);
    return DP_OK;
}

dp_status_t dp_image_resized_crop(const dp_image_t *image, dp_crop_box_t box, int out_height, int out_width,
                                  int flip, dp_interpolation_t interpolation, unsigned char *out) {
    DP_TRY(check_image(image, out_height, out_width));
    if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || box.top + box.height > image->height ||
        box.left + box.width > image->width)
        return dp_fail(DP_ERR_ARG, "resized crop: box %d,%d %dx%d outside the %d x %d image", box.top, box.left,
                       box.height, box.width, image->height, image->width);
    /* the crop is the resize's whole input: its frame starts at the box */
    dp_resize_axis_t ax, ay;
    DP_TRY(dp_resize_axis_init(&ax, interpolation, box.width, 0.0f, (float)box.width, out_width, 0, out_width));
    dp_status_t st =
        dp_resize_axis_init(&ay, interpolation, box.height, 0.0f, (float)box.height, out_height, 0, out_height);
    if (st == DP_OK) st = dp_resize_apply(image, -box.left, -box.top, &ax, &ay, flip, out);
    dp_resize_axis_free(&ax);
    dp_resize_axis_free(&ay);
    return st;
}

dp_status_t dp_image_resize_center_crop(const dp_image_t *image, int resize_size, int out_height, int out_width,
                                        dp_interpolation_t interpolation, unsigned char *out) {
    DP_TRY(check_image(image, out_height, out_width));
    if (resize_size <= 0) return dp_fail(DP_ERR_ARG, "resize: shorter side of %d pixels", resize_size);
    int rh, rw;
    dp_resize_shorter(image->height, image->width, resize_size, &rh, &rw);
    dp_crop_box_t crop = dp_center_crop_box(rh, rw, out_height, out_width);
    dp_resize_axis_t ax, ay;
    DP_TRY(dp_resize_axis_init(&ax, interpolation, image->width, 0.0f, (float)image->width, rw, crop.left, out_width));
    dp_status_t st =
        dp_resize_axis_init(&ay, interpolation, image->height, 0.0f, (float)image->height, rh, crop.top, out_height);
    if (st == DP_OK) st = dp_resize_apply(image, 0, 0, &ax, &ay, 0, out);
    dp_resize_axis_free(&ax);
    dp_resize_axis_free(&ay);
    return st;
}
