/* test_color_jitter.c - ColorJitter (color_jitter.h) against torchvision
 * 0.14 on PIL 9 (tests/fixtures/image/make_color_jitter.py):
 * - PIL's convert("HSV") of every 13th of the 2^24 RGB colours and
 *   convert("RGB") of the same numbers as H, S, V (DPTRAIN_CJ_EXHAUSTIVE=1:
 *   all of them): every byte equal;
 * - F.adjust_hue at 72 factors (+-0.5, 0, -0, +-1e-6, +-1/255 and around
 *   it, +-1/3, ..., as doubles and as the float32 a draw makes, 24 random
 *   floats) and ColorJitter's forward at 40 fixed orders and factors per
 *   image (some adjustments off, some factors 0), on images of 1 and 3
 *   channels and odd sizes (a constant one, a gray one, 2x3): every output
 *   byte equal (the count of differing bytes is printed, must be 0);
 * - the draw given torch's words (its mt19937 replayed by numpy): torch's
 *   own get_params, order and float32 factors, for 300 seeds;
 * - the draws: the orders uniform over the 24 permutations (chi-square
 *   over 96000 draws), every factor in its range and spread over it, one
 *   word per adjustment that is on after the order's 3, the same words the
 *   same pixels;
 * - the option's text: B, B,C,S and B,C,S,H, the bounds, one line for a
 *   bad value; the recorded text reads back as the same values;
 * - in a training sample (image_sample.h): the crop and flip as without,
 *   then the jitter drawn from the same generator after their words; the
 *   evaluation modes never jitter; auto-augmentation with it is refused.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/color_jitter.h"
#include "dptrain/image_sample.h"
#include "image_testing.h"
#include "testing.h"

#define MAX_IMAGES 16

/* hsv.raw and rgb.raw: the conversions of the colours k x stride. */
static void test_hsv(const char *dir, int stride) {
    const size_t n = (((size_t)1 << 24) + stride - 1) / stride;
    unsigned char *in = malloc(3 * n), *out = malloc(3 * n);
    for (size_t k = 0; k < n; k++) {
        const uint32_t c = (uint32_t)(k * stride);
        in[k] = (unsigned char)(c >> 16), in[n + k] = (unsigned char)(c >> 8), in[2 * n + k] = (unsigned char)c;
    }
    const char *names[2] = {"hsv", "rgb"};
    long differing[2] = {0, 0};
    for (int which = 0; which < 2; which++) {
        char path[1200];
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s.raw", dir, names[which]);
        unsigned char *want = testing_read_file(path, &size);
        CHECK(want && size == 3 * n, "%s: %zu bytes, expected %zu", path, size, 3 * n);
        if (!want || size != 3 * n) {
            free(want);
            continue;
        }
        if (which == 0) dp_rgb_to_hsv(in, out, n);
        else dp_hsv_to_rgb(in, out, n);
        for (size_t i = 0; i < 3 * n; i++)
            if (out[i] != want[i] && differing[which]++ < 5)
                fprintf(stderr, "%s of (%d, %d, %d): plane %zu is %d, PIL %d\n", names[which], in[i % n],
                        in[n + i % n], in[2 * n + i % n], i / n, out[i], want[i]);
        free(want);
    }
    printf("test_color_jitter: %zu colours (every %d-th) to HSV and back as PIL: %ld and %ld bytes differ\n", n, stride,
           differing[0], differing[1]);
    CHECK(differing[0] == 0 && differing[1] == 0, "HSV conversions: %ld and %ld bytes differ", differing[0],
          differing[1]);
    free(in);
    free(out);
}

/* Words from a list (torch's, replayed), as a dp_draw_fn. */
typedef struct {
    const uint32_t *words;
    int next, count;
} word_list_t;

static uint32_t draw_listed(void *state) {
    word_list_t *l = state;
    return l->next < l->count ? l->words[l->next++] : 0;
}

static double factor_or_off(const char *text, int *on) {
    *on = strcmp(text, "off") != 0;
    return *on ? strtod(text, NULL) : 0.0;
}

