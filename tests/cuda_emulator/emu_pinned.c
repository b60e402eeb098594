/* emu_pinned.c - the CUDA emulator's watch on pinned host memory
 * (cudaHostAlloc) handed to cudaMemcpyAsync (cuda_emulator.h). On a GPU a
 * copy from pinned memory reads it when the stream gets there, after the
 * call returned: the host must not write that memory again before it knows
 * the copy is done (a stream or event synchronisation, or a query that
 * says done, of an event recorded after the copy). The emulator copies at
 * once, so such a write changes nothing here; this file keeps each pending
 * copy's bytes' checksum and, when the host hands overlapping pinned
 * memory to a copy again (it wrote it anew) or frees it while an earlier
 * copy from it is not known to be done and its bytes changed, aborts with
 * one line: on a GPU that copy might have read the new bytes.
 *
 * DESIGN. A table of pinned allocations and one of pending copies (source
 * range, checksum, stream, the stream's count of queued calls at the copy),
 * under a mutex. emu_runtime.c reports what the host learnt: that a
 * stream's calls up to a count are done (emu_pinned_done). A stream
 * destroyed with copies pending forgets them (nothing can report them
 * done any more; lenient). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_emulator.h"

#define MAX_PENDING 4096
#define MAX_PINNED 256

typedef struct {
    const unsigned char *src;
    size_t bytes;
    uint64_t sum;
    const void *stream;
    long seq;
} pending_t;

typedef struct {
    const unsigned char *base;
    size_t bytes;
} pinned_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pending_t pending[MAX_PENDING];
static int pending_count;
static pinned_t pinned[MAX_PINNED];
static int pinned_count;

static uint64_t checksum(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int overlaps(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
    return a < b + nb && b < a + na;
}

int emu_pinned_contains(const void *p, size_t bytes) {
    const unsigned char *c = p;
    int inside = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < pinned_count && !inside; i++)
        inside = c >= pinned[i].base && c + bytes <= pinned[i].base + pinned[i].bytes;
    pthread_mutex_unlock(&lock);
    return inside;
}

void emu_pinned_alloc(void *ptr, size_t bytes) {
    pthread_mutex_lock(&lock);
    if (pinned_count < MAX_PINNED) pinned[pinned_count++] = (pinned_t){ptr, bytes}; /* else not watched (lenient) */
    pthread_mutex_unlock(&lock);
}

/* The pending copies overlapping [p, p + n) whose bytes changed: abort. Under the lock. */
static void check_unchanged(const char *call, const unsigned char *p, size_t n) {
    for (int i = 0; i < pending_count; i++) {
        const pending_t *c = &pending[i];
        if (!overlaps(c->src, c->bytes, p, n) || checksum(c->src, c->bytes) == c->sum) continue;
        fprintf(stderr, "cuda emulator: %s: pinned host memory [%p, +%zu bytes) was written while an earlier "
                "cudaMemcpyAsync (host to device) from it was not known to be done (no synchronisation or event "
                "after it said so): on a GPU that copy may read the new bytes\n", call, (const void *)c->src,
                c->bytes);
        fflush(stderr);
        abort();
    }
}

void emu_pinned_free(const void *ptr) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < pinned_count; i++)
        if (pinned[i].base == ptr) {
            check_unchanged("cudaFreeHost", pinned[i].base, pinned[i].bytes);
            for (int j = 0; j < pending_count;) /* its copies: freeing waits for them on a GPU */
                if (overlaps(pending[j].src, pending[j].bytes, pinned[i].base, pinned[i].bytes))
                    pending[j] = pending[--pending_count];
                else
                    j++;
            pinned[i] = pinned[--pinned_count];
            break;
        }
    pthread_mutex_unlock(&lock);
}

void emu_pinned_copy(const void *src, size_t bytes, const void *stream, long seq) {
    const unsigned char *p = src;
    pthread_mutex_lock(&lock);
    int is_pinned = 0;
    for (int i = 0; i < pinned_count && !is_pinned; i++)
        is_pinned = p >= pinned[i].base && p + bytes <= pinned[i].base + pinned[i].bytes;
    if (is_pinned) {
        check_unchanged("cudaMemcpyAsync (host to device)", p, bytes);
        if (pending_count == MAX_PENDING) pending[0] = pending[--pending_count]; /* full: forget one (lenient) */
        pending[pending_count++] = (pending_t){p, bytes, checksum(p, bytes), stream, seq};
    }
    pthread_mutex_unlock(&lock);
}

void emu_pinned_done(const void *stream, long seq) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < pending_count;)
        if (pending[i].stream == stream && pending[i].seq <= seq)
            pending[i] = pending[--pending_count];
        else
            i++;
    pthread_mutex_unlock(&lock);
}
