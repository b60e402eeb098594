/* ops_batch_norm.c - DP_OP_BATCH_NORM, forward and backward: batch
 * normalisation matching torch.nn.functional.batch_norm
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.batch_norm.html)
 * over x (N, C) or (N, C, [D,] [H,] W), per channel c over the N * S values
 * of the batch (S = prod of the spatial dims), and, with attr.stat_sync,
 * torch.nn.SyncBatchNorm: the statistics of the whole global batch.
 *
 *   in[1] weight gamma (C) or NULL (1), in[2] bias beta (C) or NULL (0)
 *   y = (x - mean) * invstd * gamma + beta,  invstd = 1 / sqrt(var + eps)
 *
 * Training (attr.training = 1): mean and biased variance of the batch;
 * running_mean / running_var (when not NULL) become
 *   (1 - momentum) running + momentum * batch value,
 * with the UNBIASED variance var * m / (m - 1) (m = values per channel),
 * as PyTorch; m must be > 1. Inference: mean / var = the running stats
 * (which must be given), nothing is updated.
 *
 * Statistics, in double, in one pass over x: per channel the count m and
 * the sums S1 = sum (x - K), S2 = sum (x - K)^2 around a shift K; then
 * mean = K + S1 / m, var = S2 / m - (S1 / m)^2. Without stat_sync K is the
 * channel's first value in the batch, which takes out the cancellation of
 * E[x^2] - E[x]^2 for data far from 0. With stat_sync the sums of every
 * participant are added (stat_sync->sum over [m, S1 (C), S2 (C)], 2C + 1
 * doubles), so K must be the same everywhere and is 0: the products are
 * exact in double and the sums carry a relative error of about
 * m * 1e-16 (1 + mean^2 / var) at worst, far below float precision for
 * any batch a CNN sees. A second pass writes y.
 *
 * Backward, with xhat = (x - mean) invstd, in two passes: per channel
 *   sum_dy = sum dy, sum_dyx = sum dy (x - mean)        (double)
 *   dbeta  += sum_dy,  dgamma += sum_dyx * invstd       (this device's
 *             share; the gradient all-reduce adds the others, as PyTorch's
 *             SyncBatchNorm)
 *   training: dx = gamma invstd (dy - sum_dy / m - xhat invstd sum_dyx / m),
 *             with sum_dy and sum_dyx summed over the participants by
 *             stat_sync (2C doubles) and m the global count; no sync when
 *             x needs no gradient (the same on every participant);
 *   inference: dx = gamma invstd dy.
 * attr.fuse_relu: y = relu(batch_norm(x)) (DP_FUSE_RELU) or
 * relu6(batch_norm(x)) (DP_FUSE_RELU6) in the same pass (torch.relu or
 * torch.nn.functional.relu6 after it: the same bits as the two ops, NaN
 * passing through), and backward first masks its out.grad in place (dy
 * where y > 0, or 0 < y < 6, as the relu and relu6 ops' backward), so the
 * activation's output and gradient buffers are never made. The output pass
 * and the masks are loops of the ISA chosen at start-up (loops_impl.h:
 * batch_norm_apply, relu_mask, relu6_mask; the same bits on every ISA).
 * Saved for backward (node->saved, from the arena): mean and invstd per
 * channel and m. Input grads that are unset are written (dx) or zeroed
 * first (gamma, beta).
 */
#include <math.h>
#include <string.h>

#include "../op_checks.h"
#include "dptrain/ops.h"
#include "kernels/kernels.h"

typedef struct {
    int batch, channels;
    size_t plane; /* S: values per (example, channel); 1 for (N, C) */
} bn_geom_t;

typedef struct {
    double *mean;   /* (C) */
    double *invstd; /* (C) */
    double count;   /* m: values per channel, over all participants */
} bn_saved_t;

static dp_status_t bn_geometry(const dp_node_t *node, bn_geom_t *g) {
    return dp_batch_norm_check(node, &g->batch, &g->channels, &g->plane);
}

/* s1 += sum (x - shift), s2 += sum (x - shift)^2 over the n floats of one
 * (example, channel) plane, and (grad_sums) s_dy += sum dy, s_dyx += sum
 * dy (x - mean): kernels of the ISA chosen at start-up (kernels/bn_*.c).
 * With AVX-512 / AVX2 / NEON: float partial sums in one vector register per
 * sum, the tail by a masked (or scalar) load, reduced and added to the
 * double totals once per plane. A plane holds at most a few thousand values, so the float
 * partials lose nothing that matters next to float32 data, and small planes
 * (ResNet's 4x4: 16 values) cost one vector step instead of a loop of
 * double conversions. x - mean is taken against mean rounded to float,
 * mean_f, and the rounding put back exactly:
 * sum dy (x - mean) = sum dy (x - mean_f) - (mean - mean_f) sum dy.
 * Generic: the same sums in double lanes. */