static void test_against_pil(const char *dir, int stride) {
    char args[1200], path[1200];
    snprintf(args, sizeof args, "'%s' %d", dir, stride);
    image_fixture_run("ATEN_CPU_CAPABILITY=default", "fixtures/image/make_color_jitter.py", args);
    test_hsv(dir, stride);
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s", path);
    if (!f) return;
    unsigned char *inputs[MAX_IMAGES] = {0}, *outputs[MAX_IMAGES] = {0};
    size_t offsets[MAX_IMAGES] = {0}, out_sizes[MAX_IMAGES] = {0};
    int shape[MAX_IMAGES][3] = {{0}};
    long cases[2] = {0, 0}, differing[2] = {0, 0}, bad_cases = 0, channels_seen[4] = {0}, draws = 0,
         draws_differing = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char value[4][64];
        int k, c, h, w, order[4], kind = -1;
        dp_cj_draw_t d = {.order = {0}};
        if (image_fixture_pair(dir, line, inputs, outputs, out_sizes, shape, MAX_IMAGES)) continue;
        if (sscanf(line, "hue %d %63s", &k, value[0]) == 2) {
            kind = 0;
            d = (dp_cj_draw_t){.order = {DP_CJ_HUE, 0, 1, 2}, .on = {0, 0, 0, 1}};
            d.factor[DP_CJ_HUE] = strtod(value[0], NULL);
        } else if (!strncmp(line, "draw ", 5)) { /* torch's own draw from its words */
            dp_color_jitter_t jitter;
            unsigned long long words[7];
            uint32_t list[7];
            if (sscanf(line, "draw %lf %lf %lf %lf %llu %llu %llu %llu %llu %llu %llu %d %d %d %d %63s %63s %63s %63s",
                       &jitter.value[0], &jitter.value[1], &jitter.value[2], &jitter.value[3], &words[0], &words[1],
                       &words[2], &words[3], &words[4], &words[5], &words[6], &order[0], &order[1], &order[2],
                       &order[3], value[0], value[1], value[2], value[3]) != 19) {
                CHECK(0, "unreadable: %s", line);
                continue;
            }
            for (int j = 0; j < 7; j++) list[j] = (uint32_t)words[j];
            word_list_t state = {list, 0, 7};
            dp_color_jitter_draw(&jitter, draw_listed, &state, &d);
            int equal = 1;
            for (int j = 0; j < DP_CJ_OPS; j++) {
                int on;
                const double want = factor_or_off(value[j], &on);
                equal &= d.order[j] == order[j] && d.on[j] == on && (!on || d.factor[j] == want);
            }
            draws++;
            if (!equal && draws_differing++ < 5) fprintf(stderr, "torch's draw differs: %s", line);
            continue;
        } else if (sscanf(line, "jitter %d %d %d %d %d %63s %63s %63s %63s", &k, &order[0], &order[1], &order[2],
                          &order[3], value[0], value[1], value[2], value[3]) == 9) {
            kind = 1;
            for (int j = 0; j < DP_CJ_OPS; j++) {
                d.order[j] = order[j];
                d.factor[j] = factor_or_off(value[j], &d.on[j]);
            }
        }
        if (kind < 0 || k < 0 || k >= MAX_IMAGES) continue;
        c = shape[k][0], h = shape[k][1], w = shape[k][2];
        const size_t n = (size_t)c * h * w;
        if (!inputs[k] || !outputs[k] || offsets[k] + n > out_sizes[k]) {
            CHECK(0, "case of image %d unreadable: %s", k, line);
            break;
        }
        unsigned char *pixels = malloc(n);
        memcpy(pixels, inputs[k], n);
        CHECK(dp_cj_apply_draw(&d, pixels, c, h, w) == DP_OK, "%s", line);
        long diff = 0;
        for (size_t i = 0; i < n; i++) diff += pixels[i] != outputs[k][offsets[k] + i];
        if (diff && bad_cases++ < 5)
            fprintf(stderr, "image %d (%d x %d x %d): %ld bytes differ: %s", k, c, h, w, diff, line);
        differing[kind] += diff;
        cases[kind]++;
        channels_seen[c]++;
        offsets[k] += n;
        free(pixels);
    }
    fclose(f);
    printf("test_color_jitter: %ld adjust_hue cases against PIL, %ld bytes differ; %ld ColorJitter cases, %ld bytes "
           "differ\n", cases[0], differing[0], cases[1], differing[1]);
    CHECK(cases[0] >= 500 && differing[0] == 0, "adjust_hue: %ld cases, %ld differing bytes", cases[0], differing[0]);
    CHECK(cases[1] >= 300 && differing[1] == 0, "ColorJitter: %ld cases, %ld differing bytes", cases[1], differing[1]);
    CHECK(channels_seen[1] > 0 && channels_seen[3] > 0, "1- and 3-channel images");
    printf("test_color_jitter: %ld of torch's get_params from its own words, %ld differ\n", draws, draws_differing);
    CHECK(draws == 300 && draws_differing == 0, "torch's draws: %ld of %ld differ", draws_differing, draws);
    for (int k = 0; k < MAX_IMAGES; k++) {
        CHECK(offsets[k] == out_sizes[k], "image %d: %zu of %zu output bytes compared", k, offsets[k], out_sizes[k]);
        free(inputs[k]);
        free(outputs[k]);
    }
}

