/* image_testing.h - what the image tests share: running a fixture maker
 * of tests/fixtures/image/ with /usr/bin/python3 (PIL, torchvision), and
 * writing JPEGs with libjpeg (the kinds PIL cannot write: YCCK, RGB
 * components, arithmetic coding).
 */
#ifndef DPTRAIN_IMAGE_TESTING_H
#define DPTRAIN_IMAGE_TESTING_H

#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

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

#endif
