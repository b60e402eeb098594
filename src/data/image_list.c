/* image_list.c - an image list: a text or CSV file naming image files and
 * their labels, the other way (beside class folders) to say what an image
 * folder's split holds (image_folder.h; docs/data.md "Image lists").
 *
 * The formats, as the tools users bring lists from write them:
 * - text (any name not ending in .csv): one image a line, `PATH LABEL`,
 *   the label the line's last field after white space (so a path may hold
 *   spaces), as PaddleClas's, MMPretrain's, DALI's and Caffe's lists;
 *   blank lines and lines starting with '#' are skipped;
 * - CSV (.csv): a header line, then `PATH,LABEL[,...]` (RFC 4180 quoting;
 *   columns after the second ignored), as Kaggle's train.csv.
 * A UTF-8 byte-order mark and CR line ends are taken. A path is relative to
 * the list's folder, or absolute (then every path of the list is).
 *
 * The classes of a training list (classes NULL): when every label is a
 * non-negative integer, the label is the class's number (PaddleClas's and
 * Caffe's lists) and the classes are "0" .. the largest; otherwise the
 * labels are class names, sorted in byte order as class folders are. A
 * test list's labels (classes given) are among those names; a list none of
 * whose labels is a name and whose labels are all integers below the class
 * count is read as numbers (an ImageNet val.txt against classes named by
 * synsets). Every problem is one line, `LIST:LINE: what`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "image_internal.h"

#define MAX_LIST_BYTES (1L << 31)  /* 2 GiB of text: some 30 million lines */
#define MAX_LIST_CLASSES (1 << 20) /* as class folders */
#define MAX_ENTRIES (1 << 30)

typedef struct {
    char **paths, **labels; /* (count) as written */
    int *lines;             /* (count) each entry's line number */
    int count, capacity;
} entries_t;

static void entries_free(entries_t *e) {
    for (int i = 0; i < e->count; i++) free(e->paths[i]), free(e->labels[i]);
    free(e->paths), free(e->labels), free(e->lines);
    memset(e, 0, sizeof *e);
}

