/* optim.c - SGD, SGD with momentum (and Nesterov), Adagrad, Adam and AdamW
 * over one flat parameter buffer, each following torch.optim 1.13 operation for
 * operation (the formulas are in optim.h).
 *
 * DESIGN. dp_optimizer_step_range may run on several threads at once on
 * disjoint ranges of the same buffers: every piece of state it writes is per
 * element (params[i], state[k][i]); the step count and the configuration are
 * only read there, and only begin_step, set_steps and set_lr change them,
 * between steps, while no step_range runs.
 *
 * Float order follows ATen's CPU kernels, whose vector paths fuse a
 * multiply and an add into one FMA (vec::fmadd, and the compiler's
 * contraction of addcmul):
 *   add(b, alpha)        fma(alpha, b, a)
 *   addcmul(t1, t2, v)   fma(v * t1, t2, a)
 *   addcdiv(t1, t2, v)   a + v * t1 / t2
 * so on a CPU with FMA the results are PyTorch's to the bit (measured:
 * tests/test_optim.c prints the worst difference, 0 for every fixture);
 * without FMA both round twice. Python's scalars (bias corrections,
 * 1 - beta, AdamW's 1 - lr * weight_decay) are computed in double, rounded
 * to float where ATen casts a scalar to the tensor's type. Adam's lr and
 * betas (and AdamW's weight decay) enter those double computations; the
 * configuration holds them as floats, so Adam takes the shortest decimal
 * that rounds to each float (0.999f -> 0.999, the number the user wrote)
 * as the double torch would have: with (double)0.999f instead, 1 - beta2
 * alone is off by 5e-5 relative. */
#include "dptrain/optim.h"

#include "dptrain/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STATES 2

struct dp_optimizer {
    dp_optim_config_t config; /* defaults filled in */
    double lr, beta1, beta2;  /* adam, adamw: the decimal values of config's floats */
    float decay[DP_DECAY_GROUPS];          /* each group's weight decay (dp_optim_group_weight_decay) */
    double decay_decimal[DP_DECAY_GROUPS]; /* adamw: likewise as decimals (1 - lr * weight_decay) */
    dp_decay_range_t *ranges;              /* the floats not in DP_DECAY_REST whose decay differs, sorted */
    int num_ranges;
    size_t n;
    uint64_t steps;
    int num_states;
    float *states[MAX_STATES]; /* (n) each, zeroed at creation */
    const char *state_names[MAX_STATES];
};

static const char *const kind_names[] = {
    [DP_OPTIM_SGD] = "sgd",
    [DP_OPTIM_MOMENTUM] = "momentum",
    [DP_OPTIM_ADAGRAD] = "adagrad",
    [DP_OPTIM_ADAM] = "adam",
    [DP_OPTIM_ADAMW] = "adamw",
};
#define NUM_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DP_OPTIM_ADAMW + 1, "a name for every kind");

int dp_optim_kind_from_name(const char *name) {
    for (int k = 0; k < NUM_KINDS; k++)
        if (strcmp(name, kind_names[k]) == 0) return k;
    return -1;
}

const char *dp_optim_kind_name(dp_optim_kind_t kind) {
    return (int)kind >= 0 && (int)kind < NUM_KINDS ? kind_names[kind] : "?";
}

dp_optim_config_t dp_optim_config_with_defaults(const dp_optim_config_t *config) {
    dp_optim_config_t c = *config;
    if (c.kind == DP_OPTIM_MOMENTUM && c.momentum == 0.0f) c.momentum = 0.9f;
    if (c.kind == DP_OPTIM_ADAM || c.kind == DP_OPTIM_ADAMW) {
        if (c.beta1 == 0.0f) c.beta1 = 0.9f;
        if (c.beta2 == 0.0f) c.beta2 = 0.999f;
        if (c.eps == 0.0f) c.eps = 1e-8f;
    }
    if (c.kind == DP_OPTIM_ADAGRAD && c.eps == 0.0f) c.eps = 1e-10f;
    return c;
}

double dp_float_decimal(float f) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        if (strtof(text, NULL) == f) break;
    }
    return strtod(text, NULL);
}

