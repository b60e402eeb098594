/* schedule.h - learning-rate schedules: constant, step decay, cosine,
 * exponential, each with an optional warm-up (linear or constant, chained
 * with the schedule or before it); stepped once per iteration.
 *
 * The learning rate of step t (0-based: the t-th update of the run, counted
 * across epochs; N = steps_per_epoch, T = total_epochs * N, W = warm-up
 * steps, F = warmup_start) is a pure function of t, so a resumed run
 * recomputes the same value from its step count:
 *
 *   lr(t) = base(t) * warmup(t)                  chained (the default)
 *   lr(t) = lr * warmup(t) for t < W, else base'(t - W)   sequential
 *   base(t) = lr                                         constant
 *           = lr * gamma^floor(t / (step_epochs * N))     step
 *           = min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2   cosine
 *           = lr * gamma^floor(t / N)                     exponential
 *   base'   = base with cosine's T replaced by T - W
 *   warmup(t) = (t + 1) / W          linear, F not given (0)
 *             = F + (1 - F) * t / W   linear, F given
 *             = F (1 / W when not given)   constant
 *   for t < W; warmup(t) = 1 from t = W on.
 *
 * (t >= T: cosine stays at min_lr.) As torch.optim.lr_scheduler stepped per
 * iteration: step is StepLR(step_size = step_epochs * N, gamma), cosine is
 * CosineAnnealingLR(T_max = T, eta_min = min_lr), and the default warm-up is
 * LinearLR(start_factor = 1 / W, total_iters = W - 1) chained with them
 * (ChainedScheduler: the factors multiply); with F it is LinearLR(
 * start_factor = F, total_iters = W), the constant one ConstantLR(factor = F,
 * total_iters = W). Exponential is ExponentialLR(gamma) stepped once per
 * epoch (torchvision's): floor(t / N) gives its value at every step.
 * Sequential is SequentialLR([warm-up, main], milestones = [W]), the main
 * schedule counting from the warm-up's end, cosine's T_max = T - W.
 * torchvision's references/classification/train.py steps all of them once
 * per epoch: its --lr-warmup-epochs E --lr-warmup-method M --lr-warmup-decay
 * F is warmup_epochs E, warmup_method M, warmup_start F, sequential, here
 * stepped per iteration (W = E * N): the constant warm-up, step and
 * exponential schedules give torchvision's values at every step, linear
 * and cosine its values at each epoch's first step and move within epochs.
 * The epochs of the step decay count from the start of the run, warm-up
 * included (Goyal et al. 2017), unless sequential.
 */
#ifndef DPTRAIN_SCHEDULE_H
#define DPTRAIN_SCHEDULE_H

#include <stdint.h>

#include "dptrain/status.h"

typedef enum {
    DP_LR_CONSTANT,
    DP_LR_STEP,
    DP_LR_COSINE,
    DP_LR_EXPONENTIAL,
} dp_lr_schedule_kind_t;

typedef enum {
    DP_WARMUP_LINEAR,   /* the default */
    DP_WARMUP_CONSTANT,
} dp_lr_warmup_method_t;

typedef struct {
    dp_lr_schedule_kind_t kind;
    double lr;            /* the base learning rate, > 0 */
    int step_epochs;      /* step: decay every this many epochs, >= 1 */
    double gamma;         /* step: the factor, in (0, 1]; 0.1 when 0 is given;
                             exponential: the factor per epoch, in (0, 1] */
    int total_epochs;     /* cosine: the length of the run, >= 1 */
    double min_lr;        /* cosine: the final learning rate, in [0, lr) */
    double warmup_epochs; /* warm-up length in epochs (rounded to steps), >= 0 */
    uint64_t warmup_steps; /* or in steps; at most one of the two is non-zero */
    /* with a warm-up only (else linear, 0, 0): */
    dp_lr_warmup_method_t warmup_method;
    double warmup_start;   /* F, the factor at step 0, in (0, 1]; 0: not given (1 / W) */
    int warmup_sequential; /* 1: the schedule starts after the warm-up; 0: chained */
} dp_lr_schedule_t;

/* "constant", "step", "cosine", "exponential" -> kind; -1 when unknown. */
int dp_lr_schedule_kind_from_name(const char *name);
const char *dp_lr_schedule_kind_name(dp_lr_schedule_kind_t kind);
/* "linear", "constant" -> method; -1 when unknown. */
int dp_lr_warmup_method_from_name(const char *name);
const char *dp_lr_warmup_method_name(dp_lr_warmup_method_t method);

/* Checks the fields the kind uses (and that the others are 0): a one-line
 * message naming the field, expected and found. */
dp_status_t dp_lr_schedule_check(const dp_lr_schedule_t *schedule);

/* W: the warm-up length in steps for epochs of steps_per_epoch steps. */
uint64_t dp_lr_schedule_warmup_steps(const dp_lr_schedule_t *schedule, uint64_t steps_per_epoch);

/* lr(step) as above; steps_per_epoch >= 1. */
double dp_lr_schedule_lr(const dp_lr_schedule_t *schedule, uint64_t step, uint64_t steps_per_epoch);

#endif
