/* cifar.c - the CIFAR-10 binary format (https://www.cs.toronto.edu/~kriz/cifar.html,
 * "binary version"): files of 3073-byte records, one label byte (0..9) then
 * 3072 pixel bytes, the 1024 red values of the 32 x 32 image row by row,
 * then the green, then the blue: exactly the (C, H, W) byte layout a
 * dp_dataset_t keeps, so a record is copied as it is.
 *
 * The training split is data_batch_1.bin .. data_batch_5.bin (the ones
 * present, numbered from 1 without gaps: a test may write fewer), the test
 * split test_batch.bin. Every file is checked whole before it is used:
 * missing, empty, not a whole number of records, label >= 10. The
 * dataset carries CIFAR-10's class names (airplane ... truck).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"

#define CIFAR_SIDE 32
#define CIFAR_CHANNELS 3
#define CIFAR_PIXELS (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE) /* 3072 */
#define CIFAR_RECORD (1 + CIFAR_PIXELS)                         /* 3073 */
#define CIFAR_CLASSES 10
#define CIFAR_TRAIN_FILES 5

/* Size of a regular file, or an error naming it. */
static dp_status_t file_size(const char *path, long long *size) {
    struct stat st;
    if (stat(path, &st) != 0) return dp_fail(DP_ERR_IO, "%s: cannot open CIFAR file (%s)", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return dp_fail(DP_ERR_IO, "%s: not a regular file", path);
    *size = (long long)st.st_size;
    if (*size == 0) return dp_fail(DP_ERR_FORMAT, "%s: empty CIFAR file (expected %d-byte records)", path, CIFAR_RECORD);
    if (*size % CIFAR_RECORD)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: truncated CIFAR file: %lld bytes is not a whole number of %d-byte records "
                       "(record %lld has %lld bytes)",
                       path, *size, CIFAR_RECORD, *size / CIFAR_RECORD, *size % CIFAR_RECORD);
    return DP_OK;
}

/* Reads one file's records into pixels/labels from record `first`. */
static dp_status_t read_records(const char *path, long long records, uint8_t *pixels, uint8_t *labels) {
    FILE *f = fopen(path, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open CIFAR file (%s)", path, strerror(errno));
    uint8_t record[CIFAR_RECORD];
    dp_status_t st = DP_OK;
    for (long long r = 0; r < records; r++) {
        if (fread(record, 1, sizeof record, f) != sizeof record) {
            st = dp_fail(DP_ERR_IO, "%s: read failed at record %lld (%s)", path, r,
                         ferror(f) ? strerror(errno) : "file shrank while read");
            break;
        }
        if (record[0] >= CIFAR_CLASSES) {
            st = dp_fail(DP_ERR_FORMAT, "%s: label %u of record %lld is out of range (expected 0..%d)", path,
                         (unsigned)record[0], r, CIFAR_CLASSES - 1);
            break;
        }
        labels[r] = record[0];
        memcpy(pixels + (size_t)r * CIFAR_PIXELS, record + 1, CIFAR_PIXELS);
    }
    fclose(f);
    return st;
}

dp_status_t dp_cifar_read(const char *const *paths, int num_paths, dp_dataset_t *out) {
    memset(out, 0, sizeof *out);
    if (num_paths < 1) return dp_fail(DP_ERR_ARG, "CIFAR: no files to read");
    long long total = 0;
    for (int i = 0; i < num_paths; i++) {
        long long size = 0;
        DP_TRY(file_size(paths[i], &size));
        total += size / CIFAR_RECORD;
    }
    if (total * CIFAR_PIXELS > INT32_MAX)
        return dp_fail(DP_ERR_ARG, "CIFAR: %lld records are more than %d bytes of pixels", total, INT32_MAX);
    uint8_t *pixels = dp_alloc((size_t)total * CIFAR_PIXELS, "CIFAR pixels");
    uint8_t *labels = dp_alloc((size_t)total, "CIFAR labels");
    if (!pixels || !labels) {
        free(pixels);
        free(labels);
        return DP_ERR_NOMEM;
    }
    long long first = 0;
    for (int i = 0; i < num_paths; i++) {
        long long size = 0;
        dp_status_t st = file_size(paths[i], &size); /* again: it may have changed */
        if (st == DP_OK && first + size / CIFAR_RECORD > total)
            st = dp_fail(DP_ERR_IO, "%s: file grew while read", paths[i]);
        if (st == DP_OK)
            st = read_records(paths[i], size / CIFAR_RECORD, pixels + (size_t)first * CIFAR_PIXELS, labels + first);
        if (st != DP_OK) {
            free(pixels);
            free(labels);
            return st;
        }
        first += size / CIFAR_RECORD;
    }
    /* CIFAR-10's classes (batches.meta.txt's names, in label order): a checkpoint keeps them (data.classes), so
     * predict and the ONNX file name them as an image folder's */
    static const char *const names[CIFAR_CLASSES] = {"airplane", "automobile", "bird", "cat",  "deer",
                                                     "dog",      "frog",       "horse", "ship", "truck"};
    out->class_names = dp_alloc_zeroed(CIFAR_CLASSES, sizeof *out->class_names, "CIFAR class names");
    for (int c = 0; out->class_names && c < CIFAR_CLASSES; c++)
        if (!(out->class_names[c] = strdup(names[c]))) {
            for (int k = 0; k < c; k++) free(out->class_names[k]);
            free(out->class_names);
            out->class_names = NULL;
        }
    if (!out->class_names) {
        free(pixels);
        free(labels);
        return dp_fail(DP_ERR_NOMEM, "out of memory for CIFAR's class names");
    }
    out->count = (int)first;
    out->channels = CIFAR_CHANNELS;
    out->height = CIFAR_SIDE;
    out->width = CIFAR_SIDE;
    out->num_classes = CIFAR_CLASSES;
    out->pixels = pixels;
    out->labels = labels;
    return DP_OK;
}

dp_status_t dp_data_load_cifar(const char *dir, int test, dp_dataset_t *out) {
    char names[CIFAR_TRAIN_FILES][4200];
    const char *paths[CIFAR_TRAIN_FILES];
    int n = 0;
    struct stat st;
    if (test) {
        snprintf(names[0], sizeof names[0], "%s/test_batch.bin", dir);
        paths[n++] = names[0];
    } else {
        for (int i = 0; i < CIFAR_TRAIN_FILES; i++) {
            snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", dir, i + 1);
            if (stat(names[i], &st) != 0) {
                if (n == 0)
                    return dp_fail(DP_ERR_IO, "%s: no CIFAR training file (%s)", names[i], strerror(errno));
                for (int j = i + 1; j < CIFAR_TRAIN_FILES; j++) { /* a gap would drop data silently */
                    char later[4200];
                    snprintf(later, sizeof later, "%s/data_batch_%d.bin", dir, j + 1);
                    if (stat(later, &st) == 0)
                        return dp_fail(DP_ERR_IO, "%s is missing but %s exists (training files are numbered from 1 without gaps)",
                                       names[i], later);
                }
                break;
            }
            paths[n++] = names[i];
        }
    }
    return dp_cifar_read(paths, n, out);
}