/* value in [0, 1) and finite */
static int is_fraction(float value) { return value >= 0.0f && value < 1.0f; }

dp_status_t dp_optim_config_check(const dp_optim_config_t *config) {
    if ((int)config->kind < 0 || (int)config->kind >= NUM_KINDS)
        return dp_fail(DP_ERR_ARG, "optimizer: unknown kind %d (expected sgd, momentum, adagrad, adam or adamw)",
                       (int)config->kind);
    const char *kind = kind_names[config->kind];
    if (!(config->lr > 0.0f) || !isfinite(config->lr))
        return dp_fail(DP_ERR_ARG, "learning rate must be a positive number, found %g", config->lr);
    if (!(config->weight_decay >= 0.0f) || !isfinite(config->weight_decay))
        return dp_fail(DP_ERR_ARG, "weight decay must be >= 0, found %g", config->weight_decay);
    if (!(config->norm_weight_decay >= 0.0f) || !isfinite(config->norm_weight_decay))
        return dp_fail(DP_ERR_ARG, "norm weight decay must be >= 0, found %g", config->norm_weight_decay);
    if (!(config->bias_weight_decay >= 0.0f) || !isfinite(config->bias_weight_decay))
        return dp_fail(DP_ERR_ARG, "bias weight decay must be >= 0, found %g", config->bias_weight_decay);
    if ((!config->has_norm_weight_decay && config->norm_weight_decay != 0.0f) ||
        (!config->has_bias_weight_decay && config->bias_weight_decay != 0.0f))
        return dp_fail(DP_ERR_ARG, "a norm or bias weight decay is given without its flag (has_norm_weight_decay, "
                       "has_bias_weight_decay)");
    if (config->kind != DP_OPTIM_MOMENTUM && config->momentum != 0.0f)
        return dp_fail(DP_ERR_ARG, "optimizer %s: momentum %g applies to the momentum optimizer only", kind,
                       config->momentum);
    if (config->kind != DP_OPTIM_MOMENTUM && config->nesterov)
        return dp_fail(DP_ERR_ARG, "optimizer %s: nesterov needs momentum > 0 (the momentum optimizer)", kind);
    const int adam = config->kind == DP_OPTIM_ADAM || config->kind == DP_OPTIM_ADAMW;
    if (!adam && (config->beta1 != 0.0f || config->beta2 != 0.0f))
        return dp_fail(DP_ERR_ARG, "optimizer %s: beta1 and beta2 apply to adam and adamw only", kind);
    if ((config->kind == DP_OPTIM_SGD || config->kind == DP_OPTIM_MOMENTUM) && config->eps != 0.0f)
        return dp_fail(DP_ERR_ARG, "optimizer %s: eps applies to adagrad, adam and adamw only", kind);
    dp_optim_config_t c = dp_optim_config_with_defaults(config);
    if (!is_fraction(c.momentum))
        return dp_fail(DP_ERR_ARG, "momentum must be in [0, 1), found %g", c.momentum);
    if (!is_fraction(c.beta1)) return dp_fail(DP_ERR_ARG, "beta1 must be in [0, 1), found %g", c.beta1);
    if (!is_fraction(c.beta2)) return dp_fail(DP_ERR_ARG, "beta2 must be in [0, 1), found %g", c.beta2);
    if (c.kind >= DP_OPTIM_ADAGRAD && (!(c.eps > 0.0f) || !isfinite(c.eps)))
        return dp_fail(DP_ERR_ARG, "eps must be a positive number, found %g", c.eps);
    return DP_OK;
}

