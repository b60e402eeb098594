/* image_size.h - `--image-size N|HxW` (train, eval, predict): a model at
 * another input height and width, from its model file's text
 * (model_file.h dp_model_file_set_input_size). train gives a new run that
 * size; eval and predict test a checkpoint's network at it (FixRes:
 * torchvision's --val-crop-size, timm's validate.py --img-size), which
 * only a network whose parameters do not depend on the input size takes
 * (global average pooling before its head). */
#ifndef DPTRAIN_CLI_IMAGE_SIZE_H
#define DPTRAIN_CLI_IMAGE_SIZE_H

#include <stddef.h>

#include "dptrain/checkpoint.h"
#include "dptrain/nn.h"
#include "dptrain/status.h"

/* --image-size's value: N (N x N) or HxW, each 1 to 65536; one line
 * "COMMAND: --image-size: ..." otherwise. */
dp_status_t cli_parse_image_size(const char *command, const char *text, int *height, int *width);

/* The model file text of *model (NUL-terminated, *len bytes, the caller's
 * to free) with its input at height x width; a built-in network is taken
 * as its shipped model file NAME.cfg where that has the same parameter
 * table. One line "COMMAND: --image-size TEXT: ..." where there is no
 * text to edit. */
dp_status_t cli_model_text_at_size(const char *command, const char *option, const dp_model_t *model, int height,
                                   int width, char **text, size_t *len);

/* *model (a checkpoint's network, its parameters already loaded against
 * it) replaced by the same network taking height x width inputs, whose
 * parameter table must be the same (names, shapes, order), so that the
 * loaded parameters are its own. One line naming the first parameter whose
 * shape would change (LeNet's fc1.weight: its linear layer's inputs), or
 * the layer that does not fit the size; *model unchanged on failure.
 * option: how the message names the option ("--image-size 40"). */
dp_status_t cli_model_at_size(const char *command, const char *option, int height, int width, dp_model_t **model);
/* The same as a new model in *out (the caller's to free), *model kept:
 * train --val-image-size's network for the per-epoch test (frozen as the
 * model is, so that the parameter tables match). */
dp_status_t cli_model_copy_at_size(const char *command, const char *option, const dp_model_t *model, int height,
                                   int width, dp_model_t **out);

/* eval's and predict's network for a checkpoint: *model (its parameters
 * loaded) at --image-size (*image_size, parsed as height x width, option
 * naming it) as cli_model_at_size, or where none is given at the size its
 * run tested at (data.val_image_size, train --val-image-size: *image_size
 * then points to its "HxW", static text); *saved_height x *saved_width:
 * the size data.transform is for (that size, else the model's own). */
dp_status_t cli_checkpoint_model_at_size(const char *command, const dp_checkpoint_info_t *info,
                                         const char **image_size, int height, int width, const char *option,
                                         dp_model_t **model, int *saved_height, int *saved_width);

/* An image folder's evaluation transform (a checkpoint's data.transform,
 * folder_source's "resize S[, exif ignore]" or "squash[...]") for inputs of
 * height x width: the saved one when that is the checkpoint's own input
 * size (saved_height x saved_width) or a squash; else "resize D" with D
 * train's default for the size (256/224 of its larger side, image_transform.h
 * dp_eval_resize_default), the EXIF choice kept. "" stays "". out is
 * not saved. */
dp_status_t cli_transform_at_size(const char *saved, int channels, int saved_height, int saved_width, int height,
                                  int width, char *out, size_t size);

#endif
