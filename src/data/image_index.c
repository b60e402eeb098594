/* image_index.c - the index of an image folder (image_folder.h): its
 * classes, its files in torchvision's order with their labels, every
 * file's header read once; a checkpoint's class names matched to a
 * folder's (eval's labels).
 *
 * The walk: class folders are the directories of DIR/train (a symbolic link
 * to one counts), sorted by byte order; within a class, torchvision's
 * make_dataset order: sorted(os.walk(class_dir, followlinks=True)) visits
 * directories in the sorted order of their paths, and each one's files in
 * sorted order. Paths are compared as strings whose separator is '/', as
 * Python compares them. Only files with an image extension count.
 *
 * DESIGN. The header pass runs on `threads` threads: file i is read by
 * the thread that takes it from a shared counter (an atomic fetch-add);
 * each writes only its files' verdicts (ok[i], a message per bad file);
 * the caller joins them, then reports or leaves out the bad files in index
 * order, so the result is the same for any thread count. The progress
 * callback runs on the caller's thread only, which polls the counter.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dptrain/image.h"
#include "dptrain/image_folder.h"
#include "image_internal.h"

#define MAX_REPORTED 10          /* bad files named one line each; the rest counted */
#define MAX_DEPTH 64             /* directories below a class folder (a link loop ends here) */
#define MAX_CLASSES (1 << 20)

/* --- growable lists -------------------------------------------------------------- */
typedef struct {
    char **items;
    int count, capacity;
} strings_t;

static void strings_free(strings_t *l) {
    for (int i = 0; i < l->count; i++) free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static dp_status_t strings_add(strings_t *l, const char *s) {
    if (l->count == l->capacity) {
        int capacity = l->capacity ? 2 * l->capacity : 64;
        char **items = realloc(l->items, sizeof *items * (size_t)capacity);
        if (!items) return dp_fail(DP_ERR_NOMEM, "out of memory listing an image folder");
        l->items = items;
        l->capacity = capacity;
    }
    if (!(l->items[l->count] = strdup(s))) return dp_fail(DP_ERR_NOMEM, "out of memory listing an image folder");
    l->count++;
    return DP_OK;
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_image_name(const char *name) {
    static const char *const extensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof extensions / sizeof *extensions; i++) {
        size_t e = strlen(extensions[i]);
        if (n > e && strcasecmp(name + n - e, extensions[i]) == 0) return 1;
    }
    return 0;
}

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode); /* follows links, as followlinks=True */
}

#define PATH_BYTES 4096

/* out = a/b; one line when it would not fit. */
static dp_status_t join_path(char out[PATH_BYTES], const char *a, const char *b) {
    if ((size_t)snprintf(out, PATH_BYTES, "%s/%s", a, b) >= PATH_BYTES)
        return dp_fail(DP_ERR_ARG, "%s/%s: the path is longer than %d bytes", a, b, PATH_BYTES - 1);
    return DP_OK;
}

/* A split's folder: DIR/SPLIT, or DIR itself for the split "" (class
 * folders directly in DIR). */
static dp_status_t split_path(char out[PATH_BYTES], const char *dir, const char *split) {
    if (*split) return join_path(out, dir, split);
    if ((size_t)snprintf(out, PATH_BYTES, "%s", dir) >= PATH_BYTES)
        return dp_fail(DP_ERR_ARG, "%.64s...: the path is longer than %d bytes", dir, PATH_BYTES - 1);
    return DP_OK;
}

/* The entries of `dir` not starting with '.', sorted, split into
 * directories and files (image names only). */
static dp_status_t list_dir(const char *dir, strings_t *dirs, strings_t *files) {
    DIR *d = opendir(dir);
    if (!d) return dp_fail(DP_ERR_IO, "%s: cannot read the folder (%s)", dir, strerror(errno));
    dp_status_t status = DP_OK;
    struct dirent *e;
    char path[PATH_BYTES];
    while (status == DP_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if ((status = join_path(path, dir, e->d_name)) != DP_OK) break;
        if (is_directory(path)) status = dirs ? strings_add(dirs, e->d_name) : DP_OK;
        else if (files && is_image_name(e->d_name)) status = strings_add(files, e->d_name);
    }
    closedir(d);
    /* qsort's array must not be NULL, even for no entries */
    if (dirs && dirs->count > 1) qsort(dirs->items, (size_t)dirs->count, sizeof *dirs->items, compare_strings);
    if (files && files->count > 1) qsort(files->items, (size_t)files->count, sizeof *files->items, compare_strings);
    return status;
}

