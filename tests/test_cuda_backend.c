/* test_cuda_backend.c - the CUDA backend's memory, collectives, optimizer
 * update and batch loading against the CPU backend (skipped without a GPU).
 *
 *   memory: upload / download round trip, an upload's source reusable when
 *           it returns, zero, copy, an impossible
 *           allocation fails with a message naming cuda:0, cuda:N with N
 *           past the last GPU fails naming it;
 *   reduce_range: 3 replicas, an inner range, summed in device order: the
 *           CPU's bits exactly (both add left to right, one rounding each);
 *   broadcast_range: copies the range to the others, leaves the rest;
 *   optimizer_update: sgd (+ weight decay), momentum, nesterov, adagrad,
 *           adam, adamw (torch's defaults with its weight decay 0.01; a
 *           strong decay with other betas and eps), 3 steps over two
 *           ranges each: within 2 ulp-ish (rtol
 *           1e-6) of optim.c, and the number of differing floats printed
 *           (0 expected where the CPU fuses as the kernels do);
 *   input_from_bytes: uploaded bytes become dp_dataset_fill's floats,
 *           plain and normalised (one pair, and one per channel of 3);
 *   count_metrics: metrics_checks.h's checks (the CPU's rule and bits);
 *   sum_squares, scale_range (gradient clipping): the CPU's sum up to its
 *           order of additions (the same float norm), the same bits twice;
 *           the scale the CPU's products, inside the range only;
 *   ema_update (the model's moving average): 3 updates, the CPU's bits;
 *   paste_boxes (CutMix, random erasing): boxes pasted from a source and
 *           erased, per example, an empty one too: the CPU backend's bits;
 *   the step arena's range (range_cuda.c, CUDA's virtual memory; unless
 *           DPTRAIN_CUDA_VMM=off, where the table has none): an arena on
 *           the GPU grows in place across commits (allocations adjacent,
 *           memory_peak counting what was committed), a buffer across
 *           the commits' chunks is written, zeroed in part and read back
 *           intact, a reset commits nothing more, a step past the range
 *           fails naming it, and the arena's end gives the memory back. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/optim.h"
#include "dptrain/tensor.h"
#include "dptrain/rng.h"
#include "metrics_checks.h"
#include "test_cuda_common.h"
#include "testing.h"

static const dp_backend_t *be;

static float *gpu_floats(const float *host, size_t n) {
    float *d = be->alloc(be->ctx, sizeof(float) * n, "test buffer");
    CHECK(d != NULL, "alloc of %zu floats: %s", n, dp_error_message());
    if (d && host) be->upload(be->ctx, d, host, sizeof(float) * n);
    return d;
}

static void download(float *host, const float *d, size_t n) { be->download(be->ctx, host, d, sizeof(float) * n); }

static void fill(float *x, size_t n, uint64_t seed) {
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) x[i] = dp_rng_normal(&rng);
}

static void check_memory(void) {
    enum { N = 1000 };
    float a[N], b[N];
    fill(a, N, 1);
    float *d = gpu_floats(a, N), *e = gpu_floats(NULL, N);
    if (!d || !e) return;
    download(b, d, N);
    CHECK(memcmp(a, b, sizeof a) == 0, "upload then download changed the data");
    be->copy(be->ctx, e, d, sizeof a);
    memset(b, 0, sizeof b);
    download(b, e, N);
    CHECK(memcmp(a, b, sizeof a) == 0, "copy changed the data");
    be->zero(be->ctx, e + 10, sizeof(float) * 20);
    download(b, e, N);
    int zeros_ok = 1;
    for (int i = 0; i < N; i++) zeros_ok &= (i >= 10 && i < 30) ? b[i] == 0.0f : b[i] == a[i];
    CHECK(zeros_ok, "zero of [10, 30) wrote outside it or left values inside");
    /* upload returns with the copy done: the source rewritten at once does not reach the GPU */
    memcpy(b, a, sizeof a);
    be->upload(be->ctx, e, b, sizeof b);
    memset(b, 0x7f, sizeof b);
    download(b, e, N);
    CHECK(memcmp(a, b, sizeof a) == 0, "a source rewritten right after upload returned changed the GPU's copy");
    be->free(be->ctx, d);
    be->free(be->ctx, e);

    void *huge = be->alloc(be->ctx, (size_t)1 << 52, "a 4 PiB buffer");
    CHECK(huge == NULL && strstr(dp_error_message(), "cuda:0") && strstr(dp_error_message(), "out of GPU memory"),
          "a 4 PiB allocation: %p, '%s'", huge, dp_error_message());
    const char *why;
    int count = dp_backend_cuda_count(&why);
    const dp_backend_t *none = NULL;
    dp_status_t st = dp_backend_by_name("cuda", count, &none);
    char want[32];
    snprintf(want, sizeof want, "cuda:%d", count);
    CHECK(st != DP_OK && !none && strstr(dp_error_message(), want), "cuda:%d (past the last GPU): status %d, '%s'",
          count, st, dp_error_message());
}

