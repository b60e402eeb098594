/* optim.h - optimizers over one flat parameter buffer.
 *
 * Gradients handed to an optimizer are already the mean over the global
 * minibatch (the loss is summed and divided by the global batch size), so
 * plain SGD is d2l's `sgd`: p -= lr * grad, with grad = sum / batch_size.
 * Each replica owns its own optimizer; all replicas see the same reduced
 * gradient, so they apply the same update and never drift.
 */
#ifndef DPTRAIN_OPTIM_H
#define DPTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

/* Each kind follows the torch.optim class of the same name, step for step. */
typedef enum {
    DP_OPTIM_SGD,      /* torch.optim.SGD: p -= lr * (g + weight_decay * p) */
    DP_OPTIM_MOMENTUM, /* torch.optim.SGD with momentum (and nesterov) */
    DP_OPTIM_ADAGRAD,  /* torch.optim.Adagrad */
    DP_OPTIM_ADAM,     /* torch.optim.Adam */
    DP_OPTIM_ADAMW,    /* torch.optim.AdamW: Adam with decoupled weight decay */
} dp_optim_kind_t;

/* The update rules, with g the gradient plus weight_decay * p (when > 0;
 * adamw: the gradient alone) and t the step count (1 on the first step):
 *   sgd:      p -= lr * g
 *   momentum: b = g (t = 1), b = momentum * b + g (t > 1);
 *             p -= lr * b, or with nesterov p -= lr * (g + momentum * b)
 *   adagrad:  s += g * g; p -= lr * g / (sqrt(s) + eps)
 *   adam:     m = beta1 * m + (1 - beta1) * g; v = beta2 * v + (1 - beta2) * g * g;
 *             p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *   adamw:    p *= 1 - lr * weight_decay (decoupled: never added to g), then adam's
 *             update of that p with the same moments, corrections and eps
 * (torch.optim 1.13 with dampening 0, lr_decay 0, initial accumulator 0,
 * amsgrad and maximize off; the bias corrections and adamw's 1 - lr *
 * weight_decay are computed in double, as in Python). Fields that do not
 * apply to the kind must be 0. weight_decay is taken as given for every
 * kind, 0 included: torch.optim.AdamW's default of 0.01 is not put in for
 * a 0 here (0 is no decay), so a caller wanting torch's default gives
 * 0.01 (`dptrain train --optimizer adamw` does when --weight-decay is not
 * given). */
typedef struct {
    dp_optim_kind_t kind;
    float lr;
    float weight_decay; /* L2 penalty added to the gradient, as torch.optim does;
                         * adamw: the decoupled decay's rate (p *= 1 - lr * weight_decay) */
    float momentum;     /* momentum: 0.9 when 0 is given; in [0, 1) */
    int nesterov;       /* momentum: Nesterov's variant */
    float beta1, beta2; /* adam, adamw: 0.9, 0.999 when 0 is given; in [0, 1) */
    float eps;          /* adam, adamw: 1e-8, adagrad: 1e-10 when 0 is given; > 0 */
    /* Two groups with a weight decay of their own (torch's param_groups as
     * torchvision's references make them with --norm-weight-decay and
     * --bias-weight-decay): with has_norm_weight_decay, the weights and
     * biases of normalisation layers decay by norm_weight_decay instead of
     * weight_decay; with has_bias_weight_decay, every bias (a batch norm's
     * too: it takes precedence) by bias_weight_decay. Which floats of the
     * flat buffer are which is the caller's to say: dp_optimizer_set_decay_ranges.
     * Without the flags (0) the values must be 0 and every float decays by
     * weight_decay. */
    float norm_weight_decay, bias_weight_decay;
    int has_norm_weight_decay, has_bias_weight_decay;
} dp_optim_config_t;

/* The weight-decay groups of a flat buffer: the rest, normalisation
 * layers' tensors, biases. */
typedef enum { DP_DECAY_REST, DP_DECAY_NORM, DP_DECAY_BIAS, DP_DECAY_GROUPS } dp_decay_group_t;

/* The weight decay of a group under a configuration: norm_weight_decay or
 * bias_weight_decay where its flag is set, else weight_decay. */
float dp_optim_group_weight_decay(const dp_optim_config_t *config, dp_decay_group_t group);

/* Floats [start, start + count) of the flat buffer belong to `group`. */
typedef struct {
    size_t start, count;
    dp_decay_group_t group;
} dp_decay_range_t;

/* The shortest decimal that rounds to f, as a double (0.1f -> 0.1): the
 * number a person wrote, which torch would hold as a Python float. Adam and
 * AdamW use it for their double arithmetic (lr / (1 - beta1^t), 1 - beta,
 * 1 - lr * weight_decay). */
double dp_float_decimal(float f);

/* Checks a configuration without creating an optimizer (dp_optimizer_new
 * checks too): a one-line message naming the field, expected and found. */
dp_status_t dp_optim_config_check(const dp_optim_config_t *config);

/* The configuration with torch's defaults for the fields given as 0
 * (momentum 0.9, ...): what an optimizer made from it holds. */
dp_optim_config_t dp_optim_config_with_defaults(const dp_optim_config_t *config);

/* "sgd", "momentum", "adagrad", "adam", "adamw" -> kind; -1 when unknown. */
int dp_optim_kind_from_name(const char *name);
const char *dp_optim_kind_name(dp_optim_kind_t kind);

typedef struct dp_optimizer dp_optimizer_t;

dp_status_t dp_optimizer_new(const dp_optim_config_t *config, size_t num_params,
                             dp_optimizer_t **out);
