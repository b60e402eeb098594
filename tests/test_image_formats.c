/* test_image_formats.c - every image kind the decoders read, against PIL.
 *
 * tests/fixtures/image/make_formats.py writes JPEGs (baseline, progressive,
 * 4:4:4 / 4:2:2 / 4:2:0, gray, CMYK, EXIF orientations 1-8), PNGs (every
 * colour type and depth, palettes with tRNS, eXIf orientations), PGM/PPM
 * (P2, P3, P5, P6, several maxvals) and BMPs (1/4/8-bit palettes, 24- and
 * 32-bit, BI_BITFIELDS, top-down, OS/2 1.x), plus the YCCK, RGB-component
 * and arithmetic-coded JPEGs written here with libjpeg first, and for each
 * the bytes of PIL's exif_transpose(...).convert("L") and ("RGB"). Every
 * file must decode to exactly those bytes (no tolerance: PIL's arithmetic
 * is integer, and PIL decodes JPEG with the same libjpeg-turbo), report
 * the same size and channel count in the probe (from memory and from the
 * file), and keep its stored size with ignore_exif. Unsupported kinds
 * (16-bit and RLE BMPs, PBM, a lossless JPEG) fail with one line naming
 * the file and what it is.
 */
#include <string.h>

#include "dptrain/image.h"
#include "image_testing.h"
#include "testing.h"

static const char *dir;

