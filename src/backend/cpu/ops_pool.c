/* ops_pool.c - DP_OP_MAX_POOL, DP_OP_AVG_POOL and DP_OP_GLOBAL_AVG_POOL,
 * forward and backward, 1-D, 2-D and 3-D, matching torch.nn.functional.max_pool{1,2,3}d
 * (ceil_mode False or, with attr.ceil_mode, True) and avg_pool{1,2,3}d with ceil_mode=False
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.max_pool2d.html,
 *  https://pytorch.org/docs/stable/generated/torch.nn.functional.avg_pool2d.html).
 *
 * Like conv, one implementation over (D, H, W); missing leading dims have
 * size 1 and a window of 1. Windows: attr.kernel, attr.stride, attr.pad
 * (at most half the kernel, as PyTorch requires); max pool also takes
 * attr.dilation and attr.ceil_mode (dp_pool_out_size: the last window may
 * reach past the input and the padding; it reads the inputs it covers, as
 * a window cut by the padding). Max pool pads with -inf and saves, for every output, the
 * index of its maximum within the input's (D, H, W) plane (int32, in
 * node->saved, from the arena); ties go to the first maximum in (d, h, w)
 * order and a NaN wins, as in PyTorch. Avg pool divides by the kernel volume
 * when attr.count_include_pad (PyTorch's default), else by the number of
 * input elements inside the window. Backward adds into in[0]->grad (or,
 * for the 2x2 fast path, writes it when it is unset: tensor.h).
 *
 * Global average pooling is torch.nn.functional.adaptive_avg_pool{1,2,3}d
 * with output size 1
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.adaptive_avg_pool2d.html):
 * (N, C, spatial...) -> (N, C, 1, ...), keeping ndim; each output is the
 * mean of its (D, H, W) plane, summed in double. Backward spreads dy / plane
 * over the plane (writing an unset dx, adding otherwise).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dptrain/ops.h"
#include "kernels/kernels.h"

typedef struct {
    const char *op;           /* "max_pool" or "avg_pool", for messages */
    int ndim;
    size_t planes;            /* N * C */
    int in_size[3];           /* (D, H, W) */
    int out_size[3];          /* (OD, OH, OW) */
    int kernel[3], stride[3], pad[3], dilation[3];
    size_t in_plane, out_plane;
} pool_geom_t;

static const char *const dim_names[3] = {"D", "H", "W"};

/* is_max: max pool, which alone takes dilation and ceil_mode. */
static dp_status_t pool_geometry(const dp_node_t *node, const char *op, int is_max, pool_geom_t *g) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64];
    g->op = op;
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    if (x->ndim < 3 || x->ndim > 5)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (x->shape[0] < 1 || x->shape[1] < 1)
        return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
    if (!is_max && a->ceil_mode) return dp_fail(DP_ERR_ARG, "%s: ceil_mode is for max pooling only", op);
    int spatial = x->ndim - 2, first = 3 - spatial;
    g->ndim = x->ndim;
    g->planes = (size_t)x->shape[0] * (size_t)x->shape[1];
    g->in_plane = g->out_plane = 1;
    for (int d = 0; d < 3; d++) {
        int s = d - first; /* index into the attribute arrays, < 0 for missing dims */
        g->in_size[d] = s < 0 ? 1 : x->shape[2 + s];
        g->kernel[d] = s < 0 ? 1 : a->kernel[s];
        g->stride[d] = s < 0 ? 1 : a->stride[s];
        g->pad[d] = s < 0 ? 0 : a->pad[s];
        g->dilation[d] = s < 0 ? 1 : a->dilation[s];
        if (g->kernel[d] < 1 || g->stride[d] < 1 || g->dilation[d] < 1)
            return dp_fail(DP_ERR_ARG, "%s: along %s kernel %d, stride %d and dilation %d must be >= 1", op,
                           dim_names[d], g->kernel[d], g->stride[d], g->dilation[d]);
        if (!is_max && g->dilation[d] != 1)
            return dp_fail(DP_ERR_ARG, "%s: dilation must be 1, found %d along %s", op, g->dilation[d], dim_names[d]);
        if (g->pad[d] < 0 || 2 * g->pad[d] > g->kernel[d])
            return dp_fail(DP_ERR_ARG, "%s: pad %d along %s must be between 0 and half the kernel %d", op, g->pad[d],
                           dim_names[d], g->kernel[d]);
        if (g->in_size[d] < 1)
            return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
        g->out_size[d] =
            dp_pool_out_size(g->in_size[d], g->kernel[d], g->stride[d], g->pad[d], g->dilation[d], a->ceil_mode);
        if (g->out_size[d] < 1)
            return dp_fail(DP_ERR_SHAPE,
                           "%s: output size along %s is %d < 1 (input %s, kernel %d, stride %d, pad %d, dilation %d)",
                           op, dim_names[d], g->out_size[d], dp_tensor_shape_str(x, xs, sizeof xs), g->kernel[d],
                           g->stride[d], g->pad[d], g->dilation[d]);
        g->in_plane *= (size_t)g->in_size[d];
        g->out_plane *= (size_t)g->out_size[d];
    }
    return DP_OK;
}

