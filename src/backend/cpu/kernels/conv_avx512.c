/* conv_avx512.c - the AVX-512 fast paths of the convolution's im2col and
 * col2im (ops_conv.c): rows of <= 16 floats moved with one masked load /
 * store, and small output planes gathered from a zero-padded copy.
 * Compiled with the AVX-512 flags; called only through the kernel table
 * (kernels/kernels.h), which says when each applies. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

typedef dp_conv_geom_t conv_geom_t;

/* The common case: 2-D, stride 1, dilation 1, no padding, output rows of at
 * most 16 floats (both LeNet convolutions). Every col row is OH input row
 * segments of OW floats; every dx row receives, from each kernel column kw,
 * a col segment shifted right by kw. */

/* im2col for is_plain_narrow: x (Cg, H, W) of one image; col rows (c, kh, kw)
 * of OH * OW floats, ldcol apart. */
void dp_conv_im2col_narrow_avx512(const conv_geom_t *g, const float *restrict x, float *restrict col, size_t ldcol) {
    const int W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int KH = g->kernel[1], KW = g->kernel[2];
    const __mmask16 mask = (__mmask16)((1u << OW) - 1);
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *xc = x + (size_t)c * g->in_plane;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, col += ldcol) {
                const float *src = xc + (size_t)kh * W + kw;
                float *dst = col;
                for (int oh = 0; oh < OH; oh++, src += W, dst += OW)
                    _mm512_mask_storeu_ps(dst, mask, _mm512_maskz_loadu_ps(mask, src));
            }
    }
}

/* col2im for is_plain_narrow: dx row (c, ih) gets, for every kh with
 * oh = ih - kh in range, the sum over kw of col row (c, kh, kw) segment oh
 * shifted right by kw. The kw contributions are summed in a register (a
 * lane permutation does the shift) and added to dx once, so no store waits
 * for the one before it. */
void dp_conv_col2im_narrow_avx512(const conv_geom_t *g, const float *restrict col, size_t ldcol,
                                  float *restrict dx) {
    const int W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int KH = g->kernel[1], KW = g->kernel[2];
    const __mmask16 seg = (__mmask16)((1u << OW) - 1), row_mask = (__mmask16)((1u << W) - 1);
    __m512i shift[16];
    __mmask16 shifted[16];
    for (int kw = 0; kw < KW; kw++) { /* lane i takes lane i - kw, for kw <= i < kw + OW */
        shift[kw] = _mm512_sub_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                     _mm512_set1_epi32(kw));
        shifted[kw] = (__mmask16)(seg << kw);
    }
    for (int c = 0; c < g->group_in_ch; c++) {
        float *dxc = dx + (size_t)c * g->in_plane;
        const float *colc = col + (size_t)c * KH * KW * ldcol;
        for (int kh = 0; kh < KH; kh++) {
            const float *rows = colc + (size_t)kh * KW * ldcol;
            for (int oh = 0; oh < OH; oh++) {
                __m512 acc = _mm512_setzero_ps();
                for (int kw = 0; kw < KW; kw++) {
                    __m512 v = _mm512_maskz_loadu_ps(seg, rows + (size_t)kw * ldcol + (size_t)oh * OW);
                    acc = _mm512_add_ps(acc, _mm512_maskz_permutexvar_ps(shifted[kw], shift[kw], v));
                }
                float *d = dxc + (size_t)(oh + kh) * W;
                _mm512_mask_storeu_ps(d, row_mask, _mm512_add_ps(_mm512_maskz_loadu_ps(row_mask, d), acc));
            }
        }
    }
}
/* Small output planes: a 2-D (or 1-D) conv whose output plane has at most
 * 64 positions (ResNet's 7x7 and 4x4 stages, any stride, padding and
 * dilation). Row by row, the general im2col spends its time on loop and
 * padding bookkeeping for rows of 4 to 7 floats; here each image-group is
 * first copied into a zero-padded plane (pad_scratch), after which every
 * im2col row is the same pattern of L offsets from a tap-dependent base:
 * one to four masked gathers per row, no bounds checks. col2im runs the
 * adjoint: gather, add, scatter into a zeroed padded plane (a row's L
 * positions are distinct, so a scatter never collides with itself), then
 * adds the interior into dx. */

/* The L offsets of the output positions in the padded plane (Wp wide), as
 * four index vectors and their masks. */
static void small_plane_offsets(const conv_geom_t *g, int Wp, __m512i idx[4], __mmask16 mask[4]) {
    int off[64] = {0};
    const int OW = g->out_size[2];
    for (int l = 0; l < (int)g->out_plane; l++) off[l] = (l / OW) * g->stride[1] * Wp + (l % OW) * g->stride[2];
    for (int v = 0; v < 4; v++) {
        idx[v] = _mm512_loadu_si512(off + 16 * v);
        int left = (int)g->out_plane - 16 * v;
        mask[v] = left <= 0 ? 0 : left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    }
}

