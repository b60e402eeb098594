/* data.h - IDX files, datasets of images and labels, the shuffled batch loader.
 *
 * IDX (LeCun's MNIST format): big-endian magic 0x0000TTNN (TT = 0x08 for
 * unsigned bytes, NN = number of dims), NN big-endian uint32 dims, then the
 * data. Files may be gzip-compressed (.gz) or plain; the reader checks the
 * magic, the dims and that the data is exactly as long as the dims say.
 *
 * A data directory is one of three layouts, detected by what it holds
 * (dp_dataset_load): the four IDX files of (Fashion-)MNIST; torchvision's
 * ImageFolder (DIR/train/CLASS/NAME.png, DIR/test/CLASS/NAME.png, classes = the
 * sorted folder names of DIR/train); the CIFAR-10 binary files
 * (data_batch_1.bin .. data_batch_5.bin, test_batch.bin: one label byte and
 * 3 x 32 x 32 channel-major pixel bytes per record), in DIR or in
 * DIR/cifar-10-batches-bin.
 *
 * Images stay bytes in memory; a batch source over a dataset
 * (batch_source.h: dp_memory_source_new) fills batches of bytes, augmented
 * (random crop with padding, horizontal flip: dp_augment_pixels) as a pure
 * function of (seed, epoch, the example's position in the epoch), so that
 * it does not depend on how a batch is split over devices and ranks and a
 * run resumed in the middle of an epoch redraws the same crops; the devices
 * turn bytes into floats in [0, 1], normalised per channel when the data
 * says so (dp_pixels_to_input is the host's conversion; dp_dataset_fill
 * does both on the host). The loader here only hands out example indices:
 * a seeded shuffle per epoch, then batches of B, the last short batch kept
 * (batch_loader.h runs it ahead of the trainer with a source).
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

#define DP_DATA_MAX_CHANNELS 4

/* How a pixel byte p of channel c becomes the model's input: x = p *
 * (1/255) in float, then, when enabled, (x - mean[c]) / std[c] (one
 * rounding each: torchvision's ToTensor then Normalize). */
typedef struct {
    int enabled;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
} dp_normalize_t;

/* x (n, C, H, W) = pixels (n, C, H, W) as the input (dp_normalize_t;
 * norm NULL: not normalised); plane = H x W. The host's conversion: the
 * CPU devices' and the reference of every other backend's. */
void dp_pixels_to_input(const uint8_t *pixels, int n, int channels, size_t plane, const dp_normalize_t *norm,
                        float *x);

typedef struct {
    int count;         /* number of examples */
    int channels;      /* 1 for (Fashion-)MNIST, 3 for CIFAR */
    int height, width; /* 28 x 28, 32 x 32 */
    int num_classes;   /* 10; ImageFolder: the number of class folders */
    uint8_t *pixels;   /* (count, channels, height, width) */
    uint8_t *labels;   /* (count) in [0, num_classes) */
    /* Per-channel normalisation applied by the fill functions when
     * `normalize` is set: x = (pixel / 255 - mean[c]) / std[c]
     * (torchvision's Normalize after ToTensor). Off: x = pixel / 255. */
    int normalize;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
    char **class_names; /* (num_classes) ImageFolder's folder names, CIFAR-10's names, else NULL (IDX) */
} dp_dataset_t;

/* The default data directory (Debian's dataset-fashion-mnist package). */
#define DP_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

typedef enum {
    DP_DATA_IDX,          /* DIR/SPLIT-images-idx3-ubyte[.gz], DIR/SPLIT-labels-idx1-ubyte[.gz] */
    DP_DATA_IMAGE_FOLDER, /* DIR/train/CLASS/FILE and DIR/test/CLASS/FILE, or DIR/CLASS/FILE alone */
    DP_DATA_CIFAR,        /* DIR[/cifar-10-batches-bin]/data_batch_N.bin, test_batch.bin */
} dp_data_layout_t;

/* The layout of `dir`: ImageFolder when DIR/train is a directory, CIFAR when
 * data_batch_1.bin or test_batch.bin is there (or in
 * DIR/cifar-10-batches-bin), IDX when one of its four files is there (.gz
 * or plain), else ImageFolder when DIR holds a folder (class folders
 * DIR/CLASS/FILE: the test split is held out of them, image_folder.h
 * dp_image_index_hold_out). A missing directory, a DIR/test without
 * DIR/train, or a directory with none of these is one line. */
