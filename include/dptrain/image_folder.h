/* image_folder.h - a folder of image files as a batch source, streamed:
 * torchvision's ImageFolder layout (DIR/train/CLASS/..., DIR/test/CLASS/...)
 * indexed once, then every sample read and decoded when a batch needs it
 * (by the batch loader's threads, batch_loader.h), transformed as
 * torchvision does (image_sample.h) into the model's input size.
 *
 * The index (dp_image_index_build): classes are the sorted (byte order, as
 * Python's sorted) names of the folders in DIR/train, label = position; the
 * files of a class are found as torchvision 0.14's make_dataset finds them
 * (os.walk of the class folder, following links, roots in sorted order,
 * each root's files sorted), with its extensions (.jpg .jpeg .png .ppm .bmp
 * .pgm .tif .tiff .webp, any case); names starting with '.' are skipped. A
 * test folder whose name is not a training class is an error. Every file's
 * header is read once (dp_image_probe_file, on `threads` threads): an
 * unreadable file is one line (the first 10, then a count) and the index
 * fails, or, with skip_bad, is left out and counted. A progress callback
 * is told how far it got.
 *
 * The source (dp_folder_source_new) fills a sample by reading its file and
 * calling dp_image_sample with the training options for a training fill
 * and the evaluation options otherwise; the training transform's random
 * draws come from a generator seeded by (seed, epoch, the sample's number
 * in the index), so a batch's bytes do not depend on threads, devices or
 * ranks, and a resume redraws them. A file that fails to decode during a
 * run (changed after the index) fails the fill with its line, or, with
 * skip_bad, is replaced by the next sample of the index that decodes
 * (counted: dp_folder_source_bad_files). With a cache of N bytes the first
 * N bytes' worth of samples keep, after their first fill, the output of a
 * transform that draws nothing (evaluation, fixed) or the decoded image
 * (training, then transformed anew each epoch, from the whole decode): the
 * same bytes as without the cache, with DCT scaling off.
 */
#ifndef DPTRAIN_IMAGE_FOLDER_H
#define DPTRAIN_IMAGE_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/batch_source.h"
#include "dptrain/comm.h"
#include "dptrain/image_sample.h"

/* Called while the index is read: `done` of `total` files (total 0 while
 * the folders are walked). */
typedef void (*dp_index_progress_fn)(void *ctx, const char *split, long done, long total);

typedef struct {
    int count;             /* files indexed (bad ones left out when skipped) */
    int num_classes;
    char **class_names;    /* (num_classes) */
    const char **paths;    /* (count) each file's path, DIR/SPLIT/CLASS/... */
    int32_t *labels;       /* (count) */
    int skipped;           /* unreadable files left out (skip_bad) */
    size_t root_length;    /* bytes of every path's DIR/SPLIT/ */
    char *pool;            /* the paths' bytes */
} dp_image_index_t;

typedef struct {
    int skip_bad;          /* 1: unreadable files are counted and left out; 0: they fail the index */
    int ignore_exif;       /* the probe's and the decoder's */
    int threads;           /* threads reading the headers (0: 1) */
    dp_index_progress_fn progress;
    void *progress_ctx;
} dp_index_options_t;

/* Indexes DIR/SPLIT ("train" or "test"), or DIR itself for the split ""
 * (its folders the classes: a folder without a test split). When DIR/SPLIT
 * (DIR for "") is a file, it is an image list (image_list.c: PATH LABEL
 * lines, or a CSV's PATH,LABEL), whose order the index keeps; a training
 * list's classes are its labels (numbers 0 .. the largest when every label
 * is one, else the names sorted); root_length covers the list's folder, or
 * is 0 when its paths are absolute. classes: the
 * training split's class names (the test split's folders must be among
 * them, and keep their labels); NULL for a training split, whose folders
 * they are. A training split's class folder without images is refused. */
dp_status_t dp_image_index_build(const char *dir, const char *split, char *const *classes, int num_classes,
                                 const dp_index_options_t *options, dp_image_index_t *out);
void dp_image_index_free(dp_image_index_t *index);

/* The folder of DIR's training split: the image list DIR/train.txt or
 * DIR/train.csv when there is one (a file), else "train" when DIR/train is
 * a folder, else "" (DIR's own class folders, or DIR itself an image list:
 * dp_image_index_build's split ""). */
const char *dp_image_folder_train_split(const char *dir);
/* The folder of DIR's test split: the image list DIR/test.txt, test.csv,
 * val.txt or val.csv (the first there is), else "test" when DIR/test is a
 * folder, else "val" (ImageNet's and YOLO's name for it) when DIR/val is,
 * else NULL (none: the test split is held out, dp_image_index_hold_out). */
