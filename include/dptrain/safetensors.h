/* safetensors.h - a writer and a strict reader of safetensors files
 * (Hugging Face's format), apart from what dptrain stores in them
 * (checkpoint.h):
 *   an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *     {"__metadata__": {"key": "value", ...},
 *      "conv1.weight": {"dtype": "F32", "shape": [20, 1, 3, 3], "data_offsets": [0, 720]}, ...}
 *   padded with spaces so that the data starts at a multiple of 8, then the
 *   tensors' bytes, contiguous, offsets relative to the start of the data.
 * dptrain writes and reads F32 (little-endian float32) only. The reader
 * checks everything and fails with one line naming the file and the
 * problem: header length vs file size, JSON syntax, dtype, shape vs
 * offsets, overlapping / out-of-range / non-contiguous offsets, duplicate
 * names, bytes after the last tensor. Files are written atomically (io.h's
 * dp_file_begin/dp_file_commit).
 */
#ifndef DPTRAIN_SAFETENSORS_H
#define DPTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

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

/* "[20, 1, 3, 3]" into buf (truncated to size); returns buf. */
char *dp_st_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

#endif