/* os.walk's directories of `root` (itself included), depth-first in its
 * order; sorting their paths afterwards gives sorted(os.walk(...)). */
static dp_status_t walk_dirs(const char *root, int depth, strings_t *out) {
    if (depth > MAX_DEPTH)
        return dp_fail(DP_ERR_ARG, "%s: more than %d folders deep (a link loop?)", root, MAX_DEPTH);
    DP_TRY(strings_add(out, root));
    strings_t subdirs = {0};
    dp_status_t status = list_dir(root, &subdirs, NULL);
    char path[PATH_BYTES];
    for (int i = 0; status == DP_OK && i < subdirs.count; i++)
        if ((status = join_path(path, root, subdirs.items[i])) == DP_OK) status = walk_dirs(path, depth + 1, out);
    strings_free(&subdirs);
    return status;
}

/* The image files of one class folder, in make_dataset's order, appended. */
static dp_status_t class_files(const char *class_dir, strings_t *files) {
    strings_t dirs = {0};
    dp_status_t status = walk_dirs(class_dir, 0, &dirs);
    if (status == DP_OK) qsort(dirs.items, (size_t)dirs.count, sizeof *dirs.items, compare_strings);
    char path[PATH_BYTES];
    for (int d = 0; status == DP_OK && d < dirs.count; d++) {
        strings_t names = {0};
        status = list_dir(dirs.items[d], NULL, &names);
        for (int i = 0; status == DP_OK && i < names.count; i++)
            if ((status = join_path(path, dirs.items[d], names.items[i])) == DP_OK) status = strings_add(files, path);
        strings_free(&names);
    }
    strings_free(&dirs);
    return status;
}

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The first of `names` that is an image list (a file) in dir, else NULL. */
static const char *list_in(const char *dir, const char *const *names, size_t count) {
    char path[PATH_BYTES];
    for (size_t i = 0; i < count; i++)
        if (join_path(path, dir, names[i]) == DP_OK && is_regular_file(path)) return names[i];
    return NULL;
}

const char *dp_image_folder_train_split(const char *dir) {
    static const char *const lists[] = {"train.txt", "train.csv"};
    const char *list = list_in(dir, lists, sizeof lists / sizeof *lists);
    if (list) return list;
    char path[PATH_BYTES];
    return join_path(path, dir, "train") == DP_OK && is_directory(path) ? "train" : "";
}

const char *dp_image_folder_test_split(const char *dir) {
    static const char *const lists[] = {"test.txt", "test.csv", "val.txt", "val.csv"};
    const char *list = list_in(dir, lists, sizeof lists / sizeof *lists);
    if (list) return list;
    static const char *const names[] = {"test", "val"};
    char path[PATH_BYTES];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (join_path(path, dir, names[i]) == DP_OK && is_directory(path)) return names[i];
    return NULL;
}

int dp_image_folder_is_list(const char *path) {
    size_t n = strlen(path);
    return is_regular_file(path) && n > 4 && (strcasecmp(path + n - 4, ".txt") == 0 ||
                                              strcasecmp(path + n - 4, ".csv") == 0);
}

dp_status_t dp_image_list_files(const char *dir, char ***paths, int *count) {
    *paths = NULL;
    *count = 0;
    strings_t files = {0};
    dp_status_t status = class_files(dir, &files); /* make_dataset's order of one folder */
    if (status != DP_OK) {
        strings_free(&files);
        return status;
    }
    *paths = files.items;
    *count = files.count;
    return DP_OK;
}

void dp_image_list_free(char **paths, int count) {
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
}

/* --- the header pass ----------------------------------------------------------------- */
typedef struct {
    char **paths;
    int count, ignore_exif;
    atomic_int next, done;
    unsigned char *ok;    /* (count) 1: readable */
    char **messages;      /* (count) the line of a bad file, else NULL */
} probe_job_t;

