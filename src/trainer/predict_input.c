/* predict_input.c - an image file as a checkpoint's model input (predict.h
 * dp_predict_image_input): what `dptrain predict` feeds the model, and what
 * a program of one's own must feed it for the same probabilities.
 *
 * With an evaluation transform recorded (an image folder's data.transform)
 * the file goes through the sampler the evaluation of the training run used
 * (image_sample.h: decode, channels, Resize(S) + CenterCrop or squash, in
 * bytes); without one (data of the model's size: IDX, CIFAR, imported
 * weights) through dp_image_to_input (channels, PIL's bilinear resize in
 * float). Then x = pixel / 255, normalised as data.normalize says:
 * (x - mean) / std per channel. */
#include <stdlib.h>

#include "dptrain/data.h"
#include "dptrain/image.h"
#include "dptrain/image_folder.h"
#include "dptrain/image_sample.h"
#include "dptrain/predict.h"

/* x: ch planes of `plane` floats in [0, 1], normalised in place (`text`: data.normalize, one pair or one
 * per channel; "" for none). */
static dp_status_t normalize_input(const char *text, float *x, int ch, size_t plane) {
    if (!text || !text[0]) return DP_OK;
    int n;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
    DP_TRY(dp_normalize_parse(text, &n, mean, std));
    if (n != 1 && n != ch)
        return dp_fail(DP_ERR_FORMAT, "predict: the checkpoint's normalisation '%s' has %d channels, the model %d",
                       text, n, ch);
    for (int k = 0; k < ch; k++) {
        float *p = x + (size_t)k * plane;
        float m = mean[n == 1 ? 0 : k], sd = std[n == 1 ? 0 : k];
        for (size_t j = 0; j < plane; j++) p[j] = (p[j] - m) / sd;
    }
    return DP_OK;
}

/* x in [0, 1] through the recorded evaluation transform. */
static dp_status_t transformed(const char *path, const char *transform, int ch, int h, int w, float *x) {
    dp_sample_options_t eval;
    DP_TRY(dp_eval_transform_parse(transform, ch, h, w, &eval));
    unsigned char *data = NULL, *pixels = malloc((size_t)ch * h * w);
    size_t size = 0;
    if (!pixels) return dp_fail(DP_ERR_NOMEM, "out of memory for %s", path);
    dp_status_t status = dp_image_file_bytes(path, &data, &size);
    if (status == DP_OK) status = dp_image_sample(data, size, path, &eval, NULL, pixels, NULL);
    if (status == DP_OK) dp_pixels_to_input(pixels, 1, ch, (size_t)h * w, NULL, x);
    free(data);
    free(pixels);
    return status;
}

dp_status_t dp_predict_image_input(const dp_checkpoint_info_t *info, const char *path, int channels, int height,
                                   int width, float *x) {
    if (!path || !x) return dp_fail(DP_ERR_ARG, "predict: no %s given (NULL)", !path ? "image path" : "input buffer");
    if ((channels != 1 && channels != 3) || height < 1 || width < 1)
        return dp_fail(DP_ERR_ARG, "predict: an input of %dx%dx%d (images give 1 or 3 channels)", channels, height,
                       width);
    const char *transform = info ? info->transform : "";
    if (transform[0]) {
        DP_TRY(transformed(path, transform, channels, height, width, x));
    } else {
        dp_image_t image;
        DP_TRY(dp_image_read(path, &image));
        dp_status_t status = dp_image_to_input(&image, channels, height, width, x);
        dp_image_free(&image);
        DP_TRY(status);
    }
    return normalize_input(info ? info->normalize : "", x, channels, (size_t)height * width);
}
