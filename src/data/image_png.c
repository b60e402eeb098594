/* image_png.c - PNG through libpng: the header probe (IHDR, and an eXIf
 * chunk before the image data for the orientation) and the decoder to 8-bit
 * L or RGB as PIL makes them: palettes looked up (tRNS ignored), alpha
 * dropped, 1/2/4-bit gray scaled to 0..255, 16-bit samples cut to their
 * high byte (PIL's RGB;16B, RGBA;16B, LA;16B; PIL's 16-bit gray is an "I"
 * image whose convert("L") clips: image.h says why we differ).
 *
 * libpng reports errors by longjmp; the handlers below turn them into one
 * line naming the file.
 */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* --- the probe ----------------------------------------------------------------- */

/* A chunk type for a message: its 4 letters, or hex when they are not letters. */
static const char *chunk_name(const unsigned char *type, char *buf, size_t size) {
    int letters = 1;
    for (int i = 0; i < 4; i++)
        letters &= (type[i] >= 'a' && type[i] <= 'z') || (type[i] >= 'A' && type[i] <= 'Z');
    if (letters) {
        snprintf(buf, size, "%.4s", (const char *)type);
    } else {
        snprintf(buf, size, "0x%02x%02x%02x%02x", type[0], type[1], type[2], type[3]);
    }
    return buf;
}

static int png_depth_allowed(int color_type, int depth) {
    switch (color_type) {
    case 0: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case 3: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case 2: case 4: case 6: return depth == 8 || depth == 16;
    default: return 0;
    }
}

dp_status_t dp_png_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more) {
    *need_more = 0;
    if (size < 33) {
        *need_more = 1;
        return dp_fail(DP_ERR_FORMAT, "%s: truncated PNG (%zu bytes, the header needs 33)", name, size);
    }
    if (be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4) != 0)
        return dp_fail(DP_ERR_FORMAT, "%s: bad PNG: the first chunk is not a 13-byte IHDR", name);
    uint32_t width = be32(data + 16), height = be32(data + 20);
    int depth = data[24], color_type = data[25];
    if (width == 0 || height == 0 || width > 0x7fffffffu || height > 0x7fffffffu)
        return dp_fail(DP_ERR_FORMAT, "%s: bad PNG: IHDR says %u x %u pixels", name, (unsigned)width,
                       (unsigned)height);
    if (!png_depth_allowed(color_type, depth))
        return dp_fail(DP_ERR_FORMAT, "%s: bad PNG: colour type %d with bit depth %d", name, color_type, depth);
    if ((size_t)width * height > DP_IMAGE_MAX_PIXELS)
        return dp_fail(DP_ERR_FORMAT, "%s: PNG of %u x %u pixels is more than the %zu allowed", name,
                       (unsigned)width, (unsigned)height, DP_IMAGE_MAX_PIXELS);
    info->format = DP_IMAGE_PNG;
    info->stored_width = (int)width;
    info->stored_height = (int)height;
    info->channels = color_type == 0 || color_type == 4 ? 1 : 3;
    info->orientation = 1;
    /* the chunks up to the image data: an eXIf there holds the orientation */
    size_t at = 33;
    for (;;) {
        if (size - at < 8) {
            *need_more = 1;
            return dp_fail(DP_ERR_FORMAT, "%s: truncated PNG (the file ends before the image data)", name);
        }
        uint32_t length = be32(data + at);
        const unsigned char *type = data + at + 4;
        if (memcmp(type, "IDAT", 4) == 0 || memcmp(type, "IEND", 4) == 0) return DP_OK;
        if (length > 0x7fffffffu)
            return dp_fail(DP_ERR_FORMAT, "%s: bad PNG: a chunk of %u bytes", name, (unsigned)length);
        if (size - at - 8 < (size_t)length + 4) {
            char buf[16];
            *need_more = 1;
            return dp_fail(DP_ERR_FORMAT, "%s: truncated PNG (the file ends inside a %s chunk)", name,
                           chunk_name(type, buf, sizeof buf));
        }
        if (memcmp(type, "eXIf", 4) == 0) {
            info->orientation = dp_exif_orientation(data + at + 8, length);
            return DP_OK;
        }
        at += 12 + (size_t)length;
    }
}

/* --- the decoder ---------------------------------------------------------------- */

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

dp_status_t dp_png_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out) {
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
    if (bit_depth == 16) png_set_strip_16(png); /* the high byte, as PIL */
    png_set_strip_alpha(png);                   /* also drops a tRNS chunk's transparency */
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int native = png_get_channels(png, info);
    if (native != 1 && native != 3) {
        snprintf(src.message, sizeof src.message, "unexpected %d channels after conversion", native);
        longjmp(src.jump, 1);
    }
    size_t row_bytes = png_get_rowbytes(png, info);
    if (row_bytes != (size_t)width * (size_t)native) {
        snprintf(src.message, sizeof src.message, "unexpected row size %zu", row_bytes);
        longjmp(src.jump, 1);
    }
    int room = native > channels ? native : channels; /* converted in place afterwards */
    pixels = malloc((size_t)width * height * (size_t)room);
    rows = malloc(sizeof(png_bytep) * height);
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
    dp_pixels_convert(pixels, native, pixels, channels, (size_t)width * height);
    out->channels = channels;
    out->height = (int)height;
    out->width = (int)width;
    out->pixels = pixels;
    return DP_OK;
}
