/* test_auto_augment.c - TrivialAugmentWide's, RandAugment's and
 * AutoAugment's ops and tables (auto_augment.h) against torchvision 0.14 on
 * PIL 9 (tests/fixtures/image/make_auto_augment.py):
 * - every op of _apply_op (Invert too) at every magnitude of the 31 bins of
 *   TrivialAugmentWide and RandAugment and AutoAugment's 10,
 *   with both signs (and more angles: -90, 180, 270, 360, 45), on images
 *   of 1 and 3 channels, 31x31 (the transposes), 23x37, 37x23, 29x33, a
 *   constant 7x5 and a 2x3 one (no room for the 3x3 filter), the geometric
 *   ops with NEAREST, BILINEAR and BICUBIC: every output byte equal (the
 *   count of differing bytes is printed, must be 0);
 * - the policy tables: dp_aa_magnitude = torch.linspace's float32 (torch's
 *   portable kernel, ATEN_CPU_CAPABILITY=default: its AVX2 build fuses a
 *   multiply-add and differs in the last bit at a few bins) and the
 *   posterize bits, for every op and bin of the three, RandAugment's and
 *   AutoAugment's translations for each image size;
 * - the draws: ta_wide's ops uniform over the 14 (chi-square over 140000
 *   draws), its bins uniform, its signs even; ra draws exactly 2 ops at the
 *   magnitude asked, and the same words give the same draws; AutoAugment's
 *   imagenet policy applies each sub-policy's op with its probability
 *   (Invert, ShearX, Sharpness: counted over many draws) at
 *   its bin;
 * - in a training sample (image_sample.h): the crop and flip as without,
 *   then the policy's ops drawn from the same generator after their words;
 *   the evaluation modes never augment.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/auto_augment.h"
#include "dptrain/image_sample.h"
#include "image_testing.h"
#include "testing.h"

#define MAX_IMAGES 16

static dp_aa_op_t op_named(const char *name) {
    for (int op = 0; op < DP_AA_OPS; op++)
        if (!strcmp(dp_aa_op_name((dp_aa_op_t)op), name)) return (dp_aa_op_t)op;
    return DP_AA_OPS;
}

static void test_against_pil(const char *dir) {
    char args[1200], path[1200];
    snprintf(args, sizeof args, "'%s'", dir);
    image_fixture_run("ATEN_CPU_CAPABILITY=default", "fixtures/image/make_auto_augment.py", args);
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s", path);
    if (!f) return;
    unsigned char *inputs[MAX_IMAGES] = {0}, *outputs[MAX_IMAGES] = {0};
    size_t offsets[MAX_IMAGES] = {0}, out_sizes[MAX_IMAGES] = {0};
    int shape[MAX_IMAGES][3] = {{0}};
    long cases = 0, differing = 0, tables = 0, table_wrong = 0, per_op[DP_AA_OPS] = {0}, bad_op[DP_AA_OPS] = {0};
    long sub_ops = 0, sub_wrong = 0, bilinear_cases = 0, bicubic_cases = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char word[32], name[32], value[64];
        int k, c, h, w, bin;
        if (image_fixture_pair(dir, line, inputs, outputs, out_sizes, shape, MAX_IMAGES)) continue;
        if (sscanf(line, "table %31s %31s %d %63s %d %d", word, name, &bin, value, &h, &w) == 6) {
            const dp_auto_augment_kind_t kind = !strcmp(word, "ra")     ? DP_AUTO_AUGMENT_RA
                                                : !strcmp(word, "auto") ? DP_AUTO_AUGMENT_IMAGENET
                                                                        : DP_AUTO_AUGMENT_TA_WIDE;
            const double want = strtod(value, NULL), got = dp_aa_magnitude(kind, op_named(name), bin, h, w);
            tables++;
            if (got != want) {
                if (table_wrong++ < 10)
                    fprintf(stderr, "table %s %s bin %d (%d x %d): %.17g, torch %.17g\n", word, name, bin, h, w, got,
                            want);
            }
        } else if (!strncmp(line, "policy ", 7)) { /* AutoAugment's sub-policy: torchvision's table = ours */
            char ops[2][32], ps[2][64];
            int index, bins[2];
            if (sscanf(line, "policy %31s %d %31s %63s %d %31s %63s %d", word, &index, ops[0], ps[0], &bins[0], ops[1],
                       ps[1], &bins[1]) != 8) {
                CHECK(0, "unreadable: %s", line);
                continue;
            }
            dp_auto_augment_kind_t kind = DP_AUTO_AUGMENT_NONE;
            const dp_aa_sub_op_t *sub = dp_auto_augment_parse(word, "policy", &kind) == DP_OK
                                            ? dp_auto_augment_sub_policy(kind, index) : NULL;
            for (int j = 0; j < 2; j++, sub_ops++)
                if (!sub || sub[j].op != op_named(ops[j]) || sub[j].p != (float)strtod(ps[j], NULL) ||
                    sub[j].bin != bins[j]) {
                    if (sub_wrong++ < 5)
                        fprintf(stderr, "%s sub-policy %d op %d: torchvision %s %s %d\n", word, index, j, ops[j],
                                ps[j], bins[j]);
                }
        } else if (sscanf(line, "case %d %31s %63s %31s", &k, name, value, word) == 4 && k >= 0 && k < MAX_IMAGES) {
            const dp_aa_op_t op = op_named(name);
            const dp_aa_interpolation_t mode = !strcmp(word, "bilinear")  ? DP_AA_BILINEAR
                                               : !strcmp(word, "bicubic") ? DP_AA_BICUBIC
                                                                          : DP_AA_NEAREST;
            bilinear_cases += mode == DP_AA_BILINEAR;
            bicubic_cases += mode == DP_AA_BICUBIC;
            const double magnitude = strtod(value, NULL);
            c = shape[k][0], h = shape[k][1], w = shape[k][2];
            const size_t n = (size_t)c * h * w;
            if (!inputs[k] || !outputs[k] || op == DP_AA_OPS || offsets[k] + n > out_sizes[k]) {
                CHECK(0, "case %s of image %d unreadable", name, k);
                break;
            }
            unsigned char *pixels = malloc(n);
            memcpy(pixels, inputs[k], n);
            CHECK(dp_aa_apply_interpolated(op, magnitude, mode, pixels, c, h, w) == DP_OK, "%s", name);
            long diff = 0;
            for (size_t i = 0; i < n; i++) diff += pixels[i] != outputs[k][offsets[k] + i];
            if (diff && bad_op[op]++ < 3)
                fprintf(stderr, "%s %g %s on image %d (%d x %d x %d): %ld bytes differ\n", name, magnitude, word, k, c,
                        h, w, diff);
            differing += diff;
            per_op[op]++;
            offsets[k] += n;
            cases++;
            free(pixels);
        }
    }
    fclose(f);
    printf("test_auto_augment: %ld cases against PIL (%ld of them bilinear, %ld bicubic), %ld bytes differ; %ld table "
           "entries, %ld differ\n", cases, bilinear_cases, bicubic_cases, differing, tables, table_wrong);
    CHECK(bilinear_cases > 1000 && bicubic_cases == bilinear_cases, "only %ld bilinear, %ld bicubic cases",
          bilinear_cases, bicubic_cases);
    for (int op = 0; op < DP_AA_OPS; op++)
        CHECK(per_op[op] > 0 && bad_op[op] == 0, "%s: %ld cases, %ld differ", dp_aa_op_name((dp_aa_op_t)op),
              per_op[op], bad_op[op]);
    CHECK(cases > 5000 && differing == 0, "%ld cases, %ld differing bytes", cases, differing);
    CHECK(tables > 1000 && table_wrong == 0, "%ld of %ld table entries differ", table_wrong, tables);
    printf("test_auto_augment: %ld ops of AutoAugment's sub-policies, %ld differ from torchvision's\n", sub_ops,
           sub_wrong);
    CHECK(sub_ops == 3 * DP_AA_SUB_POLICIES * 2 && sub_wrong == 0, "AutoAugment's policies: %ld of %ld ops differ",
          sub_wrong, sub_ops);
    for (int k = 0; k < MAX_IMAGES; k++) {
        CHECK(offsets[k] == out_sizes[k], "image %d: %zu of %zu output bytes compared", k, offsets[k], out_sizes[k]);
        free(inputs[k]);
        free(outputs[k]);
    }
}

