/* json.h - a small strict JSON parser for file headers (safetensors).
 *
 * It accepts RFC 8259 JSON restricted to what file headers use: objects,
 * arrays, strings and integers. true/false/null and numbers with a fraction
 * or an exponent are refused with a message saying so. Strictness beyond the
 * RFC: duplicate keys in an object are an error, strings must be valid UTF-8
 * and may not contain NUL (raw or as \u0000), nesting is at most
 * DP_JSON_MAX_DEPTH deep, at most DP_JSON_MAX_VALUES values in all (each
 * takes sizeof(dp_json_t), 56 bytes, for as little as 2 bytes of text: a
 * 90 MB header of "0," took 2.5 GB before this limit). Only whitespace may
 * follow the top-level value.
 *
 * Errors are one line: "SOURCE, byte N: what was expected, what was found",
 * where SOURCE is the caller's label (e.g. "a.safetensors: JSON header") and
 * N the 0-based offset in the parsed text.
 */
#ifndef DPTRAIN_JSON_H
#define DPTRAIN_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#define DP_JSON_MAX_DEPTH 32
/* 2^20: a checkpoint of N tensors has about 10 N values (ResNet-50 with
 * Adam's state: about 600 tensors, 6,000 values, an estimate). */
#define DP_JSON_MAX_VALUES (1 << 20)

typedef enum { DP_JSON_STRING, DP_JSON_INTEGER, DP_JSON_ARRAY, DP_JSON_OBJECT } dp_json_kind_t;

typedef struct dp_json dp_json_t;
struct dp_json {
    dp_json_kind_t kind;
    size_t offset;     /* byte offset of the value's first character */
    char *string;      /* STRING: NUL-terminated UTF-8 */
    int64_t integer;   /* INTEGER */
    int count;         /* ARRAY, OBJECT: number of items */
    dp_json_t *items;  /* ARRAY, OBJECT: (count) values, in text order */
    char **keys;       /* OBJECT: (count) keys, keys[i] names items[i] */
};

/* Parses text[0..len) (need not be NUL-terminated). *out is freed with
 * dp_json_free. DP_ERR_FORMAT on bad input, DP_ERR_NOMEM. */
dp_status_t dp_json_parse(const char *text, size_t len, const char *source, dp_json_t **out);
void dp_json_free(dp_json_t *value);

/* The value of `key` in an object, or NULL. */
const dp_json_t *dp_json_get(const dp_json_t *object, const char *key);

/* "string", "integer", "array", "object" */
const char *dp_json_kind_name(dp_json_kind_t kind);

/* A string read from a file as a one-line message shows it: its first
 * DP_JSON_SHOWN_MAX bytes, control characters and DEL written as \n, \t,
 * \r or \xNN and a backslash as \\, then "..." when it was cut. A JSON
 * string may hold any of them ("\n" decodes to a newline), which printed
 * raw would break the message's line. Use: dp_json_show(s).text as a
 * printf argument. */
#define DP_JSON_SHOWN_MAX 80
typedef struct {
    char text[4 * DP_JSON_SHOWN_MAX + 4];
} dp_json_shown_t;
dp_json_shown_t dp_json_show(const char *s);

/* Length of the well-formed UTF-8 sequence at s (n >= 1 bytes available),
 * 0 if there is none (RFC 3629: overlong forms, surrogates and code points
 * above U+10FFFF are not): the parser's rule for strings, the writer's. */
int dp_utf8_sequence_length(const unsigned char *s, size_t n);
/* Whether s[0..len) is well-formed UTF-8 throughout: what the parser takes
 * in a string (control characters escaped), and what the writer writes as
 * it is, with no \udcXX, which the parser refuses as a lone surrogate. */
int dp_utf8_valid(const char *s, size_t len);

/* --- Writing (json_write.c) ---------------------------------------------------------
 * s[0..len) as a JSON string, its quotes included, given to put in runs of
 * bytes: '"' and '\\' escaped with a backslash, the other bytes below 0x20
 * as \u00XX, well-formed UTF-8 as it is, and every other byte (a file name
 * in Latin-1, a cut sequence) as the lone surrogate \udcXX, as Python's
 * surrogateescape decodes it: the text stays valid JSON in UTF-8, and
 * os.fsencode of the parsed string gives the bytes back. */
typedef void (*dp_json_put_fn)(void *ctx, const char *bytes, size_t len);
void dp_json_write_string(const char *s, size_t len, dp_json_put_fn put, void *ctx);

#endif
