/* image.c - reading an image: the format told by its first bytes, the
 * header probe, the decoders (image_jpeg.c, image_png.c, image_pnm.c,
 * image_bmp.c) and the EXIF orientation applied after them (image_exif.c).
 * The formats and choices are in image.h.
 *
 * The whole file is read into memory first, so a truncated file is found by
 * the decoder (which never reads past the bytes it was given) and the same
 * code serves dp_image_decode (tests, fuzzing, the loader's threads).
 */
#include "dptrain/image.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

/* Files larger than this are not images we want (1 GiB). */
#define MAX_FILE_BYTES ((size_t)1 << 30)

void dp_image_free(dp_image_t *image) {
    if (!image) return;
    free(image->pixels);
    memset(image, 0, sizeof *image);
}

const char *dp_image_format_name(dp_image_format_t format) {
    switch (format) {
    case DP_IMAGE_JPEG: return "JPEG";
    case DP_IMAGE_PNG: return "PNG";
    case DP_IMAGE_PNM: return "PNM";
    case DP_IMAGE_BMP: return "BMP";
    default: return "unknown";
    }
}

dp_image_format_t dp_image_sniff(const unsigned char *data, size_t size) {
    static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && memcmp(data, png_signature, 8) == 0) return DP_IMAGE_PNG;
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return DP_IMAGE_JPEG;
    if (size >= 2 && data[0] == 'P' && (data[1] == '2' || data[1] == '3' || data[1] == '5' || data[1] == '6'))
        return DP_IMAGE_PNM;
    if (size >= 2 && data[0] == 'B' && data[1] == 'M') return DP_IMAGE_BMP;
    return DP_IMAGE_UNKNOWN;
}

/* "a NAME" of an image format dptrain does not read, by its first bytes
 * (those torchvision's ImageFolder collects beside JPEG and PNG: a folder
 * may hold them); NULL: none of them. */
static const char *unread_format(const unsigned char *data, size_t size) {
    if (size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0) return "a WebP";
    if (size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0)) return "a TIFF";
    if (size >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0)) return "a GIF";
    if (size >= 12 && memcmp(data + 4, "ftyp", 4) == 0) {
        if (memcmp(data + 8, "avif", 4) == 0 || memcmp(data + 8, "avis", 4) == 0) return "an AVIF";
        if (memcmp(data + 8, "heic", 4) == 0 || memcmp(data + 8, "heix", 4) == 0 || memcmp(data + 8, "mif1", 4) == 0)
            return "a HEIF";
    }
    return NULL;
}

static dp_status_t not_an_image(const unsigned char *data, size_t size, const char *name) {
    if (size == 0) return dp_fail(DP_ERR_FORMAT, "%s: empty file, not an image", name);
    if (size >= 2 && data[0] == 'P' && (data[1] == '1' || data[1] == '4' || data[1] == '7'))
        return dp_fail(DP_ERR_FORMAT, "%s: PBM/PAM (P%c) images are not supported (P2, P3, P5, P6 are)", name,
                       data[1]);
    const char *format = unread_format(data, size);
    if (format)
        return dp_fail(DP_ERR_FORMAT, "%s: %s image: dptrain reads JPEG, PNG, PGM/PPM and BMP (convert it to one "
                       "of those)", name, format);
    return dp_fail(DP_ERR_FORMAT, "%s: not a JPEG, PNG, PGM/PPM or BMP image (by its first bytes)", name);
}

/* The probe, also saying whether the header goes on past the bytes given. */
static dp_status_t probe(const unsigned char *data, size_t size, const char *name, int ignore_exif,
                         dp_image_info_t *info, int *need_more) {
    memset(info, 0, sizeof *info);
    *need_more = 0;
    dp_status_t st;
    switch (dp_image_sniff(data, size)) {
    case DP_IMAGE_JPEG: st = dp_jpeg_probe(data, size, name, info, need_more); break;
    case DP_IMAGE_PNG: st = dp_png_probe(data, size, name, info, need_more); break;
    case DP_IMAGE_PNM: st = dp_pnm_probe(data, size, name, info, need_more); break;
    case DP_IMAGE_BMP: st = dp_bmp_probe(data, size, name, info, need_more); break;
    default: return not_an_image(data, size, name);
    }
    if (st != DP_OK) {
        memset(info, 0, sizeof *info);
        return st;
    }
    if (ignore_exif) info->orientation = 1;
    dp_orient_size(info->orientation, info->stored_width, info->stored_height, &info->width, &info->height);
    return DP_OK;
}

