/* testing.c - the test harness behind testing.h. */
#define _XOPEN_SOURCE 700 /* nftw's FTW_DEPTH and FTW_PHYS */
#include "testing.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dptrain/rng.h"

int testing_passed, testing_failed;

double testing_max_violation(const float *a, const float *b, size_t n,
                             double rtol, double atol, size_t *worst_index) {
    double worst = 0.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)a[i] - (double)b[i]);
        double allowed = atol + rtol * fabs((double)b[i]);
        double v = (isnan(a[i]) || isnan(b[i])) ? INFINITY : diff / allowed;
        if (v > worst) {
            worst = v;
            worst_i = i;
        }
    }
    if (worst_index) *worst_index = worst_i;
    return worst;
}

const char *testing_path(const char *relative) {
    static char buf[4096];
    const char *dir = getenv("DPTRAIN_TEST_DIR");
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : ".", relative);
    return buf;
}

static char tmpdir[256];
static pid_t tmpdir_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* At exit, the process that made the directory removes it, unless a check
 * failed: then it stays, and its path is said, for a look at what the test
 * wrote. (A forked child's exit leaves it to its parent.) */
static void remove_tmpdir(void) {
    if (getpid() != tmpdir_owner || !tmpdir[0]) return;
    if (testing_failed > 0) {
        fprintf(stderr, "the test's files are kept in %s\n", tmpdir);
        return;
    }
    nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *testing_tmpdir(void) {
    if (tmpdir[0]) return tmpdir;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dptrain-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(2);
    }
    tmpdir_owner = getpid();
    atexit(remove_tmpdir);
    return tmpdir;
}

const char *testing_tmp_file(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", testing_tmpdir(), name);
    return p;
}

int testing_count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

int testing_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, testing_passed, testing_failed);
    return testing_failed == 0 ? 0 : 1;
}

dp_dataset_t testing_random_images(int count, uint64_t seed) {
    uint8_t *pixels = malloc((size_t)count * 784), *labels = malloc((size_t)count);
    DP_ASSERT(pixels && labels);
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (size_t i = 0; i < (size_t)count * 784; i++) pixels[i] = (uint8_t)dp_rng_below(&rng, 256);
    for (int i = 0; i < count; i++) labels[i] = (uint8_t)dp_rng_below(&rng, 10);
    dp_dataset_t ds;
    DP_ASSERT(dp_dataset_from_memory(&ds, count, 1, 28, 28, 10, pixels, labels) == DP_OK);
    free(pixels);
    free(labels);
    return ds;
}

dp_dataset_t testing_column_dataset(int count, int side, int classes, int column_step, int column_offset,
                                    int noise, uint64_t seed) {
    const size_t plane = (size_t)side * side;
    uint8_t *pixels = malloc((size_t)count * plane), *labels = malloc((size_t)count);
    DP_ASSERT(pixels && labels);
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (int i = 0; i < count; i++) {
        labels[i] = (uint8_t)dp_rng_below(&rng, (uint64_t)classes);
        for (size_t p = 0; p < plane; p++) pixels[(size_t)i * plane + p] = (uint8_t)dp_rng_below(&rng, (uint64_t)noise);
        for (int r = 0; r < side; r++)
            pixels[(size_t)i * plane + (size_t)r * side + column_step * labels[i] + column_offset] = 255;
    }
    dp_dataset_t ds;
    DP_ASSERT(dp_dataset_from_memory(&ds, count, 1, side, side, classes, pixels, labels) == DP_OK);
    free(pixels);
    free(labels);
    return ds;
}

unsigned char *testing_read_file(const char *path, size_t *size) {
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    unsigned char *data = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (!data) return NULL;
    data[n] = 0;
    *size = (size_t)n;
    return data;
}

const dp_batch_t *testing_source_batch(testing_batch_t *b, dp_batch_source_t *src, const int *indices, int n,
                                       const dp_fill_keys_t *keys) {
    size_t bytes = (size_t)(n > 0 ? n : 1) * dp_batch_source_sample_bytes(src);
    if (bytes > b->pixel_bytes) {
        free(b->pixels);
        b->pixels = malloc(bytes);
        b->pixel_bytes = bytes;
    }
    if ((size_t)n >= b->label_count) {
        free(b->labels);
        b->labels = malloc(sizeof(int32_t) * (size_t)(n + 1));
        b->label_count = (size_t)n + 1;
    }
    DP_ASSERT(b->pixels && b->labels);
    if (dp_batch_source_fill_batch(src, indices, n, keys, b->pixels, b->labels, &b->batch) != DP_OK) return NULL;
    return &b->batch;
}

