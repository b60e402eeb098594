/* status.c - the per-thread error message and checked allocation. */
#include "dptrain/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_message[1024];
static _Thread_local dp_status_t error_status = DP_OK;

dp_status_t dp_fail(dp_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    error_status = status;
    return status;
}

const char *dp_error_message(void) { return error_message; }

dp_status_t dp_error_status(void) { return error_status; }

void dp_error_clear(void) {
    error_message[0] = '\0';
    error_status = DP_OK;
}

const char *dp_status_name(dp_status_t status) {
    switch (status) {
    case DP_OK: return "ok";
    case DP_ERR_ARG: return "bad argument";
    case DP_ERR_IO: return "I/O error";
    case DP_ERR_FORMAT: return "bad format";
    case DP_ERR_NOMEM: return "out of memory";
    case DP_ERR_SHAPE: return "shape mismatch";
    case DP_ERR_DEVICE: return "device failure";
    case DP_ERR_COMM: return "communication failure";
    case DP_ERR_PREEMPTED: return "preempted";
    case DP_ERR_DIVERGED: return "diverged";
    }
    return "unknown status";
}

void *dp_alloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *dp_alloc_zeroed(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}

void *dp_alloc_aligned(size_t bytes, const char *what) {
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
        return NULL;
    }
    return p;
}

void dp_assert_failed(const char *cond, const char *file, int line) {
    fprintf(stderr, "dptrain: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}
