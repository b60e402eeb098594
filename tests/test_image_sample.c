/* test_image_sample.c - the per-sample path (dp_image_sample) against its
 * parts: with DCT scaling off, every output must equal, byte for byte, the
 * whole image decoded (dp_image_decode_with: PIL's bytes, test_image_formats)
 * then transformed (dp_image_resized_crop / dp_image_resize_center_crop:
 * torchvision's bytes, test_image_transform) with the box and flip that
 * dp_rrc_box and dp_flip_draw give for the same generator. The JPEGs are
 * written here with libjpeg: 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1,
 * progressive, gray, CMYK, YCCK, odd sizes, EXIF orientations 1-8, so the
 * cropped and skipped decoding (only the rows and iMCU columns the resize
 * reads) is shown to give a full decode's pixels on every chroma layout
 * and orientation, in train, eval and fixed modes, 1 and 3 channels, with
 * the bilinear and the bicubic filter (whose wider support reads more).
 *
 * With DCT scaling on (train's default), outputs whose crop shrinks by 2,
 * 4 or 8 come from a scaled decode: the mean absolute difference from the
 * exact path, over all such samples of a 640 x 480 photo-like JPEG, must
 * stay under 2.5 levels (measured about 1.1) and no scaled sample's mean
 * over 5; the decoded pixels must shrink (the point of it). Also: the same
 * generator state gives the same bytes, 4 threads give the 1-thread bytes,
 * a bad file leaves the slot untouched with one line naming it.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "dptrain/image_sample.h"
#include "image_testing.h"
#include "testing.h"

typedef struct {
    const char *name;
    unsigned char *data;
    size_t size;
} fixture_t;

#define MAX_FIXTURES 32
static fixture_t fixtures[MAX_FIXTURES];
static int fixture_count;

/* The EXIF APP1 body for an orientation: "Exif\0\0", then a little-endian
 * TIFF header, an IFD of one entry (tag 0x0112, SHORT, 1 value) and no next IFD. */
static size_t exif_block(int orientation, unsigned char *out) {
    static const unsigned char block[32] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, /* header */
                                            1,   0,   0x12, 0x01, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0,  /* entry */
                                            0,   0,   0, 0};
    memcpy(out, block, sizeof block);
    out[24] = (unsigned char)orientation; /* the entry's value */
    return sizeof block;
}

/* A JPEG in memory: sampling h x v of the first component (others 1 x 1),
 * progressive or not, an EXIF orientation (0: none). */
static void add_jpeg(const char *name, int width, int height, int components, J_COLOR_SPACE in_space,
                     J_COLOR_SPACE jpeg_space, int h_samp, int v_samp, int progressive, int orientation) {
    unsigned char *pixels = image_test_pattern(width, height, components, (unsigned)fixture_count + 11);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr errors;
    c.err = jpeg_std_error(&errors);
    jpeg_create_compress(&c);
    unsigned char *buffer = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buffer, &size);
    c.image_width = (JDIMENSION)width;
    c.image_height = (JDIMENSION)height;
    c.input_components = components;
    c.in_color_space = in_space;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, jpeg_space);
    jpeg_set_quality(&c, 90, TRUE);
    c.comp_info[0].h_samp_factor = h_samp;
    c.comp_info[0].v_samp_factor = v_samp;
    for (int i = 1; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    if (orientation) {
        unsigned char exif[64];
        jpeg_write_marker(&c, JPEG_APP0 + 1, exif, (unsigned)exif_block(orientation, exif));
    }
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = pixels + (size_t)c.next_scanline * width * components;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(pixels);
    fixtures[fixture_count++] = (fixture_t){name, buffer, size};
}

static void add_ppm(const char *name, int width, int height) {
    unsigned char *pixels = image_test_pattern(width, height, 3, 99);
    char header[64];
    int n = snprintf(header, sizeof header, "P6 %d %d 255\n", width, height);
    size_t size = (size_t)n + (size_t)width * height * 3;
    unsigned char *data = malloc(size);
    memcpy(data, header, (size_t)n);
    memcpy(data + n, pixels, size - (size_t)n);
    free(pixels);
    fixtures[fixture_count++] = (fixture_t){name, data, size};
}