/* Sets the output shape and allocates out.data and (when the input has a
 * grad) a zeroed out.grad. */
static dp_status_t pool_output(dp_node_t *node, const pool_geom_t *g, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    int shape[DP_MAX_DIMS] = {x->shape[0], x->shape[1]};
    for (int s = 0; s < g->ndim - 2; s++) shape[2 + s] = g->out_size[3 - (g->ndim - 2) + s];
    dp_tensor_set_shape(&node->out, g->ndim, shape);
    size_t numel = dp_tensor_numel(&node->out);
    node->out.data = dp_arena_floats(arena, numel);
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    if (!node->out.data || (x->grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "%s: out of arena memory for an output of %zu floats", g->op, numel);
    return DP_OK;
}

/* The window of one output position along one dim: its first input
 * position (negative inside the padding) and the range [lo, hi) of kernel
 * taps that fall inside the input. */
typedef struct {
    int start, lo, hi;
} pool_window_t;

/* Windows of every output position, all dims: (OD + OH + OW) entries, from
 * the arena, so the inner loops do no division. */
static pool_window_t *pool_windows(const pool_geom_t *g, dp_arena_t *arena) {
    size_t count = (size_t)g->out_size[0] + (size_t)g->out_size[1] + (size_t)g->out_size[2];
    pool_window_t *windows = dp_arena_alloc(arena, count * sizeof *windows);
    if (!windows) {
        dp_fail(DP_ERR_NOMEM, "%s: out of arena memory for %zu window entries", g->op, count);
        return NULL;
    }
    pool_window_t *win = windows;
    for (int d = 0; d < 3; d++) {
        int in = g->in_size[d], dil = g->dilation[d], kernel = g->kernel[d];
        for (int o = 0; o < g->out_size[d]; o++, win++) {
            int s = o * g->stride[d] - g->pad[d];
            int lo = s >= 0 ? 0 : (-s + dil - 1) / dil;
            int hi = in - 1 - s < 0 ? 0 : (in - 1 - s) / dil + 1;
            if (hi > kernel) hi = kernel;
            if (lo > hi) lo = hi;
            win->start = s;
            win->lo = lo;
            win->hi = hi;
        }
    }
    return windows;
}

/* The input rows that output row (od, oh) reads: offsets into the
 * (D, H, W) plane of its (kd, kh) taps inside the input, in scan order.
 * Returns their count. */
static int window_rows(const pool_geom_t *g, const pool_window_t *wd, const pool_window_t *wh, int od, int oh,
                       int32_t *rows) {
    int count = 0;
    for (int kd = wd[od].lo; kd < wd[od].hi; kd++)
        for (int kh = wh[oh].lo; kh < wh[oh].hi; kh++)
            rows[count++] = ((wd[od].start + kd * g->dilation[0]) * g->in_size[1] + wh[oh].start + kh * g->dilation[1]) *
                            g->in_size[2];
    return count;
}

/* Scratch of one call: the window tables and the row buffers. */
typedef struct {
    pool_window_t *wd, *wh, *ww; /* (OD), (OH), (OW) */
    int32_t *rows;               /* (kD * kH) row offsets of one output row */
    float *row;                  /* (W) the rows combined (sum or max) */
    int32_t *row_index;          /* (W) max pool: where each max came from */
} pool_scratch_t;

static dp_status_t pool_scratch(const pool_geom_t *g, dp_arena_t *arena, pool_scratch_t *s) {
    s->wd = pool_windows(g, arena);
    if (!s->wd) return DP_ERR_NOMEM;
    s->wh = s->wd + g->out_size[0];
    s->ww = s->wh + g->out_size[1];
    size_t W = (size_t)g->in_size[2];
    s->rows = dp_arena_alloc(arena, (size_t)g->kernel[0] * g->kernel[1] * sizeof(int32_t));
    s->row = dp_arena_floats(arena, W);
    s->row_index = dp_arena_alloc(arena, W * sizeof(int32_t));
    if (!s->rows || !s->row || !s->row_index)
        return dp_fail(DP_ERR_NOMEM, "%s: out of arena memory for row buffers of %zu floats", g->op, W);
    return DP_OK;
}

/* Outputs [*lo, *hi) along W have their whole window inside the input
 * (the windows cut by padding are at both ends). */
static void full_windows(const pool_geom_t *g, const pool_window_t *ww, int *lo, int *hi) {
    const int OW = g->out_size[2];
    int a = 0;
    while (a < OW && ww[a].lo > 0) a++;
    int b = a;
    while (b < OW && ww[b].lo == 0 && ww[b].hi == g->kernel[2]) b++;
    *lo = a;
    *hi = b;
}

/* --- max pool ------------------------------------------------------------ *
 * Per output row: the window's input rows are combined column by column
 * into (max, index of the max) -- vectorizable selects, no branches --, then
 * each output takes the best of its kW columns. Among equal values the
 * smallest plane index wins, which is the first in (d, h, w) scan order,
 * as in PyTorch; a NaN wins over any number. */

/* Does (v, at) beat (best, best_at)? */
static inline int max_beats(float v, int32_t at, float best, int32_t best_at) {
    return (v > best) | ((v == best) & (at < best_at)) | ((v != v) & (best == best));
}

dp_status_t dp_max_pool_forward(dp_node_t *node, dp_arena_t *arena) {
    pool_geom_t g;
    DP_TRY(pool_geometry(node, "max_pool", 1, &g));
    DP_TRY(pool_output(node, &g, arena));
    size_t numel = g.planes * g.out_plane;
    int32_t *argmax = NULL; /* (N, C, OD, OH, OW) index into the (D, H, W) plane */
    if (node->in[0]->grad) {
        argmax = dp_arena_alloc(arena, numel * sizeof(int32_t));
        if (!argmax) return dp_fail(DP_ERR_NOMEM, "max_pool: out of arena memory for %zu argmax indices", numel);
    }
    node->saved = argmax;
    pool_scratch_t s;
    DP_TRY(pool_scratch(&g, arena, &s));
    const int W = g.in_size[2], OW = g.out_size[2], dw = g.dilation[2];
    const int sw = g.stride[2], pw = g.pad[2];
    float *restrict row = s.row;
    int32_t *restrict row_index = s.row_index;
    int32_t *out_index = dp_arena_alloc(arena, (size_t)OW * sizeof(int32_t)); /* (OW) when no argmax is kept */
    if (!out_index) return dp_fail(DP_ERR_NOMEM, "max_pool: out of arena memory for %d indices", OW);
    int full_lo, full_hi;
    full_windows(&g, s.ww, &full_lo, &full_hi);
    for (size_t p = 0; p < g.planes; p++) {
        const float *x = node->in[0]->data + p * g.in_plane; /* (D, H, W) */
        float *y = node->out.data + p * g.out_plane;         /* (OD, OH, OW) */
        int32_t *am = argmax ? argmax + p * g.out_plane : NULL;
        for (int od = 0; od < g.out_size[0]; od++)
            for (int oh = 0; oh < g.out_size[1]; oh++, y += OW, am = am ? am + OW : NULL) {
                int count = window_rows(&g, s.wd, s.wh, od, oh, s.rows);
                if (count == 0) { /* only padding (cannot happen with pad <= kernel / 2) */
                    for (int ow = 0; ow < OW; ow++) y[ow] = -INFINITY;
                    if (am)
                        for (int ow = 0; ow < OW; ow++) am[ow] = -1;
                    continue;
                }
                const float *first = x + s.rows[0];
                for (int iw = 0; iw < W; iw++) {
                    row[iw] = first[iw];
                    row_index[iw] = s.rows[0] + iw;
                }
                for (int r = 1; r < count; r++) {
                    const float *xr = x + s.rows[r];
                    const int32_t base = s.rows[r];
                    for (int iw = 0; iw < W; iw++) { /* later rows win only when strictly larger (or NaN) */
                        float v = xr[iw];
                        int take = (v > row[iw]) | (v != v);
                        row[iw] = take ? v : row[iw];
                        row_index[iw] = take ? base + iw : row_index[iw];
                    }
                }
                /* interior windows: one pass per kernel column, across outputs */
                int32_t *at_out = am ? am : out_index;
                for (int ow = full_lo; ow < full_hi; ow++) {
                    y[ow] = row[s.ww[ow].start];
                    at_out[ow] = row_index[s.ww[ow].start];
                }
                for (int kw = 1; kw < g.kernel[2]; kw++) {
                    const float *row_kw = row + kw * dw;
                    const int32_t *index_kw = row_index + kw * dw;
                    for (int ow = full_lo; ow < full_hi; ow++) {
                        int iw = ow * sw - pw;
                        float v = row_kw[iw];
                        int32_t at = index_kw[iw];
                        int take = max_beats(v, at, y[ow], at_out[ow]);
                        y[ow] = take ? v : y[ow];
                        at_out[ow] = take ? at : at_out[ow];
                    }
                }
                /* windows cut by the padding */
                for (int ow = 0; ow < OW; ow++) {
                    if (ow == full_lo && full_hi > full_lo) ow = full_hi;
                    if (ow >= OW) break;
                    const pool_window_t win = s.ww[ow];
                    float best = -INFINITY;
                    int32_t best_at = -1;
                    for (int kw = win.lo; kw < win.hi; kw++) {
                        float v = row[win.start + kw * dw];
                        int32_t at = row_index[win.start + kw * dw];
                        int take = best_at < 0 || max_beats(v, at, best, best_at);
                        best = take ? v : best;
                        best_at = take ? at : best_at;
                    }
                    y[ow] = best;
                    at_out[ow] = best_at;
                }
            }
    }
    return DP_OK;
}

dp_status_t dp_max_pool_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad; /* (N, C, OD, OH, OW) */
    float *dx = node->in[0]->grad;    /* (N, C, D, H, W) */
    if (!dy || !dx) return DP_OK;
    const int32_t *argmax = node->saved;
    if (!argmax) return dp_fail(DP_ERR_ARG, "max_pool backward: no argmax saved (forward ran without an input grad)");
    dp_grad_prepare(node->in[0]); /* scattered adds */
    size_t in_plane = 1, out_plane = 1;
    for (int i = 2; i < node->in[0]->ndim; i++) in_plane *= (size_t)node->in[0]->shape[i];
    for (int i = 2; i < node->out.ndim; i++) out_plane *= (size_t)node->out.shape[i];
    size_t planes = (size_t)node->in[0]->shape[0] * (size_t)node->in[0]->shape[1];
    for (size_t p = 0; p < planes; p++) {
        float *dxp = dx + p * in_plane;
        const float *dyp = dy + p * out_plane;
        const int32_t *am = argmax + p * out_plane;
        for (size_t o = 0; o < out_plane; o++)
            if (am[o] >= 0) dxp[am[o]] += dyp[o];
    }
    return DP_OK;
}

