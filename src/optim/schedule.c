/* schedule.c - learning-rate schedules as pure functions of the step count
 * (the formulas are in schedule.h). */
#include "dptrain/schedule.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {
    [DP_LR_CONSTANT] = "constant",
    [DP_LR_STEP] = "step",
    [DP_LR_COSINE] = "cosine",
};
#define NUM_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DP_LR_COSINE + 1, "a name for every kind");

int dp_lr_schedule_kind_from_name(const char *name) {
    for (int k = 0; k < NUM_KINDS; k++)
        if (strcmp(name, kind_names[k]) == 0) return k;
    return -1;
}

const char *dp_lr_schedule_kind_name(dp_lr_schedule_kind_t kind) {
    return (int)kind >= 0 && (int)kind < NUM_KINDS ? kind_names[kind] : "?";
}

dp_status_t dp_lr_schedule_check(const dp_lr_schedule_t *s) {
    if ((int)s->kind < 0 || (int)s->kind >= NUM_KINDS)
        return dp_fail(DP_ERR_ARG, "lr schedule: unknown kind %d (expected constant, step or cosine)", (int)s->kind);
    const char *kind = kind_names[s->kind];
    if (!(s->lr > 0.0) || !isfinite(s->lr))
        return dp_fail(DP_ERR_ARG, "lr schedule: the learning rate must be a positive number, found %g", s->lr);
    if (s->kind == DP_LR_STEP) {
        if (s->step_epochs < 1)
            return dp_fail(DP_ERR_ARG, "lr schedule step: the step length must be >= 1 epoch, found %d",
                           s->step_epochs);
        if (!(s->gamma >= 0.0 && s->gamma <= 1.0))
            return dp_fail(DP_ERR_ARG, "lr schedule step: gamma must be in (0, 1], found %g", s->gamma);
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
    if (!(s->warmup_epochs >= 0.0) || !isfinite(s->warmup_epochs))
        return dp_fail(DP_ERR_ARG, "lr schedule: warm-up epochs must be >= 0, found %g", s->warmup_epochs);
    if (s->warmup_epochs > 0.0 && s->warmup_steps > 0)
        return dp_fail(DP_ERR_ARG, "lr schedule: give the warm-up in epochs or in steps, not both");
    return DP_OK;
}

uint64_t dp_lr_schedule_warmup_steps(const dp_lr_schedule_t *s, uint64_t steps_per_epoch) {
    if (s->warmup_steps > 0) return s->warmup_steps;
    return (uint64_t)llround(s->warmup_epochs * (double)steps_per_epoch);
}

double dp_lr_schedule_lr(const dp_lr_schedule_t *s, uint64_t step, uint64_t steps_per_epoch) {
    DP_ASSERT(steps_per_epoch >= 1);
    double lr = s->lr;
    if (s->kind == DP_LR_STEP) {
        double gamma = s->gamma == 0.0 ? 0.1 : s->gamma;
        lr *= pow(gamma, (double)(step / ((uint64_t)s->step_epochs * steps_per_epoch)));
    } else if (s->kind == DP_LR_COSINE) {
        uint64_t total = (uint64_t)s->total_epochs * steps_per_epoch;
        double progress = step >= total ? 1.0 : (double)step / (double)total;
        lr = s->min_lr + (s->lr - s->min_lr) * (1.0 + cos(M_PI * progress)) / 2.0;
    }
    uint64_t warmup = dp_lr_schedule_warmup_steps(s, steps_per_epoch);
    if (step < warmup) lr *= (double)(step + 1) / (double)warmup;
    return lr;
}