static void make_fixtures(void) {
    add_jpeg("444.jpg", 93, 71, 3, JCS_RGB, JCS_YCbCr, 1, 1, 0, 0);
    add_jpeg("422.jpg", 93, 71, 3, JCS_RGB, JCS_YCbCr, 2, 1, 0, 0);
    add_jpeg("420.jpg", 133, 97, 3, JCS_RGB, JCS_YCbCr, 2, 2, 0, 0);
    add_jpeg("440.jpg", 77, 90, 3, JCS_RGB, JCS_YCbCr, 1, 2, 0, 0);
    add_jpeg("411.jpg", 101, 45, 3, JCS_RGB, JCS_YCbCr, 4, 1, 0, 0);
    add_jpeg("420_progressive.jpg", 119, 83, 3, JCS_RGB, JCS_YCbCr, 2, 2, 1, 0);
    add_jpeg("gray.jpg", 87, 65, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, 1, 1, 0, 0);
    add_jpeg("cmyk.jpg", 70, 51, 4, JCS_CMYK, JCS_CMYK, 1, 1, 0, 0);
    add_jpeg("ycck.jpg", 70, 51, 4, JCS_CMYK, JCS_YCCK, 2, 2, 0, 0);
    add_jpeg("small.jpg", 9, 5, 3, JCS_RGB, JCS_YCbCr, 2, 2, 0, 0);
    static const char *names[9] = {"", "o1.jpg", "o2.jpg", "o3.jpg", "o4.jpg", "o5.jpg", "o6.jpg", "o7.jpg", "o8.jpg"};
    for (int o = 1; o <= 8; o++) add_jpeg(names[o], 331, 207, 3, JCS_RGB, JCS_YCbCr, 2, 2, o % 2, o);
    add_ppm("rgb.ppm", 61, 40);
    add_ppm("fixed.ppm", 20, 24); /* 24 x 20 (H x W): fixed mode passes it as it is */
}

static int equal_bytes(const unsigned char *a, const unsigned char *b, size_t n, int *worst) {
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - b[i]);
        *worst = d > *worst ? d : *worst;
    }
    return *worst == 0;
}

/* The expected output: the whole decoded image transformed (squash: the
 * resized crop of the whole image, whose bytes test_image_transform pins
 * to torchvision's). */
static dp_status_t reference(const fixture_t *f, const dp_sample_options_t *o, const dp_sample_report_t *rep,
                             unsigned char *out) {
    dp_image_options_t decode = {.channels = o->channels, .ignore_exif = o->ignore_exif};
    dp_image_t image;
    DP_TRY(dp_image_decode_with(f->data, f->size, f->name, &decode, &image));
    dp_status_t st;
    if (o->mode == DP_SAMPLE_TRAIN) {
        st = dp_image_resized_crop(&image, rep->box, o->height, o->width, rep->flipped, o->interpolation, out);
    } else if ((o->mode == DP_SAMPLE_FIXED || o->mode == DP_SAMPLE_SQUASH) && image.width == o->width &&
               image.height == o->height) {
        size_t plane = (size_t)image.width * image.height;
        for (int c = 0; c < image.channels; c++)
            for (size_t i = 0; i < plane; i++) out[c * plane + i] = image.pixels[i * image.channels + c];
        st = DP_OK;
    } else if (o->mode == DP_SAMPLE_SQUASH) {
        st = dp_image_resized_crop(&image, (dp_crop_box_t){0, 0, image.height, image.width}, o->height, o->width, 0,
                                   o->interpolation, out);
    } else {
        int size = o->resize_size ? o->resize_size : dp_eval_resize_default(o->height, o->width);
        st = dp_image_resize_center_crop(&image, size, o->height, o->width, o->interpolation, out);
    }
    dp_image_free(&image);
    return st;
}

