/* fit_stop.h - what dp_fit (fit.c) does at a step boundary besides
 * training (fit_stop.c): the stop that every rank agrees on (preemption:
 * fit.h's stop_request), the step reached for a watcher (step_reached),
 * and the test suite's injected faults (fault_inject.h). Library internal.
 */
#ifndef DPTRAIN_FIT_STOP_H
#define DPTRAIN_FIT_STOP_H

#include <stdint.h>

#include "dptrain/fit.h"
#include "fault_inject.h"

typedef struct {
    const dp_fit_config_t *config;
    int ranks;
    float vote;  /* (1) in flight across ranks: how many ranks were asked to stop */
    int pending; /* a vote is queued (its sum not read yet) */
    int agreed;  /* every rank knows that one was asked: stop at the next boundary inside an epoch */
    dp_faults_t faults;
    /* the last checkpoint this run wrote to save_path (a divergence's line
     * says it): saved 1 once one is, at saved_epochs completed epochs and
     * saved_step steps into the next */
    int saved, saved_epochs, saved_step;
} dp_fit_stop_t;

/* Before the loop: reads DPTRAIN_FAULT (a bad one: DP_ERR_ARG). */
dp_status_t dp_fit_stop_begin(dp_fit_stop_t *s, const dp_fit_config_t *config);

/* At every step boundary, on every rank (the same calls everywhere), right
 * after the step: stores the step reached (step_reached); *stop = 1 when
 * every rank stops here (inside: the step is
 * not the epoch's last, whose end saves anyway). Across ranks the decision
 * is one float summed per step (queued here, read at the next boundary:
 * it never waits), so a request is acted on one or two steps later. */
dp_status_t dp_fit_stop_vote(dp_fit_stop_t *s, int inside, int *stop);

/* After the stop's checkpoint (`saved`: rank 0's save, DP_OK elsewhere):
 * every rank's DP_ERR_PREEMPTED with the line saying where it stopped, or
 * the save's failure on every rank. */
dp_status_t dp_fit_stop_saved(dp_fit_stop_t *s, dp_status_t saved, int epoch, int step, int steps);

/* After the boundary's checkpoint: an injected fault due at this step
 * count. */
void dp_fit_stop_after(const dp_fit_stop_t *s, uint64_t step_count);

/* When dp_fit returns: waits for a vote in flight. */
void dp_fit_stop_end(dp_fit_stop_t *s);

#endif
