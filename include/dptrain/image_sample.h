/* image_sample.h - one sample of an image folder: the bytes of one file ->
 * decoded -> transformed -> uint8 (C, H, W) written into a slot of a batch.
 * What the loader threads call, once per sample.
 *
 * Four modes (torchvision's transforms, exact: image_transform.h):
 * - DP_SAMPLE_TRAIN: RandomResizedCrop((H, W), scale, ratio) then
 *   RandomHorizontalFlip(flip_p), then TrivialAugmentWide or RandAugment
 *   when auto_augment asks (auto_augment.h: PIL's pixels), or ColorJitter
 *   when color_jitter asks (color_jitter.h; one or the other, not both);
 * - DP_SAMPLE_EVAL: Resize(resize_size) (the shorter side) then
 *   CenterCrop((H, W));
 * - DP_SAMPLE_FIXED: an image of exactly H x W is copied as it is; any
 *   other size goes through DP_SAMPLE_EVAL;
 * - DP_SAMPLE_SQUASH: Resize((H, W)): the whole image to the output's size,
 *   its aspect ratio not kept (fastai's "squash", Darknet's resize); an
 *   image of exactly H x W is copied. Nothing is cropped away.
 * Every resize uses `interpolation`: Pillow's BILINEAR (torchvision's
 * default) or BICUBIC filter (image_transform.h).
 * The image becomes `channels` (1 or 3) as PIL's convert("L") / ("RGB")
 * (image.h), after its EXIF orientation unless ignore_exif.
 *
 * Randomness comes only from the caller's dp_rng_t (train mode; the
 * others draw nothing): the crop box takes 2 words per attempt plus 2, the
 * flip 1 more, auto-augmentation its op, bin and sign words after them, so a generator seeded from (seed, epoch, sample index) fixes
 * the sample whatever thread runs it.
 *
 * Decoding only what is needed: for a JPEG only the rows and the iMCU
 * columns that the resize reads are decoded (jpeg_skip_scanlines,
 * jpeg_crop_scanline), with 2 pixels more on each side so that the
 * chroma upsampling sees its neighbours: the pixels equal a full decode's
 * (test_image_sample checks it). With dct_scale on, a JPEG whose crop
 * shrinks by at least 2, 4 or 8 in both directions is decoded at 1/2,
 * 1/4 or 1/8 of its size in the DCT domain and resized from there (the
 * crop box mapped to the smaller image): several times faster, and the
 * pixels differ slightly from PIL's (the bound is in docs/data.md, checked
 * by test_image_sample). Off, every mode gives torchvision's pixels.
 *
 * Thread-safe: no global state; scratch (the decoded region and one
 * resize buffer) is allocated and freed in each call.
 */
#ifndef DPTRAIN_IMAGE_SAMPLE_H
#define DPTRAIN_IMAGE_SAMPLE_H

#include <stddef.h>

#include "dptrain/auto_augment.h"
#include "dptrain/color_jitter.h"
#include "dptrain/image.h"
#include "dptrain/image_transform.h"
#include "dptrain/rng.h"

typedef enum {
    DP_SAMPLE_TRAIN,
    DP_SAMPLE_EVAL,
    DP_SAMPLE_FIXED,
    DP_SAMPLE_SQUASH,
} dp_sample_mode_t;

typedef struct {
    dp_sample_mode_t mode;
    int channels, height, width; /* the output: channels x height x width */
    int resize_size;             /* eval, fixed: the shorter side before the crop; 0: dp_eval_resize_default */
    dp_rrc_range_t range;        /* train: RandomResizedCrop's scale and ratio */
    double flip_p;               /* train: probability of the horizontal flip */
    int dct_scale;               /* JPEG: decode at 1/2, 1/4, 1/8 when the crop shrinks that much */
    int ignore_exif;             /* 1: keep the stored orientation */
    dp_auto_augment_t auto_augment; /* train: after the crop and flip (kind DP_AUTO_AUGMENT_NONE: none) */
    dp_color_jitter_t color_jitter; /* train: after the crop and flip (all 0: none); not with auto_augment */
    dp_interpolation_t interpolation; /* every mode's resize: bilinear (default) or bicubic (Pillow's filters) */
} dp_sample_options_t;

/* The defaults of a mode: torchvision's ranges, flip_p 0.5, resize_size 0,
 * bilinear, EXIF applied, no auto-augmentation, dct_scale on for DP_SAMPLE_TRAIN and off for the others. */
dp_sample_options_t dp_sample_options_default(dp_sample_mode_t mode, int channels, int height, int width);

/* What one call did (for tests, benches and logs). */
typedef struct {
    dp_image_info_t info;   /* the probed header */
    dp_crop_box_t box;      /* the source rectangle resized: train's crop box; eval's whole image */
    int flipped;            /* 1 when flipped */
    int scale_denom;        /* 1, 2, 4 or 8: the JPEG's DCT scaling */
    long decoded_pixels;    /* pixels decoded (after DCT scaling) */
} dp_sample_report_t;

/* Decodes `data` (`size` bytes of the file `name`, named in messages),
 * transforms it as `options` say and writes channels x height x width
 * bytes, planar, to `out`. `rng` is used in train mode only (may be NULL
 * otherwise); `report` may be NULL. A bad file fails with one line naming
 * it and leaves `out` untouched. */
dp_status_t dp_image_sample(const void *data, size_t size, const char *name, const dp_sample_options_t *options,
                            dp_rng_t *rng, unsigned char *out, dp_sample_report_t *report);

/* The same transform of an image already decoded (as dp_image_decode_with
 * made it: `options->channels` channels, oriented): a cache's images. The
 * same bytes as dp_image_sample of its file with dct_scale off. */
dp_status_t dp_image_sample_decoded(const dp_image_t *image, const dp_sample_options_t *options, dp_rng_t *rng,
                                    unsigned char *out, dp_sample_report_t *report);

#endif
