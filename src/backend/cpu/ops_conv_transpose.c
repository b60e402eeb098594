/* ops_conv_transpose.c - DP_OP_CONV_TRANSPOSE, forward and backward: N-d
 * transposed convolution matching torch.nn.functional.conv_transpose1d /
 * conv_transpose2d / conv_transpose3d
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.conv_transpose2d.html)
 * with stride, padding, output_padding, dilation, groups and bias.
 *
 *   x (N, C_in, I...), weight (C_in, C_out / groups, k...), bias (C_out)
 *   output size per dim O = (I - 1) stride - 2 pad + dilation (k - 1)
 *                           + output_padding + 1,
 *   output_padding in [0, max(stride, dilation)) as PyTorch requires.
 *
 * Method: a transposed convolution is the input gradient of the
 * convolution with the same weight that maps an (N, C_out, O...) tensor to
 * an (N, C_in, I...) one; so it runs on that convolution's geometry
 * (conv_common.h: "input" = our output, "output" = our input, Cg = C_out /
 * groups, OCg = C_in / groups, L = prod I) and the roles of im2col and
 * col2im swap:
 *   W_g      (C_in/g, Cg * kvol)   rows of the weight of group g
 *   X_g      (C_in/g, nb * L)      x of the chunk's images, group g
 *   forward  col (Cg * kvol, nb * L) = W_g^T X_g, then col2im adds it into
 *                                    y (zeroed first); y += bias
 *   backward col  = im2col(dy) (Cg * kvol, nb * L)
 *            dX_g += W_g col
 *            dW_g += X_g col^T
 *            db[c] += sum of dy over images and positions
 * Chunks of images as in ops_conv.c; with a chunk of one image the gemm
 * reads x and writes dx in place, otherwise they are gathered / scattered a
 * row at a time. Nothing is saved for backward; every buffer comes from the
 * arena. attr.fuse_relu is not supported (an error). Backward adds into the
 * grads of the inputs that have one.
 */
#include <stdbool.h>
#include <string.h>

#include "conv_common.h"
#include "dptrain/gemm.h"
#include "dptrain/ops.h"


/* Checks the node (conv_shape.c) and fills the geometry of the adjoint convolution. */
static dp_status_t conv_transpose_geometry(const dp_node_t *node, dp_conv_geom_t *g) {
    dp_conv_shape_t s;
    DP_TRY(dp_conv_transpose_shape(node, &s));
    dp_conv_geom_from_shape(&s, g);
    return DP_OK;
}

/* X_g of a chunk (C_in/g, nb * L): x itself for one image, else the rows
 * gathered into buf. */
static const float *gather_x_chunk(const dp_conv_geom_t *g, const float *x, int n0, int nb, int grp, float *buf) {
    const size_t L = g->out_plane;
    const int Cig = g->group_out_ch;
    if (nb == 1) return x + ((size_t)n0 * g->out_ch + (size_t)grp * Cig) * L;
    const size_t ld = (size_t)nb * L;
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < Cig; c++)
            memcpy(buf + (size_t)c * ld + (size_t)i * L, x + ((size_t)(n0 + i) * g->out_ch + (size_t)grp * Cig + c) * L,
                   L * sizeof(float));
    return buf;
}

dp_status_t dp_conv_transpose_forward(dp_node_t *node, dp_arena_t *arena) {
    dp_conv_geom_t g;
    DP_TRY(conv_transpose_geometry(node, &g));
    const float *x = node->in[0]->data;                         /* (N, C_in, I...) */
    const float *w = node->in[1]->data;                         /* (C_in, C_out/g, k...) */
    const float *bias = node->in[2] ? node->in[2]->data : NULL; /* (C_out) */
    const size_t L = g.out_plane, out_plane = g.in_plane;
    const int Cig = g.group_out_ch;

    int shape[DP_MAX_DIMS] = {g.batch, g.in_ch};
    for (int s = 0; s < g.ndim - 2; s++) shape[2 + s] = g.in_size[3 - (g.ndim - 2) + s];
    dp_tensor_t *out = &node->out;
    dp_tensor_set_shape(out, g.ndim, shape);
    size_t numel = dp_tensor_numel(out);
    int want_grad = dp_conv_needs_grad(node);
    out->data = dp_arena_zeros(arena, numel); /* (N, C_out, O...), col2im adds into it */
    out->grad = want_grad ? dp_grad_alloc(arena, out, numel) : NULL;
    node->saved = NULL;
    size_t ld_max = (size_t)g.chunk * L;
    float *col = dp_arena_floats(arena, g.col_rows * ld_max);                              /* (Cg * kvol, chunk * L) */
    float *xbuf = g.chunk > 1 ? dp_arena_floats(arena, (size_t)Cig * ld_max) : NULL;      /* (C_in/g, chunk * L) */
    const dp_conv_tap_t *taps = dp_conv_taps(&g, arena);
    if (!out->data || (want_grad && !out->grad) || !col || (g.chunk > 1 && !xbuf) || !taps)
        return dp_fail(DP_ERR_NOMEM,
                       "conv_transpose: out of arena memory for output %zu floats and col buffer %zu floats", numel,
                       g.col_rows * ld_max);

    float *y = out->data;
    for (int n0 = 0; n0 < g.batch; n0 += g.chunk) {
        int nb = g.batch - n0 < g.chunk ? g.batch - n0 : g.chunk;
        size_t ld = (size_t)nb * L;
        for (int grp = 0; grp < g.groups; grp++) {
            const float *xg = gather_x_chunk(&g, x, n0, nb, grp, xbuf); /* (C_in/g, nb * L) */
            const float *wg = w + (size_t)grp * Cig * g.col_rows;        /* (C_in/g, Cg * kvol) */
            dp_gemm(true, false, (int)g.col_rows, (int)ld, Cig, 1.0f, wg, (int)g.col_rows, xg, (int)ld, 0.0f, col,
                    (int)ld);
            for (int i = 0; i < nb; i++)
                dp_conv_col2im_add(&g, taps, col + (size_t)i * L, ld,
                                   y + ((size_t)(n0 + i) * g.in_ch + (size_t)grp * g.group_in_ch) * out_plane);
        }
    }
    if (bias)
        for (int n = 0; n < g.batch; n++)
            for (int c = 0; c < g.in_ch; c++) {
                float *row = y + ((size_t)n * g.in_ch + c) * out_plane, bv = bias[c];
                for (size_t l = 0; l < out_plane; l++) row[l] += bv;
            }
    return DP_OK;
}

