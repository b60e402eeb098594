/* confusion.h - a classifier's confusion matrix: predictions counted into
 * it, and each class's figures read from it (sklearn's confusion_matrix and
 * classification_report). A matrix of k classes is k x k int64 in host
 * memory, [true * k + predicted]: row i holds the samples labelled i, column
 * j those predicted as j. parallel.h dp_trainer_evaluate_confusion counts
 * one over an evaluation on every device and rank; `dptrain eval
 * --per-class` and `--confusion FILE` print these figures and the matrix.
 */
#ifndef DPTRAIN_CONFUSION_MATRIX_H
#define DPTRAIN_CONFUSION_MATRIX_H

#include <stdint.h>

#include "dptrain/status.h"

/* Adds n samples to matrix (k x k): sample i's prediction is the first
 * largest of its k logits (logits[i * k .. i * k + k - 1], host memory; the
 * rule the evaluation's correct count uses, so the diagonal adds up to it),
 * counted at [labels[i]][prediction]. A label outside 0 .. k-1 is DP_ERR_ARG
 * naming it, with nothing added. */
dp_status_t dp_confusion_count(int64_t *matrix, int k, const float *logits, const int32_t *labels, int n);

/* One class's figures in a matrix. A ratio with nothing to divide by is NaN:
 * the recall of a class without samples, the precision of a class nothing
 * was predicted as (sklearn's "ill-defined" cases; `dptrain eval` prints
 * "-" for them). */
typedef struct {
    int64_t samples;   /* the row's sum: samples labelled with the class */
    int64_t correct;   /* the diagonal entry */
    int64_t predicted; /* the column's sum: samples predicted as the class */
    double recall;     /* correct / samples, or NaN */
    double precision;  /* correct / predicted, or NaN */
    int mistaken_for;  /* the other class its samples are most often predicted as (the lowest on a tie), or -1
                        * when none of them is predicted as another class */
    int64_t mistaken_count; /* how many of its samples are predicted as mistaken_for (0 with -1) */
} dp_class_figures_t;

/* Class cls's figures in matrix (k x k). */
void dp_confusion_class(const int64_t *matrix, int k, int cls, dp_class_figures_t *out);
/* The mean recall over the classes with samples (the balanced accuracy);
 * *with_samples gets their number. NaN when no class has any. */
double dp_confusion_mean_recall(const int64_t *matrix, int k, int *with_samples);

#endif
