/* conv_avx2.c - the AVX2 fast path of the convolution's im2col and col2im
 * (ops_conv.c) for dp_conv_is_plain_narrow geometries (2-D, stride 1, no
 * padding or dilation, rows of <= 16 floats: LeNet's second conv). A row
 * of up to 16 floats is two 8-lane halves moved with maskload /
 * maskstore, which never touch the masked-off floats. Compiled with -mavx2
 * -mfma; called only through the kernel table (kernels/kernels.h).
 * (The AVX-512 small-plane gathers have no AVX2 version: on AVX2 those
 * convs take the general im2col.) */
#include <immintrin.h>

#include "kernels.h"

/* Lanes i of an 8-lane half (lane numbers first .. first + 7) with
 * lo <= i < hi. */
static inline __m256i lane_range(int first, int lo, int hi) {
    const __m256i i = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}

/* x (Cg, H, W) of one image; col rows (c, kh, kw) of OH * OW floats, ldcol
 * apart: row segment oh is x row oh + kh from column kw. */
void dp_conv_im2col_narrow_avx2(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                                size_t ldcol) {
    const int W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int KH = g->kernel[1], KW = g->kernel[2];
    const __m256i lo = lane_range(0, 0, OW), hi = lane_range(8, 0, OW);
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *xc = x + (size_t)c * g->in_plane;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, col += ldcol) {
                const float *src = xc + (size_t)kh * W + kw;
                float *dst = col;
                if (OW > 8)
                    for (int oh = 0; oh < OH; oh++, src += W, dst += OW) {
                        _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
                        _mm256_maskstore_ps(dst + 8, hi, _mm256_maskload_ps(src + 8, hi));
                    }
                else
                    for (int oh = 0; oh < OH; oh++, src += W, dst += OW)
                        _mm256_maskstore_ps(dst, lo, _mm256_maskload_ps(src, lo));
            }
    }
}

/* dx row (c, ih) += for every kh with oh = ih - kh in range, the sum over
 * kw of col row (c, kh, kw) segment oh shifted right by kw. The shift is a
 * load from kw floats before the segment with lanes [kw, kw + OW) enabled;
 * the kw contributions are summed in two registers and added to dx once. */
void dp_conv_col2im_narrow_avx2(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                                float *restrict dx) {
    const int W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int KH = g->kernel[1], KW = g->kernel[2];
    __m256i seg_lo[16], seg_hi[16];
    for (int kw = 0; kw < KW; kw++) {
        seg_lo[kw] = lane_range(0, kw, kw + OW);
        seg_hi[kw] = lane_range(8, kw, kw + OW);
    }
    const __m256i row_lo = lane_range(0, 0, W), row_hi = lane_range(8, 0, W);
    for (int c = 0; c < g->group_in_ch; c++) {
        float *dxc = dx + (size_t)c * g->in_plane;
        const float *colc = col + (size_t)c * KH * KW * ldcol;
        for (int kh = 0; kh < KH; kh++) {
            const float *rows = colc + (size_t)kh * KW * ldcol;
            for (int oh = 0; oh < OH; oh++) {
                __m256 acc_lo = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps();
                for (int kw = 0; kw < KW; kw++) {
                    /* lane i reads segment float i - kw; lanes outside the segment are not read */
                    const float *s = rows + (size_t)kw * ldcol + (size_t)oh * OW - kw;
                    acc_lo = _mm256_add_ps(acc_lo, _mm256_maskload_ps(s, seg_lo[kw]));
                    acc_hi = _mm256_add_ps(acc_hi, _mm256_maskload_ps(s + 8, seg_hi[kw]));
                }
                float *d = dxc + (size_t)(oh + kh) * W;
                _mm256_maskstore_ps(d, row_lo, _mm256_add_ps(_mm256_maskload_ps(d, row_lo), acc_lo));
                _mm256_maskstore_ps(d + 8, row_hi, _mm256_add_ps(_mm256_maskload_ps(d + 8, row_hi), acc_hi));
            }
        }
    }
}
