/* test_datasets.c - the data layouts beyond IDX and the augmentation:
 * - CIFAR-10 binary files built from Fashion-MNIST bytes (padded to 32 x 32,
 *   three different channels) load to exactly those bytes, in DIR and in
 *   DIR/cifar-10-batches-bin; truncated, empty, bad-label and gapped files
 *   fail with one line naming the file;
 * - ImageFolder trees of PNGs (written here with zlib: gray 28 x 28 from
 *   Fashion-MNIST, RGB 32 x 32 from the CIFAR bytes) load to the same bytes
 *   as the IDX / CIFAR originals; mixed sizes, an empty class, a file with
 *   an image's name that is not one and an unknown test class fail naming
 *   the file or folder, a file without an image's name is ignored;
 * - `dptrain train --data DIR` gives the same metrics (loss, accuracies) on
 *   an IDX directory and on the same images as PNGs, and on CIFAR files and
 *   the same images as RGB PNGs (lenet-cifar), 2 devices;
 * - normalisation: values, parsing, errors;
 * - augmentation (the in-memory source's augmented bytes, converted to the
 *   input as a device does): a batch filled whole equals the same batch
 *   filled as 2 and 3 shards (bit for bit), another seed or epoch differs,
 *   every output
 *   equals an independent pad-crop-flip of the image, the draws cover every
 *   offset and flip about half the time, parse errors;
 * - models/resnet18-cifar.cfg and models/lenet-cifar.cfg take 3x32x32,
 *   have the parameter counts PyTorch's networks have, and run forward on a
 *   CIFAR batch.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dptrain/autograd.h"
#include "dptrain/batch_source.h"
#include "dptrain/data.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/tensor.h"
#include "testing.h"


#define N_TRAIN 512
#define N_TEST 256
#define SIDE 28
#define CSIDE 32

/* --- files -------------------------------------------------------------- */
static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static const char *make_dir(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot mkdir %s\n", path);
        exit(1);
    }
    return path;
}


/* A plain IDX file of unsigned bytes. */
static void write_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *data) {
    size_t n = 1;
    uint8_t header[4 + 4 * 3];
    header[0] = header[1] = 0, header[2] = 0x08, header[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) put32(header + 4 + 4 * i, dims[i]), n *= dims[i];
    uint8_t *file = malloc(4 + 4 * (size_t)ndim + n);
    memcpy(file, header, 4 + 4 * (size_t)ndim);
    memcpy(file + 4 + 4 * ndim, data, n);
    write_bytes(path, file, 4 + 4 * (size_t)ndim + n);
    free(file);
}

/* --- the test data ---------------------------------------------------------- */
/* The first n examples of a Fashion-MNIST split, stably sorted by label (the
 * order ImageFolder reads class folders in), as a dataset. */
static dp_dataset_t class_sorted_subset(const char *split, int n) {
    dp_dataset_t full = {0}, out = {0};
    dp_status_t st = dp_dataset_load(DP_DEFAULT_DATA_DIR, split, &full);
    if (st != DP_OK) {
        fprintf(stderr, "cannot load Fashion-MNIST: %s\n", dp_error_message());
        exit(1);
    }
    uint8_t *pixels = malloc((size_t)n * SIDE * SIDE), *labels = malloc((size_t)n);
    int at = 0;
    for (int c = 0; c < 10; c++)
        for (int i = 0; i < n; i++)
            if (full.labels[i] == c) {
                memcpy(pixels + (size_t)at * SIDE * SIDE, full.pixels + (size_t)i * SIDE * SIDE, SIDE * SIDE);
                labels[at++] = (uint8_t)c;
            }
    CHECK(dp_dataset_from_memory(&out, n, 1, SIDE, SIDE, 10, pixels, labels) == DP_OK, "%s", dp_error_message());
    free(pixels);
    free(labels);
    dp_dataset_free(&full);
    return out;
}

/* A 3x32x32 colour version of a 1x28x28 dataset: padded by 2 on each side,
 * red = p, green = 255 - p, blue = p / 2, so a channel mix-up shows. */
static dp_dataset_t colour_version(const dp_dataset_t *gray) {
    const size_t plane = CSIDE * CSIDE;
    uint8_t *pixels = calloc((size_t)gray->count * 3 * plane, 1);
    for (int i = 0; i < gray->count; i++) {
        uint8_t *dst = pixels + (size_t)i * 3 * plane;
        for (int y = 0; y < CSIDE; y++)
            for (int x = 0; x < CSIDE; x++) {
                int sy = y - 2, sx = x - 2;
                uint8_t p = sy >= 0 && sy < SIDE && sx >= 0 && sx < SIDE
                                ? gray->pixels[(size_t)i * SIDE * SIDE + (size_t)sy * SIDE + (size_t)sx]
                                : 0;
                dst[y * CSIDE + x] = p;
                dst[plane + y * CSIDE + x] = (uint8_t)(255 - p);
                dst[2 * plane + y * CSIDE + x] = (uint8_t)(p / 2);
            }
    }
    dp_dataset_t out;
    CHECK(dp_dataset_from_memory(&out, gray->count, 3, CSIDE, CSIDE, 10, pixels, gray->labels) == DP_OK, "%s",
          dp_error_message());
    free(pixels);
    return out;
}