static void *probe_thread(void *arg) {
    probe_job_t *job = arg;
    for (;;) {
        int i = atomic_fetch_add(&job->next, 1);
        if (i >= job->count) break;
        dp_image_info_t info;
        job->ok[i] = dp_image_probe_file(job->paths[i], job->ignore_exif, &info) == DP_OK;
        if (!job->ok[i]) job->messages[i] = strdup(dp_error_message());
        atomic_fetch_add(&job->done, 1);
    }
    return NULL;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ok[i] for every file, read on `threads` threads; the progress told on this one. */
static dp_status_t probe_all(probe_job_t *job, int threads, const char *split, const dp_index_options_t *o) {
    pthread_t *ids = dp_alloc_zeroed((size_t)threads, sizeof *ids, "index threads");
    if (!ids) return DP_ERR_NOMEM;
    int started = 0;
    while (started < threads && pthread_create(&ids[started], NULL, probe_thread, job) == 0) started++;
    if (started == 0) probe_thread(job);
    double told = now_sec();
    while (started > 0 && o->progress && atomic_load(&job->done) < job->count) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
        if (now_sec() - told >= 0.25) {
            o->progress(o->progress_ctx, split, atomic_load(&job->done), job->count);
            told = now_sec();
        }
    }
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    free(ids);
    if (o->progress) o->progress(o->progress_ctx, split, job->count, job->count);
    return DP_OK;
}

/* The bad files: one line each for the first MAX_REPORTED, then a count. */
static dp_status_t report_bad(const probe_job_t *job, int bad, const char *split_dir) {
    char text[8192];
    size_t used = (size_t)snprintf(text, sizeof text, "%s: %d file%s cannot be read as an image (leave them out "
                                   "with --skip-bad-files):", split_dir, bad, bad == 1 ? "" : "s");
    int named = 0;
    for (int i = 0; i < job->count && named < MAX_REPORTED && used < sizeof text; i++)
        if (!job->ok[i]) {
            used += (size_t)snprintf(text + used, sizeof text - used, "\n  %s", job->messages[i]);
            named++;
        }
    if (bad > named && used < sizeof text)
        snprintf(text + used, sizeof text - used, "\n  and %d more", bad - named);
    return dp_fail(DP_ERR_FORMAT, "%s", text);
}

/* --- the index ------------------------------------------------------------------------ */
void dp_image_index_free(dp_image_index_t *index) {
    if (!index) return;
    for (int c = 0; index->class_names && c < index->num_classes; c++) free(index->class_names[c]);
    free(index->class_names);
    free(index->paths);
    free(index->labels);
    free(index->pool);
    memset(index, 0, sizeof *index);
}

/* The class names: the training split's folders (classes NULL), or a copy
 * of classes. */
static dp_status_t find_classes(const char *dir, const char *split, char *const *classes, int num_classes,
                                dp_image_index_t *out) {
    strings_t found = {0};
    if (!classes) {
        char train[PATH_BYTES];
        DP_TRY(split_path(train, dir, split));
        DP_TRY(list_dir(train, &found, NULL));
        if (found.count == 0) {
            strings_free(&found);
            return dp_fail(DP_ERR_FORMAT, "%s: no class folders (expected %s/CLASS/IMAGE files)", train, train);
        }
        if (found.count > MAX_CLASSES) {
            strings_free(&found);
            return dp_fail(DP_ERR_FORMAT, "%s: %d class folders, at most %d", train, found.count, MAX_CLASSES);
        }
        out->class_names = found.items; /* taken */
        out->num_classes = found.count;
        return DP_OK;
    }
    if (!(out->class_names = dp_alloc_zeroed((size_t)num_classes, sizeof *out->class_names, "class names")))
        return DP_ERR_NOMEM;
    for (int c = 0; c < num_classes; c++)
        if (!(out->class_names[c] = strdup(classes[c]))) return dp_fail(DP_ERR_NOMEM, "out of memory");
    out->num_classes = num_classes;
    return DP_OK;
}

/* name's position among classes, or -1 */
static int class_position(char *const *classes, int num_classes, const char *name) {
    for (int c = 0; c < num_classes; c++)
        if (strcmp(classes[c], name) == 0) return c;
    return -1;
}

