/* trainer_metrics.h - the loss and accuracy sums counted on the devices
 * (trainer_metrics.c), as the trainer (trainer.c) uses them. Library
 * internal.
 */
#ifndef DPTRAIN_TRAINER_METRICS_H
#define DPTRAIN_TRAINER_METRICS_H

#include "dptrain/parallel.h"

/* One zeroed block per backend table, [training | evaluation],
 * DP_METRICS_SUMS doubles per device in each; t->host_metrics for their
 * downloads. */
dp_status_t dp_trainer_metrics_alloc(dp_trainer_t *t);
/* The training (eval = 0) or evaluation sums of every device into
 * t->host_metrics + mk (device d's at md, m = DP_METRICS_SUMS): one
 * download per block, unless `download` is 0; then, with `reset`, the
 * blocks' sums zeroed. */
dp_status_t dp_trainer_metrics_move(dp_trainer_t *t, int eval, int download, int reset);
/* Device d's `what` count ("correct", "top-5") as read: a whole number
 * from 0 to INT_MAX, or the download failed. */
dp_status_t dp_trainer_metrics_count(const dp_trainer_t *t, int d, const char *what, double value, int *count);

#endif
