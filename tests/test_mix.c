/* test_mix.c - Mixup, CutMix and random erasing (batch_mix.h,
 * random_erase.h, parallel.h config.mix and config.random_erase):
 * - Beta(a, a) draws: their mean and variance over 40,000 draws for a of
 *   0.2, 1 and 4, all in [0, 1], and a tiny a never NaN;
 * - the step's draw: the same for the same (seed, step), another for
 *   another step; CutMix's box inside the image, lam the share left;
 *   with both on, each kind about half the steps;
 * - the CPU backend's paste_boxes (CutMix's copy, erasing's zeros, an
 *   empty box), and nothing outside the boxes; random erasing's boxes
 *   (inside the image, their area and aspect, about p of the examples);
 * - in the trainer: one step of a linear model (flatten + linear, label
 *   smoothing 0.1) with Mixup, then with CutMix, then random erasing alone
 *   and before each, on 1 device and on 3 (partners in other shards),
 *   against an oracle in double written from torchvision's reference
 *   (references/classification/transforms.py; RandomErasing per sample first):
 *   partner = batch.roll(1, 0), x = lam x + (1 - lam) x_partner or the box
 *   pasted, the target lam onehot + (1 - lam) onehot_partner, smoothed as
 *   torch.nn.CrossEntropyLoss(label_smoothing); the gradients, the summed
 *   loss, and the accuracy counted on the heavier label; bad alphas are
 *   refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/batch_mix.h"
#include "dptrain/random_erase.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "testing.h"

static void test_beta(void) {
    const double alphas[3] = {0.2, 1.0, 4.0};
    for (int a = 0; a < 3; a++) {
        dp_rng_t rng;
        dp_rng_seed(&rng, 7 + a);
        const int n = 40000;
        double sum = 0, sum2 = 0;
        int outside = 0;
        for (int i = 0; i < n; i++) {
            double v = dp_rng_beta_symmetric(&rng, alphas[a]);
            outside += !(v >= 0.0 && v <= 1.0);
            sum += v;
            sum2 += v * v;
        }
        const double mean = sum / n, var = sum2 / n - mean * mean, want = 1.0 / (4.0 * (2.0 * alphas[a] + 1.0));
        /* the mean's standard error is sqrt(var / n) < 0.0025: 4 of them */
        CHECK(outside == 0 && fabs(mean - 0.5) < 0.01 && fabs(var - want) < 0.05 * want,
              "Beta(%g, %g): mean %.4f, variance %.5f (expected 0.5, %.5f), %d outside [0, 1]", alphas[a], alphas[a],
              mean, var, want, outside);
    }
    dp_rng_t rng;
    dp_rng_seed(&rng, 1);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += isnan(dp_rng_beta_symmetric(&rng, 1e-3));
    CHECK(bad == 0, "Beta(0.001, 0.001): %d NaN draws of 1000", bad);
}