/* Batch statistics into saved (training), updating the running stats. */
static dp_status_t batch_statistics(const dp_node_t *node, const bn_geom_t *g, bn_saved_t *saved, dp_arena_t *arena) {
    const dp_op_attr_t *a = &node->attr;
    const float *x = node->in[0]->data;
    const int C = g->channels;
    double *sums = dp_arena_alloc(arena, sizeof(double) * (2 * (size_t)C + 1)); /* [m, S1 (C), S2 (C)] */
    if (!sums) return dp_fail(DP_ERR_NOMEM, "batch_norm: out of arena memory for %d channel sums", C);
    memset(sums, 0, sizeof(double) * (2 * (size_t)C + 1));
    double *s1 = sums + 1, *s2 = sums + 1 + C;
    for (int c = 0; c < C; c++) saved->mean[c] = a->stat_sync ? 0.0 : (double)x[(size_t)c * g->plane]; /* K */
    sums[0] = (double)g->batch * (double)g->plane;
    const dp_bn_shifted_sums_fn shifted_sums = dp_cpu_kernels()->bn_shifted_sums;
    for (int n = 0; n < g->batch; n++)
        for (int c = 0; c < C; c++)
            shifted_sums(x + ((size_t)n * C + c) * g->plane, g->plane, saved->mean[c], &s1[c], &s2[c]);
    if (a->stat_sync) a->stat_sync->sum(a->stat_sync->ctx, sums, 2 * C + 1);
    double m = sums[0];
    if (!(m > 1.0))
        return dp_fail(DP_ERR_SHAPE,
                       "batch_norm: training needs more than 1 value per channel (N x spatial%s), found %g",
                       a->stat_sync ? " over all participants" : "", m);
    saved->count = m;
    for (int c = 0; c < C; c++) {
        double shifted_mean = s1[c] / m;
        double var = s2[c] / m - shifted_mean * shifted_mean;
        if (var < 0.0) var = 0.0; /* rounding */
        double mean = saved->mean[c] + shifted_mean;
        saved->mean[c] = mean;
        saved->invstd[c] = 1.0 / sqrt(var + (double)a->eps);
        if (a->running_mean) {
            double mom = (double)a->momentum;
            a->running_mean[c] = (float)((1.0 - mom) * a->running_mean[c] + mom * mean);
            a->running_var[c] = (float)((1.0 - mom) * a->running_var[c] + mom * var * m / (m - 1.0));
        }
    }
    return DP_OK;
}

dp_status_t dp_batch_norm_forward(dp_node_t *node, dp_arena_t *arena) {
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    const int C = g.channels;
    int want_grad = x->grad || (w && w->grad) || (b && b->grad);
    size_t numel = dp_tensor_numel(x);
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    node->out.data = dp_arena_floats(arena, numel); /* same shape as x */
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    bn_saved_t *saved = dp_arena_alloc(arena, sizeof *saved);
    double *per_channel = dp_arena_alloc(arena, 2 * sizeof(double) * (size_t)C);
    node->saved = saved;
    if (!node->out.data || (want_grad && !node->out.grad) || !saved || !per_channel)
        return dp_fail(DP_ERR_NOMEM, "batch_norm: out of arena memory for an output of %zu floats", numel);
    saved->mean = per_channel;
    saved->invstd = per_channel + C;
    if (a->training) {
        DP_TRY(batch_statistics(node, &g, saved, arena));
    } else {
        saved->count = (double)g.batch * (double)g.plane;
        for (int c = 0; c < C; c++) {
            saved->mean[c] = a->running_mean[c];
            saved->invstd[c] = 1.0 / sqrt((double)a->running_var[c] + (double)a->eps);
        }
    }
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops; /* batch_norm_apply: the fused activation too */
    for (int n = 0; n < g.batch; n++)
        for (int c = 0; c < C; c++) {
            size_t at = ((size_t)n * C + c) * g.plane;
            const float *src = x->data + at;
            float *dst = node->out.data + at;
            /* (x - mean) scale + beta with mean = mean_hi + mean_lo: x - mean_hi is
             * exact near the mean, and the rounding of mean_hi to float goes
             * into the shift instead of into every output */
            double scale = saved->invstd[c] * (w ? (double)w->data[c] : 1.0);
            float mean_hi = (float)saved->mean[c];
            float shift = (float)((b ? (double)b->data[c] : 0.0) - (saved->mean[c] - (double)mean_hi) * scale);
            loops->batch_norm_apply(dst, src, g.plane, mean_hi, (float)scale, shift, a->fuse_relu);
        }
    return DP_OK;
}

