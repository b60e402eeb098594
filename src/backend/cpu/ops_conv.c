/* ops_conv.c - DP_OP_CONV, forward and backward: N-d convolution matching
 * torch.nn.functional.conv1d / conv2d / conv3d
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.conv2d.html)
 * with padding, stride, dilation and groups.
 *
 * One implementation over (D, H, W): a 2-D conv is a 3-D conv with D = 1,
 * a 1-D conv has D = H = 1 (kernel 1, stride 1, pad 0, dilation 1 there).
 *
 * Method: im2col + matrix products (dp_gemm, gemm.h),
 * over chunks of a few images.
 *   col   (Cg * kvol, nb * L)   rows = (input channel of the group, kernel
 *                               offset), columns = (image of the chunk,
 *                               output position); L = OD * OH * OW
 *   W_g   (OCg, Cg * kvol)      the group's slice of the weight
 *   forward   Y_g (OCg, nb * L)      = W_g col
 *   backward  dW_g (OCg, Cg * kvol) += dY_g col^T
 *             dcol (Cg * kvol, nb*L)  = W_g^T dY_g, then col2im adds into dx
 *             db[oc]                 += sum of dy over images and positions
 * Each (image, out channel) row of L floats is contiguous in NCDHW, so Y_g
 * is scattered into y (and dY_g gathered from dy) a row at a time; with a
 * chunk of one image the gemm reads and writes y / dy in place. The chunk is
 * sized so that col and the chunk's Y_g stay around
 * DP_CONV_CHUNK_BUDGET_BYTES, in the L2 cache (measured: 1 MiB is best for
 * LeNet's two convs, smaller chunks make the products narrow and slow,
 * larger ones spill to L3). The
 * backward recomputes col instead of keeping it from the forward, which
 * would cost Cg * kvol * L floats per image for the whole batch.
 *
 * attr.fuse_relu (DP_FUSE_RELU; conv_shape.c refuses relu6) applies ReLU to
 * the output as it is written, and masks the output gradient by y > 0 in
 * backward (prepare_dy_chunk).
 *
 * Nothing is saved for backward (node->saved = NULL). All buffers come from
 * the arena. Backward adds into the grads of the inputs that have one.
 *
 * The geometry, im2col and col2im are shared with the transposed
 * convolution (ops_conv_transpose.c) through conv_common.h. Depthwise
 * convolutions (groups = input channels) take a direct path instead,
 * ops_conv_depthwise.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "conv_common.h"
#include "conv_winograd.h"
#include "dptrain/gemm.h"
#include "dptrain/ops.h"
#include "kernels/kernels.h"
#include "ops_conv_depthwise.h"

typedef dp_conv_geom_t conv_geom_t;
typedef dp_conv_tap_t conv_tap_t;


/* Checks the node's tensors and attributes (conv_shape.c) and fills the geometry. */
static dp_status_t conv_geometry(const dp_node_t *node, conv_geom_t *g) {
    dp_conv_shape_t s;
    DP_TRY(dp_conv_shape(node, &s));
    dp_conv_geom_from_shape(&s, g);
    return DP_OK;
}

/* dst[0, n) = src[0, n). Rows of im2col are short (often 5 to 16 floats),
 * so up to 16 floats are copied as two fixed-size, possibly overlapping
 * blocks that the compiler turns into single vector moves (overlap is
 * harmless for a copy); a plain loop would become a call to memcpy, which
 * costs more than such a copy. */
