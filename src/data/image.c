/* image.c - PNG (libpng) and PGM (P2/P5) decoding to 8-bit pixels, and the
 * conversion of an image to a model's float input (channels, PIL-style
 * bilinear resize, / 255). The formats and choices are in image.h.
 *
 * The whole file is read into memory first, so a truncated file is found by
 * the decoder (which never reads past the bytes it was given) and the same
 * code serves dp_image_decode (tests, fuzzing).
 */
#include "dptrain/image.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Files larger than this are not images we want (1 GiB). */
#define MAX_FILE_BYTES ((size_t)1 << 30)

void dp_image_free(dp_image_t *image) {
    if (!image) return;
    free(image->pixels);
    memset(image, 0, sizeof *image);
}

/* --- PNG --------------------------------------------------------------------- */

typedef struct {
    const unsigned char *data;
    size_t size, pos;
    char message[200]; /* libpng's error, or ours */
    jmp_buf jump;
} png_source_t;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_source_t *src = png_get_error_ptr(png);
    snprintf(src->message, sizeof src->message, "%s", msg);
    longjmp(src->jump, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* warnings (e.g. an unknown ancillary chunk) do not stop decoding */
}

static void png_read_from_memory(png_structp png, png_bytep dst, png_size_t length) {
    png_source_t *src = png_get_io_ptr(png);
    if (length > src->size - src->pos) png_error(png, "truncated PNG (file ends inside the image data)");
    memcpy(dst, src->data + src->pos, length);
    src->pos += length;
}

static dp_status_t decode_png(const unsigned char *data, size_t size, const char *name, dp_image_t *out) {
    png_source_t src = {.data = data, .size = size, .pos = 0};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (!png) return dp_fail(DP_ERR_NOMEM, "%s: out of memory starting the PNG decoder", name);
    png_infop info = png_create_info_struct(png);
    /* volatile: modified between setjmp and a longjmp back to it. */
    unsigned char *volatile pixels = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory starting the PNG decoder", name);
    }
    if (setjmp(src.jump)) {
        free(pixels);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return dp_fail(DP_ERR_FORMAT, "%s: bad PNG: %s", name, src.message);
    }
    png_set_read_fn(png, &src, png_read_from_memory);
    png_set_user_limits(png, 1u << 20, 1u << 20);
    png_read_info(png, info);
    png_uint_32 width = 0, height = 0;
    int bit_depth = 0, color_type = 0;
    png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, NULL, NULL, NULL);
    if ((size_t)width * height > DP_IMAGE_MAX_PIXELS) {
        snprintf(src.message, sizeof src.message, "%u x %u pixels is more than the %zu allowed",
                 (unsigned)width, (unsigned)height, DP_IMAGE_MAX_PIXELS);
        longjmp(src.jump, 1);
    }
    /* Everything to 8-bit gray or RGB, alpha dropped. */
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (bit_depth == 16) png_set_scale_16(png);
    png_set_strip_alpha(png); /* also drops a tRNS chunk's transparency */
    int passes = png_set_interlace_handling(png);
    (void)passes;
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info);
    if (channels != 1 && channels != 3) {
        snprintf(src.message, sizeof src.message, "unexpected %d channels after conversion", channels);
        longjmp(src.jump, 1);
    }
    size_t row_bytes = png_get_rowbytes(png, info);
    if (row_bytes != (size_t)width * (size_t)channels) {
        snprintf(src.message, sizeof src.message, "unexpected row size %zu", row_bytes);
        longjmp(src.jump, 1);
    }
    pixels = malloc(height > 0 ? row_bytes * height : 1);
    rows = malloc(sizeof(png_bytep) * (height ? height : 1));
    if (!pixels || !rows) {
        snprintf(src.message, sizeof src.message, "out of memory for %u x %u pixels", (unsigned)width,
                 (unsigned)height);
        longjmp(src.jump, 1);
    }
    for (png_uint_32 y = 0; y < height; y++) rows[y] = pixels + (size_t)y * row_bytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    out->channels = channels;
    out->height = (int)height;
    out->width = (int)width;
    out->pixels = pixels;
    return DP_OK;
}

