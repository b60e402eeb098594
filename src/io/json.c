/* json.c - the strict JSON subset parser of json.h: recursive descent over
 * a byte range, building a small tree of dp_json_t values.
 *
 * Every step checks the remaining length before reading, so a truncated or
 * hostile header is an error, never a read past the end. Strings are
 * decoded (escapes, surrogate pairs) into fresh NUL-terminated UTF-8.
 */
#include "dptrain/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(DP_JSON_MAX_VALUES == 1048576, "the message below names the limit");

typedef struct {
    const unsigned char *text;
    size_t len, pos;
    const char *source;
    int depth;
    size_t values; /* parsed so far, at most DP_JSON_MAX_VALUES */
} parser_t;

const char *dp_json_kind_name(dp_json_kind_t kind) {
    switch (kind) {
    case DP_JSON_STRING: return "string";
    case DP_JSON_INTEGER: return "integer";
    case DP_JSON_ARRAY: return "array";
    case DP_JSON_OBJECT: return "object";
    }
    return "?";
}

dp_json_shown_t dp_json_show(const char *s) {
    dp_json_shown_t out;
    size_t used = 0, i = 0;
    for (; s[i] && i < DP_JSON_SHOWN_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\t' || c == '\r' || c == '\\') {
            out.text[used++] = '\\';
            out.text[used++] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : '\\';
        } else if (c < 0x20 || c == 0x7f) {
            used += (size_t)snprintf(out.text + used, sizeof out.text - used, "\\x%02x", c);
        } else {
            out.text[used++] = (char)c;
        }
    }
    if (s[i]) {
        memcpy(out.text + used, "...", 3);
        used += 3;
    }
    out.text[used] = '\0';
    return out;
}

/* What is at the parser's position, for messages: 'x', byte 0x01, the end. */
static const char *describe_here(const parser_t *p, char *buf, size_t size) {
    if (p->pos >= p->len) return "the end of the text";
    unsigned char c = p->text[p->pos];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, size, "'%c'", c);
    else snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

static dp_status_t fail_at(const parser_t *p, size_t pos, const char *what) {
    return dp_fail(DP_ERR_FORMAT, "%s, byte %zu: %s", p->source, pos, what);
}

static dp_status_t fail_expected(const parser_t *p, const char *expected) {
    char buf[32];
    return dp_fail(DP_ERR_FORMAT, "%s, byte %zu: expected %s, found %s", p->source, p->pos, expected,
                   describe_here(p, buf, sizeof buf));
}

int dp_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    for (int n; p < end; p += n)
        if ((n = dp_utf8_sequence_length(p, (size_t)(end - p))) == 0) return 0;
    return 1;
}