static void check_collectives(void) {
    enum { N = 5000, K = 3 };
    static float host[K][N], want[N], got[N];
    float *dev[K];
    const float *src_cpu[K];
    for (int r = 0; r < K; r++) {
        fill(host[r], N, 10 + r);
        dev[r] = gpu_floats(host[r], N);
        if (!dev[r]) return;
        src_cpu[r] = host[r];
    }
    memcpy(want, host[0], sizeof want);
    dp_backend_cpu()->reduce_range(NULL, want, src_cpu, K, 100, 3000); /* want = replica 0 with the range summed */
    be->reduce_range(be->ctx, dev[0], (const float *const *)dev, K, 100, 3000);
    download(got, dev[0], N);
    CHECK(memcmp(got, want, sizeof got) == 0, "reduce_range differs from the CPU's device-order sum");
    be->broadcast_range(be->ctx, dev, K, dev[0], 50, 4000);
    for (int r = 1; r < K; r++) {
        download(got, dev[r], N);
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= got[i] == (i >= 50 && i < 4050 ? want[i] : host[r][i]);
        CHECK(ok, "broadcast_range to replica %d: wrong inside or outside [50, 4050)", r);
    }
    for (int r = 0; r < K; r++) be->free(be->ctx, dev[r]);
}

static void check_optimizer(const char *name, dp_optim_config_t config) {
    enum { N = 3000 };
    static float p_cpu[N], g[N], p_gpu[N];
    fill(p_cpu, N, 20);
    float *dp_ = gpu_floats(p_cpu, N), *dg = gpu_floats(NULL, N);
    if (!dp_ || !dg) return;
    dp_optimizer_t *cpu = NULL, *gpu = NULL;
    CHECK(dp_optimizer_new(&config, N, &cpu) == DP_OK && dp_optimizer_new(&config, N, &gpu) == DP_OK, "%s: new: %s",
          name, dp_error_message());
    if (!cpu || !gpu) return;
    /* weight-decay groups (dropped without the config's flags): runs that cross the two updates' border */
    const dp_decay_range_t ranges[] = {{500, 1000, DP_DECAY_NORM}, {2000, 100, DP_DECAY_BIAS}, {2900, 100, DP_DECAY_NORM}};
    DP_ASSERT(dp_optimizer_set_decay_ranges(cpu, ranges, 3) == DP_OK && dp_optimizer_set_decay_ranges(gpu, ranges, 3) == DP_OK);
    for (int step = 0; step < 3; step++) {
        fill(g, N, 30 + step);
        be->upload(be->ctx, dg, g, sizeof g);
        dp_optimizer_begin_step(cpu);
        dp_optimizer_begin_step(gpu);
        dp_optimizer_step_range(cpu, p_cpu, g, 0, 1000);
        dp_optimizer_step_range(cpu, p_cpu, g, 1000, N - 1000);
        be->optimizer_update(be->ctx, gpu, dp_, dg, 1000, N - 1000); /* ranges in either order */
        be->optimizer_update(be->ctx, gpu, dp_, dg, 0, 1000);
    }
    download(p_gpu, dp_, N);
    size_t worst = 0, differ = 0;
    for (size_t i = 0; i < N; i++) differ += p_gpu[i] != p_cpu[i];
    double v = testing_max_violation(p_gpu, p_cpu, N, 1e-6, 1e-7, &worst);
    printf("  optimizer %-9s 3 steps: %zu of %d parameters differ from the CPU's bits, max violation %.3g\n", name,
           differ, N, v);
    CHECK(v <= 1.0, "%s: parameter %zu: GPU %.9g, CPU %.9g", name, worst, (double)p_gpu[worst], (double)p_cpu[worst]);
    be->optimizer_forget(be->ctx, gpu); /* before the free (backend.h): the next optimizer may get its address */
    dp_optimizer_free(cpu);
    dp_optimizer_free(gpu);
    be->free(be->ctx, dp_);
    be->free(be->ctx, dg);
}

