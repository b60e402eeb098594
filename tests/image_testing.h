/* image_testing.h - what the image tests share: running a fixture maker
 * of tests/fixtures/image/ with /usr/bin/python3 (PIL, torchvision), and
 * writing JPEGs with libjpeg (the kinds PIL cannot write: YCCK, RGB
 * components, arithmetic coding) and small 8-bit PNGs with zlib.
 */
#ifndef DPTRAIN_IMAGE_TESTING_H
#define DPTRAIN_IMAGE_TESTING_H

#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>
#include <string.h>
#include <zlib.h>

#include "testing.h"

/* Runs tests/fixtures/image/SCRIPT with `args` (a shell-quoted string),
 * with `env` (e.g. "ATEN_CPU_CAPABILITY=default", or "") before it;
 * exits the test (status 1) when it fails: the fixtures are the test. */
static inline void image_fixture_run(const char *env, const char *script, const char *args) {
    char command[4096];
    snprintf(command, sizeof command, "%s /usr/bin/python3 '%s' %s", env, testing_path(script), args);
    int status = system(command);
    if (status != 0) {
        fprintf(stderr, "FAILED: the fixture maker failed (status %d): %s\n", status, command);
        exit(1);
    }
}

/* A fixture maker's "image K C H W" line (its cases.txt; else 0 returned):
 * reads DIR/image_K.raw, image K's planar input of C x H x W bytes, into
 * inputs[K] and DIR/out_K.raw, its outputs one after another, into
 * outputs[K] (out_sizes[K] bytes), its shape into shape[K]; checks both;
 * returns 1. K must be below max. The caller frees the buffers. */
static inline int image_fixture_pair(const char *dir, const char *line, unsigned char **inputs,
                                     unsigned char **outputs, size_t *out_sizes, int (*shape)[3], int max) {
    int k, c, h, w;
    if (sscanf(line, "image %d %d %d %d", &k, &c, &h, &w) != 4 || k < 0 || k >= max) return 0;
    char path[1200];
    size_t size;
    shape[k][0] = c, shape[k][1] = h, shape[k][2] = w;
    snprintf(path, sizeof path, "%s/image_%d.raw", dir, k);
    inputs[k] = testing_read_file(path, &size);
    CHECK(inputs[k] && size == (size_t)c * h * w, "%s: %zu bytes", path, size);
    snprintf(path, sizeof path, "%s/out_%d.raw", dir, k);
    outputs[k] = testing_read_file(path, &out_sizes[k]);
    CHECK(outputs[k] != NULL, "%s", path);
    return 1;
}

/* A JPEG of width x height pixels of `components` interleaved samples in
 * `in_space`, stored as `jpeg_space`, at `quality` (95 and above: no
 * chroma subsampling), arithmetic-coded if asked; 0 on success. */
static inline int image_write_jpeg(const char *path, int width, int height, int components, J_COLOR_SPACE in_space,
                                   J_COLOR_SPACE jpeg_space, int quality, int arithmetic,
                                   const unsigned char *pixels) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr errors;
    c.err = jpeg_std_error(&errors);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)width;
    c.image_height = (JDIMENSION)height;
    c.input_components = components;
    c.in_color_space = in_space;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, jpeg_space);
    jpeg_set_quality(&c, quality, TRUE);
    if (quality >= 95)
        for (int i = 0; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    c.arith_code = arithmetic ? TRUE : FALSE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c.next_scanline * width * components);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f);
}

/* Smooth shapes and a little noise, `components` interleaved (seeded). */
static inline unsigned char *image_test_pattern(int width, int height, int components, unsigned seed) {
    unsigned char *p = malloc((size_t)width * height * components);
    if (!p) abort();
    unsigned state = seed * 2654435761u + 1;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < components; c++) {
                state = state * 1103515245u + 12345u;
                int v = (x * (3 + c) + y * (5 + 2 * c)) % 256 + (int)((state >> 16) % 24) - 12;
                if (((x / (7 + c)) + (y / 5)) % 3 == 0) v = 255 - v;
                p[((size_t)y * width + x) * components + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* Appends a PNG chunk (length, type, body, CRC) at out + *at. */
static inline void image_png_chunk(unsigned char *out, size_t *at, const char *type, const unsigned char *body,
                                   size_t n) {
    unsigned char *p = out + *at;
    p[0] = (unsigned char)(n >> 24), p[1] = (unsigned char)(n >> 16), p[2] = (unsigned char)(n >> 8);
    p[3] = (unsigned char)n;
    memcpy(p + 4, type, 4);
    if (n) memcpy(p + 8, body, n);
    uint32_t crc = (uint32_t)crc32(0, p + 4, (uInt)(n + 4));
    p[8 + n] = (unsigned char)(crc >> 24), p[9 + n] = (unsigned char)(crc >> 16), p[10 + n] = (unsigned char)(crc >> 8);
    p[11 + n] = (unsigned char)crc;
    *at += 12 + n;
}

/* An 8-bit PNG in a malloc'd buffer (*size bytes): colour type 0, 2, 3
 * (palette of `palette_entries` RGB triples), 4 or 6, `samples` interleaved
 * row by row, filter 0. */
static inline unsigned char *image_png_bytes(int width, int height, int color_type, const unsigned char *samples,
                                             const unsigned char *palette, int palette_entries, size_t *size) {
    int spp = color_type == 2 ? 3 : color_type == 4 ? 2 : color_type == 6 ? 4 : 1;
    size_t row = (size_t)width * spp, raw_size = (row + 1) * height;
    unsigned char *raw = malloc(raw_size);
    for (int y = 0; y < height; y++) {
        raw[y * (row + 1)] = 0;
        memcpy(raw + y * (row + 1) + 1, samples + y * row, row);
    }
    uLongf z_size = compressBound((uLong)raw_size);
    unsigned char *out = malloc(z_size + 1000), ihdr[13] = {0};
    if (compress(out + 500, &z_size, raw, (uLong)raw_size) != Z_OK) abort();
    unsigned char *z = malloc(z_size);
    memcpy(z, out + 500, z_size);
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(out, signature, 8);
    size_t at = 8;
    for (int i = 0; i < 4; i++) {
        ihdr[i] = (unsigned char)((unsigned)width >> (24 - 8 * i));
        ihdr[4 + i] = (unsigned char)((unsigned)height >> (24 - 8 * i));
    }
    ihdr[8] = 8, ihdr[9] = (unsigned char)color_type;
    image_png_chunk(out, &at, "IHDR", ihdr, 13);
    if (palette) image_png_chunk(out, &at, "PLTE", palette, (size_t)palette_entries * 3);
    image_png_chunk(out, &at, "IDAT", z, z_size);
    image_png_chunk(out, &at, "IEND", NULL, 0);
    free(z);
    free(raw);
    *size = at;
    return out;
}

#endif
