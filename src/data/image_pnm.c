/* image_pnm.c - PGM and PPM: P2 (ASCII) and P5 (binary) gray, P3 and P6 RGB,
 * maxval 1..65535 (2 big-endian bytes a sample above 255), comments ('#'
 * to the end of the line) between header tokens and between P2/P3 samples.
 * A sample v becomes round(v / maxval * 255) in double, halves to even:
 * PIL's PPM decoder (which clamps binary samples above maxval to 255, as
 * here, and refuses such ASCII samples, as here too).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

typedef struct {
    int ascii, channels;
    long width, height, maxval;
    size_t data_start; /* first byte of the samples */
} pnm_header_t;

/* Skips whitespace and '#' comments (to the end of the line). */
static void pnm_skip_space(const unsigned char *data, size_t size, size_t *pos) {
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

/* A decimal number <= limit; -1 if there is none, -2 if it is too large,
 * -3 if the bytes end before it. *at_end: the bytes end right after it (a
 * header is then cut short; the last ASCII sample may end the file). */
static long pnm_number(const unsigned char *data, size_t size, size_t *pos, long limit, int *at_end) {
    *at_end = 0;
    pnm_skip_space(data, size, pos);
    if (*pos >= size) return -3;
    if (data[*pos] < '0' || data[*pos] > '9') return -1;
    long value = 0;
    while (*pos < size && data[*pos] >= '0' && data[*pos] <= '9') {
        value = value * 10 + (data[*pos] - '0');
        if (value > limit) return -2;
        (*pos)++;
    }
    *at_end = *pos >= size;
    return value;
}

static dp_status_t pnm_header(const unsigned char *data, size_t size, const char *name, pnm_header_t *h,
                              int *need_more) {
    *need_more = 0;
    char kind = (char)data[1];
    const char *what = kind == '2' || kind == '5' ? "PGM" : "PPM";
    h->ascii = kind == '2' || kind == '3';
    h->channels = kind == '3' || kind == '6' ? 3 : 1;
    size_t pos = 2;
    static const char *const fields[3] = {"width", "height", "maxval"};
    long values[3];
    for (int i = 0; i < 3; i++) {
        long limit = i == 2 ? 65535 : 1L << 20;
        int at_end;
        values[i] = pnm_number(data, size, &pos, limit, &at_end);
        if (values[i] == -3 || at_end) *need_more = 1;
        if (values[i] == -1 || values[i] == -3)
            return dp_fail(DP_ERR_FORMAT, "%s: bad %s header: %s missing (truncated or not a number)", name, what,
                           fields[i]);
        if (values[i] == -2)
            return dp_fail(DP_ERR_FORMAT, "%s: bad %s header: %s larger than %ld", name, what, fields[i], limit);
        if (values[i] == 0) return dp_fail(DP_ERR_FORMAT, "%s: bad %s header: %s is 0", name, what, fields[i]);
    }
    h->width = values[0];
    h->height = values[1];
    h->maxval = values[2];
    if ((size_t)h->width * (size_t)h->height > DP_IMAGE_MAX_PIXELS)
        return dp_fail(DP_ERR_FORMAT, "%s: %s of %ld x %ld pixels is more than the %zu allowed", name, what,
                       h->width, h->height, DP_IMAGE_MAX_PIXELS);
    if (pos >= size) return dp_fail(DP_ERR_FORMAT, "%s: truncated %s: no samples after the header", name, what);
    if (!h->ascii) {
        /* Exactly one whitespace byte separates the header from the samples. */
        unsigned char c = data[pos];
        if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r'))
            return dp_fail(DP_ERR_FORMAT, "%s: bad %s header: no whitespace after maxval", name, what);
        pos++;
    }
    h->data_start = pos;
    return DP_OK;
}

dp_status_t dp_pnm_probe(const unsigned char *data, size_t size, const char *name, dp_image_info_t *info,
                         int *need_more) {
    pnm_header_t h;
    DP_TRY(pnm_header(data, size, name, &h, need_more));
    info->format = DP_IMAGE_PNM;
    info->stored_width = (int)h.width;
    info->stored_height = (int)h.height;
    info->channels = h.channels;
    info->orientation = 1;
    return DP_OK;
}

dp_status_t dp_pnm_decode(const unsigned char *data, size_t size, const char *name, int channels,
                          dp_image_t *out) {
    pnm_header_t h;
    int need_more;
    DP_TRY(pnm_header(data, size, name, &h, &need_more));
    const char *what = h.channels == 1 ? "PGM" : "PPM";
    size_t count = (size_t)h.width * (size_t)h.height * (size_t)h.channels; /* samples */
    size_t sample_bytes = h.maxval > 255 ? 2 : 1, pos = h.data_start;
    if (!h.ascii && (size - pos) / sample_bytes < count)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: truncated %s: header says %ld x %ld pixels (%zu bytes), file has %zu bytes of pixels",
                       name, what, h.width, h.height, count * sample_bytes, size - pos);
    int room = h.channels > channels ? h.channels : channels;
    unsigned char *pixels = malloc((size_t)h.width * (size_t)h.height * (size_t)room);
    if (!pixels) return dp_fail(DP_ERR_NOMEM, "%s: out of memory for %ld x %ld pixels", name, h.width, h.height);
    unsigned char table[256]; /* 8-bit samples: the scaled value of each byte */
    for (int v = 0; v < 256; v++)
        table[v] = v > h.maxval ? 255 : (unsigned char)nearbyint((double)v / (double)h.maxval * 255.0);
    for (size_t i = 0; i < count; i++) {
        long v;
        if (h.ascii) {
            int at_end;
            v = pnm_number(data, size, &pos, 65535, &at_end);
            if (v < 0) {
                free(pixels);
                return dp_fail(DP_ERR_FORMAT, "%s: truncated %s: header says %ld x %ld pixels, sample %zu is %s",
                               name, what, h.width, h.height, i,
                               v == -2 ? "larger than 65535" : "missing or not a number");
            }
            if (v > h.maxval) {
                free(pixels);
                return dp_fail(DP_ERR_FORMAT, "%s: bad %s: sample %zu is %ld, larger than maxval %ld", name, what, i,
                               v, h.maxval);
            }
        } else if (sample_bytes == 2) {
            v = (long)data[pos] << 8 | data[pos + 1]; /* big-endian */
            pos += 2;
        } else {
            v = data[pos++];
        }
        if (sample_bytes == 1) {
            pixels[i] = table[v];
        } else {
            pixels[i] = v >= h.maxval ? 255 : (unsigned char)nearbyint((double)v / (double)h.maxval * 255.0);
        }
    }
    dp_pixels_convert(pixels, h.channels, pixels, channels, (size_t)h.width * h.height);
    out->channels = channels;
    out->height = (int)h.height;
    out->width = (int)h.width;
    out->pixels = pixels;
    return DP_OK;
}
