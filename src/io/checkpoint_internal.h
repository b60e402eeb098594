/* checkpoint_internal.h - what checkpoint.c (the tensors) and
 * checkpoint_meta.c (the metadata keys) share: the open checkpoint, the
 * metadata as written, and its parsing. Library internal.
 */
#ifndef DPTRAIN_CHECKPOINT_INTERNAL_H
#define DPTRAIN_CHECKPOINT_INTERNAL_H

#include <string.h>

#include "dptrain/checkpoint.h"
#include "dptrain/json.h"

/* The metadata keys every checkpoint is written with; data.classes comes
 * after them when the data has class names, data.transform when the data
 * has an evaluation transform, then cuda.conv_algorithms when there are
 * choices, then model_text when the model was built from a model file,
 * then model.freeze when layers are frozen. */
#define DP_CHECKPOINT_META_KEYS 42
#define DP_CHECKPOINT_CLASSES_KEY "data.classes"
#define DP_CHECKPOINT_TRANSFORM_KEY "data.transform"
#define DP_CHECKPOINT_CONV_ALGOS_KEY "cuda.conv_algorithms"
#define DP_CHECKPOINT_MODEL_TEXT_KEY "model_text"
#define DP_CHECKPOINT_FREEZE_KEY "model.freeze"
#define DP_CHECKPOINT_HOLDOUT_KEY "data.holdout"
#define DP_CHECKPOINT_TRAIN_TRANSFORM_KEY "data.train_transform"
#define DP_CHECKPOINT_DATA_DIR_KEY "data.dir"
#define DP_CHECKPOINT_TRAIN_TOTAL_KEY "data.train_total"
#define DP_CHECKPOINT_VAL_SIZE_KEY "data.val_image_size"
#define DP_CHECKPOINT_LABEL_SMOOTHING_KEY "label_smoothing"
#define DP_CHECKPOINT_NORM_WEIGHT_DECAY_KEY "optimizer.norm_weight_decay"
#define DP_CHECKPOINT_BEST_EPOCH_KEY "best.epoch"
#define DP_CHECKPOINT_BEST_CORRECT_KEY "best.test_correct"
#define DP_CHECKPOINT_BEST_COUNT_KEY "best.test_count"
#define DP_CHECKPOINT_EARLY_STOP_KEY "early_stop"
#define DP_CHECKPOINT_RA_REPS_KEY "data.ra_reps"
#define DP_CHECKPOINT_BIAS_WEIGHT_DECAY_KEY "optimizer.bias_weight_decay"
#define DP_CHECKPOINT_CLIP_GRAD_NORM_KEY "clip_grad_norm"
#define DP_CHECKPOINT_MIXUP_ALPHA_KEY "mixup_alpha"
#define DP_CHECKPOINT_CUTMIX_ALPHA_KEY "cutmix_alpha"
#define DP_CHECKPOINT_RANDOM_ERASE_KEY "random_erase"
#define DP_CHECKPOINT_EMA_STEPS_KEY "model_ema.steps"
#define DP_CHECKPOINT_EMA_DECAY_KEY "model_ema.decay"
#define DP_CHECKPOINT_EMA_UPDATES_KEY "model_ema.updates"
#define DP_CHECKPOINT_WARMUP_METHOD_KEY "lr_schedule.warmup_method"
#define DP_CHECKPOINT_WARMUP_START_KEY "lr_schedule.warmup_start"
#define DP_CHECKPOINT_WARMUP_SEQUENTIAL_KEY "lr_schedule.warmup_sequential"

/* Tensors that are a training state's, not the model's: the optimizer's
 * (optimizer.NAME.STATE) and the moving average's (ema.NAME). */
#define DP_CHECKPOINT_OPTIMIZER_PREFIX "optimizer."
#define DP_CHECKPOINT_EMA_PREFIX "ema."
static inline int dp_checkpoint_state_tensor(const char *name) {
    return strncmp(name, DP_CHECKPOINT_OPTIMIZER_PREFIX, sizeof DP_CHECKPOINT_OPTIMIZER_PREFIX - 1) == 0 ||
           strncmp(name, DP_CHECKPOINT_EMA_PREFIX, sizeof DP_CHECKPOINT_EMA_PREFIX - 1) == 0;
}

#define DP_CHECKPOINT_WEIGHTS_ONLY_KEY "weights_only"

struct dp_checkpoint {
    dp_safetensors_t *st;
    dp_checkpoint_info_t info;
    int has_fingerprint; /* 0: a weights-only file without one (then only names and shapes are checked) */
    uint64_t fingerprint;
    char states[256];
};

