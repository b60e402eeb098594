/* test_image.c - the PNG/PGM decoder and the conversion to a model's input.
 *
 * The PNGs are written here, byte by byte, with zlib (chunks, CRCs, filter
 * bytes, Adam7 passes), so the decoder is checked against files we know
 * exactly: gray 1/8/16-bit, gray+alpha, RGB, RGBA, a 4-bit palette with
 * transparency, an interlaced image; PGMs P5 8/16-bit and P2 with comments.
 * Broken files (truncated, bad CRC, wrong size in the header, not an image,
 * empty, missing) must fail with one line that names the file.
 * dp_image_to_input is checked against values computed by hand (PIL's
 * bilinear weights, ITU-R 601-2 luma, the dataset's / 255). A JPEG
 * (written here with libjpeg, quality 100, no chroma subsampling) reads
 * back within 3 of its pixels through dp_image_read, gray and RGB, and
 * into a model's input; cut short it fails naming the file. (Every kind of
 * every format against PIL: test_image_formats.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "dptrain/image.h"
#include "image_testing.h"
#include "testing.h"

/* --- writing files --------------------------------------------------------------- */

typedef struct {
    unsigned char *data;
    size_t size, capacity;
} buffer_t;

static void put(buffer_t *b, const void *bytes, size_t n) {
    if (b->size + n > b->capacity) {
        b->capacity = (b->size + n) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
}

static void put_u32(buffer_t *b, uint32_t v) {
    unsigned char be[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                           (unsigned char)v};
    put(b, be, 4);
}

static void put_chunk(buffer_t *b, const char *type, const unsigned char *data, uint32_t n) {
    put_u32(b, n);
    size_t start = b->size;
    put(b, type, 4);
    if (n) put(b, data, n);
    put_u32(b, (uint32_t)crc32(0, b->data + start, (uInt)(n + 4)));
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

/* Packs samples (values < 2^depth) into bytes, big-endian as PNG wants. */
static void pack_row(buffer_t *raw, const unsigned *samples, int count, int depth) {
    if (depth == 16) {
        for (int i = 0; i < count; i++) {
            unsigned char be[2] = {(unsigned char)(samples[i] >> 8), (unsigned char)samples[i]};
            put(raw, be, 2);
        }
        return;
    }
    if (depth == 8) {
        for (int i = 0; i < count; i++) {
            unsigned char v = (unsigned char)samples[i];
            put(raw, &v, 1);
        }
        return;
    }
    unsigned char byte = 0;
    int used = 0;
    for (int i = 0; i < count; i++) {
        byte |= (unsigned char)(samples[i] << (8 - depth - used));
        used += depth;
        if (used == 8) {
            put(raw, &byte, 1);
            byte = 0;
            used = 0;
        }
    }
    if (used) put(raw, &byte, 1);
}

/* A PNG of width x height pixels of `spp` samples each (samples row-major,
 * interleaved), colour type and depth as given, filter 0 on every row;
 * Adam7-interlaced if asked. palette/trns: optional PLTE and tRNS bodies. */
static buffer_t make_png(int width, int height, int color_type, int depth, int spp, const unsigned *samples,
                         int interlace, const unsigned char *palette, int palette_bytes,
                         const unsigned char *trns, int trns_bytes) {
    buffer_t raw = {0};
    static const int adam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                    {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    int passes = interlace ? 7 : 1;
    unsigned *row = malloc(sizeof(unsigned) * (size_t)width * spp);
    for (int p = 0; p < passes; p++) {
        int x0 = interlace ? adam7[p][0] : 0, y0 = interlace ? adam7[p][1] : 0;
        int dx = interlace ? adam7[p][2] : 1, dy = interlace ? adam7[p][3] : 1;
        for (int y = y0; y < height; y += dy) {
            int n = 0;
            for (int x = x0; x < width; x += dx)
                for (int s = 0; s < spp; s++) row[n++] = samples[((size_t)y * width + x) * spp + s];
            if (n == 0) break; /* an empty pass has no rows at all */
            unsigned char filter = 0;
            put(&raw, &filter, 1);
            pack_row(&raw, row, n, depth);
        }
    }
    free(row);
    uLongf zsize = compressBound((uLong)raw.size);
    unsigned char *z = malloc(zsize);
    if (compress(z, &zsize, raw.data, (uLong)raw.size) != Z_OK) abort();
    buffer_t png = {0};
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    put(&png, signature, 8);
    unsigned char ihdr[13] = {0};
    for (int i = 0; i < 4; i++) {
        ihdr[i] = (unsigned char)((unsigned)width >> (24 - 8 * i));
        ihdr[4 + i] = (unsigned char)((unsigned)height >> (24 - 8 * i));
    }
    ihdr[8] = (unsigned char)depth;
    ihdr[9] = (unsigned char)color_type;
    ihdr[12] = (unsigned char)interlace;
    put_chunk(&png, "IHDR", ihdr, 13);
    if (palette) put_chunk(&png, "PLTE", palette, (uint32_t)palette_bytes);
    if (trns) put_chunk(&png, "tRNS", trns, (uint32_t)trns_bytes);
    put_chunk(&png, "IDAT", z, (uint32_t)zsize);
    put_chunk(&png, "IEND", NULL, 0);
    free(z);
    free(raw.data);
    return png;
}

/* --- checks ---------------------------------------------------------------------- */

static int same_pixels(const dp_image_t *img, int channels, int height, int width, const unsigned char *want) {
    if (img->channels != channels || img->height != height || img->width != width) return 0;
    return memcmp(img->pixels, want, (size_t)channels * height * width) == 0;
}

/* Reads `path` expecting success and the given pixels. */
static void expect_image(const char *what, const char *path, int channels, int height, int width,
                         const unsigned char *want) {
    dp_image_t img;
    dp_status_t st = dp_image_read(path, &img);
    CHECK(st == DP_OK, "%s: %s", what, dp_error_message());
    if (st != DP_OK) return;
    CHECK(same_pixels(&img, channels, height, width, want), "%s: got %d x %d x %d, pixels differ", what,
          img.channels, img.height, img.width);
    dp_image_free(&img);
    CHECK(img.pixels == NULL && img.width == 0, "%s: dp_image_free zeroes the struct", what);
}

/* Reads `path` expecting a failure whose one-line message names the file
 * and contains `part`. */
static void expect_failure(const char *what, const char *path, const char *part) {
    dp_image_t img;
    memset(&img, 0x55, sizeof img);
    dp_error_clear();
    dp_status_t st = dp_image_read(path, &img);
    const char *msg = dp_error_message();
    CHECK(st != DP_OK, "%s: accepted", what);
    CHECK(strncmp(msg, path, strlen(path)) == 0, "%s: message does not start with the file name: '%s'", what, msg);
    CHECK(strchr(msg, '\n') == NULL, "%s: message is not one line: '%s'", what, msg);
    CHECK(strstr(msg, part) != NULL, "%s: message '%s' lacks '%s'", what, msg, part);
    CHECK(img.pixels == NULL && img.channels == 0, "%s: *out not zeroed on failure", what);
}

static void test_png_kinds(void) {
    /* gray 8-bit, 3 x 2 */
    unsigned gray[6] = {0, 17, 255, 128, 3, 200};
    unsigned char gray8[6] = {0, 17, 255, 128, 3, 200};
    buffer_t b = make_png(3, 2, 0, 8, 1, gray, 0, NULL, 0, NULL, 0);
    const char *path = testing_tmp_file("gray8.png");
    write_file(path, b.data, b.size);
    expect_image("gray 8-bit", path, 1, 2, 3, gray8);
    /* the same bytes, decoded from memory */
    dp_image_t img;
    CHECK(dp_image_decode(b.data, b.size, "mem", &img) == DP_OK && same_pixels(&img, 1, 2, 3, gray8),
          "dp_image_decode: %s", dp_error_message());
    dp_image_free(&img);

    /* truncated: every cut of the file must fail, naming it */
    const char *cut_path = testing_tmp_file("cut.png");
    int cut_failures = 0;
    for (size_t cut = 0; cut < b.size - 12; cut++) { /* the last 12 bytes are IEND, which libpng may not need */
        write_file(cut_path, b.data, cut);
        dp_image_t t;
        if (dp_image_read(cut_path, &t) != DP_OK && strncmp(dp_error_message(), cut_path, strlen(cut_path)) == 0)
            cut_failures++;
        else
            dp_image_free(&t);
    }
    CHECK(cut_failures == (int)(b.size - 12), "truncated PNGs: %d of %zu cuts fail naming the file", cut_failures,
          b.size - 12);
    write_file(cut_path, b.data, b.size / 2);
    expect_failure("PNG cut in half", cut_path, "PNG");
    /* a flipped byte in IDAT: CRC mismatch */
    b.data[b.size - 12 - 5] ^= 0x40;
    const char *crc_path = testing_tmp_file("crc.png");
    write_file(crc_path, b.data, b.size);
    expect_failure("PNG with a bad CRC", crc_path, "bad PNG");
    free(b.data);

    /* gray 16-bit: v * 257 scales back to v */
    unsigned g16[6];
    for (int i = 0; i < 6; i++) g16[i] = gray[i] * 257;
    b = make_png(3, 2, 0, 16, 1, g16, 0, NULL, 0, NULL, 0);
    path = testing_tmp_file("gray16.png");
    write_file(path, b.data, b.size);
    expect_image("gray 16-bit", path, 1, 2, 3, gray8);
    free(b.data);

    /* gray 1-bit, 10 x 1 (a partial last byte) */
    unsigned bits[10] = {1, 0, 1, 1, 0, 0, 0, 1, 1, 0};
    unsigned char bits8[10];
    for (int i = 0; i < 10; i++) bits8[i] = bits[i] ? 255 : 0;
    b = make_png(10, 1, 0, 1, 1, bits, 0, NULL, 0, NULL, 0);
    path = testing_tmp_file("gray1.png");
    write_file(path, b.data, b.size);
    expect_image("gray 1-bit", path, 1, 1, 10, bits8);
    free(b.data);

    /* gray + alpha: alpha dropped */
    unsigned ga[12];
    for (int i = 0; i < 6; i++) ga[2 * i] = gray[i], ga[2 * i + 1] = (unsigned)(i * 40);
    b = make_png(3, 2, 4, 8, 2, ga, 0, NULL, 0, NULL, 0);
    path = testing_tmp_file("gray_alpha.png");
    write_file(path, b.data, b.size);
    expect_image("gray+alpha", path, 1, 2, 3, gray8);
    free(b.data);

    /* RGB and RGBA, 2 x 2 */
    unsigned rgb[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
    unsigned char rgb8[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
    b = make_png(2, 2, 2, 8, 3, rgb, 0, NULL, 0, NULL, 0);
    path = testing_tmp_file("rgb.png");
    write_file(path, b.data, b.size);
    expect_image("RGB", path, 3, 2, 2, rgb8);
    free(b.data);
    unsigned rgba[16];
    for (int i = 0; i < 4; i++) {
        for (int c = 0; c < 3; c++) rgba[4 * i + c] = rgb[3 * i + c];
        rgba[4 * i + 3] = (unsigned)(255 - 60 * i);
    }
    b = make_png(2, 2, 6, 8, 4, rgba, 0, NULL, 0, NULL, 0);
    path = testing_tmp_file("rgba.png");
    write_file(path, b.data, b.size);
    expect_image("RGBA", path, 3, 2, 2, rgb8);
    free(b.data);

    /* 4-bit palette with a tRNS chunk: 3 channels, the palette's colours */
    unsigned char palette[9] = {1, 2, 3, 40, 50, 60, 200, 210, 220};
    unsigned char trns[1] = {0};
    unsigned idx[5] = {2, 0, 1, 1, 2};
    unsigned char want_pal[15];
    for (int i = 0; i < 5; i++) memcpy(want_pal + 3 * i, palette + 3 * idx[i], 3);
    b = make_png(5, 1, 3, 4, 1, idx, 0, palette, 9, trns, 1);
    path = testing_tmp_file("palette.png");
    write_file(path, b.data, b.size);
    expect_image("palette 4-bit + tRNS", path, 3, 1, 5, want_pal);
    free(b.data);

    /* Adam7 interlaced 9 x 11 gray */
    unsigned inter[99];
    unsigned char inter8[99];
    for (int i = 0; i < 99; i++) inter[i] = (unsigned)(i * 7 % 256), inter8[i] = (unsigned char)inter[i];
    b = make_png(9, 11, 0, 8, 1, inter, 1, NULL, 0, NULL, 0);
    path = testing_tmp_file("interlaced.png");
    write_file(path, b.data, b.size);
    expect_image("Adam7 interlaced", path, 1, 11, 9, inter8);
    /* the header says 9 x 12: the data is short */
    b.data[8 + 8 + 7] = 12;
    uint32_t crc = (uint32_t)crc32(0, b.data + 12, 17);
    for (int i = 0; i < 4; i++) b.data[29 + i] = (unsigned char)(crc >> (24 - 8 * i));
    path = testing_tmp_file("wrong_size.png");
    write_file(path, b.data, b.size);
    expect_failure("PNG whose header says more rows than it has", path, "bad PNG");
    free(b.data);

    /* a 0 x 0 PNG header */
    b = make_png(1, 1, 0, 8, 1, gray, 0, NULL, 0, NULL, 0);
    memset(b.data + 16, 0, 4);
    crc = (uint32_t)crc32(0, b.data + 12, 17);
    for (int i = 0; i < 4; i++) b.data[29 + i] = (unsigned char)(crc >> (24 - 8 * i));
    path = testing_tmp_file("zero.png");
    write_file(path, b.data, b.size);
    expect_failure("PNG of width 0", path, "bad PNG");
    free(b.data);
}

static void test_pgm(void) {
    /* P5, 8-bit */
    const char p5[] = "P5\n# a comment\n3 2\n255\n";
    unsigned char px[6] = {0, 17, 255, 128, 3, 200};
    buffer_t b = {0};
    put(&b, p5, strlen(p5));
    put(&b, px, 6);
    const char *path = testing_tmp_file("p5.pgm");
    write_file(path, b.data, b.size);
    expect_image("P5 8-bit", path, 1, 2, 3, px);
    /* header says 3 x 3: the data is short */
    const char *short_path = testing_tmp_file("p5_short.pgm");
    buffer_t s = {0};
    put(&s, "P5 3 3 255\n", 11);
    put(&s, px, 6);
    write_file(short_path, s.data, s.size);
    expect_failure("P5 with a header larger than the data", short_path, "3 x 3");
    free(s.data);
    free(b.data);

    /* P5, 16-bit big-endian, maxval 1000 */
    b = (buffer_t){0};
    put(&b, "P5 2 1 1000\n", 12);
    unsigned char be[4] = {0x03, 0xe8, 0x01, 0xf4}; /* 1000, 500 */
    put(&b, be, 4);
    path = testing_tmp_file("p5_16.pgm");
    write_file(path, b.data, b.size);
    unsigned char want16[2] = {255, 128}; /* 500 * 255 / 1000 = 127.5 -> 128 */
    expect_image("P5 16-bit", path, 1, 1, 2, want16);
    free(b.data);

    /* P2 ASCII, maxval 15, comments anywhere between tokens */
    const char p2[] = "P2\n# made by hand\n4 1 # width height\n15\n0 15 # comment\n 5 10\n";
    path = testing_tmp_file("p2.pgm");
    write_file(path, p2, strlen(p2));
    unsigned char want2[4] = {0, 255, 85, 170};
    expect_image("P2 ASCII", path, 1, 1, 4, want2);
    const char p2_short[] = "P2 4 1 15 0 15 5\n";
    path = testing_tmp_file("p2_short.pgm");
    write_file(path, p2_short, strlen(p2_short));
    expect_failure("P2 with a missing sample", path, "truncated PGM");
    const char p2_big[] = "P2 2 1 15 0 16\n";
    path = testing_tmp_file("p2_big.pgm");
    write_file(path, p2_big, strlen(p2_big));
    expect_failure("P2 sample > maxval", path, "maxval");
    const char p5_huge[] = "P5 99999999 99999999 255\n";
    path = testing_tmp_file("p5_huge.pgm");
    write_file(path, p5_huge, strlen(p5_huge));
    expect_failure("P5 with absurd dimensions", path, "larger than");
    const char p5_nomax[] = "P5 4 4";
    path = testing_tmp_file("p5_nomax.pgm");
    write_file(path, p5_nomax, strlen(p5_nomax));
    expect_failure("P5 header without maxval", path, "maxval missing");
}

static void test_not_images(void) {
    const char *path = testing_tmp_file("text.png");
    write_file(path, "hello, world\n", 13);
    expect_failure("a text file named .png", path, "not a JPEG, PNG, PGM/PPM or BMP");
    path = testing_tmp_file("empty.pgm");
    write_file(path, "", 0);
    expect_failure("an empty file", path, "empty");
    path = testing_tmp_file("missing.png");
    remove(path);
    expect_failure("a missing file", path, "cannot open");
    expect_failure("a directory", testing_tmpdir(), "cannot read");
}

static void test_to_input(void) {
    /* Same size, gray: exactly the dataset's x = pixel * (1/255). */
    unsigned char px[6] = {0, 17, 255, 128, 3, 200};
    dp_image_t img = {.channels = 1, .height = 2, .width = 3, .pixels = px};
    float out[48];
    CHECK(dp_image_to_input(&img, 1, 2, 3, out) == DP_OK, "%s", dp_error_message());
    int exact = 1;
    for (int i = 0; i < 6; i++) exact &= out[i] == (float)px[i] * (1.0f / 255.0f);
    CHECK(exact, "same size gray is pixel / 255 exactly");

    /* Upscale 1 x 2 -> 1 x 4: PIL's bilinear gives a, .75a+.25b, .25a+.75b, b. */
    unsigned char two[2] = {0, 200};
    img = (dp_image_t){.channels = 1, .height = 1, .width = 2, .pixels = two};
    CHECK(dp_image_to_input(&img, 1, 1, 4, out) == DP_OK, "%s", dp_error_message());
    float want_up[4] = {0, 50 / 255.0f, 150 / 255.0f, 200 / 255.0f};
    CHECK(testing_max_violation(out, want_up, 4, 1e-6, 1e-7, NULL) <= 1, "upscale: %g %g %g %g", out[0], out[1],
          out[2], out[3]);

    /* Downscale 1 x 4 -> 1 x 2: PIL's antialiased weights 3/7, 3/7, 1/7. */
    unsigned char four[4] = {10, 20, 30, 40};
    img = (dp_image_t){.channels = 1, .height = 1, .width = 4, .pixels = four};
    CHECK(dp_image_to_input(&img, 1, 1, 2, out) == DP_OK, "%s", dp_error_message());
    float want_down[2] = {(3 * 10 + 3 * 20 + 1 * 30) / 7.0f / 255.0f, (1 * 20 + 3 * 30 + 3 * 40) / 7.0f / 255.0f};
    CHECK(testing_max_violation(out, want_down, 2, 1e-6, 1e-7, NULL) <= 1, "downscale: %g %g (want %g %g)", out[0],
          out[1], want_down[0], want_down[1]);

    /* A constant image stays constant at any size. */
    unsigned char flat[35];
    memset(flat, 77, sizeof flat);
    img = (dp_image_t){.channels = 1, .height = 5, .width = 7, .pixels = flat};
    CHECK(dp_image_to_input(&img, 1, 4, 3, out) == DP_OK, "%s", dp_error_message());
    float want_flat[12];
    for (int i = 0; i < 12; i++) want_flat[i] = 77 / 255.0f;
    CHECK(testing_max_violation(out, want_flat, 12, 1e-6, 1e-7, NULL) <= 1, "constant image resized");

    /* RGB -> gray: ITU-R 601-2 luma; gray -> RGB: copies, planar (C, H, W). */
    unsigned char rgb[6] = {255, 0, 0, 10, 20, 30};
    img = (dp_image_t){.channels = 3, .height = 1, .width = 2, .pixels = rgb};
    CHECK(dp_image_to_input(&img, 1, 1, 2, out) == DP_OK, "%s", dp_error_message());
    float want_l[2] = {0.299f * 255 / 255.0f, (0.299f * 10 + 0.587f * 20 + 0.114f * 30) / 255.0f};
    CHECK(testing_max_violation(out, want_l, 2, 1e-6, 1e-7, NULL) <= 1, "luma: %g %g", out[0], out[1]);
    CHECK(dp_image_to_input(&img, 3, 1, 2, out) == DP_OK, "%s", dp_error_message());
    float want_planar[6] = {1, 10 / 255.0f, 0, 20 / 255.0f, 0, 30 / 255.0f};
    CHECK(testing_max_violation(out, want_planar, 6, 1e-6, 1e-7, NULL) <= 1, "RGB to (C, H, W)");
    img = (dp_image_t){.channels = 1, .height = 1, .width = 2, .pixels = two};
    CHECK(dp_image_to_input(&img, 3, 1, 2, out) == DP_OK, "%s", dp_error_message());
    float want_rgb[6] = {0, 200 / 255.0f, 0, 200 / 255.0f, 0, 200 / 255.0f};
    CHECK(testing_max_violation(out, want_rgb, 6, 1e-6, 1e-7, NULL) <= 1, "gray to RGB");
    CHECK(dp_image_to_input(&img, 2, 1, 2, out) == DP_ERR_ARG, "2 channels refused");
}

/* Random corruptions of valid files (flipped bytes, cuts; a fixed seed):
 * each decodes to a readable image or fails with one line naming the input,
 * never crashes (run under ASan by scripts/sanitize.sh address). */
static void test_mutations(void) {
    unsigned rgb[3 * 9 * 7];
    for (int i = 0; i < 3 * 9 * 7; i++) rgb[i] = (unsigned)(i * 37 % 256);
    buffer_t seeds[3];
    seeds[0] = make_png(9, 7, 2, 8, 3, rgb, 1, NULL, 0, NULL, 0);
    unsigned g16[12];
    for (int i = 0; i < 12; i++) g16[i] = (unsigned)(i * 5000);
    seeds[1] = make_png(4, 3, 0, 16, 1, g16, 0, NULL, 0, NULL, 0);
    seeds[2] = (buffer_t){0};
    put(&seeds[2], "P2 3 2 300\n0 1 2\n299 300 7\n", 27);
    uint64_t state = 12345;
    int decoded = 0, failed_ok = 0, bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        const buffer_t *seed = &seeds[iter % 3];
        unsigned char copy[1024];
        size_t n = seed->size;
        memcpy(copy, seed->data, n);
        int flips = 1 + (int)((state >> 33) % 4);
        for (int f = 0; f < flips; f++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            copy[(state >> 33) % n] ^= (unsigned char)(1u << ((state >> 20) % 8));
        }
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        if ((state >> 40) % 4 == 0) n = (size_t)((state >> 8) % n);
        dp_image_t img;
        if (dp_image_decode(copy, n, "mutant", &img) == DP_OK) {
            unsigned sum = 0;
            for (size_t i = 0; i < (size_t)img.channels * img.height * img.width; i++) sum += img.pixels[i];
            (void)sum;
            decoded++;
            dp_image_free(&img);
        } else if (strncmp(dp_error_message(), "mutant: ", 8) == 0 && !strchr(dp_error_message(), '\n') &&
                   img.pixels == NULL) {
            failed_ok++;
        } else {
            bad++;
        }
    }
    CHECK(bad == 0 && failed_ok > 0, "mutations: %d decoded, %d failed properly, %d failed badly", decoded,
          failed_ok, bad);
    for (int i = 0; i < 3; i++) free(seeds[i].data);
}

static void test_jpeg(void) {
    int w = 13, h = 9;
    for (int components = 1; components <= 3; components += 2) {
        unsigned char *src = image_test_pattern(w, h, components, 7);
        const char *path = testing_tmp_file(components == 1 ? "gray.jpg" : "rgb.jpg");
        CHECK(image_write_jpeg(path, w, h, components, components == 1 ? JCS_GRAYSCALE : JCS_RGB,
                               components == 1 ? JCS_GRAYSCALE : JCS_YCbCr, 100, 0, src) == 0,
              "writing %s", path);
        dp_image_t img;
        dp_status_t st = dp_image_read(path, &img);
        CHECK(st == DP_OK && img.channels == components && img.width == w && img.height == h, "%s: %s", path,
              dp_error_message());
        int worst = 0;
        for (int i = 0; st == DP_OK && i < w * h * components; i++) {
            int d = abs((int)img.pixels[i] - src[i]);
            worst = d > worst ? d : worst;
        }
        CHECK(st == DP_OK && worst <= 3, "%s: a pixel off by %d from what was written (quality 100)", path, worst);
        float input[3 * 5 * 5];
        CHECK(st == DP_OK && dp_image_to_input(&img, 3, 5, 5, input) == DP_OK, "%s into a 3 x 5 x 5 input: %s", path,
              dp_error_message());
        dp_image_free(&img);
        /* the file cut short */
        size_t size;
        unsigned char *bytes = testing_read_file(path, &size);
        const char *cut = testing_tmp_file("cut.jpg");
        write_file(cut, bytes, size * 2 / 3);
        expect_failure("JPEG cut at 2/3", cut, "JPEG");
        free(bytes);
        free(src);
    }
}

int main(void) {
    test_jpeg();
    test_png_kinds();
    test_mutations();
    test_pgm();
    test_not_images();
    test_to_input();
    return testing_finish("test_image");
}
