/* checkpoint_internal.h - what checkpoint.c (the tensors) and
 * checkpoint_meta.c (the metadata keys) share: the open checkpoint, the
 * metadata as written, and its parsing. Library internal.
 */
#ifndef DPTRAIN_CHECKPOINT_INTERNAL_H
#define DPTRAIN_CHECKPOINT_INTERNAL_H

#include "dptrain/checkpoint.h"

/* The number of metadata keys a checkpoint is written with. */
#define DP_CHECKPOINT_META_KEYS 39

struct dp_checkpoint {
    dp_safetensors_t *st;
    dp_checkpoint_info_t info;
    uint64_t fingerprint;
    char states[256];
};

/* The metadata of a checkpoint being written: entries point into values
 * (or at constant text), in the order they are written. */
typedef struct {
    dp_st_meta_t entries[DP_CHECKPOINT_META_KEYS];
    char values[DP_CHECKPOINT_META_KEYS][256];
} dp_checkpoint_meta_t;

/* Every key's text for `info` and the model's fingerprint; optimizer_steps
 * and optimizer_states (comma-separated state names) are the optimizer's
 * saved. */
void dp_checkpoint_meta_fill(dp_checkpoint_meta_t *m, const dp_model_t *model, const dp_checkpoint_info_t *info,
                             uint64_t optimizer_steps, const char *optimizer_states);
/* c->info, c->fingerprint and c->states from c->st's metadata: every key
 * present (but the optional ones) and well formed, the format version
 * known. */
dp_status_t dp_checkpoint_parse_meta(dp_checkpoint_t *c);
/* The current error message, prefixed with `path: what: `. */
dp_status_t dp_checkpoint_fail_in(dp_status_t status, const char *path, const char *what);

#endif