/* Gradient clipping's sum_squares and scale_range: the sum in double of a
 * float's squares is the CPU's up to the order of the additions (relative
 * 1e-13; the float norm from it the same float), the same bits twice, 0
 * for no floats; the scale is the CPU's multiply, bit for bit, inside the
 * range only. */
static void check_clip(void) {
    enum { N = 100003 };
    static float host[N], got[N];
    fill(host, N, 40);
    for (int i = 0; i < N; i += 7) host[i] *= 1000.0f; /* values of several magnitudes */
    float *dev = gpu_floats(host, N);
    if (!dev) return;
    const size_t sizes[] = {N, 5, 0, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        double a = NAN, b = NAN, want = dp_sum_squares(host, sizes[k]);
        CHECK(be->sum_squares(be->ctx, dev, sizes[k], &a) == DP_OK && be->sum_squares(be->ctx, dev, sizes[k], &b) == DP_OK,
              "sum_squares of %zu: %s", sizes[k], dp_error_message());
        CHECK(memcmp(&a, &b, sizeof a) == 0, "sum_squares of %zu: %.17g then %.17g", sizes[k], a, b);
        CHECK(fabs(a - want) <= 1e-13 * want, "sum_squares of %zu: GPU %.17g, CPU %.17g", sizes[k], a, want);
        CHECK(dp_clip_total_norm(a) == dp_clip_total_norm(want), "sum_squares of %zu: norm %.9g, CPU's %.9g",
              sizes[k], dp_clip_total_norm(a), dp_clip_total_norm(want));
        if (k == 0) printf("  sum_squares of %d floats: GPU %.17g, CPU %.17g\n", N, a, want);
    }
    /* the model's moving average: the CPU's bits (each product and the sum rounded) */
    static float avg[N], want_avg[N];
    fill(avg, N, 41);
    memcpy(want_avg, avg, sizeof avg);
    float *dev_avg = gpu_floats(avg, N);
    if (dev_avg) {
        const double decay = 0.99890773333333227; /* torchvision's recipe's, test_ema.c */
        for (int k = 0; k < 3; k++) {
            be->ema_update(be->ctx, dev_avg, dev, (float)decay, (float)(1.0 - decay), N);
            dp_ema_update(want_avg, host, (float)decay, (float)(1.0 - decay), N);
        }
        download(avg, dev_avg, N);
        CHECK(memcmp(avg, want_avg, sizeof avg) == 0, "ema_update: 3 updates differ from the CPU's bits");
        be->free(be->ctx, dev_avg);
    }
    be->scale_range(be->ctx, dev + 10, 0.37f, N - 20);
    download(got, dev, N);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= got[i] == (i >= 10 && i < N - 10 ? host[i] * 0.37f : host[i]);
    CHECK(ok, "scale_range: not the CPU's products inside [10, N - 10), or a change outside");
    be->free(be->ctx, dev);
}

