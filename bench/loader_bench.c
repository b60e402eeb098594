/* loader_bench.c - the data pipeline alone against a training step.
 *
 * usage: loader_bench [N] [REPS] [MODELS_DIR]
 *
 * For three layouts of the same N Fashion-MNIST training images (the IDX
 * files as shipped, gzip; a PNG ImageFolder tree of them, 1x28x28; CIFAR-10
 * binary records of a 3x32x32 colour version) it measures, single-threaded:
 * - decode: images per second of dp_dataset_load (gunzip, PNG decoding,
 *   record reading) into memory, done once per run;
 * - fill: images per second of an in-memory source's fill of a batch of
 *   256 random examples (bytes; crop:4,flip or none: what a loader thread
 *   does) followed by their conversion to the input (dp_pixels_to_input,
 *   with and without normalisation: what a CPU device does for its shard);
 * and one training step with 2 devices, batch 256 (LeNet on the 1x28x28
 * data, models/lenet-cifar.cfg on the 3x32x32 data), to say what fraction
 * of a step the fill of a device's shard (128 examples) takes. Medians of
 * REPS repetitions. The PNG tree and CIFAR files go to a temporary folder,
 * removed at the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "bench_util.h"
#include "dptrain/batch_source.h"
#include "dptrain/data.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"

#define BATCH 256

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    fprintf(stderr, "loader_bench: %s: %s\n", what, dp_error_message());
    exit(1);
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static size_t png_chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n) {
    put32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    put32(out + 8 + n, (uint32_t)crc32(0L, out + 4, 4 + n));
    return 12 + n;
}

/* An 8-bit gray PNG (filter None, zlib level 6: what most tools write). */
static void write_gray_png(const char *path, int h, int w, const uint8_t *pixels) {
    size_t raw_n = (size_t)h * ((size_t)w + 1);
    uint8_t raw[64 * 65], z[8192], file[8192 + 128], ihdr[13];
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (w + 1)] = 0;
        memcpy(raw + (size_t)y * (w + 1) + 1, pixels + (size_t)y * w, (size_t)w);
    }
    uLongf z_n = sizeof z;
    if (compress2(z, &z_n, raw, (uLong)raw_n, 6) != Z_OK) exit(1);
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(file, signature, 8);
    size_t used = 8;
    put32(ihdr, (uint32_t)w), put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 0, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    used += png_chunk(file + used, "IHDR", ihdr, 13);
    used += png_chunk(file + used, "IDAT", z, (uint32_t)z_n);
    used += png_chunk(file + used, "IEND", NULL, 0);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(file, 1, used, f) != used || fclose(f) != 0) {
        fprintf(stderr, "loader_bench: cannot write %s\n", path);
        exit(1);
    }
}

/* Median seconds of dp_dataset_load(dir, "train") over reps runs; the last
 * load stays in *out. */
static double load_seconds(const char *dir, int reps, dp_dataset_t *out) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    dp_dataset_load_options_t quiet = {0};
    for (int r = 0; r < reps; r++) {
        if (r) dp_dataset_free(out);
        double start = now_sec();
        if (dp_dataset_load_with(dir, "train", &quiet, out) != DP_OK) die(dir);
        t[r] = now_sec() - start;
    }
    double m = bench_median(t, reps);
    free(t);
    return m;
}

/* Median seconds to fill one batch of n random examples as bytes and turn
 * them into the input. */
static double fill_seconds(dp_dataset_t *ds, const dp_augment_t *aug, int n, int reps) {
    const size_t example = (size_t)ds->channels * ds->height * ds->width;
    float *x = dp_alloc_aligned(sizeof(float) * example * (size_t)n, "batch");
    uint8_t *pixels = malloc(example * (size_t)n);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    int *indices = malloc(sizeof(int) * (size_t)n);
    double *t = malloc(sizeof(double) * (size_t)reps);
    dp_batch_source_t *src;
    if (dp_memory_source_new(ds, aug, 0, &src) != DP_OK) die("source");
    dp_rng_t rng;
    dp_rng_seed(&rng, 3);
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n; i++) indices[i] = (int)dp_rng_below(&rng, (uint64_t)ds->count);
        dp_fill_keys_t keys = {.seed = 7, .first_position = (int64_t)r * n, .training = 1};
        dp_batch_t b;
        double start = now_sec();
        if (dp_batch_source_fill_batch(src, indices, n, &keys, pixels, y, &b) != DP_OK) die("fill");
        dp_pixels_to_input(b.pixels, n, b.channels, (size_t)b.height * b.width, b.normalize, x);
        t[r] = now_sec() - start;
    }
    double m = bench_median(t, reps);
    dp_batch_source_free(src);
    free(x), free(pixels), free(y), free(indices), free(t);
    return m;
}

/* Median seconds of a training step with 2 devices, batch 256. */
static double step_seconds(const dp_model_t *m, dp_dataset_t *ds, int reps) {
    dp_trainer_config_t config = {.model = m, .num_devices = 2, .threads_per_device = 1,
                                  .allreduce = DP_ALLREDUCE_RING, .sync = DP_SYNC_ALLREDUCE,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.01f}};
    dp_trainer_t *t;
    if (dp_trainer_new(&config, &t) != DP_OK) die("trainer");
    int indices[BATCH];
    double *times = malloc(sizeof(double) * (size_t)reps);
    uint8_t *pixels = malloc((size_t)BATCH * ds->channels * ds->height * ds->width);
    int32_t labels[BATCH];
    dp_batch_source_t *src;
    if (!pixels || dp_memory_source_new(ds, NULL, 0, &src) != DP_OK) die("source");
    dp_rng_t rng;
    dp_rng_seed(&rng, 5);
    for (int r = -3; r < reps; r++) {
        for (int i = 0; i < BATCH; i++) indices[i] = (int)dp_rng_below(&rng, (uint64_t)ds->count);
        dp_batch_t b;
        dp_fill_keys_t keys = {0};
        if (dp_batch_source_fill_batch(src, indices, BATCH, &keys, pixels, labels, &b) != DP_OK) die("fill");
        double start = now_sec();
        if (dp_trainer_step(t, &b, NULL, NULL) != DP_OK) die("step");
        if (r >= 0) times[r] = now_sec() - start;
    }
    double med = bench_median(times, reps);
    dp_batch_source_free(src);
    free(pixels);
    free(times);
    dp_trainer_free(t);
    return med;
}