/* Writes examples [first, first + n) as CIFAR records. */
static void write_cifar(const char *path, const dp_dataset_t *ds, int first, int n) {
    const size_t rec = 1 + 3 * CSIDE * CSIDE;
    uint8_t *file = malloc((size_t)n * rec);
    for (int i = 0; i < n; i++) {
        file[(size_t)i * rec] = ds->labels[first + i];
        memcpy(file + (size_t)i * rec + 1, ds->pixels + (size_t)(first + i) * 3 * CSIDE * CSIDE, rec - 1);
    }
    write_bytes(path, file, (size_t)n * rec);
    free(file);
}

static int same_dataset(const dp_dataset_t *a, const dp_dataset_t *b) {
    return a->count == b->count && a->channels == b->channels && a->height == b->height && a->width == b->width &&
           a->num_classes == b->num_classes &&
           memcmp(a->pixels, b->pixels, (size_t)a->count * a->channels * a->height * a->width) == 0 &&
           memcmp(a->labels, b->labels, (size_t)a->count) == 0;
}

static int contains(const char *text, const char *part) { return strstr(text, part) != NULL; }

/* --- CIFAR ------------------------------------------------------------------- */
static void test_cifar(const dp_dataset_t *train, const dp_dataset_t *test, const char *dir) {
    char path[1400];
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    write_cifar(path, train, 0, 200);
    snprintf(path, sizeof path, "%s/data_batch_2.bin", dir);
    write_cifar(path, train, 200, train->count - 200);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    write_cifar(path, test, 0, test->count);

    dp_data_layout_t layout = DP_DATA_IDX;
    CHECK(dp_data_detect_layout(dir, &layout) == DP_OK && layout == DP_DATA_CIFAR, "layout %d", (int)layout);
    dp_dataset_t ds = {0};
    CHECK(dp_dataset_load(dir, "train", &ds) == DP_OK, "%s", dp_error_message());
    CHECK(same_dataset(&ds, train), "CIFAR train split: %d examples %dx%dx%d, the bytes as written", ds.count,
          ds.channels, ds.height, ds.width);
    dp_dataset_free(&ds);
    CHECK(dp_dataset_load(dir, "t10k", &ds) == DP_OK, "%s", dp_error_message());
    CHECK(same_dataset(&ds, test), "CIFAR test split as written");
    dp_dataset_free(&ds);

    /* the archive's own folder name, one level down */
    char nested[700], inner[800];
    snprintf(nested, sizeof nested, "%s_nested", dir);
    make_dir(nested);
    snprintf(inner, sizeof inner, "%s/cifar-10-batches-bin", nested);
    make_dir(inner);
    snprintf(path, sizeof path, "%s/test_batch.bin", inner);
    write_cifar(path, test, 0, 10);
    snprintf(path, sizeof path, "%s/data_batch_1.bin", inner);
    write_cifar(path, train, 0, 10);
    CHECK(dp_dataset_load(nested, "test", &ds) == DP_OK && ds.count == 10 &&
              memcmp(ds.pixels, test->pixels, 10 * 3 * CSIDE * CSIDE) == 0,
          "nested CIFAR folder: %s", dp_error_message());
    dp_dataset_free(&ds);

    /* a gap: data_batch_1 and data_batch_3 */
    snprintf(path, sizeof path, "%s/data_batch_3.bin", inner);
    write_cifar(path, train, 0, 10);
    CHECK(dp_dataset_load(nested, "train", &ds) != DP_OK && contains(dp_error_message(), "data_batch_2.bin is missing"),
          "gap named: %s", dp_error_message());
    CHECK(ds.pixels == NULL && ds.count == 0, "nothing left on failure");
    remove(path);

    /* truncated by one byte */
    snprintf(path, sizeof path, "%s/data_batch_1.bin", inner);
    size_t rec = 1 + 3 * CSIDE * CSIDE;
    uint8_t *bytes = malloc(3 * rec);
    for (size_t i = 0; i < 3 * rec; i++) bytes[i] = (uint8_t)(i % 7);
    write_bytes(path, bytes, 3 * rec - 1);
    CHECK(dp_dataset_load(nested, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "truncated") && !strchr(dp_error_message(), '\n'),
          "truncated file named on one line: %s", dp_error_message());
    /* a label of 10 in the second record */
    bytes[rec] = 10;
    write_bytes(path, bytes, 3 * rec);
    CHECK(dp_dataset_load(nested, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "label 10 of record 1"),
          "bad label named: %s", dp_error_message());
    /* empty */
    write_bytes(path, bytes, 0);
    CHECK(dp_dataset_load(nested, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "empty"),
          "empty file named: %s", dp_error_message());
    free(bytes);
    CHECK(dp_dataset_load(nested, "validation", &ds) != DP_OK && contains(dp_error_message(), "validation"),
          "unknown split: %s", dp_error_message());
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(dp_dataset_load(path, "train", &ds) != DP_OK && contains(dp_error_message(), path),
          "missing directory named: %s", dp_error_message());
}

