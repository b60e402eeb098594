/* test_idx.c - the IDX reader and dp_dataset_load: valid plain and gzip
 * files, and every rejected case (truncated, wrong magic, wrong type, bad
 * dims, trailing bytes, corrupt gzip, missing file, count mismatch, label out
 * of range), checking the status and that the message names the file and the
 * problem. Also reads the real Fashion-MNIST when it is installed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "dptrain/data.h"
#include "testing.h"

/* An IDX image in memory: header for `ndim` dims, then data bytes i % 251. */
static size_t make_idx(uint8_t *buf, size_t size, unsigned type, int ndim, const uint32_t *dims) {
    size_t n = 0;
    buf[n++] = 0;
    buf[n++] = 0;
    buf[n++] = (uint8_t)type;
    buf[n++] = (uint8_t)ndim;
    size_t total = 1;
    for (int i = 0; i < ndim; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24);
        buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8);
        buf[n++] = (uint8_t)dims[i];
        total *= dims[i];
    }
    if (n + total > size) {
        fprintf(stderr, "make_idx: buffer too small\n");
        exit(2);
    }
    for (size_t i = 0; i < total; i++) buf[n++] = (uint8_t)(i % 251);
    return n;
}

static void write_plain(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

static void write_gz(const char *path, const uint8_t *data, size_t n) {
    gzFile gz = gzopen(path, "wb");
    if (!gz || gzwrite(gz, data, (unsigned)n) != (int)n || gzclose(gz) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) exit(2);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) exit(2);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

static int message_has(const char *a, const char *b) {
    const char *m = dp_error_message();
    return strstr(m, a) != NULL && (b == NULL || strstr(m, b) != NULL);
}

/* Expects dp_idx_read(path) to fail with `status` and a message containing
 * the path and `what`. */
static void expect_idx_error(const char *path, dp_status_t status, const char *what) {
    dp_idx_t idx;
    dp_error_clear();
    dp_status_t st = dp_idx_read(path, &idx);
    CHECK(st == status, "%s: status %s, expected %s (%s)", path, dp_status_name(st),
          dp_status_name(status), dp_error_message());
    CHECK(message_has(path, what), "message '%s' should name %s and say '%s'",
          dp_error_message(), path, what);
    CHECK(strchr(dp_error_message(), '\n') == NULL, "message is one line: '%s'", dp_error_message());
    CHECK(idx.data == NULL, "no data on failure");
}

static void test_valid(void) {
    static uint8_t buf[4096];
    uint32_t dims[3] = {5, 4, 3};
    size_t n = make_idx(buf, sizeof buf, 0x08, 3, dims);

    const char *paths[2] = {testing_tmp_file("valid.idx"), testing_tmp_file("valid.idx.gz")};
    write_plain(paths[0], buf, n);
    write_gz(paths[1], buf, n);
    for (int k = 0; k < 2; k++) {
        dp_idx_t idx;
        dp_status_t st = dp_idx_read(paths[k], &idx);
        CHECK(st == DP_OK, "%s: %s", paths[k], dp_error_message());
        if (st != DP_OK) continue;
        CHECK(idx.ndim == 3 && idx.dims[0] == 5 && idx.dims[1] == 4 && idx.dims[2] == 3,
              "dims %d: %u %u %u", idx.ndim, idx.dims[0], idx.dims[1], idx.dims[2]);
        int same = 1;
        for (int i = 0; i < 60; i++) same &= idx.data[i] == (uint8_t)(i % 251);
        CHECK(same, "%s: data bytes round-trip", paths[k]);
        dp_idx_free(&idx);
        CHECK(idx.data == NULL && idx.ndim == 0, "free clears the struct");
    }
    /* A gz file not named .gz is still detected by content. */
    const char *disguised = testing_tmp_file("gz-without-suffix.idx");
    write_gz(disguised, buf, n);
    dp_idx_t idx;
    CHECK(dp_idx_read(disguised, &idx) == DP_OK, "gzip detected by content: %s", dp_error_message());
    dp_idx_free(&idx);

    /* 1-D and 4-D are fine too. */
    uint32_t d1[1] = {7}, d4[4] = {2, 1, 3, 2};
    n = make_idx(buf, sizeof buf, 0x08, 1, d1);
    write_plain(testing_tmp_file("one.idx"), buf, n);
    CHECK(dp_idx_read(testing_tmp_file("one.idx"), &idx) == DP_OK && idx.ndim == 1 && idx.dims[0] == 7,
          "1-D: %s", dp_error_message());
    dp_idx_free(&idx);
    n = make_idx(buf, sizeof buf, 0x08, 4, d4);
    write_plain(testing_tmp_file("four.idx"), buf, n);
    CHECK(dp_idx_read(testing_tmp_file("four.idx"), &idx) == DP_OK && idx.ndim == 4 && idx.dims[3] == 2,
          "4-D: %s", dp_error_message());
    dp_idx_free(&idx);
}

static void test_rejected(void) {
    static uint8_t buf[4096];
    uint32_t dims[3] = {5, 4, 3};
    size_t n = make_idx(buf, sizeof buf, 0x08, 3, dims); /* 16 header + 60 data */

    const char *p = testing_tmp_file("truncated.idx");
    write_plain(p, buf, n - 7);
    expect_idx_error(p, DP_ERR_FORMAT, "truncated");
    CHECK(message_has("60", "53"), "expected vs found bytes: %s", dp_error_message());

    p = testing_tmp_file("truncated-gz.idx.gz");
    write_gz(p, buf, n - 7);
    expect_idx_error(p, DP_ERR_FORMAT, "truncated");

    p = testing_tmp_file("header-only.idx");
    write_plain(p, buf, 10);
    expect_idx_error(p, DP_ERR_FORMAT, "truncated header");

    p = testing_tmp_file("empty.idx");
    write_plain(p, buf, 0);
    expect_idx_error(p, DP_ERR_FORMAT, "truncated header");

    p = testing_tmp_file("trailing.idx");
    uint8_t *longer = malloc(n + 3);
    memcpy(longer, buf, n);
    memset(longer + n, 0xAB, 3);
    write_plain(p, longer, n + 3);
    expect_idx_error(p, DP_ERR_FORMAT, "3 trailing bytes");
    p = testing_tmp_file("trailing.idx.gz");
    write_gz(p, longer, n + 3);
    expect_idx_error(p, DP_ERR_FORMAT, "trailing");
    free(longer);

    uint8_t saved = buf[0];
    buf[0] = 0x12;
    p = testing_tmp_file("magic.idx");
    write_plain(p, buf, n);
    expect_idx_error(p, DP_ERR_FORMAT, "wrong magic 0x12000803");
    buf[0] = saved;

    p = testing_tmp_file("float.idx");
    buf[2] = 0x0D;
    write_plain(p, buf, n);
    expect_idx_error(p, DP_ERR_FORMAT, "0x0d (float32)");
    buf[2] = 0x08;

    p = testing_tmp_file("ndim0.idx");
    buf[3] = 0;
    write_plain(p, buf, n);
    expect_idx_error(p, DP_ERR_FORMAT, "0 dims");
    p = testing_tmp_file("ndim5.idx");
    buf[3] = 5;
    write_plain(p, buf, n);
    expect_idx_error(p, DP_ERR_FORMAT, "5 dims");
    buf[3] = 3;

    uint32_t zero_dims[3] = {5, 0, 3};
    size_t m = make_idx(buf, sizeof buf, 0x08, 3, zero_dims);
    p = testing_tmp_file("dim0.idx");
    write_plain(p, buf, m);
    expect_idx_error(p, DP_ERR_FORMAT, "dim 1 is 0");

    /* 65536^3 bytes: must be rejected from the header, without allocating. */
    uint8_t huge[16] = {0, 0, 8, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
    p = testing_tmp_file("huge.idx");
    write_plain(p, huge, sizeof huge);
    expect_idx_error(p, DP_ERR_FORMAT, "header is probably corrupt");

    /* A header claiming 1 GiB followed by 10 bytes: truncated, found 10. */
    uint8_t big[26] = {0, 0, 8, 1, 0x40, 0, 0, 0};
    p = testing_tmp_file("big-claim.idx");
    write_plain(p, big, sizeof big);
    expect_idx_error(p, DP_ERR_FORMAT, "found 18");

    p = testing_tmp_file("does-not-exist.idx");
    expect_idx_error(p, DP_ERR_IO, "No such file");

    expect_idx_error(testing_tmpdir(), DP_ERR_IO, "directory");
}

static void test_corrupt_gz(void) {
    static uint8_t buf[8192];
    uint32_t dims[2] = {40, 100};
    size_t n = make_idx(buf, sizeof buf, 0x08, 2, dims);
    const char *good = testing_tmp_file("good.idx.gz");
    write_gz(good, buf, n);
    size_t gz_size;
    uint8_t *gz = read_whole(good, &gz_size);

    /* Garbage in the middle of the deflate stream. */
    for (size_t i = 12; i < gz_size - 12 && i < 40; i++) gz[i] ^= 0x5A;
    const char *p = testing_tmp_file("corrupt.idx.gz");
    write_plain(p, gz, gz_size);
    dp_idx_t idx;
    dp_status_t st = dp_idx_read(p, &idx);
    CHECK(st == DP_ERR_FORMAT, "corrupt gz: status %s (%s)", dp_status_name(st), dp_error_message());
    CHECK(message_has(p, NULL) && (message_has("gzip", NULL) || message_has("truncated", NULL)),
          "corrupt gz message: %s", dp_error_message());
    free(gz);

    /* A wrong CRC in the trailer: the data decodes fine but the check fails. */
    gz = read_whole(good, &gz_size);
    gz[gz_size - 8] ^= 0xFF;
    p = testing_tmp_file("bad-crc.idx.gz");
    write_plain(p, gz, gz_size);
    expect_idx_error(p, DP_ERR_FORMAT, "corrupt gzip data");

    /* Only the 8-byte trailer (CRC, length) cut off: the data is all there
     * but cannot be verified. */
    p = testing_tmp_file("no-trailer.idx.gz");
    write_plain(p, gz, gz_size - 8);
    expect_idx_error(p, DP_ERR_FORMAT, "trailer");

    /* Cut in half: the gzip stream ends early. */
    p = testing_tmp_file("half.idx.gz");
    write_plain(p, gz, gz_size / 2);
    expect_idx_error(p, DP_ERR_FORMAT, "truncated");
    free(gz);
}

/* Writes DIR/SPLIT-images-idx3-ubyte and -labels-idx1-ubyte. */
static void write_split(const char *dir, const char *split, int images, int labels,
                        int bad_label_at, int gz) {
    static uint8_t buf[1 << 16];
    char path[600];
    uint32_t idims[3] = {(uint32_t)images, 4, 3};
    size_t n = make_idx(buf, sizeof buf, 0x08, 3, idims);
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
    (gz ? write_gz : write_plain)(path, buf, n);
    uint32_t ldims[1] = {(uint32_t)labels};
    n = make_idx(buf, sizeof buf, 0x08, 1, ldims);
    for (int i = 0; i < labels; i++) buf[8 + i] = (uint8_t)(i % 10);
    if (bad_label_at >= 0) buf[8 + bad_label_at] = 10;
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, split, gz ? ".gz" : "");
    (gz ? write_gz : write_plain)(path, buf, n);
}

static const char *make_dir(const char *name) {
    const char *dir = testing_tmp_file(name);
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
        exit(2);
    }
    return dir;
}

