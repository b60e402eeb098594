/* schedule.c - learning-rate schedules as pure functions of the step count
 * (the formulas are in schedule.h). */
#include "dptrain/schedule.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {
    [DP_LR_CONSTANT] = "constant",
    [DP_LR_STEP] = "step",
    [DP_LR_COSINE] = "cosine",
    [DP_LR_EXPONENTIAL] = "exponential",
};
#define NUM_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DP_LR_EXPONENTIAL + 1, "a name for every kind");
static const char *const method_names[] = {[DP_WARMUP_LINEAR] = "linear", [DP_WARMUP_CONSTANT] = "constant"};

int dp_lr_schedule_kind_from_name(const char *name) {
    for (int k = 0; k < NUM_KINDS; k++)
        if (strcmp(name, kind_names[k]) == 0) return k;
    return -1;
}

const char *dp_lr_schedule_kind_name(dp_lr_schedule_kind_t kind) {
    return (int)kind >= 0 && (int)kind < NUM_KINDS ? kind_names[kind] : "?";
}

int dp_lr_warmup_method_from_name(const char *name) {
    for (int m = 0; m <= DP_WARMUP_CONSTANT; m++)
        if (strcmp(name, method_names[m]) == 0) return m;
    return -1;
}

const char *dp_lr_warmup_method_name(dp_lr_warmup_method_t method) {
    return (int)method >= 0 && method <= DP_WARMUP_CONSTANT ? method_names[method] : "?";
}

/* The warm-up's method, start factor and placement (their defaults without a warm-up length). */
static dp_status_t check_warmup(const dp_lr_schedule_t *s) {
    if (!(s->warmup_epochs >= 0.0) || !isfinite(s->warmup_epochs))
        return dp_fail(DP_ERR_ARG, "lr schedule: warm-up epochs must be >= 0, found %g", s->warmup_epochs);
    if (s->warmup_epochs > 0.0 && s->warmup_steps > 0)
        return dp_fail(DP_ERR_ARG, "lr schedule: give the warm-up in epochs or in steps, not both");
    if ((int)s->warmup_method < 0 || s->warmup_method > DP_WARMUP_CONSTANT)
        return dp_fail(DP_ERR_ARG, "lr schedule: unknown warm-up method %d (expected linear or constant)",
                       (int)s->warmup_method);
    if (s->warmup_start != 0.0 && !(s->warmup_start > 0.0 && s->warmup_start <= 1.0))
        return dp_fail(DP_ERR_ARG, "lr schedule: the warm-up's start factor must be in (0, 1], found %g",
                       s->warmup_start);
    if (s->warmup_sequential != 0 && s->warmup_sequential != 1)
        return dp_fail(DP_ERR_ARG, "lr schedule: sequential warm-up must be 0 or 1, found %d", s->warmup_sequential);
    const int shaped = s->warmup_method != DP_WARMUP_LINEAR || s->warmup_start != 0.0 || s->warmup_sequential;
    if (shaped && s->warmup_epochs == 0.0 && s->warmup_steps == 0)
        return dp_fail(DP_ERR_ARG, "lr schedule: a warm-up method, start factor or sequential warm-up needs a "
                       "warm-up length in epochs or steps, found none");
    return DP_OK;
}

