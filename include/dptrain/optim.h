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

#include "dptrain/status.h"

typedef enum {
    DP_OPTIM_SGD, /* p -= lr * (g + weight_decay * p) */
} dp_optim_kind_t;

typedef struct {
    dp_optim_kind_t kind;
    float lr;
    float weight_decay; /* L2 penalty added to the gradient, as torch.optim.SGD */
} dp_optim_config_t;

typedef struct dp_optimizer dp_optimizer_t;

dp_status_t dp_optimizer_new(const dp_optim_config_t *config, size_t num_params,
                             dp_optimizer_t **out);
void dp_optimizer_free(dp_optimizer_t *opt);

/* One update of params (n floats) with grads (n floats). */
void dp_optimizer_step(dp_optimizer_t *opt, float *params, const float *grads);

/* The same update on elements [start, start + count) only, so that several
 * workers can update disjoint chunks of one buffer at once. */
void dp_optimizer_step_range(dp_optimizer_t *opt, float *params, const float *grads, size_t start,
                             size_t count);

/* Changes the learning rate (schedules). */
void dp_optimizer_set_lr(dp_optimizer_t *opt, float lr);

#endif
