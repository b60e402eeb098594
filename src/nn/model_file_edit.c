/* model_file_edit.c - a model file with another head or input size
 * (model_file.h): dp_model_file_set_outputs gives its last [linear] block,
 * the classifier's head, N outputs (timm's create_model(...,
 * num_classes=N), torchvision's `model.fc = nn.Linear(..., N)`), or in a
 * file without one its last [conv] N filters (SqueezeNet's
 * `classifier[1] = nn.Conv2d(512, N, 1)`; as dp_model_head_layer);
 * dp_model_file_set_input_size gives its [net] another height and width
 * (timm's img_size), for networks whose layers take any size (global
 * average pooling before the head).
 *
 * The text is cut into blocks by the reader's own syntax pass (so comments,
 * spacing and keys in any order are found as the reader finds them), then
 * copied line by line with the lines of the keys set replaced by
 * "key = value"; every other byte is the file's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file_internal.h"

#define MAX_EDITS 2

typedef struct {
    int line;          /* 1-based, as the reader counts */
    char text[48];     /* its new content */
} edit_t;

/* The text cut into blocks (p->text and p->blocks to free). */
static dp_status_t split(parser_t *p, const char *text, size_t len) {
    if (len == 0 || len > DP_MODEL_FILE_MAX_BYTES)
        return dp_model_file_fail_at(p, 1, "not a model file of 1 to %d bytes", DP_MODEL_FILE_MAX_BYTES);
    if (!(p->text = dp_alloc(len + 1, "model file text"))) return DP_ERR_NOMEM;
    memcpy(p->text, text, len);
    p->text[len] = '\0';
    return dp_model_file_split_blocks(p, len);
}

static int is_type(const block_t *b, const char *name) { return strcmp(dp_model_file_block_types[b->type].name, name) == 0; }

/* A copy of text with each edit's line replaced (its line end kept). */
static dp_status_t apply(const char *text, size_t len, const edit_t *edits, int n, char **out, size_t *out_len) {
    char *copy = dp_alloc(len + (size_t)n * sizeof edits[0].text + 1, "model file text");
    if (!copy) return DP_ERR_NOMEM;
    size_t used = 0;
    int at = 1;
    for (size_t i = 0; i < len; at++) { /* lines end at '\n' (a '\r' before it kept), as the reader counts them */
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        if (end > i && text[end - 1] == '\r') end--;
        const edit_t *e = NULL;
        for (int k = 0; k < n; k++)
            if (edits[k].line == at) e = &edits[k];
        const char *from = e ? e->text : text + i;
        const size_t bytes = e ? strlen(e->text) : end - i;
        memcpy(copy + used, from, bytes);
        used += bytes;
        memcpy(copy + used, text + end, next - end);
        used += next - end;
        i = next;
    }
    copy[used] = '\0';
    *out = copy;
    *out_len = used;
    return DP_OK;
}

dp_status_t dp_model_file_set_outputs(const char *text, size_t len, const char *file_name, int outputs,
                                      char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    parser_t p = {.file = file_name ? file_name : "<model>"};
    if (outputs < 1 || outputs > MAX_FEATURES)
        return dp_fail(DP_ERR_ARG, "%s: %d classes: a head has 1 to %d outputs", p.file, outputs, MAX_FEATURES);
    dp_status_t status = split(&p, text, len);
    edit_t edit = {0}, last_conv = {0}; /* the last [linear] block's `out`, the last [conv]'s `filters` */
    for (int b = p.num_blocks - 1; status == DP_OK && b >= 0 && !edit.line; b--) {
        if (is_type(&p.blocks[b], "conv") && !last_conv.line) {
            const entry_t *e = dp_model_file_find_entry(&p.blocks[b], "filters");
            last_conv.line = e ? e->line : -1;
        }
        if (!is_type(&p.blocks[b], "linear")) continue;
        const entry_t *e = dp_model_file_find_entry(&p.blocks[b], "out");
        edit.line = e ? e->line : -1;
    }
    free(p.blocks);
    free(p.text);
    if (status != DP_OK) return status;
    const int conv_head = edit.line == 0 && last_conv.line > 0;
    if (conv_head) edit = last_conv;
    if (edit.line <= 0)
        return dp_fail(DP_ERR_ARG, "%s: no [linear] or [conv] layer whose outputs could be the classes", p.file);
    snprintf(edit.text, sizeof edit.text, conv_head ? "filters = %d" : "out = %d", outputs);
    return apply(text, len, &edit, 1, out, out_len);
}

dp_status_t dp_model_file_set_input_size(const char *text, size_t len, const char *file_name, int height, int width,
                                         char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    parser_t p = {.file = file_name ? file_name : "<model>"};
    if (height < 1 || height > MAX_DIM || width < 1 || width > MAX_DIM)
        return dp_fail(DP_ERR_ARG, "%s: an input of %d x %d: height and width are 1 to %d", p.file, height, width,
                       MAX_DIM);
    dp_status_t status = split(&p, text, len);
    edit_t edits[MAX_EDITS] = {{0}};
    if (status == DP_OK && p.num_blocks > 0 && is_type(&p.blocks[0], "net")) {
        const entry_t *h = dp_model_file_find_entry(&p.blocks[0], "height");
        const entry_t *w = dp_model_file_find_entry(&p.blocks[0], "width");
        edits[0].line = h ? h->line : -1;
        edits[1].line = w ? w->line : -1;
    }
    free(p.blocks);
    free(p.text);
    if (status != DP_OK) return status;
    if (edits[0].line <= 0 || edits[1].line <= 0)
        return dp_fail(DP_ERR_ARG, "%s: its [net] gives no height and width to change", p.file);
    snprintf(edits[0].text, sizeof edits[0].text, "height = %d", height);
    snprintf(edits[1].text, sizeof edits[1].text, "width = %d", width);
    return apply(text, len, edits, MAX_EDITS, out, out_len);
}