static void test_exact(dp_interpolation_t interpolation) {
    static const int sizes[][2] = {{24, 20}, {32, 32}, {7, 13}, {64, 48}};
    unsigned char got[3 * 64 * 64], want[3 * 64 * 64];
    int samples = 0, exact = 0, boxes_ok = 0, regions = 0;
    long decoded = 0, whole = 0;
    for (int f = 0; f < fixture_count; f++) {
        for (int mode = DP_SAMPLE_TRAIN; mode <= DP_SAMPLE_SQUASH; mode++) {
            for (int k = 0; k < (mode == 0 ? 12 : 4); k++) {
                int channels = k % 2 ? 1 : 3;
                const int *size = sizes[k % 4];
                dp_sample_options_t o = dp_sample_options_default((dp_sample_mode_t)mode, channels, size[0], size[1]);
                o.dct_scale = 0;
                o.ignore_exif = k == 3;
                o.interpolation = interpolation;
                if (mode == 1 && k == 2) o.resize_size = 9; /* smaller than the crop: padding */
                dp_rng_t rng, replay;
                dp_rng_seed(&rng, (uint64_t)f * 1000 + (uint64_t)k);
                replay = rng;
                dp_sample_report_t rep;
                dp_status_t st = dp_image_sample(fixtures[f].data, fixtures[f].size, fixtures[f].name, &o, &rng, got, &rep);
                CHECK(st == DP_OK, "%s: %s", fixtures[f].name, dp_error_message());
                if (st != DP_OK) continue;
                int orientation = fixtures[f].name[0] == 'o' && !o.ignore_exif ? fixtures[f].name[1] - '0' : 1;
                CHECK(rep.info.orientation == orientation, "%s: orientation %d", fixtures[f].name, rep.info.orientation);
                if (mode == 0) {
                    dp_crop_box_t b = dp_rrc_box(rep.info.height, rep.info.width, &o.range, dp_rng_draw32, &replay);
                    int flip = dp_flip_draw(o.flip_p, dp_rng_draw32, &replay);
                    boxes_ok += b.top == rep.box.top && b.left == rep.box.left && b.height == rep.box.height &&
                                b.width == rep.box.width && flip == rep.flipped &&
                                memcmp(&replay, &rng, sizeof rng) == 0;
                }
                int worst = -1;
                size_t n = (size_t)channels * o.height * o.width;
                int same = reference(&fixtures[f], &o, &rep, want) == DP_OK && equal_bytes(got, want, n, &worst);
                CHECK(same, "%s, mode %d, %d channels, %d x %d, box %d,%d %dx%d flip %d: off by up to %d",
                      fixtures[f].name, mode, channels, o.height, o.width, rep.box.top, rep.box.left, rep.box.height,
                      rep.box.width, rep.flipped, worst);
                samples++;
                exact += same;
                decoded += rep.decoded_pixels;
                whole += (long)rep.info.width * rep.info.height;
                regions += rep.decoded_pixels < (long)rep.info.width * rep.info.height;
            }
        }
    }
    printf("exact path, %s: %d of %d samples equal the whole decode + transform (%d fixtures); %d decoded only a "
           "part, %.0f%% of the pixels decoded in all\n",
           dp_interpolation_name(interpolation), exact, samples, fixture_count, regions, 100.0 * decoded / whole);
    CHECK(boxes_ok == fixture_count * 12, "train boxes and flips as dp_rrc_box / dp_flip_draw: %d", boxes_ok);
    CHECK(regions > samples / 4, "only %d of %d samples decoded part of their JPEG", regions, samples);
}

/* DCT scaling: a 640 x 480 JPEG, train crops to 56 x 56 (many shrink by 2-8x). */
static void test_dct_scaling(void) {
    int w = 640, h = 480;
    unsigned char *pixels = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++) /* smooth regions, edges and fine texture, as a photograph has */
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double v = 128 + 70 * sin(x / (23.0 + 7 * c)) * cos(y / 31.0) + 30 * sin((x + 2 * y) / 4.0 + c);
                if ((x / 80 + y / 60) % 2) v = 255 - v;
                pixels[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    const char *path = testing_tmp_file("dct.jpg");
    CHECK(image_write_jpeg(path, w, h, 3, JCS_RGB, JCS_YCbCr, 90, 0, pixels) == 0, "writing %s", path);
    free(pixels);
    size_t size;
    unsigned char *data = testing_read_file(path, &size);
    dp_sample_options_t on = dp_sample_options_default(DP_SAMPLE_TRAIN, 3, 56, 56), off = on;
    off.dct_scale = 0;
    CHECK(on.dct_scale == 1, "DCT scaling is on by default in train mode");
    unsigned char a[3 * 56 * 56], b[3 * 56 * 56];
    int scaled[9] = {0}, samples = 300;
    double sum = 0, worst_mean = 0;
    long pixels_on = 0, pixels_off = 0, count = 0;
    for (int i = 0; i < samples; i++) {
        dp_rng_t r1, r2;
        dp_rng_seed(&r1, 5000 + (uint64_t)i);
        r2 = r1;
        dp_sample_report_t ra, rb;
        CHECK(dp_image_sample(data, size, "dct.jpg", &on, &r1, a, &ra) == DP_OK &&
                  dp_image_sample(data, size, "dct.jpg", &off, &r2, b, &rb) == DP_OK,
              "%s", dp_error_message());
        CHECK(memcmp(&ra.box, &rb.box, sizeof ra.box) == 0 && ra.flipped == rb.flipped, "the same crop either way");
        scaled[ra.scale_denom]++;
        pixels_on += ra.decoded_pixels;
        pixels_off += rb.decoded_pixels;
        if (ra.scale_denom == 1) {
            CHECK(memcmp(a, b, sizeof a) == 0, "sample %d unscaled yet different", i);
            continue;
        }
        long diff = 0;
        for (size_t j = 0; j < sizeof a; j++) diff += abs((int)a[j] - b[j]);
        double mean = (double)diff / sizeof a;
        sum += diff;
        count += sizeof a;
        worst_mean = mean > worst_mean ? mean : worst_mean;
    }
    double mean = count ? sum / count : 0;
    printf("DCT scaling: %d samples at 1/2, %d at 1/4, %d at 1/8, %d unscaled; mean |difference| %.3f levels, "
           "worst sample %.3f; %.1fx fewer pixels decoded\n",
           scaled[2], scaled[4], scaled[8], scaled[1], mean, worst_mean, (double)pixels_off / pixels_on);
    CHECK(scaled[2] > 10 && scaled[4] > 10 && scaled[8] > 0, "too few scaled samples");
    CHECK(mean < 2.5 && worst_mean < 5.0, "DCT scaling: mean %.3f, worst sample %.3f", mean, worst_mean);
    CHECK(pixels_off > 2 * pixels_on, "DCT scaling decoded %ld pixels, without %ld", pixels_on, pixels_off);
    free(data);
}

