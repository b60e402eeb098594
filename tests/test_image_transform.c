/* test_image_transform.c - torchvision's transforms (image_transform.h)
 * against torchvision 0.14 itself (tests/fixtures/image/make_transform.py):
 *
 * - RandomResizedCrop.get_params: torchvision draws from torch's mt19937
 *   after torch.manual_seed(seed); here the same generator (re-implemented
 *   below) feeds dp_rrc_box, then dp_flip_draw: 4000 cases (default
 *   ranges, random ranges, ranges that never fit so the central fallback
 *   runs, images of 1 to 700 pixels a side) must give the same boxes and
 *   flips, all of them, against torch's scalar kernels
 *   (ATEN_CPU_CAPABILITY=default); so must the image sizes (found by the
 *   fixture maker) where computing the uniform in double, the log and exp
 *   in double, or the uniform with a fused multiply-add would give another
 *   box: they show the float32 arithmetic is torch's. Torch's AVX2/AVX-512
 *   kernels round the uniform (fused) and the exp (SLEEF) differently in a
 *   float's last bit: against them at most 0.5% of the random cases may
 *   differ (printed).
 * - F.resized_crop (+ F.hflip) and F.resize + F.center_crop on PIL images,
 *   gray and RGB, 1x1 to 300x200, up and down by up to 70x, crops larger
 *   than the resized image (zero padding): every output byte equal
 *   (Pillow's 8-bit path is integer arithmetic on the same double weights;
 *   the brief allows 1, none is needed); torchvision's Resize(S) sizes.
 * - the same with interpolation BICUBIC (resize_bicubic.*: 1200 cases, with
 *   upscales up to 40x, thin images and black-and-white stripes, where the
 *   cubic's negative weights and its clamp to 0..255 matter): every byte
 *   equal, whether the SSE2 path or the plain loops ran.
 */
#include <stdint.h>
#include <string.h>

#include "dptrain/image_transform.h"
#include "image_testing.h"
#include "testing.h"

/* --- torch's CPU generator: mt19937, random() = one 32-bit output ------------------- */

typedef struct {
    uint32_t state[624];
    int next;
} mt19937_t;

static void mt_seed(mt19937_t *mt, uint32_t seed) {
    mt->state[0] = seed;
    for (int i = 1; i < 624; i++)
        mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + (uint32_t)i;
    mt->next = 624;
}