/* The metadata of a checkpoint being written: entries point into values,
 * classes, conv_algorithms (or at constant text), in the order they are
 * written: the DP_CHECKPOINT_META_KEYS keys, then the optional ones
 * (lr_schedule.warmup_method, .warmup_start, .warmup_sequential, best.epoch, best.test_correct, best.test_count, early_stop,
 * data.ra_reps,
 * optimizer.norm_weight_decay, optimizer.bias_weight_decay, label_smoothing,
 * clip_grad_norm, mixup_alpha, cutmix_alpha, random_erase, model_ema.steps, model_ema.decay, model_ema.updates,
 * classes, transform, train_transform, holdout, data.train_total,
 * data.dir, data.val_image_size, conv algorithms, model_text, model.freeze:
 * DP_CHECKPOINT_OPTIONAL_KEYS). */
#define DP_CHECKPOINT_OPTIONAL_KEYS 28
typedef struct {
    dp_st_meta_t entries[DP_CHECKPOINT_META_KEYS + DP_CHECKPOINT_OPTIONAL_KEYS];
    int count;
    char values[DP_CHECKPOINT_META_KEYS][256];
    char warmup_start[32];    /* lr_schedule.warmup_start's text */
    char label_smoothing[32]; /* label_smoothing's text */
    char clip_grad_norm[32];  /* clip_grad_norm's text */
    char mix[3][32];          /* mixup_alpha's, cutmix_alpha's, random_erase's texts */
    char ema[3][32];          /* model_ema.steps', .decay's, .updates' texts */
    char norm_weight_decay[32], bias_weight_decay[32]; /* optimizer.norm_weight_decay's, .bias_weight_decay's */
    char best[3][16]; /* best.epoch's, best.test_correct's, best.test_count's texts */
    char early_stop[16]; /* early_stop's text */
    char ra_reps[16];    /* data.ra_reps' text */
    char train_total[16];  /* data.train_total's text */
    char val_size[24];     /* data.val_image_size's text, "HxW" */
    char *classes;         /* data.classes' JSON text, or NULL */
    char *conv_algorithms; /* cuda.conv_algorithms' JSON text, or NULL */
    char *model_text;      /* model_text: the model file's text, or NULL */
} dp_checkpoint_meta_t;

/* Every key's text for `info` and the model's fingerprint; optimizer_steps
 * and optimizer_states (comma-separated state names) are the optimizer's
 * saved. dp_checkpoint_meta_free releases it (also after a failure). */
dp_status_t dp_checkpoint_meta_fill(dp_checkpoint_meta_t *m, const dp_model_t *model,
                                    const dp_checkpoint_info_t *info, uint64_t optimizer_steps,
                                    const char *optimizer_states);
void dp_checkpoint_meta_free(dp_checkpoint_meta_t *m);
/* c->info, c->fingerprint and c->states from c->st's metadata: every key
 * present (but the optional ones) and well formed, the format version
 * known. */
dp_status_t dp_checkpoint_parse_meta(dp_checkpoint_t *c);
/* Frees what parsing put in info->class_names. */
void dp_checkpoint_free_class_names(dp_checkpoint_info_t *info);
/* Metadata `key` of the file at `path` (its value `text`) parsed as a JSON
 * array of 1 or more `items` into *out (dp_json_free), source = "PATH:
 * metadata 'KEY'" (for the caller's messages); DP_ERR_FORMAT naming them
 * otherwise. */
dp_status_t dp_checkpoint_meta_array(const char *path, const char *key, const char *text, const char *items,
                                     char *source, size_t source_size, dp_json_t **out);
/* checkpoint_conv_algos.c: whether list[0..count) can be saved as
 * cuda.conv_algorithms (DP_ERR_ARG naming the first that cannot); its JSON
 * text (allocated); info's choices from that text (DP_ERR_FORMAT naming
 * the file, the key and the entry), freed by dp_checkpoint_free_conv_algos. */
dp_status_t dp_checkpoint_check_conv_algos(const dp_conv_algo_t *list, int count);
dp_status_t dp_checkpoint_conv_algos_json(const dp_conv_algo_t *list, int count, char **out);
dp_status_t dp_checkpoint_parse_conv_algos(dp_checkpoint_info_t *info, const char *path, const char *text);
void dp_checkpoint_free_conv_algos(dp_checkpoint_info_t *info);
/* The current error message, prefixed with `path: what: `. */
dp_status_t dp_checkpoint_fail_in(dp_status_t status, const char *path, const char *what);

#endif