typedef struct {
    int first;
    unsigned char *out; /* 16 samples of 3 x 32 x 32 */
    int failures;
} worker_t;

static void *run_worker(void *p) {
    worker_t *w = p;
    dp_sample_options_t o = dp_sample_options_default(DP_SAMPLE_TRAIN, 3, 32, 32);
    for (int i = 0; i < 16; i++) {
        const fixture_t *f = &fixtures[(w->first + i) % fixture_count];
        dp_rng_t rng;
        dp_rng_seed(&rng, dp_seed_mix(42, (uint64_t)(w->first + i)));
        w->failures += dp_image_sample(f->data, f->size, f->name, &o, &rng, w->out + (size_t)i * 3 * 32 * 32, NULL) != DP_OK;
    }
    return NULL;
}

static void test_threads_and_errors(void) {
    worker_t one = {.first = 0, .out = malloc(16 * 3 * 32 * 32)};
    run_worker(&one);
    worker_t four[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        four[t] = (worker_t){.first = 0, .out = malloc(16 * 3 * 32 * 32)};
        pthread_create(&threads[t], NULL, run_worker, &four[t]);
    }
    int same = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        same += four[t].failures == 0 && memcmp(four[t].out, one.out, 16 * 3 * 32 * 32) == 0;
        free(four[t].out);
    }
    CHECK(one.failures == 0 && same == 4, "4 threads give the 1-thread bytes: %d of 4", same);
    free(one.out);

    unsigned char slot[3 * 8 * 8], before[3 * 8 * 8];
    memset(slot, 0xaa, sizeof slot);
    memcpy(before, slot, sizeof slot);
    dp_sample_options_t o = dp_sample_options_default(DP_SAMPLE_TRAIN, 3, 8, 8);
    dp_rng_t rng;
    dp_rng_seed(&rng, 1);
    const fixture_t *f = &fixtures[2];
    dp_error_clear();
    dp_status_t st = dp_image_sample(f->data, f->size / 2, "half.jpg", &o, &rng, slot, NULL);
    const char *msg = dp_error_message();
    CHECK(st != DP_OK && strncmp(msg, "half.jpg: ", 10) == 0 && !strchr(msg, '\n') && memcmp(slot, before, sizeof slot) == 0,
          "a JPEG cut in half: status %d, '%s', slot %s", (int)st, msg, memcmp(slot, before, sizeof slot) ? "written" : "untouched");
    CHECK(dp_image_sample(f->data, f->size, "x.jpg", &o, NULL, slot, NULL) == DP_ERR_ARG, "train without a generator");
    o.channels = 2;
    CHECK(dp_image_sample(f->data, f->size, "x.jpg", &o, &rng, slot, NULL) == DP_ERR_ARG, "2 channels refused");
}

int main(void) {
    make_fixtures();
    test_exact(DP_INTERP_BILINEAR);
    test_exact(DP_INTERP_BICUBIC);
    test_dct_scaling();
    test_threads_and_errors();
    for (int i = 0; i < fixture_count; i++) free(fixtures[i].data);
    return testing_finish("test_image_sample");
}