static void skip_whitespace(parser_t *p) {
    while (p->pos < p->len) {
        unsigned char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* json.h: RFC 3629 (overlong forms, surrogates and code points above U+10FFFF are not UTF-8). */
int dp_utf8_sequence_length(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0;
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
    return len;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Four hex digits after "\u" at p->pos; advances past them. */
static dp_status_t read_hex4(parser_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (p->pos >= p->len) return fail_expected(p, "4 hex digits after \\u");
        unsigned char c = p->text[p->pos];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0) return fail_expected(p, "4 hex digits after \\u");
        v = (v << 4) | (uint32_t)digit;
        p->pos++;
    }
    *out = v;
    return DP_OK;
}

/* A string at p->pos (which holds '"'); *out is malloc'd. */
static dp_status_t parse_string(parser_t *p, char **out) {
    *out = NULL;
    size_t start = p->pos++;
    /* The decoded string is never longer than the raw text up to the close. */
    size_t end = p->pos;
    while (end < p->len && p->text[end] != '"') end += p->text[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail_at(p, start, "string is not closed before the end of the text");
    char *s = dp_alloc(end - p->pos + 1, "JSON string");
    if (!s) return DP_ERR_NOMEM;
    size_t used = 0;
    dp_status_t status = DP_OK;
    while (status == DP_OK) {
        unsigned char c = p->text[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            status = c == 0 ? fail_at(p, p->pos, "NUL byte in a string")
                            : fail_at(p, p->pos, "control character in a string (must be escaped)");
        } else if (c == '\\') {
            size_t escape_at = p->pos++;
            unsigned char e = p->text[p->pos++];
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e != 0 && simple) {
                s[used++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else if (e == 'u') {
                uint32_t cp = 0, low = 0;
                if ((status = read_hex4(p, &cp)) != DP_OK) break;
                if (cp >= 0xdc00 && cp <= 0xdfff) {
                    status = fail_at(p, escape_at, "\\u escape is a lone low surrogate");
                } else if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (p->pos + 2 > p->len || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u') {
                        status = fail_at(p, escape_at, "\\u escape is a high surrogate without its low half");
                        break;
                    }
                    p->pos += 2;
                    if ((status = read_hex4(p, &low)) != DP_OK) break;
                    if (low < 0xdc00 || low > 0xdfff) {
                        status = fail_at(p, escape_at, "\\u escape is a high surrogate without its low half");
                        break;
                    }
                    used += put_utf8(s + used, 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00));
                } else if (cp == 0) {
                    status = fail_at(p, escape_at, "\\u0000 (NUL) in a string");
                } else {
                    used += put_utf8(s + used, cp);
                }
            } else {
                p->pos = escape_at + 1;
                status = fail_expected(p, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
            }
        } else {
            int n = dp_utf8_sequence_length(p->text + p->pos, p->len - p->pos);
            if (n == 0) {
                status = fail_at(p, p->pos, "invalid UTF-8 in a string");
            } else {
                memcpy(s + used, p->text + p->pos, (size_t)n);
                used += (size_t)n;
                p->pos += (size_t)n;
            }
        }
    }
    if (status != DP_OK) {
        free(s);
        return status;
    }
    s[used] = '\0';
    *out = s;
    return DP_OK;
}

static int is_digit(const parser_t *p) {
    return p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9';
}

static dp_status_t parse_integer(parser_t *p, int64_t *out) {
    size_t start = p->pos;
    int negative = p->text[p->pos] == '-';
    if (negative) p->pos++;
    if (!is_digit(p)) return fail_expected(p, "a digit");
    uint64_t magnitude = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (p->text[p->pos] == '0') {
        p->pos++;
        if (is_digit(p)) return fail_at(p, start, "number with a leading zero");
    } else {
        while (is_digit(p)) {
            uint64_t digit = (uint64_t)(p->text[p->pos++] - '0');
            if (magnitude > (limit - digit) / 10) return fail_at(p, start, "integer does not fit in 64 bits");
            magnitude = magnitude * 10 + digit;
        }
    }
    if (p->pos < p->len && (p->text[p->pos] == '.' || p->text[p->pos] == 'e' || p->text[p->pos] == 'E'))
        return fail_at(p, start, "number with a fraction or an exponent (only integers are allowed here)");
    *out = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    return DP_OK;
}

static void free_contents(dp_json_t *v) {
    free(v->string);
    for (int i = 0; i < v->count; i++) {
        free_contents(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

static dp_status_t parse_value(parser_t *p, dp_json_t *v);

typedef struct {
    const char *key;
    size_t offset;
} key_ref_t;

static int compare_keys(const void *a, const void *b) {
    const key_ref_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}

/* Duplicate keys, found by sorting: O(n log n) even for hostile headers. */
static dp_status_t check_unique_keys(const parser_t *p, const dp_json_t *object) {
    if (object->count < 2) return DP_OK;
    key_ref_t *refs = dp_alloc(sizeof *refs * (size_t)object->count, "JSON key index");
    if (!refs) return DP_ERR_NOMEM;
    for (int i = 0; i < object->count; i++) refs[i] = (key_ref_t){object->keys[i], object->items[i].offset};
    qsort(refs, (size_t)object->count, sizeof *refs, compare_keys);
    dp_status_t status = DP_OK;
    for (int i = 1; i < object->count && status == DP_OK; i++)
        if (strcmp(refs[i].key, refs[i - 1].key) == 0)
            status = dp_fail(DP_ERR_FORMAT, "%s, byte %zu: duplicate key \"%s\"", p->source,
                             refs[i].offset, dp_json_show(refs[i].key).text);
    free(refs);
    return status;
}

/* An array or an object at p->pos (which holds '[' or '{'). */
static dp_status_t parse_container(parser_t *p, dp_json_t *v) {
    int object = p->text[p->pos] == '{';
    char close = object ? '}' : ']';
    v->kind = object ? DP_JSON_OBJECT : DP_JSON_ARRAY;
    if (++p->depth > DP_JSON_MAX_DEPTH) return fail_at(p, p->pos, "nesting deeper than 32 levels");
    p->pos++;
    skip_whitespace(p);
    if (p->pos < p->len && p->text[p->pos] == close) {
        p->pos++;
        p->depth--;
        return DP_OK;
    }
    int capacity = 0;
    for (;;) {
        if (v->count == capacity) {
            int grown = capacity ? 2 * capacity : 4;
            dp_json_t *items = realloc(v->items, sizeof *items * (size_t)grown);
            if (items) v->items = items;
            char **keys = object && items ? realloc(v->keys, sizeof *keys * (size_t)grown) : v->keys;
            if (object && keys) v->keys = keys;
            if (!items || (object && !keys)) return dp_fail(DP_ERR_NOMEM, "%s: out of memory", p->source);
            capacity = grown;
        }
        dp_json_t *item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        if (object) {
            skip_whitespace(p);
            if (p->pos >= p->len || p->text[p->pos] != '"') return fail_expected(p, "a string key");
            DP_TRY(parse_string(p, &v->keys[v->count]));
            skip_whitespace(p);
            if (p->pos >= p->len || p->text[p->pos] != ':') {
                free(v->keys[v->count]);
                return fail_expected(p, "':' after an object key");
            }
            p->pos++;
        }
        v->count++; /* counted before parsing, so its contents are freed on failure */
        DP_TRY(parse_value(p, item));
        skip_whitespace(p);
        if (p->pos < p->len && p->text[p->pos] == close) break;
        if (p->pos >= p->len || p->text[p->pos] != ',')
            return fail_expected(p, object ? "',' or '}'" : "',' or ']'");
        p->pos++;
    }
    p->pos++;
    p->depth--;
    return object ? check_unique_keys(p, v) : DP_OK;
}

static dp_status_t parse_value(parser_t *p, dp_json_t *v) {
    skip_whitespace(p);
    v->offset = p->pos;
    if (p->pos >= p->len) return fail_expected(p, "a value");
    if (++p->values > DP_JSON_MAX_VALUES)
        return fail_at(p, p->pos, "more than 1048576 values (DP_JSON_MAX_VALUES), far more than a file header holds");
    unsigned char c = p->text[p->pos];
    if (c == '{' || c == '[') return parse_container(p, v);
    if (c == '"') {
        v->kind = DP_JSON_STRING;
        return parse_string(p, &v->string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = DP_JSON_INTEGER;
        return parse_integer(p, &v->integer);
    }
    if (c == 't' || c == 'f' || c == 'n')
        return fail_at(p, p->pos, "true, false and null are not allowed here (expected a string, "
                                  "an integer, an array or an object)");
    return fail_expected(p, "a string, an integer, an array or an object");
}

dp_status_t dp_json_parse(const char *text, size_t len, const char *source, dp_json_t **out) {
    *out = NULL;
    parser_t p = {(const unsigned char *)text, len, 0, source, 0, 0};
    dp_json_t *root = dp_alloc_zeroed(1, sizeof *root, "JSON value");
    if (!root) return DP_ERR_NOMEM;
    dp_status_t status = parse_value(&p, root);
    if (status == DP_OK) {
        skip_whitespace(&p);
        if (p.pos < p.len) status = fail_expected(&p, "only whitespace after the value");
    }
    if (status != DP_OK) {
        dp_json_free(root);
        return status;
    }
    *out = root;
    return DP_OK;
}

void dp_json_free(dp_json_t *value) {
    if (!value) return;
    free_contents(value);
    free(value);
}

const dp_json_t *dp_json_get(const dp_json_t *object, const char *key) {
    if (!object || object->kind != DP_JSON_OBJECT) return NULL;
    for (int i = 0; i < object->count; i++)
        if (strcmp(object->keys[i], key) == 0) return &object->items[i];
    return NULL;
}