static void test_draw(void) {
    const dp_mix_config_t both = {.mixup_alpha = 0.2f, .cutmix_alpha = 1.0f}, cut = {.cutmix_alpha = 1.0f};
    dp_mix_t a = dp_mix_draw(&both, 5, 3, 28, 20), b = dp_mix_draw(&both, 5, 3, 28, 20);
    /* field by field: the struct's padding after kind is not part of the draw */
    CHECK(a.kind == b.kind && a.lam == b.lam && a.x1 == b.x1 && a.y1 == b.y1 && a.x2 == b.x2 && a.y2 == b.y2,
          "the same seed and step drew twice differently");
    int differ = 0, mixups = 0, wide = 0;
    for (uint64_t s = 0; s < 2000; s++) {
        dp_mix_t m = dp_mix_draw(&both, 5, s, 28, 20);
        differ += m.lam != a.lam;
        mixups += m.kind == DP_MIX_MIXUP;
        dp_mix_t c = dp_mix_draw(&cut, 5, s, 28, 20);
        const int w = c.x2 - c.x1, h = c.y2 - c.y1;
        CHECK(c.kind == DP_MIX_CUTMIX && c.x1 >= 0 && c.x1 <= c.x2 && c.x2 <= 20 && c.y1 >= 0 && c.y1 <= c.y2 &&
                  c.y2 <= 28 && c.lam == 1.0 - (double)(w * h) / (28.0 * 20.0),
              "step %llu: CutMix box [%d, %d) x [%d, %d), lam %.17g", (unsigned long long)s, c.x1, c.x2, c.y1, c.y2,
              c.lam);
        wide += w > 10;
    }
    CHECK(differ > 1900, "lam repeated across steps: %d of 2000 differ", differ);
    CHECK(mixups > 900 && mixups < 1100, "both on: %d of 2000 steps were Mixup (expected about half)", mixups);
    CHECK(wide > 0, "CutMix never cut a box wider than half the image in 2000 steps");
    const dp_mix_config_t none = {0};
    CHECK(dp_mix_draw(&none, 5, 3, 28, 20).kind == DP_MIX_NONE && !dp_mix_on(&none), "no alpha: no mixing");
    const dp_mix_config_t bad[3] = {{.mixup_alpha = -1.0f}, {.cutmix_alpha = NAN}, {.mixup_alpha = 1e9f}};
    for (int i = 0; i < 3; i++) CHECK(dp_mix_check(&bad[i], "test: --") != DP_OK, "bad alpha %d taken", i);
    CHECK(dp_mix_check(&bad[1], "test: --") != DP_OK && strstr(dp_error_message(), "cutmix-alpha"),
          "the message names the option: %s", dp_error_message());
}

/* The CPU backend's paste_boxes: a box copied from src, one erased, one
 * empty; nothing outside them. */
static void test_paste_boxes(void) {
    enum { N = 3, C = 2, H = 4, W = 5 };
    float x[N * C * H * W], src[N * C * H * W], before[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++) x[i] = before[i] = (float)i + 0.5f, src[i] = -1.0f - (float)i;
    const int32_t boxes[N * 4] = {2, 4, 1, 3, /* rows 2-3, columns 1-2 */ 0, 4, 4, 5, /* the last column */
                                  3, 3, 0, 5 /* empty */};
    const dp_backend_t *be = dp_backend_cpu();
    float erased[N * C * H * W];
    memcpy(erased, x, sizeof x);
    be->paste_boxes(be->ctx, x, src, N, C, H, W, boxes);
    be->paste_boxes(be->ctx, erased, NULL, N, C, H, W, boxes);
    int wrong = 0;
    for (int e = 0; e < N; e++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int col = 0; col < W; col++) {
                    const int i = ((e * C + c) * H + y) * W + col;
                    const int32_t *b = boxes + 4 * e;
                    const int in = y >= b[0] && y < b[1] && col >= b[2] && col < b[3];
                    wrong += x[i] != (in ? src[i] : before[i]) || erased[i] != (in ? 0.0f : before[i]);
                }
    CHECK(wrong == 0, "paste_boxes: %d values wrong", wrong);
}

/* Random erasing's boxes: inside the image, 2% to 33% of it (rounding
 * aside), an aspect ratio in (0.3, 3.3), about p of the examples; the same
 * for the same (seed, step, position). */
static void test_erase_boxes(void) {
    int erased = 0, bad = 0;
    for (int pos = 0; pos < 4000; pos++) {
        int32_t b[4], again[4];
        dp_random_erase_box(0.25f, 4, 9, pos, 32, 24, b);
        dp_random_erase_box(0.25f, 4, 9, pos, 32, 24, again);
        bad += memcmp(b, again, sizeof b) != 0;
        if (b[1] == b[0]) continue;
        erased++;
        const double h = b[1] - b[0], w = b[3] - b[2];
        bad += !(b[0] >= 0 && b[1] <= 32 && b[2] >= 0 && b[3] <= 24 && h > 0 && w > 0 && h < 32 && w < 24 &&
                 h * w >= 0.01 * 32 * 24 && h * w <= 0.4 * 32 * 24 && h / w > 0.2 && h / w < 5.0);
    }
    CHECK(bad == 0, "random erasing: %d odd boxes", bad);
    CHECK(erased > 850 && erased < 1150, "p 0.25: %d of 4000 examples erased", erased);
    int32_t b[4];
    dp_random_erase_box(0.0f, 4, 9, 0, 32, 24, b);
    CHECK(b[0] == b[1], "p 0 erased");
    CHECK(dp_random_erase_check(1.5f, "test: --random-erase") != DP_OK &&
              dp_random_erase_check(NAN, "test: --random-erase") != DP_OK && dp_random_erase_check(1.0f, "x") == DP_OK,
          "random erasing's probability check");
}