static inline void copy_short(float *restrict dst, const float *restrict src, int n) {
    if (n >= 8 && n <= 16) {
        memcpy(dst, src, 8 * sizeof(float));
        memcpy(dst + n - 8, src + n - 8, 8 * sizeof(float));
    } else if (n >= 4 && n < 8) {
        memcpy(dst, src, 4 * sizeof(float));
        memcpy(dst + n - 4, src + n - 4, 4 * sizeof(float));
    } else if (n > 16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        for (int i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* `rows` rows of n <= 16 floats into consecutive rows of dst (row r at
 * dst + r * n), src rows src_step >= n apart. While the rows still to go
 * cover at least 16 floats, a row is copied as one 16-float block: what
 * spills past its end lands in rows that are written after it, and the
 * source read stays inside what those rows read. The rest get exact
 * copies. */
static inline void copy_rows_short(float *restrict dst, const float *restrict src, size_t src_step, int rows,
                                   int n) {
    int r = 0;
    for (; (rows - r) * n >= 16; r++, dst += n, src += src_step) memcpy(dst, src, 16 * sizeof(float));
    for (; r < rows; r++, dst += n, src += src_step) copy_short(dst, src, n);
}

/* dst[i] += src[i] for `rows` rows of n floats, dst rows dst_stride apart,
 * src rows src_stride apart. Blocks of 8 the compiler vectorizes, then the
 * tail. */
static inline void add_rows(float *restrict dst, size_t dst_stride, const float *restrict src, size_t src_stride,
                            int rows, int n) {
    for (int r = 0; r < rows; r++, dst += dst_stride, src += src_stride) {
        int i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) dst[i + j] += src[i + j];
        for (; i < n; i++) dst[i] += src[i];
    }
}


/* For col2im_add_small_plane: for tap t and input position p (vector v,
 * lane j), the output position l that read p through t, or no lane. */
static dp_status_t small_plane_inverse(conv_geom_t *g, dp_arena_t *arena) {
    const int KH = g->kernel[1], KW = g->kernel[2], taps = KH * KW;
    const int H = g->in_size[1], W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int nvec = ((int)g->in_plane + 15) / 16;
    g->small_index = dp_arena_alloc(arena, sizeof(int32_t) * (size_t)taps * nvec * 16);
    g->small_mask = dp_arena_alloc(arena, sizeof(uint16_t) * (size_t)taps * nvec);
    if (!g->small_index || !g->small_mask) return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for col2im tables");
    for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++) {
            int t = kh * KW + kw;
            for (int v = 0; v < nvec; v++) {
                uint16_t m = 0;
                for (int j = 0; j < 16; j++) {
                    int p = 16 * v + j, l = 0;
                    if (p < H * W) {
                        /* ih = oh * stride + kh * dilation - pad */
                        int ih = p / W, iw = p % W;
                        int rh = ih + g->pad[1] - kh * g->dilation[1], rw = iw + g->pad[2] - kw * g->dilation[2];
                        if (rh >= 0 && rw >= 0 && rh % g->stride[1] == 0 && rw % g->stride[2] == 0 &&
                            rh / g->stride[1] < OH && rw / g->stride[2] < OW) {
                            l = rh / g->stride[1] * OW + rw / g->stride[2];
                            m |= (uint16_t)(1u << j);
                        }
                    }
                    g->small_index[((size_t)t * nvec + v) * 16 + j] = l;
                }
                g->small_mask[t * nvec + v] = m;
            }
        }
    return DP_OK;
}

/* Writes one image-group's columns: col rows of L floats at stride ldcol.
 * x: (Cg, D, H, W) of one image; col: (Cg * kvol, ldcol), columns [0, L). */
static void im2col(const conv_geom_t *g, const conv_tap_t *taps, const float *restrict x, float *restrict col,
                   size_t ldcol) {
    const dp_cpu_kernels_t *k = dp_cpu_kernels();
    if (k->conv_im2col_narrow && dp_conv_is_plain_narrow(g)) {
        k->conv_im2col_narrow(g, x, col, ldcol);
        return;
    }
    if (g->pad_scratch) { /* set by use_small_plane only when the ISA has the path */
        k->conv_im2col_small(g, x, col, ldcol);
        return;
    }
    const int OD = g->out_size[0], OH = g->out_size[1], OW = g->out_size[2];
    const int H = g->in_size[1], W = g->in_size[2];
    const int sd = g->stride[0], sh = g->stride[1], sw = g->stride[2];
    const size_t out_hw = (size_t)OH * OW;
    const conv_tap_t *td = taps, *th = td + g->kernel[0], *tw = th + g->kernel[1];
    float *row = col;
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *xc = x + (size_t)c * g->in_plane; /* (D, H, W) */
        for (int kd = 0; kd < g->kernel[0]; kd++)
            for (int kh = 0; kh < g->kernel[1]; kh++)
                for (int kw = 0; kw < g->kernel[2]; kw++, row += ldcol) {
                    const int hlo = th[kh].lo, hhi = th[kh].hi, rows = hhi - hlo;
                    const int lo = tw[kw].lo, hi = tw[kw].hi, n = hi - lo;
                    float *dst = row; /* (OD, OH, OW) */
                    for (int od = 0; od < OD; od++, dst += out_hw) {
                        if (od < td[kd].lo || od >= td[kd].hi || rows == 0 || n == 0) {
                            memset(dst, 0, out_hw * sizeof(float));
                            continue;
                        }
                        /* rows oh in [hlo, hhi) read the input, the others padding */
                        if (hlo > 0) memset(dst, 0, (size_t)hlo * OW * sizeof(float));
                        if (hhi < OH) memset(dst + (size_t)hhi * OW, 0, (size_t)(OH - hhi) * OW * sizeof(float));
                        float *out = dst + (size_t)hlo * OW;
                        /* src[(ow - lo) * sw] is the input under output (oh = hlo, ow) */
                        const float *src = xc + ((size_t)(od * sd + td[kd].off) * H + (hlo * sh + th[kh].off)) * W +
                                           (tw[kw].off + lo * sw);
                        const size_t src_step = (size_t)sh * W;
                        if (sw != 1 && n == OW) { /* strided, every column inside: no test per float */
                            for (int r = 0; r < rows; r++, out += OW, src += src_step)
                                for (int ow = 0; ow < OW; ow++) out[ow] = src[(size_t)ow * sw];
                        } else if (sw != 1) {
                            for (int r = 0; r < rows; r++, out += OW, src += src_step)
                                for (int ow = 0; ow < OW; ow++)
                                    out[ow] = ow >= lo && ow < hi ? src[(size_t)(ow - lo) * sw] : 0.0f;
                        } else if (n == OW && OW <= 16) { /* the fast path: whole short rows */
                            copy_rows_short(out, src, src_step, rows, OW);
                        } else {
                            for (int r = 0; r < rows; r++, out += OW, src += src_step) {
                                for (int ow = 0; ow < lo; ow++) out[ow] = 0.0f;
                                copy_short(out + lo, src, n);
                                for (int ow = hi; ow < OW; ow++) out[ow] = 0.0f;
                            }
                        }
                    }
                }
    }
}