/* The tiniest planes (L <= 16, ResNet's 4x4 stage) without dilation: the
 * padded plane is split by stride phase, phase (a, b) holding the padded
 * positions (i * sh + a, j * sw + b), so that every tap reads, for each
 * output row, OW consecutive floats of one phase: one masked load per output
 * row instead of a 16-lane gather (which costs about as much as 16 loads).
 * Lanes [oh * OW, oh * OW + OW) are loaded from the row's first float minus
 * oh * OW: the masked-off lanes are never read. */
static void im2col_phase_plane(const conv_geom_t *g, const float *restrict x, float *restrict col, size_t ldcol) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int sh = g->stride[1], sw = g->stride[2];
    const int Hq = (H + 2 * ph + sh - 1) / sh, Wq = (W + 2 * pw + sw - 1) / sw;
    const size_t phase_size = (size_t)Hq * Wq, chan_size = (size_t)sh * sw * phase_size;
    const float *planes = dp_conv_split_phases(g, x); /* (Cg, sh, sw, Hq, Wq) */
    const int OH = g->out_size[1], OW = g->out_size[2], KH = g->kernel[1], KW = g->kernel[2];
    __mmask16 rows[16];
    for (int oh = 0; oh < OH; oh++) rows[oh] = (__mmask16)(((1u << OW) - 1) << (oh * OW));
    const __mmask16 all = (__mmask16)((1u << (OH * OW)) - 1);
    float *row = col;
    for (int c = 0; c < g->group_in_ch; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, row += ldcol) {
                const float *base = planes + (size_t)c * chan_size +
                                    ((size_t)(kh % sh) * sw + (size_t)(kw % sw)) * phase_size +
                                    (size_t)(kh / sh) * Wq + (size_t)(kw / sw);
                __m512 v = _mm512_setzero_ps();
                for (int oh = 0; oh < OH; oh++)
                    v = _mm512_mask_loadu_ps(v, rows[oh], (const float *)((uintptr_t)(base + (size_t)oh * Wq) -
                                                                          sizeof(float) * (size_t)(oh * OW)));
                _mm512_mask_storeu_ps(row, all, v);
            }
}

void dp_conv_im2col_small_avx512(const conv_geom_t *g, const float *restrict x, float *restrict col, size_t ldcol) {
    if (dp_conv_is_phase_plane(g)) {
        im2col_phase_plane(g, x, col, ldcol);
        return;
    }
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int Hp = H + 2 * ph, Wp = W + 2 * pw;
    float *pad = g->pad_scratch; /* (Cg, Hp, Wp) */
    for (int c = 0; c < g->group_in_ch; c++) {
        float *plane = pad + (size_t)c * Hp * Wp;
        memset(plane, 0, sizeof(float) * (size_t)ph * Wp);
        for (int ih = 0; ih < H; ih++) {
            float *row = plane + (size_t)(ph + ih) * Wp;
            for (int j = 0; j < pw; j++) row[j] = row[pw + W + j] = 0.0f;
            memcpy(row + pw, x + ((size_t)c * H + ih) * W, sizeof(float) * (size_t)W);
        }
        memset(plane + (size_t)(ph + H) * Wp, 0, sizeof(float) * (size_t)ph * Wp);
    }
    __m512i idx[4];
    __mmask16 mask[4];
    small_plane_offsets(g, Wp, idx, mask);
    const int KH = g->kernel[1], KW = g->kernel[2], dh = g->dilation[1], dw = g->dilation[2];
    float *row = col;
    for (int c = 0; c < g->group_in_ch; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, row += ldcol) {
                const float *base = pad + ((size_t)c * Hp + (size_t)kh * dh) * Wp + (size_t)kw * dw;
                for (int v = 0; v < 4 && mask[v]; v++)
                    _mm512_mask_storeu_ps(row + 16 * v, mask[v],
                                          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask[v], idx[v], base, 4));
            }
}

void dp_conv_col2im_small_avx512(const conv_geom_t *g, const float *restrict col, size_t ldcol, float *restrict dx) {
    const int taps = g->kernel[1] * g->kernel[2];
    const int nvec = ((int)g->in_plane + 15) / 16;
    const int32_t *index = g->small_index; /* (taps, nvec, 16) */
    const __mmask16 *mask = g->small_mask;  /* (taps, nvec) */
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *rows = col + (size_t)c * taps * ldcol; /* this channel's taps */
        float *dxc = dx + (size_t)c * g->in_plane;
        for (int v = 0; v < nvec; v++) {
            __m512 sum = _mm512_setzero_ps();
            for (int t = 0; t < taps; t++) {
                __mmask16 m = mask[t * nvec + v];
                if (m)
                    sum = _mm512_add_ps(sum, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m,
                                                                      _mm512_loadu_si512(index + ((size_t)t * nvec + v) * 16),
                                                                      rows + (size_t)t * ldcol, 4));
            }
            int left = (int)g->in_plane - 16 * v;
            __mmask16 store = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            _mm512_mask_storeu_ps(dxc + 16 * v, store,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(store, dxc + 16 * v), sum));
        }
    }
}