/* --- the trainer against the oracle --- */
enum { C = 2, H = 5, W = 6, K = 4, N = 7, D = C * H * W };
#define SMOOTHING 0.1

/* torchvision's mixing and loss, in double: the gradient of the mean loss
 * with respect to the linear layer's weight (K, D) and bias (K), the
 * summed loss, and the correct count on the heavier label. */
static int in_box(const int32_t b[4], int y, int x) { return y >= b[0] && y < b[1] && x >= b[2] && x < b[3]; }

static void oracle(const dp_mix_t *m, float erase, const float *params, const uint8_t *pixels, const int32_t *labels,
                   double *grad, double *loss_sum, int *correct) {
    memset(grad, 0, sizeof(double) * (K * D + K));
    *loss_sum = 0;
    *correct = 0;
    for (int i = 0; i < N; i++) {
        const int j = (i + N - 1) % N; /* batch.roll(1, 0) */
        int32_t own_box[4], partner_box[4]; /* RandomErasing, per sample, before the batch's mixing */
        dp_random_erase_box(erase, 11, 0, i, H, W, own_box);
        dp_random_erase_box(erase, 11, 0, j, H, W, partner_box);
        const int32_t cut[4] = {m->y1, m->y2, m->x1, m->x2};
        double x[D];
        for (int e = 0; e < D; e++) {
            const int y = (e % (H * W)) / W, col = e % W;
            float own = pixels[i * D + e] * (1.0f / 255.0f), partner = pixels[j * D + e] * (1.0f / 255.0f);
            if (in_box(own_box, y, col)) own = 0.0f;
            if (in_box(partner_box, y, col)) partner = 0.0f;
            if (m->kind == DP_MIX_MIXUP) {
                const float a = (float)m->lam * own, b = (float)(1.0 - m->lam) * partner;
                x[e] = (double)(a + b);
            } else {
                x[e] = m->kind == DP_MIX_CUTMIX && in_box(cut, y, col) ? partner : own;
            }
        }
        double z[K], zmax = -INFINITY, total = 0;
        for (int k = 0; k < K; k++) {
            z[k] = params[K * D + k];
            for (int e = 0; e < D; e++) z[k] += (double)params[k * D + e] * x[e];
            if (z[k] > zmax) zmax = z[k];
        }
        for (int k = 0; k < K; k++) total += exp(z[k] - zmax);
        int best = 0;
        for (int k = 0; k < K; k++) {
            const double p = exp(z[k] - zmax) / total;
            const double t = m->lam * (k == labels[i]) + (1.0 - m->lam) * (k == labels[j]);
            const double target = (1.0 - SMOOTHING) * t + SMOOTHING / K;
            *loss_sum -= target * (z[k] - zmax - log(total));
            const double g = (p - target) / N;
            for (int e = 0; e < D; e++) grad[k * D + e] += g * x[e];
            grad[K * D + k] += g;
            if (z[k] > z[best]) best = k;
        }
        *correct += best == (m->lam >= 0.5 ? labels[i] : labels[j]);
    }
}

