/* dataset.c - datasets of byte images and labels: detecting a data
 * directory's layout and loading a split (IDX here; CIFAR in cifar.c,
 * ImageFolder in image_folder.c), building one from memory, truncating,
 * per-channel normalisation, and filling a batch as float (x = pixels / 255,
 * normalised when asked) and int32 labels.
 *
 * A split SPLIT in DIR is DIR/SPLIT-images-idx3-ubyte and
 * DIR/SPLIT-labels-idx1-ubyte, each gzip-compressed (.gz) or plain. When both
 * forms exist the .gz file is used: it is the form datasets are shipped in
 * (Debian's dataset-fashion-mnist, the original MNIST site), whereas a plain
 * copy next to it may be a stale or half-finished decompression.
 */
#include "dptrain/data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "dptrain/image_folder.h"
#include "dptrain/io.h"

#define DATASET_NUM_CLASSES 10

/* Picks DIR/SPLIT-KIND.gz, else DIR/SPLIT-KIND; fails naming both paths
 * when neither exists. */
static dp_status_t find_split_file(const char *dir, const char *split, const char *kind,
                                   char *path, size_t size) {
    char plain[4096];
    int n = snprintf(plain, sizeof plain, "%s/%s-%s", dir, split, kind);
    if (n < 0 || (size_t)n + 4 > sizeof plain || (size_t)n + 4 > size)
        return dp_fail(DP_ERR_ARG, "data directory path too long: %s", dir);
    struct stat st;
    snprintf(path, size, "%s.gz", plain);
    if (stat(path, &st) == 0) return DP_OK;
    int gz_errno = errno;
    snprintf(path, size, "%s", plain);
    if (stat(path, &st) == 0) return DP_OK;
    int plain_errno = errno;
    if (gz_errno == plain_errno)
        return dp_fail(DP_ERR_IO, "%s: no %s file for split '%s': tried %s.gz and %s (%s)", dir,
                       kind, split, plain, plain, strerror(plain_errno));
    return dp_fail(DP_ERR_IO, "%s: no %s file for split '%s': tried %s.gz (%s) and %s (%s)", dir,
                   kind, split, plain, strerror(gz_errno), plain, strerror(plain_errno));
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Any of the four IDX files, .gz or plain. */
static int has_idx_file(const char *dir) {
    static const char *const names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                        "t10k-labels-idx1-ubyte"};
    char path[4200];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (is_file(path)) return 1;
        snprintf(path, sizeof path, "%s/%s.gz", dir, names[i]);
        if (is_file(path)) return 1;
    }
    return 0;
}

/* A folder in `dir` whose name does not start with '.' (a class folder). */
static int has_subfolder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char path[4200];
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        found = is_dir(path);
    }
    closedir(d);
    return found;
}

/* CIFAR's files in `dir` itself: writes dir to `where`. */
static int has_cifar_files(const char *dir, char *where, size_t size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    int found = is_file(path);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    found = found || is_file(path);
    if (found) snprintf(where, size, "%s", dir);
    return found;
}

