/* predict.h - inference with a trained model on k devices: logits for a
 * batch of inputs, batch norm with its running statistics, dropout off.
 *
 * A predictor holds the model's parameters once (read-only, shared by every
 * device) and k devices with their own scratch memory; each call splits the
 * batch into k shards (dp_split_batch) that run at the same time.
 */
#ifndef DPTRAIN_PREDICT_H
#define DPTRAIN_PREDICT_H

#include "dptrain/checkpoint.h"
#include "dptrain/nn.h"
#include "dptrain/status.h"

typedef struct dp_predictor dp_predictor_t;

/* params: dp_model_num_params floats (copied). num_devices >= 1. The model
 * must outlive the predictor. */
dp_status_t dp_predictor_new(const dp_model_t *model, const float *params, int num_devices,
                             dp_predictor_t **out);
void dp_predictor_free(dp_predictor_t *p);

/* x: (n, C, H, W) as dp_model_input_shape; logits: (n, dp_model_num_outputs).
 * Any n >= 1 (fewer examples than devices leaves devices idle). A device's
 * shard runs as forwards of at most the forward cap (below) each, so that
 * its memory does not grow with n. */
dp_status_t dp_predictor_run(dp_predictor_t *p, const float *x, int n, float *logits);
/* The most examples one device's forward takes: `examples`, or 0 for the
 * model's inference cap (nn.h dp_model_inference_batch_cap, about 1 GiB of
 * layer outputs, of which a forward holds those still to be read:
 * no_grad.h; the default). */
void dp_predictor_set_forward_cap(dp_predictor_t *p, int examples);
/* The forwards the last dp_predictor_run made, all devices together. */
int dp_predictor_last_forwards(const dp_predictor_t *p);

/* x (channels x height x width floats, dp_model_input_shape: one example
 * of dp_predictor_run's input) = the image file at `path` made the way
 * the checkpoint's training data was for its evaluation, as `dptrain
 * predict` makes it (so the same logits): with an evaluation transform
 * recorded (info->transform, an image folder's: Resize(S) + CenterCrop, or
 * squash; EXIF orientation as the run had it), that transform; without
 * one (IDX, CIFAR, imported weights: data of the model's size), any image
 * resized to height x width (dp_image_to_input); channels converted as
 * image.h says; then pixel / 255 and the normalisation the checkpoint
 * records (info->normalize). info NULL: no transform, no normalisation
 * (dp_image_to_input alone). The JPEG, PNG, PGM/PPM and BMP files of
 * image.h. A bad file is one line naming it; x is then unspecified. */
dp_status_t dp_predict_image_input(const dp_checkpoint_info_t *info, const char *path, int channels, int height,
                                   int width, float *x);

/* Softmax of one row of logits into probs (stable: max subtracted). */
void dp_softmax(const float *logits, int count, float *probs);

#endif