const dp_batch_t *testing_batch(testing_batch_t *b, const dp_dataset_t *ds, const int *indices, int n) {
    if (b->ds != ds || !b->source) {
        dp_batch_source_free(b->source);
        b->source = NULL;
        DP_ASSERT(dp_memory_source_new((dp_dataset_t *)ds, NULL, 0, &b->source) == DP_OK);
        b->ds = ds;
    }
    const dp_fill_keys_t keys = {0};
    return testing_source_batch(b, b->source, indices, n, &keys);
}

void testing_batch_free(testing_batch_t *b) {
    dp_batch_source_free(b->source);
    free(b->pixels);
    free(b->labels);
    memset(b, 0, sizeof *b);
}

dp_status_t testing_step(dp_trainer_t *t, const dp_dataset_t *ds, const int *indices, int n, double *loss_sum,
                         int *correct) {
    static testing_batch_t b; /* kept from call to call, as a loader's buffers are */
    const dp_batch_t *batch = testing_batch(&b, ds, indices, n);
    return batch ? dp_trainer_step(t, batch, loss_sum, correct) : dp_error_status();
}

dp_status_t testing_evaluate(dp_trainer_t *t, const dp_dataset_t *ds, int batch_size, int *correct) {
    dp_batch_source_t *src = NULL;
    dp_status_t status = dp_memory_source_new((dp_dataset_t *)ds, NULL, 0, &src);
    if (status == DP_OK) status = dp_trainer_evaluate(t, src, batch_size, correct);
    dp_batch_source_free(src);
    return status;
}

int testing_train_source_steps(dp_trainer_t *t, dp_batch_source_t *src, uint64_t seed, int steps, int batch,
                               int stride, double *losses, const char *name) {
    int *indices = malloc(sizeof(int) * (size_t)batch);
    DP_ASSERT(indices);
    const int count = dp_batch_source_info(src)->count;
    testing_batch_t b = {0};
    int ok = 1;
    for (int s = 0; s < steps && ok; s++) {
        for (int i = 0; i < batch; i++) indices[i] = (s * batch + i * stride) % count;
        losses[s] = 0;
        const dp_fill_keys_t keys = {.seed = seed, .first_position = (int64_t)s * batch, .training = 1};
        const dp_batch_t *batch_made = testing_source_batch(&b, src, indices, batch, &keys);
        dp_status_t status = batch_made ? dp_trainer_step(t, batch_made, &losses[s], NULL) : dp_error_status();
        CHECK(status == DP_OK, "%s: step %d: %s", name, s, dp_error_message());
        ok = status == DP_OK;
    }
    testing_batch_free(&b);
    free(indices);
    return ok;
}

int testing_train_steps(dp_trainer_t *t, const dp_dataset_t *ds, int steps, int batch, int stride, double *losses,
                        const char *name) {
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_memory_source_new((dp_dataset_t *)ds, NULL, 0, &src) == DP_OK);
    int ok = testing_train_source_steps(t, src, 0, steps, batch, stride, losses, name);
    dp_batch_source_free(src);
    return ok;
}

/* --- PNG files for the image tests ----------------------------------------- */
static void png_put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG chunk: length, type, data, CRC of type + data. */
static size_t png_chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n) {
    png_put32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    png_put32(out + 8 + n, (uint32_t)crc32(0L, out + 4, 4 + n));
    return 12 + n;
}

/* An 8-bit gray (channels 1) or RGB (3) PNG of (h, w, channels) interleaved
 * pixels; rows use filter 0 (None), the stream is real deflate (zlib). */
void testing_write_png(const char *path, int channels, int h, int w, const uint8_t *hwc) {
    size_t row = (size_t)w * channels, raw_n = (size_t)h * (row + 1);
    uint8_t *raw = malloc(raw_n);
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (row + 1)] = 0;
        memcpy(raw + (size_t)y * (row + 1) + 1, hwc + (size_t)y * row, row);
    }
    uLongf z_n = compressBound((uLong)raw_n);
    uint8_t *z = malloc(z_n);
    if (compress2(z, &z_n, raw, (uLong)raw_n, 6) != Z_OK) exit(1);
    uint8_t *file = malloc(z_n + 128), ihdr[13];
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(file, signature, 8);
    size_t used = 8;
    png_put32(ihdr, (uint32_t)w);
    png_put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;                       /* bit depth */
    ihdr[9] = channels == 1 ? 0 : 2;   /* gray or RGB */
    ihdr[10] = ihdr[11] = ihdr[12] = 0; /* deflate, adaptive filters, no interlace */
    used += png_chunk(file + used, "IHDR", ihdr, 13);
    used += png_chunk(file + used, "IDAT", z, (uint32_t)z_n);
    used += png_chunk(file + used, "IEND", NULL, 0);
    FILE *f = fopen(path, "wb");
    DP_ASSERT(f && fwrite(file, 1, used, f) == used && fclose(f) == 0);
    free(file);
    free(z);
    free(raw);
}