/* The adjoint of im2col: adds every col entry into the input position it
 * was read from; padding entries are dropped.
 * col: (Cg * kvol, ldcol), columns [0, L); dx: (Cg, D, H, W) of one image.
 * Rows go in (c, kw, kd, kh) order: the next row then adds into the same
 * input rows at the same alignment, or (next kw) after many other rows; in
 * (kd, kh, kw) order it would reload, one float to the right, what it has
 * just stored, which stalls the stores-to-loads forwarding. Always inlined
 * (with col2im_add_plain_narrow), so the backward's copy is compiled as for
 * a single caller (dp_conv_col2im_add gets its own copy). */
static inline __attribute__((always_inline)) void col2im_add(const conv_geom_t *g, const conv_tap_t *taps,
                                                             const float *restrict col, size_t ldcol,
                                                             float *restrict dx) {
    const dp_cpu_kernels_t *k = dp_cpu_kernels();
    if (k->conv_col2im_narrow && dp_conv_is_plain_narrow(g)) {
        k->conv_col2im_narrow(g, col, ldcol, dx);
        return;
    }
    if (g->small_index) { /* set only when the ISA has the small-plane path */
        k->conv_col2im_small(g, col, ldcol, dx);
        return;
    }
    const int OH = g->out_size[1], OW = g->out_size[2];
    const int H = g->in_size[1], W = g->in_size[2];
    const int KD = g->kernel[0], KH = g->kernel[1], KW = g->kernel[2];
    const int sd = g->stride[0], sh = g->stride[1], sw = g->stride[2];
    const size_t out_hw = (size_t)OH * OW;
    const conv_tap_t *td = taps, *th = td + KD, *tw = th + KH;
    for (int c = 0; c < g->group_in_ch; c++) {
        float *dxc = dx + (size_t)c * g->in_plane; /* (D, H, W) */
        for (int kw = 0; kw < KW; kw++) {
            const int lo = tw[kw].lo, hi = tw[kw].hi, n = hi - lo;
            if (n == 0) continue;
            for (int kd = 0; kd < KD; kd++)
                for (int kh = 0; kh < KH; kh++) {
                    const float *row = col + ((((size_t)c * KD + kd) * KH + kh) * KW + kw) * ldcol;
                    const int hlo = th[kh].lo, hhi = th[kh].hi;
                    for (int od = td[kd].lo; od < td[kd].hi; od++) {
                        /* dst[(ow - lo) * sw] is the input under output (oh = hlo, ow) */
                        float *dst = dxc + ((size_t)(od * sd + td[kd].off) * H + (hlo * sh + th[kh].off)) * W +
                                     (tw[kw].off + lo * sw);
                        const float *src = row + (size_t)od * out_hw + (size_t)hlo * OW + lo;
                        if (sw == 1) {
                            add_rows(dst, (size_t)sh * W, src, (size_t)OW, hhi - hlo, n);
                            continue;
                        }
                        for (int oh = hlo; oh < hhi; oh++, src += OW, dst += (size_t)sh * W)
                            for (int ow = 0; ow < n; ow++) dst[(size_t)ow * sw] += src[ow];
                    }
                }
        }
    }
}

/* The shared entry points (conv_common.h). The convolution itself calls the
 * static versions above, which the compiler inlines into its loops. */
void dp_conv_im2col(const conv_geom_t *g, const conv_tap_t *taps, const float *restrict x, float *restrict col,
                    size_t ldcol) {
    im2col(g, taps, x, col, ldcol);
}

void dp_conv_col2im_add(const conv_geom_t *g, const conv_tap_t *taps, const float *restrict col, size_t ldcol,
                        float *restrict dx) {
    col2im_add(g, taps, col, ldcol, dx);
}

/* Sets g->pad_scratch when the small-plane path applies. */
static dp_status_t use_small_plane(conv_geom_t *g, dp_arena_t *arena) {
    g->pad_scratch = NULL;
    g->small_index = NULL;
    g->small_mask = NULL;
    const dp_cpu_kernels_t *k = dp_cpu_kernels();
    if (k->conv_im2col_small && !(k->conv_im2col_narrow && dp_conv_is_plain_narrow(g)) && dp_conv_is_small_plane(g)) {
        size_t n = (size_t)g->group_in_ch * (g->in_size[1] + 2 * g->pad[1]) * (g->in_size[2] + 2 * g->pad[2]);
        if (dp_conv_is_phase_plane(g) && dp_conv_phase_plane_floats(g) > n) n = dp_conv_phase_plane_floats(g);
        g->pad_scratch = dp_arena_floats(arena, n);
        if (!g->pad_scratch) return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for a padded plane");
    }
    return DP_OK;
}

