/* ops_layer_norm.c - DP_OP_LAYER_NORM, forward and backward: layer
 * normalisation over the channels at every position, as ConvNeXt's
 * torchvision.models.convnext.LayerNorm2d (F.layer_norm over C on the
 * permuted (N, H, W, C) tensor) and its blocks' nn.LayerNorm(C) on
 * channels-last data: the same arithmetic
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.layer_norm.html).
 *
 *   x (N, C) or (N, C, [D,] [H,] W); in[1] weight (C) or NULL (1), in[2]
 *   bias (C) or NULL (0); at each example n and spatial position s:
 *   mean = sum_c x / C, var = sum_c (x - mean)^2 / C (biased),
 *   rstd = 1 / sqrt(var + eps), y = (x - mean) rstd weight + bias.
 * The statistics are taken in double (two passes: the mean, then the
 * squares around it), per position, the C values strided by S (the
 * spatial size); the loops run over c outside and s inside so that memory
 * is read in order.
 *
 * Backward, with xhat = (x - mean) rstd and g = dy weight, per position:
 *   dx (+)= rstd (g - mean_c g - xhat mean_c (g xhat)),
 * and over every (n, s): dweight (+)= sum dy xhat, dbias (+)= sum dy
 * (double sums in index order: the same bits every run). Saved for
 * backward (node->saved, from the arena): mean and rstd per position, as
 * doubles (N S each). Batch size and training mode change nothing.
 */
#include <math.h>
#include <string.h>

#include "../op_checks.h"
#include "dptrain/ops.h"

typedef struct {
    double *mean; /* (N, S) */
    double *rstd; /* (N, S) */
} ln_saved_t;

/* mean and rstd of every position of example n (x_n: (C, S)) */
static void ln_statistics(const float *x_n, int C, size_t S, double eps, double *mean, double *rstd) {
    memset(mean, 0, sizeof(double) * S);
    memset(rstd, 0, sizeof(double) * S);
    for (int c = 0; c < C; c++)
        for (size_t s = 0; s < S; s++) mean[s] += x_n[(size_t)c * S + s];
    for (size_t s = 0; s < S; s++) mean[s] /= C;
    for (int c = 0; c < C; c++)
        for (size_t s = 0; s < S; s++) {
            double d = x_n[(size_t)c * S + s] - mean[s];
            rstd[s] += d * d; /* the sum of squares until the end */
        }
    for (size_t s = 0; s < S; s++) rstd[s] = 1.0 / sqrt(rstd[s] / C + eps);
}

dp_status_t dp_layer_norm_forward(dp_node_t *node, dp_arena_t *arena) {
    int N = 0, C = 0;
    size_t S = 0;
    DP_TRY(dp_norm_check(node, "layer_norm", &N, &C, &S));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    size_t numel = dp_tensor_numel(x), positions = (size_t)N * S;
    int want_grad = x->grad || (w && w->grad) || (b && b->grad);
    node->out.data = dp_arena_floats(arena, numel); /* as x */
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    ln_saved_t *saved = dp_arena_alloc(arena, sizeof *saved);
    if (saved) {
        saved->mean = dp_arena_alloc(arena, sizeof(double) * positions);
        saved->rstd = dp_arena_alloc(arena, sizeof(double) * positions);
    }
    if (!node->out.data || (want_grad && !node->out.grad) || !saved || !saved->mean || !saved->rstd)
        return dp_fail(DP_ERR_NOMEM, "layer_norm: out of arena memory for an output of %zu floats", numel);
    node->saved = saved;
    for (int n = 0; n < N; n++) {
        const float *x_n = x->data + (size_t)n * C * S;
        float *y_n = node->out.data + (size_t)n * C * S;
        double *mean = saved->mean + (size_t)n * S, *rstd = saved->rstd + (size_t)n * S;
        ln_statistics(x_n, C, S, node->attr.eps, mean, rstd);
        for (int c = 0; c < C; c++) {
            double gamma = w ? w->data[c] : 1.0, beta = b ? b->data[c] : 0.0;
            for (size_t s = 0; s < S; s++)
                y_n[(size_t)c * S + s] = (float)((x_n[(size_t)c * S + s] - mean[s]) * rstd[s] * gamma + beta);
        }
    }
    return DP_OK;
}

/* dweight and dbias: sums over every (n, s) of dy xhat and dy, per channel */
static void ln_param_grads(const dp_node_t *node, int N, int C, size_t S) {
    const ln_saved_t *saved = node->saved;
    dp_tensor_t *w = node->in[1], *b = node->in[2];
    const float *x = node->in[0]->data, *dy = node->out.grad;
    int write_w = w && w->grad ? dp_grad_claim(w) : 0, write_b = b && b->grad ? dp_grad_claim(b) : 0;
    for (int c = 0; c < C; c++) {
        double sum_dyx = 0.0, sum_dy = 0.0;
        for (int n = 0; n < N; n++) {
            size_t at = ((size_t)n * C + c) * S;
            const double *mean = saved->mean + (size_t)n * S, *rstd = saved->rstd + (size_t)n * S;
            for (size_t s = 0; s < S; s++) {
                sum_dyx += (double)dy[at + s] * (x[at + s] - mean[s]) * rstd[s];
                sum_dy += dy[at + s];
            }
        }
        if (w && w->grad) w->grad[c] = write_w ? (float)sum_dyx : w->grad[c] + (float)sum_dyx;
        if (b && b->grad) b->grad[c] = write_b ? (float)sum_dy : b->grad[c] + (float)sum_dy;
    }
}

dp_status_t dp_layer_norm_backward(dp_node_t *node, dp_arena_t *arena) {
    const float *dy = node->out.grad;
    if (!dy || !node->saved) return DP_OK;
    int N = node->in[0]->shape[0], C = node->in[0]->shape[1];
    size_t S = dp_tensor_numel(node->in[0]) / ((size_t)N * (size_t)C);
    ln_param_grads(node, N, C, S);
    dp_tensor_t *x = node->in[0], *w = node->in[1];
    if (!x->grad) return DP_OK;
    const ln_saved_t *saved = node->saved;
    double *sum_g = dp_arena_alloc(arena, sizeof(double) * 2 * S); /* [mean_c g (S), mean_c g xhat (S)] */
    if (!sum_g) return dp_fail(DP_ERR_NOMEM, "layer_norm backward: out of arena memory for %zu positions", S);
    double *sum_gx = sum_g + S;
    int write = dp_grad_claim(x);
    for (int n = 0; n < N; n++) {
        size_t base = (size_t)n * C * S;
        const double *mean = saved->mean + (size_t)n * S, *rstd = saved->rstd + (size_t)n * S;
        memset(sum_g, 0, sizeof(double) * 2 * S);
        for (int c = 0; c < C; c++) {
            double gamma = w ? w->data[c] : 1.0;
            for (size_t s = 0; s < S; s++) {
                size_t i = base + (size_t)c * S + s;
                double g = dy[i] * gamma;
                sum_g[s] += g;
                sum_gx[s] += g * (x->data[i] - mean[s]) * rstd[s];
            }
        }
        for (int c = 0; c < C; c++) {
            double gamma = w ? w->data[c] : 1.0;
            for (size_t s = 0; s < S; s++) {
                size_t i = base + (size_t)c * S + s;
                double xhat = (x->data[i] - mean[s]) * rstd[s];
                float v = (float)(rstd[s] * (dy[i] * gamma - sum_g[s] / C - xhat * sum_gx[s] / C));
                x->grad[i] = write ? v : x->grad[i] + v;
            }
        }
    }
    return DP_OK;
}
