/* image_folder.c - torchvision's ImageFolder layout: DIR/train/CLASS/FILE and
 * DIR/test/CLASS/FILE, one folder per class, decoded once into memory.
 *
 * Classes are the sorted (byte order, like Python's sorted) names of the
 * folders in DIR/train, label = index in that list, for both splits; a test
 * folder whose name is not a training class is an error, a class with no
 * test folder is fine. Examples come class by class, files in sorted name
 * order. Names starting with '.' are skipped (.DS_Store, editor files);
 * plain files directly in DIR/SPLIT are ignored (as torchvision does); every
 * other file in a class folder must be an image (dp_image_read: PNG or PGM)
 * of the first image's height, width and channel count. Pixels are stored
 * (C, H, W) like every dp_dataset_t.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"

#include "dptrain/image.h"

typedef struct {
    char **names;
    int count, capacity;
} name_list_t;

static void names_free(name_list_t *list) {
    for (int i = 0; i < list->count; i++) free(list->names[i]);
    free(list->names);
    memset(list, 0, sizeof *list);
}

static dp_status_t names_add(name_list_t *list, const char *name) {
    if (list->count == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 64;
        char **grown = realloc(list->names, (size_t)capacity * sizeof *grown);
        if (!grown) return dp_fail(DP_ERR_NOMEM, "out of memory listing a folder");
        list->names = grown;
        list->capacity = capacity;
    }
    size_t len = strlen(name);
    char *copy = dp_alloc(len + 1, "file name");
    if (!copy) return DP_ERR_NOMEM;
    memcpy(copy, name, len + 1);
    list->names[list->count++] = copy;
    return DP_OK;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in `dir` of folders (want_dirs) or of non-folders,
 * skipping names that start with '.'. */
static dp_status_t list_sorted(const char *dir, int want_dirs, name_list_t *out) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d) return dp_fail(DP_ERR_IO, "%s: cannot open the folder (%s)", dir, strerror(errno));
    dp_status_t st = DP_OK;
    struct dirent *e;
    char path[8800];
    while (st == DP_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat info;
        if (stat(path, &info) != 0) {
            st = dp_fail(DP_ERR_IO, "%s: cannot read (%s)", path, strerror(errno));
            break;
        }
        if ((S_ISDIR(info.st_mode) != 0) == (want_dirs != 0)) st = names_add(out, e->d_name);
    }
    closedir(d);
    if (st != DP_OK) {
        names_free(out);
        return st;
    }
    if (out->count) qsort(out->names, (size_t)out->count, sizeof *out->names, compare_names);
    return DP_OK;
}

static int find_name(const name_list_t *list, const char *name) {
    const char *key = name;
    char **hit = list->count ? bsearch(&key, list->names, (size_t)list->count, sizeof *list->names, compare_names)
                             : NULL;
    return hit ? (int)(hit - list->names) : -1;
}

/* Every image of the split: paths (DIR/SPLIT/CLASS/FILE) and labels. */
typedef struct {
    name_list_t paths;
    uint8_t *labels;
} file_table_t;

