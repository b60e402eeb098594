/* model_head.c - a model file with another number of classes
 * (model_file.h dp_model_file_set_outputs): the `out` of its last [linear]
 * block, the classifier's head, set to N; timm's create_model(...,
 * num_classes=N), torchvision's `model.fc = nn.Linear(..., N)`.
 *
 * The text is cut into blocks by the reader's own syntax pass (so comments,
 * spacing and a head written in any order of keys are found as the reader
 * finds them), then copied line by line with the line of that `out` key
 * replaced by "out = N"; every other byte is the file's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file_internal.h"

dp_status_t dp_model_file_set_outputs(const char *text, size_t len, const char *file_name, int outputs,
                                      char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    parser_t p = {.file = file_name ? file_name : "<model>"};
    if (outputs < 1 || outputs > MAX_FEATURES)
        return dp_fail(DP_ERR_ARG, "%s: %d classes: a head has 1 to %d outputs", p.file, outputs, MAX_FEATURES);
    if (len == 0 || len > DP_MODEL_FILE_MAX_BYTES)
        return dp_model_file_fail_at(&p, 1, "not a model file of 1 to %d bytes", DP_MODEL_FILE_MAX_BYTES);
    if (!(p.text = dp_alloc(len + 1, "model file text"))) return DP_ERR_NOMEM;
    memcpy(p.text, text, len);
    p.text[len] = '\0';
    dp_status_t status = dp_model_file_split_blocks(&p, len);
    int line = 0; /* of the last [linear] block's `out` */
    for (int b = p.num_blocks - 1; status == DP_OK && b >= 0 && !line; b--) {
        if (strcmp(dp_model_file_block_types[p.blocks[b].type].name, "linear") != 0) continue;
        const entry_t *e = dp_model_file_find_entry(&p.blocks[b], "out");
        line = e ? e->line : -1;
    }
    free(p.blocks);
    free(p.text);
    if (status != DP_OK) return status;
    if (line <= 0) return dp_fail(DP_ERR_ARG, "%s: no [linear] layer whose outputs could be the classes", p.file);
    char replacement[32];
    const int rlen = snprintf(replacement, sizeof replacement, "out = %d", outputs);
    char *copy = dp_alloc(len + sizeof replacement + 1, "model file text");
    if (!copy) return DP_ERR_NOMEM;
    size_t used = 0;
    int at = 1;
    for (size_t i = 0; i < len; at++) { /* lines end at '\n' (a '\r' before it kept), as the reader counts them */
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        if (end > i && text[end - 1] == '\r') end--;
        if (at == line) {
            memcpy(copy + used, replacement, (size_t)rlen);
            used += (size_t)rlen;
        } else {
            memcpy(copy + used, text + i, end - i);
            used += end - i;
        }
        memcpy(copy + used, text + end, next - end);
        used += next - end;
        i = next;
    }
    copy[used] = '\0';
    *out = copy;
    *out_len = used;
    return DP_OK;
}
