/* image_jpeg.c - JPEG: the header probe (a walk over the markers up to the
 * first scan: the frame header's size and components, the first APP1
 * Exif segment's orientation) and the decoder, through libjpeg-turbo's
 * libjpeg API (jpeglib.h; image.h says why not TurboJPEG).
 *
 * The decoder takes a rectangle and a DCT scale: it asks libjpeg for 1 /
 * scale_denom of the size (scale_num / scale_denom), skips the rows above
 * the rectangle (jpeg_skip_scanlines), decodes only the iMCU columns that
 * hold it (jpeg_crop_scanline) and stops after its last row. Everything
 * else is as PIL decodes: the integer slow DCT (JDCT_ISLOW) and fancy
 * upsampling, libjpeg's defaults; gray -> L, YCbCr and RGB -> RGB, CMYK
 * and YCCK -> CMYK inverted (PIL's "CMYK;I": Adobe's convention, which PIL
 * assumes for every CMYK JPEG), then PIL's conversions (image_convert.c).
 * libjpeg's errors come back by longjmp and become one line naming the
 * file; its warnings are ignored (it recovers from corrupt data as PIL's
 * decoding does) except the premature end of the file, an error here.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "image_internal.h"

/* --- the probe ----------------------------------------------------------------- */

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }

static int is_frame_marker(int m) { return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc; }

dp_status_t dp_jpeg_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                          int *need_more) {
    *need_more = 0;
    int have_frame = 0, have_exif = 0;
    info->format = DP_IMAGE_JPEG;
    info->orientation = 1;
    size_t pos = 2;
    for (;;) {
        while (pos < size && data[pos] != 0xff) pos++; /* junk between segments: skipped, as PIL and libjpeg do */
        while (pos < size && data[pos] == 0xff) pos++; /* fill bytes */
        if (pos >= size) break;
        int marker = data[pos++];
        if (marker == 0xd8 || marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) continue; /* no length */
        if (marker == 0xd9) return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: the file ends (EOI) before any image", name);
        if (size - pos < 2) break;
        unsigned length = be16(data + pos);
        if (length < 2) return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: a marker segment of length %u", name, length);
        if (marker == 0xda) { /* start of scan: the header is over */
            if (!have_frame) return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: a scan before the frame header", name);
            return DP_OK;
        }
        if (size - pos < length) break;
        const unsigned char *segment = data + pos + 2;
        size_t body = length - 2;
        if (marker == 0xe1 && !have_exif && body >= 6 && memcmp(segment, "Exif\0\0", 6) == 0) {
            have_exif = 1;
            info->orientation = dp_exif_orientation(segment + 6, body - 6);
        } else if (is_frame_marker(marker) && !have_frame) {
            if (marker != 0xc0 && marker != 0xc1 && marker != 0xc2 && marker != 0xc9 && marker != 0xca)
                return dp_fail(DP_ERR_FORMAT, "%s: JPEG of a kind libjpeg does not decode (SOF%d: %s)", name,
                               marker - 0xc0, marker == 0xc3 || marker == 0xcb ? "lossless" : "hierarchical");
            if (body < 6) return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: a frame header of %zu bytes", name, body);
            int precision = segment[0], height = (int)be16(segment + 1), width = (int)be16(segment + 3);
            int components = segment[5];
            if (precision != 8)
                return dp_fail(DP_ERR_FORMAT, "%s: %d-bit JPEG is not supported (8-bit is)", name, precision);
            if (width == 0 || height == 0)
                return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: the frame header says %d x %d pixels", name, width,
                               height);
            if (components != 1 && components != 3 && components != 4)
                return dp_fail(DP_ERR_FORMAT, "%s: JPEG with %d components is not supported (1, 3, 4 are)", name,
                               components);
            if ((size_t)width * height > DP_IMAGE_MAX_PIXELS)
                return dp_fail(DP_ERR_FORMAT, "%s: JPEG of %d x %d pixels is more than the %zu allowed", name, width,
                               height, DP_IMAGE_MAX_PIXELS);
            info->stored_width = width;
            info->stored_height = height;
            info->channels = components == 1 ? 1 : 3;
            have_frame = 1;
        }
        pos += length;
    }
    *need_more = 1;
    return dp_fail(DP_ERR_FORMAT, "%s: truncated JPEG (the file ends in its header, at byte %zu)", name, size);
}

/* --- the decoder ---------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_errors_t;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_errors_t *errors = (jpeg_errors_t *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, errors->message);
    longjmp(errors->jump, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo); /* truncated */
}

void dp_jpeg_scaled_size(int width, int height, int scale_denom, int *scaled_width, int *scaled_height) {
    *scaled_width = (width + scale_denom - 1) / scale_denom;
    *scaled_height = (height + scale_denom - 1) / scale_denom;
}