void dp_optimizer_free(dp_optimizer_t *opt);

/* One update of params (n floats) with grads (n floats):
 * dp_optimizer_begin_step, then dp_optimizer_step_range over all n. */
void dp_optimizer_step(dp_optimizer_t *opt, float *params, const float *grads);

/* Starts a step: counts it (Adam's bias correction uses the count). Call
 * once per step before the dp_optimizer_step_range calls of that step. */
void dp_optimizer_begin_step(dp_optimizer_t *opt);

/* The update of the current step on elements [start, start + count) only,
 * so that several workers can update disjoint chunks of one buffer at once. */
void dp_optimizer_step_range(dp_optimizer_t *opt, float *params, const float *grads, size_t start,
                             size_t count);

/* Says which floats are in which weight-decay group (floats in no range:
 * DP_DECAY_REST): ranges sorted by start, disjoint, inside [0, n); copied
 * (only those whose group's decay differs from weight_decay are kept:
 * without the config's flags nothing changes). Call before the first
 * step; DP_ERR_ARG naming the range otherwise. */
dp_status_t dp_optimizer_set_decay_ranges(dp_optimizer_t *opt, const dp_decay_range_t *ranges, int count);

/* The ranges kept by dp_optimizer_set_decay_ranges (*ranges: valid until
 * the next set or free), their count: a copy of the optimizer made from its
 * configuration takes them with set_decay_ranges. */
int dp_optimizer_decay_ranges(const dp_optimizer_t *opt, const dp_decay_range_t **ranges);

/* From `start`, the length (1..count, count > 0) of the run of floats of
 * one weight-decay group, and that group: a backend updating a range on a
 * device (backend.h optimizer_update) updates it run by run, each with its
 * group's scalars. */
size_t dp_optimizer_decay_run(const dp_optimizer_t *opt, size_t start, size_t count, dp_decay_group_t *group);

/* Changes the learning rate (schedules); call between steps. */
void dp_optimizer_set_lr(dp_optimizer_t *opt, float lr);
float dp_optimizer_lr(const dp_optimizer_t *opt);

/* What the optimizer was built with: its kind, and its configuration with
 * the defaults filled in (momentum 0.9, ...) and the current lr; the number
 * of floats it updates (num_params of dp_optimizer_new). */
dp_optim_kind_t dp_optimizer_kind(const dp_optimizer_t *opt);
const dp_optim_config_t *dp_optimizer_config(const dp_optimizer_t *opt);
size_t dp_optimizer_num_params(const dp_optimizer_t *opt);

/* --- Gradient clipping (clip.c): torch.nn.utils.clip_grad_norm_(parameters,
 * max_norm) of torch 1.13 (norm_type 2, error_if_nonfinite False), which a
 * training loop calls between backward and the optimizer's step. The total
 * norm is that of every gradient together, made from the sum of their
 * squares in double (rounded once to float: torch's float32 norm of the
 * per-tensor norms is within an ulp or two of it); every gradient is then
 * multiplied by the coefficient. */
/* The largest max_norm taken (beyond it nothing float could ever be clipped). */
#define DP_CLIP_MAX_NORM_LIMIT 1e30f
/* sqrt(sum_squares) as a float (inf when it overflows, NaN for NaN). */
float dp_clip_total_norm(double sum_squares);
/* min(max_norm / (total_norm + 1e-6), 1) in float, as torch computes it
 * (1 / (total_norm + 1e-6), times max_norm; torch.clamp keeps a NaN: a NaN
 * norm gives NaN, an infinite one 0). */
float dp_clip_coefficient(float total_norm, float max_norm);
/* The sum of x[i] * x[i] over [0, n) in double, in one fixed order
 * whatever the machine (eight running sums over i mod 8, added pairwise
 * at the end): the CPU backend's sum_squares. */
double dp_sum_squares(const float *x, size_t n);

/* --- An exponential moving average of the model (ema.c): torchvision's
 * reference --model-ema (utils.ExponentialMovingAverage, an AveragedModel
 * of the parameters and buffers). Every `steps` steps the average takes
 * avg = decay * avg + (1 - decay) * x, as torch computes it on float32
 * tensors with Python floats: decay and 1 - decay (in double) each rounded
 * to float, two products and a sum, each rounded (no fused multiply-add);
 * the first update (and every one during the lr warm-up) copies x. */
/* torchvision's decay from --model-ema-decay D, --model-ema-steps N, the
 * global batch B and the run's epochs E: 1 - min(1, (1 - D) * B * N / E),
 * in double as Python computes it. */
double dp_ema_decay(double decay, int steps, int global_batch, int epochs);
/* avg[0, n) = decay * avg + one_minus_decay * x, element by element (the
 * CPU backend's ema_update). */
void dp_ema_update(float *avg, const float *x, float decay, float one_minus_decay, size_t n);

/* --- State, for checkpoints ----------------------------------------------------
 * An optimizer's state is its step count and 0-2 buffers of n floats, named
 * as torch.optim names them: "momentum_buffer" (momentum), "sum" (adagrad),
 * "exp_avg" and "exp_avg_sq" (adam, adamw). The buffers start at zero; state(i)
 * returns NULL for i out of range. A restored optimizer (buffers written,
 * set_steps) continues exactly as the one that was saved. */
int dp_optimizer_num_states(const dp_optimizer_t *opt);
float *dp_optimizer_state(dp_optimizer_t *opt, int i, const char **name);
uint64_t dp_optimizer_steps(const dp_optimizer_t *opt);
void dp_optimizer_set_steps(dp_optimizer_t *opt, uint64_t steps);

#endif
