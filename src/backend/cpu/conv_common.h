/* conv_common.h - library-internal: the im2col machinery that
 * ops_conv.c (convolution) and ops_conv_transpose.c (transposed
 * convolution) share. Not installed, not part of the public API.
 * Defined in conv_common.c, except dp_conv_im2col and dp_conv_col2im_add:
 * entry points to ops_conv.c's im2col kernels, which its loops inline.
 *
 * Everything is phrased for a convolution that reads an "input" of
 * in_size (D, H, W) with in_ch channels and writes an "output" of
 * out_size with out_ch channels (missing leading dims have size 1 and a
 * kernel of 1). A transposed convolution is the adjoint of such a
 * convolution: its input is the convolution's output and vice versa, so
 * it uses the same geometry with the roles of the tensors swapped.
 *
 *   col (Cg * kvol, L)   rows = (input channel of the group, kernel offset),
 *                        columns = output positions; L = OD * OH * OW
 *   im2col:      col = the input values each output position reads
 *                (0 for padding)
 *   col2im_add:  the adjoint, adds every col entry into the input
 *                position it was read from
 */
#ifndef DPTRAIN_CONV_COMMON_H
#define DPTRAIN_CONV_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "../conv_shape.h"
#include "dptrain/ops.h"

/* Target size of the buffers of one chunk of images: columns plus gemm
 * output (see dp_conv_geom_finish). */
#define DP_CONV_CHUNK_BUDGET_BYTES ((size_t)1 << 20)
/* Columns (images x output positions) a chunk has at least: measured on
 * ResNet-18's 512-channel 4x4 conv, 48 columns (the budget's 3 images) ran
 * at 120 GFLOP/s, 512 at 165-190. */
#define DP_CONV_MIN_COLUMNS 512
/* Output positions per image from which a chunk is a single image. */
#define DP_CONV_WIDE_OUTPUT 256

typedef struct {
    int ndim;                /* of the input: 3, 4 or 5 */
    int batch, in_ch, out_ch, groups;
    int group_in_ch;         /* Cg = C / groups */
    int group_out_ch;        /* OCg = OC / groups */
    int in_size[3];          /* (D, H, W), 1 for missing dims */
    int out_size[3];         /* (OD, OH, OW) */
    int kernel[3], stride[3], pad[3], dilation[3];
    size_t in_plane;         /* D * H * W */
    size_t out_plane;        /* L = OD * OH * OW */
    size_t kernel_vol;       /* kD * kH * kW */
    size_t col_rows;         /* Cg * kvol */
    int chunk;               /* images per im2col chunk */
    /* conv's small-plane path (ops_conv.c), set per call; NULL elsewhere */
    float *pad_scratch;      /* (Cg, H + 2 pad, W + 2 pad) of one image */
    int32_t *small_index;    /* backward: col2im gather tables */
    uint16_t *small_mask;
} dp_conv_geom_t;

/* One kernel tap along one dim: its input offset (k * dilation - pad) and
 * the range [lo, hi) of output positions whose input o * stride + off lies
 * inside the input; the others read padding. */
typedef struct {
    int off, lo, hi;
} dp_conv_tap_t;

/* Fills the derived fields (in_plane, out_plane, kernel_vol, col_rows,
 * chunk) once batch, channels, groups and the per-dim sizes are set. */
void dp_conv_geom_finish(dp_conv_geom_t *g);

/* The geometry of a checked node's convolution (conv_shape.h: for
 * conv_transpose, the adjoint's), finished. */
void dp_conv_geom_from_shape(const dp_conv_shape_t *s, dp_conv_geom_t *g);

/* The taps of every dim, (kD + kH + kW) entries from the arena (NULL when
 * it runs out), so the im2col loops do no division. */
dp_conv_tap_t *dp_conv_taps(const dp_conv_geom_t *g, dp_arena_t *arena);

/* x (Cg, D, H, W) of one image -> col rows of L floats, ldcol apart. */
void dp_conv_im2col(const dp_conv_geom_t *g, const dp_conv_tap_t *taps, const float *restrict x,
                    float *restrict col, size_t ldcol);

/* dx (Cg, D, H, W) of one image += the adjoint of im2col applied to col. */
void dp_conv_col2im_add(const dp_conv_geom_t *g, const dp_conv_tap_t *taps, const float *restrict col, size_t ldcol,
                        float *restrict dx);

/* The padded plane of each input channel of one image split by stride
 * phase into g->pad_scratch, laid out (Cg, sh, sw, Hq, Wq) with
 * Hq = ceil((H + 2 ph) / sh), Wq = ceil((W + 2 pw) / sw): phase (a, b) holds
 * the padded positions (i * sh + a, j * sw + b), zeros for padding, so that a
 * tap reads each output row as consecutive floats of one phase (the
 * small-plane im2col paths of kernels/conv_ISA.c). 2-D (H, W) only. Returns
 * the planes. */
const float *dp_conv_split_phases(const dp_conv_geom_t *g, const float *restrict x);

/* 1 when any input of the node has a grad (so the output needs one). */
static inline int dp_conv_needs_grad(const dp_node_t *node) {
    for (int i = 0; i < 3; i++)
        if (node->in[i] && node->in[i]->grad) return 1;
    return 0;
}

/* Sum of n floats in 8 float lanes (vectorizes), returned as double. */
double dp_conv_row_sum(const float *x, size_t n);

#endif
