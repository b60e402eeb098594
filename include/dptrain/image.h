/* image.h - reading images (JPEG, PNG, PGM/PPM, BMP) into 8-bit pixels, a
 * cheap header probe, and the float input of a model (dptrain predict).
 *
 * Formats are told by their first bytes, never by the file's name (ImageNet
 * holds a PNG named .JPEG):
 * - JPEG through libjpeg-turbo's libjpeg API (jpeglib.h), not TurboJPEG:
 *   only the libjpeg API has jpeg_crop_scanline / jpeg_skip_scanlines (the
 *   per-sample path decodes only a crop's rows and columns) and DCT
 *   scaling by scale_num / scale_denom row by row. Baseline, progressive
 *   and arithmetic-coded; gray, YCbCr, RGB, CMYK and YCCK (CMYK taken as
 *   Adobe's inverted CMYK, as PIL takes every CMYK JPEG);
 * - PNG through libpng: any bit depth, colour type, interlacing;
 * - PGM and PPM: P2, P5 (gray), P3, P6 (RGB), maxval 1..65535;
 * - BMP: 24- and 32-bit uncompressed (32-bit also with the standard
 *   BI_BITFIELDS masks), 1-, 4- and 8-bit palettes, bottom-up or top-down;
 *   other depths and RLE compression are refused naming what the file is.
 * The pixels become the channel count asked for as PIL's convert("L") /
 * convert("RGB") make them, to the bit: RGB -> L is PIL's integer luma
 * (19595 R + 38470 G + 7471 B + 2^15) >> 16, L -> RGB copies, alpha is
 * dropped (no compositing), palettes are looked up, CMYK -> RGB is PIL's
 * (255 - K) - C (255 - K) / 255 in its rounding, 16-bit PNG samples keep
 * their high byte (PIL's RGB;16B), PGM/PPM samples are round(v / maxval *
 * 255) in double, ties to even (PIL's PPM decoder). Two documented
 * differences from PIL: a 16-bit gray PNG and a PGM with maxval > 255,
 * which PIL opens as 32-bit "I" images whose convert("L") clips at 255,
 * are scaled to 8 bits like the other 16-bit kinds.
 * EXIF orientation (tag 0x0112, values 1-8, from a JPEG's first APP1 Exif
 * segment or a PNG's eXIf chunk before the image data) is applied unless
 * ignore_exif: PIL's ImageOps.exif_transpose.
 * A bad file fails with one line naming it ("img.jpg: truncated JPEG ...").
 * Images larger than DP_IMAGE_MAX_PIXELS are refused.
 *
 * dp_image_to_input turns an image into the float input of a model:
 * channels converted (RGB -> gray by ITU-R 601-2 luma in float, 0.299 R +
 * 0.587 G + 0.114 B; gray -> RGB by copying), resized with PIL's BILINEAR
 * filter (antialiased when shrinking) computed in float, then scaled like
 * the IDX bytes of the dataset: x = pixel / 255. The training pipeline's
 * exact uint8 transforms are in image_transform.h and image_sample.h.
 *
 * Every function here is thread-safe (no global state; errors go to the
 * calling thread's message).
 */
#ifndef DPTRAIN_IMAGE_H
#define DPTRAIN_IMAGE_H

#include <stddef.h>

#include "dptrain/status.h"

typedef struct {
    int channels, height, width;
    unsigned char *pixels; /* (height, width, channels) interleaved, 8-bit */
} dp_image_t;

/* Images larger than this many pixels (width x height) are refused. */
#define DP_IMAGE_MAX_PIXELS ((size_t)1 << 28)

typedef enum {
    DP_IMAGE_UNKNOWN = 0,
    DP_IMAGE_JPEG,
    DP_IMAGE_PNG,
    DP_IMAGE_PNM, /* PGM or PPM */
    DP_IMAGE_BMP,
} dp_image_format_t;

/* "JPEG", "PNG", "PNM", "BMP" or "unknown". */
const char *dp_image_format_name(dp_image_format_t format);

/* What the header says, without decoding the pixels. */
typedef struct {
    dp_image_format_t format;
    int width, height;               /* after the EXIF orientation (unless ignored) */
    int stored_width, stored_height; /* as stored in the file */
    int channels;                    /* what dp_image_decode gives: 1 (gray kinds) or 3 */
    int orientation;                 /* EXIF orientation 1-8 applied (1: none, or ignored) */
} dp_image_info_t;

/* How to decode; all zero is the default (the image's own channel count,
 * EXIF orientation applied). */
typedef struct {
    int channels;    /* 0: 1 for gray kinds, 3 for the rest; or 1 / 3: PIL's convert("L") / ("RGB") */
    int ignore_exif; /* 1: keep the stored orientation */
} dp_image_options_t;

/* Reads only the header (and, for the orientation, the JPEG markers before
 * the scan or the PNG chunks before the image data): format, size,
 * channels. Fails with one line naming `name` when the header is bad or
 * ends within the bytes given. */
dp_status_t dp_image_probe(const void *data, size_t size, const char *name, int ignore_exif,
                           dp_image_info_t *info);

/* The same from a file, reading only as much of it as the header needs
 * (64 KiB first, more only when the header goes on). */
dp_status_t dp_image_probe_file(const char *path, int ignore_exif, dp_image_info_t *info);

/* The whole file into a malloc'd buffer (*data, *size); one line naming the
 * file on failure (*data NULL). Files over 1 GiB are refused. */
dp_status_t dp_image_file_bytes(const char *path, unsigned char **data, size_t *size);

/* Decodes bytes in memory; `name` is used in messages; options may be NULL
 * (the defaults). On failure *out is zeroed and nothing needs freeing. */
dp_status_t dp_image_decode_with(const void *data, size_t size, const char *name,
                                 const dp_image_options_t *options, dp_image_t *out);

/* dp_image_decode_with with the default options. */
dp_status_t dp_image_decode(const void *data, size_t size, const char *name, dp_image_t *out);

/* A file, by content, with the default options (gray kinds -> 1 channel,
 * the rest -> 3, EXIF orientation applied). */
dp_status_t dp_image_read(const char *path, dp_image_t *out);

/* Frees the pixels and zeroes the struct (NULL and zeroed images are fine). */
void dp_image_free(dp_image_t *image);

/* Writes channels x height x width floats (C, H, W) to `out`: the image
 * converted to `channels` (1 or 3), resized to height x width (bilinear,
 * PIL's filter, see above) and scaled to [0, 1] (pixel / 255). */
dp_status_t dp_image_to_input(const dp_image_t *image, int channels, int height, int width,
                              float *out);

#endif