/* --- avg pool ------------------------------------------------------------ *
 * Per output row: the window's input rows are summed column by column into
 * one row (vectorized), then each output sums its kW columns; backward
 * spreads each output's share over one row and adds that row to every
 * input row of the window. */

/* --- The common case: 2-D, 2x2 windows, stride 2, no padding ---------------
 * LeNet's pools. Each output is the mean of its 2x2 block; the general path
 * below pays per-row window bookkeeping that costs more than the sums
 * themselves. The sums run in the general path's order (rows first, then
 * adjacent columns). The loops are kernels/loops_impl.h's, compiled per
 * ISA. */
static int is_plain_2x2(const pool_geom_t *g) {
    return g->in_size[0] == 1 && g->kernel[0] == 1 && g->kernel[1] == 2 && g->kernel[2] == 2 &&
           g->stride[1] == 2 && g->stride[2] == 2 && g->pad[0] == 0 && g->pad[1] == 0 && g->pad[2] == 0 &&
           g->dilation[1] == 1 && g->dilation[2] == 1;
}

dp_status_t dp_avg_pool_forward(dp_node_t *node, dp_arena_t *arena) {
    pool_geom_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    DP_TRY(pool_output(node, &g, arena));
    node->saved = NULL;
    if (is_plain_2x2(&g)) {
        /* the kernel table's loop, vectorized for the ISA in use */
        dp_cpu_kernels()->loops->avg_pool_2x2_forward(node->in[0]->data, node->out.data, g.planes, g.in_size[2],
                                                       g.out_size[1], g.out_size[2], g.in_plane, g.out_plane);
        return DP_OK;
    }
    pool_scratch_t s;
    DP_TRY(pool_scratch(&g, arena, &s));
    const int W = g.in_size[2], OW = g.out_size[2], sw = g.stride[2], pw = g.pad[2];
    const int include_pad = node->attr.count_include_pad;
    const float inv_volume = 1.0f / (float)(g.kernel[0] * g.kernel[1] * g.kernel[2]);
    float *restrict row = s.row;
    int full_lo, full_hi;
    full_windows(&g, s.ww, &full_lo, &full_hi);
    for (size_t p = 0; p < g.planes; p++) {
        const float *x = node->in[0]->data + p * g.in_plane; /* (D, H, W) */
        float *y = node->out.data + p * g.out_plane;         /* (OD, OH, OW) */
        for (int od = 0; od < g.out_size[0]; od++)
            for (int oh = 0; oh < g.out_size[1]; oh++, y += OW) {
                int count = window_rows(&g, s.wd, s.wh, od, oh, s.rows);
                for (int iw = 0; iw < W; iw++) row[iw] = 0.0f;
                for (int r = 0; r < count; r++) {
                    const float *xr = x + s.rows[r];
                    for (int iw = 0; iw < W; iw++) row[iw] += xr[iw];
                }
                /* With the padding counted, the divisor is the kernel volume
                 * (floor mode: windows never reach past the padding). Interior
                 * windows: one pass per kernel column, across outputs. */
                const float full_scale = include_pad ? inv_volume : 1.0f / (float)(count * g.kernel[2]);
                for (int ow = full_lo; ow < full_hi; ow++) y[ow] = row[ow * sw - pw];
                for (int kw = 1; kw < g.kernel[2]; kw++)
                    for (int ow = full_lo; ow < full_hi; ow++) y[ow] += row[ow * sw - pw + kw];
                for (int ow = full_lo; ow < full_hi; ow++) y[ow] *= full_scale;
                for (int ow = 0; ow < OW; ow++) { /* windows cut by the padding */
                    if (ow == full_lo && full_hi > full_lo) ow = full_hi;
                    if (ow >= OW) break;
                    const pool_window_t win = s.ww[ow];
                    float sum = 0.0f;
                    for (int kw = win.lo; kw < win.hi; kw++) sum += row[win.start + kw];
                    y[ow] = include_pad ? sum * inv_volume : sum / (float)(count * (win.hi - win.lo));
                }
            }
    }
    return DP_OK;
}