static const char *in_dir(const char *name) {
    static char paths[4][1024];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

static void write_libjpeg_files(void) {
    unsigned char *cmyk = image_test_pattern(23, 17, 4, 1), *rgb = image_test_pattern(29, 18, 3, 2);
    CHECK(image_write_jpeg(in_dir("libjpeg_ycck.jpg"), 23, 17, 4, JCS_CMYK, JCS_YCCK, 90, 0, cmyk) == 0, "YCCK");
    CHECK(image_write_jpeg(in_dir("libjpeg_rgb_components.jpg"), 29, 18, 3, JCS_RGB, JCS_RGB, 90, 0, rgb) == 0, "RGB");
    CHECK(image_write_jpeg(in_dir("libjpeg_arithmetic.jpg"), 29, 18, 3, JCS_RGB, JCS_YCbCr, 90, 1, rgb) == 0, "arith");
    free(cmyk);
    free(rgb);
}

/* One file: decoded as 1 and 3 channels equal PIL's bytes; the probe. */
static int check_file(const char *name, int width, int height, int channels) {
    size_t size, ref_size;
    unsigned char *data = testing_read_file(in_dir(name), &size);
    CHECK(data != NULL, "%s: unreadable", name);
    if (!data) return 0;
    int ok = 1;
    for (int c = 1; c <= 3; c += 2) {
        char ref_name[300];
        snprintf(ref_name, sizeof ref_name, "%s.%s", name, c == 1 ? "L" : "RGB");
        unsigned char *ref = testing_read_file(in_dir(ref_name), &ref_size);
        dp_image_options_t options = {.channels = c};
        dp_image_t image;
        dp_status_t st = dp_image_decode_with(data, size, name, &options, &image);
        CHECK(st == DP_OK, "%s: %s", name, dp_error_message());
        if (st == DP_OK && ref) {
            int same = image.width == width && image.height == height && image.channels == c &&
                       ref_size == (size_t)width * height * c && memcmp(image.pixels, ref, ref_size) == 0;
            long differ = 0, worst = 0;
            for (size_t i = 0; !same && i < ref_size && image.width == width && image.height == height; i++) {
                long d = labs((long)image.pixels[i] - ref[i]);
                differ += d != 0;
                worst = d > worst ? d : worst;
            }
            CHECK(same, "%s as %d channels: %d x %d x %d, PIL %d x %d; %ld bytes differ, by up to %ld", name, c,
                  image.width, image.height, image.channels, width, height, differ, worst);
            ok &= same;
        }
        dp_image_free(&image);
        free(ref);
    }
    dp_image_t native;
    if (dp_image_decode(data, size, name, &native) == DP_OK) {
        CHECK(native.channels == channels, "%s: %d channels by default, expected %d", name, native.channels,
              channels);
        dp_image_free(&native);
    }
    dp_image_info_t info, file_info;
    CHECK(dp_image_probe(data, size, name, 0, &info) == DP_OK && info.width == width && info.height == height &&
              info.channels == channels,
          "%s: probe %d x %d x %d (%s), expected %d x %d x %d", name, info.width, info.height, info.channels,
          dp_error_message(), width, height, channels);
    CHECK(dp_image_probe_file(in_dir(name), 0, &file_info) == DP_OK && memcmp(&info, &file_info, sizeof info) == 0,
          "%s: the file's probe differs from the bytes' (%s)", name, dp_error_message());
    /* ignore_exif: the stored size, and the stored pixels */
    dp_image_info_t stored;
    CHECK(dp_image_probe(data, size, name, 1, &stored) == DP_OK && stored.orientation == 1 &&
              stored.width == info.stored_width && stored.height == info.stored_height,
          "%s: probe ignoring EXIF", name);
    free(data);
    return ok;
}

static void check_orientation_ignored(void) {
    /* exif_6.jpg ignoring its orientation = exif_1.jpg (same pixels, no rotation) */
    size_t n1, n6;
    unsigned char *d1 = testing_read_file(in_dir("exif_1.jpg"), &n1), *d6 = testing_read_file(in_dir("exif_6.jpg"), &n6);
    dp_image_options_t ignore = {.channels = 3, .ignore_exif = 1};
    dp_image_t a, b;
    CHECK(dp_image_decode_with(d1, n1, "exif_1", &ignore, &a) == DP_OK &&
              dp_image_decode_with(d6, n6, "exif_6", &ignore, &b) == DP_OK,
          "%s", dp_error_message());
    CHECK(a.width == 37 && b.width == 37 && a.height == 21 &&
              memcmp(a.pixels, b.pixels, (size_t)37 * 21 * 3) == 0,
          "ignore_exif keeps the stored pixels");
    dp_image_info_t info;
    CHECK(dp_image_probe(d6, n6, "exif_6", 0, &info) == DP_OK && info.orientation == 6 && info.width == 21 &&
              info.stored_width == 37,
          "exif_6: orientation %d, %d x %d", info.orientation, info.width, info.height);
    dp_image_free(&a);
    dp_image_free(&b);
    free(d1);
    free(d6);
}

/* Bytes that must fail with one line naming `name` and containing `part`. */
static void expect_refused(const char *name, const unsigned char *data, size_t size, const char *part) {
    dp_image_t image;
    dp_error_clear();
    dp_status_t st = dp_image_decode(data, size, name, &image);
    const char *msg = dp_error_message();
    CHECK(st != DP_OK && strncmp(msg, name, strlen(name)) == 0 && !strchr(msg, '\n') && strstr(msg, part) &&
              image.pixels == NULL,
          "%s: status %d, message '%s' (wanted '%s')", name, (int)st, msg, part);
    dp_image_info_t info;
    CHECK(dp_image_probe(data, size, name, 0, &info) != DP_OK || st == DP_OK, "%s: the probe accepts it", name);
}

static void check_refusals(void) {
    size_t size;
    unsigned char *bmp = testing_read_file(in_dir("bmp24.bmp"), &size);
    unsigned char copy[4096];
    memcpy(copy, bmp, size);
    copy[28] = 16; /* bits per pixel */
    expect_refused("sixteen.bmp", copy, size, "16 bits per pixel is not supported");
    memcpy(copy, bmp, size);
    copy[28] = 8, copy[30] = 1; /* RLE8 */
    expect_refused("rle.bmp", copy, size, "RLE-compressed BMP");
    memcpy(copy, bmp, size);
    copy[14] = 20; /* header size */
    expect_refused("header.bmp", copy, size, "a header of 20 bytes");
    free(bmp);
    expect_refused("bitmap.pbm", (const unsigned char *)"P4 8 1\n\xff", 9, "PBM/PAM (P4) images are not supported");
    unsigned char *jpeg = testing_read_file(in_dir("rgb_420.jpg"), &size);
    for (size_t i = 2; i + 1 < size; i++)
        if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {
            jpeg[i + 1] = 0xc3; /* SOF0 -> SOF3 */
            break;
        }
    expect_refused("lossless.jpg", jpeg, size, "lossless");
    free(jpeg);
    expect_refused("text.jpg", (const unsigned char *)"GIF8 9a...", 10, "not a JPEG, PNG, PGM/PPM or BMP");
    /* formats an image folder may hold that dptrain does not read: named */
    expect_refused("anim.gif", (const unsigned char *)"GIF89a....", 10,
                   "anim.gif: a GIF image: dptrain reads JPEG, PNG, PGM/PPM and BMP (convert it to one of those)");
    expect_refused("photo.webp", (const unsigned char *)"RIFF\x24\0\0\0WEBPVP8 ", 16, "a WebP image: dptrain reads");
    expect_refused("scan.tif", (const unsigned char *)"II*\0\x08\0\0\0", 8, "a TIFF image: dptrain reads");
    expect_refused("scan.tiff", (const unsigned char *)"MM\0*\0\0\0\x08", 8, "a TIFF image: dptrain reads");
    expect_refused("phone.heic", (const unsigned char *)"\0\0\0\x18" "ftypheic\0\0\0\0", 16, "a HEIF image: dptrain reads");
    expect_refused("small.avif", (const unsigned char *)"\0\0\0\x1c" "ftypavif\0\0\0\0", 16, "an AVIF image: dptrain reads");
    expect_refused("riff.wav", (const unsigned char *)"RIFF\x24\0\0\0WAVEfmt ", 16, "not a JPEG, PNG, PGM/PPM or BMP");
}

int main(void) {
    dir = testing_tmpdir();
    write_libjpeg_files();
    char args[1100];
    snprintf(args, sizeof args, "'%s'", dir);
    image_fixture_run("", "fixtures/image/make_formats.py", args);
    size_t size;
    char *manifest = (char *)testing_read_file(in_dir("manifest.txt"), &size);
    CHECK(manifest != NULL, "no manifest");
    int files = 0, exact = 0, kinds[4] = {0};
    for (char *line = manifest ? strtok(manifest, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[256];
        int w, h, c;
        if (sscanf(line, "%255s %d %d %d", name, &w, &h, &c) != 4) continue;
        files++;
        exact += check_file(name, w, h, c);
        const char *ext = strrchr(name, '.');
        kinds[0] += strcmp(ext, ".jpg") == 0, kinds[1] += strcmp(ext, ".png") == 0;
        kinds[2] += strcmp(ext, ".pgm") == 0 || strcmp(ext, ".ppm") == 0, kinds[3] += strcmp(ext, ".bmp") == 0;
    }
    printf("formats: %d files (%d JPEG, %d PNG, %d PNM, %d BMP), %d equal to PIL's bytes as L and RGB\n", files,
           kinds[0], kinds[1], kinds[2], kinds[3], exact);
    CHECK(files >= 60 && kinds[0] >= 25 && kinds[3] >= 10, "only %d files", files);
    free(manifest);
    check_orientation_ignored();
    check_refusals();
    return testing_finish("test_image_formats");
}