/* Forward for small padded planes, without computing on padding.
 *
 * On ResNet's 4x4 stage with a 3x3 kernel and pad 1, 31% of the im2col
 * entries are padding, which the im2col + gemm forward multiplies anyway.
 * Here every kernel tap (kh, kw) is its own product over only the output
 * positions it reads inside the input: for tap t, output row oh and the
 * valid columns [ow_lo, ow_hi) of that row (the conv_tap_t ranges),
 *   Yt rows (oh, ow, n) += X rows (ih, iw, n) Wt     (K = C, N = OC)
 * with the operands laid out so that each such block is ONE dp_gemm on
 * strided views, without im2col:
 *   X   (H, sw, Wq, nb, C)  the chunk's input, channels innermost, columns
 *                           split by stride phase: padded column
 *                           iw + pw = j * sw + b lives at (b, j), so the
 *                           positions (ow, n) of a segment are consecutive
 *                           rows of C floats (lda = C)
 *   Wt  (kH * kW, C, OC)    the weight, tap-major, reordered once per call
 *                           (B, which the gemm reads in place, ldb = OC)
 *   Yt  (OH, OW, nb, OC)    starts as the bias, every product adds (beta 1)
 * then Yt is transposed into y (n, OC, OH, OW), with the fused ReLU.
 * Padded columns of X are never read, so never written.
 * Applies to 2-D (and 1-D) convolutions without groups or dilation, with
 * padding, whose output plane has at most 64 positions (ResNet's 7x7 and
 * 4x4 stages: 31% of the im2col entries are padding at 4x4, 18% at 7x7).
 * Measured on ResNet-18 at batch 64, forward, one core, ms before -> after:
 * s4.conv_s2 13.1-14.4 -> 8.6-9.3, s4.conv 27-29 -> 17, s3.conv 20-22.6 ->
 * 14.3, s3.conv_s2 10.3 -> 8.9; planes of 196 (s2) gained nothing, so they
 * keep im2col. The backward: conv_backward_tap_plane. */
static int is_tap_plane(const conv_geom_t *g) {
    return g->in_size[0] == 1 && g->kernel[0] == 1 && g->groups == 1 && g->dilation[1] == 1 &&
           g->dilation[2] == 1 && g->out_plane <= 64 && (g->pad[1] > 0 || g->pad[2] > 0);
}

/* Images per chunk of the tap-plane forward: X and Yt of a chunk in about
 * DP_CONV_CHUNK_BUDGET_BYTES (L2). Measured on s4.conv_s2 (batch 64, 104 KB
 * per image): 8, 16, 32 and 64 images per chunk all within noise, so the
 * budget decides (10 images there). */
static int tap_plane_chunk(const conv_geom_t *g, int Wq, size_t budget) {
    size_t per_image =
        ((size_t)g->in_size[1] * g->stride[2] * Wq * g->in_ch + g->out_plane * g->out_ch) * sizeof(float);
    size_t nb = budget / per_image;
    if (nb < 1) nb = 1;
    return nb < (size_t)g->batch ? (int)nb : g->batch;
}

/* The chunk's images n0 .. n0 + nb - 1 between x (N, C, H, W) and the
 * phase layout X (H, sw, Wq, nb, C):
 *   X[ih][b][j][n][c] = x[n0 + n][c][ih][iw],  iw + pw = j * sw + b.
 * to_x false copies x into X (forward, and the weight gradient); to_x true
 * is its adjoint, adding X into x (the input gradient). Padded columns of X
 * are neither read nor written. */
static void tap_plane_copy(const conv_geom_t *g, int Wq, int n0, int nb, float *x, float *xt, bool to_x) {
    const int C = g->in_ch, H = g->in_size[1], W = g->in_size[2], sw = g->stride[2], pw = g->pad[2];
    for (int n = 0; n < nb; n++) {
        float *xn = x + (size_t)(n0 + n) * C * g->in_plane;
        for (int ih = 0; ih < H; ih++)
            for (int iw = 0; iw < W; iw++) {
                int b = (iw + pw) % sw, j = (iw + pw) / sw;
                float *pt = xt + ((((size_t)ih * sw + b) * Wq + j) * nb + n) * C;
                float *px = xn + (size_t)ih * W + iw;
                if (to_x)
                    for (int c = 0; c < C; c++) px[(size_t)c * g->in_plane] += pt[c];
                else
                    for (int c = 0; c < C; c++) pt[c] = px[(size_t)c * g->in_plane];
            }
    }
}

/* Between the weight w (OC, C, kH, kW) and Wt (kH * kW, C, OC), 16 output
 * channels at a time: to_w false sets Wt[t][c][oc] = w[oc][c][t]; to_w true
 * adds Wt into w (the weight gradient). */
static void tap_plane_weight(const conv_geom_t *g, float *w, float *wt, bool to_w) {
    const int C = g->in_ch, OC = g->out_ch, ntaps = g->kernel[1] * g->kernel[2];
    for (int oc0 = 0; oc0 < OC; oc0 += 16) {
        int ocn = OC - oc0 < 16 ? OC - oc0 : 16;
        for (int c = 0; c < C; c++)
            for (int t = 0; t < ntaps; t++) {
                float *pt = wt + ((size_t)t * C + c) * OC + oc0;
                float *pw = w + ((size_t)oc0 * C + c) * ntaps + t;
                if (to_w)
                    for (int o = 0; o < ocn; o++) pw[(size_t)o * C * ntaps] += pt[o];
                else
                    for (int o = 0; o < ocn; o++) pt[o] = pw[(size_t)o * C * ntaps];
            }
    }
}

