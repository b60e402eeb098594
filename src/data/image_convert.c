/* image_convert.c - PIL's mode conversions between L, RGB and CMYK, to the
 * bit (Pillow's Convert.c arithmetic, checked against PIL by
 * test_image_formats): RGB -> L by integer luma (dp_luma), L -> RGB by
 * copying, CMYK -> RGB as (255 - K) - C (255 - K) / 255 with Pillow's
 * rounded division by 255, CMYK -> L through RGB (PIL has no direct one).
 */
#include <string.h>

#include "image_internal.h"

/* Pillow's MULDIV255: a * b / 255 rounded, for a, b in 0..255. */
static inline unsigned muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static inline void cmyk_to_rgb(const unsigned char *cmyk, unsigned char *rgb) {
    unsigned nk = 255u - cmyk[3];
    for (int c = 0; c < 3; c++) rgb[c] = (unsigned char)(nk - muldiv255(cmyk[c], nk)); /* never below 0 */
}

void dp_pixels_convert(const unsigned char *src, int from, unsigned char *dst, int to, size_t count) {
    if (from == to) {
        if (dst != src) memmove(dst, src, count * (size_t)from);
        return;
    }
    if (from == 1) { /* L -> RGB: backwards, so that dst may grow over src */
        for (size_t i = count; i-- > 0;) {
            unsigned char v = src[i];
            dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = v;
        }
        return;
    }
    for (size_t i = 0; i < count; i++) {
        unsigned char rgb[3];
        if (from == 4) {
            cmyk_to_rgb(src + 4 * i, rgb);
        } else {
            memcpy(rgb, src + 3 * i, 3);
        }
        if (to == 1) {
            dst[i] = dp_luma(rgb[0], rgb[1], rgb[2]);
        } else {
            memcpy(dst + 3 * i, rgb, 3);
        }
    }
}