static void check_step(const dp_model_t *model, const dp_mix_config_t *mix, float erase, int devices,
                       const char *name) {
    dp_trainer_config_t config = {.model = model, .num_devices = devices, .threads_per_device = 1,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 11,
                                  .label_smoothing = (float)SMOOTHING, .mix = *mix, .random_erase = erase};
    dp_trainer_t *t;
    DP_ASSERT(dp_trainer_new(&config, &t) == DP_OK);
    float params[K * D + K];
    memcpy(params, dp_trainer_params(t, 0), sizeof params);
    uint8_t pixels[N * D];
    int32_t labels[N];
    dp_rng_t rng;
    dp_rng_seed(&rng, 3);
    for (int i = 0; i < N * D; i++) pixels[i] = (uint8_t)dp_rng_below(&rng, 256);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)dp_rng_below(&rng, K);
    const dp_batch_t batch = {.n = N, .channels = C, .height = H, .width = W, .pixels = pixels, .labels = labels};
    const dp_mix_t drawn = dp_mix_draw(mix, 11, 0, H, W); /* the trainer's first step's */
    double loss_sum = 0;
    int correct = 0;
    CHECK(dp_trainer_step(t, &batch, &loss_sum, &correct) == DP_OK, "%s: %s", name, dp_error_message());
    float got[K * D + K];
    dp_trainer_read_grads(t, got);
    double want[K * D + K], want_loss;
    int want_correct;
    oracle(&drawn, erase, params, pixels, labels, want, &want_loss, &want_correct);
    double worst = 0;
    for (int i = 0; i < K * D + K; i++) {
        const double err = fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-3);
        if (err > worst) worst = err;
    }
    CHECK(worst < 1e-5, "%s: gradient off the oracle by %.3g (relative)", name, worst);
    CHECK(fabs(loss_sum - want_loss) < 1e-5 * fabs(want_loss), "%s: loss sum %.9g, oracle %.9g", name, loss_sum,
          want_loss);
    CHECK(correct == want_correct, "%s: %d correct, oracle %d (the heavier label)", name, correct, want_correct);
    CHECK(dp_trainer_check_replicas(t) == DP_OK, "%s: %s", name, dp_error_message());
    printf("%s: %s, lam %.4f: gradient within %.2g of the oracle, loss %.6f\n", name,
           drawn.kind == DP_MIX_MIXUP ? "Mixup" : drawn.kind == DP_MIX_CUTMIX ? "CutMix" : "no mixing", drawn.lam,
           worst, loss_sum);
    dp_trainer_free(t);
}

static void test_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_new("mixlin", C, H, W, DP_INIT_TORCH_DEFAULT, 0.0f, &m) == DP_OK);
    DP_ASSERT(dp_model_add_flatten(m) == DP_OK && dp_model_add_linear(m, "fc", K, 1) == DP_OK);
    DP_ASSERT(dp_model_num_params(m) == K * D + K);
    const dp_mix_config_t mixup = {.mixup_alpha = 1.0f}, cutmix = {.cutmix_alpha = 1.0f};
    const dp_mix_config_t none = {0};
    check_step(m, &mixup, 0.0f, 1, "mixup, 1 device");
    check_step(m, &mixup, 0.0f, 3, "mixup, 3 devices");
    check_step(m, &cutmix, 0.0f, 1, "cutmix, 1 device");
    check_step(m, &cutmix, 0.0f, 3, "cutmix, 3 devices");
    /* random erasing (p 0.6: most of the 7 examples) alone and before each mixing */
    check_step(m, &none, 0.6f, 3, "erasing, 3 devices");
    check_step(m, &mixup, 0.6f, 1, "erasing + mixup, 1 device");
    check_step(m, &mixup, 0.6f, 3, "erasing + mixup, 3 devices");
    check_step(m, &cutmix, 0.6f, 3, "erasing + cutmix, 3 devices");
    dp_trainer_config_t config = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .mix = {.mixup_alpha = -0.5f}};
    dp_trainer_t *t = NULL;
    CHECK(dp_trainer_new(&config, &t) != DP_OK && !t && strstr(dp_error_message(), "mixup-alpha"),
          "a negative alpha: %s", dp_error_message());
    dp_model_free(m);
}

int main(void) {
    test_beta();
    test_draw();
    test_paste_boxes();
    test_erase_boxes();
    test_trainer();
    return testing_finish("test_mix");
}
