/* model_file_syntax.c - pass 1 of the model-file reader: the grammar's
 * block types and their keys, and the text cut into lines (every byte and
 * line length checked) whose `key = value` entries are grouped under their
 * `[type]` header, rejecting unknown types, unknown and duplicate keys as
 * it goes; and the one-line messages both passes give. The grammar is
 * documented in docs/model-format.md.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file_internal.h"

/* Every block type: its keys (all but [net] take `label`). */
#define CONV_KEYS                                                                                        \
    "name filters size size_h size_w stride stride_h stride_w pad pad_h pad_w dilation dilation_h "     \
    "dilation_w groups bias activation init init_scale label"
#define POOL_KEYS "size size_h size_w stride stride_h stride_w pad pad_h pad_w label"

const dp_model_file_block_type_t dp_model_file_block_types[] = {
    {"net", "channels height width init init_scale name", "channels height width"},
    {"conv", CONV_KEYS " weight_shape", "name filters"},
    {"conv_transpose", CONV_KEYS " output_padding output_padding_h output_padding_w", "name filters"},
    {"maxpool", POOL_KEYS " ceil_mode", ""},
    {"avgpool", POOL_KEYS " count_include_pad", ""},
    {"global_avgpool", "label", ""},
    {"batchnorm", "name eps momentum label", "name"},
    {"dropout", "p label", ""},
    {"relu", "label", ""},
    {"relu6", "label", ""},
    {"sigmoid", "label", ""},
    {"tanh", "label", ""},
    {"flatten", "label", ""},
    {"linear", "name out bias activation init init_scale label", "name out"},
    {"route", "from label", "from"},
    {"residual", "from relu label", "from"},
    {"hardswish", "label", ""},
    {"hardsigmoid", "label", ""},
    {"scale_channels", "from label", "from"},
    {"gelu", "label", ""},
    {"layernorm", "name eps label", "name"},
    {"layer_scale", "name init label", "name"},
    {"silu", "label", ""},
    {"drop_path", "p label", "p"},
    {"concat", "from label", "from"},
};
_Static_assert(sizeof dp_model_file_block_types / sizeof dp_model_file_block_types[0] == DP_MODEL_FILE_NUM_BLOCK_TYPES,
               "DP_MODEL_FILE_NUM_BLOCK_TYPES counts the block types");


