/* fit_finite.h - a run that diverged stops before it saves (fit_finite.c):
 * dp_fit checks replica 0's parameters and running statistics at every
 * epoch's end and before every checkpoint inside an epoch, on every rank
 * (they hold the same floats: the same answer, the same stop). Library
 * internal. */
#ifndef DPTRAIN_FIT_FINITE_H
#define DPTRAIN_FIT_FINITE_H

#include "dptrain/fit.h"

#include "fit_stop.h"

/* DP_OK while every float of the model is finite; else DP_ERR_DIVERGED
 * and one line: how many floats are NaN or infinite and the first
 * tensor holding one, the epoch (1-based) and step, the last checkpoint
 * this run wrote (stop->saved ...), and what may help. */
dp_status_t dp_fit_check_finite(const dp_fit_config_t *config, const dp_fit_stop_t *stop, int epoch, int step,
                                int steps);

#endif
