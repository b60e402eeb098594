/* json_write.c - JSON strings written (json.h dp_json_write_string): the
 * one escaping rule of every JSON dptrain writes (safetensors headers, the
 * metrics lines, predict --json). Runs of bytes that need no escape go to
 * `put` whole.
 */
#include "dptrain/json.h"

#include <stdio.h>

void dp_json_write_string(const char *s, size_t len, dp_json_put_fn put, void *ctx) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len, *run = p;
    put(ctx, "\"", 1);
    while (p < end) {
        const int n = dp_utf8_sequence_length(p, (size_t)(end - p));
        char escaped[8];
        int escaped_len = 0;
        if (n == 0) escaped_len = snprintf(escaped, sizeof escaped, "\\udc%02x", *p);
        else if (*p == '"' || *p == '\\') escaped_len = snprintf(escaped, sizeof escaped, "\\%c", *p);
        else if (*p < 0x20) escaped_len = snprintf(escaped, sizeof escaped, "\\u%04x", *p);
        if (escaped_len == 0) { /* as it is: one more character of the run */
            p += n;
            continue;
        }
        if (p > run) put(ctx, (const char *)run, (size_t)(p - run));
        put(ctx, escaped, (size_t)escaped_len);
        run = ++p;
    }
    if (p > run) put(ctx, (const char *)run, (size_t)(p - run));
    put(ctx, "\"", 1);
}
