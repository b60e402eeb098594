/* data.h - IDX files, datasets of images and labels, the shuffled batch loader.
 *
 * IDX (LeCun's MNIST format): big-endian magic 0x0000TTNN (TT = 0x08 for
 * unsigned bytes, NN = number of dims), NN big-endian uint32 dims, then the
 * data. Files may be gzip-compressed (.gz) or plain; the reader checks the
 * magic, the dims and that the data is exactly as long as the dims say.
 *
 * Images stay bytes in memory; a batch is converted to float in [0, 1] when
 * it is filled, into the caller's buffer, so each device can fill its own
 * shard. The loader only hands out example indices: a seeded shuffle per
 * epoch, then batches of B, the last short batch kept.
 */
#ifndef DPTRAIN_DATA_H
#define DPTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/rng.h"
#include "dptrain/status.h"

/* One IDX file of unsigned bytes. */
typedef struct {
    int ndim;
    uint32_t dims[4];
    uint8_t *data; /* (dims[0] * ... * dims[ndim-1]) bytes, malloc'd */
} dp_idx_t;

/* Reads `path` (gzip or plain, detected by content). Errors name the file and
 * what was wrong: missing, wrong magic, not unsigned bytes, bad dims,
 * truncated, trailing data. */
dp_status_t dp_idx_read(const char *path, dp_idx_t *out);
void dp_idx_free(dp_idx_t *idx);

typedef struct {
    int count;         /* number of examples */
    int channels;      /* 1 for (Fashion-)MNIST */
    int height, width; /* 28 x 28 */
    int num_classes;   /* 10 */
    uint8_t *pixels;   /* (count, channels, height, width) */
    uint8_t *labels;   /* (count) in [0, num_classes) */
} dp_dataset_t;

/* The default data directory (Debian's dataset-fashion-mnist package). */
#define DP_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* Loads split "train" or "t10k" from `dir`: DIR/SPLIT-images-idx3-ubyte and
 * DIR/SPLIT-labels-idx1-ubyte, each with or without .gz. Checks that image
 * and label counts agree and that every label is < 10. */
dp_status_t dp_dataset_load(const char *dir, const char *split, dp_dataset_t *out);

/* Builds a dataset from memory (copies); for tests and examples. */
dp_status_t dp_dataset_from_memory(dp_dataset_t *out, int count, int channels,
                                   int height, int width, int num_classes,
                                   const uint8_t *pixels, const uint8_t *labels);
void dp_dataset_free(dp_dataset_t *ds);

/* Keeps only the first `limit` examples (no-op when limit <= 0 or >= count). */
void dp_dataset_truncate(dp_dataset_t *ds, int limit);

/* Fills x (n, C, H, W) with pixels / 255 and y (n) with labels for the
 * examples indices[0..n). */
void dp_dataset_fill(const dp_dataset_t *ds, const int *indices, int n,
                     float *x, int32_t *y);

/* --- The batch loader ---------------------------------------------------- */
typedef struct dp_loader dp_loader_t;

/* A loader over `count` examples in batches of `batch_size` (1 <= batch_size
 * <= count, else DP_ERR_ARG). With shuffle, epoch e's order is a
 * Fisher-Yates permutation drawn from a generator seeded by (seed, e), so
 * any epoch can be reproduced without replaying earlier ones. */
dp_status_t dp_loader_new(int count, int batch_size, int shuffle, uint64_t seed,
                          dp_loader_t **out);
void dp_loader_free(dp_loader_t *loader);

/* Starts epoch `epoch` (0-based): reshuffles and rewinds. */
void dp_loader_start_epoch(dp_loader_t *loader, int epoch);

/* The next batch's example indices; returns its size (batch_size, or less
 * for the last batch), 0 when the epoch is over. `indices` stays valid until
 * the next call. */
int dp_loader_next(dp_loader_t *loader, const int **indices);

/* Batches per epoch: ceil(count / batch_size). */
int dp_loader_num_batches(const dp_loader_t *loader);

#endif