static dp_status_t conv_forward_tap_plane(const conv_geom_t *g, const conv_tap_t *taps, const float *x,
                                          const float *w, const float *bias, int relu, float *y,
                                          dp_arena_t *arena) {
    const int C = g->in_ch, OC = g->out_ch, H = g->in_size[1], W = g->in_size[2];
    const int OW = g->out_size[2], KH = g->kernel[1], KW = g->kernel[2];
    const int sw = g->stride[2], pw = g->pad[2], ntaps = KH * KW;
    const int Wq = (W + 2 * pw + sw - 1) / sw;
    const size_t L = g->out_plane;
    const int chunk = tap_plane_chunk(g, Wq, DP_CONV_CHUNK_BUDGET_BYTES);
    const conv_tap_t *th = taps + g->kernel[0], *tw = th + KH;
    const size_t wt_n = (size_t)ntaps * C * OC, xt_n = (size_t)H * sw * Wq * chunk * C, yt_n = L * chunk * OC;
    float *wt = dp_arena_floats(arena, wt_n);
    float *xt = dp_arena_floats(arena, xt_n);
    float *yt = dp_arena_floats(arena, yt_n);
    if (!wt || !xt || !yt)
        return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for the tap-plane buffers of %zu floats",
                       wt_n + xt_n + yt_n);
    tap_plane_weight(g, (float *)w, wt, false);
    for (int n0 = 0; n0 < g->batch; n0 += chunk) {
        const int nb = g->batch - n0 < chunk ? g->batch - n0 : chunk;
        tap_plane_copy(g, Wq, n0, nb, (float *)x, xt, false);
        for (size_t r = 0; r < L * nb; r++) {
            if (bias)
                memcpy(yt + r * OC, bias, sizeof(float) * (size_t)OC);
            else
                memset(yt + r * OC, 0, sizeof(float) * (size_t)OC);
        }
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const int lo = tw[kw].lo, hi = tw[kw].hi;
                if (lo >= hi) continue;
                const float *wtap = wt + (size_t)(kh * KW + kw) * C * OC; /* (C, OC) */
                /* padded column of output column ow: ow * sw + kw = j * sw + b */
                const int b = kw % sw, j_lo = lo + kw / sw;
                for (int oh = th[kh].lo; oh < th[kh].hi; oh++) {
                    const int ih = oh * g->stride[1] + th[kh].off;
                    const float *a = xt + (((size_t)ih * sw + b) * Wq + j_lo) * nb * C;
                    float *c = yt + ((size_t)oh * OW + lo) * nb * OC;
                    dp_gemm(false, false, (hi - lo) * nb, OC, C, 1.0f, a, C, wtap, OC, 1.0f, c, OC);
                }
            }
        /* y[n0 + n][oc][l] = Yt[l][n][oc], ReLU'd when fused */
        for (int n = 0; n < nb; n++)
            for (int oc = 0; oc < OC; oc++) {
                float *dst = y + ((size_t)(n0 + n) * OC + oc) * L;
                const float *src = yt + (size_t)n * OC + oc;
                for (size_t l = 0; l < L; l++) {
                    float v = src[l * nb * OC];
                    dst[l] = relu && v < 0.0f ? 0.0f : v; /* as the relu op */
                }
            }
    }
    return DP_OK;
}

dp_status_t dp_conv_forward(dp_node_t *node, dp_arena_t *arena) {
    conv_geom_t g;
    DP_TRY(conv_geometry(node, &g));
    const float *x = node->in[0]->data;                      /* (N, C, D, H, W) */
    const float *w = node->in[1]->data;                      /* (OC, Cg, kD, kH, kW) */
    const float *bias = node->in[2] ? node->in[2]->data : NULL; /* (OC) */
    const size_t L = g.out_plane;

    int shape[DP_MAX_DIMS] = {g.batch, g.out_ch};
    for (int s = 0; s < g.ndim - 2; s++) shape[2 + s] = g.out_size[3 - (g.ndim - 2) + s];
    dp_tensor_t *out = &node->out;
    dp_tensor_set_shape(out, g.ndim, shape);
    size_t numel = dp_tensor_numel(out);
    out->data = dp_arena_floats(arena, numel); /* (N, OC, OD, OH, OW) */
    out->grad = dp_conv_needs_grad(node) ? dp_grad_alloc(arena, out, numel) : NULL;
    node->saved = NULL;
    if (dp_conv_depthwise_applies(&g)) {
        if (!out->data || (dp_conv_needs_grad(node) && !out->grad))
            return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for output %zu floats", numel);
        return dp_conv_depthwise_forward(&g, x, w, bias, node->attr.fuse_relu, out->data, arena);
    }
    if (dp_conv_winograd_applies(&g)) {
        if (!out->data || (dp_conv_needs_grad(node) && !out->grad))
            return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for output %zu floats", numel);
        return dp_conv_winograd_forward(&g, x, w, bias, node->attr.fuse_relu, out->data, arena);
    }
    if (is_tap_plane(&g)) {
        const conv_tap_t *taps = dp_conv_taps(&g, arena);
        if (!out->data || (dp_conv_needs_grad(node) && !out->grad) || !taps)
            return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for output %zu floats", numel);
        return conv_forward_tap_plane(&g, taps, x, w, bias, node->attr.fuse_relu, out->data, arena);
    }
    size_t ld_max = (size_t)g.chunk * L;
    float *col = dp_arena_floats(arena, g.col_rows * ld_max); /* (Cg * kvol, chunk * L) */
    float *ybuf = g.chunk > 1 ? dp_arena_floats(arena, (size_t)g.group_out_ch * ld_max) : NULL; /* (OCg, chunk * L) */
    const conv_tap_t *taps = dp_conv_taps(&g, arena);
    DP_TRY(use_small_plane(&g, arena));
    if (!out->data || (dp_conv_needs_grad(node) && !out->grad) || !col || (g.chunk > 1 && !ybuf) || !taps)
        return dp_fail(DP_ERR_NOMEM, "conv: out of arena memory for output %zu floats and im2col buffer %zu floats",
                       numel, g.col_rows * ld_max);

    float *y = out->data;
    const int OCg = g.group_out_ch;
    const int relu = node->attr.fuse_relu;
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int n0 = 0; n0 < g.batch; n0 += g.chunk) {
        int nb = g.batch - n0 < g.chunk ? g.batch - n0 : g.chunk;
        size_t ld = (size_t)nb * L;
        for (int grp = 0; grp < g.groups; grp++) {
            for (int i = 0; i < nb; i++)
                im2col(&g, taps, x + ((size_t)(n0 + i) * g.in_ch + (size_t)grp * g.group_in_ch) * g.in_plane,
                       col + (size_t)i * L, ld);
            const float *wg = w + (size_t)grp * OCg * g.col_rows; /* (OCg, Cg * kvol) */
            /* One image: Y_g is the (OCg, L) block of y itself. */
            float *yg = nb == 1 ? y + ((size_t)n0 * g.out_ch + (size_t)grp * OCg) * L : ybuf;
            dp_gemm(false, false, OCg, (int)ld, (int)g.col_rows, 1.0f, wg, (int)g.col_rows, col, (int)ld, 0.0f, yg,
                   (int)ld);
            for (int i = 0; i < nb; i++)
                for (int oc = 0; oc < OCg; oc++) {
                    float *dst = y + ((size_t)(n0 + i) * g.out_ch + (size_t)grp * OCg + oc) * L;
                    const float *src = yg + (size_t)oc * ld + (size_t)i * L;
                    float bv = bias ? bias[grp * OCg + oc] : 0.0f;
                    if (relu) { /* as the relu op */
                        if (src == dst)
                            loops->add_scalar_relu_inplace(dst, L, bv);
                        else
                            loops->add_scalar_relu(dst, src, L, bv);
                    } else if (src == dst) {
                        if (bias) loops->add_scalar_inplace(dst, L, bv);
                    } else {
                        loops->add_scalar(dst, src, L, bv);
                    }
                }
        }
    }
    return DP_OK;
}