dp_model_file_shown_t dp_model_file_show(const char *s) {
    dp_model_file_shown_t out;
    size_t n = 0;
    for (; s[n] && n < 40; n++) {
        unsigned char c = (unsigned char)s[n];
        out.text[n] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (s[n]) {
        memcpy(out.text + n, "...", 3);
        n += 3;
    }
    out.text[n] = '\0';
    return out;
}

dp_status_t dp_model_file_fail_at(const parser_t *p, int line, const char *fmt, ...) {
    char problem[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    return dp_fail(DP_ERR_FORMAT, "%s:%d: %s", p->file, line, problem);
}


int dp_model_file_in_word_list(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *s = list; *s;) {
        const char *end = strchr(s, ' ');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == n && strncmp(s, word, n) == 0) return 1;
        if (!end) break;
        s = end + 1;
    }
    return 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static char *trim(char *s) {
    while (is_blank(*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && is_blank(s[n - 1])) s[--n] = '\0';
    return s;
}

static dp_status_t start_block(parser_t *p, char *header, int line) {
    size_t n = strlen(header);
    if (header[n - 1] != ']')
        return dp_model_file_fail_at(p, line, "expected a block header like [conv], found '%s'",
                                     dp_model_file_show(header).text);
    header[n - 1] = '\0';
    char *name = trim(header + 1);
    int type = -1;
    for (int t = 0; t < DP_MODEL_FILE_NUM_BLOCK_TYPES; t++)
        if (strcmp(dp_model_file_block_types[t].name, name) == 0) type = t;
    if (type < 0)
        return dp_model_file_fail_at(p, line,
                       "unknown layer type [%s] (expected net, conv, conv_transpose, maxpool, avgpool, "
                       "global_avgpool, batchnorm, dropout, relu, relu6, sigmoid, tanh, flatten, linear, route, "
                       "residual, hardswish, hardsigmoid, scale_channels, gelu, layernorm, layer_scale, silu, "
                       "drop_path or concat)",
                       dp_model_file_show(name).text);
    if (p->num_blocks == 0 && type != 0)
        return dp_model_file_fail_at(p, line, "the first block must be [net], found [%s]", name);
    if (p->num_blocks > 0 && type == 0)
        return dp_model_file_fail_at(p, line, "a second [net] block (the one [net] block is on line %d)",
                                     p->blocks[0].line);
    if (p->num_blocks > MAX_BLOCKS) return dp_model_file_fail_at(p, line, "more than %d layers", MAX_BLOCKS);
    if (p->num_blocks == p->capacity) {
        int capacity = p->capacity ? 2 * p->capacity : 64;
        block_t *blocks = realloc(p->blocks, sizeof *blocks * (size_t)capacity);
        if (!blocks) return dp_fail(DP_ERR_NOMEM, "%s:%d: out of memory reading the model file", p->file, line);
        p->blocks = blocks;
        p->capacity = capacity;
    }
    block_t *b = &p->blocks[p->num_blocks++];
    memset(b, 0, sizeof *b);
    b->type = type;
    b->line = line;
    return DP_OK;
}

const entry_t *dp_model_file_find_entry(const block_t *b, const char *key) {
    for (int i = 0; i < b->num_entries; i++)
        if (strcmp(b->entries[i].key, key) == 0) return &b->entries[i];
    return NULL;
}

static dp_status_t add_entry(parser_t *p, char *content, int line) {
    if (p->num_blocks == 0)
        return dp_model_file_fail_at(p, line, "'%s' is outside a block (a model file starts with [net])",
                                     dp_model_file_show(content).text);
    block_t *b = &p->blocks[p->num_blocks - 1];
    const dp_model_file_block_type_t *type = &dp_model_file_block_types[b->type];
    char *eq = strchr(content, '=');
    if (!eq)
        return dp_model_file_fail_at(p, line, "expected key = value or [type], found '%s'",
                                     dp_model_file_show(content).text);
    *eq = '\0';
    char *key = trim(content), *value = trim(eq + 1);
    if (!*key) return dp_model_file_fail_at(p, line, "'= %s' has no key", dp_model_file_show(value).text);
    if (!dp_model_file_in_word_list(type->keys, key))
        return dp_model_file_fail_at(p, line, "unknown key '%s' for [%s] (expected one of: %s)",
                                     dp_model_file_show(key).text, type->name, type->keys);
    if (!*value) return dp_model_file_fail_at(p, line, "%s has no value", key);
    const entry_t *first = dp_model_file_find_entry(b, key);
    if (first) return dp_model_file_fail_at(p, line, "duplicate key '%s' (first given on line %d)", key, first->line);
    DP_ASSERT(b->num_entries < MAX_ENTRIES);
    b->entries[b->num_entries++] = (entry_t){key, value, line};
    return DP_OK;
}

static dp_status_t split_line(parser_t *p, char *line_text, int line) {
    char *comment = strchr(line_text, '#');
    if (comment) *comment = '\0';
    for (const char *s = line_text; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return dp_model_file_fail_at(p, line,
                                         "non-ASCII byte 0x%02x at column %d (only comments may hold other text)",
                                         (unsigned char)*s, (int)(s - line_text) + 1);
    char *content = trim(line_text);
    if (!*content) return DP_OK;
    if (*content == '[') return start_block(p, content, line);
    return add_entry(p, content, line);
}

dp_status_t dp_model_file_split_blocks(parser_t *p, size_t len) {
    char *text = p->text;
    size_t pos = 0;
    int line = 0;
    while (pos < len) {
        line++;
        char *start = text + pos;
        char *newline = memchr(start, '\n', len - pos);
        size_t n = newline ? (size_t)(newline - start) : len - pos;
        pos += n + 1;
        if (n > 0 && start[n - 1] == '\r') n--; /* CRLF line ends */
        if (n > DP_MODEL_FILE_MAX_LINE)
            return dp_model_file_fail_at(p, line, "line is longer than %d characters", DP_MODEL_FILE_MAX_LINE);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)start[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return dp_model_file_fail_at(p, line, "non-text byte 0x%02x at column %zu", c, i + 1);
        }
        start[n] = '\0';
        DP_TRY(split_line(p, start, line));
    }
    p->last_line = line > 0 ? line : 1;
    return DP_OK;
}