dp_status_t dp_conv_transpose_backward(dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    dp_conv_geom_t g;
    DP_TRY(conv_transpose_geometry(node, &g));
    dp_tensor_t *xt = node->in[0], *wt = node->in[1], *bt = node->in[2];
    const size_t L = g.out_plane, out_plane = g.in_plane;
    const int Cig = g.group_out_ch;
    if (xt->grad) dp_grad_prepare(xt); /* the gemm / scatter add */
    if (wt->grad) dp_grad_prepare(wt);
    if (bt && bt->grad) dp_grad_prepare(bt);
    float *dx = xt->grad;           /* (N, C_in, I...) */
    float *dw = wt->grad;           /* (C_in, C_out/g, k...) */
    const float *dy = node->out.grad; /* (N, C_out, O...) */
    if (bt && bt->grad) /* db[c] += sum of dy over images and positions */
        for (int c = 0; c < g.in_ch; c++) {
            double sum = 0.0;
            for (int n = 0; n < g.batch; n++) sum += dp_conv_row_sum(dy + ((size_t)n * g.in_ch + c) * out_plane, out_plane);
            bt->grad[c] += (float)sum;
        }
    if (!dx && !dw) return DP_OK;

    size_t ld_max = (size_t)g.chunk * L;
    float *col = dp_arena_floats(arena, g.col_rows * ld_max);                                /* (Cg * kvol, chunk * L) */
    float *xbuf = dw && g.chunk > 1 ? dp_arena_floats(arena, (size_t)Cig * ld_max) : NULL;  /* (C_in/g, chunk * L) */
    float *dxbuf = dx && g.chunk > 1 ? dp_arena_floats(arena, (size_t)Cig * ld_max) : NULL; /* (C_in/g, chunk * L) */
    const dp_conv_tap_t *taps = dp_conv_taps(&g, arena);
    if (!col || (dw && g.chunk > 1 && !xbuf) || (dx && g.chunk > 1 && !dxbuf) || !taps)
        return dp_fail(DP_ERR_NOMEM, "conv_transpose backward: out of arena memory for col buffers of %zu floats",
                       g.col_rows * ld_max);

    for (int n0 = 0; n0 < g.batch; n0 += g.chunk) {
        int nb = g.batch - n0 < g.chunk ? g.batch - n0 : g.chunk;
        size_t ld = (size_t)nb * L;
        for (int grp = 0; grp < g.groups; grp++) {
            for (int i = 0; i < nb; i++)
                dp_conv_im2col(&g, taps, dy + ((size_t)(n0 + i) * g.in_ch + (size_t)grp * g.group_in_ch) * out_plane,
                               col + (size_t)i * L, ld);
            if (dw) {
                const float *xg = gather_x_chunk(&g, xt->data, n0, nb, grp, xbuf); /* (C_in/g, nb * L) */
                dp_gemm(false, true, Cig, (int)g.col_rows, (int)ld, 1.0f, xg, (int)ld, col, (int)ld, 1.0f,
                        dw + (size_t)grp * Cig * g.col_rows, (int)g.col_rows);
            }
            if (dx) {
                const float *wg = wt->data + (size_t)grp * Cig * g.col_rows; /* (C_in/g, Cg * kvol) */
                if (nb == 1) { /* dX_g is the (C_in/g, L) block of dx itself */
                    dp_gemm(false, false, Cig, (int)L, (int)g.col_rows, 1.0f, wg, (int)g.col_rows, col, (int)L, 1.0f,
                            dx + ((size_t)n0 * g.out_ch + (size_t)grp * Cig) * L, (int)L);
                    continue;
                }
                dp_gemm(false, false, Cig, (int)ld, (int)g.col_rows, 1.0f, wg, (int)g.col_rows, col, (int)ld, 0.0f,
                        dxbuf, (int)ld);
                for (int i = 0; i < nb; i++)
                    for (int c = 0; c < Cig; c++) {
                        float *dst = dx + ((size_t)(n0 + i) * g.out_ch + (size_t)grp * Cig + c) * L;
                        const float *src = dxbuf + (size_t)c * ld + (size_t)i * L;
                        for (size_t l = 0; l < L; l++) dst[l] += src[l];
                    }
            }
        }
    }
    return DP_OK;
}