static void test_dataset_load(void) {
    dp_dataset_t ds;
    const char *dir = make_dir("ok");
    write_split(dir, "train", 12, 12, -1, 1);
    write_split(dir, "t10k", 7, 7, -1, 0);
    dp_status_t st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_OK, "load gz split: %s", dp_error_message());
    CHECK(ds.count == 12 && ds.channels == 1 && ds.height == 4 && ds.width == 3 &&
              ds.num_classes == 10,
          "shape %d %d %d %d classes %d", ds.count, ds.channels, ds.height, ds.width,
          ds.num_classes);
    CHECK(ds.labels && ds.labels[11] == 1, "labels loaded");
    dp_dataset_free(&ds);
    st = dp_dataset_load(dir, "t10k", &ds);
    CHECK(st == DP_OK && ds.count == 7, "load plain split: %s", dp_error_message());
    dp_dataset_free(&ds);
    /* no directory or split: one line, not a crash */
    st = dp_dataset_load(NULL, "train", &ds);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "dataset: no data directory given (NULL)") == 0 &&
          ds.count == 0, "dp_dataset_load(NULL, ...): %d '%s'", st, dp_error_message());
    st = dp_dataset_load(dir, NULL, &ds);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "dataset: no split (train or test) given (NULL)") == 0,
          "dp_dataset_load(dir, NULL): %d '%s'", st, dp_error_message());

    /* Both forms present: the .gz wins (the plain one here is broken). */
    char plain[600];
    snprintf(plain, sizeof plain, "%s/train-images-idx3-ubyte", dir);
    write_plain(plain, (const uint8_t *)"junk", 4);
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_OK && ds.count == 12, ".gz preferred over plain: %s", dp_error_message());
    dp_dataset_free(&ds);

    dir = make_dir("mismatch");
    write_split(dir, "train", 12, 11, -1, 0);
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_FORMAT, "count mismatch: %s", dp_status_name(st));
    CHECK(message_has("12 images", "11 labels") && message_has("train-images-idx3-ubyte",
                                                               "train-labels-idx1-ubyte"),
          "mismatch message: %s", dp_error_message());
    CHECK(ds.pixels == NULL && ds.labels == NULL, "nothing kept on failure");

    dir = make_dir("badlabel");
    write_split(dir, "train", 12, 12, 9, 1);
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_FORMAT, "label out of range: %s", dp_status_name(st));
    CHECK(message_has("label 10 at index 9", "train-labels-idx1-ubyte.gz"),
          "label message: %s", dp_error_message());

    dir = make_dir("empty"); /* no data of any layout: one line saying what was looked for */
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_FORMAT, "an empty folder: %s", dp_status_name(st));
    CHECK(message_has("no data found", "the IDX files of Fashion-MNIST or MNIST"),
          "an empty folder's message: %s", dp_error_message());
    dir = make_dir("test-only"); /* IDX files, but not the training split's */
    write_split(dir, "t10k", 12, 12, -1, 0);
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_IO, "missing files: %s", dp_status_name(st));
    CHECK(message_has("train-images-idx3-ubyte.gz", "train-images-idx3-ubyte (No such file"),
          "missing message names the paths tried: %s", dp_error_message());

    /* Images that are not 3-D: swap the two files' roles. */
    dir = make_dir("swapped");
    write_split(dir, "train", 12, 12, -1, 0);
    char from[600], to[600];
    snprintf(from, sizeof from, "%s/train-labels-idx1-ubyte", dir);
    snprintf(to, sizeof to, "%s/train-images-idx3-ubyte", dir);
    CHECK(rename(from, to) == 0, "rename");
    write_split(dir, "x", 12, 12, -1, 0);
    snprintf(from, sizeof from, "%s/x-images-idx3-ubyte", dir);
    snprintf(to, sizeof to, "%s/train-labels-idx1-ubyte", dir);
    CHECK(rename(from, to) == 0, "rename");
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_FORMAT && message_has("images must have 3 dims", "found 1"),
          "1-D images rejected: %s", dp_error_message());

    /* Labels that are not 1-D. */
    dir = make_dir("labels3d");
    write_split(dir, "train", 12, 12, -1, 0);
    snprintf(from, sizeof from, "%s/train-images-idx3-ubyte", dir);
    snprintf(to, sizeof to, "%s/train-labels-idx1-ubyte", dir);
    static uint8_t buf[4096];
    uint32_t idims[3] = {12, 4, 3};
    size_t n = make_idx(buf, sizeof buf, 0x08, 3, idims);
    write_plain(to, buf, n);
    st = dp_dataset_load(dir, "train", &ds);
    CHECK(st == DP_ERR_FORMAT && message_has("labels must have 1 dim", "found 3"),
          "3-D labels rejected: %s", dp_error_message());
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_fashion_mnist(void) {
    struct stat st;
    if (stat(DP_DEFAULT_DATA_DIR, &st) != 0) {
        printf("note: %s not found; skipping the real Fashion-MNIST check\n", DP_DEFAULT_DATA_DIR);
        return;
    }
    const char *splits[2] = {"train", "t10k"};
    const int counts[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        dp_dataset_t ds;
        double t0 = now_sec();
        dp_status_t status = dp_dataset_load(DP_DEFAULT_DATA_DIR, splits[s], &ds);
        double sec = now_sec() - t0;
        CHECK(status == DP_OK, "load %s: %s", splits[s], dp_error_message());
        if (status != DP_OK) continue;
        printf("loaded Fashion-MNIST %s: %d x %dx%d in %.3f s\n", splits[s], ds.count, ds.height,
               ds.width, sec);
        CHECK(ds.count == counts[s] && ds.channels == 1 && ds.height == 28 && ds.width == 28,
              "%s shape %d x %d x %d x %d", splits[s], ds.count, ds.channels, ds.height, ds.width);
        int per_class[10] = {0}, bad = 0;
        for (int i = 0; i < ds.count; i++) {
            if (ds.labels[i] < 10)
                per_class[ds.labels[i]]++;
            else
                bad++;
        }
        CHECK(bad == 0, "%d labels >= 10", bad);
        int balanced = 1;
        for (int c = 0; c < 10; c++) balanced &= per_class[c] == counts[s] / 10;
        CHECK(balanced, "%s: %d examples per class", splits[s], counts[s] / 10);
        long sum = 0;
        for (size_t i = 0; i < (size_t)ds.count * 784; i++) sum += ds.pixels[i];
        CHECK(sum > 0, "pixels are not all zero");
        dp_dataset_free(&ds);
    }
}

int main(void) {
    test_valid();
    test_rejected();
    test_corrupt_gz();
    test_dataset_load();
    test_fashion_mnist();
    return testing_finish("test_idx");
}
