/* image_sample.c - the per-sample path of an image folder: probe the
 * header, choose the transform's geometry (RandomResizedCrop's box and the
 * flip, or Resize + CenterCrop's window), decode only the part of the image
 * the resize reads (JPEG; the other formats decode whole), orient it, and
 * resample straight into the caller's (C, H, W) slot, then (training) the
 * auto-augmentation's ops or the color jitter on that slot. image_sample.h says
 * what each mode does.
 *
 * The geometry lives in the oriented image's coordinates; each axis is a
 * resize of the frame [origin, origin + extent) to out_size pixels of which
 * the window [window_first, window_first + window_count) is kept. At DCT
 * scale 1 the frame is the resize's whole input (F.resized_crop crops
 * first: the filter never reads outside the box); at 1/s the frame is the
 * whole scaled image with the box mapped to [origin / s, (origin + extent)
 * / s), Pillow's box argument. The JPEG decoder gets the stored-orientation
 * rectangle that holds every input the resampler reads, 2 pixels wider on
 * each side (chroma upsampling reads a neighbour: with them the pixels are
 * a full decode's).
 */
#include "dptrain/image_sample.h"

#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

/* Pixels decoded beyond what the resize reads, for the chroma upsampling. */
#define JPEG_MARGIN 2

dp_sample_options_t dp_sample_options_default(dp_sample_mode_t mode, int channels, int height, int width) {
    dp_sample_options_t o = {
        .mode = mode,
        .channels = channels,
        .height = height,
        .width = width,
        .resize_size = 0,
        .range = dp_rrc_default_range(),
        .flip_p = 0.5,
        .dct_scale = mode == DP_SAMPLE_TRAIN,
        .ignore_exif = 0,
        .auto_augment = {DP_AUTO_AUGMENT_NONE, DP_RA_MAGNITUDE},
        .interpolation = DP_INTERP_BILINEAR,
    };
    return o;
}

typedef struct {
    int origin, extent;             /* the frame, in the oriented image */
    int out_size;                   /* the resize's output size */
    int window_first, window_count; /* the outputs kept */
} axis_plan_t;

static dp_status_t check_options(const dp_sample_options_t *o, const dp_rng_t *rng, const char *name) {
    if (o->channels != 1 && o->channels != 3)
        return dp_fail(DP_ERR_ARG, "%s: %d channels asked for (1 or 3)", name, o->channels);
    if (o->height <= 0 || o->width <= 0 || o->height > 65535 || o->width > 65535)
        return dp_fail(DP_ERR_ARG, "%s: output of %d x %d pixels", name, o->height, o->width);
    if (o->mode != DP_SAMPLE_TRAIN && o->mode != DP_SAMPLE_EVAL && o->mode != DP_SAMPLE_FIXED &&
        o->mode != DP_SAMPLE_SQUASH)
        return dp_fail(DP_ERR_ARG, "%s: unknown sample mode %d", name, (int)o->mode);
    if (o->mode == DP_SAMPLE_TRAIN) {
        const dp_rrc_range_t *r = &o->range;
        if (!rng) return dp_fail(DP_ERR_ARG, "%s: the training transform needs a random generator", name);
        if (o->auto_augment.magnitude < 0 || o->auto_augment.magnitude >= DP_AA_BINS)
            return dp_fail(DP_ERR_ARG, "%s: RandAugment's magnitude %d (0 to %d)", name, o->auto_augment.magnitude,
                           DP_AA_BINS - 1);
        if (o->auto_augment.kind != DP_AUTO_AUGMENT_NONE && dp_color_jitter_on(&o->color_jitter))
            return dp_fail(DP_ERR_ARG, "%s: color jitter with auto-augmentation (torchvision's and timm's recipes "
                           "take one or the other)", name);
        if (!(r->scale_min > 0 && r->scale_min <= r->scale_max && r->ratio_min > 0 && r->ratio_min <= r->ratio_max))
            return dp_fail(DP_ERR_ARG, "%s: crop ranges scale (%g, %g), ratio (%g, %g)", name, r->scale_min,
                           r->scale_max, r->ratio_min, r->ratio_max);
    }
    if (o->resize_size < 0) return dp_fail(DP_ERR_ARG, "%s: resize size %d", name, o->resize_size);
    if (o->interpolation != DP_INTERP_BILINEAR && o->interpolation != DP_INTERP_BICUBIC)
        return dp_fail(DP_ERR_ARG, "%s: unknown interpolation %d (bilinear or bicubic)", name, (int)o->interpolation);
    return DP_OK;
}

