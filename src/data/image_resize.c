/* image_resize.c - Pillow 9's 8-bit resampling with the BILINEAR or
 * BICUBIC filter (libImaging/Resample.c's arithmetic, re-derived): per
 * output pixel xx of a resize of the box [in0, in1) of an axis to out_size
 * pixels,
 *   scale = (in1 - in0) / out_size, filterscale = max(scale, 1),
 *   support = the filter's support (bilinear 1, bicubic 2) * filterscale
 *   (widened when shrinking),
 *   center = in0 + (xx + 0.5) * scale,
 *   inputs [int(center - support + 0.5), int(center + support + 0.5)) clamped
 *   to [0, in_size), weight of input x: filter((x - center + 0.5) /
 *   filterscale), normalised to sum 1, then int(0.5 + w * 2^22), or
 *   int(-0.5 + w * 2^22) for a negative w (the cubic's outer lobes: rounded
 *   away from 0 as well);
 * an output is clamp((2^21 + sum of input * weight) >> 22, 0, 255). The
 * filters: bilinear max(0, 1 - |x|); bicubic the cubic convolution with
 * a = -0.5, ((a + 2)|x| - (a + 3))x^2 + 1 below 1, a(|x|^3 - 5x^2 + 8|x| - 4)
 * below 2, else 0. The
 * horizontal pass runs first over the rows the vertical pass reads, and is
 * rounded to 8 bits before it, as in Pillow, so the bytes are Pillow's.
 * in0 / in1 are floats and in1 - in0 is a float subtraction, as there.
 *
 * Only a window of the outputs is computed (a center crop of a resize
 * needs no more), and the input is any view holding the pixels read. A
 * flip mirrors the horizontal pass's output (it commutes with the
 * vertical pass), which is stored planar, so the vertical pass writes the
 * (C, H, W) rows straight.
 *
 * Speed: with SSE2 (every x86-64) both passes use 16-bit multiply-adds
 * (pmaddwd) on the weights split as w = high * 2^11 + low (0 <= low < 2^11,
 * |high| < 2^13: a normalised cubic weight stays within (-1, 4), and a
 * negative one has a negative high half, a signed 16-bit number; so every product and sum fits 32 bits),
 * two taps per instruction, and the
 * sum is (high sums << 11) + low sums: the same integers as the plain loops
 * below, which serve the other targets. RGB rows are widened to RGBX so a
 * pixel is one 32-bit lane.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define RESIZE_SSE2 1
#endif

#include "image_internal.h"

#define PRECISION_BITS 22
#define HALF_BITS 11 /* the weights' split for 16-bit multiply-adds */

static double triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The cubic convolution kernel with a = -0.5 (Keys), Pillow's BICUBIC. */
static double cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* A weight in 2^-22, rounded half away from 0 as Pillow does (its (int) truncates). */
static int32_t fixed_weight(double k) {
    return k < 0.0 ? (int32_t)(-0.5 + k * (1 << PRECISION_BITS)) : (int32_t)(0.5 + k * (1 << PRECISION_BITS));
}

void dp_resize_axis_free(dp_resize_axis_t *axis) {
    free(axis->first);
    free(axis->taps);
    free(axis->weights);
    free(axis->pair_high);
    free(axis->pair_low);
    memset(axis, 0, sizeof *axis);
}

/* The packed 16-bit halves of each output's weights, in pairs. A negative
 * weight has a negative high half: masked to its 16 bits before the pair's
 * other half is or-ed in above it (the low halves are never negative). */
static void split_weights(dp_resize_axis_t *axis) {
    for (int i = 0; i < axis->count; i++) {
        const int32_t *w = axis->weights + (size_t)i * axis->max_taps;
        uint32_t *high = axis->pair_high + (size_t)i * axis->max_pairs, *low = axis->pair_low + (size_t)i * axis->max_pairs;
        for (int p = 0; p < axis->max_pairs; p++) {
            int32_t a = 2 * p < axis->taps[i] ? w[2 * p] : 0, b = 2 * p + 1 < axis->taps[i] ? w[2 * p + 1] : 0;
            high[p] = ((uint32_t)(a >> HALF_BITS) & 0xffffu) | (uint32_t)(b >> HALF_BITS) << 16;
            low[p] = (uint32_t)(a & ((1 << HALF_BITS) - 1)) | (uint32_t)(b & ((1 << HALF_BITS) - 1)) << 16;
        }
    }
}

