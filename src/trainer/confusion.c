/* confusion.c - confusion matrices (dptrain/confusion.h): predictions
 * counted into one, a class's figures read from it; and an evaluation's,
 * counted on the host from each shard's downloaded logits (confusion.h).
 * The counts are integers, so their sums over devices and ranks are the
 * same in any order: the matrix is the same for any device or rank count.
 */
#include "confusion.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"

dp_status_t dp_confusion_init(dp_confusion_t *c, int num_devices, int classes) {
    memset(c, 0, sizeof *c);
    if (classes < 1) return dp_fail(DP_ERR_ARG, "confusion matrix: %d classes", classes);
    c->classes = classes;
    c->num_devices = num_devices;
    c->counts = dp_alloc_zeroed((size_t)num_devices * classes * classes, sizeof(int64_t), "confusion matrix");
    c->logits = dp_alloc_zeroed((size_t)num_devices, sizeof(float *), "confusion matrix logits");
    c->cap = dp_alloc_zeroed((size_t)num_devices, sizeof(int), "confusion matrix logits");
    if (!c->counts || !c->logits || !c->cap) {
        dp_confusion_free(c);
        return DP_ERR_NOMEM;
    }
    return DP_OK;
}

void dp_confusion_free(dp_confusion_t *c) {
    for (int d = 0; c->logits && d < c->num_devices; d++) free(c->logits[d]);
    free(c->logits);
    free(c->cap);
    free(c->counts);
    memset(c, 0, sizeof *c);
}

dp_status_t dp_confusion_add_shard(dp_confusion_t *c, dp_replica_t *r, const float *logits, const int32_t *labels,
                                   int n) {
    const int d = r->index, k = c->classes;
    if (n > c->cap[d]) {
        free(c->logits[d]);
        c->cap[d] = 0;
        if (!(c->logits[d] = dp_alloc((size_t)n * k * sizeof(float), "confusion matrix logits"))) return DP_ERR_NOMEM;
        c->cap[d] = n;
    }
    float *host = c->logits[d];
    r->backend->download(r->backend->ctx, host, logits, (size_t)n * k * sizeof(float));
    if (r->backend->failure) DP_TRY(r->backend->failure(r->backend->ctx));
    return dp_confusion_count(c->counts + (size_t)d * k * k, k, host, labels, n);
}

dp_status_t dp_confusion_total(const dp_confusion_t *c, int64_t *out) {
    const size_t cells = (size_t)c->classes * c->classes;
    double *sums = dp_alloc_zeroed(cells, sizeof(double), "confusion matrix sums");
    if (!sums) return DP_ERR_NOMEM;
    for (int d = 0; d < c->num_devices; d++)
        for (size_t i = 0; i < cells; i++) sums[i] += (double)c->counts[(size_t)d * cells + i]; /* exact: < 2^53 */
    dp_status_t status = dp_world_sum_doubles(sums, (int)cells); /* every rank's, as the correct count */
    for (size_t i = 0; status == DP_OK && i < cells; i++) out[i] = (int64_t)sums[i];
    free(sums);
    return status;
}

dp_status_t dp_confusion_count(int64_t *matrix, int k, const float *logits, const int32_t *labels, int n) {
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return dp_fail(DP_ERR_ARG, "confusion matrix: label %d outside the model's %d classes", (int)labels[i], k);
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        matrix[(size_t)labels[i] * k + best]++;
    }
    return DP_OK;
}

void dp_confusion_class(const int64_t *matrix, int k, int cls, dp_class_figures_t *out) {
    dp_class_figures_t f = {.correct = matrix[(size_t)cls * k + cls], .mistaken_for = -1};
    for (int j = 0; j < k; j++) {
        const int64_t taken = matrix[(size_t)cls * k + j];
        f.samples += taken;
        f.predicted += matrix[(size_t)j * k + cls];
        if (j != cls && taken > f.mistaken_count) f.mistaken_count = taken, f.mistaken_for = j;
    }
    f.recall = f.samples > 0 ? (double)f.correct / (double)f.samples : NAN;
    f.precision = f.predicted > 0 ? (double)f.correct / (double)f.predicted : NAN;
    *out = f;
}

double dp_confusion_mean_recall(const int64_t *matrix, int k, int *with_samples) {
    double sum = 0.0;
    int classes = 0;
    for (int i = 0; i < k; i++) {
        dp_class_figures_t f;
        dp_confusion_class(matrix, k, i, &f);
        if (f.samples > 0) sum += f.recall, classes++;
    }
    *with_samples = classes;
    return classes > 0 ? sum / classes : NAN;
}
