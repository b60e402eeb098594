/* image_input.c - an image as a model's float input (dp_image_to_input,
 * used by dptrain predict): channels converted in float (RGB -> gray by
 * ITU-R 601-2 luma, gray -> RGB by copying), PIL's antialiased bilinear
 * weights applied in float, / 255. The training pipeline's exact uint8
 * path is image_resize.c.
 */
#include <math.h>
#include <stdlib.h>

#include "dptrain/image.h"


/* PIL's resampling weights for one axis (ImagingResample's precompute with
 * the bilinear filter): for output index o, taps [first[o], first[o] +
 * taps[o]) with weights weights[o * max_taps ...], summing to 1. */
typedef struct {
    int *first, *taps;
    float *weights;
    int max_taps;
} resample_axis_t;

static float triangle(double x) {
    if (x < 0) x = -x;
    return x < 1 ? (float)(1 - x) : 0.0f;
}

static dp_status_t resample_axis_init(resample_axis_t *axis, int in_size, int out_size) {
    double scale = (double)in_size / out_size;
    double filter_scale = scale < 1 ? 1 : scale;
    double support = filter_scale; /* bilinear: support 1, widened when shrinking */
    axis->max_taps = (int)ceil(support) * 2 + 1;
    axis->first = malloc(sizeof(int) * (size_t)out_size);
    axis->taps = malloc(sizeof(int) * (size_t)out_size);
    axis->weights = malloc(sizeof(float) * (size_t)out_size * (size_t)axis->max_taps);
    if (!axis->first || !axis->taps || !axis->weights) {
        free(axis->first);
        free(axis->taps);
        free(axis->weights);
        return dp_fail(DP_ERR_NOMEM, "out of memory for the resize weights (%d -> %d)", in_size, out_size);
    }
    for (int o = 0; o < out_size; o++) {
        double center = (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in_size) hi = in_size;
        int n = hi - lo;
        if (n > axis->max_taps) n = axis->max_taps;
        float *w = axis->weights + (size_t)o * axis->max_taps;
        double total = 0;
        for (int k = 0; k < n; k++) {
            w[k] = triangle((k + lo - center + 0.5) / filter_scale);
            total += w[k];
        }
        for (int k = 0; k < n; k++) w[k] = total > 0 ? (float)(w[k] / total) : 0.0f;
        axis->first[o] = lo;
        axis->taps[o] = n;
    }
    return DP_OK;
}

static void resample_axis_free(resample_axis_t *axis) {
    free(axis->first);
    free(axis->taps);
    free(axis->weights);
}

dp_status_t dp_image_to_input(const dp_image_t *image, int channels, int height, int width, float *out) {
    if (channels != 1 && channels != 3)
        return dp_fail(DP_ERR_ARG, "image input: %d channels (1 or 3 supported)", channels);
    if (height <= 0 || width <= 0) return dp_fail(DP_ERR_ARG, "image input: size %d x %d", height, width);
    if (!image->pixels || (image->channels != 1 && image->channels != 3) || image->height <= 0 ||
        image->width <= 0)
        return dp_fail(DP_ERR_ARG, "image input: not a decoded image");
    int in_h = image->height, in_w = image->width;
    size_t plane = (size_t)in_h * in_w;
    /* (channels, in_h, in_w) floats in [0, 255] after the channel conversion. */
    float *converted = malloc(sizeof(float) * plane * (size_t)channels);
    /* (channels, in_h, width) after the horizontal pass. */
    float *horizontal = malloc(sizeof(float) * (size_t)in_h * width * (size_t)channels);
    resample_axis_t ax = {0}, ay = {0};
    dp_status_t status = DP_OK;
    if (!converted || !horizontal) {
        status = dp_fail(DP_ERR_NOMEM, "image input: out of memory");
        goto done;
    }
    const unsigned char *px = image->pixels;
    for (size_t i = 0; i < plane; i++) {
        if (image->channels == channels) {
            for (int c = 0; c < channels; c++) converted[c * plane + i] = px[i * channels + c];
        } else if (channels == 1) { /* RGB -> L (ITU-R 601-2 luma) */
            const unsigned char *p = px + i * 3;
            converted[i] = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
        } else { /* L -> RGB */
            for (int c = 0; c < 3; c++) converted[c * plane + i] = px[i];
        }
    }
    if ((status = resample_axis_init(&ax, in_w, width)) != DP_OK) goto done;
    if ((status = resample_axis_init(&ay, in_h, height)) != DP_OK) {
        resample_axis_free(&ax);
        ax = (resample_axis_t){0};
        goto done;
    }
    for (int c = 0; c < channels; c++) {
        for (int y = 0; y < in_h; y++) {
            const float *src = converted + c * plane + (size_t)y * in_w;
            float *dst = horizontal + ((size_t)c * in_h + y) * width;
            for (int x = 0; x < width; x++) {
                const float *w = ax.weights + (size_t)x * ax.max_taps;
                double sum = 0;
                for (int k = 0; k < ax.taps[x]; k++) sum += (double)w[k] * src[ax.first[x] + k];
                dst[x] = (float)sum;
            }
        }
        for (int y = 0; y < height; y++) {
            const float *w = ay.weights + (size_t)y * ay.max_taps;
            float *dst = out + ((size_t)c * height + y) * width;
            for (int x = 0; x < width; x++) {
                double sum = 0;
                for (int k = 0; k < ay.taps[y]; k++)
                    sum += (double)w[k] * horizontal[((size_t)c * in_h + ay.first[y] + k) * width + x];
                dst[x] = (float)sum * (1.0f / 255.0f); /* as dp_dataset_fill */
            }
        }
    }
done:
    if (ax.first) resample_axis_free(&ax);
    if (ay.first) resample_axis_free(&ay);
    free(converted);
    free(horizontal);
    return status;
}