static dp_status_t list_split(const char *split_dir, const name_list_t *classes, file_table_t *out) {
    memset(out, 0, sizeof *out);
    name_list_t folders;
    DP_TRY(list_sorted(split_dir, 1, &folders));
    dp_status_t st = DP_OK;
    int label_capacity = 0;
    char class_dir[8400], path[16800];
    if (folders.count == 0) st = dp_fail(DP_ERR_FORMAT, "%s: no class folders", split_dir);
    for (int f = 0; st == DP_OK && f < folders.count; f++) {
        int label = find_name(classes, folders.names[f]);
        snprintf(class_dir, sizeof class_dir, "%s/%s", split_dir, folders.names[f]);
        if (label < 0) {
            st = dp_fail(DP_ERR_FORMAT, "%s: class '%s' is not one of the %d training classes", class_dir,
                         folders.names[f], classes->count);
            break;
        }
        name_list_t files;
        st = list_sorted(class_dir, 0, &files);
        if (st != DP_OK) break;
        if (files.count == 0) st = dp_fail(DP_ERR_FORMAT, "%s: empty class folder (no images)", class_dir);
        for (int i = 0; st == DP_OK && i < files.count; i++) {
            snprintf(path, sizeof path, "%s/%s", class_dir, files.names[i]);
            st = names_add(&out->paths, path);
            if (st == DP_OK && out->paths.count > label_capacity) {
                label_capacity = out->paths.capacity;
                uint8_t *grown = realloc(out->labels, (size_t)label_capacity);
                if (!grown) st = dp_fail(DP_ERR_NOMEM, "out of memory listing %s", split_dir);
                else out->labels = grown;
            }
            if (st == DP_OK) out->labels[out->paths.count - 1] = (uint8_t)label;
        }
        names_free(&files);
    }
    names_free(&folders);
    if (st != DP_OK) {
        names_free(&out->paths);
        free(out->labels);
        out->labels = NULL;
    }
    return st;
}

/* Decodes every file into (count, C, H, W) bytes. */
static dp_status_t decode_all(const file_table_t *files, const dp_dataset_load_options_t *options, dp_dataset_t *out) {
    const int count = files->paths.count;
    uint8_t *pixels = NULL;
    size_t example = 0;
    dp_status_t st = DP_OK;
    if (options->progress) options->progress(options->progress_ctx, 0, count);
    for (int i = 0; i < count && st == DP_OK; i++) {
        const char *path = files->paths.names[i];
        dp_image_t image = {0};
        st = dp_image_read(path, &image);
        if (st != DP_OK) break;
        if (i == 0) {
            uint64_t bytes = (uint64_t)image.channels * (uint64_t)image.height * (uint64_t)image.width;
            if (bytes * (uint64_t)count > INT32_MAX) {
                st = dp_fail(DP_ERR_ARG, "%s: %d images of %dx%dx%d are more than %d bytes", path, count,
                             image.channels, image.height, image.width, INT32_MAX);
            } else {
                example = (size_t)bytes;
                out->channels = image.channels;
                out->height = image.height;
                out->width = image.width;
                pixels = dp_alloc(example * (size_t)count, "image folder pixels");
                if (!pixels) st = DP_ERR_NOMEM;
            }
        } else if (image.channels != out->channels || image.height != out->height || image.width != out->width) {
            st = dp_fail(DP_ERR_FORMAT, "%s: image is %dx%dx%d (channels x height x width), expected %dx%dx%d like %s",
                         path, image.channels, image.height, image.width, out->channels, out->height, out->width,
                         files->paths.names[0]);
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
    char train_dir[4200], split_dir[4200];
    snprintf(train_dir, sizeof train_dir, "%s/train", dir);
    snprintf(split_dir, sizeof split_dir, "%s/%s", dir, test ? "test" : "train");
    name_list_t classes;
    DP_TRY(list_sorted(train_dir, 1, &classes));
    dp_status_t st = DP_OK;
    if (classes.count == 0) st = dp_fail(DP_ERR_FORMAT, "%s: no class folders", train_dir);
    else if (classes.count > 256)
        st = dp_fail(DP_ERR_FORMAT, "%s: %d class folders, at most 256 are supported", train_dir, classes.count);
    file_table_t files = {0};
    if (st == DP_OK) st = list_split(split_dir, &classes, &files);
    if (st == DP_OK) st = decode_all(&files, options, out);
    if (st == DP_OK) {
        out->count = files.paths.count;
        out->labels = files.labels;
        files.labels = NULL;
        out->num_classes = classes.count;
        out->class_names = classes.names; /* ownership moves to the dataset */
        classes.names = NULL;
        classes.count = 0;
    }
    free(files.labels);
    names_free(&files.paths);
    names_free(&classes);
    if (st != DP_OK) memset(out, 0, sizeof *out);
    return st;
}
