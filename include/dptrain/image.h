/* image.h - reading PNG and PGM images, and turning them into a model's input.
 *
 * dp_image_read decodes a PNG (any bit depth, colour type or interlacing,
 * through libpng) or a PGM (P2 ASCII or P5 binary, maxval 1..65535), chosen
 * by the file's content, never by its name, into 8-bit pixels:
 * gray and gray+alpha become 1 channel, palette, RGB and RGBA become 3
 * (alpha is dropped, as PIL's convert("L") / convert("RGB") do; 16-bit
 * samples are scaled to 8 bits). A bad file fails with one line naming it
 * ("img.png: truncated PNG ...", "x.pgm: PGM header says 28 x 28 ...").
 *
 * dp_image_to_input turns an image into the float input of a model, the way
 * the training data was made: channels converted (RGB -> gray by ITU-R
 * 601-2 luma, L = 0.299 R + 0.587 G + 0.114 B, PIL's "L"; gray -> RGB by
 * copying), resized with PIL's BILINEAR filter (a triangle filter whose
 * support widens when shrinking, i.e. antialiased: PIL Image.resize and
 * torchvision's Resize with antialias=True; computed in float), then scaled
 * like the IDX bytes of the dataset: x = pixel / 255, in [0, 1].
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

/* PNG or PGM, by content; gray, gray+alpha -> 1 channel, RGB, RGBA -> 3;
 * fails with a one-line message naming the file. On failure *out is
 * zeroed and nothing needs freeing. */
dp_status_t dp_image_read(const char *path, dp_image_t *out);

/* The same from bytes in memory; `name` is used in messages. */
dp_status_t dp_image_decode(const void *data, size_t size, const char *name, dp_image_t *out);

/* Frees the pixels and zeroes the struct (NULL and zeroed images are fine). */
void dp_image_free(dp_image_t *image);

/* Writes channels x height x width floats (C, H, W) to `out`: the image
 * converted to `channels` (1 or 3), resized to height x width (bilinear,
 * PIL's filter, see above) and scaled to [0, 1] (pixel / 255). */
dp_status_t dp_image_to_input(const dp_image_t *image, int channels, int height, int width,
                              float *out);

#endif
