/* conv_avx2.c - the AVX2 fast path of the convolution's im2col and col2im
 * (ops_conv.c) for dp_conv_is_plain_narrow geometries (2-D, stride 1, no
 * padding or dilation, rows of <= 16 floats: LeNet's second conv). A row
 * of up to 16 floats is two 8-lane halves moved with maskload /
 * maskstore, which never touch the masked-off floats. Compiled with -mavx2
 * -mfma; called only through the kernel table (kernels/kernels.h).
 * Below them, the small-plane paths (ResNet's 7x7 and 4x4 stages). */
#include <immintrin.h>
#include <stdint.h>

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

/* --- Small output planes (dp_conv_is_small_plane: ResNet's 7x7 and 4x4
 * stages) -------------------------------------------------------------------
 * The AVX-512 file's method with 8-lane vectors: each image-group is copied
 * into a zero-padded plane (g->pad_scratch), after which every im2col row
 * is the same pattern of L <= 64 offsets from a tap-dependent base, up to 8
 * gathers of 8 lanes a row and no bounds checks; the tiniest planes (L <=
 * 16, no dilation) are split by stride phase and read with one masked load
 * per output row and vector instead of gathers. col2im gathers each input
 * position's contributions through the tables g->small_index / small_mask
 * (ops_conv.c, 16 lanes a vector: here two halves of 8). Only a last,
 * partial vector of a row is stored with a mask (masked stores are slow on
 * AMD Zen); full ones are plain stores. */

typedef dp_conv_geom_t conv_geom_t;

/* A maskload / maskstore mask from the low 8 bits of `bits` (lane j on
 * when bit j is). */
static inline __m256i bits_mask(unsigned bits) {
    const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane_bits), lane_bits);
}

/* out[l] for l < L (L <= 64) in vectors of 8, the last one masked. */
static inline void store_row(float *out, int L, int v, __m256 value) {
    int left = L - 8 * v;
    if (left >= 8)
        _mm256_storeu_ps(out + 8 * v, value);
    else
        _mm256_maskstore_ps(out + 8 * v, lane_range(0, 0, left), value);
}

static void im2col_phase_plane(const conv_geom_t *g, const float *restrict x, float *restrict col, size_t ldcol) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int sh = g->stride[1], sw = g->stride[2];
    const int Hq = (H + 2 * ph + sh - 1) / sh, Wq = (W + 2 * pw + sw - 1) / sw;
    const size_t phase_size = (size_t)Hq * Wq, chan_size = (size_t)sh * sw * phase_size;
    const float *planes = dp_conv_split_phases(g, x); /* (Cg, sh, sw, Hq, Wq) */
    const int OH = g->out_size[1], OW = g->out_size[2], KH = g->kernel[1], KW = g->kernel[2];
    const int L = OH * OW, nv = (L + 7) / 8;
    /* rows[v][oh]: the lanes of vector v that output row oh fills */
    __m256i rows[2][16];
    int any[2][16];
    for (int v = 0; v < nv; v++)
        for (int oh = 0; oh < OH; oh++) {
            int lo = oh * OW - 8 * v, hi = lo + OW;
            rows[v][oh] = lane_range(0, lo, hi);
            any[v][oh] = lo < 8 && hi > 0;
        }
    float *row = col;
    for (int c = 0; c < g->group_in_ch; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, row += ldcol) {
                const float *base = planes + (size_t)c * chan_size +
                                    ((size_t)(kh % sh) * sw + (size_t)(kw % sw)) * phase_size +
                                    (size_t)(kh / sh) * Wq + (size_t)(kw / sw);
                for (int v = 0; v < nv; v++) {
                    __m256 acc = _mm256_setzero_ps();
                    for (int oh = 0; oh < OH; oh++) {
                        if (!any[v][oh]) continue;
                        /* lane j reads row oh's float 8v + j - oh * OW; masked-off lanes are not read */
                        const float *p = (const float *)((uintptr_t)(base + (size_t)oh * Wq) -
                                                         sizeof(float) * (uintptr_t)(oh * OW - 8 * v));
                        acc = _mm256_or_ps(acc, _mm256_maskload_ps(p, rows[v][oh])); /* lanes disjoint */
                    }
                    store_row(row, L, v, acc);
                }
            }
}