/* Detects the layout; for CIFAR `where` gets the folder holding the files. */
static dp_status_t detect_layout(const char *dir, dp_data_layout_t *out, char *where, size_t size) {
    if (strlen(dir) > 4000) return dp_fail(DP_ERR_ARG, "data directory path too long: %.64s...", dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return dp_fail(DP_ERR_IO, "%s: cannot open the data directory (%s)", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode) && dp_image_folder_is_list(dir)) { /* an image list, its test split held out */
        *out = DP_DATA_IMAGE_FOLDER;
        return DP_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return dp_fail(DP_ERR_IO, "%s: is not a data directory (nor an image list: a .txt or .csv file)", dir);
    if (*dp_image_folder_train_split(dir)) {
        *out = DP_DATA_IMAGE_FOLDER;
        return DP_OK;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/cifar-10-batches-bin", dir);
    if (has_cifar_files(dir, where, size) || (is_dir(path) && has_cifar_files(path, where, size))) {
        *out = DP_DATA_CIFAR;
        return DP_OK;
    }
    *out = DP_DATA_IDX;
    if (has_idx_file(dir)) return DP_OK; /* the loader names a missing one */
    const char *test_split = dp_image_folder_test_split(dir);
    if (test_split)
        return dp_fail(DP_ERR_FORMAT, "%s: has a %s folder but no train folder (an image folder is DIR/train/CLASS/... "
                       "beside DIR/test/CLASS/... or DIR/val/CLASS/..., or class folders DIR/CLASS/... alone)", dir,
                       test_split);
    if (has_subfolder(dir)) {
        *out = DP_DATA_IMAGE_FOLDER; /* class folders in DIR, the test split held out */
        return DP_OK;
    }
    return dp_fail(DP_ERR_FORMAT, "%s: no data found: expected class folders of images (DIR/CLASS/IMAGE, or DIR/train/"
                   "CLASS/... and DIR/test/CLASS/...), the IDX files of Fashion-MNIST or MNIST, or CIFAR-10's binary "
                   "batches (docs/data.md)", dir);
}

dp_status_t dp_data_detect_layout(const char *dir, dp_data_layout_t *out) {
    char where[4200];
    return detect_layout(dir, out, where, sizeof where);
}

const char *dp_data_layout_name(dp_data_layout_t layout) {
    switch (layout) {
    case DP_DATA_IDX: return "IDX";
    case DP_DATA_IMAGE_FOLDER: return "ImageFolder";
    case DP_DATA_CIFAR: return "CIFAR-10 binary";
    }
    return "?";
}

/* A terminal progress bar for dp_dataset_load. */
static void progress_bar(void *ctx, int done, int total) {
    dp_progress_t *bar = ctx;
    if (done == 0) dp_progress_init(bar, stderr, total);
    dp_progress_update(bar, done, 0.0);
    if (done == total) dp_progress_finish(bar);
}

dp_status_t dp_dataset_load(const char *dir, const char *split, dp_dataset_t *out) {
    dp_progress_t bar;
    dp_dataset_load_options_t options = {.progress = progress_bar, .progress_ctx = &bar};
    return dp_dataset_load_with(dir, split, &options, out);
}

static dp_status_t load_idx(const char *dir, const char *split, dp_dataset_t *out);

dp_status_t dp_dataset_load_with(const char *dir, const char *split,
                                 const dp_dataset_load_options_t *options, dp_dataset_t *out) {
    memset(out, 0, sizeof *out);
    if (!dir || !split)
        return dp_fail(DP_ERR_ARG, "dataset: no %s given (NULL)", !dir ? "data directory" : "split (train or test)");
    int test;
    if (strcmp(split, "train") == 0) test = 0;
    else if (strcmp(split, "test") == 0 || strcmp(split, "t10k") == 0) test = 1;
    else return dp_fail(DP_ERR_ARG, "dataset split '%s' is not train or test", split);
    dp_data_layout_t layout = DP_DATA_IDX;
    char where[4200];
    DP_TRY(detect_layout(dir, &layout, where, sizeof where));
    static const dp_dataset_load_options_t none = {0};
    switch (layout) {
    case DP_DATA_IMAGE_FOLDER:
        return dp_data_load_image_folder(dir, test, options ? options : &none, out);
    case DP_DATA_CIFAR: return dp_data_load_cifar(where, test, out);
    case DP_DATA_IDX: break;
    }
    return load_idx(dir, test ? "t10k" : "train", out);
}

static dp_status_t load_idx(const char *dir, const char *split, dp_dataset_t *out) {
    char images_path[4200], labels_path[4200];
    DP_TRY(find_split_file(dir, split, "images-idx3-ubyte", images_path, sizeof images_path));
    DP_TRY(find_split_file(dir, split, "labels-idx1-ubyte", labels_path, sizeof labels_path));

    dp_idx_t images = {0}, labels = {0};
    DP_TRY(dp_idx_read(images_path, &images));
    dp_status_t st = DP_OK;
    if (images.ndim != 3) {
        st = dp_fail(DP_ERR_FORMAT, "%s: images must have 3 dims (count, rows, cols), found %d",
                     images_path, images.ndim);
        goto fail;
    }
    st = dp_idx_read(labels_path, &labels);
    if (st != DP_OK) goto fail;
    if (labels.ndim != 1) {
        st = dp_fail(DP_ERR_FORMAT, "%s: labels must have 1 dim (count), found %d", labels_path,
                     labels.ndim);
        goto fail;
    }
    if (images.dims[0] != labels.dims[0]) {
        st = dp_fail(DP_ERR_FORMAT, "%u images in %s but %u labels in %s (counts must agree)",
                     (unsigned)images.dims[0], images_path, (unsigned)labels.dims[0],
                     labels_path);
        goto fail;
    }
    for (uint32_t i = 0; i < labels.dims[0]; i++) {
        if (labels.data[i] >= DATASET_NUM_CLASSES) {
            st = dp_fail(DP_ERR_FORMAT, "%s: label %u at index %u is out of range (expected 0..%d)",
                         labels_path, (unsigned)labels.data[i], (unsigned)i,
                         DATASET_NUM_CLASSES - 1);
            goto fail;
        }
    }
    /* dp_idx_read caps the data at INT32_MAX bytes, so every size fits an int. */
    out->count = (int)images.dims[0];
    out->channels = 1;
    out->height = (int)images.dims[1];
    out->width = (int)images.dims[2];
    out->num_classes = DATASET_NUM_CLASSES;
    out->pixels = images.data; /* ownership moves to the dataset */
    out->labels = labels.data;
    return DP_OK;

fail:
    dp_idx_free(&images);
    dp_idx_free(&labels);
    return st;
}

dp_status_t dp_dataset_from_memory(dp_dataset_t *out, int count, int channels, int height,
                                   int width, int num_classes, const uint8_t *pixels,
                                   const uint8_t *labels) {
    memset(out, 0, sizeof *out);
    if (count < 0 || channels < 1 || height < 1 || width < 1)
        return dp_fail(DP_ERR_ARG,
                       "dataset shape (%d, %d, %d, %d) must have count >= 0 and C, H, W >= 1",
                       count, channels, height, width);
    if (num_classes < 1 || num_classes > 256)
        return dp_fail(DP_ERR_ARG, "num_classes %d must be in 1..256", num_classes);
    uint64_t example = (uint64_t)channels * (uint64_t)height * (uint64_t)width;
    uint64_t total = example * (uint64_t)count;
    if (example > INT32_MAX || total > INT32_MAX)
        return dp_fail(DP_ERR_ARG, "dataset (%d, %d, %d, %d) is larger than %d bytes", count,
                       channels, height, width, INT32_MAX);
    if (count > 0 && (!pixels || !labels))
        return dp_fail(DP_ERR_ARG, "dataset of %d examples needs pixels and labels", count);
    for (int i = 0; i < count; i++)
        if (labels[i] >= num_classes)
            return dp_fail(DP_ERR_ARG, "label %u at index %d is out of range (expected 0..%d)",
                           (unsigned)labels[i], i, num_classes - 1);

    uint8_t *pixel_copy = dp_alloc((size_t)total, "dataset pixels");
    if (!pixel_copy) return DP_ERR_NOMEM;
    uint8_t *label_copy = dp_alloc((size_t)count, "dataset labels");
    if (!label_copy) {
        free(pixel_copy);
        return DP_ERR_NOMEM;
    }
    if (total) memcpy(pixel_copy, pixels, (size_t)total);
    if (count) memcpy(label_copy, labels, (size_t)count);
    out->count = count;
    out->channels = channels;
    out->height = height;
    out->width = width;
    out->num_classes = num_classes;
    out->pixels = pixel_copy;
    out->labels = label_copy;
    return DP_OK;
}

void dp_dataset_free(dp_dataset_t *ds) {
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    if (ds->class_names)
        for (int i = 0; i < ds->num_classes; i++) free(ds->class_names[i]);
    free(ds->class_names);
    memset(ds, 0, sizeof *ds);
}

void dp_dataset_truncate(dp_dataset_t *ds, int limit) {
    if (limit > 0 && limit < ds->count) ds->count = limit;
}

dp_status_t dp_normalize_make(int channels, int n, const float *mean, const float *std, dp_normalize_t *out) {
    if (n != 1 && n != channels && channels == 1)
        return dp_fail(DP_ERR_ARG, "normalize: %d mean/std pairs for 1-channel images (give one pair: MEAN,STD)", n);
    if (n != 1 && n != channels)
        return dp_fail(DP_ERR_ARG, "normalize: %d mean/std pairs for %d-channel images (give one pair for all "
                       "channels, or %d: M0,..,M%d,S0,..,S%d)", n, channels, channels, channels - 1, channels - 1);
    if (channels > DP_DATA_MAX_CHANNELS)
        return dp_fail(DP_ERR_ARG, "normalize: images have %d channels, at most %d can be normalised", channels,
                       DP_DATA_MAX_CHANNELS);
    for (int i = 0; i < n; i++)
        if (!(std[i] > 0.0f) || !isfinite(std[i]) || !isfinite(mean[i]))
            return dp_fail(DP_ERR_ARG, "normalize: channel %d: std must be > 0 and mean finite, found mean %g std %g",
                           i, (double)mean[i], (double)std[i]);
    memset(out, 0, sizeof *out);
    out->enabled = 1;
    for (int c = 0; c < channels; c++) {
        out->mean[c] = mean[n == 1 ? 0 : c];
        out->std[c] = std[n == 1 ? 0 : c];
    }
    return DP_OK;
}

dp_status_t dp_dataset_set_normalize(dp_dataset_t *ds, int n, const float *mean, const float *std) {
    dp_normalize_t norm;
    DP_TRY(dp_normalize_make(ds->channels, n, mean, std, &norm));
    for (int c = 0; c < ds->channels; c++) {
        ds->mean[c] = norm.mean[c];
        ds->std[c] = norm.std[c];
    }
    ds->normalize = 1;
    return DP_OK;
}

dp_status_t dp_normalize_parse(const char *text, int *n, float mean[DP_DATA_MAX_CHANNELS],
                               float std[DP_DATA_MAX_CHANNELS]) {
    float values[2 * DP_DATA_MAX_CHANNELS];
    int count = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || (*end != ',' && *end != '\0'))
            return dp_fail(DP_ERR_ARG, "normalize: '%s' is not MEAN,STD or M0,M1,M2,S0,S1,S2 (bad number at '%s')",
                           text, p);
        if (count == 2 * DP_DATA_MAX_CHANNELS)
            return dp_fail(DP_ERR_ARG, "normalize: '%s' has more than %d values", text, 2 * DP_DATA_MAX_CHANNELS);
        values[count++] = (float)v;
        if (*end == '\0') break;
        p = end + 1;
    }
    if (count % 2)
        return dp_fail(DP_ERR_ARG, "normalize: '%s' has %d values: give a mean and a std per channel", text, count);
    *n = count / 2;
    for (int i = 0; i < *n; i++) {
        mean[i] = values[i];
        std[i] = values[*n + i];
        if (!(std[i] > 0.0f))
            return dp_fail(DP_ERR_ARG, "normalize: '%s': std %g of channel %d must be > 0", text, (double)std[i], i);
    }
    return DP_OK;
}