static void report_fill(const char *layout, dp_dataset_t *ds, double step, int reps) {
    dp_augment_t none = {0}, aug = {.crop_padding = 4, .flip = 1};
    double plain = fill_seconds(ds, &none, BATCH, reps);
    double augmented = fill_seconds(ds, &aug, BATCH, reps);
    dp_dataset_t norm = *ds;
    float mean[1] = {0.5f}, std[1] = {0.25f};
    dp_dataset_set_normalize(&norm, 1, mean, std);
    double normalised = fill_seconds(&norm, &aug, BATCH, reps);
    double shard = fill_seconds(&norm, &aug, BATCH / 2, reps);
    printf("%-12s fill: %9.0f images/s plain, %9.0f with crop:4,flip, %9.0f with crop:4,flip + normalise; "
           "a device's shard of %d (augmented, normalised): %.3f ms = %.1f%% of a %.2f ms step on 2 devices\n",
           layout, BATCH / plain, BATCH / augmented, BATCH / normalised, BATCH / 2, shard * 1e3,
           100.0 * shard / step, step * 1e3);
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 10000, reps = argc > 2 ? atoi(argv[2]) : 5;
    const char *models = argc > 3 ? argv[3] : "models";
    if (count < BATCH || count > 60000 || reps < 1) {
        fprintf(stderr, "usage: loader_bench [N in %d..60000] [REPS >= 1] [MODELS_DIR]\n", BATCH);
        return 2;
    }
    if (!bench_cpu_line("loader_bench", 1)) return 1;
    dp_blas_set_threads(1);
    char tmp[] = "/tmp/loader_bench.XXXXXX";
    if (!mkdtemp(tmp)) return 1;

    /* IDX, as shipped (all 60000 images are decoded: the files are one stream) */
    dp_dataset_t idx;
    double idx_load = load_seconds(DP_DEFAULT_DATA_DIR, reps, &idx);
    printf("IDX (gzip)   decode: %9.0f images/s (%d images in %.3f s)\n", idx.count / idx_load, idx.count, idx_load);
    dp_dataset_truncate(&idx, count);

    /* the same images as a PNG tree */
    char path[600];
    snprintf(path, sizeof path, "%s/png", tmp), mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/png/train", tmp), mkdir(path, 0755);
    for (int c = 0; c < 10; c++) snprintf(path, sizeof path, "%s/png/train/c%d", tmp, c), mkdir(path, 0755);
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/png/train/c%d/%05d.png", tmp, idx.labels[i], i);
        write_gray_png(path, 28, 28, idx.pixels + (size_t)i * 784);
    }
    snprintf(path, sizeof path, "%s/png", tmp);
    dp_dataset_t png;
    double png_load = load_seconds(path, reps, &png);
    printf("PNG folder   decode: %9.0f images/s (%d images in %.3f s)\n", png.count / png_load, png.count, png_load);

    /* CIFAR records of a 3x32x32 colour version */
    snprintf(path, sizeof path, "%s/data_batch_1.bin", tmp);
    FILE *f = fopen(path, "wb");
    uint8_t record[3073];
    for (int i = 0; i < count && f; i++) {
        record[0] = idx.labels[i];
        for (int p = 0; p < 1024; p++) {
            int y = p / 32 - 2, x = p % 32 - 2;
            uint8_t v = y >= 0 && y < 28 && x >= 0 && x < 28 ? idx.pixels[(size_t)i * 784 + (size_t)y * 28 + x] : 0;
            record[1 + p] = v, record[1 + 1024 + p] = (uint8_t)(255 - v), record[1 + 2048 + p] = (uint8_t)(v / 2);
        }
        fwrite(record, 1, sizeof record, f);
    }
    if (!f || fclose(f) != 0) return 1;
    dp_dataset_t cifar;
    double cifar_load = load_seconds(tmp, reps, &cifar);
    printf("CIFAR binary decode: %9.0f images/s (%d images in %.3f s)\n", cifar.count / cifar_load, cifar.count,
           cifar_load);

    dp_model_t *lenet = NULL, *lenet_cifar = NULL;
    if (dp_model_builtin("lenet", &lenet) != DP_OK) die("lenet");
    snprintf(path, sizeof path, "%s/lenet-cifar.cfg", models);
    if (dp_model_load_file(path, &lenet_cifar) != DP_OK) die(path);
    double step28 = step_seconds(lenet, &idx, reps * 4);
    double step32 = step_seconds(lenet_cifar, &cifar, reps * 4);
    int fill_reps = reps * 20;
    report_fill("IDX", &idx, step28, fill_reps);
    report_fill("PNG folder", &png, step28, fill_reps);
    report_fill("CIFAR", &cifar, step32, fill_reps);
    printf("(steps: LeNet on 1x28x28, lenet-cifar on 3x32x32, batch %d on 2 devices, 1 thread each; the fill of a "
           "shard's conversion runs on its device inside the step)\n", BATCH);

    dp_model_free(lenet), dp_model_free(lenet_cifar);
    dp_dataset_free(&idx), dp_dataset_free(&png), dp_dataset_free(&cifar);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : 1;
}