/* --- ImageFolder --------------------------------------------------------------- */
/* DIR/SPLIT/classK/NNNNN.png for every example of ds. */
static void write_image_folder(const char *dir, const char *split, const dp_dataset_t *ds) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, split);
    make_dir(path);
    const int C = ds->channels, H = ds->height, W = ds->width;
    uint8_t *hwc = malloc((size_t)C * H * W);
    for (int i = 0; i < ds->count; i++) {
        snprintf(path, sizeof path, "%s/%s/class%d", dir, split, ds->labels[i]);
        make_dir(path);
        const uint8_t *chw = ds->pixels + (size_t)i * C * H * W;
        for (int c = 0; c < C; c++)
            for (int j = 0; j < H * W; j++) hwc[(size_t)j * C + c] = chw[(size_t)c * H * W + j];
        snprintf(path, sizeof path, "%s/%s/class%d/%05d.png", dir, split, ds->labels[i], i);
        testing_write_png(path, C, H, W, hwc);
    }
    free(hwc);
}

static int progress_calls, progress_last, progress_total;
static void count_progress(void *ctx, int done, int total) {
    (void)ctx;
    progress_calls++;
    progress_last = done;
    progress_total = total;
}

static void test_image_folder(const dp_dataset_t *train, const dp_dataset_t *test, const dp_dataset_t *ctrain,
                              const dp_dataset_t *ctest, const char *gray_dir, const char *rgb_dir) {
    write_image_folder(gray_dir, "train", train);
    write_image_folder(gray_dir, "test", test);
    write_image_folder(rgb_dir, "train", ctrain);
    write_image_folder(rgb_dir, "test", ctest);
    dp_data_layout_t layout = DP_DATA_IDX;
    CHECK(dp_data_detect_layout(gray_dir, &layout) == DP_OK && layout == DP_DATA_IMAGE_FOLDER, "layout %d",
          (int)layout);
    dp_dataset_t ds = {0};
    dp_dataset_load_options_t options = {.progress = count_progress};
    CHECK(dp_dataset_load_with(gray_dir, "train", &options, &ds) == DP_OK, "%s", dp_error_message());
    CHECK(same_dataset(&ds, train), "gray PNG folder = the IDX bytes (%d examples %dx%dx%d)", ds.count, ds.channels,
          ds.height, ds.width);
    CHECK(progress_calls >= 2 && progress_last == train->count && progress_total == train->count,
          "progress reported: %d calls, last %d of %d", progress_calls, progress_last, progress_total);
    CHECK(ds.class_names && ds.num_classes == 10 && strcmp(ds.class_names[3], "class3") == 0, "class names");
    dp_dataset_free(&ds);
    CHECK(dp_dataset_load(gray_dir, "test", &ds) == DP_OK && same_dataset(&ds, test), "gray test split: %s",
          dp_error_message());
    dp_dataset_free(&ds);
    CHECK(dp_dataset_load(rgb_dir, "train", &ds) == DP_OK && same_dataset(&ds, ctrain),
          "RGB PNG folder = the CIFAR bytes: %s", dp_error_message());
    dp_dataset_free(&ds);

    /* bad trees: each a fresh copy of a tiny valid one */
    char dir[700], path[900];
    snprintf(dir, sizeof dir, "%s_bad", gray_dir);
    make_dir(dir);
    dp_dataset_t few = {.count = 4, .channels = 1, .height = SIDE, .width = SIDE, .num_classes = 10,
                        .pixels = train->pixels, .labels = train->labels};
    write_image_folder(dir, "train", &few);
    snprintf(path, sizeof path, "%s/test", dir); /* a test split of its own: the training split is all 4 */
    make_dir(path);
    CHECK(dp_dataset_load(dir, "train", &ds) == DP_OK && ds.count == 4 && ds.num_classes == 1,
          "a one-class tree loads: %s", dp_error_message());
    dp_dataset_free(&ds);
    snprintf(path, sizeof path, "%s/train/class0/.hidden", dir);
    write_bytes(path, "x", 1);
    CHECK(dp_dataset_load(dir, "train", &ds) == DP_OK && ds.count == 4, "dot files skipped: %s", dp_error_message());
    dp_dataset_free(&ds);
    snprintf(path, sizeof path, "%s/train/class0/notes.txt", dir); /* not an image name: ignored, as torchvision does */
    write_bytes(path, "not an image\n", 13);
    CHECK(dp_dataset_load(dir, "train", &ds) == DP_OK && ds.count == 4, "notes.txt ignored: %s", dp_error_message());
    dp_dataset_free(&ds);
    remove(path);
    snprintf(path, sizeof path, "%s/train/class0/notes.png", dir);
    write_bytes(path, "not an image\n", 13);
    CHECK(dp_dataset_load(dir, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "1 file cannot be read as an image"),
          "non-image file named: %s", dp_error_message());
    remove(path);
    uint8_t big[30 * 30] = {0};
    snprintf(path, sizeof path, "%s/train/class0/99999.png", dir);
    testing_write_png(path, 1, 30, 30, big);
    CHECK(dp_dataset_load(dir, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "1x30x30") && contains(dp_error_message(), "expected 1x28x28"),
          "mixed sizes named: %s", dp_error_message());
    remove(path);
    snprintf(path, sizeof path, "%s/train/class7", dir);
    make_dir(path);
    CHECK(dp_dataset_load(dir, "train", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "empty class"),
          "empty class named: %s", dp_error_message());
    rmdir(path);
    snprintf(path, sizeof path, "%s/test", dir);
    make_dir(path);
    snprintf(path, sizeof path, "%s/test/dog", dir);
    make_dir(path);
    CHECK(dp_dataset_load(dir, "test", &ds) != DP_OK && contains(dp_error_message(), path) &&
              contains(dp_error_message(), "is not a class of the training split"),
          "unknown test class named: %s", dp_error_message());
    CHECK(ds.pixels == NULL && ds.class_names == NULL, "nothing left on failure");
}