dp_status_t dp_image_probe(const void *data, size_t size, const char *name, int ignore_exif,
                           dp_image_info_t *info) {
    int need_more;
    return probe(data, size, name, ignore_exif, info, &need_more);
}

dp_status_t dp_image_probe_file(const char *path, int ignore_exif, dp_image_info_t *info) {
    memset(info, 0, sizeof *info);
    FILE *f = fopen(path, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open image: %s", path, strerror(errno));
    size_t capacity = 1 << 16, size = 0;
    unsigned char *data = NULL;
    dp_status_t st;
    for (;;) {
        unsigned char *grown = realloc(data, capacity);
        if (!grown) {
            st = dp_fail(DP_ERR_NOMEM, "%s: out of memory reading the image's header", path);
            break;
        }
        data = grown;
        size += fread(data + size, 1, capacity - size, f);
        if (ferror(f)) {
            st = dp_fail(DP_ERR_IO, "%s: cannot read image (a directory, or an I/O error)", path);
            break;
        }
        int need_more;
        st = probe(data, size, path, ignore_exif, info, &need_more);
        if (st == DP_OK || !need_more || size < capacity || capacity >= MAX_FILE_BYTES) break;
        capacity *= 4; /* the header goes on (large APP segments): read more */
    }
    free(data);
    fclose(f);
    return st;
}

dp_status_t dp_image_decode_with(const void *data, size_t size, const char *name,
                                 const dp_image_options_t *options, dp_image_t *out) {
    memset(out, 0, sizeof *out);
    dp_image_options_t defaults = {0};
    if (!options) options = &defaults;
    if (options->channels != 0 && options->channels != 1 && options->channels != 3)
        return dp_fail(DP_ERR_ARG, "%s: %d channels asked for (1 or 3, or 0 for the image's own)", name,
                       options->channels);
    const unsigned char *bytes = data;
    dp_image_info_t info;
    DP_TRY(dp_image_probe(bytes, size, name, options->ignore_exif, &info));
    int channels = options->channels ? options->channels : info.channels;
    dp_image_t stored = {0};
    dp_status_t st;
    switch (info.format) {
    case DP_IMAGE_JPEG: {
        dp_crop_box_t all = {0, 0, INT32_MAX, INT32_MAX}, got;
        st = dp_jpeg_decode_region(bytes, size, name, channels, info.stored_width, info.stored_height, 1, all, 0,
                                   &stored, &got);
        break;
    }
    case DP_IMAGE_PNG: st = dp_png_decode(bytes, size, name, channels, &stored); break;
    case DP_IMAGE_PNM: st = dp_pnm_decode(bytes, size, name, channels, &stored); break;
    default: st = dp_bmp_decode(bytes, size, name, channels, &stored); break;
    }
    if (st != DP_OK) return st;
    if (stored.width != info.stored_width || stored.height != info.stored_height) {
        dp_image_free(&stored);
        return dp_fail(DP_ERR_FORMAT, "%s: decoded %d x %d pixels, the header says %d x %d", name, stored.width,
                       stored.height, info.stored_width, info.stored_height);
    }
    if (info.orientation == 1) {
        *out = stored;
        return DP_OK;
    }
    dp_image_t oriented = {.channels = channels, .width = info.width, .height = info.height};
    oriented.pixels = malloc((size_t)info.width * info.height * channels);
    if (!oriented.pixels) {
        dp_image_free(&stored);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory for %d x %d pixels", name, info.width, info.height);
    }
    dp_crop_box_t whole = {0, 0, info.stored_height, info.stored_width};
    dp_orient_pixels(info.orientation, info.stored_width, info.stored_height, stored.pixels, whole, channels,
                     oriented.pixels);
    dp_image_free(&stored);
    *out = oriented;
    return DP_OK;
}

dp_status_t dp_image_decode(const void *data, size_t size, const char *name, dp_image_t *out) {
    return dp_image_decode_with(data, size, name, NULL, out);
}

dp_status_t dp_image_file_bytes(const char *path, unsigned char **data_out, size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
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
    *data_out = data;
    *size_out = size;
    return DP_OK;
}

dp_status_t dp_image_read(const char *path, dp_image_t *out) {
    memset(out, 0, sizeof *out);
    unsigned char *data;
    size_t size;
    DP_TRY(dp_image_file_bytes(path, &data, &size));
    dp_status_t status = dp_image_decode(data, size, path, out);
    free(data);
    return status;
}