dp_status_t dp_optimizer_new(const dp_optim_config_t *config, size_t num_params,
                             dp_optimizer_t **out) {
    *out = NULL;
    DP_TRY(dp_optim_config_check(config));
    dp_optimizer_t *opt = dp_alloc_zeroed(1, sizeof *opt, "optimizer");
    if (!opt) return DP_ERR_NOMEM;
    opt->config = dp_optim_config_with_defaults(config);
    opt->n = num_params;
    opt->lr = dp_float_decimal(opt->config.lr);
    opt->beta1 = dp_float_decimal(opt->config.beta1);
    opt->beta2 = dp_float_decimal(opt->config.beta2);
    for (int g = 0; g < DP_DECAY_GROUPS; g++) {
        opt->decay[g] = dp_optim_group_weight_decay(&opt->config, (dp_decay_group_t)g);
        opt->decay_decimal[g] = dp_float_decimal(opt->decay[g]);
    }
    switch (opt->config.kind) {
    case DP_OPTIM_SGD: break;
    case DP_OPTIM_MOMENTUM: opt->state_names[opt->num_states++] = "momentum_buffer"; break;
    case DP_OPTIM_ADAGRAD: opt->state_names[opt->num_states++] = "sum"; break;
    case DP_OPTIM_ADAM:
    case DP_OPTIM_ADAMW:
        opt->state_names[opt->num_states++] = "exp_avg";
        opt->state_names[opt->num_states++] = "exp_avg_sq";
        break;
    }
    for (int s = 0; s < opt->num_states; s++) {
        opt->states[s] = dp_alloc_zeroed(num_params ? num_params : 1, sizeof(float), opt->state_names[s]);
        if (!opt->states[s]) {
            dp_optimizer_free(opt);
            return DP_ERR_NOMEM;
        }
    }
    *out = opt;
    return DP_OK;
}

void dp_optimizer_free(dp_optimizer_t *opt) {
    if (!opt) return;
    for (int s = 0; s < MAX_STATES; s++) free(opt->states[s]);
    free(opt->ranges);
    free(opt);
}

float dp_optim_group_weight_decay(const dp_optim_config_t *c, dp_decay_group_t group) {
    if (group == DP_DECAY_NORM && c->has_norm_weight_decay) return c->norm_weight_decay;
    if (group == DP_DECAY_BIAS && c->has_bias_weight_decay) return c->bias_weight_decay;
    return c->weight_decay;
}

dp_status_t dp_optimizer_set_decay_ranges(dp_optimizer_t *opt, const dp_decay_range_t *ranges, int count) {
    size_t end = 0;
    for (int i = 0; i < count; i++) {
        const dp_decay_range_t *r = &ranges[i];
        if ((int)r->group < 0 || (int)r->group >= DP_DECAY_GROUPS || r->start < end || r->start > opt->n ||
            r->count > opt->n - r->start)
            return dp_fail(DP_ERR_ARG, "optimizer: decay range %d [%zu, +%zu) of group %d is out of order, overlaps "
                           "or is outside the %zu floats", i, r->start, r->count, (int)r->group, opt->n);
        end = r->start + r->count;
    }
    dp_decay_range_t *kept = dp_alloc_zeroed(count > 0 ? (size_t)count : 1, sizeof *kept, "decay ranges");
    if (!kept) return DP_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < count; i++) {
        const dp_decay_range_t *r = &ranges[i];
        if (!r->count || opt->decay[r->group] == opt->decay[DP_DECAY_REST]) continue; /* as the rest */
        if (n > 0 && kept[n - 1].group == r->group && kept[n - 1].start + kept[n - 1].count == r->start)
            kept[n - 1].count += r->count; /* adjacent, one run */
        else
            kept[n++] = *r;
    }
    free(opt->ranges);
    opt->ranges = kept;
    opt->num_ranges = n;
    return DP_OK;
}

int dp_optimizer_decay_ranges(const dp_optimizer_t *opt, const dp_decay_range_t **ranges) {
    *ranges = opt->ranges;
    return opt->num_ranges;
}

size_t dp_optimizer_decay_run(const dp_optimizer_t *opt, size_t start, size_t count, dp_decay_group_t *group) {
    /* the first kept range ending after start (binary search) */
    int lo = 0, hi = opt->num_ranges;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (opt->ranges[mid].start + opt->ranges[mid].count <= start) lo = mid + 1;
        else hi = mid;
    }
    if (lo == opt->num_ranges || opt->ranges[lo].start >= start + count) { /* none in [start, start + count) */
        *group = DP_DECAY_REST;
        return count;
    }
    const dp_decay_range_t *r = &opt->ranges[lo];
    if (r->start > start) { /* the rest, up to that range */
        *group = DP_DECAY_REST;
        return r->start - start;
    }
    *group = r->group;
    const size_t left = r->start + r->count - start;
    return left < count ? left : count;
}

