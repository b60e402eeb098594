/* model_file.h - model files: a small text format, one layer per block
 * (in the spirit of Darknet's .cfg), read into a dp_model_t through the
 * builder API of nn.h. The format is documented in docs/model-format.md;
 * models/ holds every built-in network as a model file.
 *
 * Errors are one line, "FILE:LINE: problem" (unknown layer type or key,
 * missing or duplicate key, bad number, unknown or later label, a shape that
 * does not fit, ...); the parser never crashes on any input (it is fuzzed:
 * tests/fuzz_model_file.c).
 */
#ifndef DPTRAIN_MODEL_FILE_H
#define DPTRAIN_MODEL_FILE_H

#include <stddef.h>

#include "dptrain/nn.h"

/* Longest line accepted, without its newline. */
#define DP_MODEL_FILE_MAX_LINE 1024
/* Largest model file accepted, in bytes. */
#define DP_MODEL_FILE_MAX_BYTES (1 << 20)

/* Builds a model from the `len` bytes of `text` (no NUL needed). file_name
 * names the text in error messages ("FILE:LINE: ..."); NULL reads "<model>".
 * *out is NULL on failure: DP_ERR_FORMAT for a malformed file, the
 * builder's status (DP_ERR_SHAPE, DP_ERR_ARG) for layers that do not fit,
 * DP_ERR_NOMEM. */
dp_status_t dp_model_parse(const char *text, size_t len, const char *file_name, dp_model_t **out);

/* A copy of a model file's text whose last [linear] layer (a classifier's
 * head) has `outputs` outputs: the line of its `out` key replaced by
 * "out = N", every other byte kept (model_file_edit.c). *out
 * (NUL-terminated, *out_len bytes) is the caller's to free. One line when
 * the text is not a model file or has no [linear] layer. */
dp_status_t dp_model_file_set_outputs(const char *text, size_t len, const char *file_name, int outputs,
                                      char **out, size_t *out_len);
/* The same with its [net]'s height and width lines replaced: the input
 * size, for networks that take any (global average pooling before the
 * head); whether the layers fit is the reader's to say when the text is
 * parsed. One line when [net] gives no height and width. */
dp_status_t dp_model_file_set_input_size(const char *text, size_t len, const char *file_name, int height, int width,
                                         char **out, size_t *out_len);

/* Reads and parses the model file at `path` (DP_ERR_IO: cannot be read). */
dp_status_t dp_model_load_file(const char *path, dp_model_t **out);

/* `--model NAME|FILE`, looked for in this order: a file at that path; a
 * built-in network's name (dp_builtin_models); NAME.cfg (NAME when it ends
 * in .cfg; never a name with a '/') among the installed model files
 * (PREFIX/share/dptrain/models, found beside the installed program or
 * library, wherever the prefix is); the source tree's models/ when this
 * libdptrain is the build tree's, not installed. The models of models/
 * are installed, so `resnet18-cifar` names models/resnet18-cifar.cfg. */
dp_status_t dp_model_load(const char *name_or_path, dp_model_t **out);

#endif