const char *dp_image_folder_test_split(const char *dir);
/* Whether path is a file whose name ends in .txt or .csv: an image list
 * given as the data itself (its test split held out). */
int dp_image_folder_is_list(const char *path);

/* The image files under `dir` (its subfolders too, following links), in
 * the order and with the extensions the index takes a class folder's
 * files in; names starting with '.' skipped. *paths (dir/.../NAME, *count
 * of them, none for a folder without images) is freed with
 * dp_image_list_free. An unreadable folder is one line. */
dp_status_t dp_image_list_files(const char *dir, char ***paths, int *count);
void dp_image_list_free(char **paths, int count);

/* A checkpoint's class names against a folder it is evaluated on
 * (image_index.c), the labels being positions among `classes`: the class
 * folders of DIR/SPLIT (DIR itself for the split ""; the index's: folders,
 * links followed, names not starting with '.') must each be one of them.
 * Every folder one of the names (names without a folder are fine), or
 * DIR/SPLIT not a folder that can be read (dp_image_index_build names
 * it): *by_name 1, warning "". None of the folders one of the names
 * (ImageNet's n01440764 ... against imported weights' tench ...): *by_name
 * 0, the folder to be labelled in its own sorted order, and `warning`
 * (size bytes) says so in one line naming the folder, the names and the
 * folder that is output 0. Some folders names and some not: DP_ERR_FORMAT,
 * one line naming the first in sorted order that is not one. */
dp_status_t dp_image_folder_match_classes(const char *dir, const char *split, char *const *classes, int num_classes,
                                          int *by_name, char *warning, size_t size);
/* index's labels made positions among `classes` (every one of its class
 * names among them: a split dp_image_folder_match_classes matched by name),
 * which become its class names. A class name that is not one of them is
 * one line naming it; *index is unchanged on failure. */
dp_status_t dp_image_index_relabel(dp_image_index_t *index, char *const *classes, int num_classes);

/* The default fraction held out (--holdout) of a folder without a test split. */
#define DP_HOLDOUT_DEFAULT 0.1
/* Holds out a test split of `index` (image_holdout.c): within each class,
 * round(fraction x its files), at most all but one, chosen by a hash of
 * each file's path below the folder (stratified, no seed, the same on
 * every machine and rank whatever the listing order), move into *held;
 * *index keeps the rest (both in index order, with the same classes).
 * fraction: above 0, below 1. One line naming `what` (the folder) when
 * no file would be held out; *index is unchanged on failure. */
dp_status_t dp_image_index_hold_out(dp_image_index_t *index, double fraction, const char *what,
                                    dp_image_index_t *held);

typedef struct {
    dp_sample_options_t train; /* a training fill's transform (its channels, height, width: the samples') */
    dp_sample_options_t eval;  /* an evaluation fill's (the same channels, height, width) */
    int skip_bad;              /* a file that fails to decode: replaced by the next that decodes, counted */
    size_t cache_bytes;        /* 0: no cache */
} dp_folder_options_t;

/* A source over `index` (taken: freed with the source; *index is zeroed,
 * also on failure). */
dp_status_t dp_folder_source_new(dp_image_index_t *index, const dp_folder_options_t *options,
                                 dp_batch_source_t **out);
/* --augment on top of the training transform: dp_augment_pixels of each
 * training sample at its position in the epoch (data.h). */
dp_status_t dp_folder_source_set_augment(dp_batch_source_t *src, const dp_augment_t *augment);
/* Samples held in the cache. (The files left out and replaced:
 * dp_batch_source_skipped.) */
long dp_folder_source_cached(const dp_batch_source_t *src);

/* The evaluation transform as checkpoints record it (data.transform):
 * "resize S" (Resize(S), then CenterCrop to the output) or "squash"
 * (Resize((H, W)), the aspect ratio not kept), then ", exif ignore" when
 * the orientation is not applied, then ", bicubic" when the resize is
 * Pillow's BICUBIC (none: BILINEAR, as every older checkpoint). text writes it for `eval` (an
 * evaluation, fixed or squash mode); parse makes the options of an
 * evaluation sample of channels x height x width from it (one line naming
 * the text when it is not one): "resize S" as DP_SAMPLE_FIXED, the mode
 * the run's evaluation had (an image of exactly height x width as it is). */
void dp_eval_transform_text(const dp_sample_options_t *eval, char *text, size_t size);
dp_status_t dp_eval_transform_parse(const char *text, int channels, int height, int width, dp_sample_options_t *out);

/* Every rank's index must list the same files with the same labels: a
 * collective (every rank calls it); fails on every rank when they differ,
 * rank 0's line naming the first rank that differs and the first entry
 * where its list and rank 0's part. */
dp_status_t dp_image_index_check_ranks(const dp_image_index_t *index, const dp_world_t *world, const char *what);

#endif