/* The mode's geometry for an oriented width x height image. */
static void plan_axes(const dp_sample_options_t *o, int width, int height, dp_rng_t *rng, axis_plan_t *px,
                      axis_plan_t *py, dp_sample_report_t *rep) {
    if (o->mode == DP_SAMPLE_TRAIN) {
        dp_crop_box_t box = dp_rrc_box(height, width, &o->range, dp_rng_draw32, rng);
        rep->flipped = dp_flip_draw(o->flip_p, dp_rng_draw32, rng);
        rep->box = box;
        *px = (axis_plan_t){box.left, box.width, o->width, 0, o->width};
        *py = (axis_plan_t){box.top, box.height, o->height, 0, o->height};
        return;
    }
    rep->box = (dp_crop_box_t){0, 0, height, width};
    if (o->mode == DP_SAMPLE_SQUASH) { /* the whole image to the output */
        *px = (axis_plan_t){0, width, o->width, 0, o->width};
        *py = (axis_plan_t){0, height, o->height, 0, o->height};
        return;
    }
    /* eval (and fixed, for an image of another size) */
    int size = o->resize_size ? o->resize_size : dp_eval_resize_default(o->height, o->width);
    int rh, rw;
    dp_resize_shorter(height, width, size, &rh, &rw);
    dp_crop_box_t crop = dp_center_crop_box(rh, rw, o->height, o->width);
    *px = (axis_plan_t){0, width, rw, crop.left, o->width};
    *py = (axis_plan_t){0, height, rh, crop.top, o->height};
}

/* Training: TrivialAugmentWide or RandAugment on the crop's output, drawn after the crop and flip. */
static dp_status_t auto_augment(const dp_sample_options_t *o, dp_rng_t *rng, unsigned char *out) {
    if (o->mode != DP_SAMPLE_TRAIN || o->auto_augment.kind == DP_AUTO_AUGMENT_NONE) return DP_OK;
    return dp_auto_augment_apply(&o->auto_augment, dp_rng_draw32, rng, out, o->channels, o->height, o->width);
}

/* Training: ColorJitter on the crop's output, drawn after the crop and flip (never with auto_augment). */
static dp_status_t color_jitter(const dp_sample_options_t *o, dp_rng_t *rng, unsigned char *out) {
    if (o->mode != DP_SAMPLE_TRAIN || !dp_color_jitter_on(&o->color_jitter)) return DP_OK;
    return dp_color_jitter_apply(&o->color_jitter, dp_rng_draw32, rng, out, o->channels, o->height, o->width);
}

/* The DCT scale: the largest of 8, 4, 2 by which both axes shrink, else 1. */
static int choose_scale(const axis_plan_t *px, const axis_plan_t *py) {
    for (int s = 8; s >= 2; s /= 2)
        if (px->extent >= (long)s * px->out_size && py->extent >= (long)s * py->out_size) return s;
    return 1;
}

/* One axis's coefficients: at scale 1 the frame is the box itself (frame
 * origin = the box's), at 1/s the whole scaled axis of scaled_size pixels. */
