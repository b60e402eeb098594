/* ops_loss.c - the losses, forward and backward.
 *
 * DP_OP_SOFTMAX_XENT: softmax
 * cross-entropy over logits (N, K) and int32 labels (N), matching
 * torch.nn.functional.cross_entropy(logits, labels, reduction='sum',
 * label_smoothing=eps) / D
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html)
 * with D = attr.loss_denominator, or N when that is 0, and eps =
 * attr.label_smoothing in [0, 1). With data parallelism, D is the global
 * batch size, so the per-device losses and gradients add up to those of
 * the whole batch. (torch 1.13's reduction='mean' is this with D = N: its
 * cross_entropy_loss_label_smoothing is (1 - eps) nll_loss(mean) + eps / K
 * sum_i (-sum_k log p_ik) / N, the same sum over the examples divided by
 * N.)
 *
 *   out      scalar (ndim 0) = sum_i loss_i / D, with lse_i = logsumexp(logits_i),
 *            loss_i = (1 - eps) (lse_i - logits_i[label_i]) + eps (lse_i - mean_k logits_i[k])
 *   saved    probs (N, K) = softmax(logits), for backward
 *   backward dlogits += out.grad[0] * (probs - target) / D,
 *            target = (1 - eps) onehot(labels) + eps / K
 *
 * eps = 0 takes the unsmoothed arithmetic (the loss without the mean; the
 * target's entries exactly 1 and 0): the bits of the op before smoothing.
 * Stable for large logits: the row maximum is subtracted before exp, and
 * the loss uses log-sum-exp, accumulated in double.
 *
 * DP_OP_MSE: mean squared error of a prediction x against a target t of
 * the same shape, torch.nn.functional.mse_loss(x, t, reduction='sum') / D
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.mse_loss.html),
 * D = attr.loss_denominator, or numel(x) when that is 0 (reduction='mean';
 * Paddle's square_error_cost averaged). The target gets no gradient.
 *   out      scalar (ndim 0) = sum (x - t)^2 / D, summed in double
 *   backward dx += out.grad[0] * 2 (x - t) / D
 * Nothing is saved.
 */
#include <math.h>
#include <stdint.h>

#include "../op_checks.h"
#include "dptrain/ops.h"

dp_status_t dp_softmax_xent_forward(dp_node_t *node, dp_arena_t *arena) {
    int N, K;
    double D;
    DP_TRY(dp_xent_check(node, &N, &K, &D));
    const dp_tensor_t *x = node->in[0];
    const int32_t *labels = node->labels;
    for (int i = 0; i < N; i++)
        if (labels[i] < 0 || labels[i] >= K)
            return dp_fail(DP_ERR_ARG, "softmax_xent: label %d of example %d is outside [0, %d)", (int)labels[i], i,
                           K);
    dp_tensor_set_shape(&node->out, 0, NULL);
    node->out.data = dp_arena_floats(arena, 1); /* () the loss */
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, 1) : NULL;
    float *probs = dp_arena_floats(arena, (size_t)N * K); /* (N, K) */
    node->saved = probs;
    if (!node->out.data || (x->grad && !node->out.grad) || !probs)
        return dp_fail(DP_ERR_NOMEM, "softmax_xent: out of arena memory for %d x %d probabilities", N, K);
    const double eps = node->attr.label_smoothing;
    double loss = 0.0;
    for (int i = 0; i < N; i++) {
        const float *row = x->data + (size_t)i * K; /* (K) */
        float *p = probs + (size_t)i * K;           /* (K) */
        float max = row[0];
        for (int k = 1; k < K; k++)
            if (row[k] > max) max = row[k];
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(row[k] - max);
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] *= inv;
        if (eps > 0.0) {
            double lse = log(sum) + (double)max, mean = 0.0;
            for (int k = 0; k < K; k++) mean += (double)row[k];
            mean /= K;
            loss += (1.0 - eps) * (lse - (double)row[labels[i]]) + eps * (lse - mean);
        } else {
            loss += log(sum) + (double)max - (double)row[labels[i]];
        }
    }
    node->out.data[0] = (float)(loss / D);
    return DP_OK;
}

dp_status_t dp_softmax_xent_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad; /* () */
    float *dx = node->in[0]->grad;    /* (N, K) */
    if (!dy || !dx) return DP_OK;
    int N, K;
    double D;
    DP_TRY(dp_xent_check(node, &N, &K, &D));
    const float *probs = node->saved; /* (N, K) */
    dp_grad_prepare(node->in[0]);
    float scale = (float)(dy[0] / D);
    /* the target's entries: 1 and 0 without smoothing */
    const double eps = node->attr.label_smoothing;
    const float on = (float)(1.0 - eps + eps / K), off = (float)(eps / K);
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * K;
        float *g = dx + (size_t)i * K;
        for (int k = 0; k < K; k++) g[k] += scale * (p[k] - (k == node->labels[i] ? on : off));
    }
    return DP_OK;
}

dp_status_t dp_mse_forward(dp_node_t *node, dp_arena_t *arena) {
    double D;
    DP_TRY(dp_mse_check(node, &D));
    const dp_tensor_t *x = node->in[0], *t = node->in[1];
    dp_tensor_set_shape(&node->out, 0, NULL);
    node->out.data = dp_arena_floats(arena, 1); /* () the loss */
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, 1) : NULL;
    node->saved = NULL;
    if (!node->out.data || (x->grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "mse: out of arena memory for the loss");
    size_t n = dp_tensor_numel(x);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x->data[i] - (double)t->data[i];
        sum += d * d;
    }
    node->out.data[0] = (float)(sum / D);
    return DP_OK;
}

dp_status_t dp_mse_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad; /* () */
    dp_tensor_t *x = node->in[0];
    if (!dy || !x->grad) return DP_OK;
    double D;
    DP_TRY(dp_mse_check(node, &D));
    const float *t = node->in[1]->data;
    size_t n = dp_tensor_numel(x);
    float scale = (float)(2.0 * dy[0] / D);
    if (dp_grad_claim(x))
        for (size_t i = 0; i < n; i++) x->grad[i] = scale * (x->data[i] - t[i]);
    else
        for (size_t i = 0; i < n; i++) x->grad[i] += scale * (x->data[i] - t[i]);
    return DP_OK;
}