/* paste_boxes: 5 examples of 3 x 9 x 7, boxes of every kind (a corner, a
 * whole row, the whole image, empty, inverted), pasted from a source, then
 * erased with other boxes: the CPU backend's bits. */
static void check_paste_boxes(void) {
    enum { N = 5, C = 3, H = 9, W = 7, V = N * C * H * W };
    static float x[V], src[V], want[V], got[V];
    fill(x, V, 51);
    fill(src, V, 52);
    memcpy(want, x, sizeof x);
    const int32_t pasted[4 * N] = {0, 3, 0, 2, 4, 5, 0, 7, 0, 9, 0, 7, 2, 2, 1, 5, 6, 3, 1, 4};
    const int32_t erased[4 * N] = {1, 8, 3, 6, 0, 0, 0, 0, 8, 9, 6, 7, 0, 9, 2, 3, 0, 9, 0, 7};
    float *dx = gpu_floats(x, V), *dsrc = gpu_floats(src, V);
    int32_t *dboxes = be->alloc(be->ctx, sizeof pasted + sizeof erased, "test boxes");
    CHECK(dboxes != NULL, "alloc of boxes: %s", dp_error_message());
    if (!dx || !dsrc || !dboxes) return;
    be->upload(be->ctx, dboxes, pasted, sizeof pasted);
    be->upload(be->ctx, dboxes + 4 * N, erased, sizeof erased);
    be->paste_boxes(be->ctx, dx, dsrc, N, C, H, W, dboxes);
    be->paste_boxes(be->ctx, dx, NULL, N, C, H, W, dboxes + 4 * N);
    const dp_backend_t *cpu = dp_backend_cpu();
    cpu->paste_boxes(cpu->ctx, want, src, N, C, H, W, pasted);
    cpu->paste_boxes(cpu->ctx, want, NULL, N, C, H, W, erased);
    download(got, dx, V);
    CHECK(memcmp(got, want, sizeof got) == 0, "paste_boxes: the GPU's boxes differ from the CPU's");
    CHECK(memcmp(want, x, sizeof x) != 0, "paste_boxes: the boxes changed nothing (a test that cannot fail)");
    be->free(be->ctx, dx);
    be->free(be->ctx, dsrc);
    be->free(be->ctx, dboxes);
}

/* input_from_bytes of B examples of `ds` (their bytes uploaded, as the
 * trainer does) against dp_dataset_fill, twice (the second into memory
 * used before): the same bits. */
static void check_load_batch_of(const char *what, const dp_dataset_t *ds) {
    enum { B = 37 };
    int indices[B];
    for (int i = 0; i < B; i++) indices[i] = (i * 53 + 11) % ds->count;
    size_t example = (size_t)ds->channels * ds->height * ds->width;
    float *want = malloc(sizeof(float) * B * example), *got = malloc(sizeof(float) * B * example);
    uint8_t *bytes = malloc(B * example);
    int32_t want_y[B];
    DP_ASSERT(want && got && bytes);
    dp_dataset_fill(ds, indices, B, want, want_y);
    for (int i = 0; i < B; i++) memcpy(bytes + i * example, ds->pixels + (size_t)indices[i] * example, example);
    dp_normalize_t norm;
    dp_dataset_normalization(ds, &norm);
    float *x = gpu_floats(NULL, B * example);
    uint8_t *dev_bytes = be->alloc(be->ctx, B * example, "bytes");
    for (int round = 0; x && dev_bytes && round < 2; round++) {
        memset(got, 0, sizeof(float) * B * example);
        be->upload(be->ctx, dev_bytes, bytes, B * example);
        be->input_from_bytes(be->ctx, x, dev_bytes, B, ds->channels, (size_t)ds->height * ds->width, &norm);
        download(got, x, B * example);
        CHECK(memcmp(got, want, sizeof(float) * B * example) == 0,
              "input_from_bytes, %s (round %d): the input differs from dp_dataset_fill's", what, round);
    }
    be->free(be->ctx, x);
    be->free(be->ctx, dev_bytes);
    free(want);
    free(got);
    free(bytes);
}