static dp_status_t axis_for_scale(const axis_plan_t *p, dp_interpolation_t interpolation, int scale,
                                  int scaled_size, dp_resize_axis_t *axis, int *frame_origin) {
    if (scale == 1) {
        *frame_origin = p->origin;
        return dp_resize_axis_init(axis, interpolation, p->extent, 0.0f, (float)p->extent, p->out_size,
                                   p->window_first, p->window_count);
    }
    *frame_origin = 0;
    float in0 = (float)p->origin / (float)scale, in1 = (float)(p->origin + p->extent) / (float)scale;
    if (in1 > (float)scaled_size) in1 = (float)scaled_size;
    return dp_resize_axis_init(axis, interpolation, scaled_size, in0, in1, p->out_size, p->window_first,
                               p->window_count);
}

/* A JPEG: decode the stored rectangle the resize reads, orient it; *view
 * then holds the oriented rectangle whose corner is (*view_x, *view_y). */
static dp_status_t decode_jpeg_part(const unsigned char *data, size_t size, const char *name,
                                    const dp_image_info_t *info, int channels, int scale, dp_crop_box_t need,
                                    dp_image_t *view, int *view_x, int *view_y, long *decoded) {
    int sw, sh; /* the stored image at the scale */
    dp_jpeg_scaled_size(info->stored_width, info->stored_height, scale, &sw, &sh);
    dp_crop_box_t want = dp_orient_box_to_stored(info->orientation, sw, sh, need), got;
    dp_image_t region;
    DP_TRY(dp_jpeg_decode_region(data, size, name, channels, info->stored_width, info->stored_height, scale, want,
                                 JPEG_MARGIN, &region, &got));
    *decoded = (long)got.width * got.height;
    if (info->orientation == 1) {
        *view = region;
        *view_x = got.left;
        *view_y = got.top;
        return DP_OK;
    }
    dp_crop_box_t oriented = dp_orient_box_from_stored(info->orientation, sw, sh, got);
    dp_image_t turned = {.channels = channels, .width = oriented.width, .height = oriented.height};
    turned.pixels = malloc((size_t)oriented.width * oriented.height * channels);
    if (!turned.pixels) {
        dp_image_free(&region);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory for %d x %d pixels", name, oriented.width, oriented.height);
    }
    dp_orient_pixels(info->orientation, sw, sh, region.pixels, got, channels, turned.pixels);
    dp_image_free(&region);
    *view = turned;
    *view_x = oriented.left;
    *view_y = oriented.top;
    return DP_OK;
}

/* An image of exactly the output's size, copied to planar. */
static void copy_planar(const dp_image_t *image, unsigned char *out) {
    size_t plane = (size_t)image->width * image->height;
    for (int c = 0; c < image->channels; c++)
        for (size_t i = 0; i < plane; i++) out[c * plane + i] = image->pixels[i * image->channels + c];
}

/* Whether the mode keeps a width x height image as it is: fixed and squash,
 * for an image of the output's size. */
static int copies_as_is(const dp_sample_options_t *o, int width, int height) {
    return (o->mode == DP_SAMPLE_FIXED || o->mode == DP_SAMPLE_SQUASH) && width == o->width && height == o->height;
}