/* dY_g of one chunk, prepared in one pass over its rows while they are in
 * cache: with a fused ReLU the gradient reaching the convolution is dy where
 * the output is positive and 0 elsewhere (relu'(z) = [z > 0] = [y > 0]);
 * with several images the rows are gathered into dybuf (OCg, nb * L),
 * masked on the way (out.grad is left as it was: writing it back cost a
 * pass over memory, 4 MB a step on LeNet's conv2 at batch 256), with one
 * image (wide outputs such as LeNet's conv1) they are masked in place (the node's own out.grad is complete once
 * backward reaches the node, and nothing reads it afterwards); each masked
 * row is summed into bias_sum[oc]. Returns dY_g. */
static const float *prepare_dy_chunk(const conv_geom_t *g, const dp_node_t *node, int n0, int nb, int grp,
                                     float *dybuf, double *bias_sum) {
    const size_t L = g->out_plane;
    const int OCg = g->group_out_ch;
    const int relu = node->attr.fuse_relu;
    const size_t ld = (size_t)nb * L;
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops;
    for (int i = 0; i < nb; i++)
        for (int oc = 0; oc < OCg; oc++) {
            size_t row = ((size_t)(n0 + i) * g->out_ch + (size_t)grp * OCg + oc) * L;
            float *dy = node->out.grad + row;
            if (nb > 1) { /* gathered into dybuf, masked on the way */
                float *dst = dybuf + (size_t)oc * ld + (size_t)i * L;
                if (relu)
                    loops->relu_mask_copy(dst, dy, node->out.data + row, L);
                else
                    memcpy(dst, dy, L * sizeof(float));
                dy = dst;
            } else if (relu) {
                loops->relu_mask(dy, node->out.data + row, L);
            }
            if (bias_sum) bias_sum[grp * OCg + oc] += loops->row_sum(dy, L);
        }
    return nb > 1 ? dybuf : node->out.grad + ((size_t)n0 * g->out_ch + (size_t)grp * OCg) * L;
}

/* Backward of the tap-plane forward (same layouts, same segments):
 *   dYt (OH, OW, nb, OC)  the chunk's dy, channels innermost, masked by the
 *                         fused ReLU; its per-channel sums give the bias
 *                         gradient
 *   dWt[t] (C, OC)       += X rows (ih, iw, n)^T dYt rows (oh, ow, n), one
 *                           trans_a dp_gemm per (tap, output row) segment,
 *                           accumulated over chunks, added into w->grad in
 *                           (OC, C, kH, kW) order once at the end
 *   dX (H, sw, Wq, nb, C)  += dYt rows Wt[t]^T per segment, then added into
 *                           dx (N, C, H, W) by the adjoint of the input copy
 * Padding is neither read nor computed on.
 * Measured on ResNet-18 at batch 64, backward, one core, ms im2col ->
 * tap-plane (shared machine, 3 alternating runs): s3.conv 39-43 -> 32-33,
 * s4.conv_s2 26.6-28 -> 20.7-22.3, s4.conv 57-59 -> 43-45; s3.conv_s2
 * (128 input channels) 21.5-24.4 -> 24.4-26.3 with 1 MiB chunks and
 * within noise with 4 MiB: tap_plane_backward_pays keeps it on im2col. */
