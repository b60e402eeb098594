/* schedule.h - learning-rate schedules: constant, step decay, cosine, each
 * with an optional linear warm-up; stepped once per iteration.
 *
 * The learning rate of step t (0-based: the t-th update of the run, counted
 * across epochs; N = steps_per_epoch, T = total_epochs * N, W = warm-up
 * steps) is a pure function of t, so a resumed run recomputes the same value
 * from its step count:
 *
 *   lr(t) = base(t) * warmup(t)
 *   base(t) = lr                                         constant
 *           = lr * gamma^floor(t / (step_epochs * N))     step
 *           = min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2   cosine
 *   warmup(t) = (t + 1) / W  for t < W, else 1
 *
 * (t >= T: cosine stays at min_lr.) As torch.optim.lr_scheduler stepped per
 * iteration: step is StepLR(step_size = step_epochs * N, gamma), cosine is
 * CosineAnnealingLR(T_max = T, eta_min = min_lr), and the warm-up is
 * LinearLR(start_factor = 1 / W, total_iters = W - 1) chained with them
 * (ChainedScheduler: the factors multiply). The epochs of the step decay
 * count from the start of the run, warm-up included (Goyal et al. 2017).
 */
#ifndef DPTRAIN_SCHEDULE_H
#define DPTRAIN_SCHEDULE_H

#include <stdint.h>

#include "dptrain/status.h"

typedef enum {
    DP_LR_CONSTANT,
    DP_LR_STEP,
    DP_LR_COSINE,
} dp_lr_schedule_kind_t;

typedef struct {
    dp_lr_schedule_kind_t kind;
    double lr;            /* the base learning rate, > 0 */
    int step_epochs;      /* step: decay every this many epochs, >= 1 */
    double gamma;         /* step: the factor, in (0, 1]; 0.1 when 0 is given */
    int total_epochs;     /* cosine: the length of the run, >= 1 */
    double min_lr;        /* cosine: the final learning rate, in [0, lr) */
    double warmup_epochs; /* warm-up length in epochs (rounded to steps), >= 0 */
    uint64_t warmup_steps; /* or in steps; at most one of the two is non-zero */
} dp_lr_schedule_t;

/* "constant", "step", "cosine" -> kind; -1 when unknown. */
int dp_lr_schedule_kind_from_name(const char *name);
const char *dp_lr_schedule_kind_name(dp_lr_schedule_kind_t kind);

/* Checks the fields the kind uses (and that the others are 0): a one-line
 * message naming the field, expected and found. */
dp_status_t dp_lr_schedule_check(const dp_lr_schedule_t *schedule);

/* W: the warm-up length in steps for epochs of steps_per_epoch steps. */
uint64_t dp_lr_schedule_warmup_steps(const dp_lr_schedule_t *schedule, uint64_t steps_per_epoch);

/* lr(step) as above; steps_per_epoch >= 1. */
double dp_lr_schedule_lr(const dp_lr_schedule_t *schedule, uint64_t step, uint64_t steps_per_epoch);

#endif