/* Every file of the split, class by class, with its label. */
static dp_status_t list_split(const char *dir, const char *split, int training, dp_image_index_t *x,
                              strings_t *files, int32_t **labels) {
    char split_dir[PATH_BYTES], class_dir[PATH_BYTES];
    DP_TRY(split_path(split_dir, dir, split));
    strings_t folders = {0};
    DP_TRY(list_dir(split_dir, &folders, NULL));
    dp_status_t status = DP_OK;
    int capacity = 0;
    for (int f = 0; status == DP_OK && f < folders.count; f++) {
        int label = class_position(x->class_names, x->num_classes, folders.items[f]);
        if (label < 0) {
            status = dp_fail(DP_ERR_FORMAT, "%s/%s: '%s' is not a class of the training split (its classes are "
                             "the folders of %s/train)", split_dir, folders.items[f], folders.items[f], dir);
            break;
        }
        int before = files->count;
        status = join_path(class_dir, split_dir, folders.items[f]);
        if (status == DP_OK) status = class_files(class_dir, files);
        if (status == DP_OK && files->count == before && training) /* torchvision refuses it too */
            status = dp_fail(DP_ERR_FORMAT, "%s: empty class (no image files: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                             ".webp)", class_dir);
        if (status == DP_OK && files->count > capacity) {
            capacity = files->capacity;
            int32_t *grown = realloc(*labels, sizeof **labels * (size_t)capacity);
            if (!grown) status = dp_fail(DP_ERR_NOMEM, "out of memory listing %s", split_dir);
            else *labels = grown;
        }
        for (int i = before; status == DP_OK && i < files->count; i++) (*labels)[i] = label;
    }
    strings_free(&folders);
    if (status == DP_OK && files->count == 0)
        status = dp_fail(DP_ERR_FORMAT, "%s: no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) in its "
                         "class folders", split_dir);
    return status;
}

/* An image list's files and labels (image_list.c), its classes when
 * classes is NULL; root_length: the bytes of its folder in every path. */
static dp_status_t index_list(const char *list, char *const *classes, int num_classes, dp_image_index_t *x,
                              strings_t *files, int32_t **labels, size_t *root_length) {
    dp_image_list_t l;
    DP_TRY(dp_image_list_read(list, classes, num_classes, &l));
    dp_status_t status = classes ? find_classes(NULL, NULL, classes, num_classes, x) : DP_OK;
    if (!classes) { /* taken */
        x->class_names = l.class_names;
        x->num_classes = l.num_classes;
        l.class_names = NULL;
        l.num_classes = 0;
    }
    files->items = l.paths, files->count = files->capacity = l.count;
    *labels = l.labels;
    *root_length = l.root_length;
    l.paths = NULL, l.labels = NULL, l.count = 0;
    dp_image_list_clear(&l);
    return status;
}

/* The kept files into out->paths (one pool) and out->labels. */
static dp_status_t keep_files(const strings_t *files, const int32_t *labels, const unsigned char *ok,
                              dp_image_index_t *out) {
    size_t bytes = 0;
    int kept = 0;
    for (int i = 0; i < files->count; i++)
        if (ok[i]) {
            bytes += strlen(files->items[i]) + 1;
            kept++;
        }
    out->pool = dp_alloc(bytes ? bytes : 1, "the index's paths");
    out->paths = dp_alloc_zeroed((size_t)(kept ? kept : 1), sizeof *out->paths, "the index's paths");
    out->labels = dp_alloc_zeroed((size_t)(kept ? kept : 1), sizeof *out->labels, "the index's labels");
    if (!out->pool || !out->paths || !out->labels) return DP_ERR_NOMEM;
    char *p = out->pool;
    for (int i = 0; i < files->count; i++)
        if (ok[i]) {
            size_t n = strlen(files->items[i]) + 1;
            memcpy(p, files->items[i], n);
            out->paths[out->count] = p;
            out->labels[out->count++] = labels[i];
            p += n;
        }
    return DP_OK;
}

dp_status_t dp_image_index_build(const char *dir, const char *split, char *const *classes, int num_classes,
                                 const dp_index_options_t *options, dp_image_index_t *out) {
    memset(out, 0, sizeof *out);
    const dp_index_options_t none = {0};
    const dp_index_options_t *o = options ? options : &none;
    strings_t files = {0};
    int32_t *labels = NULL;
    probe_job_t job = {0};
    if (o->progress) o->progress(o->progress_ctx, split, 0, 0);
    char split_dir[PATH_BYTES];
    dp_status_t status = split_path(split_dir, dir, split);
    size_t root_length = strlen(split_dir) + 1;
    if (status == DP_OK && is_regular_file(split_dir)) { /* an image list (image_list.c) */
        status = index_list(split_dir, classes, num_classes, out, &files, &labels, &root_length);
    } else {
        if (status == DP_OK) status = find_classes(dir, split, classes, num_classes, out);
        if (status == DP_OK) status = list_split(dir, split, !classes, out, &files, &labels);
    }
    if (status == DP_OK) {
        job.paths = files.items;
        job.count = files.count;
        job.ignore_exif = o->ignore_exif;
        job.ok = dp_alloc_zeroed((size_t)files.count, 1, "the index's verdicts");
        job.messages = dp_alloc_zeroed((size_t)files.count, sizeof *job.messages, "the index's messages");
        status = job.ok && job.messages ? probe_all(&job, o->threads > 0 ? o->threads : 1, split, o) : DP_ERR_NOMEM;
    }
    int bad = 0;
    for (int i = 0; status == DP_OK && i < job.count; i++) bad += !job.ok[i];
    if (status == DP_OK && bad > 0 && !o->skip_bad) status = report_bad(&job, bad, split_dir);
    if (status == DP_OK && bad == job.count)
        status = dp_fail(DP_ERR_FORMAT, "%s: none of its %d files can be read as an image", split_dir, job.count);
    if (status == DP_OK) {
        out->skipped = bad;
        out->root_length = root_length;
        status = keep_files(&files, labels, job.ok, out);
    }
    for (int i = 0; job.messages && i < job.count; i++) free(job.messages[i]);
    free(job.messages);
    free(job.ok);
    free(labels);
    strings_free(&files);
    if (status != DP_OK) dp_image_index_free(out);
    return status;
}