/* [first - margin, first + count + margin) within [0, size): a clamp in 64 bits. */
static void widen(long long first, long long count, int margin, int size, int *lo, int *hi) {
    long long a = first - margin, b = first + count + margin;
    *lo = (int)(a < 0 ? 0 : a > size ? size : a);
    *hi = (int)(b < 0 ? 0 : b > size ? size : b);
}

/* After jpeg_start_decompress: reads rows [y0, y1) of the (cropped) output into *pixels. */
static void read_rows(struct jpeg_decompress_struct *cinfo, int y0, int y1, unsigned char *pixels) {
    size_t row_bytes = (size_t)cinfo->output_width * (size_t)cinfo->output_components;
    if (y0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
    while ((int)cinfo->output_scanline < y1) {
        JSAMPROW row = pixels + (size_t)((int)cinfo->output_scanline - y0) * row_bytes;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) ERREXIT(cinfo, JERR_INPUT_EMPTY);
    }
}

dp_status_t dp_jpeg_decode_region(const unsigned char *data, size_t size, const char *name, int channels,
                                  int expect_width, int expect_height, int scale_denom, dp_crop_box_t want,
                                  int margin, dp_image_t *out, dp_crop_box_t *got) {
    struct jpeg_decompress_struct cinfo;
    jpeg_errors_t errors;
    unsigned char *volatile pixels = NULL;
    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = jpeg_on_error;
    errors.pub.emit_message = jpeg_on_message;
    errors.message[0] = 0;
    if (setjmp(errors.jump)) {
        free(pixels);
        jpeg_destroy_decompress(&cinfo);
        return dp_fail(DP_ERR_FORMAT, "%s: bad JPEG: %s", name, errors.message);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    if (expect_width && ((int)cinfo.image_width != expect_width || (int)cinfo.image_height != expect_height)) {
        snprintf(errors.message, sizeof errors.message, "libjpeg reads %u x %u pixels, its markers say %d x %d",
                 (unsigned)cinfo.image_width, (unsigned)cinfo.image_height, expect_width, expect_height);
        longjmp(errors.jump, 1);
    }
    if ((size_t)cinfo.image_width * cinfo.image_height > DP_IMAGE_MAX_PIXELS) {
        snprintf(errors.message, sizeof errors.message, "%u x %u pixels is more than the %zu allowed",
                 (unsigned)cinfo.image_width, (unsigned)cinfo.image_height, DP_IMAGE_MAX_PIXELS);
        longjmp(errors.jump, 1);
    }
    int components = cinfo.num_components;
    if (components == 1) {
        cinfo.out_color_space = JCS_GRAYSCALE;
    } else if (components == 3) {
        cinfo.out_color_space = JCS_RGB;
    } else if (components == 4) {
        cinfo.out_color_space = JCS_CMYK;
    } else {
        snprintf(errors.message, sizeof errors.message, "%d components (1, 3, 4 are supported)", components);
        longjmp(errors.jump, 1);
    }
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)scale_denom;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    int width = (int)cinfo.output_width, height = (int)cinfo.output_height;
    int x0, x1, y0, y1;
    widen(want.left, want.width, margin, width, &x0, &x1);
    widen(want.top, want.height, margin, height, &y0, &y1);
    if (x1 <= x0 || y1 <= y0) {
        snprintf(errors.message, sizeof errors.message, "the rectangle asked for lies outside the %d x %d image",
                 width, height);
        longjmp(errors.jump, 1);
    }
    if (x0 > 0 || x1 < width) {
        JDIMENSION offset = (JDIMENSION)x0, count = (JDIMENSION)(x1 - x0);
        jpeg_crop_scanline(&cinfo, &offset, &count); /* widened to whole iMCU columns */
        x0 = (int)offset;
        x1 = (int)(offset + count);
    }
    int stored = cinfo.output_components, room = stored > channels ? stored : channels;
    size_t count = (size_t)(x1 - x0) * (size_t)(y1 - y0);
    pixels = malloc(count * (size_t)room);
    if (!pixels) {
        snprintf(errors.message, sizeof errors.message, "out of memory for %d x %d pixels", x1 - x0, y1 - y0);
        longjmp(errors.jump, 1);
    }
    read_rows(&cinfo, y0, y1, pixels);
    jpeg_destroy_decompress(&cinfo); /* the rows below are not needed */
    unsigned char *result = pixels;
    if (stored == 4)
        for (size_t i = 0; i < count * 4; i++) result[i] = (unsigned char)(255 - result[i]); /* CMYK;I */
    dp_pixels_convert(result, stored, result, channels, count);
    out->channels = channels;
    out->width = x1 - x0;
    out->height = y1 - y0;
    out->pixels = result;
    *got = (dp_crop_box_t){.top = y0, .left = x0, .height = y1 - y0, .width = x1 - x0};
    return DP_OK;
}
