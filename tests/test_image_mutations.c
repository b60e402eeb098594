/* test_image_mutations.c - broken images never crash: valid JPEGs
 * (baseline 4:2:0 with EXIF, progressive, gray, CMYK, arithmetic), PNGs
 * (RGB, palette, gray+alpha), BMPs (24-bit, 8-bit palette) and PGM/PPM
 * (P6, P5 16-bit, P3) made here, then mutated with a fixed seed (1-4
 * flipped bits, a byte set to 0x00 or 0xff, a cut, or several of these),
 * go through the probe, the decoder (1 and 3 channels) and the per-sample
 * path (train with DCT scaling, eval): each call succeeds with readable
 * pixels or fails with one line starting with the file's name, leaving the
 * batch slot untouched. Also every cut of the baseline JPEG and of the PNG
 * that loses image data fails. Runs under AddressSanitizer and UBSan in
 * scripts/sanitize.sh address (the unit tests), which turn any overrun into
 * a failure; tests/fuzz_image.c is the open-ended version of this.
 */
#include <stdint.h>
#include <string.h>

#include "dptrain/image_sample.h"
#include "image_testing.h"
#include "testing.h"

typedef struct {
    const char *name;
    unsigned char *data;
    size_t size;
} seed_t;

static seed_t seeds[16];
static int seed_count;

static void add_seed(const char *name, unsigned char *data, size_t size) {
    seeds[seed_count++] = (seed_t){name, data, size};
}

static void add_jpeg(const char *name, int components, J_COLOR_SPACE in_space, J_COLOR_SPACE space, int progressive,
                     int arithmetic, int exif) {
    int w = 45, h = 29;
    unsigned char *pixels = image_test_pattern(w, h, components, (unsigned)seed_count);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr errors;
    c.err = jpeg_std_error(&errors);
    jpeg_create_compress(&c);
    unsigned char *buffer = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buffer, &size);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = components, c.in_color_space = in_space;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, space);
    jpeg_set_quality(&c, 80, TRUE);
    c.arith_code = arithmetic ? TRUE : FALSE;
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    if (exif) {
        static const unsigned char block[34] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01,
                                                0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0};
        jpeg_write_marker(&c, JPEG_APP0 + 1, block, sizeof block);
    }
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = pixels + (size_t)c.next_scanline * w * components;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(pixels);
    add_seed(name, buffer, size);
}

static void add_bmp(const char *name, int bits) {
    int w = 7, h = 5, stride = (w * bits / 8 + 3) / 4 * 4, palette = bits == 8 ? 256 * 4 : 0;
    size_t offset = 54 + (size_t)palette, size = offset + (size_t)stride * h;
    unsigned char *b = calloc(size, 1);
    b[0] = 'B', b[1] = 'M', b[2] = (unsigned char)size, b[3] = (unsigned char)(size >> 8);
    b[10] = (unsigned char)offset, b[11] = (unsigned char)(offset >> 8);
    b[14] = 40, b[18] = (unsigned char)w, b[22] = (unsigned char)h, b[26] = 1, b[28] = (unsigned char)bits;
    for (int i = 0; i < palette; i++) b[54 + i] = (unsigned char)(i * 37);
    for (size_t i = offset; i < size; i++) b[i] = (unsigned char)(i * 13);
    add_seed(name, b, size);
}

static void add_text(const char *name, const char *text, const unsigned char *tail, size_t tail_size) {
    size_t n = strlen(text);
    unsigned char *b = malloc(n + tail_size);
    memcpy(b, text, n);
    if (tail_size) memcpy(b + n, tail, tail_size);
    add_seed(name, b, n + tail_size);
}

static void make_seeds(void) {
    add_jpeg("baseline_exif.jpg", 3, JCS_RGB, JCS_YCbCr, 0, 0, 1);
    add_jpeg("progressive.jpg", 3, JCS_RGB, JCS_YCbCr, 1, 0, 0);
    add_jpeg("gray.jpg", 1, JCS_GRAYSCALE, JCS_GRAYSCALE, 0, 0, 0);
    add_jpeg("cmyk.jpg", 4, JCS_CMYK, JCS_YCCK, 0, 0, 0);
    add_jpeg("arithmetic.jpg", 3, JCS_RGB, JCS_YCbCr, 1, 1, 0);
    unsigned char *rgb = image_test_pattern(13, 11, 4, 3), palette[48];
    size_t size;
    for (int i = 0; i < 48; i++) palette[i] = (unsigned char)(i * 5);
    unsigned char *png = image_png_bytes(13, 11, 2, rgb, NULL, 0, &size);
    add_seed("rgb.png", png, size);
    for (int i = 0; i < 13 * 11; i++) rgb[i] %= 16;
    png = image_png_bytes(13, 11, 3, rgb, palette, 16, &size);
    add_seed("palette.png", png, size);
    png = image_png_bytes(13, 5, 4, rgb, NULL, 0, &size);
    add_seed("gray_alpha.png", png, size);
    free(rgb);
    add_bmp("rgb.bmp", 24);
    add_bmp("palette.bmp", 8);
    unsigned char bytes[6 * 4 * 3];
    for (int i = 0; i < (int)sizeof bytes; i++) bytes[i] = (unsigned char)(i * 11);
    add_text("p6.ppm", "P6 6 4 255\n", bytes, sizeof bytes);
    add_text("p5_16.pgm", "P5 3 4 1000\n", bytes, 24);
    add_text("p3.ppm", "P3 2 2 7 0 1 2 3 4 5 6 7 0 1 2 3\n", NULL, 0);
}

/* A failure is right when its message is one line starting with "name: ". */
static int failed_properly(const char *name) {
    const char *msg = dp_error_message();
    size_t n = strlen(name);
    return strncmp(msg, name, n) == 0 && msg[n] == ':' && strchr(msg, '\n') == NULL;
}

