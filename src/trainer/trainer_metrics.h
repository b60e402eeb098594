/* trainer_metrics.h - the loss and accuracy sums counted on the devices
 * (trainer_metrics.c), as the trainer (trainer.c) uses them. Library
 * internal.
 */
#ifndef DPTRAIN_TRAINER_METRICS_H
#define DPTRAIN_TRAINER_METRICS_H

#include "dptrain/parallel.h"

/* One zeroed block per backend table, [training | evaluation], 2 doubles
 * per device in each; t->host_metrics for their downloads. */
dp_status_t dp_trainer_metrics_alloc(dp_trainer_t *t);
/* The training (eval = 0) or evaluation sums of every device into
 * t->host_metrics + 2k (device d's at 2d): one download per block, unless
 * `download` is 0; then, with `reset`, the blocks' sums zeroed. */
dp_status_t dp_trainer_metrics_move(dp_trainer_t *t, int eval, int download, int reset);
/* Device d's correct count as read: a whole number from 0 to INT_MAX, or
 * the download failed. */
dp_status_t dp_trainer_metrics_count(const dp_trainer_t *t, int d, double value, int *count);

#endif