static dp_status_t entries_add(entries_t *e, const char *list, int line, const char *path, size_t path_len,
                               const char *label, size_t label_len) {
    if (e->count == e->capacity) {
        if (e->capacity >= MAX_ENTRIES / 2) return dp_fail(DP_ERR_FORMAT, "%s: more than %d images", list, MAX_ENTRIES);
        int capacity = e->capacity ? 2 * e->capacity : 256;
        char **paths = realloc(e->paths, sizeof *paths * (size_t)capacity);
        if (paths) e->paths = paths;
        char **labels = realloc(e->labels, sizeof *labels * (size_t)capacity);
        if (labels) e->labels = labels;
        int *lines = realloc(e->lines, sizeof *lines * (size_t)capacity);
        if (lines) e->lines = lines;
        if (!paths || !labels || !lines) return dp_fail(DP_ERR_NOMEM, "out of memory reading %s", list);
        e->capacity = capacity;
    }
    e->paths[e->count] = strndup(path, path_len);
    e->labels[e->count] = strndup(label, label_len);
    e->lines[e->count] = line;
    e->count++; /* freed by entries_free even when a copy failed */
    if (!e->paths[e->count - 1] || !e->labels[e->count - 1])
        return dp_fail(DP_ERR_NOMEM, "out of memory reading %s", list);
    return DP_OK;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* A text line (no '\n', CR stripped): PATH LABEL, the label its last field. */
static dp_status_t text_line(const char *list, int number, const char *line, size_t n, entries_t *e) {
    while (n > 0 && is_blank(line[n - 1])) n--;
    size_t start = 0;
    while (start < n && is_blank(line[start])) start++;
    if (start == n || line[start] == '#') return DP_OK; /* blank or a comment */
    size_t label = n;
    while (label > start && !is_blank(line[label - 1])) label--;
    if (label == start)
        return dp_fail(DP_ERR_FORMAT, "%s:%d: '%.*s' has no label (a text list's line is PATH LABEL)", list, number,
                       (int)(n - start < 80 ? n - start : 80), line + start);
    size_t path_end = label;
    while (path_end > start && is_blank(line[path_end - 1])) path_end--;
    return entries_add(e, list, number, line + start, path_end - start, line + label, n - label);
}

/* The next CSV field of line[*at..n) into out (unquoted, "" made "); *at
 * past its comma. Unquoted fields lose the blanks around them. */
static dp_status_t csv_field(const char *list, int number, const char *line, size_t n, size_t *at, char *out,
                             size_t size, size_t *len) {
    size_t i = *at, k = 0;
    while (i < n && is_blank(line[i])) i++;
    if (i < n && line[i] == '"') {
        for (i++;; i++) {
            if (i >= n)
                return dp_fail(DP_ERR_FORMAT, "%s:%d: a quoted field without its closing quote (a field spanning "
                               "lines is not read)", list, number);
            if (line[i] == '"' && i + 1 < n && line[i + 1] == '"') i++;
            else if (line[i] == '"') break;
            if (k + 1 < size) out[k++] = line[i];
        }
        i++;
        while (i < n && is_blank(line[i])) i++;
        if (i < n && line[i] != ',')
            return dp_fail(DP_ERR_FORMAT, "%s:%d: text after a quoted field's closing quote", list, number);
    } else {
        while (i < n && line[i] != ',') {
            if (k + 1 < size) out[k++] = line[i];
            i++;
        }
        while (k > 0 && is_blank(out[k - 1])) k--;
    }
    if (k + 1 >= size) return dp_fail(DP_ERR_FORMAT, "%s:%d: a field of more than %zu bytes", list, number, size - 2);
    out[k] = '\0';
    *len = k;
    *at = i < n ? i + 1 : n + 1; /* n + 1: no field follows */
    return DP_OK;
}

/* A CSV line after the header: PATH,LABEL[,...]. */
static dp_status_t csv_line(const char *list, int number, const char *line, size_t n, entries_t *e) {
    size_t start = 0;
    while (start < n && is_blank(line[start])) start++;
    if (start == n) return DP_OK;
    char path[4096], label[1024];
    size_t at = 0, path_len, label_len;
    DP_TRY(csv_field(list, number, line, n, &at, path, sizeof path, &path_len));
    if (at > n) return dp_fail(DP_ERR_FORMAT, "%s:%d: one field, expected PATH,LABEL", list, number);
    DP_TRY(csv_field(list, number, line, n, &at, label, sizeof label, &label_len));
    if (!path_len || !label_len)
        return dp_fail(DP_ERR_FORMAT, "%s:%d: an empty %s (expected PATH,LABEL)", list, number,
                       path_len ? "label" : "path");
    return entries_add(e, list, number, path, path_len, label, label_len);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

int dp_image_list_is_csv(const char *list) { return ends_with(list, ".csv"); }

/* The whole file, its lines handed to text_line or csv_line. */
static dp_status_t read_entries(const char *list, entries_t *e) {
    FILE *f = fopen(list, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open the image list (%s)", list, strerror(errno));
    const int csv = dp_image_list_is_csv(list);
    char *line = NULL;
    size_t capacity = 0;
    ssize_t got;
    long total = 0;
    int number = 0;
    dp_status_t status = DP_OK;
    while (status == DP_OK && (got = getline(&line, &capacity, f)) >= 0) {
        number++;
        total += got;
        if (total > MAX_LIST_BYTES) {
            status = dp_fail(DP_ERR_FORMAT, "%s: more than %ld bytes", list, MAX_LIST_BYTES);
            break;
        }
        size_t n = (size_t)got, start = 0;
        if (memchr(line, '\0', n)) {
            status = dp_fail(DP_ERR_FORMAT, "%s:%d: a NUL byte (not a text file)", list, number);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (number == 1 && n >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) start = 3; /* UTF-8's byte-order mark */
        if (csv && number == 1) continue;                                       /* the header */
        status = (csv ? csv_line : text_line)(list, number, line + start, n - start, e);
    }
    if (status == DP_OK && ferror(f)) status = dp_fail(DP_ERR_IO, "%s: read error (%s)", list, strerror(errno));
    free(line);
    fclose(f);
    if (status == DP_OK && e->count == 0)
        status = dp_fail(DP_ERR_FORMAT, "%s: lists no image (%s)", list,
                         csv ? "a header line, then PATH,LABEL lines" : "PATH LABEL lines");
    return status;
}

/* A label as a class number: digits only, below MAX_LIST_CLASSES; else -1. */
static int label_number(const char *label) {
    long v = 0;
    if (!*label) return -1;
    for (const char *c = label; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = 10 * v + (*c - '0');
        if (v >= MAX_LIST_CLASSES) return -1;
    }
    return (int)v;
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
    const char *name;
    int position;
} named_t;

static int compare_named(const void *a, const void *b) {
    return strcmp(((const named_t *)a)->name, ((const named_t *)b)->name);
}

/* A training list's classes: numbers 0 .. max, or its sorted names. */
static dp_status_t own_classes(const char *list, const entries_t *e, dp_image_list_t *out) {
    int numbers = 1, largest = -1;
    for (int i = 0; i < e->count && numbers; i++) {
        int v = label_number(e->labels[i]);
        numbers = v >= 0;
        if (v > largest) largest = v;
    }
    char **names;
    int count;
    if (numbers) {
        count = largest + 1;
        if (!(names = dp_alloc_zeroed((size_t)count, sizeof *names, "class names"))) return DP_ERR_NOMEM;
        for (int c = 0; c < count; c++) {
            char text[16];
            snprintf(text, sizeof text, "%d", c);
            names[c] = strdup(text);
        }
    } else {
        char **sorted = dp_alloc((size_t)e->count * sizeof *sorted, "class names");
        if (!sorted) return DP_ERR_NOMEM;
        memcpy(sorted, e->labels, (size_t)e->count * sizeof *sorted);
        qsort(sorted, (size_t)e->count, sizeof *sorted, compare_strings);
        count = 0;
        for (int i = 0; i < e->count; i++)
            if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0) sorted[count++] = sorted[i];
        if (count > MAX_LIST_CLASSES) {
            free(sorted);
            return dp_fail(DP_ERR_FORMAT, "%s: %d classes, at most %d", list, count, MAX_LIST_CLASSES);
        }
        names = dp_alloc_zeroed((size_t)count, sizeof *names, "class names");
        for (int c = 0; names && c < count; c++) names[c] = strdup(sorted[c]);
        free(sorted);
        if (!names) return DP_ERR_NOMEM;
    }
    out->class_names = names;
    out->num_classes = count;
    for (int c = 0; c < count; c++)
        if (!names[c]) return dp_fail(DP_ERR_NOMEM, "out of memory copying class names");
    return DP_OK;
}

/* Each entry's label as a position among the classes (see the header). */
static dp_status_t label_positions(const char *list, const entries_t *e, char *const *classes, int num_classes,
                                   int32_t *labels) {
    named_t *sorted = dp_alloc((size_t)num_classes * sizeof *sorted, "class names");
    if (!sorted) return DP_ERR_NOMEM;
    for (int c = 0; c < num_classes; c++) sorted[c] = (named_t){classes[c], c};
    qsort(sorted, (size_t)num_classes, sizeof *sorted, compare_named);
    int named = 0, first_unknown = -1, first_not_number = -1;
    for (int i = 0; i < e->count; i++) {
        named_t key = {e->labels[i], 0};
        const named_t *hit = bsearch(&key, sorted, (size_t)num_classes, sizeof *sorted, compare_named);
        labels[i] = hit ? hit->position : -1;
        named += hit != NULL;
        if (!hit && first_unknown < 0) first_unknown = i;
        int v = label_number(e->labels[i]);
        if ((v < 0 || v >= num_classes) && first_not_number < 0) first_not_number = i;
    }
    free(sorted);
    if (first_unknown < 0) return DP_OK;
    if (named == 0 && first_not_number < 0) { /* numbers against named classes */
        for (int i = 0; i < e->count; i++) labels[i] = label_number(e->labels[i]);
        return DP_OK;
    }
    if (named == 0) first_unknown = first_not_number; /* neither a name nor an output */
    char some[200] = "";
    for (int c = 0, at = 0; c < num_classes && at < 160; c++)
        at += snprintf(some + at, sizeof some - (size_t)at, "%s%s", c ? ", " : "", classes[c]);
    if (strlen(some) >= 160) strcpy(some + 156, "...");
    return dp_fail(DP_ERR_FORMAT, "%s:%d: label '%.80s' is not one of the %d classes (%s)", list,
                   e->lines[first_unknown], e->labels[first_unknown], num_classes, some);
}

/* Each path joined to the list's folder (or kept, when every one is absolute). */
static dp_status_t join_paths(const char *list, const entries_t *e, dp_image_list_t *out) {
    const char *slash = strrchr(list, '/');
    const size_t dir_len = slash ? (size_t)(slash - list) : 1; /* "." for a list in the working folder */
    const int absolute = e->paths[0][0] == '/';
    for (int i = 1; i < e->count; i++)
        if ((e->paths[i][0] == '/') != absolute)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: '%.80s' is %s, line %d's path is not (a list's paths are all "
                           "relative to its folder or all absolute)", list, e->lines[i], e->paths[i],
                           absolute ? "relative" : "absolute", e->lines[0]);
    if (!(out->paths = dp_alloc_zeroed((size_t)e->count, sizeof *out->paths, "the list's paths"))) return DP_ERR_NOMEM;
    for (int i = 0; i < e->count; i++) {
        size_t n = strlen(e->paths[i]);
        size_t bytes = absolute ? n + 1 : dir_len + 1 + n + 1;
        if (bytes > 4096)
            return dp_fail(DP_ERR_FORMAT, "%s:%d: the path is longer than 4095 bytes", list, e->lines[i]);
        if (!(out->paths[i] = malloc(bytes))) return dp_fail(DP_ERR_NOMEM, "out of memory reading %s", list);
        if (absolute) memcpy(out->paths[i], e->paths[i], n + 1);
        else snprintf(out->paths[i], bytes, "%.*s/%s", (int)dir_len, slash ? list : ".", e->paths[i]);
    }
    out->root_length = absolute ? 0 : dir_len + 1;
    return DP_OK;
}

void dp_image_list_clear(dp_image_list_t *l) {
    for (int i = 0; l->paths && i < l->count; i++) free(l->paths[i]);
    for (int c = 0; l->class_names && c < l->num_classes; c++) free(l->class_names[c]);
    free(l->paths), free(l->labels), free(l->class_names);
    memset(l, 0, sizeof *l);
}

dp_status_t dp_image_list_read(const char *list, char *const *classes, int num_classes, dp_image_list_t *out) {
    memset(out, 0, sizeof *out);
    entries_t e = {0};
    dp_status_t status = read_entries(list, &e);
    if (status == DP_OK) {
        out->count = e.count;
        out->labels = dp_alloc_zeroed((size_t)e.count, sizeof *out->labels, "the list's labels");
        status = out->labels ? DP_OK : DP_ERR_NOMEM;
    }
    if (status == DP_OK && !classes) {
        status = own_classes(list, &e, out);
        classes = out->class_names;
        num_classes = out->num_classes;
    }
    if (status == DP_OK) status = label_positions(list, &e, classes, num_classes, out->labels);
    if (status == DP_OK) status = join_paths(list, &e, out);
    entries_free(&e);
    if (status != DP_OK) dp_image_list_clear(out);
    return status;
}
