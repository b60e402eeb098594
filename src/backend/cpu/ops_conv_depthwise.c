/* ops_conv_depthwise.c - DP_OP_CONV's direct path for depthwise
 * convolutions (groups = input channels > 1, one or more output channels
 * per group: MobileNetV2's 3x3 convolutions), forward and backward side by
 * side; ops_conv.c calls it where dp_conv_depthwise_applies.
 *
 * im2col + a product per group would make one (M x L x 9) product per
 * channel, each a few hundred floats of work: the products' set-up would
 * cost more than their arithmetic. Here each (image, input channel) plane
 * is padded and split by stride phase once (dp_conv_split_phases' layout,
 * split_phases: every tap then reads an output row as consecutive floats,
 * for any stride and dilation), and the per-ISA loops (kernels/loops_impl.h: dw_conv_grid*)
 * run over the output grid, OH rows of Wq (the phase width) columns, as
 * one run of floats per tap: the columns past OW are computed and dropped
 * (forward) or fed zeros (backward), which costs (Wq - OW) / OW more
 * arithmetic (2/7 on a 7x7 plane) but makes 9 long products of a plane's
 * taps instead of 9 short ones per row; a 7x7 plane's rows were too short
 * for vectors:
 *   forward   ygrid = bias[oc] + sum_t w[oc][t] * tap t's floats, its
 *             first OW columns of each row into y
 *   backward  dphases += w[oc][t] * dygrid at tap t's floats, then the
 *             phases' adjoint adds them into dx (padding dropped)
 *             dw[oc][t] += dygrid . tap t's floats (double per tap)
 *             db[oc] += the sum of dy (bias_sum, as ops_conv.c's paths)
 * The last phase plane is followed by Wq + 16 zeros, which the last rows'
 * dropped columns and the grid's rounding read.
 * With attr.fuse_relu the output is clamped as it is written and dy is
 * masked by y > 0 in place before use (out.grad is the node's own and
 * complete when its backward runs, as ops_conv.c's prepare_dy_chunk).
 * 2-D and 1-D; nothing is saved for backward; buffers from the arena.
 * Measured (MobileNetV2 at 224, one core, `train --profile`): see
 * docs/performance.md.
 */
#include <string.h>

#include "conv_common.h"
#include "dptrain/ops.h"
#include "kernels/kernels.h"
#include "ops_conv_depthwise.h"

int dp_conv_depthwise_applies(const dp_conv_geom_t *g) {
    return g->groups > 1 && g->group_in_ch == 1 && g->in_size[0] == 1 && g->kernel[0] == 1;
}

/* One channel's phase planes (sh, sw, Hq, Wq), as dp_conv_split_phases
 * lays them out. */
typedef struct {
    int Wq;
    size_t phase_size; /* Hq Wq */
    size_t floats;     /* sh sw Hq Wq */
} phases_t;

static phases_t phases_of(const dp_conv_geom_t *g) {
    const int sh = g->stride[1], sw = g->stride[2];
    const int Hq = (g->in_size[1] + 2 * g->pad[1] + sh - 1) / sh;
    phases_t p = {.Wq = (g->in_size[2] + 2 * g->pad[2] + sw - 1) / sw};
    p.phase_size = (size_t)Hq * p.Wq;
    p.floats = (size_t)sh * sw * p.phase_size;
    return p;
}

/* Where tap (kh, kw) starts in the phase planes (loops_impl.h: tap_at). */
static void tap_offsets(const dp_conv_geom_t *g, const phases_t *p, size_t *tap_at) {
    const int sh = g->stride[1], sw = g->stride[2];
    for (int kh = 0; kh < g->kernel[1]; kh++)
        for (int kw = 0; kw < g->kernel[2]; kw++) {
            int rh = kh * g->dilation[1], rw = kw * g->dilation[2];
            tap_at[kh * g->kernel[2] + kw] = ((size_t)(rh % sh) * sw + (size_t)(rw % sw)) * p->phase_size +
                                             (size_t)(rh / sh) * p->Wq + (size_t)(rw / sw);
        }
}