dp_status_t dp_image_sample(const void *data, size_t size, const char *name, const dp_sample_options_t *options,
                            dp_rng_t *rng, unsigned char *out, dp_sample_report_t *report) {
    dp_sample_report_t rep = {.scale_denom = 1};
    DP_TRY(check_options(options, rng, name));
    DP_TRY(dp_image_probe(data, size, name, options->ignore_exif, &rep.info));
    const dp_image_info_t *info = &rep.info;
    dp_image_options_t decode = {.channels = options->channels, .ignore_exif = options->ignore_exif};
    dp_image_t view = {0};
    if (copies_as_is(options, info->width, info->height)) {
        DP_TRY(dp_image_decode_with(data, size, name, &decode, &view));
        copy_planar(&view, out);
        rep.box = (dp_crop_box_t){0, 0, info->height, info->width};
        rep.decoded_pixels = (long)info->width * info->height;
        dp_image_free(&view);
        if (report) *report = rep;
        return DP_OK;
    }
    axis_plan_t px, py;
    plan_axes(options, info->width, info->height, rng, &px, &py, &rep);
    int jpeg = info->format == DP_IMAGE_JPEG;
    int scale = jpeg && options->dct_scale ? choose_scale(&px, &py) : 1;
    int ssw, ssh, sw, sh; /* the image at the scale: stored, then oriented */
    dp_jpeg_scaled_size(info->stored_width, info->stored_height, scale, &ssw, &ssh);
    dp_orient_size(info->orientation, ssw, ssh, &sw, &sh);
    dp_resize_axis_t ax = {0}, ay = {0};
    int frame_x, frame_y, view_x = 0, view_y = 0;
    dp_status_t st = axis_for_scale(&px, options->interpolation, scale, sw, &ax, &frame_x);
    if (st == DP_OK) st = axis_for_scale(&py, options->interpolation, scale, sh, &ay, &frame_y);
    if (st == DP_OK && jpeg) {
        dp_crop_box_t need = {frame_y + ay.lo, frame_x + ax.lo, ay.hi - ay.lo, ax.hi - ax.lo};
        if (need.width <= 0 || need.height <= 0) need = (dp_crop_box_t){0, 0, 1, 1}; /* all padding */
        st = decode_jpeg_part(data, size, name, info, options->channels, scale, need, &view, &view_x, &view_y,
                              &rep.decoded_pixels);
    } else if (st == DP_OK) {
        st = dp_image_decode_with(data, size, name, &decode, &view);
        rep.decoded_pixels = (long)view.width * view.height;
    }
    if (st == DP_OK) st = dp_resize_apply(&view, view_x - frame_x, view_y - frame_y, &ax, &ay, rep.flipped, out);
    if (st == DP_OK) st = auto_augment(options, rng, out);
    if (st == DP_OK) st = color_jitter(options, rng, out);
    dp_image_free(&view);
    dp_resize_axis_free(&ax);
    dp_resize_axis_free(&ay);
    rep.scale_denom = scale;
    if (st == DP_OK && report) *report = rep;
    return st;
}

dp_status_t dp_image_sample_decoded(const dp_image_t *image, const dp_sample_options_t *options, dp_rng_t *rng,
                                    unsigned char *out, dp_sample_report_t *report) {
    dp_sample_report_t rep = {.scale_denom = 1};
    DP_TRY(check_options(options, rng, "a decoded image"));
    if (image->channels != options->channels)
        return dp_fail(DP_ERR_ARG, "a decoded image of %d channels for a sample of %d", image->channels,
                       options->channels);
    rep.info = (dp_image_info_t){.width = image->width, .height = image->height, .stored_width = image->width,
                                 .stored_height = image->height, .channels = image->channels, .orientation = 1};
    rep.decoded_pixels = 0;
    if (copies_as_is(options, image->width, image->height)) {
        copy_planar(image, out);
        rep.box = (dp_crop_box_t){0, 0, image->height, image->width};
        if (report) *report = rep;
        return DP_OK;
    }
    axis_plan_t px, py;
    plan_axes(options, image->width, image->height, rng, &px, &py, &rep);
    dp_resize_axis_t ax = {0}, ay = {0};
    int frame_x, frame_y;
    dp_status_t st = axis_for_scale(&px, options->interpolation, 1, image->width, &ax, &frame_x);
    if (st == DP_OK) st = axis_for_scale(&py, options->interpolation, 1, image->height, &ay, &frame_y);
    if (st == DP_OK) st = dp_resize_apply(image, -frame_x, -frame_y, &ax, &ay, rep.flipped, out);
    if (st == DP_OK) st = auto_augment(options, rng, out);
    if (st == DP_OK) st = color_jitter(options, rng, out);
    dp_resize_axis_free(&ax);
    dp_resize_axis_free(&ay);
    if (st == DP_OK && report) *report = rep;
    return st;
}