dp_status_t dp_data_detect_layout(const char *dir, dp_data_layout_t *out);
const char *dp_data_layout_name(dp_data_layout_t layout);

/* Called while a large split is decoded: `done` of `total` files. */
typedef void (*dp_data_progress_fn)(void *ctx, int done, int total);

typedef struct {
    dp_data_progress_fn progress; /* NULL: none */
    void *progress_ctx;
    double holdout;               /* an image folder without a test folder: the fraction of each class
                                     held out as the test split (0: DP_HOLDOUT_DEFAULT, 0.1) */
} dp_dataset_load_options_t;

/* Loads split "train" or "test" ("t10k", IDX's name for it, is the same
 * split) from `dir`, whatever its layout:
 * - IDX: DIR/SPLIT-images-idx3-ubyte and DIR/SPLIT-labels-idx1-ubyte, each
 *   with or without .gz; image and label counts agree, every label < 10.
 * - ImageFolder: every file in DIR/SPLIT/CLASS/ (dot files skipped), in
 *   sorted class then file order, decoded once into memory; all images have
 *   the size and channel count of the first; classes are the sorted folder
 *   names of DIR/train, and the test split's folders must be among them;
 *   without DIR/test (class folders in DIR, or DIR/train alone) the test
 *   split is held out of the training folders (options->holdout). An
 *   empty class folder, a file that is not an image, or an image of another
 *   size is an error naming the file.
 * - CIFAR: train = data_batch_1.bin .. data_batch_5.bin (those present,
 *   from 1 without gaps), test = test_batch.bin; each a whole number of
 *   3073-byte records, labels < 10.
 * dp_dataset_load draws a progress bar on stderr while an ImageFolder split
 * decodes, when stderr is a terminal; dp_dataset_load_with takes a callback
 * (or none). */
dp_status_t dp_dataset_load(const char *dir, const char *split, dp_dataset_t *out);
dp_status_t dp_dataset_load_with(const char *dir, const char *split,
                                 const dp_dataset_load_options_t *options, dp_dataset_t *out);

/* Reads CIFAR-10 binary files (1 label byte + 3072 pixel bytes per record,
 * 3 x 32 x 32 channel-major), concatenated in the order given. Errors name
 * the file: missing, empty, not a whole number of records, label >= 10. */
dp_status_t dp_cifar_read(const char *const *paths, int num_paths, dp_dataset_t *out);

/* *out = the normalisation of `channels`-channel images by n mean/std
 * pairs: n is 1 (the same for every channel) or `channels`, every std > 0
 * and mean finite; else one line saying what is wrong. */
dp_status_t dp_normalize_make(int channels, int n, const float *mean, const float *std, dp_normalize_t *out);
/* Sets per-channel normalisation: `n` is 1 (the same for every channel) or
 * the dataset's channel count; every std > 0. "0.5,0.25" style text is
 * parsed by dp_normalize_parse (n values, 1 or channels). */
dp_status_t dp_dataset_set_normalize(dp_dataset_t *ds, int n, const float *mean, const float *std);
/* Parses "MEAN,STD" (one channel or all) or "M0,M1,M2,S0,S1,S2" (2 x C
 * values): n gets the number of channels given. */
dp_status_t dp_normalize_parse(const char *text, int *n, float mean[DP_DATA_MAX_CHANNELS],
                               float std[DP_DATA_MAX_CHANNELS]);

/* Builds a dataset from memory (copies); for tests and examples. */
dp_status_t dp_dataset_from_memory(dp_dataset_t *out, int count, int channels,
                                   int height, int width, int num_classes,
                                   const uint8_t *pixels, const uint8_t *labels);
void dp_dataset_free(dp_dataset_t *ds);

/* Keeps only the first `limit` examples (no-op when limit <= 0 or >= count). */
void dp_dataset_truncate(dp_dataset_t *ds, int limit);

/* The dataset's normalisation as a dp_normalize_t. */
void dp_dataset_normalization(const dp_dataset_t *ds, dp_normalize_t *out);

/* Fills x (n, C, H, W) with the input the examples indices[0..n) become
 * (dp_pixels_to_input with the dataset's normalisation) and y (n) with
 * their labels: on the host, what the trainer's devices make of them. */