/* A splitmix64 stream as a dp_draw_fn. */
static uint32_t draw_words(void *state) {
    uint64_t z = (*(uint64_t *)state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static void test_draws(void) {
    enum { DRAWS = 140000 };
    dp_auto_augment_t ta = {.kind = DP_AUTO_AUGMENT_TA_WIDE}, ra = {.kind = DP_AUTO_AUGMENT_RA, .magnitude = 9}, none = {0};
    long ops[DP_AA_OPS] = {0}, negative = 0, signed_draws = 0, bins[DP_AA_BINS] = {0};
    uint64_t state = 7;
    dp_aa_choice_t out[DP_RA_OPS];
    for (int i = 0; i < DRAWS; i++) {
        CHECK(dp_auto_augment_draw(&ta, 32, 32, draw_words, &state, out) == 1, "ta_wide draws one op");
        ops[out[0].op]++;
        if (out[0].op == DP_AA_ROTATE) { /* bins of 4.5 degrees */
            bins[(int)lround(fabs(out[0].magnitude) / 4.5)]++;
            signed_draws++;
            negative += out[0].magnitude < 0;
        }
    }
    CHECK(ops[DP_AA_INVERT] == 0, "ta_wide drew Invert (not in its space)");
    double chi = 0.0, expected = DRAWS / (double)DP_AA_SPACE_OPS;
    for (int op = 0; op < DP_AA_SPACE_OPS; op++) chi += (ops[op] - expected) * (ops[op] - expected) / expected;
    double chi_bins = 0.0, per_bin = signed_draws / (double)DP_AA_BINS;
    for (int b = 0; b < DP_AA_BINS; b++) chi_bins += (bins[b] - per_bin) * (bins[b] - per_bin) / per_bin;
    printf("test_auto_augment: ta_wide ops chi-square %.1f (13 dof), Rotate's bins %.1f (30 dof), negative %.3f\n",
           chi, chi_bins, negative / (double)signed_draws);
    CHECK(chi < 36.0, "ta_wide's ops not uniform: chi-square %.1f", chi); /* p = 0.001 at 34.5 */
    CHECK(chi_bins < 62.0, "ta_wide's bins not uniform: chi-square %.1f", chi_bins);
    CHECK(fabs(negative / (double)signed_draws - 0.5) < 0.02, "signs: %ld of %ld negative", negative, signed_draws);
    long ra_ops[DP_AA_OPS] = {0};
    for (int i = 0; i < 20000; i++) {
        CHECK(dp_auto_augment_draw(&ra, 40, 30, draw_words, &state, out) == 2, "ra draws two ops");
        for (int j = 0; j < 2; j++) {
            ra_ops[out[j].op]++;
            const double m = dp_aa_magnitude(DP_AUTO_AUGMENT_RA, out[j].op, 9, 40, 30);
            CHECK(fabs(out[j].magnitude) == m, "ra: %s at %g, bin 9 is %g", dp_aa_op_name(out[j].op),
                  out[j].magnitude, m);
        }
    }
    for (int op = 0; op < DP_AA_SPACE_OPS; op++)
        CHECK(ra_ops[op] > 2500, "ra: %s drawn %ld times", dp_aa_op_name(op), ra_ops[op]);
    CHECK(ra_ops[DP_AA_INVERT] == 0, "ra drew Invert (not in its space)");
    CHECK(dp_auto_augment_draw(&none, 8, 8, draw_words, &state, out) == 0, "none draws nothing");
    /* the same words, the same draws and pixels */
    unsigned char a[3 * 9 * 11], b[3 * 9 * 11];
    for (int i = 0; i < (int)sizeof a; i++) a[i] = b[i] = (unsigned char)(i * 37 + 11);
    uint64_t s1 = 99, s2 = 99;
    for (int i = 0; i < 50; i++) {
        CHECK(dp_auto_augment_apply(&ta, draw_words, &s1, a, 3, 9, 11) == DP_OK, "apply");
        CHECK(dp_auto_augment_apply(&ta, draw_words, &s2, b, 3, 9, 11) == DP_OK, "apply");
    }
    CHECK(memcmp(a, b, sizeof a) == 0 && s1 == s2, "the same words gave other pixels");
    dp_auto_augment_kind_t kind;
    CHECK(dp_auto_augment_parse("ta_wide", "t", &kind) == DP_OK && kind == DP_AUTO_AUGMENT_TA_WIDE, "parse");
    CHECK(dp_auto_augment_parse("ra", "t", &kind) == DP_OK && kind == DP_AUTO_AUGMENT_RA, "parse");
    CHECK(dp_auto_augment_parse("aa", "t", &kind) == DP_ERR_ARG, "parse refuses aa");
    for (int k = DP_AUTO_AUGMENT_NONE; k < DP_AUTO_AUGMENT_KINDS; k++)
        CHECK(dp_auto_augment_parse(dp_auto_augment_kind_name(k), "t", &kind) == DP_OK && (int)kind == k,
              "parse %s", dp_auto_augment_kind_name(k));
}

/* AutoAugment's imagenet policy: over many draws, sub-policy 13 (Invert 0.6, Equalize 1.0), 17 and 22 (Invert 0.6 too) and the others'
 * ops come up with their probabilities; every op at its bin (Rotate 0.6 at 9: 30 degrees; Posterize 0.4 at 8:
 * 4 bits); at most 2 ops; svhn and cifar10 draw their own ops. */
static void test_auto_policies(void) {
    enum { DRAWS = 100000 };
    const dp_auto_augment_t imagenet = {.kind = DP_AUTO_AUGMENT_IMAGENET}, svhn = {.kind = DP_AUTO_AUGMENT_SVHN},
                            cifar = {.kind = DP_AUTO_AUGMENT_CIFAR10};
    long ops[DP_AA_OPS] = {0}, none = 0, rotate_bad = 0, posterize_bad = 0, counts[3] = {0};
    uint64_t state = 11;
    dp_aa_choice_t out[DP_RA_OPS];
    for (int i = 0; i < DRAWS; i++) {
        const int n = dp_auto_augment_draw(&imagenet, 224, 224, draw_words, &state, out);
        counts[n]++;
        none += n == 0;
        for (int j = 0; j < n; j++) {
            ops[out[j].op]++;
            if (out[j].op == DP_AA_ROTATE) /* bins 9, 8, 3 of linspace(0, 30, 10) */
                rotate_bad += !(fabs(out[j].magnitude) == 30.0 || fabs(out[j].magnitude) == (double)(80.0f / 3.0f) ||
                                fabs(out[j].magnitude) == 10.0);
            if (out[j].op == DP_AA_POSTERIZE) /* bins 8, 7, 6, 5: 8 - round(bin / 2.25) = 4, 5, 5, 6 */
                posterize_bad += !(out[j].magnitude == 4.0 || out[j].magnitude == 5.0 || out[j].magnitude == 6.0);
        }
    }
    /* expected shares per draw, from the table: Invert 3 x 0.6 / 25, ShearX 0.6 / 25, Sharpness 0.4 / 25 */
    const double invert = ops[DP_AA_INVERT] / (double)DRAWS, shear = ops[DP_AA_SHEAR_X] / (double)DRAWS,
                 sharp = ops[DP_AA_SHARPNESS] / (double)DRAWS;
    printf("test_auto_augment: imagenet: Invert %.4f (0.072), ShearX %.4f (0.024), Sharpness %.4f (0.016) per draw; "
           "0, 1, 2 ops: %ld, %ld, %ld\n", invert, shear, sharp, counts[0], counts[1], counts[2]);
    CHECK(fabs(invert - 0.072) < 0.004 && fabs(shear - 0.024) < 0.003 && fabs(sharp - 0.016) < 0.003,
          "imagenet: op shares Invert %.4f, ShearX %.4f, Sharpness %.4f", invert, shear, sharp);
    CHECK(ops[DP_AA_IDENTITY] == 0 && ops[DP_AA_TRANSLATE_X] == 0 && ops[DP_AA_SHEAR_Y] == 0 &&
              ops[DP_AA_BRIGHTNESS] == 0 && rotate_bad == 0 && posterize_bad == 0 && none > 0 && counts[2] > 0,
          "imagenet: ops outside its policy or off their bins (rotate %ld, posterize %ld)", rotate_bad,
          posterize_bad);
    long svhn_ops[DP_AA_OPS] = {0}, cifar_ops[DP_AA_OPS] = {0};
    for (int i = 0; i < 20000; i++) {
        int n = dp_auto_augment_draw(&svhn, 32, 32, draw_words, &state, out);
        for (int j = 0; j < n; j++) svhn_ops[out[j].op]++;
        n = dp_auto_augment_draw(&cifar, 32, 32, draw_words, &state, out);
        for (int j = 0; j < n; j++) cifar_ops[out[j].op]++;
    }
    CHECK(svhn_ops[DP_AA_SHEAR_Y] > 0 && svhn_ops[DP_AA_COLOR] == 0 && svhn_ops[DP_AA_POSTERIZE] == 0,
          "svhn: ShearY %ld, Color %ld, Posterize %ld", svhn_ops[DP_AA_SHEAR_Y], svhn_ops[DP_AA_COLOR],
          svhn_ops[DP_AA_POSTERIZE]);
    CHECK(cifar_ops[DP_AA_TRANSLATE_X] > 0 && cifar_ops[DP_AA_ROTATE] > 0 && cifar_ops[DP_AA_SHEAR_X] == 0,
          "cifar10: TranslateX %ld, Rotate %ld, ShearX %ld", cifar_ops[DP_AA_TRANSLATE_X], cifar_ops[DP_AA_ROTATE],
          cifar_ops[DP_AA_SHEAR_X]);
}

/* dp_image_sample_decoded with auto_augment = without it, then dp_auto_augment_apply on the same generator. */
static void test_in_sample(void) {
    enum { W = 53, H = 41, S = 24 };
    static unsigned char pixels[H * W * 3];
    uint64_t state = 3;
    for (int i = 0; i < H * W * 3; i++) pixels[i] = (unsigned char)(draw_words(&state) >> 24);
    long differ = 0;
    for (int channels = 1; channels <= 3; channels += 2) {
        const dp_image_t image = {channels, H, W, pixels};
        for (int kind = DP_AUTO_AUGMENT_TA_WIDE; kind < DP_AUTO_AUGMENT_KINDS; kind++)
            for (uint64_t seed = 1; seed <= 40; seed++) {
                unsigned char with[3 * S * S], plain[3 * S * S], eval_with[3 * S * S], eval_plain[3 * S * S];
                dp_sample_options_t o = dp_sample_options_default(DP_SAMPLE_TRAIN, channels, S, S);
                dp_rng_t a, b;
                dp_rng_seed(&a, seed);
                dp_rng_seed(&b, seed);
                CHECK(dp_image_sample_decoded(&image, &o, &b, plain, NULL) == DP_OK, "plain sample");
                o.auto_augment = (dp_auto_augment_t){(dp_auto_augment_kind_t)kind, 20,
                                                     seed % 2 ? DP_AA_NEAREST : DP_AA_BILINEAR};
                CHECK(dp_image_sample_decoded(&image, &o, &a, with, NULL) == DP_OK, "augmented sample");
                CHECK(dp_auto_augment_apply(&o.auto_augment, dp_rng_draw32, &b, plain, channels, S, S) == DP_OK,
                      "apply");
                CHECK(memcmp(with, plain, (size_t)channels * S * S) == 0 && dp_rng_next(&a) == dp_rng_next(&b),
                      "%s, seed %llu: the sample is not the crop then the ops", dp_auto_augment_kind_name(kind),
                      (unsigned long long)seed);
                dp_sample_options_t e = dp_sample_options_default(DP_SAMPLE_EVAL, channels, S, S);
                CHECK(dp_image_sample_decoded(&image, &e, NULL, eval_plain, NULL) == DP_OK, "eval");
                e.auto_augment = o.auto_augment;
                CHECK(dp_image_sample_decoded(&image, &e, NULL, eval_with, NULL) == DP_OK, "eval");
                CHECK(memcmp(eval_with, eval_plain, (size_t)channels * S * S) == 0, "evaluation augmented");
                differ += memcmp(with, eval_plain, (size_t)channels * S * S) != 0;
            }
    }
    CHECK(differ > 250, "only %ld of 400 augmented crops differ from the center crop", differ);
}

int main(void) {
    test_against_pil(testing_tmpdir());
    test_draws();
    test_auto_policies();
    test_in_sample();
    return testing_finish("test_auto_augment");
}