/* --- a checkpoint's class names ------------------------------------------------------- */
/* "a, b, c" (the names while they fit in `size`, then "...") */
static void name_list(char *const *names, int count, char *text, size_t size) {
    size_t at = 0;
    text[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (at + strlen(names[i]) + 8 >= size) {
            snprintf(text + at, size - at, "%s...", i ? ", " : "");
            return;
        }
        at += (size_t)snprintf(text + at, size - at, "%s%s", i ? ", " : "", names[i]);
    }
}

dp_status_t dp_image_folder_match_classes(const char *dir, const char *split, char *const *classes, int num_classes,
                                          int *by_name, char *warning, size_t size) {
    *by_name = 1;
    if (size) warning[0] = '\0';
    char path[PATH_BYTES];
    strings_t folders = {0};
    if (split_path(path, dir, split) != DP_OK || list_dir(path, &folders, NULL) != DP_OK) {
        strings_free(&folders);
        dp_error_clear(); /* dp_image_index_build says what is wrong with the folder */
        return DP_OK;
    }
    int known = 0;
    const char *unknown = NULL; /* the folders are sorted: the first one that is no class */
    for (int f = 0; f < folders.count; f++) {
        if (class_position(classes, num_classes, folders.items[f]) >= 0) known++;
        else if (!unknown) unknown = folders.items[f];
    }
    char names[200];
    name_list(classes, num_classes, names, sizeof names);
    dp_status_t status = DP_OK;
    if (unknown && known == 0) {
        *by_name = 0;
        snprintf(warning, size, "none of the class folders of %s is a class of the checkpoint (%s): labelled in "
                 "their sorted order, as torchvision's ImageFolder labels them (%s: output 0)", path, names,
                 folders.items[0]);
    } else if (unknown) {
        status = dp_fail(DP_ERR_FORMAT, "%s/%s: '%s' is not one of the checkpoint's %d classes (%s)", path, unknown,
                         unknown, num_classes, names);
    }
    strings_free(&folders);
    return status;
}

dp_status_t dp_image_index_relabel(dp_image_index_t *index, char *const *classes, int num_classes) {
    int *to = dp_alloc_zeroed((size_t)index->num_classes, sizeof *to, "class map");
    char **names = dp_alloc_zeroed((size_t)num_classes, sizeof *names, "class names");
    dp_status_t status = to && names ? DP_OK : DP_ERR_NOMEM;
    for (int c = 0; status == DP_OK && c < index->num_classes; c++) {
        to[c] = class_position(classes, num_classes, index->class_names[c]);
        if (to[c] < 0) status = dp_fail(DP_ERR_FORMAT, "'%s' is not a class of the checkpoint", index->class_names[c]);
    }
    for (int k = 0; status == DP_OK && k < num_classes; k++)
        if (!(names[k] = strdup(classes[k]))) status = dp_fail(DP_ERR_NOMEM, "out of memory copying the class names");
    if (status != DP_OK) {
        for (int k = 0; names && k < num_classes; k++) free(names[k]);
        free(names);
        free(to);
        return status;
    }
    for (int i = 0; i < index->count; i++) index->labels[i] = to[index->labels[i]];
    for (int c = 0; c < index->num_classes; c++) free(index->class_names[c]);
    free(index->class_names);
    index->class_names = names;
    index->num_classes = num_classes;
    free(to);
    return DP_OK;
}
