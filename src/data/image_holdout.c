/* image_holdout.c - a test split held out of an image folder's index
 * (image_folder.h dp_image_index_hold_out), for folders that have no test
 * folder: DIR/CLASS/... alone, or DIR/train without DIR/test.
 *
 * Which files: within each class, the files ordered by a 64-bit FNV-1a
 * hash of their path below the folder (CLASS/.../NAME, ties by the path),
 * and the first round(fraction x n) of them held out, at most n - 1 (a
 * class keeps one training image). So the split is stratified (each
 * class's share as asked, as scikit-learn's stratified split gives), a
 * sample unrelated to the names (which often follow the time a photo was
 * taken: the first or last tenth by name would be one afternoon's
 * photos), needs no seed, does not depend on the order the files were
 * listed in, the machine or the rank, and a file added to a class moves at
 * most one other file across the line (a shuffle of the listing's
 * positions would move many). Both parts keep the index order.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image_folder.h"
#include "../core/hash.h"

/* The hash's start: FNV's offset basis with its last digit lost
 * (14695981039346656037 is DP_FNV1A_SEED), kept: the files held out are
 * those every checkpoint's data.holdout has meant since, which eval holds
 * out again. */
#define HOLDOUT_BASIS 1469598103934665603ull

typedef struct {
    uint64_t hash;
    const char *path; /* below the folder */
    int index;
} keyed_t;

static int by_hash(const void *a, const void *b) {
    const keyed_t *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* The files of `from` whose mark equals `want`, as an index of its own
 * (paths copied, classes copied). */
static dp_status_t subset(const dp_image_index_t *from, const unsigned char *held, int want, dp_image_index_t *out) {
    memset(out, 0, sizeof *out);
    size_t bytes = 1;
    int count = 0;
    for (int i = 0; i < from->count; i++)
        if (held[i] == want) {
            bytes += strlen(from->paths[i]) + 1;
            count++;
        }
    out->pool = dp_alloc(bytes, "the index's paths");
    out->paths = dp_alloc_zeroed((size_t)(count ? count : 1), sizeof *out->paths, "the index's paths");
    out->labels = dp_alloc_zeroed((size_t)(count ? count : 1), sizeof *out->labels, "the index's labels");
    out->class_names = dp_alloc_zeroed((size_t)from->num_classes, sizeof *out->class_names, "class names");
    if (!out->pool || !out->paths || !out->labels || !out->class_names) goto nomem;
    out->num_classes = from->num_classes;
    for (int c = 0; c < from->num_classes; c++)
        if (!(out->class_names[c] = strdup(from->class_names[c]))) goto nomem;
    char *p = out->pool;
    for (int i = 0; i < from->count; i++)
        if (held[i] == want) {
            size_t n = strlen(from->paths[i]) + 1;
            memcpy(p, from->paths[i], n);
            out->paths[out->count] = p;
            out->labels[out->count++] = from->labels[i];
            p += n;
        }
    out->root_length = from->root_length;
    return DP_OK;
nomem:
    dp_image_index_free(out);
    return dp_fail(DP_ERR_NOMEM, "out of memory holding out a test split");
}

dp_status_t dp_image_index_hold_out(dp_image_index_t *index, double fraction, const char *what,
                                    dp_image_index_t *held) {
    memset(held, 0, sizeof *held);
    if (!(fraction > 0.0 && fraction < 1.0))
        return dp_fail(DP_ERR_ARG, "--holdout %g: the fraction of each class held out for testing must be above 0 "
                       "and below 1", fraction);
    const int n = index->count;
    keyed_t *keyed = dp_alloc_zeroed((size_t)(n ? n : 1), sizeof *keyed, "the hold-out's order");
    unsigned char *mark = dp_alloc_zeroed((size_t)(n ? n : 1), 1, "the hold-out's marks");
    int *start = dp_alloc_zeroed((size_t)index->num_classes + 1, sizeof *start, "the hold-out's classes");
    dp_status_t status = keyed && mark && start ? DP_OK : DP_ERR_NOMEM;
    int total = 0;
    if (status == DP_OK) {
        /* the files grouped by class (counting sort), each group ordered by hash */
        for (int i = 0; i < n; i++) start[index->labels[i] + 1]++;
        for (int c = 0; c < index->num_classes; c++) start[c + 1] += start[c];
        int *fill = dp_alloc_zeroed((size_t)index->num_classes + 1, sizeof *fill, "the hold-out's classes");
        if (!fill) status = DP_ERR_NOMEM;
        for (int c = 0; fill && c < index->num_classes; c++) fill[c] = start[c];
        for (int i = 0; fill && i < n; i++) {
            const char *below = index->paths[i] + index->root_length;
            keyed[fill[index->labels[i]]++] = (keyed_t){dp_fnv1a(HOLDOUT_BASIS, below, strlen(below)), below, i};
        }
        free(fill);
        for (int c = 0; status == DP_OK && c < index->num_classes; c++) {
            const int in_class = start[c + 1] - start[c];
            int take = (int)(fraction * in_class + 0.5);
            if (take > in_class - 1) take = in_class > 0 ? in_class - 1 : 0;
            qsort(keyed + start[c], (size_t)in_class, sizeof *keyed, by_hash);
            for (int k = 0; k < take; k++) mark[keyed[start[c] + k].index] = 1;
            total += take;
        }
    }
    if (status == DP_OK && total == 0)
        status = dp_fail(DP_ERR_FORMAT, "%s: too few images to hold out a test split at --holdout %g (%d images in %d "
                         "classes): give a larger fraction, or a test folder (DIR/test/CLASS/...)", what, fraction, n,
                         index->num_classes);
    dp_image_index_t kept = {0};
    if (status == DP_OK) status = subset(index, mark, 1, held);
    if (status == DP_OK) status = subset(index, mark, 0, &kept);
    if (status == DP_OK) {
        kept.skipped = index->skipped;
        dp_image_index_free(index);
        *index = kept;
    } else {
        dp_image_index_free(held);
    }
    free(keyed);
    free(mark);
    free(start);
    return status;
}