dp_status_t dp_resize_axis_init(dp_resize_axis_t *axis, dp_interpolation_t interpolation, int in_size, float in0,
                                float in1, int out_size, int window_first, int window_count) {
    memset(axis, 0, sizeof *axis);
    if (in_size <= 0 || out_size <= 0 || window_count <= 0 || !(in1 > in0))
        return dp_fail(DP_ERR_ARG, "resize: %d pixels [%g, %g) to %d (window of %d)", in_size, (double)in0,
                       (double)in1, out_size, window_count);
    if (interpolation != DP_INTERP_BILINEAR && interpolation != DP_INTERP_BICUBIC)
        return dp_fail(DP_ERR_ARG, "resize: unknown interpolation %d (bilinear or bicubic)", (int)interpolation);
    double (*filter)(double) = interpolation == DP_INTERP_BICUBIC ? cubic : triangle;
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (interpolation == DP_INTERP_BICUBIC ? 2.0 : 1.0) * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    axis->count = window_count;
    axis->max_taps = ksize;
    axis->max_pairs = (ksize + 1) / 2;
    axis->first = malloc(sizeof(int) * (size_t)window_count);
    axis->taps = malloc(sizeof(int) * (size_t)window_count);
    axis->weights = malloc(sizeof(int32_t) * (size_t)window_count * (size_t)ksize);
    axis->pair_high = malloc(sizeof(uint32_t) * (size_t)window_count * (size_t)axis->max_pairs);
    axis->pair_low = malloc(sizeof(uint32_t) * (size_t)window_count * (size_t)axis->max_pairs);
    double *k = malloc(sizeof(double) * (size_t)ksize);
    if (!axis->first || !axis->taps || !axis->weights || !axis->pair_high || !axis->pair_low || !k) {
        free(k);
        dp_resize_axis_free(axis);
        return dp_fail(DP_ERR_NOMEM, "resize: out of memory for the weights (%d -> %d)", in_size, out_size);
    }
    axis->lo = INT_MAX;
    axis->hi = INT_MIN;
    for (int i = 0; i < window_count; i++) {
        int xx = window_first + i;
        axis->first[i] = 0;
        axis->taps[i] = 0;
        if (xx < 0 || xx >= out_size) continue; /* padding: reads nothing, is 0 */
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax <= 0) continue;
        for (int x = 0; x < xmax; x++) {
            double w = filter((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        int32_t *weights = axis->weights + (size_t)i * ksize;
        for (int x = 0; x < xmax; x++) {
            if (ww != 0.0) k[x] /= ww;
            weights[x] = fixed_weight(k[x]);
        }
        axis->first[i] = xmin;
        axis->taps[i] = xmax;
        if (xmin < axis->lo) axis->lo = xmin;
        if (xmin + xmax > axis->hi) axis->hi = xmin + xmax;
    }
    free(k);
    if (axis->lo > axis->hi) axis->lo = axis->hi = 0;
    split_weights(axis);
    return DP_OK;
}

static inline unsigned char clip8(int32_t sum) {
    int32_t v = sum >> PRECISION_BITS;
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* --- the horizontal pass: one row into `channels` planes of temp ------------------------ */

/* Plain loops: src holds the row's inputs from input origin_x on. */
static void horizontal_row_plain(const unsigned char *src, int channels, const dp_resize_axis_t *ax, int origin_x,
                                 int flip, unsigned char *const *planes) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (int i = 0; i < ax->count; i++) {
        const int32_t *w = ax->weights + (size_t)i * ax->max_taps;
        const unsigned char *s = src + (ptrdiff_t)(ax->first[i] - origin_x) * channels;
        int x = flip ? ax->count - 1 - i : i;
        for (int c = 0; c < channels; c++) {
            int32_t sum = half;
            for (int k = 0; k < ax->taps[i]; k++) sum += s[channels * k + c] * w[k];
            planes[c][x] = clip8(sum);
        }
    }
}

#ifdef RESIZE_SSE2
/* (high sums << 11) + low sums + 1/2, >> 22, to bytes (saturating: the clip). */
static inline __m128i finish_sums(__m128i high, __m128i low) {
    __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(high, HALF_BITS), low),
                                _mm_set1_epi32(1 << (PRECISION_BITS - 1)));
    sum = _mm_srai_epi32(sum, PRECISION_BITS);
    sum = _mm_packs_epi32(sum, sum);
    return _mm_packus_epi16(sum, sum);
}

