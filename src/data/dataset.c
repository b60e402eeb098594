/* dataset.c - datasets of byte images and labels: loading a split from an
 * IDX directory, building one from memory, truncating, and filling a batch
 * as float (x = pixels / 255) and int32 labels.
 *
 * A split SPLIT in DIR is DIR/SPLIT-images-idx3-ubyte and
 * DIR/SPLIT-labels-idx1-ubyte, each gzip-compressed (.gz) or plain. When both
 * forms exist the .gz file is used: it is the form datasets are shipped in
 * (Debian's dataset-fashion-mnist, the original MNIST site), whereas a plain
 * copy next to it may be a stale or half-finished decompression.
 */
#include "dptrain/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

dp_status_t dp_dataset_load(const char *dir, const char *split, dp_dataset_t *out) {
    memset(out, 0, sizeof *out);
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
    memset(ds, 0, sizeof *ds);
}

void dp_dataset_truncate(dp_dataset_t *ds, int limit) {
    if (limit > 0 && limit < ds->count) ds->count = limit;
}

void dp_dataset_fill(const dp_dataset_t *ds, const int *indices, int n, float *x, int32_t *y) {
    const size_t example = (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width;
    const float scale = 1.0f / 255.0f;
    for (int i = 0; i < n; i++) {
        int index = indices[i];
        DP_ASSERT(index >= 0 && index < ds->count);
        const uint8_t *src = ds->pixels + (size_t)index * example; /* (C, H, W) */
        float *dst = x + (size_t)i * example;                      /* (C, H, W) */
        for (size_t j = 0; j < example; j++) dst[j] = (float)src[j] * scale;
        if (y) y[i] = ds->labels[index];
    }
}