void dp_optimizer_set_lr(dp_optimizer_t *opt, float lr) {
    opt->config.lr = lr;
    opt->lr = dp_float_decimal(lr);
}
float dp_optimizer_lr(const dp_optimizer_t *opt) { return opt->config.lr; }
dp_optim_kind_t dp_optimizer_kind(const dp_optimizer_t *opt) { return opt->config.kind; }
const dp_optim_config_t *dp_optimizer_config(const dp_optimizer_t *opt) { return &opt->config; }
size_t dp_optimizer_num_params(const dp_optimizer_t *opt) { return opt->n; }

int dp_optimizer_num_states(const dp_optimizer_t *opt) { return opt->num_states; }

float *dp_optimizer_state(dp_optimizer_t *opt, int i, const char **name) {
    if (i < 0 || i >= opt->num_states) {
        if (name) *name = NULL;
        return NULL;
    }
    if (name) *name = opt->state_names[i];
    return opt->states[i];
}

uint64_t dp_optimizer_steps(const dp_optimizer_t *opt) { return opt->steps; }
void dp_optimizer_set_steps(dp_optimizer_t *opt, uint64_t steps) { opt->steps = steps; }
void dp_optimizer_begin_step(dp_optimizer_t *opt) { opt->steps++; }

void dp_optimizer_step(dp_optimizer_t *opt, float *params, const float *grads) {
    dp_optimizer_begin_step(opt);
    dp_optimizer_step_range(opt, params, grads, 0, opt->n);
}

/* --- The update rules, on n elements ------------------------------------------ */

/* a * b + c as ATen computes it: one fused multiply-add where its kernels
 * use one (CPUs with FMA), else two roundings. The library is built for the
 * baseline ISA, so the choice is made at run time (update_range): `fused`
 * is a constant in each of the two copies of the loops, one compiled for
 * FMA (on aarch64 FMA is baseline) and used when the kernels' ISA is not
 * the generic one (cpu.h). */
static inline __attribute__((always_inline)) float mul_add_impl(float a, float b, float c, const int fused) {
    return fused ? fmaf(a, b, c) : a * b + c;
}
#define mul_add(a, b, c) mul_add_impl((a), (b), (c), fused)

static inline __attribute__((always_inline)) void sgd_range(const dp_optim_config_t *c, float wd, float *p, const float *g, size_t n, const int fused) {
    const float neg_lr = -c->lr;
    if (wd == 0.0f) {
        for (size_t i = 0; i < n; i++) p[i] = mul_add(neg_lr, g[i], p[i]);
    } else {
        for (size_t i = 0; i < n; i++) p[i] = mul_add(neg_lr, mul_add(wd, p[i], g[i]), p[i]);
    }
}

/* torch's first step clones the gradient into the new buffer; the buffer
 * starts at zero here, and 0 * m + d is d, the same value. */
static inline __attribute__((always_inline)) void momentum_range(const dp_optim_config_t *c, float wd, float *p, const float *g, float *buf, size_t n, const int fused) {
    const float neg_lr = -c->lr, m = c->momentum;
    for (size_t i = 0; i < n; i++) {
        float d = mul_add(wd, p[i], g[i]);
        float b = buf[i] * m + d; /* mul_, then add_ with alpha 1: fused or not, the same */
        buf[i] = b;
        p[i] = mul_add(neg_lr, c->nesterov ? mul_add(m, b, d) : b, p[i]);
    }
}

static inline __attribute__((always_inline)) void adagrad_range(const dp_optim_config_t *c, float wd, float *p, const float *g, float *sum, size_t n, const int fused) {
    const float neg_lr = -c->lr, eps = c->eps;
    for (size_t i = 0; i < n; i++) {
        float d = mul_add(wd, p[i], g[i]);
        float s = mul_add(d, d, sum[i]);
        sum[i] = s;
        p[i] += neg_lr * d / (sqrtf(s) + eps);
    }
}

