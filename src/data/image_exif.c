/* image_exif.c - the EXIF orientation: reading tag 0x0112 from the TIFF
 * structure of an EXIF block, and PIL's ImageOps.exif_transpose as
 * geometry (sizes, rectangles) and as a pixel copy.
 *
 * Orientation o maps an oriented pixel (x, y) to the stored pixel (u, v)
 * of a stored W x H image (PIL's transpose methods):
 *   1 u = x,         v = y           (as stored)
 *   2 u = W - 1 - x, v = y           (FLIP_LEFT_RIGHT)
 *   3 u = W - 1 - x, v = H - 1 - y   (ROTATE_180)
 *   4 u = x,         v = H - 1 - y   (FLIP_TOP_BOTTOM)
 *   5 u = y,         v = x           (TRANSPOSE)
 *   6 u = y,         v = H - 1 - x   (ROTATE_270: a quarter turn clockwise)
 *   7 u = W - 1 - y, v = H - 1 - x   (TRANSVERSE)
 *   8 u = W - 1 - y, v = x           (ROTATE_90: a quarter turn counter-clockwise)
 * i.e. 5-8 swap the axes (t), then u is mirrored for 2, 3, 7, 8 and v for
 * 3, 4, 6, 7.
 */
#include <string.h>

#include "image_internal.h"

static unsigned read16(const unsigned char *p, int big_endian) {
    return big_endian ? (unsigned)p[0] << 8 | p[1] : (unsigned)p[1] << 8 | p[0];
}

static uint32_t read32(const unsigned char *p, int big_endian) {
    return big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                      : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int dp_exif_orientation(const unsigned char *tiff, size_t size) {
    if (size < 8) return 1;
    int big_endian;
    if (tiff[0] == 'I' && tiff[1] == 'I') {
        big_endian = 0;
    } else if (tiff[0] == 'M' && tiff[1] == 'M') {
        big_endian = 1;
    } else {
        return 1;
    }
    if (read16(tiff + 2, big_endian) != 42) return 1;
    uint32_t ifd = read32(tiff + 4, big_endian);
    if (ifd > size || size - ifd < 2) return 1;
    unsigned entries = read16(tiff + ifd, big_endian);
    for (unsigned i = 0; i < entries; i++) {
        size_t at = (size_t)ifd + 2 + (size_t)i * 12;
        if (at + 12 > size) return 1;
        const unsigned char *e = tiff + at;
        if (read16(e, big_endian) != 0x0112) continue;
        unsigned type = read16(e + 2, big_endian);
        uint32_t count = read32(e + 4, big_endian);
        unsigned value;
        if (type == 3 && count >= 1) { /* SHORT: the first value, left-justified in the field */
            value = read16(e + 8, big_endian);
        } else if (type == 4 && count == 1) { /* LONG */
            value = (unsigned)read32(e + 8, big_endian);
        } else {
            return 1;
        }
        return value >= 1 && value <= 8 ? (int)value : 1;
    }
    return 1;
}

typedef struct {
    int transpose, mirror_u, mirror_v;
} orientation_t;

static orientation_t orientation_of(int o) {
    orientation_t r = {o >= 5 && o <= 8, o == 2 || o == 3 || o == 7 || o == 8, o == 3 || o == 4 || o == 6 || o == 7};
    return r;
}

void dp_orient_size(int orientation, int width, int height, int *out_width, int *out_height) {
    int t = orientation_of(orientation).transpose;
    *out_width = t ? height : width;
    *out_height = t ? width : height;
}

/* [first, first + count) of an axis of `size` pixels, mirrored or not. */
static void mirror_range(int mirror, int size, int first, int count, int *out_first) {
    *out_first = mirror ? size - (first + count) : first;
}

dp_crop_box_t dp_orient_box_to_stored(int orientation, int stored_width, int stored_height, dp_crop_box_t box) {
    orientation_t o = orientation_of(orientation);
    /* a: the oriented axis that becomes u, b: the one that becomes v */
    int a_first = o.transpose ? box.top : box.left, a_count = o.transpose ? box.height : box.width;
    int b_first = o.transpose ? box.left : box.top, b_count = o.transpose ? box.width : box.height;
    dp_crop_box_t stored = {.width = a_count, .height = b_count};
    mirror_range(o.mirror_u, stored_width, a_first, a_count, &stored.left);
    mirror_range(o.mirror_v, stored_height, b_first, b_count, &stored.top);
    return stored;
}

dp_crop_box_t dp_orient_box_from_stored(int orientation, int stored_width, int stored_height, dp_crop_box_t box) {
    orientation_t o = orientation_of(orientation);
    int a_first, b_first;
    mirror_range(o.mirror_u, stored_width, box.left, box.width, &a_first);
    mirror_range(o.mirror_v, stored_height, box.top, box.height, &b_first);
    dp_crop_box_t oriented;
    if (o.transpose) {
        oriented = (dp_crop_box_t){.top = a_first, .height = box.width, .left = b_first, .width = box.height};
    } else {
        oriented = (dp_crop_box_t){.top = b_first, .height = box.height, .left = a_first, .width = box.width};
    }
    return oriented;
}

void dp_orient_pixels(int orientation, int stored_width, int stored_height, const unsigned char *src,
                      dp_crop_box_t src_box, int channels, unsigned char *dst) {
    orientation_t o = orientation_of(orientation);
    dp_crop_box_t ob = dp_orient_box_from_stored(orientation, stored_width, stored_height, src_box);
    size_t src_row = (size_t)src_box.width * channels;
    /* Stepping one oriented column moves (du, dv) in the stored image. */
    long du = o.transpose ? 0 : (o.mirror_u ? -1 : 1), dv = o.transpose ? (o.mirror_v ? -1 : 1) : 0;
    for (int y = 0; y < ob.height; y++) {
        int gx = ob.left, gy = ob.top + y; /* the row's first pixel, oriented image coordinates */
        int a = o.transpose ? gy : gx, b = o.transpose ? gx : gy;
        int u = o.mirror_u ? stored_width - 1 - a : a, v = o.mirror_v ? stored_height - 1 - b : b;
        const unsigned char *s = src + (size_t)(v - src_box.top) * src_row + (size_t)(u - src_box.left) * channels;
        long step = (dv * (long)src_box.width + du) * channels;
        unsigned char *d = dst + (size_t)y * ob.width * channels;
        if (channels == 1) {
            for (int x = 0; x < ob.width; x++) d[x] = s[x * step];
        } else {
            for (int x = 0; x < ob.width; x++) memcpy(d + (size_t)x * channels, s + x * step, (size_t)channels);
        }
    }
}