static void check_load_batch(void) {
    dp_dataset_t ds = testing_column_dataset(200, 28, 10, 2, 3, 60, 7);
    check_load_batch_of("1x28x28 / 255", &ds);
    const float mean = 0.2860f, std = 0.3530f; /* Fashion-MNIST's */
    DP_ASSERT(dp_dataset_set_normalize(&ds, 1, &mean, &std) == DP_OK);
    check_load_batch_of("1x28x28 normalised", &ds);
    dp_dataset_free(&ds);
    /* 3 channels, each its own mean and std: the channel of every pixel */
    dp_dataset_t rgb = {.count = 50, .channels = 3, .height = 8, .width = 6, .num_classes = 10};
    rgb.pixels = malloc((size_t)50 * 3 * 8 * 6);
    rgb.labels = malloc(50);
    DP_ASSERT(rgb.pixels && rgb.labels);
    dp_rng_t rng;
    dp_rng_seed(&rng, 5);
    for (size_t i = 0; i < (size_t)50 * 3 * 8 * 6; i++) rgb.pixels[i] = (uint8_t)(dp_rng_next(&rng) >> 56);
    for (int i = 0; i < 50; i++) rgb.labels[i] = (uint8_t)(i % 10);
    check_load_batch_of("3x8x6 / 255", &rgb);
    const float means[3] = {0.4914f, 0.4822f, 0.4465f}, stds[3] = {0.2470f, 0.2435f, 0.2616f}; /* CIFAR-10's */
    DP_ASSERT(dp_dataset_set_normalize(&rgb, 3, means, stds) == DP_OK);
    check_load_batch_of("3x8x6 normalised per channel", &rgb);
    dp_dataset_free(&rgb);
}