/* adam, or with `decoupled` adamw: p *= 1 - lr * weight_decay (the factor
 * in double, then cast to float as ATen's mul_ by a Python float does),
 * then the same update of that p from the gradient alone. */
static inline __attribute__((always_inline)) void adam_range(const dp_optimizer_t *opt, dp_decay_group_t group, float *p, const float *g, float *m, float *v, size_t n, const int decoupled, const int fused) {
    const dp_optim_config_t *c = &opt->config;
    const double beta1 = opt->beta1, beta2 = opt->beta2, t = (double)opt->steps;
    const float wd = opt->decay[group], eps = c->eps;
    const float decay = (float)(1.0 - opt->lr * opt->decay_decimal[group]);
    const float b1 = c->beta1, b2 = c->beta2;
    const float one_minus_b1 = (float)(1.0 - beta1), one_minus_b2 = (float)(1.0 - beta2);
    const double correction1 = 1.0 - pow(beta1, t), correction2 = 1.0 - pow(beta2, t);
    const float neg_step_size = (float)-(opt->lr / correction1);
    const float correction2_sqrt = (float)sqrt(correction2);
    for (size_t i = 0; i < n; i++) {
        float pi = decoupled ? p[i] * decay : p[i];
        float d = decoupled ? g[i] : mul_add(wd, pi, g[i]);
        float mi = mul_add(one_minus_b1, d, m[i] * b1);
        float vi = mul_add(one_minus_b2 * d, d, v[i] * b2);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + neg_step_size * mi / (sqrtf(vi) / correction2_sqrt + eps);
    }
}

/* p, g: element `start`'s; all count floats in weight-decay group `group` */
static inline __attribute__((always_inline)) void update_range(dp_optimizer_t *opt, dp_decay_group_t group, float *p,
                                                               const float *g, size_t start, size_t count,
                                                               const int fused) {
    const dp_optim_config_t *c = &opt->config;
    const float wd = opt->decay[group];
    switch (c->kind) {
    case DP_OPTIM_SGD: sgd_range(c, wd, p, g, count, fused); break;
    case DP_OPTIM_MOMENTUM: momentum_range(c, wd, p, g, opt->states[0] + start, count, fused); break;
    case DP_OPTIM_ADAGRAD: adagrad_range(c, wd, p, g, opt->states[0] + start, count, fused); break;
    case DP_OPTIM_ADAM:
        DP_ASSERT(opt->steps >= 1); /* the bias corrections divide by 1 - beta^steps */
        adam_range(opt, group, p, g, opt->states[0] + start, opt->states[1] + start, count, 0, fused);
        break;
    case DP_OPTIM_ADAMW:
        DP_ASSERT(opt->steps >= 1);
        adam_range(opt, group, p, g, opt->states[0] + start, opt->states[1] + start, count, 1, fused);
        break;
    }
}

#if defined(__x86_64__) && !defined(__FMA__)
#define DP_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define DP_FMA_TARGET
#endif
DP_FMA_TARGET static void update_range_fused(dp_optimizer_t *opt, dp_decay_group_t group, float *p, const float *g,
                                             size_t start, size_t count) {
    update_range(opt, group, p, g, start, count, 1);
}
static void update_range_plain(dp_optimizer_t *opt, dp_decay_group_t group, float *p, const float *g, size_t start,
                               size_t count) {
    update_range(opt, group, p, g, start, count, 0);
}

void dp_optimizer_step_range(dp_optimizer_t *opt, float *params, const float *grads, size_t start,
                             size_t count) {
    DP_ASSERT(start <= opt->n && count <= opt->n - start);
    const int fused = dp_cpu_isa() != DP_ISA_GENERIC;
    while (count > 0) { /* run by run of one weight-decay group */
        dp_decay_group_t group;
        const size_t run = dp_optimizer_decay_run(opt, start, count, &group);
        if (fused)
            update_range_fused(opt, group, params + start, grads + start, start, run);
        else
            update_range_plain(opt, group, params + start, grads + start, start, run);
        start += run, count -= run;
    }
}