/* Chunk budget of the tap-plane backward: each segment's weight-gradient
 * product reads and writes the tap's whole dWt block (C x OC) for
 * (positions x images) rows of X and dY, so the chunk grows with the
 * block: X and dYt of a chunk about 4 times the block, at least
 * DP_CONV_CHUNK_BUDGET_BYTES. Measured on s4.conv (512 x 512, a 1 MiB
 * block): budget 1 MiB 65 ms, 4 MiB 46-48 ms, 32 MiB 45-53 ms; on s3.conv
 * (a 256 KiB block) 1 MiB 34-35 ms, 4 MiB 47 ms. */
static size_t tap_plane_backward_budget(const conv_geom_t *g) {
    size_t block = (size_t)g->in_ch * g->out_ch * sizeof(float);
    return 4 * block > DP_CONV_CHUNK_BUDGET_BYTES ? 4 * block : DP_CONV_CHUNK_BUDGET_BYTES;
}

static dp_status_t conv_backward_tap_plane(const conv_geom_t *g, const conv_tap_t *taps, dp_node_t *node,
                                           float *dx, float *dw, double *bias_sum, dp_arena_t *arena) {
    const int C = g->in_ch, OC = g->out_ch, KH = g->kernel[1], KW = g->kernel[2], ntaps = KH * KW;
    const int OW = g->out_size[2], sw = g->stride[2], H = g->in_size[1];
    const int Wq = (g->in_size[2] + 2 * g->pad[2] + sw - 1) / sw;
    const int chunk = tap_plane_chunk(g, Wq, tap_plane_backward_budget(g));
    const size_t L = g->out_plane;
    const conv_tap_t *th = taps + g->kernel[0], *tw = th + KH;
    const size_t wt_n = (size_t)ntaps * C * OC, xt_n = (size_t)H * sw * Wq * chunk * C, yt_n = L * chunk * OC;
    float *wt = dx ? dp_arena_floats(arena, wt_n) : NULL;   /* Wt (taps, C, OC) */
    float *dwt = dw ? dp_arena_floats(arena, wt_n) : NULL;  /* dWt (taps, C, OC) */
    float *xt = dw ? dp_arena_floats(arena, xt_n) : NULL;   /* X */
    float *dxt = dx ? dp_arena_floats(arena, xt_n) : NULL;  /* dX */
    float *dyt = dp_arena_floats(arena, yt_n);              /* dYt */
    if ((dx && (!wt || !dxt)) || (dw && (!dwt || !xt)) || !dyt)
        return dp_fail(DP_ERR_NOMEM, "conv backward: out of arena memory for the tap-plane buffers of %zu floats",
                       2 * (wt_n + xt_n) + yt_n);
    const float *w = node->in[1]->data;
    if (wt) tap_plane_weight(g, (float *)w, wt, false);
    if (dwt) memset(dwt, 0, wt_n * sizeof(float));
    const int relu = node->attr.fuse_relu;
    for (int n0 = 0; n0 < g->batch; n0 += chunk) {
        const int nb = g->batch - n0 < chunk ? g->batch - n0 : chunk;
        /* dYt[l][n][oc] = dy[n0 + n][oc][l], 0 where the fused ReLU's output is 0 */
        for (int n = 0; n < nb; n++)
            for (int oc = 0; oc < OC; oc++) {
                const size_t row = ((size_t)(n0 + n) * OC + oc) * L;
                const float *dy = node->out.grad + row, *y = node->out.data + row;
                float *dst = dyt + (size_t)n * OC + oc;
                for (size_t l = 0; l < L; l++) dst[l * nb * OC] = relu && !(y[l] > 0.0f) ? 0.0f : dy[l];
                if (bias_sum) {
                    double sum = 0.0;
                    for (size_t l = 0; l < L; l++) sum += dst[l * nb * OC];
                    bias_sum[oc] += sum;
                }
            }
        if (xt) tap_plane_copy(g, Wq, n0, nb, node->in[0]->data, xt, false);
        if (dxt) memset(dxt, 0, (size_t)H * sw * Wq * nb * C * sizeof(float));
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const int lo = tw[kw].lo, hi = tw[kw].hi, t = kh * KW + kw;
                if (lo >= hi) continue;
                const int b = kw % sw, j_lo = lo + kw / sw;
                for (int oh = th[kh].lo; oh < th[kh].hi; oh++) {
                    const int ih = oh * g->stride[1] + th[kh].off, rows = (hi - lo) * nb;
                    const size_t xoff = (((size_t)ih * sw + b) * Wq + j_lo) * nb * C;
                    const float *dyseg = dyt + ((size_t)oh * OW + lo) * nb * OC;
                    if (dwt)
                        dp_gemm(true, false, C, OC, rows, 1.0f, xt + xoff, C, dyseg, OC, 1.0f,
                                dwt + (size_t)t * C * OC, OC);
                    if (dxt)
                        dp_gemm(false, true, rows, C, OC, 1.0f, dyseg, OC, wt + (size_t)t * C * OC, OC, 1.0f,
                                dxt + xoff, C);
                }
            }
        if (dxt) tap_plane_copy(g, Wq, n0, nb, dx, dxt, true);
    }
    if (dwt) tap_plane_weight(g, dw, dwt, true);
    return DP_OK;
}

/* Where the tap-plane backward was measured faster than im2col (see
 * above): at least 256 input channels. */
static int tap_plane_backward_pays(const conv_geom_t *g) {
    return is_tap_plane(g) && g->in_ch >= 256;
}