/* --- PGM --------------------------------------------------------------------- */

/* Skips whitespace and '#' comments (to the end of the line). */
static void pgm_skip_space(const unsigned char *data, size_t size, size_t *pos) {
    while (*pos < size) {
        unsigned char c = data[*pos];
        if (c == '#') {
            while (*pos < size && data[*pos] != '\n' && data[*pos] != '\r') (*pos)++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
            (*pos)++;
        } else {
            return;
        }
    }
}

/* A decimal number <= limit; -1 if there is none, -2 if it is too large. */
static long pgm_number(const unsigned char *data, size_t size, size_t *pos, long limit) {
    pgm_skip_space(data, size, pos);
    if (*pos >= size || data[*pos] < '0' || data[*pos] > '9') return -1;
    long value = 0;
    while (*pos < size && data[*pos] >= '0' && data[*pos] <= '9') {
        value = value * 10 + (data[*pos] - '0');
        if (value > limit) return -2;
        (*pos)++;
    }
    return value;
}

static dp_status_t decode_pgm(const unsigned char *data, size_t size, const char *name, dp_image_t *out) {
    int ascii = data[1] == '2';
    size_t pos = 2;
    static const char *const fields[3] = {"width", "height", "maxval"};
    long values[3];
    for (int i = 0; i < 3; i++) {
        long limit = i == 2 ? 65535 : 1L << 20;
        values[i] = pgm_number(data, size, &pos, limit);
        if (values[i] == -1)
            return dp_fail(DP_ERR_FORMAT, "%s: bad PGM header: %s missing (truncated or not a number)", name,
                           fields[i]);
        if (values[i] == -2)
            return dp_fail(DP_ERR_FORMAT, "%s: bad PGM header: %s larger than %ld", name, fields[i], limit);
        if (values[i] == 0) return dp_fail(DP_ERR_FORMAT, "%s: bad PGM header: %s is 0", name, fields[i]);
    }
    long width = values[0], height = values[1], maxval = values[2];
    if ((size_t)width * (size_t)height > DP_IMAGE_MAX_PIXELS)
        return dp_fail(DP_ERR_FORMAT, "%s: PGM of %ld x %ld pixels is more than the %zu allowed", name, width,
                       height, DP_IMAGE_MAX_PIXELS);
    size_t count = (size_t)width * (size_t)height;
    size_t sample_bytes = maxval > 255 ? 2 : 1;
    if (!ascii) {
        /* Exactly one whitespace byte separates the header from the samples. */
        if (pos >= size || !(data[pos] == ' ' || data[pos] == '\t' || data[pos] == '\n' || data[pos] == '\r'))
            return dp_fail(DP_ERR_FORMAT, "%s: bad PGM header: no whitespace after maxval", name);
        pos++;
        if (size - pos < count * sample_bytes)
            return dp_fail(DP_ERR_FORMAT,
                           "%s: truncated PGM: header says %ld x %ld pixels (%zu bytes), file has %zu bytes of pixels",
                           name, width, height, count * sample_bytes, size - pos);
    }
    unsigned char *pixels = malloc(count);
    if (!pixels) return dp_fail(DP_ERR_NOMEM, "%s: out of memory for %ld x %ld pixels", name, width, height);
    for (size_t i = 0; i < count; i++) {
        long v;
        if (ascii) {
            v = pgm_number(data, size, &pos, 65535);
            if (v < 0) {
                free(pixels);
                return dp_fail(DP_ERR_FORMAT, "%s: truncated PGM: header says %ld x %ld pixels, sample %zu is %s",
                               name, width, height, i, v == -1 ? "missing or not a number" : "larger than 65535");
            }
        } else if (sample_bytes == 2) {
            v = (long)data[pos] << 8 | data[pos + 1]; /* big-endian */
            pos += 2;
        } else {
            v = data[pos++];
        }
        if (v > maxval) {
            free(pixels);
            return dp_fail(DP_ERR_FORMAT, "%s: bad PGM: sample %zu is %ld, larger than maxval %ld", name, i, v,
                           maxval);
        }
        pixels[i] = (unsigned char)((v * 255 + maxval / 2) / maxval);
    }
    out->channels = 1;
    out->height = (int)height;
    out->width = (int)width;
    out->pixels = pixels;
    return DP_OK;
}