/* A splitmix64 stream as a dp_draw_fn, counting its words. */
static long words_drawn;
static uint32_t draw_words(void *state) {
    uint64_t z = (*(uint64_t *)state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    words_drawn++;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static void test_draws(void) {
    enum { DRAWS = 96000 };
    const dp_color_jitter_t jitter = {{0.4, 1.5, 0.2, 0.5}};
    long perms[256] = {0}, low[DP_CJ_OPS] = {0}, out_of_range = 0;
    double lo[DP_CJ_OPS] = {0.6, 0.0, 0.8, -0.5}, hi[DP_CJ_OPS] = {1.4, 2.5, 1.2, 0.5};
    double min[DP_CJ_OPS] = {9, 9, 9, 9}, max[DP_CJ_OPS] = {-9, -9, -9, -9};
    uint64_t state = 11;
    for (int i = 0; i < DRAWS; i++) {
        dp_cj_draw_t d;
        words_drawn = 0;
        dp_color_jitter_draw(&jitter, draw_words, &state, &d);
        CHECK(words_drawn == 7, "%ld words for 4 factors", words_drawn);
        int code = 0, seen = 0;
        for (int j = 0; j < DP_CJ_OPS; j++) {
            code = code * 4 + d.order[j];
            seen |= 1 << d.order[j];
            const double v = d.factor[j];
            /* torch's bounds are floats */
            out_of_range += !d.on[j] || !(v >= (float)lo[j] && v <= (float)hi[j]) || v != (double)(float)v;
            min[j] = fmin(min[j], v), max[j] = fmax(max[j], v);
            low[j] += v < (lo[j] + hi[j]) / 2;
        }
        CHECK(seen == 15, "order %d %d %d %d is not a permutation", d.order[0], d.order[1], d.order[2], d.order[3]);
        perms[code]++;
    }
    double chi = 0.0, expected = DRAWS / 24.0;
    int distinct = 0;
    for (int code = 0; code < 256; code++)
        if (perms[code]) {
            distinct++;
            chi += (perms[code] - expected) * (perms[code] - expected) / expected;
        }
    printf("test_color_jitter: %d orders, chi-square %.1f (23 dof); factors in [%.4f, %.4f] [%.4f, %.4f] [%.4f, %.4f] "
           "[%.4f, %.4f]\n", distinct, chi, min[0], max[0], min[1], max[1], min[2], max[2], min[3], max[3]);
    /* chi-square 49.7: p = 0.001 at 23 degrees of freedom */
    CHECK(distinct == 24 && chi < 50.0, "orders not uniform: %d of 24, chi-square %.1f", distinct, chi);
    CHECK(out_of_range == 0, "%ld factors out of their ranges (or not float32)", out_of_range);
    for (int j = 0; j < DP_CJ_OPS; j++) {
        const double spread = hi[j] - lo[j];
        CHECK(min[j] < lo[j] + 0.001 * spread && max[j] > hi[j] - 0.001 * spread, "%s's factors [%g, %g] of [%g, %g]",
              dp_cj_op_name((dp_cj_op_t)j), min[j], max[j], lo[j], hi[j]);
        CHECK(fabs(low[j] / (double)DRAWS - 0.5) < 0.01, "%s: %ld of %d in the lower half",
              dp_cj_op_name((dp_cj_op_t)j), low[j], DRAWS);
    }
    /* off: no word, factor neutral, skipped */
    const dp_color_jitter_t some = {{0.0, 0.3, 0.0, 0.1}};
    dp_cj_draw_t d;
    words_drawn = 0;
    dp_color_jitter_draw(&some, draw_words, &state, &d);
    CHECK(words_drawn == 5 && !d.on[0] && d.on[1] && !d.on[2] && d.on[3], "0 values draw nothing: %ld words",
          words_drawn);
    /* the same words, the same pixels; a jitter changes them */
    unsigned char a[3 * 9 * 11], b[3 * 9 * 11], original[3 * 9 * 11];
    for (int i = 0; i < (int)sizeof a; i++) a[i] = b[i] = original[i] = (unsigned char)(i * 37 + 11);
    uint64_t s1 = 99, s2 = 99;
    CHECK(dp_color_jitter_apply(&jitter, draw_words, &s1, a, 3, 9, 11) == DP_OK, "apply");
    CHECK(dp_color_jitter_apply(&jitter, draw_words, &s2, b, 3, 9, 11) == DP_OK, "apply");
    CHECK(memcmp(a, b, sizeof a) == 0 && s1 == s2, "the same words gave other pixels");
    CHECK(memcmp(a, original, sizeof a) != 0, "the jitter changed nothing");
    CHECK(dp_cj_adjust(DP_CJ_HUE, 0.51, a, 3, 9, 11) == DP_ERR_ARG, "hue 0.51 refused");
    CHECK(dp_cj_adjust(DP_CJ_BRIGHTNESS, -0.1, a, 3, 9, 11) == DP_ERR_ARG, "brightness -0.1 refused");
}

static void test_parse(void) {
    struct {
        const char *text;
        double want[4];
    } good[] = {{"0.4", {0.4, 0.4, 0.4, 0}},         {"0.4,0.3,0.2", {0.4, 0.3, 0.2, 0}},
                {"0.1,0,2,0.5", {0.1, 0, 2, 0.5}},   {"0", {0, 0, 0, 0}},
                {"100,0.125,1e-3,0.05", {100, 0.125, 0.001, 0.05}}, {"-0,0,0,0.1", {0, 0, 0, 0.1}}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        dp_color_jitter_t j, back;
        char text[128];
        CHECK(dp_color_jitter_parse(good[i].text, "t", &j) == DP_OK, "'%s' refused", good[i].text);
        CHECK(memcmp(j.value, good[i].want, sizeof j.value) == 0, "'%s': %g,%g,%g,%g", good[i].text, j.value[0],
              j.value[1], j.value[2], j.value[3]);
        const int length = dp_color_jitter_text(&j, text, sizeof text);
        CHECK(length > 0 && length < (int)sizeof text && strspn(text, "0123456789.,") == strlen(text), "text '%s'",
              text);
        CHECK(dp_color_jitter_parse(text, "t", &back) == DP_OK && memcmp(back.value, j.value, sizeof j.value) == 0,
              "'%s' does not read back as '%s'", text, good[i].text);
        CHECK(dp_color_jitter_on(&j) == (i != 3), "'%s': on", good[i].text);
    }
    dp_color_jitter_t j;
    char text[64];
    dp_color_jitter_parse("0.4", "t", &j);
    dp_color_jitter_text(&j, text, sizeof text);
    CHECK(!strcmp(text, "0.4,0.4,0.4,0"), "0.4 recorded as '%s'", text);
    const char *bad[] = {"", "0.4,0.4", "0.4,0.4,0.4,0.1,0", "-0.1", "0.1,0.1,0.1,0.51", "nan", "inf", "1e400",
                         "0.4,", ",0.4", "x", "0.4 ", " 0.4", "0.4,,0.4", "100.5", NULL};
    for (int i = 0; bad[i]; i++) {
        CHECK(dp_color_jitter_parse(bad[i], "train: --color-jitter", &j) == DP_ERR_ARG, "'%s' taken", bad[i]);
        CHECK(strchr(dp_error_message(), '\n') == NULL && strstr(dp_error_message(), "--color-jitter"),
              "'%s': %s", bad[i], dp_error_message());
    }
    CHECK(dp_color_jitter_parse(NULL, "t", &j) == DP_ERR_ARG, "NULL taken");
}

/* dp_image_sample_decoded with color_jitter = without it, then dp_color_jitter_apply on the same generator. */
static void test_in_sample(void) {
    enum { W = 53, H = 41, S = 24 };
    static unsigned char pixels[H * W * 3];
    uint64_t state = 3;
    for (int i = 0; i < H * W * 3; i++) pixels[i] = (unsigned char)(draw_words(&state) >> 24);
    long differ = 0;
    const dp_color_jitter_t jitter = {{0.4, 0.4, 0.4, 0.1}};
    for (int channels = 1; channels <= 3; channels += 2) {
        const dp_image_t image = {channels, H, W, pixels};
        for (uint64_t seed = 1; seed <= 40; seed++) {
            unsigned char with[3 * S * S], plain[3 * S * S], eval_with[3 * S * S], eval_plain[3 * S * S];
            dp_sample_options_t o = dp_sample_options_default(DP_SAMPLE_TRAIN, channels, S, S);
            dp_rng_t a, b;
            dp_rng_seed(&a, seed);
            dp_rng_seed(&b, seed);
            CHECK(dp_image_sample_decoded(&image, &o, &b, plain, NULL) == DP_OK, "plain sample");
            o.color_jitter = jitter;
            CHECK(dp_image_sample_decoded(&image, &o, &a, with, NULL) == DP_OK, "jittered sample");
            differ += memcmp(with, plain, (size_t)channels * S * S) != 0;
            CHECK(dp_color_jitter_apply(&jitter, dp_rng_draw32, &b, plain, channels, S, S) == DP_OK, "apply");
            CHECK(memcmp(with, plain, (size_t)channels * S * S) == 0 && dp_rng_next(&a) == dp_rng_next(&b),
                  "seed %llu, %d channels: the sample is not the crop then the jitter", (unsigned long long)seed,
                  channels);
            dp_sample_options_t e = dp_sample_options_default(DP_SAMPLE_EVAL, channels, S, S);
            CHECK(dp_image_sample_decoded(&image, &e, NULL, eval_plain, NULL) == DP_OK, "eval");
            e.color_jitter = jitter;
            CHECK(dp_image_sample_decoded(&image, &e, NULL, eval_with, NULL) == DP_OK, "eval");
            CHECK(memcmp(eval_with, eval_plain, (size_t)channels * S * S) == 0, "evaluation jittered");
            o.auto_augment.kind = DP_AUTO_AUGMENT_TA_WIDE;
            CHECK(dp_image_sample_decoded(&image, &o, &a, with, NULL) == DP_ERR_ARG, "jitter with ta_wide taken");
        }
    }
    CHECK(differ > 70, "only %ld of 80 jittered samples differ from the crop", differ);
}

int main(void) {
    const char *exhaustive = getenv("DPTRAIN_CJ_EXHAUSTIVE");
    test_against_pil(testing_tmpdir(), exhaustive && !strcmp(exhaustive, "1") ? 1 : 13);
    test_draws();
    test_parse();
    test_in_sample();
    return testing_finish("test_color_jitter");
}