/* --- the command line: same numbers on every layout ------------------------------- */
/* The metrics file without its timing fields (epoch_sec, images_per_sec). */
static char *metrics_without_timing(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *out = malloc(n + 1), *o = out;
    for (const char *p = text; *p;) {
        if (strncmp(p, "\"epoch_sec\"", 11) == 0 || strncmp(p, "\"images_per_sec\"", 16) == 0) {
            while (*p && *p != ',' && *p != '}') p++;
            if (*p == ',') p++;
            continue;
        }
        *o++ = *p++;
    }
    *o = '\0';
    return out;
}

static char *train_metrics(const char *bin, const char *model, const char *data, const char *name) {
    char cmd[2048];
    const char *metrics = testing_tmp_file(name);
    snprintf(cmd, sizeof cmd,
             "'%s' train --model '%s' --data '%s' --epochs 2 --batch-size 64 --lr 0.1 --seed 5 --devices 2 "
             "--threads-per-device 1 --quiet --metrics '%s'",
             bin, model, data, metrics);
    int rc = system(cmd);
    CHECK(rc == 0, "%s failed (%d)", cmd, rc);
    return metrics_without_timing(metrics);
}

static void test_cli_same_numbers(const dp_dataset_t *train, const dp_dataset_t *test, const char *idx_dir,
                                  const char *gray_dir, const char *cifar_dir, const char *rgb_dir) {
    const char *bin = getenv("DPTRAIN_BIN");
    if (!bin) {
        printf("note: DPTRAIN_BIN not set; command-line checks skipped\n");
        return;
    }
    char path[700];
    uint32_t dims[3] = {(uint32_t)train->count, SIDE, SIDE};
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", idx_dir);
    write_idx(path, 3, dims, train->pixels);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", idx_dir);
    write_idx(path, 1, dims, train->labels);
    dims[0] = (uint32_t)test->count;
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", idx_dir);
    write_idx(path, 3, dims, test->pixels);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", idx_dir);
    write_idx(path, 1, dims, test->labels);

    char lenet_cifar[600];
    snprintf(lenet_cifar, sizeof lenet_cifar, "%s", testing_path("../models/lenet-cifar.cfg"));
    char *cifar = train_metrics(bin, lenet_cifar, cifar_dir, "cifar.jsonl");
    CHECK(cifar && contains(cifar, "\"epoch\": 2") && contains(cifar, "train_loss"), "CIFAR run's metrics: %s",
          cifar ? cifar : "(none)");
    if (cifar) {
        double first = 0.0, second = 0.0;
        const char *p = strstr(cifar, "\"train_loss\": ");
        if (p) first = atof(p + 14), p = strstr(p + 1, "\"train_loss\": ");
        if (p) second = atof(p + 14);
        CHECK(first > 0.0 && second > 0.0 && second < first && isfinite(first),
              "lenet-cifar learns on CIFAR files: loss %g then %g", first, second);
    }
    char *idx = train_metrics(bin, "lenet", idx_dir, "idx.jsonl");
    char *gray = train_metrics(bin, "lenet", gray_dir, "gray.jsonl");
    CHECK(idx && gray && strcmp(idx, gray) == 0, "IDX and PNG folder train to the same numbers:\n%s\n%s",
          idx ? idx : "(none)", gray ? gray : "(none)");
    char *rgb = train_metrics(bin, lenet_cifar, rgb_dir, "rgb.jsonl");
    CHECK(cifar && rgb && strcmp(cifar, rgb) == 0, "CIFAR and RGB PNG folder train to the same numbers:\n%s\n%s",
          cifar ? cifar : "(none)", rgb ? rgb : "(none)");
    free(idx);
    free(gray);
    free(rgb);
    free(cifar);
}

