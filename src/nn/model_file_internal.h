/* model_file_internal.h - what the model-file reader's two passes share:
 * the limits, the blocks of key = value entries that the syntax pass
 * (model_file_syntax.c) cuts the text into and the builder pass
 * (model_file.c) turns into layers, the block types, and the one-line
 * messages "FILE:LINE: problem". Library internal.
 */
#ifndef DPTRAIN_MODEL_FILE_INTERNAL_H
#define DPTRAIN_MODEL_FILE_INTERNAL_H

#include <stddef.h>

#include "dptrain/model_file.h"

#define MAX_ENTRIES 24       /* keys of one block: at most the keys its type allows */
#define MAX_BLOCKS 10000     /* layers in one file */
#define MAX_PARAM_NAME 48    /* nn.c keeps 63 characters: room for ".running_mean" */
#define MAX_LABEL 63
#define MAX_CHANNELS 65536   /* channels, filters, groups, input sizes */
#define MAX_WINDOW 1024      /* kernel size, stride, padding, dilation */
#define MAX_FEATURES (1 << 24) /* linear outputs */
#define MAX_DIM 65536        /* any dim of any layer's output */
#define MAX_VALUES (1 << 28) /* values in one example's output of any layer */

/* nn.c: keeps a copy of the model file's text `model` was built from
 * (dp_model_source). */
dp_status_t dp_model_set_source(dp_model_t *model, const char *text, size_t len);


typedef struct {
    const char *key, *value; /* into the parser's copy of the text */
    int line;
} entry_t;

typedef struct {
    int type; /* index into dp_model_file_block_types */
    int line;
    entry_t entries[MAX_ENTRIES];
    int num_entries;
    int output; /* the model output this block produces (0: the input) */
} block_t;

typedef struct {
    const char *file;
    char *text; /* NUL-terminated copy, cut into lines, keys and values */
    block_t *blocks;
    int num_blocks, capacity;
    int last_line;
    dp_model_t *model;
} parser_t;

/* A block type: its name between the brackets, the keys it takes and the
 * keys it needs (space separated). dp_model_file_block_types[0] is [net]. */
typedef struct {
    const char *name;
    const char *keys;
    const char *required;
} dp_model_file_block_type_t;

#define DP_MODEL_FILE_NUM_BLOCK_TYPES 25
extern const dp_model_file_block_type_t dp_model_file_block_types[DP_MODEL_FILE_NUM_BLOCK_TYPES];

/* User text as a message shows it: at most 40 characters, printable. */
typedef struct {
    char text[48];
} dp_model_file_shown_t;

dp_model_file_shown_t dp_model_file_show(const char *s);
/* DP_ERR_FORMAT with "FILE:LINE: problem". */
dp_status_t dp_model_file_fail_at(const parser_t *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether `word` is one of the space-separated words of `list`. */
int dp_model_file_in_word_list(const char *list, const char *word);
/* The block's entry for `key`, or NULL. */
const entry_t *dp_model_file_find_entry(const block_t *b, const char *key);
/* Pass 1: p->text (len bytes, NUL-terminated) cut into lines, each checked,
 * and the lines grouped into p->blocks. */
dp_status_t dp_model_file_split_blocks(parser_t *p, size_t len);

#endif
