/* fit_log.h - dp_fit's lines inside an epoch (fit.h log_every_steps,
 * fit_log.c): every N-th step the epoch's loss and accuracy so far, summed
 * over the ranks, the learning rate and the pace. Library internal. */
#ifndef DPTRAIN_FIT_LOG_H
#define DPTRAIN_FIT_LOG_H

#include "dptrain/fit.h"

typedef struct {
    double epoch_start, last_at; /* wall seconds: the epoch's (resumed) start, the last line */
    int first_step, last_seen;   /* the step the epoch started from; examples seen at the last line */
} dp_fit_log_clock_t;

/* At the epoch's start (or where a resume starts it: step, seen); now:
 * the monotonic clock's seconds, as for dp_fit_log_step. */
void dp_fit_log_start(dp_fit_log_clock_t *clock, int step, int seen, double now);

/* After step `step` of `steps` (1-based) of epoch `epoch` (1-based): on a
 * log_every_steps-th step but the last, peeks at the trainer's figures
 * (loss_sum, correct: this rank's, folded so far), sums them over the
 * ranks (every rank calls this at every step) and calls on_log. */
dp_status_t dp_fit_log_step(const dp_fit_config_t *config, void *ctx, dp_fit_log_clock_t *clock, int epoch, int step,
                            int steps, double loss_sum, int correct, int seen, double lr, double now);

#endif
