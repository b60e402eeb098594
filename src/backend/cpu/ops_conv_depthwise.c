/* ops_conv_depthwise.c - DP_OP_CONV's direct path for depthwise
 * convolutions (groups = input channels > 1, one or more output channels
 * per group: MobileNetV2's 3x3 convolutions), forward and backward side by
 * side; ops_conv.c calls it where dp_conv_depthwise_applies.
 *
 * im2col + a product per group would make one (M x L x 9) product per
 * channel, each a few hundred floats of work: the products' set-up would
 * cost more than their arithmetic. Here each (image, input channel) plane
 * is padded and split by stride phase once (dp_conv_split_phases: every
 * tap then reads an output row as consecutive floats, for any stride and
 * dilation), and the per-ISA loops (kernels/loops_impl.h: dw_conv_plane*)
 * run over whole rows:
 *   forward   y[oc] = bias[oc] + sum_t w[oc][t] * tap t's rows
 *   backward  dphases += w[oc][t] * dy rows at tap t's rows, then the
 *             phases' adjoint adds them into dx (padding dropped)
 *             dw[oc][t] += dy . tap t's rows (double per tap, per plane)
 *             db[oc] += the sum of dy (bias_sum, as ops_conv.c's paths)
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

dp_status_t dp_conv_depthwise_forward(dp_conv_geom_t *g, const float *x, const float *w, const float *bias,
                                      int relu, float *y, dp_arena_t *arena) {
    const phases_t p = phases_of(g);
    const size_t nphase = p.floats;
    const int Wq = p.Wq, taps = g->kernel[1] * g->kernel[2], M = g->group_out_ch;
    const int OH = g->out_size[1], OW = g->out_size[2];
    g->pad_scratch = dp_arena_floats(arena, nphase);
    size_t *tap_at = dp_arena_alloc(arena, sizeof(size_t) * (size_t)taps);
    if (!g->pad_scratch || !tap_at)
        return dp_fail(DP_ERR_NOMEM, "conv (depthwise): out of arena memory for a padded plane of %zu floats", nphase);
    tap_offsets(g, &p, tap_at);
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int n = 0; n < g->batch; n++)
        for (int c = 0; c < g->in_ch; c++) {
            const float *phases = dp_conv_split_phases(g, x + ((size_t)n * g->in_ch + c) * g->in_plane);
            for (int m = 0; m < M; m++) {
                const int oc = c * M + m;
                loops->dw_conv_plane(phases, tap_at, taps, Wq, w + (size_t)oc * taps, bias ? bias[oc] : 0.0f, relu,
                                     y + ((size_t)n * g->out_ch + oc) * g->out_plane, OH, OW);
            }
        }
    return DP_OK;
}

dp_status_t dp_conv_depthwise_backward(dp_conv_geom_t *g, const dp_node_t *node, float *dx, float *dw,
                                       double *bias_sum, dp_arena_t *arena) {
    const phases_t p = phases_of(g);
    const size_t nphase = p.floats, L = g->out_plane;
    const int Wq = p.Wq, taps = g->kernel[1] * g->kernel[2], M = g->group_out_ch;
    const int OH = g->out_size[1], OW = g->out_size[2];
    const float *x = node->in[0]->data, *w = node->in[1]->data;
    float *dy_all = node->out.grad;
    g->pad_scratch = dw ? dp_arena_floats(arena, nphase) : NULL;
    float *dphases = dx ? dp_arena_floats(arena, nphase) : NULL;
    size_t *tap_at = dp_arena_alloc(arena, sizeof(size_t) * (size_t)taps);
    double *dw_sum = dw ? dp_arena_alloc(arena, sizeof(double) * (size_t)g->out_ch * taps) : NULL; /* (OC, taps) */
    if ((dw && (!g->pad_scratch || !dw_sum)) || (dx && !dphases) || !tap_at)
        return dp_fail(DP_ERR_NOMEM, "conv backward (depthwise): out of arena memory for planes of %zu floats",
                       2 * nphase);
    tap_offsets(g, &p, tap_at);
    if (dw_sum) memset(dw_sum, 0, sizeof(double) * (size_t)g->out_ch * taps);
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int n = 0; n < g->batch; n++)
        for (int c = 0; c < g->in_ch; c++) {
            const float *phases = dw ? dp_conv_split_phases(g, x + ((size_t)n * g->in_ch + c) * g->in_plane) : NULL;
            if (dphases) memset(dphases, 0, nphase * sizeof(float));
            for (int m = 0; m < M; m++) {
                const int oc = c * M + m;
                const size_t row = ((size_t)n * g->out_ch + oc) * L;
                float *dy = dy_all + row;
                if (node->attr.fuse_relu) loops->relu_mask(dy, node->out.data + row, L);
                if (bias_sum) bias_sum[oc] += loops->row_sum(dy, L);
                if (dw_sum) loops->dw_conv_plane_dw(phases, tap_at, taps, Wq, dy, OH, OW, dw_sum + (size_t)oc * taps);
                if (dphases) loops->dw_conv_plane_dx(dphases, tap_at, taps, Wq, w + (size_t)oc * taps, dy, OH, OW);
            }
            if (dphases) merge_phases_add(g, &p, dphases, dx + ((size_t)n * g->in_ch + c) * g->in_plane);
        }
    if (dw_sum)
        for (size_t k = 0; k < (size_t)g->out_ch * taps; k++) dw[k] += (float)dw_sum[k];
    return DP_OK;
}