dp_status_t dp_avg_pool_backward(dp_node_t *node, dp_arena_t *arena) {
    const float *dy = node->out.grad; /* (N, C, OD, OH, OW) */
    float *dx = node->in[0]->grad;    /* (N, C, D, H, W) */
    if (!dy || !dx) return DP_OK;
    pool_geom_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    if (is_plain_2x2(&g)) {
        /* With even H and W every dx element is in one window: overwrite
         * when dx is unset. */
        int whole = g.in_size[1] % 2 == 0 && g.in_size[2] % 2 == 0;
        int overwrite = whole && dp_grad_claim(node->in[0]);
        if (!overwrite) dp_grad_prepare(node->in[0]);
        dp_cpu_kernels()->loops->avg_pool_2x2_backward(dy, dx, g.planes, g.in_size[2], g.out_size[1],
                                                        g.out_size[2], g.in_plane, g.out_plane, overwrite);
        return DP_OK;
    }
    dp_grad_prepare(node->in[0]);
    pool_scratch_t s;
    DP_TRY(pool_scratch(&g, arena, &s));
    const int W = g.in_size[2], OW = g.out_size[2], sw = g.stride[2], pw = g.pad[2];
    const int include_pad = node->attr.count_include_pad;
    const float inv_volume = 1.0f / (float)(g.kernel[0] * g.kernel[1] * g.kernel[2]);
    float *restrict row = s.row;
    int full_lo, full_hi;
    full_windows(&g, s.ww, &full_lo, &full_hi);
    for (size_t p = 0; p < g.planes; p++) {
        float *dxp = dx + p * g.in_plane;       /* (D, H, W) */
        const float *dyp = dy + p * g.out_plane; /* (OD, OH, OW) */
        for (int od = 0; od < g.out_size[0]; od++)
            for (int oh = 0; oh < g.out_size[1]; oh++, dyp += OW) {
                int count = window_rows(&g, s.wd, s.wh, od, oh, s.rows);
                if (count == 0) continue;
                for (int iw = 0; iw < W; iw++) row[iw] = 0.0f;
                const float full_scale = include_pad ? inv_volume : 1.0f / (float)(count * g.kernel[2]);
                for (int kw = 0; kw < g.kernel[2]; kw++) /* interior windows, across outputs */
                    for (int ow = full_lo; ow < full_hi; ow++) row[ow * sw - pw + kw] += dyp[ow] * full_scale;
                for (int ow = 0; ow < OW; ow++) { /* windows cut by the padding */
                    if (ow == full_lo && full_hi > full_lo) ow = full_hi;
                    if (ow >= OW) break;
                    const pool_window_t win = s.ww[ow];
                    float share = include_pad ? dyp[ow] * inv_volume : dyp[ow] / (float)(count * (win.hi - win.lo));
                    for (int kw = win.lo; kw < win.hi; kw++) row[win.start + kw] += share;
                }
                for (int r = 0; r < count; r++) {
                    float *dxr = dxp + s.rows[r];
                    for (int iw = 0; iw < W; iw++) dxr[iw] += row[iw];
                }
            }
    }
    return DP_OK;
}

