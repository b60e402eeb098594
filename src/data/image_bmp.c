/* image_bmp.c - Windows BMP (and OS/2 1.x): 24-bit BGR and 32-bit BGRX
 * uncompressed (32-bit also BI_BITFIELDS whose red, green and blue masks
 * are whole bytes: BGRA, RGBA, XBGR ...), 1-, 4- and 8-bit palettes (a
 * palette of grays in index order is a gray image, 1 channel, as PIL's
 * "L");
 * bottom-up (positive height) or top-down rows, each padded to 4 bytes.
 * Alpha is dropped, palettes looked up (an index past the palette is
 * black), as PIL's convert("RGB") / ("L") do. 16-bit and RLE-compressed
 * files are refused with a line saying what they are.
 */
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static unsigned le16(const unsigned char *p) { return (unsigned)p[1] << 8 | p[0]; }

typedef struct {
    int width, height, top_down, bits;
    uint32_t pixel_offset;
    int shift[3];            /* 32-bit: the byte of red, green, blue (0 = lowest) */
    size_t palette_at;       /* first palette entry */
    int palette_entry_bytes; /* 4 (BGRX), 3 in OS/2 1.x files */
    int colors;              /* palette entries */
    int gray;                /* a palette of grays in index order: PIL's "L" (or "1") */
} bmp_header_t;

/* Which byte (0-3) a 32-bit mask selects; -1 unless it is one whole byte. */
static int mask_byte(uint32_t mask) {
    for (int b = 0; b < 4; b++)
        if (mask == (uint32_t)0xff << (8 * b)) return b;
    return -1;
}

static dp_status_t bmp_header(const unsigned char *data, size_t size, const char *name, bmp_header_t *h,
                              int *need_more) {
    *need_more = 0;
    memset(h, 0, sizeof *h);
    if (size < 26) {
        *need_more = 1;
        return dp_fail(DP_ERR_FORMAT, "%s: truncated BMP (%zu bytes, the headers need more)", name, size);
    }
    h->pixel_offset = le32(data + 10);
    uint32_t header_size = le32(data + 14);
    uint32_t compression = 0;
    long width, height;
    if (header_size == 12) { /* OS/2 1.x BITMAPCOREHEADER */
        width = (long)le16(data + 18);
        height = (long)le16(data + 20);
        h->bits = (int)le16(data + 24);
        h->palette_entry_bytes = 3;
    } else if (header_size == 40 || header_size == 52 || header_size == 56 || header_size == 64 ||
               header_size == 108 || header_size == 124) {
        if (size < 14 + (size_t)header_size + 12) {
            *need_more = 1;
            return dp_fail(DP_ERR_FORMAT, "%s: truncated BMP (the file ends inside its header)", name);
        }
        width = (long)(int32_t)le32(data + 18);
        height = (long)(int32_t)le32(data + 22);
        h->bits = (int)le16(data + 28);
        compression = le32(data + 30);
        h->colors = (int)(le32(data + 46) > 256 ? 257 : le32(data + 46));
        h->palette_entry_bytes = 4;
    } else {
        return dp_fail(DP_ERR_FORMAT, "%s: bad BMP: a header of %u bytes (known: 12, 40, 52, 56, 64, 108, 124)",
                       name, (unsigned)header_size);
    }
    if (compression == 1 || compression == 2)
        return dp_fail(DP_ERR_FORMAT, "%s: RLE-compressed BMP (compression %u) is not supported", name,
                       (unsigned)compression);
    if (!(compression == 0 || (compression == 3 && h->bits == 32)))
        return dp_fail(DP_ERR_FORMAT, "%s: BMP with compression %u and %d bits per pixel is not supported", name,
                       (unsigned)compression, h->bits);
    if (h->bits != 1 && h->bits != 4 && h->bits != 8 && h->bits != 24 && h->bits != 32)
        return dp_fail(DP_ERR_FORMAT, "%s: BMP with %d bits per pixel is not supported (1, 4, 8, 24, 32 are)", name,
                       h->bits);
    if (width <= 0 || height == 0 || height == -2147483648L || width > (1L << 20) || labs(height) > (1L << 20))
        return dp_fail(DP_ERR_FORMAT, "%s: bad BMP: %ld x %ld pixels", name, width, height);
    h->width = (int)width;
    h->top_down = height < 0;
    h->height = (int)labs(height);
    if ((size_t)h->width * (size_t)h->height > DP_IMAGE_MAX_PIXELS)
        return dp_fail(DP_ERR_FORMAT, "%s: BMP of %d x %d pixels is more than the %zu allowed", name, h->width,
                       h->height, DP_IMAGE_MAX_PIXELS);
    h->shift[0] = 2, h->shift[1] = 1, h->shift[2] = 0; /* BGR(X) */
    if (compression == 3) {
        /* masks inside a V2+ header, or right after a 40-byte one */
        const unsigned char *m = data + 14 + 40;
        if (size < 14 + 40 + 12) {
            *need_more = 1;
            return dp_fail(DP_ERR_FORMAT, "%s: truncated BMP (the file ends inside its masks)", name);
        }
        for (int c = 0; c < 3; c++) h->shift[c] = mask_byte(le32(m + 4 * c));
        if (h->shift[0] < 0 || h->shift[1] < 0 || h->shift[2] < 0 || h->shift[0] == h->shift[1] ||
            h->shift[1] == h->shift[2] || h->shift[0] == h->shift[2])
            return dp_fail(DP_ERR_FORMAT,
                           "%s: 32-bit BMP with masks %08x %08x %08x is not supported (whole bytes are)", name,
                           (unsigned)le32(m), (unsigned)le32(m + 4), (unsigned)le32(m + 8));
    }
    if (h->bits > 8) h->colors = 0; /* the field means nothing without a palette */
    if (h->bits <= 8) {
        int most = 1 << h->bits;
        if (h->colors == 0 || h->colors > most) h->colors = most;
        h->palette_at = 14 + (size_t)header_size;
        size_t need = h->palette_at + (size_t)h->colors * (size_t)h->palette_entry_bytes;
        if (size < need) {
            *need_more = 1;
            return dp_fail(DP_ERR_FORMAT, "%s: truncated BMP (the file ends inside its palette)", name);
        }
        /* PIL's test: entry i is (v, v, v) with v = i, or 0 and 255 for two colours */
        h->gray = 1;
        for (int i = 0; i < h->colors && h->gray; i++) {
            const unsigned char *e = data + h->palette_at + (size_t)i * (size_t)h->palette_entry_bytes;
            int v = h->colors == 2 ? 255 * i : i;
            h->gray = e[0] == v && e[1] == v && e[2] == v;
        }
    }
    return DP_OK;
}