/* --- reading ------------------------------------------------------------------ */

dp_status_t dp_image_decode(const void *data, size_t size, const char *name, dp_image_t *out) {
    memset(out, 0, sizeof *out);
    const unsigned char *bytes = data;
    static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && memcmp(bytes, png_signature, 8) == 0) return decode_png(bytes, size, name, out);
    if (size >= 2 && bytes[0] == 'P' && (bytes[1] == '2' || bytes[1] == '5')) return decode_pgm(bytes, size, name, out);
    if (size == 0) return dp_fail(DP_ERR_FORMAT, "%s: empty file, not a PNG or PGM image", name);
    return dp_fail(DP_ERR_FORMAT, "%s: not a PNG or PGM (P2/P5) image", name);
}

dp_status_t dp_image_read(const char *path, dp_image_t *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open image: %s", path, strerror(errno));
    size_t capacity = 1 << 16, size = 0;
    unsigned char *data = malloc(capacity);
    if (!data) {
        fclose(f);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the image", path);
    }
    for (;;) {
        if (size == capacity) {
            if (capacity >= MAX_FILE_BYTES) {
                free(data);
                fclose(f);
                return dp_fail(DP_ERR_FORMAT, "%s: larger than %zu bytes, not read as an image", path,
                               MAX_FILE_BYTES);
            }
            unsigned char *grown = realloc(data, capacity * 2);
            if (!grown) {
                free(data);
                fclose(f);
                return dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the image", path);
            }
            data = grown;
            capacity *= 2;
        }
        size_t n = fread(data + size, 1, capacity - size, f);
        size += n;
        if (n == 0) break;
    }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(data);
        return dp_fail(DP_ERR_IO, "%s: cannot read image (a directory, or an I/O error)", path);
    }
    dp_status_t status = dp_image_decode(data, size, path, out);
    free(data);
    return status;
}

/* --- to a model's input --------------------------------------------------------- */

/* PIL's resampling weights for one axis (ImagingResample's precompute with
 * the bilinear filter): for output index o, taps [first[o], first[o] +
 * taps[o]) with weights weights[o * max_taps ...], summing to 1. */
typedef struct {
    int *first, *taps;
    float *weights;
    int max_taps;
} resample_axis_t;

static float triangle(double x) {
    if (x < 0) x = -x;
    return x < 1 ? (float)(1 - x) : 0.0f;
}

static dp_status_t resample_axis_init(resample_axis_t *axis, int in_size, int out_size) {
    double scale = (double)in_size / out_size;
    double filter_scale = scale < 1 ? 1 : scale;
    double support = filter_scale; /* bilinear: support 1, widened when shrinking */
    axis->max_taps = (int)ceil(support) * 2 + 1;
    axis->first = malloc(sizeof(int) * (size_t)out_size);
    axis->taps = malloc(sizeof(int) * (size_t)out_size);
    axis->weights = malloc(sizeof(float) * (size_t)out_size * (size_t)axis->max_taps);
    if (!axis->first || !axis->taps || !axis->weights) {
        free(axis->first);
        free(axis->taps);
        free(axis->weights);
        return dp_fail(DP_ERR_NOMEM, "out of memory for the resize weights (%d -> %d)", in_size, out_size);
    }
    for (int o = 0; o < out_size; o++) {
        double center = (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in_size) hi = in_size;
        int n = hi - lo;
        if (n > axis->max_taps) n = axis->max_taps;
        float *w = axis->weights + (size_t)o * axis->max_taps;
        double total = 0;
        for (int k = 0; k < n; k++) {
            w[k] = triangle((k + lo - center + 0.5) / filter_scale);
            total += w[k];
        }
        for (int k = 0; k < n; k++) w[k] = total > 0 ? (float)(w[k] / total) : 0.0f;
        axis->first[o] = lo;
        axis->taps[o] = n;
    }
    return DP_OK;
}