/* The im2col backward: dw += dY col^T, dcol = W^T dY then col2im into dx,
 * bias_sum[oc] += the rows of dY (prepare_dy_chunk), chunk by chunk. */
static dp_status_t conv_backward_im2col(conv_geom_t *g, dp_node_t *node, float *dx, float *dw, double *bias_sum,
                                        dp_arena_t *arena) {
    const dp_tensor_t *xt = node->in[0], *wt = node->in[1];
    const size_t L = g->out_plane;
    const int OCg = g->group_out_ch;
    size_t ld_max = (size_t)g->chunk * L;
    float *col = dw ? dp_arena_floats(arena, g->col_rows * ld_max) : NULL;  /* (Cg * kvol, chunk * L) */
    float *dcol = dx ? dp_arena_floats(arena, g->col_rows * ld_max) : NULL; /* (Cg * kvol, chunk * L) */
    float *dybuf = g->chunk > 1 ? dp_arena_floats(arena, (size_t)OCg * ld_max) : NULL; /* (OCg, chunk * L) */
    const conv_tap_t *taps = dp_conv_taps(g, arena);
    DP_TRY(use_small_plane(g, arena));
    if (g->pad_scratch && dx) DP_TRY(small_plane_inverse(g, arena));
    if ((dw && !col) || (dx && !dcol) || (g->chunk > 1 && !dybuf) || !taps)
        return dp_fail(DP_ERR_NOMEM, "conv backward: out of arena memory for im2col buffers of %zu floats",
                       g->col_rows * ld_max);

    for (int n0 = 0; n0 < g->batch; n0 += g->chunk) {
        int nb = g->batch - n0 < g->chunk ? g->batch - n0 : g->chunk;
        size_t ld = (size_t)nb * L;
        for (int grp = 0; grp < g->groups; grp++) {
            const float *dyg = prepare_dy_chunk(g, node, n0, nb, grp, dybuf, bias_sum); /* (OCg, nb * L) */
            if (dw) {
                for (int i = 0; i < nb; i++)
                    im2col(g, taps,
                           xt->data + ((size_t)(n0 + i) * g->in_ch + (size_t)grp * g->group_in_ch) * g->in_plane,
                           col + (size_t)i * L, ld);
                dp_gemm(false, true, OCg, (int)g->col_rows, (int)ld, 1.0f, dyg, (int)ld, col, (int)ld, 1.0f,
                       dw + (size_t)grp * OCg * g->col_rows, (int)g->col_rows);
            }
            if (dx) {
                const float *wg = wt->data + (size_t)grp * OCg * g->col_rows; /* (OCg, Cg * kvol) */
                dp_gemm(true, false, (int)g->col_rows, (int)ld, OCg, 1.0f, wg, (int)g->col_rows, dyg, (int)ld, 0.0f,
                       dcol, (int)ld);
                for (int i = 0; i < nb; i++)
                    col2im_add(g, taps, dcol + (size_t)i * L, ld,
                               dx + ((size_t)(n0 + i) * g->in_ch + (size_t)grp * g->group_in_ch) * g->in_plane);
            }
        }
    }
    return DP_OK;
}

dp_status_t dp_conv_backward(dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    conv_geom_t g;
    DP_TRY(conv_geometry(node, &g));
    dp_tensor_t *xt = node->in[0], *wt = node->in[1], *bt = node->in[2];
    if (xt->grad) dp_grad_prepare(xt); /* col2im adds */
    if (wt->grad) dp_grad_prepare(wt);
    if (bt && bt->grad) dp_grad_prepare(bt);
    float *dx = xt->grad; /* (N, C, D, H, W) */
    float *dw = wt->grad; /* (OC, Cg, kD, kH, kW) */
    int want_bias = bt && bt->grad;
    if (!dx && !dw && !want_bias) return DP_OK;
    /* every path adds the rows of dY into bias_sum (double), added to db once */
    double *bias_sum = want_bias ? dp_arena_alloc(arena, sizeof(double) * (size_t)g.out_ch) : NULL; /* (OC) */
    if (want_bias && !bias_sum) return dp_fail(DP_ERR_NOMEM, "conv backward: out of arena memory for bias sums");
    if (bias_sum) memset(bias_sum, 0, sizeof(double) * (size_t)g.out_ch);
    if (dp_conv_depthwise_applies(&g)) {
        DP_TRY(dp_conv_depthwise_backward(&g, node, dx, dw, bias_sum, arena));
    } else if (dp_conv_winograd_applies(&g)) {
        DP_TRY(dp_conv_winograd_backward(&g, xt->data, wt->data, node->out.data, node->out.grad,
                                         node->attr.fuse_relu, dx, dw, bias_sum, arena));
    } else if (tap_plane_backward_pays(&g)) {
        const conv_tap_t *taps = dp_conv_taps(&g, arena);
        if (!taps) return dp_fail(DP_ERR_NOMEM, "conv backward: out of arena memory for the kernel taps");
        DP_TRY(conv_backward_tap_plane(&g, taps, node, dx, dw, bias_sum, arena));
    } else {
        DP_TRY(conv_backward_im2col(&g, node, dx, dw, bias_sum, arena));
    }
    if (bias_sum) /* db[oc] += sum of dy over images and positions */
        for (int oc = 0; oc < g.out_ch; oc++) bt->grad[oc] += (float)bias_sum[oc];
    return DP_OK;
}
