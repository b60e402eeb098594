/* conv_common.c - the convolution geometry that ops_conv.c (convolution),
 * ops_conv_transpose.c (transposed convolution) and ops_pool.c share
 * (conv_common.h, and dp_conv_out_size of ops.h): output sizes, the derived
 * sizes and chunking of dp_conv_geom_t, the kernel taps, and the bias
 * gradient's row sums. The im2col and col2im kernels stay in ops_conv.c,
 * where the convolution's own loops inline them (dp_conv_im2col and
 * dp_conv_col2im_add are their entry points for the transposed conv).
 */
#include <stddef.h>

#include "conv_common.h"
#include "dptrain/ops.h"
#include "kernels/kernels.h"

typedef dp_conv_geom_t conv_geom_t;
typedef dp_conv_tap_t conv_tap_t;

int dp_conv_out_size(int in, int kernel, int stride, int pad, int dilation) {
    /* floor((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1, as in
     * PyTorch; a window that does not fit even once gives 0. */
    long span = (long)in + 2L * pad - (long)dilation * (kernel - 1) - 1;
    if (span < 0 || stride < 1) return 0;
    return (int)(span / stride + 1);
}

void dp_conv_geom_finish(dp_conv_geom_t *g) {
    g->in_plane = g->out_plane = g->kernel_vol = 1;
    for (int d = 0; d < 3; d++) {
        g->in_plane *= (size_t)g->in_size[d];
        g->out_plane *= (size_t)g->out_size[d];
        g->kernel_vol *= (size_t)g->kernel[d];
    }
    g->col_rows = (size_t)g->group_in_ch * g->kernel_vol;
    /* per image: its columns and its rows of Y_g / dY_g */
    size_t per_image = (g->col_rows + (size_t)g->group_out_ch) * g->out_plane * sizeof(float);
    size_t chunk = DP_CONV_CHUNK_BUDGET_BYTES / per_image;
    /* Wide outputs already give the gemm enough columns per image, and one
     * image at a time lets it write y (and read dy) in place. */
    if (g->out_plane >= DP_CONV_WIDE_OUTPUT || chunk < 1) chunk = 1;
    /* Small planes (ResNet's 7x7, 4x4) would make a product of a few dozen
     * columns: take enough images for DP_CONV_MIN_COLUMNS, past the budget. */
    if (g->out_plane < DP_CONV_WIDE_OUTPUT && chunk * g->out_plane < DP_CONV_MIN_COLUMNS)
        chunk = (DP_CONV_MIN_COLUMNS + g->out_plane - 1) / g->out_plane;
    if (chunk > (size_t)g->batch) chunk = (size_t)g->batch;
    g->chunk = (int)chunk;
    g->pad_scratch = NULL;
    g->small_index = NULL;
    g->small_mask = NULL;
}

/* Output positions o in [lo, hi) are those whose input position
 * o * stride + offset lies inside [0, in); the others read padding. */
static void valid_range(int in, int out, int stride, int offset, int *lo, int *hi) {
    int l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int h = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
    if (h > out) h = out;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* The taps of every dim (conv_common.h), computed once per call so that the
 * im2col loops do no division. */
conv_tap_t *dp_conv_taps(const conv_geom_t *g, dp_arena_t *arena) {
    conv_tap_t *taps = dp_arena_alloc(arena, ((size_t)g->kernel[0] + g->kernel[1] + g->kernel[2]) * sizeof *taps);
    if (!taps) return NULL;
    conv_tap_t *t = taps;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < g->kernel[d]; k++, t++) {
            t->off = k * g->dilation[d] - g->pad[d];
            valid_range(g->in_size[d], g->out_size[d], g->stride[d], t->off, &t->lo, &t->hi);
        }
    return taps;
}

/* Sum of n floats, in 8 independent lanes so that it vectorizes (a single
 * float accumulator is a chain of dependent adds): the kernel table's loop
 * (kernels/loops_impl.h), compiled for the ISA in use. */
double dp_conv_row_sum(const float *x, size_t n) {
    return dp_cpu_kernels()->loops->row_sum(x, n);
}

void dp_conv_geom_from_shape(const dp_conv_shape_t *s, dp_conv_geom_t *g) {
    g->ndim = s->ndim;
    g->batch = s->batch;
    g->in_ch = s->in_ch;
    g->out_ch = s->out_ch;
    g->groups = s->groups;
    g->group_in_ch = s->in_ch / s->groups;
    g->group_out_ch = s->out_ch / s->groups;
    for (int d = 0; d < 3; d++) {
        g->in_size[d] = s->in_size[d];
        g->out_size[d] = s->out_size[d];
        g->kernel[d] = s->kernel[d];
        g->stride[d] = s->stride[d];
        g->pad[d] = s->pad[d];
        g->dilation[d] = s->dilation[d];
    }
    dp_conv_geom_finish(g);
}

const float *dp_conv_split_phases(const dp_conv_geom_t *g, const float *restrict x) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int sh = g->stride[1], sw = g->stride[2];
    const int Hq = (H + 2 * ph + sh - 1) / sh, Wq = (W + 2 * pw + sw - 1) / sw;
    const size_t phase_size = (size_t)Hq * Wq, chan_size = (size_t)sh * sw * phase_size;
    float *planes = g->pad_scratch;
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *xc = x + (size_t)c * H * W;
        float *pc = planes + (size_t)c * chan_size;
        for (int a = 0; a < sh; a++)
            for (int i = 0; i < Hq; i++) {
                int r = i * sh + a - ph; /* input row, or padding */
                for (int b = 0; b < sw; b++) {
                    float *dst = pc + ((size_t)a * sw + b) * phase_size + (size_t)i * Wq;
                    for (int j = 0; j < Wq; j++) {
                        int col_in = j * sw + b - pw;
                        dst[j] = r >= 0 && r < H && col_in >= 0 && col_in < W ? xc[(size_t)r * W + col_in] : 0.0f;
                    }
                }
            }
    }
    return planes;
}
