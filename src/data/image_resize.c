/* image_resize.c - Pillow 9's 8-bit resampling with the BILINEAR filter
 * (libImaging/Resample.c's arithmetic, re-derived): per output pixel xx of
 * a resize of the box [in0, in1) of an axis to out_size pixels,
 *   scale = (in1 - in0) / out_size, filterscale = max(scale, 1),
 *   support = filterscale (the triangle's support 1, widened when shrinking),
 *   center = in0 + (xx + 0.5) * scale,
 *   inputs [int(center - support + 0.5), int(center + support + 0.5)) clamped
 *   to [0, in_size), weight of input x: max(0, 1 - |x - center + 0.5| /
 *   filterscale), normalised to sum 1, then int(0.5 + w * 2^22);
 * an output is clamp((2^21 + sum of input * weight) >> 22, 0, 255). The
 * horizontal pass runs first over the rows the vertical pass reads, and is
 * rounded to 8 bits before it, as in Pillow, so the bytes are Pillow's.
 * in0 / in1 are floats and in1 - in0 is a float subtraction, as there.
 *
 * Only a window of the outputs is computed (a center crop of a resize
 * needs no more), and the input is any view holding the pixels read.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

#define PRECISION_BITS 22

static double triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

void dp_resize_axis_free(dp_resize_axis_t *axis) {
    free(axis->first);
    free(axis->taps);
    free(axis->weights);
    memset(axis, 0, sizeof *axis);
}

dp_status_t dp_resize_axis_init(dp_resize_axis_t *axis, int in_size, float in0, float in1, int out_size,
                                int window_first, int window_count) {
    memset(axis, 0, sizeof *axis);
    if (in_size <= 0 || out_size <= 0 || window_count <= 0 || !(in1 > in0))
        return dp_fail(DP_ERR_ARG, "resize: %d pixels [%g, %g) to %d (window of %d)", in_size, (double)in0,
                       (double)in1, out_size, window_count);
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    axis->count = window_count;
    axis->max_taps = ksize;
    axis->first = malloc(sizeof(int) * (size_t)window_count);
    axis->taps = malloc(sizeof(int) * (size_t)window_count);
    axis->weights = malloc(sizeof(int32_t) * (size_t)window_count * (size_t)ksize);
    double *k = malloc(sizeof(double) * (size_t)ksize);
    if (!axis->first || !axis->taps || !axis->weights || !k) {
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
            double w = triangle((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        int32_t *weights = axis->weights + (size_t)i * ksize;
        for (int x = 0; x < xmax; x++) {
            if (ww != 0.0) k[x] /= ww;
            weights[x] = (int32_t)(0.5 + k[x] * (1 << PRECISION_BITS)); /* k >= 0: the triangle */
        }
        axis->first[i] = xmin;
        axis->taps[i] = xmax;
        if (xmin < axis->lo) axis->lo = xmin;
        if (xmin + xmax > axis->hi) axis->hi = xmin + xmax;
    }
    free(k);
    if (axis->lo > axis->hi) axis->lo = axis->hi = 0;
    return DP_OK;
}

static inline unsigned char clip8(int32_t sum) {
    int32_t v = sum >> PRECISION_BITS;
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of the horizontal pass: count outputs of `channels` from src. */
static void horizontal_row(const unsigned char *src, int channels, const dp_resize_axis_t *ax, int origin_x,
                           unsigned char *dst) {
    const int half = 1 << (PRECISION_BITS - 1);
    for (int i = 0; i < ax->count; i++) {
        const int32_t *w = ax->weights + (size_t)i * ax->max_taps;
        int taps = ax->taps[i];
        const unsigned char *s = src + (size_t)(ax->first[i] - origin_x) * channels;
        if (channels == 3) {
            int32_t s0 = half, s1 = half, s2 = half;
            for (int k = 0; k < taps; k++) {
                s0 += s[3 * k] * w[k];
                s1 += s[3 * k + 1] * w[k];
                s2 += s[3 * k + 2] * w[k];
            }
            dst[3 * i] = clip8(s0), dst[3 * i + 1] = clip8(s1), dst[3 * i + 2] = clip8(s2);
        } else {
            for (int c = 0; c < channels; c++) {
                int32_t sum = half;
                for (int k = 0; k < taps; k++) sum += s[channels * k + c] * w[k];
                dst[channels * i + c] = clip8(sum);
            }
        }
    }
}

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
    int rows = ay->hi - ay->lo;
    size_t temp_row = (size_t)width * channels;
    unsigned char *temp = malloc(temp_row * rows); /* (rows, width, channels): the horizontal pass */
    if (!temp) return dp_fail(DP_ERR_NOMEM, "resize: out of memory for %d x %d pixels", width, rows);
    size_t view_row = (size_t)view->width * channels;
    for (int r = 0; r < rows; r++)
        horizontal_row(view->pixels + (size_t)(ay->lo + r - origin_y) * view_row, channels, ax, origin_x,
                       temp + r * temp_row);
    const int32_t half = 1 << (PRECISION_BITS - 1);
    int32_t *sums = malloc(sizeof(int32_t) * temp_row);
    if (!sums) {
        free(temp);
        return dp_fail(DP_ERR_NOMEM, "resize: out of memory for a row of %d pixels", width);
    }
    for (int y = 0; y < height; y++) {
        const int32_t *w = ay->weights + (size_t)y * ay->max_taps;
        for (size_t i = 0; i < temp_row; i++) sums[i] = half;
        for (int k = 0; k < ay->taps[y]; k++) {
            const unsigned char *t = temp + (size_t)(ay->first[y] - ay->lo + k) * temp_row;
            int32_t wk = w[k];
            for (size_t i = 0; i < temp_row; i++) sums[i] += t[i] * wk;
        }
        for (int c = 0; c < channels; c++) {
            unsigned char *dst = out + (size_t)c * plane + (size_t)y * width;
            if (flip) {
                for (int x = 0; x < width; x++) dst[width - 1 - x] = clip8(sums[(size_t)x * channels + c]);
            } else {
                for (int x = 0; x < width; x++) dst[x] = clip8(sums[(size_t)x * channels + c]);
            }
        }
    }
    free(sums);
    free(temp);
    return DP_OK;
}