/* table[c][p] = the float pixel byte p of channel c becomes. */
static void pixel_tables(int channels, const dp_normalize_t *norm, float table[][256]) {
    const float scale = 1.0f / 255.0f;
    for (int c = 0; c < channels; c++)
        for (int p = 0; p < 256; p++)
            table[c][p] = norm->enabled ? ((float)p * scale - norm->mean[c]) / norm->std[c] : (float)p * scale;
}

void dp_pixels_to_input(const uint8_t *pixels, int n, int channels, size_t plane, const dp_normalize_t *norm,
                        float *x) {
    const size_t values = (size_t)n * (size_t)channels * plane;
    if (!norm || !norm->enabled) {
        const float scale = 1.0f / 255.0f;
        for (size_t j = 0; j < values; j++) x[j] = (float)pixels[j] * scale;
        return;
    }
    DP_ASSERT(channels <= DP_DATA_MAX_CHANNELS);
    float table[DP_DATA_MAX_CHANNELS][256];
    pixel_tables(channels, norm, table);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < channels; c++) {
            const uint8_t *src = pixels + ((size_t)i * channels + c) * plane; /* (H, W) */
            float *dst = x + ((size_t)i * channels + c) * plane;
            for (size_t j = 0; j < plane; j++) dst[j] = table[c][src[j]];
        }
}

void dp_dataset_normalization(const dp_dataset_t *ds, dp_normalize_t *out) {
    memset(out, 0, sizeof *out);
    out->enabled = ds->normalize;
    for (int c = 0; c < ds->channels && c < DP_DATA_MAX_CHANNELS; c++) {
        out->mean[c] = ds->mean[c];
        out->std[c] = ds->std[c];
    }
}

void dp_dataset_fill(const dp_dataset_t *ds, const int *indices, int n, float *x, int32_t *y) {
    const size_t example = (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width;
    const size_t plane = (size_t)ds->height * (size_t)ds->width;
    dp_normalize_t norm;
    dp_dataset_normalization(ds, &norm);
    for (int i = 0; i < n; i++) {
        int index = indices[i];
        DP_ASSERT(index >= 0 && index < ds->count);
        dp_pixels_to_input(ds->pixels + (size_t)index * example, 1, ds->channels, plane, &norm,
                           x + (size_t)i * example);
        if (y) y[i] = ds->labels[index];
    }
}
