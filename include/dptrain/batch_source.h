/* batch_source.h - where a run's examples come from: the batch source
 * interface, and its in-memory implementation over a dp_dataset_t (IDX,
 * CIFAR, an image folder decoded into memory).
 *
 * A source is a data set of `count` samples of one shape (C, H, W) that
 * fills host batches: for given sample numbers it writes their pixels as
 * bytes, (n, C, H, W) channel-major, and their labels as int32. It says its
 * shape, its class count and names, and how a byte becomes the model's
 * input (dp_normalize_t: x = byte * (1/255), then (x - mean[c]) / std[c];
 * the devices do that, so a batch crosses to a GPU as bytes). What a fill
 * draws at random (an augmentation's crop and flip, a RandomResizedCrop)
 * is a pure function of (seed, epoch, the sample's position in the
 * epoch's order): never of a thread, a device or a rank, so the same
 * batch has the same bytes however many loader threads, devices and ranks
 * fill it, and a run resumed mid-epoch refills it alike.
 *
 * The order of an epoch, the batching and the cursor a checkpoint saves
 * and restores are the batch loader's (batch_loader.h), which runs any
 * source ahead of the trainer on loader threads; the trainer takes a
 * dp_batch_t (parallel.h) and evaluates straight from a source.
 *
 * Fill functions may run on several threads at once (disjoint outputs).
 */
#ifndef DPTRAIN_BATCH_SOURCE_H
#define DPTRAIN_BATCH_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/data.h"
#include "dptrain/status.h"

/* What a fill draws its random choices from. */
typedef struct {
    uint64_t seed;          /* the run's */
    int epoch;              /* 0-based */
    int64_t first_position; /* the position of samples[0] in the epoch's order (the next: + 1, ...) */
    int training;           /* 1: the training transform (augmentation); 0: the evaluation's (none) */
    int repeats;            /* the loader's repeats (data.h dp_loader_set_repeats; 0 or 1: none): the sample at
                               position p is copy p % repeats of its sample, augmented its own way */
} dp_fill_keys_t;

typedef struct {
    int count;                       /* samples */
    int channels, height, width;     /* of every sample filled */
    int num_classes;                 /* labels are in [0, num_classes) */
    const char *const *class_names;  /* (num_classes) or NULL: the data's built-in classes */
    dp_normalize_t normalize;        /* byte -> input (data.h) */
} dp_source_info_t;

/* A batch in host memory, as the trainer takes it (parallel.h). */
typedef struct {
    int n;                           /* examples, >= 1 */
    int channels, height, width;
    const uint8_t *pixels;           /* (n, C, H, W) */
    const int32_t *labels;           /* (n) */
    const dp_normalize_t *normalize; /* byte -> input; NULL: x = byte * (1/255) */
} dp_batch_t;

typedef struct dp_batch_source dp_batch_source_t;

/* An implementation: a table of functions over its own state. */
typedef struct {
    const char *kind; /* "memory", ... (messages) */
    /* pixels (n, C, H, W) bytes and labels (n) of samples[0..n) (each in
     * [0, count)), sample i keyed by keys->first_position + i; fails with
     * one line naming the sample (a file that no longer decodes). */
    dp_status_t (*fill)(void *self, const int *samples, int n, const dp_fill_keys_t *keys, uint8_t *pixels,
                        int32_t *labels);
    void (*free)(void *self);
    /* Samples left out or replaced so far because their files could not be
     * read (an image folder's --skip-bad-files); NULL: none ever. */
    long (*skipped)(const void *self);
} dp_batch_source_ops_t;

/* A source over `self` (owned: ops->free frees it with the source). */
dp_status_t dp_batch_source_new(const dp_batch_source_ops_t *ops, void *self, const dp_source_info_t *info,
                                dp_batch_source_t **out);
void dp_batch_source_free(dp_batch_source_t *src);
/* The implementation's state when the source is of `ops`' kind, else NULL. */
void *dp_batch_source_impl(const dp_batch_source_t *src, const dp_batch_source_ops_t *ops);
const dp_source_info_t *dp_batch_source_info(const dp_batch_source_t *src);
/* Bytes of one sample: C x H x W. */
size_t dp_batch_source_sample_bytes(const dp_batch_source_t *src);
dp_status_t dp_batch_source_fill(dp_batch_source_t *src, const int *samples, int n, const dp_fill_keys_t *keys,
                                 uint8_t *pixels, int32_t *labels);
/* The source's skipped count (its ops' skipped; 0 without one). */
long dp_batch_source_skipped(const dp_batch_source_t *src);
/* dp_batch_source_fill, and *out = the batch it made (the source's shape
 * and normalisation, n examples at pixels and labels): what
 * dp_trainer_step takes, for loops of one's own (dp_fit runs a
 * dp_batch_loader_t). */
dp_status_t dp_batch_source_fill_batch(dp_batch_source_t *src, const int *samples, int n, const dp_fill_keys_t *keys,
                                       uint8_t *pixels, int32_t *labels, dp_batch_t *out);
/* Sets the normalisation (dp_dataset_set_normalize's rules: n is 1 or the
 * channel count, every std > 0). */
dp_status_t dp_batch_source_set_normalize(dp_batch_source_t *src, int n, const float *mean, const float *std);

/* The in-memory source over `ds`: its bytes as they are; with `augment`
 * (may be NULL or all zero: none) a training fill applies it
 * (dp_augment_pixels). Takes the dataset's normalisation and class names.
 * take 1: the source takes the dataset's contents (freed with the source;
 * *ds is zeroed, also on failure: freed then); 0: it reads *ds, which
 * must outlive the source. */
dp_status_t dp_memory_source_new(dp_dataset_t *ds, const dp_augment_t *augment, int take, dp_batch_source_t **out);

#endif