void dp_conv_im2col_small_avx2(const conv_geom_t *g, const float *restrict x, float *restrict col, size_t ldcol) {
    const int H = g->in_size[1], W = g->in_size[2], ph = g->pad[1], pw = g->pad[2];
    const int unpadded = ph == 0 && pw == 0;
    /* A 1x1 kernel reads one phase of four: splitting the plane costs more
     * than it saves (measured on ResNet's stride-2 shortcuts); without
     * padding the gathers read x itself, nothing is copied. */
    if (dp_conv_is_phase_plane(g) && !(unpadded && g->kernel[1] * g->kernel[2] == 1)) {
        im2col_phase_plane(g, x, col, ldcol);
        return;
    }
    const int Hp = H + 2 * ph, Wp = W + 2 * pw;
    float *pad = unpadded ? (float *)x : g->pad_scratch; /* (Cg, Hp, Wp) */
    for (int c = 0; c < g->group_in_ch && !unpadded; c++) {
        float *plane = pad + (size_t)c * Hp * Wp;
        for (int i = 0; i < ph * Wp; i++) plane[i] = 0.0f;
        for (int ih = 0; ih < H; ih++) {
            float *row = plane + (size_t)(ph + ih) * Wp;
            const float *src = x + ((size_t)c * H + ih) * W;
            for (int j = 0; j < pw; j++) row[j] = row[pw + W + j] = 0.0f;
            for (int j = 0; j < W; j++) row[pw + j] = src[j];
        }
        float *bottom = plane + (size_t)(ph + H) * Wp;
        for (int i = 0; i < ph * Wp; i++) bottom[i] = 0.0f;
    }
    /* the L offsets of the output positions in the padded plane */
    const int L = (int)g->out_plane, OW = g->out_size[2], nv = (L + 7) / 8;
    int off[64] = {0};
    for (int l = 0; l < L; l++) off[l] = (l / OW) * g->stride[1] * Wp + (l % OW) * g->stride[2];
    __m256i idx[8], mask[8];
    for (int v = 0; v < nv; v++) {
        idx[v] = _mm256_loadu_si256((const __m256i *)(off + 8 * v));
        mask[v] = lane_range(0, 0, L - 8 * v);
    }
    const int KH = g->kernel[1], KW = g->kernel[2], dh = g->dilation[1], dw = g->dilation[2];
    float *row = col;
    for (int c = 0; c < g->group_in_ch; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++, row += ldcol) {
                const float *base = pad + ((size_t)c * Hp + (size_t)kh * dh) * Wp + (size_t)kw * dw;
                for (int v = 0; v < nv; v++)
                    store_row(row, L, v,
                              _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx[v],
                                                       _mm256_castsi256_ps(mask[v]), 4));
            }
}

void dp_conv_col2im_small_avx2(const conv_geom_t *g, const float *restrict col, size_t ldcol, float *restrict dx) {
    const int taps = g->kernel[1] * g->kernel[2];
    const int P = (int)g->in_plane, nvec = (P + 15) / 16;
    const int32_t *index = g->small_index; /* (taps, nvec, 16) */
    const uint16_t *mask = g->small_mask;  /* (taps, nvec) */
    for (int c = 0; c < g->group_in_ch; c++) {
        const float *rows = col + (size_t)c * taps * ldcol; /* this channel's taps */
        float *dxc = dx + (size_t)c * P;
        for (int v = 0; v < nvec; v++)
            for (int h = 0; h < 2; h++) {
                const int first = 16 * v + 8 * h, left = P - first;
                if (left <= 0) break;
                __m256 sum = _mm256_setzero_ps();
                for (int t = 0; t < taps; t++) {
                    unsigned m = (unsigned)(mask[t * nvec + v] >> (8 * h)) & 0xFFu;
                    if (m)
                        sum = _mm256_add_ps(
                            sum, _mm256_mask_i32gather_ps(
                                     _mm256_setzero_ps(), rows + (size_t)t * ldcol,
                                     _mm256_loadu_si256((const __m256i *)(index + ((size_t)t * nvec + v) * 16 + 8 * h)),
                                     _mm256_castsi256_ps(bits_mask(m)), 4));
                }
                float *d = dxc + first;
                if (left >= 8) {
                    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), sum));
                } else {
                    __m256i store = lane_range(0, 0, left);
                    _mm256_maskstore_ps(d, store, _mm256_add_ps(_mm256_maskload_ps(d, store), sum));
                }
            }
    }
}