/* RGB: rgbx holds the row as RGBX from input origin_x on, with a zero
 * pixel after it (an odd tap count's pair reads one pixel more). */
static void horizontal_row_rgbx(const unsigned char *rgbx, const dp_resize_axis_t *ax, int origin_x, int flip,
                                unsigned char *const *planes) {
    const __m128i zero = _mm_setzero_si128();
    for (int i = 0; i < ax->count; i++) {
        const unsigned char *s = rgbx + (ptrdiff_t)(ax->first[i] - origin_x) * 4;
        const uint32_t *high = ax->pair_high + (size_t)i * ax->max_pairs, *low = ax->pair_low + (size_t)i * ax->max_pairs;
        __m128i sum_high = zero, sum_low = zero;
        int pairs = (ax->taps[i] + 1) / 2;
        for (int p = 0; p < pairs; p++) {
            __m128i two = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + 8 * p)), zero); /* R0G0B0X0R1G1B1X1 */
            __m128i lanes = _mm_unpacklo_epi16(two, _mm_srli_si128(two, 8));                       /* R0R1 G0G1 B0B1 X0X1 */
            sum_high = _mm_add_epi32(sum_high, _mm_madd_epi16(lanes, _mm_set1_epi32((int)high[p])));
            sum_low = _mm_add_epi32(sum_low, _mm_madd_epi16(lanes, _mm_set1_epi32((int)low[p])));
        }
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(finish_sums(sum_high, sum_low));
        int x = flip ? ax->count - 1 - i : i;
        planes[0][x] = (unsigned char)v, planes[1][x] = (unsigned char)(v >> 8), planes[2][x] = (unsigned char)(v >> 16);
    }
}
#endif

/* --- the vertical pass: one output row of one plane ---------------------------------- */

/* Columns [from, width) of output row y from the plane's rows (row 0 = input lo). */
static void vertical_row_plain(const unsigned char *plane, size_t stride, const dp_resize_axis_t *ay, int y, int lo,
                               int from, int width, unsigned char *out) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    const int32_t *w = ay->weights + (size_t)y * ay->max_taps;
    const unsigned char *rows = plane + (size_t)(ay->first[y] - lo) * stride;
    for (int x = from; x < width; x++) {
        int32_t sum = half;
        for (int k = 0; k < ay->taps[y]; k++) sum += rows[(size_t)k * stride + x] * w[k];
        out[x] = clip8(sum);
    }
}

