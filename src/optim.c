/* optim.c - minibatch SGD with optional weight decay over a flat buffer. */
#include "dptrain/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dp_optimizer {
    dp_optim_config_t config;
    size_t n;
    uint64_t steps;
};

int dp_optim_kind_from_name(const char *name) {
    return strcmp(name, "sgd") == 0 ? DP_OPTIM_SGD : -1;
}

const char *dp_optim_kind_name(dp_optim_kind_t kind) { return kind == DP_OPTIM_SGD ? "sgd" : "?"; }

int dp_optimizer_num_states(const dp_optimizer_t *opt) { (void)opt; return 0; }
float *dp_optimizer_state(dp_optimizer_t *opt, int i, const char **name) {
    (void)opt; (void)i; *name = NULL; return NULL;
}
uint64_t dp_optimizer_steps(const dp_optimizer_t *opt) { return opt->steps; }
void dp_optimizer_set_steps(dp_optimizer_t *opt, uint64_t steps) { opt->steps = steps; }
void dp_optimizer_begin_step(dp_optimizer_t *opt) { opt->steps++; }

dp_status_t dp_optimizer_new(const dp_optim_config_t *config, size_t num_params,
                             dp_optimizer_t **out) {
    *out = NULL;
    if (!(config->lr > 0.0f) || !isfinite(config->lr))
        return dp_fail(DP_ERR_ARG, "learning rate must be a positive number, found %g", config->lr);
    if (!(config->weight_decay >= 0.0f) || !isfinite(config->weight_decay))
        return dp_fail(DP_ERR_ARG, "weight decay must be >= 0, found %g", config->weight_decay);
    if (config->kind != DP_OPTIM_SGD)
        return dp_fail(DP_ERR_ARG, "unknown optimizer kind %d", (int)config->kind);
    dp_optimizer_t *opt = dp_alloc_zeroed(1, sizeof *opt, "optimizer");
    if (!opt) return DP_ERR_NOMEM;
    opt->config = *config;
    opt->n = num_params;
    *out = opt;
    return DP_OK;
}

void dp_optimizer_free(dp_optimizer_t *opt) { free(opt); }

void dp_optimizer_set_lr(dp_optimizer_t *opt, float lr) { opt->config.lr = lr; }

void dp_optimizer_step(dp_optimizer_t *opt, float *params, const float *grads) {
    dp_optimizer_begin_step(opt);
    dp_optimizer_step_range(opt, params, grads, 0, opt->n);
}

void dp_optimizer_step_range(dp_optimizer_t *opt, float *params, const float *grads, size_t start,
                             size_t count) {
    const float lr = opt->config.lr, wd = opt->config.weight_decay;
    const size_t n = count;
    params += start;
    grads += start;
    if (wd == 0.0f) {
        for (size_t i = 0; i < n; i++) params[i] -= lr * grads[i];
    } else {
        for (size_t i = 0; i < n; i++) params[i] -= lr * (grads[i] + wd * params[i]);
    }
}
