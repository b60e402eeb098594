/* eval_report.h - `dptrain eval --per-class` and `--confusion FILE`: the
 * per-class table and the confusion matrix's CSV file from an evaluation's
 * counts (parallel.h dp_trainer_evaluate_confusion; the figures are
 * confusion.h's). */
#ifndef DPTRAIN_CLI_EVAL_REPORT_H
#define DPTRAIN_CLI_EVAL_REPORT_H

#include <stdint.h>

#include "dptrain/status.h"

typedef struct {
    const int64_t *counts;   /* (classes x classes) [true][predicted] */
    int classes;             /* the model's outputs */
    const char *const *names; /* (classes) the classes' names (class_names.h cli_class_names) */
} eval_counts_t;

/* One row per class: images, correct, recall, precision, the class it is
 * most often taken for; then the mean recall over the classes with images.
 * The name column is as wide as the longest name, up to 28 columns (a
 * longer one is cut and ends in "..."). */
void eval_report_print(const eval_counts_t *e);
/* The matrix as CSV (a header of predicted names, a row per true class),
 * written atomically; DP_ERR_IO naming the path when it cannot be. */
dp_status_t eval_report_write_csv(const eval_counts_t *e, const char *path);

#endif