#ifdef RESIZE_SSE2
static void vertical_row_sse2(const unsigned char *plane, size_t stride, const dp_resize_axis_t *ay, int y, int lo,
                              int width, unsigned char *out) {
    const __m128i zero = _mm_setzero_si128();
    const uint32_t *high = ay->pair_high + (size_t)y * ay->max_pairs, *low = ay->pair_low + (size_t)y * ay->max_pairs;
    const unsigned char *rows = plane + (size_t)(ay->first[y] - lo) * stride;
    int taps = ay->taps[y], pairs = (taps + 1) / 2, x = 0;
    for (; x + 8 <= width; x += 8) {
        __m128i h0 = zero, l0 = zero, h1 = zero, l1 = zero;
        for (int p = 0; p < pairs; p++) {
            const unsigned char *a = rows + (size_t)(2 * p) * stride + x;
            const unsigned char *b = 2 * p + 1 < taps ? a + stride : a; /* weight 0 then */
            __m128i ra = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)a), zero);
            __m128i rb = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)b), zero);
            __m128i first4 = _mm_unpacklo_epi16(ra, rb), last4 = _mm_unpackhi_epi16(ra, rb);
            __m128i wh = _mm_set1_epi32((int)high[p]), wl = _mm_set1_epi32((int)low[p]);
            h0 = _mm_add_epi32(h0, _mm_madd_epi16(first4, wh));
            l0 = _mm_add_epi32(l0, _mm_madd_epi16(first4, wl));
            h1 = _mm_add_epi32(h1, _mm_madd_epi16(last4, wh));
            l1 = _mm_add_epi32(l1, _mm_madd_epi16(last4, wl));
        }
        uint32_t a = (uint32_t)_mm_cvtsi128_si32(finish_sums(h0, l0)), b = (uint32_t)_mm_cvtsi128_si32(finish_sums(h1, l1));
        memcpy(out + x, &a, 4);
        memcpy(out + x + 4, &b, 4);
    }
    vertical_row_plain(plane, stride, ay, y, lo, x, width, out); /* the last columns */
}
#endif

dp_status_t dp_resize_apply(const dp_image_t *view, int origin_x, int origin_y, const dp_resize_axis_t *ax,
                            const dp_resize_axis_t *ay, int flip, unsigned char *out) {
    int channels = view->channels, width = ax->count, height = ay->count;
    size_t plane = (size_t)width * height;
    if (ax->lo == ax->hi || ay->lo == ay->hi) { /* all padding */
        memset(out, 0, plane * channels);
        return DP_OK;
    }
    DP_ASSERT(ax->lo - origin_x >= 0 && ax->hi - origin_x <= view->width);
    DP_ASSERT(ay->lo - origin_y >= 0 && ay->hi - origin_y <= view->height);
    int rows = ay->hi - ay->lo, span = ax->hi - ax->lo;
    size_t temp_plane = (size_t)width * rows;
    /* temp: (channels, rows, width), the horizontal pass; row: one input row as RGBX */
    unsigned char *temp = malloc(temp_plane * channels), *row = malloc((size_t)(span + 2) * 4);
    if (!temp || !row) {
        free(temp);
        free(row);
        return dp_fail(DP_ERR_NOMEM, "resize: out of memory for %d x %d pixels", width, rows);
    }
    size_t view_row = (size_t)view->width * channels;
    for (int r = 0; r < rows; r++) {
        const unsigned char *src = view->pixels + (size_t)(ay->lo + r - origin_y) * view_row;
        unsigned char *planes[3];
        for (int c = 0; c < channels; c++) planes[c] = temp + c * temp_plane + (size_t)r * width;
#ifdef RESIZE_SSE2
        if (channels == 3) {
            const unsigned char *s = src + (size_t)(ax->lo - origin_x) * 3;
            for (int x = 0; x < span; x++) memcpy(row + 4 * x, s + 3 * x, 3), row[4 * x + 3] = 0;
            memset(row + 4 * span, 0, 8);
            horizontal_row_rgbx(row, ax, ax->lo, flip, planes);
            continue;
        }
#endif
        horizontal_row_plain(src, channels, ax, origin_x, flip, planes);
    }
    for (int c = 0; c < channels; c++)
        for (int y = 0; y < height; y++) {
            unsigned char *dst = out + c * plane + (size_t)y * width;
            if (ay->taps[y] == 0) {
                memset(dst, 0, (size_t)width); /* padding */
                continue;
            }
#ifdef RESIZE_SSE2
            vertical_row_sse2(temp + c * temp_plane, (size_t)width, ay, y, ay->lo, width, dst);
#else
            vertical_row_plain(temp + c * temp_plane, (size_t)width, ay, y, ay->lo, 0, width, dst);
#endif
        }
    free(row);
    free(temp);
    return DP_OK;
}