/* --- normalisation ------------------------------------------------------------------ */
static void test_normalize(const dp_dataset_t *ctrain) {
    dp_dataset_t ds;
    CHECK(dp_dataset_from_memory(&ds, 4, 3, CSIDE, CSIDE, 10, ctrain->pixels, ctrain->labels) == DP_OK, "copy");
    int n = 0;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
    CHECK(dp_normalize_parse("0.5,0.4,0.3,0.25,0.2,0.1", &n, mean, std) == DP_OK && n == 3 && mean[1] == 0.4f &&
              std[2] == 0.1f,
          "parse 3 channels: %s", dp_error_message());
    CHECK(dp_dataset_set_normalize(&ds, n, mean, std) == DP_OK, "%s", dp_error_message());
    const size_t example = 3 * CSIDE * CSIDE;
    float *x = malloc(sizeof(float) * 4 * example);
    int32_t y[4];
    int indices[4] = {3, 0, 2, 1};
    dp_dataset_fill(&ds, indices, 4, x, y);
    double worst = 0.0;
    for (int i = 0; i < 4; i++)
        for (size_t j = 0; j < example; j++) {
            int c = (int)(j / (CSIDE * CSIDE));
            double want = ((double)ds.pixels[(size_t)indices[i] * example + j] / 255.0 - mean[c]) / std[c];
            double diff = fabs(x[(size_t)i * example + j] - want);
            if (diff > worst) worst = diff;
        }
    CHECK(worst < 1e-5 && y[0] == ds.labels[3], "normalised = (p/255 - mean[c]) / std[c], worst %g", worst);
    CHECK(dp_normalize_parse("0.5,0.25", &n, mean, std) == DP_OK && n == 1, "one pair");
    CHECK(dp_dataset_set_normalize(&ds, n, mean, std) == DP_OK && ds.mean[2] == 0.5f && ds.std[1] == 0.25f,
          "one pair for every channel");
    CHECK(dp_normalize_parse("0.5", &n, mean, std) != DP_OK && contains(dp_error_message(), "0.5"), "odd count: %s",
          dp_error_message());
    CHECK(dp_normalize_parse("0.5,0", &n, mean, std) != DP_OK && contains(dp_error_message(), "std"),
          "std 0: %s", dp_error_message());
    CHECK(dp_normalize_parse("0.5,x", &n, mean, std) != DP_OK && contains(dp_error_message(), "x"), "bad number: %s",
          dp_error_message());
    CHECK(dp_normalize_parse("0.1,0.2,0.3,0.4", &n, mean, std) == DP_OK && n == 2 &&
              dp_dataset_set_normalize(&ds, n, mean, std) != DP_OK && contains(dp_error_message(), "3-channel"),
          "2 pairs for 3 channels: %s", dp_error_message());
    free(x);
    dp_dataset_free(&ds);
}

/* --- augmentation ---------------------------------------------------------------------- */
/* The reference: pad the byte image with P zeros, crop H x W at (dy, dx),
 * flip, scale; written the plain way (explicit padded buffer). */
static void reference_augment(const dp_dataset_t *ds, int index, int P, int dy, int dx, int flip, float *out) {
    const int C = ds->channels, H = ds->height, W = ds->width, PH = H + 2 * P, PW = W + 2 * P;
    uint8_t *padded = calloc((size_t)C * PH * PW, 1);
    for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++)
                padded[((size_t)c * PH + h + P) * PW + w + P] =
                    ds->pixels[(((size_t)index * C + c) * H + h) * W + w];
    for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                uint8_t cropped_flipped = padded[((size_t)c * PH + h + dy) * PW + (flip ? W - 1 - w : w) + dx];
                out[((size_t)c * H + h) * W + w] = (float)cropped_flipped * (1.0f / 255.0f); /* as dp_dataset_fill */
            }
    free(padded);
}

/* What a training step's devices get for examples indices[0..n) at
 * positions first_position.. of `epoch`: the in-memory source's augmented
 * bytes (batch_source.h), then the conversion to the input
 * (dp_pixels_to_input with the dataset's normalisation). */