static uint32_t mt_draw(void *p) {
    mt19937_t *mt = p;
    if (mt->next >= 624) {
        for (int i = 0; i < 624; i++) {
            uint32_t y = (mt->state[i] & 0x80000000u) | (mt->state[(i + 1) % 624] & 0x7fffffffu);
            mt->state[i] = mt->state[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
        }
        mt->next = 0;
    }
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* The boxes of a boxes.txt, by kind (0: random cases, 1-3: the hard sizes
 * of make_transform.py): cases[k] lines, same[k] equal to ours (box and flip). */
static void compare_boxes(const char *path, int cases[4], int same[4], int *fallbacks, int report) {
    size_t size;
    char *text = (char *)testing_read_file(path, &size);
    memset(cases, 0, 4 * sizeof(int));
    memset(same, 0, 4 * sizeof(int));
    *fallbacks = 0;
    CHECK(text != NULL, "%s missing", path);
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        unsigned seed;
        int h, w, top, left, bh, bw, flip, kind;
        dp_rrc_range_t r;
        if (sscanf(line, "%u %d %d %lf %lf %lf %lf %d %d %d %d %d %d", &seed, &h, &w, &r.scale_min, &r.scale_max,
                   &r.ratio_min, &r.ratio_max, &top, &left, &bh, &bw, &flip, &kind) != 13 ||
            kind < 0 || kind > 3)
            continue;
        mt19937_t mt;
        mt_seed(&mt, seed);
        dp_crop_box_t box = dp_rrc_box(h, w, &r, mt_draw, &mt);
        int flipped = dp_flip_draw(0.5, mt_draw, &mt);
        int equal = box.top == top && box.left == left && box.height == bh && box.width == bw && flipped == flip;
        cases[kind]++;
        same[kind] += equal;
        *fallbacks += mt.next == 21; /* 10 attempts of 2 draws, then the flip: nothing fitted */
        if (!equal && report)
            fprintf(stderr, "seed %u, %d x %d (kind %d): box %d,%d %dx%d flip %d, torchvision %d,%d %dx%d flip %d\n",
                    seed, h, w, kind, box.top, box.left, box.height, box.width, flipped, top, left, bh, bw, flip);
    }
    free(text);
}

static void test_boxes(const char *dir) {
    char args[1200], path[1200];
    snprintf(args, sizeof args, "'%s/scalar' both 4000", dir); /* and the resizes (PIL: any capability) */
    image_fixture_run("ATEN_CPU_CAPABILITY=default", "fixtures/image/make_transform.py", args);
    snprintf(path, sizeof path, "%s/scalar/boxes.txt", dir);
    int cases[4], same[4], fallbacks;
    compare_boxes(path, cases, same, &fallbacks, 1);
    printf("RandomResizedCrop: %d of %d random cases (%d central fallbacks) equal torchvision's box and flip "
           "(scalar kernels); sizes where double arithmetic differs: uniform %d of %d, log/exp %d of %d, "
           "fused multiply-add %d of %d\n",
           same[0], cases[0], fallbacks, same[1], cases[1], same[2], cases[2], same[3], cases[3]);
    CHECK(cases[0] == 4000 && same[0] == cases[0], "random cases: %d of %d", same[0], cases[0]);
    for (int k = 1; k <= 3; k++) CHECK(cases[k] >= 10 && same[k] == cases[k], "hard kind %d: %d of %d", k, same[k], cases[k]);
    CHECK(fallbacks >= 100, "only %d cases reached the central fallback", fallbacks);
    snprintf(args, sizeof args, "'%s/native' boxes 4000", dir);
    image_fixture_run("", "fixtures/image/make_transform.py", args);
    snprintf(path, sizeof path, "%s/native/boxes.txt", dir);
    compare_boxes(path, cases, same, &fallbacks, 0);
    printf("RandomResizedCrop: %d of %d random cases equal torchvision's with this CPU's vectorised kernels "
           "(its fused multiply-add: %d of %d hard sizes)\n",
           same[0], cases[0], same[3], cases[3]);
    CHECK(cases[0] == 4000 && same[0] >= cases[0] - cases[0] / 200, "native kernels: %d of %d boxes", same[0],
          cases[0]);
}

/* The cases of NAME.txt / NAME.bin (made with the boxes, by test_boxes) resized with `interpolation`. */
static void test_resizes(const char *dir, const char *name, dp_interpolation_t interpolation) {
    char path[1200];
    size_t text_size, blob_size;
    snprintf(path, sizeof path, "%s/scalar/%s.txt", dir, name);
    char *text = (char *)testing_read_file(path, &text_size);
    snprintf(path, sizeof path, "%s/scalar/%s.bin", dir, name);
    unsigned char *blob = testing_read_file(path, &blob_size);
    CHECK(text && blob, "resize fixtures missing");
    int crops = 0, evals = 0, sizes = 0, exact = 0, worst = 0, padded = 0, upscaled = 0, gray = 0;
    long bytes = 0, differing = 0;
    unsigned char *out = malloc(3 * 400 * 400);
    for (char *line = text ? strtok(text, "\n") : NULL; line && blob; line = strtok(NULL, "\n")) {
        int c, h, w, top, left, bh, bw, oh, ow, flip, s, nh, nw;
        long offset;
        dp_status_t st;
        if (sscanf(line, "crop %d %d %d %d %d %d %d %d %d %d %ld", &c, &h, &w, &top, &left, &bh, &bw, &oh, &ow,
                   &flip, &offset) == 11) {
            dp_image_t image = {.channels = c, .height = h, .width = w, .pixels = blob + offset};
            st = dp_image_resized_crop(&image, (dp_crop_box_t){top, left, bh, bw}, oh, ow, flip, interpolation, out);
            crops++;
            upscaled += oh > bh || ow > bw;
        } else if (sscanf(line, "eval %d %d %d %d %d %d %ld", &c, &h, &w, &s, &oh, &ow, &offset) == 7) {
            dp_image_t image = {.channels = c, .height = h, .width = w, .pixels = blob + offset};
            st = dp_image_resize_center_crop(&image, s, oh, ow, interpolation, out);
            int rh, rw;
            dp_resize_shorter(h, w, s, &rh, &rw);
            padded += oh > rh || ow > rw;
            evals++;
        } else if (sscanf(line, "size %d %d %d %d %d", &h, &w, &s, &nh, &nw) == 5) {
            int gh, gw;
            dp_resize_shorter(h, w, s, &gh, &gw);
            CHECK(gh == nh && gw == nw, "Resize(%d) of %d x %d: %d x %d, torchvision %d x %d", s, h, w, gh, gw, nh, nw);
            sizes++;
            continue;
        } else {
            continue;
        }
        CHECK(st == DP_OK, "%s: %s", line, dp_error_message());
        const unsigned char *want = blob + offset + (size_t)h * w * c;
        int diff = 0;
        for (size_t i = 0; st == DP_OK && i < (size_t)c * oh * ow; i++) {
            int d = abs((int)out[i] - want[i]);
            diff = d > diff ? d : diff;
            differing += d != 0;
        }
        bytes += (long)c * oh * ow;
        gray += c == 1;
        exact += diff == 0;
        worst = diff > worst ? diff : worst;
        CHECK(st == DP_OK && diff == 0, "%s: a byte off by %d from torchvision's", line, diff);
    }
    printf("resize %s: %d resized crops (%d upscaling), %d resize + center crops (%d padded), %d of them gray: "
           "%d byte-exact, %ld of %ld bytes differ, largest difference %d; %d Resize(S) sizes\n",
           dp_interpolation_name(interpolation), crops, upscaled, evals, padded, gray, exact, differing, bytes, worst,
           sizes);
    CHECK(crops >= 300 && evals >= 100 && padded >= 5 && upscaled >= 50 && gray >= 100, "too few cases");
    CHECK(sizes == (interpolation == DP_INTERP_BILINEAR ? 300 : 0), "%d Resize(S) sizes", sizes);
    free(out);
    free(text);
    free(blob);
}

static void test_small_things(void) {
    CHECK(dp_eval_resize_default(224, 224) == 256 && dp_eval_resize_default(28, 28) == 32 &&
              dp_eval_resize_default(32, 32) == 37 && dp_eval_resize_default(28, 100) == 114,
          "the evaluation's default resize: %d %d %d %d", dp_eval_resize_default(224, 224),
          dp_eval_resize_default(28, 28), dp_eval_resize_default(32, 32), dp_eval_resize_default(28, 100));
    dp_crop_box_t b = dp_center_crop_box(10, 9, 4, 12);
    CHECK(b.top == 3 && b.left == -1 && b.height == 4 && b.width == 12, "center crop box %d %d", b.top, b.left);
    b = dp_center_crop_box(11, 8, 4, 5); /* (11 - 4) / 2 = 3.5 -> 4, (8 - 5) / 2 = 1.5 -> 2: halves to even */
    CHECK(b.top == 4 && b.left == 2, "center crop rounds halves to even: %d %d", b.top, b.left);
    unsigned char px[3] = {1, 2, 3}, out[3];
    dp_image_t image = {.channels = 3, .height = 1, .width = 1, .pixels = px};
    CHECK(dp_image_resized_crop(&image, (dp_crop_box_t){0, 0, 2, 1}, 1, 1, 0, DP_INTERP_BILINEAR, out) == DP_ERR_ARG,
          "a box outside the image is refused");
    CHECK(dp_image_resized_crop(&image, (dp_crop_box_t){0, 0, 1, 1}, 0, 1, 0, DP_INTERP_BICUBIC, out) == DP_ERR_ARG,
          "an empty output is refused");
    CHECK(dp_image_resized_crop(&image, (dp_crop_box_t){0, 0, 1, 1}, 1, 1, 0, (dp_interpolation_t)7, out) ==
              DP_ERR_ARG, "an unknown interpolation is refused");
    CHECK(!strcmp(dp_interpolation_name(DP_INTERP_BICUBIC), "bicubic") &&
              !strcmp(dp_interpolation_name(DP_INTERP_BILINEAR), "bilinear"), "the interpolations' names");
}

int main(void) {
    const char *dir = testing_tmpdir();
    test_small_things();
    test_boxes(dir);
    test_resizes(dir, "resize", DP_INTERP_BILINEAR);
    test_resizes(dir, "resize_bicubic", DP_INTERP_BICUBIC);
    return testing_finish("test_image_transform");
}