dp_status_t dp_bmp_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more) {
    bmp_header_t h;
    DP_TRY(bmp_header(data, size, name, &h, need_more));
    info->format = DP_IMAGE_BMP;
    info->stored_width = h.width;
    info->stored_height = h.height;
    info->channels = h.gray ? 1 : 3;
    info->orientation = 1;
    return DP_OK;
}

dp_status_t dp_bmp_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out) {
    bmp_header_t h;
    int need_more;
    DP_TRY(bmp_header(data, size, name, &h, &need_more));
    size_t stride = ((size_t)h.width * (size_t)h.bits + 31) / 32 * 4;
    if (h.pixel_offset > size || (size - h.pixel_offset) / stride < (size_t)h.height)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated BMP: %d rows of %zu bytes from byte %u, file has %zu bytes",
                       name, h.height, stride, (unsigned)h.pixel_offset, size);
    unsigned char palette[256][3];
    memset(palette, 0, sizeof palette);
    for (int i = 0; i < h.colors && i < 256; i++) {
        const unsigned char *e = data + h.palette_at + (size_t)i * (size_t)h.palette_entry_bytes;
        palette[i][0] = e[2], palette[i][1] = e[1], palette[i][2] = e[0];
    }
    unsigned char *pixels = malloc((size_t)h.width * (size_t)h.height * 3);
    if (!pixels) return dp_fail(DP_ERR_NOMEM, "%s: out of memory for %d x %d pixels", name, h.width, h.height);
    for (int y = 0; y < h.height; y++) {
        const unsigned char *row = data + h.pixel_offset + (size_t)(h.top_down ? y : h.height - 1 - y) * stride;
        unsigned char *dst = pixels + (size_t)y * h.width * 3;
        for (int x = 0; x < h.width; x++, dst += 3) {
            if (h.bits == 24) {
                dst[0] = row[3 * x + 2], dst[1] = row[3 * x + 1], dst[2] = row[3 * x];
            } else if (h.bits == 32) {
                for (int c = 0; c < 3; c++) dst[c] = row[4 * x + h.shift[c]];
            } else {
                int per_byte = 8 / h.bits;
                unsigned byte = row[x / per_byte];
                unsigned index = (byte >> (8 - h.bits * (x % per_byte + 1))) & ((1u << h.bits) - 1);
                memcpy(dst, palette[index], 3); /* entries past the palette's are black */
            }
        }
    }
    dp_pixels_convert(pixels, 3, pixels, channels, (size_t)h.width * h.height);
    out->channels = channels;
    out->height = h.height;
    out->width = h.width;
    out->pixels = pixels;
    return DP_OK;
}