dp_status_t dp_lr_schedule_check(const dp_lr_schedule_t *s) {
    if ((int)s->kind < 0 || (int)s->kind >= NUM_KINDS)
        return dp_fail(DP_ERR_ARG, "lr schedule: unknown kind %d (expected constant, step, cosine or exponential)",
                       (int)s->kind);
    const char *kind = kind_names[s->kind];
    if (!(s->lr > 0.0) || !isfinite(s->lr))
        return dp_fail(DP_ERR_ARG, "lr schedule: the learning rate must be a positive number, found %g", s->lr);
    if (s->kind == DP_LR_STEP) {
        if (s->step_epochs < 1)
            return dp_fail(DP_ERR_ARG, "lr schedule step: the step length must be >= 1 epoch, found %d",
                           s->step_epochs);
        if (!(s->gamma >= 0.0 && s->gamma <= 1.0))
            return dp_fail(DP_ERR_ARG, "lr schedule step: gamma must be in (0, 1], found %g", s->gamma);
    } else if (s->kind == DP_LR_EXPONENTIAL) {
        if (!(s->gamma > 0.0 && s->gamma <= 1.0))
            return dp_fail(DP_ERR_ARG, "lr schedule exponential: gamma must be in (0, 1], found %g", s->gamma);
        if (s->step_epochs != 0)
            return dp_fail(DP_ERR_ARG, "lr schedule exponential: the step length applies to the step schedule "
                           "only, found %d", s->step_epochs);
    } else if (s->step_epochs != 0 || s->gamma != 0.0) {
        return dp_fail(DP_ERR_ARG, "lr schedule %s: the step length and gamma apply to the step schedule only",
                       kind);
    }
    if (s->kind == DP_LR_COSINE) {
        if (s->total_epochs < 1)
            return dp_fail(DP_ERR_ARG, "lr schedule cosine: the run must last >= 1 epoch, found %d",
                           s->total_epochs);
        if (!(s->min_lr >= 0.0 && s->min_lr < s->lr))
            return dp_fail(DP_ERR_ARG, "lr schedule cosine: the minimum learning rate must be in [0, %g), found %g",
                           s->lr, s->min_lr);
    } else if (s->total_epochs != 0 || s->min_lr != 0.0) {
        return dp_fail(DP_ERR_ARG, "lr schedule %s: the minimum learning rate applies to the cosine schedule only",
                       kind);
    }
    return check_warmup(s);
}

uint64_t dp_lr_schedule_warmup_steps(const dp_lr_schedule_t *s, uint64_t steps_per_epoch) {
    if (s->warmup_steps > 0) return s->warmup_steps;
    return (uint64_t)llround(s->warmup_epochs * (double)steps_per_epoch);
}

/* base(t) of schedule.h, t counted from the schedule's start; `shorter`:
 * the steps cosine's length loses to a sequential warm-up. */
static double base_lr(const dp_lr_schedule_t *s, uint64_t step, uint64_t steps_per_epoch, uint64_t shorter) {
    if (s->kind == DP_LR_STEP) {
        double gamma = s->gamma == 0.0 ? 0.1 : s->gamma;
        return s->lr * pow(gamma, (double)(step / ((uint64_t)s->step_epochs * steps_per_epoch)));
    }
    if (s->kind == DP_LR_EXPONENTIAL) return s->lr * pow(s->gamma, (double)(step / steps_per_epoch));
    if (s->kind == DP_LR_COSINE) {
        uint64_t total = (uint64_t)s->total_epochs * steps_per_epoch;
        total = total > shorter ? total - shorter : 0;
        double progress = step >= total ? 1.0 : (double)step / (double)total;
        return s->min_lr + (s->lr - s->min_lr) * (1.0 + cos(M_PI * progress)) / 2.0;
    }
    return s->lr;
}

/* warmup(t) of schedule.h for t < W. */
static double warmup_factor(const dp_lr_schedule_t *s, uint64_t step, uint64_t warmup) {
    if (s->warmup_method == DP_WARMUP_CONSTANT)
        return s->warmup_start != 0.0 ? s->warmup_start : 1.0 / (double)warmup;
    if (s->warmup_start == 0.0) return (double)(step + 1) / (double)warmup; /* the default since the start */
    return s->warmup_start + (1.0 - s->warmup_start) * (double)step / (double)warmup;
}

double dp_lr_schedule_lr(const dp_lr_schedule_t *s, uint64_t step, uint64_t steps_per_epoch) {
    DP_ASSERT(steps_per_epoch >= 1);
    uint64_t warmup = dp_lr_schedule_warmup_steps(s, steps_per_epoch);
    if (s->warmup_sequential)
        return step < warmup ? s->lr * warmup_factor(s, step, warmup)
                             : base_lr(s, step - warmup, steps_per_epoch, warmup);
    double lr = base_lr(s, step, steps_per_epoch, 0);
    if (step < warmup) lr *= warmup_factor(s, step, warmup);
    return lr;
}