static void fill_augmented(const dp_dataset_t *ds, const dp_augment_t *aug, uint64_t seed, int epoch,
                           int64_t first_position, const int *indices, int n, float *x, int32_t *y) {
    dp_batch_source_t *src = NULL;
    const size_t example = (size_t)ds->channels * ds->height * ds->width;
    uint8_t *pixels = malloc(example * (size_t)n);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)n);
    DP_ASSERT(pixels && labels && dp_memory_source_new((dp_dataset_t *)ds, aug, 0, &src) == DP_OK);
    const dp_fill_keys_t keys = {.seed = seed, .epoch = epoch, .first_position = first_position, .training = 1};
    dp_batch_t b;
    DP_ASSERT(dp_batch_source_fill_batch(src, indices, n, &keys, pixels, labels, &b) == DP_OK);
    dp_pixels_to_input(b.pixels, n, b.channels, (size_t)b.height * b.width, b.normalize, x);
    if (y) memcpy(y, labels, sizeof(int32_t) * (size_t)n);
    dp_batch_source_free(src);
    free(pixels);
    free(labels);
}

static void test_augment(const dp_dataset_t *ctrain) {
    dp_augment_t aug;
    CHECK(dp_augment_parse("crop:4,flip", &aug) == DP_OK && aug.crop_padding == 4 && aug.flip == 1, "parse: %s",
          dp_error_message());
    CHECK(dp_augment_parse("flip", &aug) == DP_OK && aug.crop_padding == 0 && aug.flip == 1, "flip only");
    CHECK(dp_augment_parse("none", &aug) == DP_OK && !aug.crop_padding && !aug.flip, "none");
    const char *bad[] = {"crop:0", "crop:-1", "crop:x", "crop:4,", "flop", "flip,flip", "crop:65", "", "crop:4x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(dp_augment_parse(bad[i], &aug) != DP_OK && dp_error_message()[0], "'%s' refused: %s", bad[i],
              dp_error_message());

    CHECK(dp_augment_parse("crop:4,flip", &aug) == DP_OK, "parse");
    const int B = 10, step = 7;
    const size_t example = 3 * CSIDE * CSIDE;
    int indices[10];
    for (int i = 0; i < B; i++) indices[i] = (i * 37 + 11) % ctrain->count;
    float *whole = malloc(sizeof(float) * B * example), *split = malloc(sizeof(float) * B * example);
    float *ref = malloc(sizeof(float) * example);
    int32_t y_whole[10], y_split[10];
    fill_augmented(ctrain, &aug, 42, 3, (int64_t)step * B, indices, B, whole, y_whole);
    for (int k = 2; k <= 3; k++) {
        memset(split, 0xff, sizeof(float) * B * example);
        for (int d = 0; d < k; d++) {
            int start, count;
            dp_split_batch(B, k, d, &start, &count);
            fill_augmented(ctrain, &aug, 42, 3, (int64_t)step * B + start, indices + start, count,
                                      split + (size_t)start * example, y_split + start);
        }
        CHECK(memcmp(whole, split, sizeof(float) * B * example) == 0 &&
                  memcmp(y_whole, y_split, sizeof y_whole) == 0,
              "batch filled whole = filled as %d shards, bit for bit", k);
    }
    fill_augmented(ctrain, &aug, 43, 3, (int64_t)step * B, indices, B, split, y_split);
    CHECK(memcmp(whole, split, sizeof(float) * B * example) != 0, "another seed, other crops");
    fill_augmented(ctrain, &aug, 42, 4, (int64_t)step * B, indices, B, split, y_split);
    CHECK(memcmp(whole, split, sizeof(float) * B * example) != 0, "another epoch, other crops");

    /* every example equals the plain pad-crop-flip with its draws */
    int mismatches = 0, flips = 0, seen[9] = {0}, corner = -1, centre_flip = -1;
    for (int i = 0; i < B; i++) {
        int dy, dx, flip;
        dp_augment_draw(&aug, 42, 3, (int64_t)step * B + i, &dy, &dx, &flip);
        reference_augment(ctrain, indices[i], 4, dy, dx, flip, ref);
        mismatches += memcmp(ref, whole + (size_t)i * example, sizeof(float) * example) != 0;
    }
    CHECK(mismatches == 0, "%d of %d examples differ from the reference pad-crop-flip", mismatches, B);
    /* the draws: every offset 0..8 appears, flips about half */
    for (int64_t q = 0; q < 4000; q++) {
        int dy, dx, flip;
        dp_augment_draw(&aug, 9, 0, q, &dy, &dx, &flip);
        if (dy < 0 || dy > 8 || dx < 0 || dx > 8) {
            seen[0] = -100000;
            break;
        }
        seen[dy]++, seen[dx]++;
        flips += flip;
        if (dy == 0 && dx == 0 && !flip && corner < 0) corner = (int)q;
        if (dy == 4 && dx == 4 && flip && centre_flip < 0) centre_flip = (int)q;
    }
    int fewest = 1 << 30;
    for (int i = 0; i < 9; i++) fewest = seen[i] < fewest ? seen[i] : fewest;
    CHECK(fewest > 8000 / 9 * 8 / 10, "every offset 0..8 drawn, the rarest %d times of 8000", fewest);
    CHECK(flips > 1800 && flips < 2200, "flip drawn %d times of 4000", flips);

    /* known images: no shift + no flip = the image moved down-right by 4;
     * centred + flip = the mirror image */
    CHECK(corner >= 0 && centre_flip >= 0, "the two known draws occur");
    if (corner >= 0 && centre_flip >= 0) {
        int index = 5;
        float *out = malloc(sizeof(float) * example);
        fill_augmented(ctrain, &aug, 9, 0, corner, &index, 1, out, NULL);
        int wrong = 0;
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < CSIDE; h++)
                for (int w = 0; w < CSIDE; w++) {
                    float want = h < 4 || w < 4 ? 0.0f
                                                : ctrain->pixels[(size_t)index * example + (size_t)c * 1024 +
                                                                 (size_t)(h - 4) * 32 + (size_t)(w - 4)] *
                                                      (1.0f / 255.0f);
                    wrong += out[(size_t)c * 1024 + (size_t)h * 32 + (size_t)w] != want;
                }
        CHECK(wrong == 0, "crop at (0, 0) shifts by the padding: %d wrong pixels", wrong);
        fill_augmented(ctrain, &aug, 9, 0, centre_flip, &index, 1, out, NULL);
        wrong = 0;
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < CSIDE; h++)
                for (int w = 0; w < CSIDE; w++)
                    wrong += out[(size_t)c * 1024 + (size_t)h * 32 + (size_t)w] !=
                             ctrain->pixels[(size_t)index * example + (size_t)c * 1024 + (size_t)h * 32 +
                                            (size_t)(31 - w)] *
                                 (1.0f / 255.0f);
        CHECK(wrong == 0, "centred crop + flip is the mirror image: %d wrong pixels", wrong);
        /* with normalisation, the padding is the normalised 0 */
        dp_dataset_t norm;
        dp_dataset_from_memory(&norm, ctrain->count, 3, CSIDE, CSIDE, 10, ctrain->pixels, ctrain->labels);
        float mean[1] = {0.5f}, std[1] = {0.25f};
        dp_dataset_set_normalize(&norm, 1, mean, std);
        fill_augmented(&norm, &aug, 9, 0, corner, &index, 1, out, NULL);
        CHECK(out[0] == -2.0f && out[4 * 32 + 4] == ((float)norm.pixels[(size_t)index * example] * (1.0f / 255.0f) - 0.5f) / 0.25f,
              "normalised padding %g", (double)out[0]);
        dp_dataset_free(&norm);
        free(out);
    }
    /* padding larger than the image, odd sizes, 1 and 3 channels: every
     * draw against the reference */
    for (int channels = 1; channels <= 3; channels += 2) {
        uint8_t tiny_pixels[2 * 3 * 4 * 5], tiny_labels[2] = {1, 2};
        for (int i = 0; i < (int)sizeof tiny_pixels; i++) tiny_pixels[i] = (uint8_t)(7 + 13 * i);
        dp_dataset_t tiny;
        dp_dataset_from_memory(&tiny, 2, channels, 4, 5, 3, tiny_pixels, tiny_labels);
        dp_augment_t wide = {.crop_padding = 6, .flip = 1};
        float got[3 * 20], want[3 * 20];
        int differing = 0;
        for (int64_t q = 0; q < 300; q++) {
            int index = (int)(q % 2), dy, dx, flip;
            fill_augmented(&tiny, &wide, 1, 2, q, &index, 1, got, NULL);
            dp_augment_draw(&wide, 1, 2, q, &dy, &dx, &flip);
            reference_augment(&tiny, index, 6, dy, dx, flip, want);
            differing += memcmp(got, want, sizeof(float) * (size_t)channels * 20) != 0;
        }
        CHECK(differing == 0, "%d-channel 4x5 images, padding 6: %d of 300 draws differ from the reference", channels, differing);
        dp_dataset_free(&tiny);
    }
    /* no augmentation = dp_dataset_fill */
    dp_augment_t none = {0};
    fill_augmented(ctrain, &none, 42, 3, 0, indices, B, whole, y_whole);
    dp_dataset_fill(ctrain, indices, B, split, y_split);
    CHECK(memcmp(whole, split, sizeof(float) * B * example) == 0, "no augmentation = dp_dataset_fill");
    free(whole);
    free(split);
    free(ref);
}

