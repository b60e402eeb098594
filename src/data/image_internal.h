/* image_internal.h - what the image modules share and nobody else uses:
 * the format decoders and probes behind image.c, PIL's mode conversions,
 * the EXIF orientation's geometry and the fixed-point resampler.
 *
 * Decoders write `channels` (1 or 3) interleaved 8-bit pixels, converted
 * as PIL's convert("L") / ("RGB") would (image_convert.c), in the stored
 * orientation; image.c applies the EXIF orientation. A probe fills
 * info->format, stored_width, stored_height, channels and orientation (the
 * file's, 1 when none) and sets *need_more when the header goes on past
 * the bytes given (dp_image_probe_file then reads more).
 */
#ifndef DPTRAIN_IMAGE_INTERNAL_H
#define DPTRAIN_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/image.h"
#include "dptrain/image_transform.h"

/* --- formats (image_jpeg.c, image_png.c, image_pnm.c, image_bmp.c) ---------------- */

dp_status_t dp_jpeg_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                          int *need_more);
dp_status_t dp_png_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more);
dp_status_t dp_pnm_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more);
dp_status_t dp_bmp_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more);

dp_status_t dp_png_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out);
dp_status_t dp_pnm_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out);
dp_status_t dp_bmp_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out);

/* Decodes at least the rectangle `want` (stored orientation, coordinates
 * of the image scaled by 1/scale_denom, 1, 2, 4 or 8) of a JPEG, with
 * `margin` pixels more on every side where the image has them: *out holds
 * the rectangle *got (a superset, widened to whole iMCU columns by
 * libjpeg). The full image: want = {0, 0, INT32_MAX, INT32_MAX}. A JPEG
 * whose frame libjpeg reads as another size than expect_width x
 * expect_height (the probe's; 0: not checked) is refused. */
dp_status_t dp_jpeg_decode_region(const unsigned char *data, size_t size, const char *name, int channels,
                                  int expect_width, int expect_height, int scale_denom, dp_crop_box_t want,
                                  int margin, dp_image_t *out, dp_crop_box_t *got);

/* The JPEG's size at 1/scale_denom, as libjpeg computes it (ceil). */
void dp_jpeg_scaled_size(int width, int height, int scale_denom, int *scaled_width, int *scaled_height);

/* Format by the first bytes (DP_IMAGE_UNKNOWN when none fits). */
dp_image_format_t dp_image_sniff(const unsigned char *data, size_t size);

/* --- image lists (image_list.c) ---------------------------------------------------- */

/* A list's entries: paths joined to the list's folder, labels as class
 * positions; a training list's classes (classes NULL) in class_names. */
typedef struct {
    int count;
    char **paths;         /* (count) */
    int32_t *labels;      /* (count) */
    int num_classes;
    char **class_names;   /* (num_classes) a training list's own; NULL when classes were given */
    size_t root_length;   /* bytes of "LIST_FOLDER/" in every path; 0: the paths are absolute */
} dp_image_list_t;

/* Reads an image list (text, or CSV when its name ends in .csv); classes:
 * a training split's class names (NULL: the list's own). One line naming
 * LIST:LINE on failure; *out is then empty. */
dp_status_t dp_image_list_read(const char *list, char *const *classes, int num_classes, dp_image_list_t *out);
void dp_image_list_clear(dp_image_list_t *list);
int dp_image_list_is_csv(const char *list);

/* --- PIL's conversions (image_convert.c) ------------------------------------------- */

/* Converts `count` pixels of `from` channels (1: L, 3: RGB, 4: CMYK as PIL
 * holds it) to `to` channels (1: L, 3: RGB) as PIL's convert does. `dst`
 * may be `src` (a buffer large enough for the result). */
void dp_pixels_convert(const unsigned char *src, int from, unsigned char *dst, int to, size_t count);

/* torch.empty(1).uniform_(from, to).item() for one 32-bit word of the
 * generator, as torch's scalar CPU kernel: (word & (2^24 - 1)) * 2^-24 *
 * (to - from) + from in float, no fused multiply-add (image_transform.c;
 * the crop's, the flip's, AutoAugment's and ColorJitter's draws). */
float dp_torch_uniform(uint32_t word, float from, float to);

/* PIL's RGB -> L: (19595 R + 38470 G + 7471 B + 2^15) >> 16. */
static inline unsigned char dp_luma(unsigned r, unsigned g, unsigned b) {
    return (unsigned char)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* --- EXIF orientation (image_exif.c) ------------------------------------------------ */

/* The orientation (1-8) in TIFF-structured EXIF bytes (after "Exif\0\0");
 * 1 when there is none or the bytes are not readable as EXIF. */
int dp_exif_orientation(const unsigned char *tiff, size_t size);

/* The size of a stored width x height image after orientation o. */
void dp_orient_size(int orientation, int width, int height, int *out_width, int *out_height);

/* A rectangle of the oriented image as a rectangle of the stored one
 * (stored size stored_width x stored_height), and back. */
dp_crop_box_t dp_orient_box_to_stored(int orientation, int stored_width, int stored_height, dp_crop_box_t box);
dp_crop_box_t dp_orient_box_from_stored(int orientation, int stored_width, int stored_height, dp_crop_box_t box);

/* PIL's exif_transpose of a part of an image: src holds the stored
 * rectangle `src_box` (of a stored_width x stored_height image) as
 * interleaved pixels; writes the same pixels as the oriented rectangle
 * dp_orient_box_from_stored(...) to dst. */
void dp_orient_pixels(int orientation, int stored_width, int stored_height, const unsigned char *src,
                      dp_crop_box_t src_box, int channels, unsigned char *dst);

/* --- the resampler (image_resize.c) ------------------------------------------------- */

/* Pillow's BILINEAR or BICUBIC coefficients for the outputs [window_first,
 * window_first + window_count) of a resize of the box [in0, in1) of an
 * axis of in_size pixels to out_size pixels; outputs outside [0, out_size)
 * read nothing (they are 0: torchvision's padding). */
typedef struct {
    int count, max_taps;
    int *first;       /* per output: first input read */
    int *taps;        /* per output: inputs read */
    int32_t *weights; /* count x max_taps, in 2^-22 */
    int lo, hi;       /* every input read lies in [lo, hi); lo == hi: none */
    /* The weights split for 16-bit multiply-adds: w = high * 2^11 + low,
     * taps in pairs (an odd count gets a 0 last), each pair's two 16-bit
     * halves packed in one 32-bit word; count x max_pairs. */
    int max_pairs;
    uint32_t *pair_high, *pair_low;
} dp_resize_axis_t;

dp_status_t dp_resize_axis_init(dp_resize_axis_t *axis, dp_interpolation_t interpolation, int in_size, float in0,
                                float in1, int out_size, int window_first, int window_count);
void dp_resize_axis_free(dp_resize_axis_t *axis);

/* Resamples: input (x, y) of the axes' frame is view->pixels at column
 * x - origin_x, row y - origin_y (the view must hold every input read);
 * writes view->channels x ay->count x ax->count bytes, planar, to out,
 * columns mirrored when flip. Horizontal pass first, as Pillow. */
dp_status_t dp_resize_apply(const dp_image_t *view, int origin_x, int origin_y, const dp_resize_axis_t *ax,
                            const dp_resize_axis_t *ay, int flip, unsigned char *out);

#endif
