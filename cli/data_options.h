/* data_options.h - the data options of `dptrain train` and `dptrain eval`
 * and the batch sources they open: IDX and CIFAR files in memory, image
 * folders streamed (image_folder.h) with torchvision's transforms, indexed
 * with a progress line, their loader threads chosen for the devices. */
#ifndef DPTRAIN_CLI_DATA_OPTIONS_H
#define DPTRAIN_CLI_DATA_OPTIONS_H

#include "dptrain/batch_source.h"
#include "dptrain/checkpoint.h"
#include "dptrain/comm.h"
#include "dptrain/image_transform.h"
#include "options.h"

typedef struct {
    const char *dir;         /* --data */
    const char *transform;   /* --transform: resized-crop (RandomResizedCrop + flip), squash or center (the default) */
    int resize;              /* --resize: the shorter side before the center crop (0: 256/224 of the input) */
    const char *exif;        /* --exif apply (default) | ignore */
    const char *interpolation; /* --interpolation bilinear (default) | bicubic: every resize's filter */
    const char *dct_scale;   /* --dct-scale on (default) | off */
    const char *auto_augment; /* --auto-augment ta_wide | ra | none (default) */
    int ra_magnitude;        /* --ra-magnitude 0..30 (-1: not given, 9 with ra) */
    const char *aa_interpolation; /* --auto-augment-interpolation bilinear (default) | nearest */
    const char *color_jitter; /* --color-jitter B[,C,S[,H]] (NULL: none) */
    int skip_bad;            /* --skip-bad-files */
    int cache_mb;            /* --cache-mb: decoded samples kept in memory (0: none) */
    int loader_threads;      /* --loader-threads (-1: chosen) */
    const char *holdout;     /* --holdout: the fraction of each class held out as the test split of an
                                image folder without a test folder (NULL: holdout_default) */
    const char *holdout_default; /* a checkpoint's data.holdout, for such a folder (NULL: DP_HOLDOUT_DEFAULT) */
    int limit;               /* --limit: the first N training samples (0: all) */
    const char *normalize;   /* --normalize */
    const char *augment;     /* --augment */
    const char *model;       /* the model's name, for messages */
    const char *image_size;  /* eval's --image-size (NULL: none), named where data of a fixed size refuses it */
    const char *val_image_size; /* train's --val-image-size (NULL: none): the test split made val_height x
                                   val_width, not the model's size (image folders only) */
    int val_height, val_width;
} cli_data_options_t;

/* The options' defaults. */
cli_data_options_t cli_data_defaults(void);

/* Appends the image-folder options (--transform, --resize, --exif,
 * --interpolation, --dct-scale, --auto-augment, --ra-magnitude,
 * --auto-augment-interpolation, --color-jitter, --skip-bad-files,
 * --cache-mb, --loader-threads, --holdout)
 * to an option table at *used (room for them: CLI_DATA_OPTIONS entries),
 * for `train` (all) or `eval` (training ones left out: training 0). */
#define CLI_DATA_OPTIONS 13
void cli_data_option_entries(cli_data_options_t *o, int training, option_t *table, int *used);
/* Their lines of --help. */
extern const char cli_data_usage_train[], cli_data_usage_eval[];

/* --interpolation's value (NULL: bilinear), or one line naming the command. */
dp_status_t cli_parse_interpolation(const char *command, const char *text, dp_interpolation_t *out);

/* A checkpoint's evaluation transform `saved` (data.transform) with its
 * resize's filter replaced by `interpolation` (NULL: as saved) into out;
 * refused (one line) for a checkpoint without one (IDX, CIFAR data). */
dp_status_t cli_transform_interpolated(const char *command, const char *saved, const char *interpolation,
                                       int channels, int height, int width, char *out, size_t size);

/* The opened data: sources (owned), and what the run reports. */
typedef struct {
    dp_batch_source_t *train, *test; /* test only for eval */
    const char *layout;              /* "IDX", "image folder", "CIFAR-10" */
    int loader_threads;              /* for dp_fit */
    int train_total;                 /* the training split's samples before --limit */
    char transform[128];             /* an image folder's evaluation transform, for checkpoints (data.transform); "" otherwise */
    char train_transform[160];       /* its training transform (data.train_transform: "resized-crop, dct-scale
                                        off, auto-augment ra 9", "resized-crop, color-jitter 0.4,0.4,0.4,0");
                                        "" otherwise */
    char test_split[8];              /* an image folder's test folder, "test" or "val"; "" otherwise */
    char holdout[32];                /* the fraction held out as the test split (data.holdout), as given or
                                        defaulted; "" when the data has a test split of its own */
    char dir[DP_CHECKPOINT_MAX_DATA_DIR + 1]; /* the data's directory, absolute, for checkpoints (data.dir);
                                        "" where it cannot be recorded (not one line, too long) */
} cli_data_t;

/* Opens `dir` for a model taking channels x height x width: the training
 * split (training 1: with its transform, --limit, --augment) and the test
 * split; for eval, `classes` (may be NULL: the data's own, DIR/train's
 * folders) are a checkpoint's class names: the test split's labels are
 * positions among them, matched by name (a class folder that is not one of
 * them is one line), and a test folder without DIR/train is read.
 * devices, cpu_devices: how many devices this process trains on and how
 * many are CPU threads (the loader threads share the cores with them).
 * One line on failure. */
dp_status_t cli_data_open(const cli_data_options_t *o, int training, int channels, int height, int width,
                          char *const *classes, int num_classes, int cpu_threads, const dp_world_t *world,
                          cli_data_t *out);
void cli_data_close(cli_data_t *d);

/* The data directory of a checkpoint (data.dir), for a command given no
 * --data: DP_OK when it is a directory here, else one line naming it and
 * what to give instead (the checkpoint moved to another machine, the
 * folder moved). */
dp_status_t cli_check_saved_data_dir(const char *command, const char *checkpoint, const char *dir);

#endif