static void resample_axis_free(resample_axis_t *axis) {
    free(axis->first);
    free(axis->taps);
    free(axis->weights);
}

dp_status_t dp_image_to_input(const dp_image_t *image, int channels, int height, int width, float *out) {
    if (channels != 1 && channels != 3)
        return dp_fail(DP_ERR_ARG, "image input: %d channels (1 or 3 supported)", channels);
    if (height <= 0 || width <= 0) return dp_fail(DP_ERR_ARG, "image input: size %d x %d", height, width);
    if (!image->pixels || (image->channels != 1 && image->channels != 3) || image->height <= 0 ||
        image->width <= 0)
        return dp_fail(DP_ERR_ARG, "image input: not a decoded image");
    int in_h = image->height, in_w = image->width;
    size_t plane = (size_t)in_h * in_w;
    /* (channels, in_h, in_w) floats in [0, 255] after the channel conversion. */
    float *converted = malloc(sizeof(float) * plane * (size_t)channels);
    /* (channels, in_h, width) after the horizontal pass. */
    float *horizontal = malloc(sizeof(float) * (size_t)in_h * width * (size_t)channels);
    resample_axis_t ax = {0}, ay = {0};
    dp_status_t status = DP_OK;
    if (!converted || !horizontal) {
        status = dp_fail(DP_ERR_NOMEM, "image input: out of memory");
        goto done;
    }
    const unsigned char *px = image->pixels;
    for (size_t i = 0; i < plane; i++) {
        if (image->channels == channels) {
            for (int c = 0; c < channels; c++) converted[c * plane + i] = px[i * channels + c];
        } else if (channels == 1) { /* RGB -> L (ITU-R 601-2 luma) */
            const unsigned char *p = px + i * 3;
            converted[i] = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
        } else { /* L -> RGB */
            for (int c = 0; c < 3; c++) converted[c * plane + i] = px[i];
        }
    }
    if ((status = resample_axis_init(&ax, in_w, width)) != DP_OK) goto done;
    if ((status = resample_axis_init(&ay, in_h, height)) != DP_OK) {
        resample_axis_free(&ax);
        ax = (resample_axis_t){0};
        goto done;
    }
    for (int c = 0; c < channels; c++) {
        for (int y = 0; y < in_h; y++) {
            const float *src = converted + c * plane + (size_t)y * in_w;
            float *dst = horizontal + ((size_t)c * in_h + y) * width;
            for (int x = 0; x < width; x++) {
                const float *w = ax.weights + (size_t)x * ax.max_taps;
                double sum = 0;
                for (int k = 0; k < ax.taps[x]; k++) sum += (double)w[k] * src[ax.first[x] + k];
                dst[x] = (float)sum;
            }
        }
        for (int y = 0; y < height; y++) {
            const float *w = ay.weights + (size_t)y * ay.max_taps;
            float *dst = out + ((size_t)c * height + y) * width;
            for (int x = 0; x < width; x++) {
                double sum = 0;
                for (int k = 0; k < ay.taps[y]; k++)
                    sum += (double)w[k] * horizontal[((size_t)c * in_h + ay.first[y] + k) * width + x];
                dst[x] = (float)sum * (1.0f / 255.0f); /* as dp_dataset_fill */
            }
        }
    }
done:
    if (ax.first) resample_axis_free(&ax);
    if (ay.first) resample_axis_free(&ay);
    free(converted);
    free(horizontal);
    return status;
}