/* Every path over one input; returns 0 when something misbehaved. */
static int run_all(const unsigned char *data, size_t size, const char *name, int *decoded) {
    int ok = 1;
    dp_image_info_t info;
    if (dp_image_probe(data, size, name, 0, &info) != DP_OK) ok &= failed_properly(name);
    for (int channels = 1; channels <= 3; channels += 2) {
        dp_image_options_t o = {.channels = channels};
        dp_image_t image;
        if (dp_image_decode_with(data, size, name, &o, &image) == DP_OK) {
            unsigned sum = 0;
            for (size_t i = 0; i < (size_t)image.width * image.height * channels; i++) sum += image.pixels[i];
            ok &= image.channels == channels && sum != 1u << 31; /* every pixel read (ASan) */
            (*decoded)++;
            dp_image_free(&image);
        } else {
            ok &= failed_properly(name) && image.pixels == NULL;
        }
    }
    unsigned char slot[3 * 24 * 24], untouched[3 * 24 * 24];
    memset(untouched, 0x5a, sizeof untouched);
    for (int mode = 0; mode < 2; mode++) {
        dp_sample_options_t o = dp_sample_options_default((dp_sample_mode_t)mode, 3, 24, 24);
        dp_rng_t rng;
        dp_rng_seed(&rng, size);
        memcpy(slot, untouched, sizeof slot);
        if (dp_image_sample(data, size, name, &o, &rng, slot, NULL) != DP_OK)
            ok &= failed_properly(name) && memcmp(slot, untouched, sizeof slot) == 0;
    }
    return ok;
}

/* Inputs the fuzzer (tests/fuzz_image.c) found misbehaving, rebuilt here. */
static void test_fuzz_finds(void) {
    /* a PNG cut inside a chunk whose type holds a newline: the message printed the type raw */
    size_t size;
    unsigned char *png = image_png_bytes(2, 2, 0, (const unsigned char *)"abcd", NULL, 0, &size);
    unsigned char cut[64];
    memcpy(cut, png, 33);
    static const unsigned char chunk[12] = {0, 0, 1, 0, 'P', '\n', 0, 'h', 1, 2, 3, 4};
    memcpy(cut + 33, chunk, sizeof chunk);
    int decoded = 0;
    CHECK(run_all(cut, 33 + sizeof chunk, "newline.png", &decoded) && decoded == 0,
          "a cut PNG chunk with a newline in its type: '%s'", dp_error_message());
    free(png);
    /* a 24-bit BMP whose "colours used" field says 9984: a palette was read past the end */
    unsigned char bmp[54 + 3 * 4 * 2] = {'B', 'M'};
    bmp[10] = 54, bmp[14] = 40, bmp[18] = 3, bmp[22] = 2, bmp[26] = 1, bmp[28] = 24, bmp[47] = 0x27;
    CHECK(run_all(bmp, sizeof bmp, "colours.bmp", &decoded), "a 24-bit BMP claiming 9984 colours: '%s'",
          dp_error_message());
}

static uint64_t next(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 24;
}

int main(void) {
    make_seeds();
    test_fuzz_finds();
    int cases = 0, bad = 0, decoded = 0;
    for (int s = 0; s < seed_count; s++)
        CHECK(run_all(seeds[s].data, seeds[s].size, seeds[s].name, &decoded), "the valid %s", seeds[s].name);
    CHECK(decoded == 2 * seed_count, "%d of %d valid seeds decoded", decoded / 2, seed_count);
    /* every cut that loses image data fails */
    for (int s = 0; s < 6; s += 5) {
        const seed_t *seed = &seeds[s];
        int cut_failures = 0, tail = s == 0 ? 2 : 12; /* JPEG: EOI; PNG: IEND */
        for (size_t cut = 0; cut < seed->size - tail; cut++) {
            dp_image_t image;
            if (dp_image_decode(seed->data, cut, seed->name, &image) != DP_OK && failed_properly(seed->name))
                cut_failures++;
            else
                dp_image_free(&image);
        }
        CHECK(cut_failures == (int)(seed->size - tail), "%s: %d of %zu cuts fail naming it", seed->name, cut_failures,
              seed->size - tail);
    }
    uint64_t state = 2718281828;
    unsigned char *copy = malloc(1 << 16);
    int per_seed = 1500;
    decoded = 0;
    for (int s = 0; s < seed_count; s++) {
        for (int i = 0; i < per_seed; i++) {
            const seed_t *seed = &seeds[s];
            size_t n = seed->size;
            memcpy(copy, seed->data, n);
            int kind = (int)(next(&state) % 4);
            int edits = 1 + (int)(next(&state) % 4);
            for (int e = 0; e < edits && kind != 2; e++) {
                size_t at = next(&state) % n;
                if (kind == 1) {
                    copy[at] = next(&state) % 2 ? 0xff : 0x00;
                } else {
                    copy[at] ^= (unsigned char)(1u << (next(&state) % 8));
                }
            }
            if (kind >= 2) n = next(&state) % n; /* a cut (alone, or after the edits) */
            cases++;
            if (!run_all(copy, n, seed->name, &decoded)) {
                bad++;
                if (bad <= 5) fprintf(stderr, "%s, mutation %d: '%s'\n", seed->name, i, dp_error_message());
            }
        }
    }
    printf("mutations: %d broken files from %d valid ones, %d decodes succeeded, %d misbehaved\n", cases, seed_count,
           decoded, bad);
    CHECK(bad == 0 && cases == seed_count * per_seed, "%d of %d mutated files misbehaved", bad, cases);
    free(copy);
    for (int s = 0; s < seed_count; s++) free(seeds[s].data);
    return testing_finish("test_image_mutations");
}