/* --- the loader's position inside an epoch -------------------------------------- */
static void test_loader_seek(void) {
    dp_loader_t *a = NULL, *b = NULL;
    CHECK(dp_loader_new(1000, 64, 1, 11, &a) == DP_OK && dp_loader_new(1000, 64, 1, 11, &b) == DP_OK, "loaders");
    if (!a || !b) return;
    dp_loader_start_epoch(a, 3);
    const int *ia, *ib;
    for (int s = 0; s < 5; s++) dp_loader_next(a, &ia);
    CHECK(dp_loader_step(a) == 5, "step 5 after five batches, found %d", dp_loader_step(a));
    dp_loader_start_epoch(b, 3);
    CHECK(dp_loader_step(b) == 0 && dp_loader_seek(b, 5) == DP_OK && dp_loader_step(b) == 5, "seek to step 5");
    int same = 1, na, nb;
    while ((na = dp_loader_next(a, &ia)) > 0) {
        nb = dp_loader_next(b, &ib);
        same &= na == nb && memcmp(ia, ib, sizeof(int) * (size_t)na) == 0;
    }
    CHECK(same && dp_loader_next(b, &ib) == 0, "a seeked loader hands out the rest of the epoch as an uninterrupted one");
    CHECK(dp_loader_step(a) == 16, "16 batches of 64 (the last short): step %d at the end", dp_loader_step(a));
    CHECK(dp_loader_seek(b, 16) == DP_OK && dp_loader_next(b, &ib) == 0, "seek to the end");
    CHECK(dp_loader_seek(b, 17) != DP_OK && contains(dp_error_message(), "step 17"), "seek past the end: %s",
          dp_error_message());
    CHECK(dp_loader_seek(b, -1) != DP_OK, "negative step refused");
    dp_loader_free(a);
    dp_loader_free(b);
}