/* dp_conv_split_phases for one channel x (H, W) into `planes`, without a
 * test per float: each phase column range that lies inside the input is
 * found once, rows outside it are zeroed whole. */
static const float *split_phases(const dp_conv_geom_t *g, const phases_t *p, const float *restrict x,
                                 float *restrict planes) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int sh = g->stride[1], sw = g->stride[2], Hq = (int)(p->phase_size / (size_t)p->Wq);
    for (int b = 0; b < sw; b++) {
        /* phase b's column j holds input column j sw + b - pw: inside for j in [lo, hi) */
        const int lo = b >= pw ? 0 : (pw - b + sw - 1) / sw;
        int hi = (W - 1 + pw - b) / sw + 1;
        if (W - 1 + pw - b < 0) hi = 0;
        if (hi > p->Wq) hi = p->Wq;
        for (int a = 0; a < sh; a++)
            for (int i = 0; i < Hq; i++) {
                float *dst = planes + ((size_t)a * sw + b) * p->phase_size + (size_t)i * p->Wq;
                const int r = i * sh + a - ph; /* input row, or padding */
                if (r < 0 || r >= H || lo >= hi) {
                    for (int j = 0; j < p->Wq; j++) dst[j] = 0.0f;
                    continue;
                }
                const float *src = x + (size_t)r * W + (lo * sw + b - pw);
                for (int j = 0; j < lo; j++) dst[j] = 0.0f;
                for (int j = lo; j < hi; j++) dst[j] = src[(size_t)(j - lo) * sw];
                for (int j = hi; j < p->Wq; j++) dst[j] = 0.0f;
            }
    }
    return planes;
}

/* The adjoint of dp_conv_split_phases for one channel: dx (H, W) += the
 * phase planes' entries that lie inside the input. */
static void merge_phases_add(const dp_conv_geom_t *g, const phases_t *p, const float *restrict dphases,
                             float *restrict dx) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int sh = g->stride[1], sw = g->stride[2];
    for (int r = 0; r < H; r++) {
        const int a = (r + ph) % sh, i = (r + ph) / sh;
        for (int b = 0; b < sw; b++) {
            const float *src = dphases + ((size_t)a * sw + b) * p->phase_size + (size_t)i * p->Wq;
            /* columns c = j sw + b - pw inside [0, W) */
            int j = b >= pw ? 0 : (pw - b + sw - 1) / sw;
            for (int c = j * sw + b - pw; c < W; c += sw, j++) dx[(size_t)r * W + c] += src[j];
        }
    }
}

/* y (OH, OW) = the first OW columns of each row of ygrid (OH, Wq). */
static void grid_to_plane(const float *restrict ygrid, int Wq, int OH, int OW, float *restrict y) {
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) y[(size_t)oh * OW + ow] = ygrid[(size_t)oh * Wq + ow];
}

/* The output grid's floats: OH rows of Wq, rounded up to 16 (loops_impl.h). */
static size_t grid_floats(int OH, int Wq) { return ((size_t)OH * Wq + 15) / 16 * 16; }

/* The scratch of one channel: its phase planes and, past them, `margin`
 * zeros that the last tap's dropped columns read (and write, backward). */
static float *phase_scratch(const phases_t *p, size_t margin, dp_arena_t *arena) {
    float *s = dp_arena_floats(arena, p->floats + margin);
    if (s) memset(s + p->floats, 0, margin * sizeof(float));
    return s;
}