dp_status_t dp_global_avg_pool_forward(dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "global_avg_pool: needs an input (in[0]) with data");
    if (x->ndim < 3 || x->ndim > 5 || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "global_avg_pool: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, none "
                       "empty, found %s", dp_tensor_shape_str(x, xs, sizeof xs));
    int shape[DP_MAX_DIMS] = {x->shape[0], x->shape[1], 1, 1, 1};
    dp_tensor_set_shape(&node->out, x->ndim, shape);
    size_t planes = (size_t)x->shape[0] * (size_t)x->shape[1], plane = dp_tensor_numel(x) / planes;
    node->out.data = dp_arena_floats(arena, planes); /* (N, C, 1...) */
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, planes) : NULL;
    node->saved = NULL;
    if (!node->out.data || (x->grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "global_avg_pool: out of arena memory for an output of %zu floats", planes);
    for (size_t p = 0; p < planes; p++) {
        const float *src = x->data + p * plane;
        /* 4 independent double sums: no chain of dependent adds */
        double lanes[4] = {0.0, 0.0, 0.0, 0.0};
        size_t i = 0;
        for (; i + 4 <= plane; i += 4)
            for (int j = 0; j < 4; j++) lanes[j] += src[i + j];
        for (; i < plane; i++) lanes[0] += src[i];
        node->out.data[p] = (float)(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) / (double)plane);
    }
    return DP_OK;
}

dp_status_t dp_global_avg_pool_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    const float *dy = node->out.grad; /* (N, C, 1...) */
    dp_tensor_t *x = node->in[0];
    if (!dy || !x->grad) return DP_OK;
    size_t planes = dp_tensor_numel(&node->out), plane = dp_tensor_numel(x) / planes;
    float inv = 1.0f / (float)plane;
    int write = dp_grad_claim(x);
    for (size_t p = 0; p < planes; p++) {
        float *dst = x->grad + p * plane, g = dy[p] * inv;
        if (write)
            for (size_t i = 0; i < plane; i++) dst[i] = g;
        else
            for (size_t i = 0; i < plane; i++) dst[i] += g;
    }
    return DP_OK;
}
