/* checkpoint.h - training checkpoints in the safetensors format.
 *
 * Two layers:
 * - dp_safetensors_*: a writer and a strict reader of safetensors files
 *   (Hugging Face's format): an 8-byte little-endian header length N, N
 *   bytes of UTF-8 JSON
 *     {"__metadata__": {"key": "value", ...},
 *      "conv1.weight": {"dtype": "F32", "shape": [20, 1, 3, 3], "data_offsets": [0, 720]}, ...}
 *   padded with spaces so that the data starts at a multiple of 8, then the
 *   tensors' bytes, contiguous, offsets relative to the start of the data.
 *   dptrain writes and reads F32 (little-endian float32) only. The reader
 *   checks everything and fails with one line naming the file and the
 *   problem: header length vs file size, JSON syntax, dtype, shape vs
 *   offsets, overlapping / out-of-range / non-contiguous offsets, duplicate
 *   names, bytes after the last tensor.
 * - dp_checkpoint_*: what a training run saves to continue exactly: every
 *   entry of the model's parameter table (weights, biases and buffers such
 *   as "bn1.running_mean") under its own name; the optimizer's state as
 *   "optimizer.<param>.<state>" (e.g. "optimizer.conv1.weight.exp_avg"),
 *   one tensor per trainable parameter with that parameter's shape; and the
 *   metadata (dp_checkpoint_info_t plus the format version and the model's
 *   parameter-table fingerprint). A PyTorch user reads it with
 *   safetensors.torch.load_file, a numpy user with tools/read_checkpoint.py.
 *
 * Files are written atomically (io.h's dp_file_begin/dp_file_commit: a
 * temporary file in the same directory, fflush, fsync, rename, fsync of the
 * directory): readers see the old file or the new one, never a torn file,
 * and a failed write leaves the old file as it was.
 */
#ifndef DPTRAIN_CHECKPOINT_H
#define DPTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/status.h"

/* --- safetensors --------------------------------------------------------------- */
#define DP_ST_MAX_DIMS 8
/* The reader refuses larger headers (the reference implementation's limit). */
#define DP_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct {
    const char *name;
    int ndim;                        /* 0 (a scalar) to DP_ST_MAX_DIMS */
    int64_t shape[DP_ST_MAX_DIMS];
    const float *data;               /* product(shape) floats, host order */
} dp_st_tensor_t;

typedef struct {
    const char *key, *value;
} dp_st_meta_t;

/* Writes the tensors (in the given order, data contiguous in that order)
 * and the metadata (in the given order) to `path`, atomically. The same
 * input always gives the same bytes. Names must be distinct, non-empty and
 * not "__metadata__" (DP_ERR_ARG, nothing written). */
dp_status_t dp_safetensors_write(const char *path, const dp_st_tensor_t *tensors, int count,
                                 const dp_st_meta_t *meta, int meta_count);

typedef struct dp_safetensors dp_safetensors_t;

/* One tensor of a file that was read, in header order. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[DP_ST_MAX_DIMS];
    size_t numel;
    const unsigned char *bytes; /* numel * 4 bytes, little-endian float32, maybe unaligned */
} dp_st_entry_t;

/* Reads and checks the whole file. */
dp_status_t dp_safetensors_read(const char *path, dp_safetensors_t **out);
void dp_safetensors_free(dp_safetensors_t *st);
const char *dp_safetensors_path(const dp_safetensors_t *st);
int dp_safetensors_count(const dp_safetensors_t *st);
const dp_st_entry_t *dp_safetensors_entry(const dp_safetensors_t *st, int i);
/* The entry named `name`, or NULL. */
const dp_st_entry_t *dp_safetensors_find(const dp_safetensors_t *st, const char *name);
/* Copies an entry's values to dst (numel floats, host order). */
void dp_safetensors_copy(const dp_st_entry_t *entry, float *dst);
/* Metadata: the value of `key` or NULL; and by index, in header order. */
const char *dp_safetensors_meta(const dp_safetensors_t *st, const char *key);
int dp_safetensors_meta_count(const dp_safetensors_t *st);
dp_st_meta_t dp_safetensors_meta_at(const dp_safetensors_t *st, int i);

/* --- checkpoints ---------------------------------------------------------------- */
/* Metadata "format_version"; readers refuse other versions. */
#define DP_CHECKPOINT_VERSION 1

/* Where training stands, saved in the metadata. The RNG state is the seed:
 * the initialisation, each epoch's shuffle (seed, epoch) and the dropout
 * masks (seed, step_count) are pure functions of it. */
typedef struct {
    char model[128];            /* the model's name */
    char dptrain_version[32];   /* of the writer, informational */
    dp_optim_config_t optim;    /* kind and hyper-parameters (lr: the current one) */
    char lr_schedule[64];       /* "none": dptrain has no schedules yet */
    uint64_t step_count;        /* trainer steps taken (dp_trainer_step_count) */
    uint64_t optimizer_steps;   /* dp_optimizer_steps */
    int epochs_completed;
    int loader_epoch;           /* the epoch training continues with (0-based) */
    int loader_batch;           /* the batch within it (0: its start) */
    uint64_t seed;
    int batch_size;             /* global minibatch */
    int train_examples;         /* size of the training set (after --limit) */
    int num_devices, num_ranks; /* of the run that saved, informational */
} dp_checkpoint_info_t;

/* Writes params (dp_model_num_params floats: the whole table), the state of
 * `opt` (NULL: none) and `info`. */
dp_status_t dp_checkpoint_save(const char *path, const dp_model_t *model, const float *params,
                               dp_optimizer_t *opt, const dp_checkpoint_info_t *info);

typedef struct dp_checkpoint dp_checkpoint_t;

/* Reads the file and its metadata (every key above must be present and
 * well-formed, the format version known). Tensors are checked against a
 * model by the dp_checkpoint_load_* calls. */
dp_status_t dp_checkpoint_open(const char *path, dp_checkpoint_t **out);
void dp_checkpoint_close(dp_checkpoint_t *c);
const dp_checkpoint_info_t *dp_checkpoint_info(const dp_checkpoint_t *c);
const dp_safetensors_t *dp_checkpoint_tensors(const dp_checkpoint_t *c);

/* Fills params (dp_model_num_params floats). Fails, naming the first
 * mismatching tensor, unless the file holds exactly the model's table
 * (same names, shapes, order and trainable flags: the fingerprint) plus
 * optimizer state. */
dp_status_t dp_checkpoint_load_params(const dp_checkpoint_t *c, const dp_model_t *model, float *params);

/* Restores the state buffers and step count of `opt`, an optimizer of
 * `kind` (optim.h has no getter). Fails, changing nothing, if the file was
 * saved by another kind or its state tensors are not exactly those of
 * `opt` for the model's trainable parameters. */
dp_status_t dp_checkpoint_load_optimizer(const dp_checkpoint_t *c, const dp_model_t *model,
                                         dp_optim_kind_t kind, dp_optimizer_t *opt);

/* The model's parameter-table fingerprint: FNV-1a 64 of the names, shapes
 * and trainable flags in order. */
uint64_t dp_model_fingerprint(const dp_model_t *model);

#endif