dp_status_t dp_conv_depthwise_forward(dp_conv_geom_t *g, const float *x, const float *w, const float *bias,
                                      int relu, float *y, dp_arena_t *arena) {
    const phases_t p = phases_of(g);
    const int taps = g->kernel[1] * g->kernel[2], M = g->group_out_ch;
    const int OH = g->out_size[1], OW = g->out_size[2];
    const size_t n = grid_floats(OH, p.Wq); /* the output grid */
    g->pad_scratch = phase_scratch(&p, (size_t)p.Wq + 16, arena);
    float *ygrid = dp_arena_floats(arena, n);
    size_t *tap_at = dp_arena_alloc(arena, sizeof(size_t) * (size_t)taps);
    if (!g->pad_scratch || !ygrid || !tap_at)
        return dp_fail(DP_ERR_NOMEM, "conv (depthwise): out of arena memory for a padded plane of %zu floats",
                       p.floats);
    tap_offsets(g, &p, tap_at);
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int b = 0; b < g->batch; b++)
        for (int c = 0; c < g->in_ch; c++) {
            const float *xc = x + ((size_t)b * g->in_ch + c) * g->in_plane; /* (H, W) */
            const float *phases = split_phases(g, &p, xc, g->pad_scratch);
            for (int m = 0; m < M; m++) {
                const int oc = c * M + m;
                loops->dw_conv_grid(phases, tap_at, taps, n, w + (size_t)oc * taps, bias ? bias[oc] : 0.0f, relu,
                                    ygrid);
                grid_to_plane(ygrid, p.Wq, OH, OW, y + ((size_t)b * g->out_ch + oc) * g->out_plane);
            }
        }
    return DP_OK;
}

dp_status_t dp_conv_depthwise_backward(dp_conv_geom_t *g, const dp_node_t *node, float *dx, float *dw,
                                       double *bias_sum, dp_arena_t *arena) {
    const phases_t p = phases_of(g);
    const size_t L = g->out_plane;
    const int taps = g->kernel[1] * g->kernel[2], M = g->group_out_ch;
    const int OH = g->out_size[1], OW = g->out_size[2];
    const size_t n = grid_floats(OH, p.Wq); /* the output grid */
    const float *x = node->in[0]->data, *w = node->in[1]->data;
    g->pad_scratch = dw ? phase_scratch(&p, (size_t)p.Wq + 16, arena) : NULL;
    float *dphases = dx ? phase_scratch(&p, (size_t)p.Wq + 16, arena) : NULL;
    float *dygrid = dp_arena_zeros(arena, n); /* its dropped columns stay 0 */
    size_t *tap_at = dp_arena_alloc(arena, sizeof(size_t) * (size_t)taps);
    double *dw_sum = dw ? dp_arena_alloc(arena, sizeof(double) * (size_t)g->out_ch * taps) : NULL; /* (OC, taps) */
    if ((dw && (!g->pad_scratch || !dw_sum)) || (dx && !dphases) || !dygrid || !tap_at)
        return dp_fail(DP_ERR_NOMEM, "conv backward (depthwise): out of arena memory for planes of %zu floats",
                       2 * p.floats);
    tap_offsets(g, &p, tap_at);
    if (dw_sum) memset(dw_sum, 0, sizeof(double) * (size_t)g->out_ch * taps);
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int b = 0; b < g->batch; b++)
        for (int c = 0; c < g->in_ch; c++) {
            const float *xc = x + ((size_t)b * g->in_ch + c) * g->in_plane; /* (H, W) */
            const float *phases = dw ? split_phases(g, &p, xc, g->pad_scratch) : NULL;
            if (dphases) memset(dphases, 0, p.floats * sizeof(float));
            for (int m = 0; m < M; m++) {
                const int oc = c * M + m;
                const size_t row = ((size_t)b * g->out_ch + oc) * L;
                float *dy = node->out.grad + row;
                if (node->attr.fuse_relu) loops->relu_mask(dy, node->out.data + row, L);
                if (bias_sum) bias_sum[oc] += loops->row_sum(dy, L);
                for (int oh = 0; oh < OH; oh++) /* dy (OH, OW) onto the grid (OH, Wq) */
                    for (int ow = 0; ow < OW; ow++) dygrid[(size_t)oh * p.Wq + ow] = dy[(size_t)oh * OW + ow];
                if (dw_sum) loops->dw_conv_grid_dw(phases, tap_at, taps, n, dygrid, dw_sum + (size_t)oc * taps);
                if (dphases) loops->dw_conv_grid_dx(dphases, tap_at, taps, n, w + (size_t)oc * taps, dygrid);
            }
            if (dphases) merge_phases_add(g, &p, dphases, dx + ((size_t)b * g->in_ch + c) * g->in_plane);
        }
    if (dw_sum)
        for (size_t k = 0; k < (size_t)g->out_ch * taps; k++) dw[k] += (float)dw_sum[k];
    return DP_OK;
}
