/* image_folder.c - an image folder decoded whole into memory, for
 * dp_dataset_load (data.h): the files the index finds (image_index.c:
 * torchvision's classes, order and extensions), each decoded once
 * (dp_image_read) into a dp_dataset_t; every image must have the size and
 * channel count of the first. The test split is DIR/test, else DIR/val,
 * else held out of the training folders (DIR/train, or DIR's own class
 * folders). `dptrain` itself streams folders
 * (folder_source.c); this is the library's in-memory form, for data sets
 * small enough to hold.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

#include "dptrain/image.h"
#include "dptrain/image_folder.h"

/* Every file of the index into out->pixels (C, H, W), the first image's size. */
static dp_status_t decode_all(const dp_image_index_t *x, const dp_dataset_load_options_t *options,
                              dp_dataset_t *out) {
    const int count = x->count;
    uint8_t *pixels = NULL;
    size_t example = 0;
    dp_status_t st = DP_OK;
    if (options->progress) options->progress(options->progress_ctx, 0, count);
    for (int i = 0; i < count && st == DP_OK; i++) {
        const char *path = x->paths[i];
        dp_image_t image = {0};
        if ((st = dp_image_read(path, &image)) != DP_OK) break;
        if (i == 0) {
            uint64_t bytes = (uint64_t)image.channels * (uint64_t)image.height * (uint64_t)image.width;
            if (bytes * (uint64_t)count > INT32_MAX) {
                st = dp_fail(DP_ERR_ARG, "%s: %d images of %dx%dx%d are more than %d bytes (dptrain train streams "
                             "such folders)", path, count, image.channels, image.height, image.width, INT32_MAX);
            } else {
                example = (size_t)bytes;
                out->channels = image.channels;
                out->height = image.height;
                out->width = image.width;
                if (!(pixels = dp_alloc(example * (size_t)count, "image folder pixels"))) st = DP_ERR_NOMEM;
            }
        } else if (image.channels != out->channels || image.height != out->height || image.width != out->width) {
            st = dp_fail(DP_ERR_FORMAT, "%s: image is %dx%dx%d (channels x height x width), expected %dx%dx%d like %s",
                         path, image.channels, image.height, image.width, out->channels, out->height, out->width,
                         x->paths[0]);
        }
        if (st == DP_OK) { /* (H, W, C) interleaved -> (C, H, W) */
            const size_t plane = (size_t)image.height * (size_t)image.width;
            const int C = image.channels;
            uint8_t *dst = pixels + (size_t)i * example;
            for (size_t j = 0; j < plane; j++)
                for (int c = 0; c < C; c++) dst[(size_t)c * plane + j] = image.pixels[j * (size_t)C + (size_t)c];
        }
        dp_image_free(&image);
        if (st == DP_OK && options->progress) options->progress(options->progress_ctx, i + 1, count);
    }
    if (st != DP_OK) {
        free(pixels);
        return st;
    }
    out->pixels = pixels;
    return DP_OK;
}

dp_status_t dp_data_load_image_folder(const char *dir, int test, const dp_dataset_load_options_t *options,
                                      dp_dataset_t *out) {
    memset(out, 0, sizeof *out);
    dp_image_index_t train = {0}, split = {0};
    dp_index_options_t io = {0};
    const char *root = dp_image_folder_train_split(dir);
    /* the classes: the training folders (its files' headers are read only for the training split) */
    dp_status_t st = dp_image_index_build(dir, root, NULL, 0, &io, &train);
    if (st == DP_OK && train.num_classes > 256)
        st = dp_fail(DP_ERR_FORMAT, "%s%s%s: %d class folders, at most 256 are supported in memory (dptrain train "
                     "streams such folders)", dir, *root ? "/" : "", root, train.num_classes);
    const char *test_split = dp_image_folder_test_split(dir);
    if (st == DP_OK && !test_split) /* the test split held out of the training folders */
        st = dp_image_index_hold_out(&train, options->holdout > 0.0 ? options->holdout : DP_HOLDOUT_DEFAULT, dir,
                                     &split);
    else if (st == DP_OK && test)
        st = dp_image_index_build(dir, test_split, train.class_names, train.num_classes, &io, &split);
    const dp_image_index_t *x = test ? &split : &train;
    if (st == DP_OK) st = decode_all(x, options, out);
    if (st == DP_OK && !(out->labels = dp_alloc((size_t)x->count, "image folder labels"))) st = DP_ERR_NOMEM;
    if (st == DP_OK) {
        for (int i = 0; i < x->count; i++) out->labels[i] = (uint8_t)x->labels[i];
        out->count = x->count;
        out->num_classes = train.num_classes;
        out->class_names = train.class_names; /* ownership moves to the dataset */
        train.class_names = NULL;
        train.num_classes = 0;
    }
    dp_image_index_free(&split);
    dp_image_index_free(&train);
    if (st != DP_OK) {
        free(out->pixels);
        free(out->labels);
        memset(out, 0, sizeof *out);
    }
    return st;
}