void dp_dataset_fill(const dp_dataset_t *ds, const int *indices, int n,
                     float *x, int32_t *y);

/* --- Augmentation -------------------------------------------------------- */
/* torchvision's RandomCrop(size=(H, W), padding=crop_padding) (zero fill)
 * then RandomHorizontalFlip(p=0.5), on the byte image, before the
 * conversion to float and the normalisation. */
typedef struct {
    int crop_padding; /* 0: no crop; else pad every side by this many zero pixels, crop H x W */
    int flip;         /* 1: flip horizontally with probability 1/2 */
} dp_augment_t;

/* Parses "crop:P,flip", "flip", "crop:P" or "none" (P in 1..64). */
dp_status_t dp_augment_parse(const char *text, dp_augment_t *out);

/* The draws for one example: crop offsets dy, dx in [0, 2P] (the window's
 * top-left corner in the padded image) and the flip, a pure function of
 * (seed, epoch, position): position is the example's index in the epoch's
 * order, step * batch_size + its index in the global batch, so every device
 * and rank draws the same for it however the batch is split. */
void dp_augment_draw(const dp_augment_t *aug, uint64_t seed, int epoch, int64_t position,
                     int *dy, int *dx, int *flip);

/* dst (C, H, W) = src (C, H, W) augmented for the example at `position`
 * of epoch `epoch` (dp_augment_draw): the crop window of the image padded
 * with byte 0, then the flip. aug NULL or all zero: a copy. */
void dp_augment_pixels(const dp_augment_t *aug, uint64_t seed, int epoch, int64_t position, const uint8_t *src,
                       int channels, int height, int width, uint8_t *dst);

/* --- The batch loader ---------------------------------------------------- */
typedef struct dp_loader dp_loader_t;

/* A loader over `count` examples in batches of `batch_size` (1 <= batch_size
 * <= count, else DP_ERR_ARG). With shuffle, epoch e's order is a
 * Fisher-Yates permutation drawn from a generator seeded by (seed, e), so
 * any epoch can be reproduced without replaying earlier ones. */
dp_status_t dp_loader_new(int count, int batch_size, int shuffle, uint64_t seed,
                          dp_loader_t **out);
void dp_loader_free(dp_loader_t *loader);

/* Repeated augmentation (torchvision's RASampler, Hoffer et al. 2020):
 * every epoch's order becomes the permutation's first ceil(count /
 * repeats) samples, each `repeats` times in a row, cut to count positions
 * (the same positions and steps per epoch; torchvision's sampler also cuts
 * to a multiple of 256); 1: none (the default). Position p holds copy p %
 * repeats of its sample: dp_fill_keys_t.repeats gives a source the copy,
 * so that each copy is augmented its own way. Restarts epoch 0; 1 <=
 * repeats <= count, else DP_ERR_ARG. */
dp_status_t dp_loader_set_repeats(dp_loader_t *loader, int repeats);

/* The most repeats a training run takes (train --ra-reps, checkpoints). */
#define DP_RA_REPS_LIMIT 64

/* Starts epoch `epoch` (0-based): reshuffles and rewinds. */
void dp_loader_start_epoch(dp_loader_t *loader, int epoch);

/* The next batch's example indices; returns its size (batch_size, or less
 * for the last batch), 0 when the epoch is over. `indices` stays valid until
 * the next call. */
int dp_loader_next(dp_loader_t *loader, const int **indices);

/* Batches per epoch: ceil(count / batch_size). */
int dp_loader_num_batches(const dp_loader_t *loader);

/* The current epoch's position as a step: the index of the batch the next
 * dp_loader_next returns (0 after dp_loader_start_epoch). Its first
 * example is at position step * batch_size of the epoch's order (a
 * fill's dp_fill_keys_t.first_position, batch_source.h). */
int dp_loader_step(const dp_loader_t *loader);

/* Moves to batch `step` of the current epoch (0 <= step <= num_batches; a
 * run resumed in the middle of an epoch calls dp_loader_start_epoch(e),
 * then this): the batches that follow are those an uninterrupted epoch
 * would hand out. */
dp_status_t dp_loader_seek(dp_loader_t *loader, int step);

#endif