static void check_range(void) {
    const char *env = getenv("DPTRAIN_CUDA_VMM");
    const int off = env && (!strcmp(env, "off") || !strcmp(env, "0"));
    const int has = be->reserve && be->commit && be->release;
    CHECK(has == !off, "the table has %s with DPTRAIN_CUDA_VMM=%s", has ? "a range" : "no range", env ? env : "(unset)");
    if (!has) return;
    const size_t peak0 = be->memory_peak(be->ctx), mib = (size_t)1 << 20;
    dp_arena_t *arena = dp_arena_new_on(be, 4096);
    CHECK(arena != NULL, "an arena on the range: %s", dp_error_message());
    if (!arena) return;
    const size_t sizes[] = {3 * mib, 64, 5 * mib + 320, 9 * mib};
    unsigned char *got[4];
    for (int i = 0; i < 4; i++) {
        got[i] = dp_arena_alloc(arena, sizes[i]);
        CHECK(got[i] != NULL, "arena allocation %d of %zu bytes: %s", i, sizes[i], dp_error_message());
        if (!got[i]) return;
        if (i) CHECK(got[i] == got[i - 1] + (sizes[i - 1] + 63) / 64 * 64, "allocation %d is not next to the one "
                     "before: the range did not grow in place", i);
    }
    const size_t step = 3 * mib + 64 + 5 * mib + 320 + 9 * mib, peak1 = be->memory_peak(be->ctx);
    CHECK(peak1 >= peak0 + step && peak1 <= peak0 + step + 8 * mib, "memory_peak grew by %zu bytes for a step of %zu",
          peak1 - peak0, step);
    /* 16 MiB + 448 bytes from the first allocation: across every commit's chunk */
    const size_t n = (step + 3 * 64) / sizeof(float);
    float *host = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) host[i] = (float)(i % 9973) - 17.0f;
    be->upload(be->ctx, got[0], host, sizeof(float) * n);
    be->zero(be->ctx, got[2], sizes[2]);
    be->download(be->ctx, back, got[0], sizeof(float) * n);
    size_t wrong = 0;
    const size_t z0 = (size_t)(got[2] - got[0]) / sizeof(float), z1 = z0 + sizes[2] / sizeof(float);
    for (size_t i = 0; i < n; i++) wrong += back[i] != (i >= z0 && i < z1 ? 0.0f : host[i]);
    CHECK(wrong == 0, "a buffer across the range's chunks: %zu of %zu values wrong", wrong, n);
    free(host);
    free(back);
    CHECK(be->failure(be->ctx) == DP_OK, "the GPU failed: %s", dp_error_message());
    dp_arena_reset(arena);
    for (int i = 0; i < 4; i++) CHECK(dp_arena_alloc(arena, sizes[i]) == got[i], "step 2: allocation %d moved", i);
    CHECK(be->memory_peak(be->ctx) == peak1, "step 2 committed more");
    dp_arena_reset(arena);
    CHECK(dp_arena_alloc(arena, (size_t)1 << 52) == NULL && strstr(dp_error_message(), "address space"),
          "a step past the range: '%s'", dp_error_message());
    dp_arena_free(arena);
    /* the memory is back: a second arena of the same step holds no more at its peak than the first did */
    arena = dp_arena_new_on(be, 4096);
    CHECK(arena && dp_arena_alloc(arena, step) != NULL, "a second arena: %s", dp_error_message());
    CHECK(be->memory_peak(be->ctx) == peak1, "the first arena's range was not given back (peak %zu, %zu before)",
          be->memory_peak(be->ctx), peak1);
    dp_arena_free(arena);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_backend");
    CHECK(strcmp(be->name, "cuda") == 0 && !be->host_memory, "the backend is '%s', host_memory %d", be->name,
          be->host_memory);
    check_memory();
    check_collectives();
    check_optimizer("sgd", (dp_optim_config_t){.kind = DP_OPTIM_SGD, .lr = 0.1f});
    check_optimizer("sgd_wd", (dp_optim_config_t){.kind = DP_OPTIM_SGD, .lr = 0.1f, .weight_decay = 0.01f});
    check_optimizer("momentum", (dp_optim_config_t){.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .weight_decay = 1e-3f});
    check_optimizer("nesterov", (dp_optim_config_t){.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .nesterov = 1});
    check_optimizer("adagrad", (dp_optim_config_t){.kind = DP_OPTIM_ADAGRAD, .lr = 0.1f, .weight_decay = 1e-3f});
    check_optimizer("adam", (dp_optim_config_t){.kind = DP_OPTIM_ADAM, .lr = 1e-3f, .weight_decay = 1e-2f});
    check_optimizer("adamw", (dp_optim_config_t){.kind = DP_OPTIM_ADAMW, .lr = 1e-3f, .weight_decay = 1e-2f});
    check_optimizer("adamw_groups", (dp_optim_config_t){.kind = DP_OPTIM_ADAMW, .lr = 0.05f, .weight_decay = 0.3f,
                                                        .has_norm_weight_decay = 1, .has_bias_weight_decay = 1,
                                                        .bias_weight_decay = 0.05f});
    check_optimizer("sgd_groups", (dp_optim_config_t){.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .weight_decay = 0.1f,
                                                      .has_norm_weight_decay = 1, .norm_weight_decay = 0.5f});
    check_optimizer("adamw_b", (dp_optim_config_t){.kind = DP_OPTIM_ADAMW, .lr = 0.05f, .weight_decay = 0.3f,
                                                   .beta1 = 0.5f, .beta2 = 0.75f, .eps = 1e-3f});
    check_clip();
    check_paste_boxes();
    check_load_batch();
    check_range(); /* first: its memory_peak figures assume no earlier peak above what is held at its start */
    check_count_metrics(be, "cuda:0"); /* metrics_checks.h (its top-5 rows of 1000 classes take 1.2 MB) */
    return testing_finish("test_cuda_backend");
}