dp_status_t dp_batch_norm_backward(dp_node_t *node, dp_arena_t *arena) {
    float *dy = node->out.grad;
    if (!dy) return DP_OK;
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    const bn_saved_t *saved = node->saved;
    const int C = g.channels;
    double *sums = dp_arena_alloc(arena, 2 * sizeof(double) * (size_t)C); /* [sum_dy (C), sum_dyx (C)] */
    if (!sums) return dp_fail(DP_ERR_NOMEM, "batch_norm backward: out of arena memory for %d channel sums", C);
    memset(sums, 0, 2 * sizeof(double) * (size_t)C);
    double *s_dy = sums, *s_dyx = sums + C;
    const dp_bn_grad_sums_fn grad_sums = dp_cpu_kernels()->bn_grad_sums;
    /* the fused activation's gradient first: out.grad is ours and complete, masked in place plane by plane,
     * each plane summed while it is still in cache */
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    void (*mask)(float *restrict, const float *restrict, size_t) =
        a->fuse_relu == DP_FUSE_RELU ? loops->relu_mask : a->fuse_relu == DP_FUSE_RELU6 ? loops->relu6_mask : NULL;
    for (int n = 0; n < g.batch; n++)
        for (int c = 0; c < C; c++) {
            size_t at = ((size_t)n * C + c) * g.plane;
            if (mask) mask(dy + at, node->out.data + at, g.plane);
            grad_sums(x->data + at, dy + at, g.plane, saved->mean[c], &s_dy[c], &s_dyx[c]);
        }
    if (w && w->grad) {
        dp_grad_prepare(w);
        for (int c = 0; c < C; c++) w->grad[c] += (float)(s_dyx[c] * saved->invstd[c]);
    }
    if (b && b->grad) {
        dp_grad_prepare(b);
        for (int c = 0; c < C; c++) b->grad[c] += (float)s_dy[c];
    }
    if (!x->grad) return DP_OK;
    if (a->training && a->stat_sync) a->stat_sync->sum(a->stat_sync->ctx, sums, 2 * C);
    int write = dp_grad_claim(x);
    const double m = saved->count;
    float *k = dp_arena_floats(arena, 4 * (size_t)C); /* [k_dy, k_x, k_0, mean_f] per channel */
    if (!k) return dp_fail(DP_ERR_NOMEM, "batch_norm backward: out of arena memory for %d channels", C);
    for (int c = 0; c < C; c++) {
        double invstd = saved->invstd[c], gamma = w ? (double)w->data[c] : 1.0;
        /* dx = k_dy dy + k_x (x - mean) + k_0 */
        float k_dy = (float)(gamma * invstd), k_x = 0.0f, k_0 = 0.0f;
        if (a->training) {
            k_x = (float)(-gamma * invstd * invstd * invstd * s_dyx[c] / m);
            k_0 = (float)(-gamma * invstd * s_dy[c] / m);
        }
        float mean = (float)saved->mean[c];
        k_0 += (float)(-(double)k_x * (saved->mean[c] - (double)mean)); /* the rounding of mean, as in forward */
        k[4 * c] = k_dy, k[4 * c + 1] = k_x, k[4 * c + 2] = k_0, k[4 * c + 3] = mean;
    }
    /* in memory order, (example, channel) planes one after the other */
    for (int n = 0; n < g.batch; n++)
        for (int c = 0; c < C; c++) {
            const float k_dy = k[4 * c], k_x = k[4 * c + 1], k_0 = k[4 * c + 2], mean = k[4 * c + 3];
            size_t at = ((size_t)n * C + c) * g.plane;
            const float *xs = x->data + at, *dys = dy + at;
            float *dx = x->grad + at;
            if (write)
                for (size_t i = 0; i < g.plane; i++) dx[i] = k_dy * dys[i] + k_x * (xs[i] - mean) + k_0;
            else
                for (size_t i = 0; i < g.plane; i++) dx[i] += k_dy * dys[i] + k_x * (xs[i] - mean) + k_0;
        }
    return DP_OK;
}