/* --- CIFAR-sized models ---------------------------------------------------------------- */
static void test_cifar_model(const char *file, size_t trainable, const dp_dataset_t *ctrain) {
    dp_model_t *m = NULL;
    CHECK(dp_model_load_file(testing_path(file), &m) == DP_OK, "%s: %s", file, dp_error_message());
    if (!m) return;
    int c, h, w;
    dp_model_input_shape(m, &c, &h, &w);
    CHECK(c == 3 && h == 32 && w == 32, "%s takes %dx%dx%d", file, c, h, w);
    CHECK(dp_model_num_trainable(m) == trainable, "%s: %zu trainable parameters, expected %zu", file,
          dp_model_num_trainable(m), trainable);
    CHECK(dp_model_num_outputs(m) == 10, "%s: 10 classes", file);
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 1);
    dp_model_init_params(m, params, &rng);
    int indices[2] = {0, 1}, shape[4] = {2, 3, 32, 32};
    dp_arena_t *arena = dp_arena_new(1 << 20);
    dp_tape_t *tape = dp_tape_new(arena);
    dp_tensor_t *x = dp_tape_tensor(tape, 4, shape), *logits = NULL;
    x->data = malloc(sizeof(float) * 2 * 3 * 32 * 32);
    dp_dataset_fill(ctrain, indices, 2, x->data, NULL);
    CHECK(dp_model_forward(m, tape, params, NULL, x, &logits) == DP_OK, "%s forward: %s", file, dp_error_message());
    if (logits) {
        int finite = 1;
        for (int i = 0; i < 20; i++) finite &= isfinite(logits->data[i]);
        CHECK(logits->ndim == 2 && logits->shape[0] == 2 && logits->shape[1] == 10 && finite,
              "%s: logits (2, 10), finite", file);
    }
    free(x->data);
    dp_tape_free(tape);
    dp_arena_free(arena);
    free(params);
    dp_model_free(m);
}

int main(void) {
    dp_dataset_t train = class_sorted_subset("train", N_TRAIN), test = class_sorted_subset("t10k", N_TEST);
    dp_dataset_t ctrain = colour_version(&train), ctest = colour_version(&test);
    char cifar_dir[600], gray_dir[600], rgb_dir[600], idx_dir[600];
    snprintf(cifar_dir, sizeof cifar_dir, "%s", make_dir(testing_tmp_file("cifar")));
    snprintf(gray_dir, sizeof gray_dir, "%s", make_dir(testing_tmp_file("gray")));
    snprintf(rgb_dir, sizeof rgb_dir, "%s", make_dir(testing_tmp_file("rgb")));
    snprintf(idx_dir, sizeof idx_dir, "%s", make_dir(testing_tmp_file("idx")));

    test_cifar(&ctrain, &ctest, cifar_dir);
    test_image_folder(&train, &test, &ctrain, &ctest, gray_dir, rgb_dir);
    test_normalize(&ctrain);
    test_augment(&ctrain);
    test_loader_seek();
    test_cifar_model("../models/lenet-cifar.cfg", 62006, &ctrain);
    test_cifar_model("../models/resnet18-cifar.cfg", 11175818 + 2 * 64 * 9, &ctrain);
    test_cli_same_numbers(&train, &test, idx_dir, gray_dir, cifar_dir, rgb_dir);

    dp_dataset_free(&train);
    dp_dataset_free(&test);
    dp_dataset_free(&ctrain);
    dp_dataset_free(&ctest);
    return testing_finish("test_datasets");
}
