/* tensor.c - tensor shape helpers and the step arena (host memory, or a
 * backend's memory through its table). */
#include "dptrain/tensor.h"

#include "dptrain/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t dp_tensor_numel(const dp_tensor_t *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

dp_tensor_t *dp_tensor_set_shape(dp_tensor_t *t, int ndim, const int *shape) {
    DP_ASSERT(ndim >= 0 && ndim <= DP_MAX_DIMS);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return t;
}

const char *dp_tensor_shape_str(const dp_tensor_t *t, char *buf, size_t size) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %d" : "%d", t->shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

static float *defer_grad(dp_arena_t *arena, dp_tensor_t *t, size_t count);

float *dp_grad_alloc(dp_arena_t *arena, dp_tensor_t *t, size_t count) {
    t->grad = dp_arena_defers_grads(arena) ? defer_grad(arena, t, count) : dp_arena_floats(arena, count);
    t->grad_unset = 1;
    return t->grad;
}

void dp_grad_prepare(dp_tensor_t *t) {
    if (!t->grad_unset) return;
    memset(t->grad, 0, sizeof(float) * dp_tensor_numel(t));
    t->grad_unset = 0;
}

int dp_grad_claim(dp_tensor_t *t) {
    int unset = t->grad_unset;
    t->grad_unset = 0;
    return unset;
}

/* --- Arena --------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t size, used;
    unsigned char *base; /* 64-byte aligned */
    int serial;          /* which block since the arena was made: records in one block only are adjacent */
} arena_block_t;

/* A step that outgrows its block (the first step, or a bigger one): a
 * request of OWN_BLOCK bytes or more gets a block of exactly its size,
 * behind the head; the smaller ones come from the head, which grows by a
 * quarter of what the step holds so far, at most SMALL_BLOCK_MAX. So the
 * chain holds beyond what the step uses only the head's unused end and the
 * ends smaller requests left (each under OWN_BLOCK): ResNet-50's first step
 * on the emulator held 1.007x the step at batch 8 (1.29x at batch 2 when
 * every block was a quarter of the step so far). The first step's chain is
 * the most a device holds at once. */
#define OWN_BLOCK ((size_t)1 << 20)
#define SMALL_BLOCK_MAX ((size_t)4 << 20)

struct dp_arena {
    const dp_backend_t *backend; /* whose memory the blocks are; NULL: host */
    arena_block_t *head; /* the block requests come from; the chain's other blocks follow */
    size_t used_total;   /* bytes handed out since reset */
    int blocks_made;
    size_t peak;
    dp_arena_t *host;    /* a device arena's host companion (dp_arena_host_alloc); NULL until used */
    /* deferred gradient buffers (tensor.h): requests since the reset */
    int defer_grads;
    dp_grad_request_t *requests; /* (requests_capacity) */
    int num_requests, requests_capacity;
    size_t requested_bytes; /* the placeholder range handed out */
    /* forward allocations by node (tensor.h): since the reset */
    int record_forward, forward_node;
    dp_arena_record_t *records; /* (records_capacity) */
    int num_records, records_capacity;
    /* a range that grows in place (backend.h reserve): the one block, of range_bytes' address space, its size
     * the bytes committed; it never chains. NULL: blocks from alloc. */
    unsigned char *range;
    size_t range_bytes;
};

static arena_block_t *block_new(const dp_backend_t *backend, size_t size) {
    arena_block_t *b = dp_alloc(sizeof *b, "arena block");
    if (!b) return NULL;
    b->base = backend ? backend->alloc(backend->ctx, size, "arena memory") : dp_alloc_aligned(size, "arena memory");
    if (!b->base) {
        free(b);
        return NULL;
    }
    b->size = size;
    b->used = 0;
    b->next = NULL;
    return b;
}

dp_arena_t *dp_arena_new(size_t initial_bytes) { return dp_arena_new_on(NULL, initial_bytes); }

/* The arena as one range that grows in place, its first initial_bytes
 * committed; 0 (nothing changed) when the backend has none to give. */
static int range_new(dp_arena_t *a, size_t initial_bytes) {
    const dp_backend_t *be = a->backend;
    if (!be || !be->reserve || !be->commit || !be->release) return 0;
    size_t bytes = 0;
    unsigned char *range = be->reserve(be->ctx, &bytes);
    if (!range) return 0;
    arena_block_t *b = dp_alloc_zeroed(1, sizeof *b, "arena block");
    size_t committed = b && bytes >= initial_bytes ? be->commit(be->ctx, range, 0, initial_bytes, "arena memory") : 0;
    if (!committed) {
        be->release(be->ctx, range, bytes);
        free(b);
        return 0;
    }
    b->base = range;
    b->size = committed;
    b->serial = a->blocks_made++;
    a->head = b;
    a->range = range;
    a->range_bytes = bytes;
    return 1;
}

dp_arena_t *dp_arena_new_on(const dp_backend_t *backend, size_t initial_bytes) {
    dp_arena_t *a = dp_alloc_zeroed(1, sizeof *a, "arena");
    if (!a) return NULL;
    a->backend = backend;
    a->forward_node = -1;
    if (range_new(a, initial_bytes < 4096 ? 4096 : initial_bytes)) return a;
    a->head = block_new(backend, initial_bytes < 4096 ? 4096 : initial_bytes);
    if (!a->head) {
        free(a);
        return NULL;
    }
    a->head->serial = a->blocks_made++;
    return a;
}

static void free_blocks(const dp_backend_t *backend, arena_block_t *b) {
    while (b) {
        arena_block_t *next = b->next;
        if (backend) backend->free(backend->ctx, b->base); /* never the range: it never chains */
        else free(b->base);
        free(b);
        b = next;
    }
}

void dp_arena_free(dp_arena_t *arena) {
    if (!arena) return;
    free(arena->requests);
    free(arena->records);
    if (arena->range) {
        arena->backend->release(arena->backend->ctx, arena->range, arena->range_bytes);
        free(arena->head);
    } else {
        free_blocks(arena->backend, arena->head);
    }
    dp_arena_free(arena->host);
    free(arena);
}

/* The chain after a step that outgrew one block: one block of the most any
 * step used (arena->peak), made after the chain is freed (nothing in it is
 * live after a reset). Folding into a block of the chain's total size, made
 * beside the chain, held twice the chain at once, and a chain grown by
 * doubling holds up to twice what the step used: ResNet-50 at batch 64 used
 * 13.4 GiB of a 24.4 GiB chain, and the reset held 48.7 GiB. When the block
 * cannot be had, the head is left empty (no memory), and the next step
 * grows a chain again, failing where memory runs out as a step would. */
static void merge_blocks(dp_arena_t *arena) {
    arena_block_t *keep = arena->head; /* its bookkeeping is reused */
    keep->serial = arena->blocks_made++;
    free_blocks(arena->backend, keep->next);
    keep->next = NULL;
    if (arena->backend) arena->backend->free(arena->backend->ctx, keep->base);
    else free(keep->base);
    size_t size = arena->peak < 4096 ? 4096 : arena->peak;
    keep->base = arena->backend ? arena->backend->alloc(arena->backend->ctx, size, "arena memory")
                                : dp_alloc_aligned(size, "arena memory");
    keep->size = keep->base ? size : 0;
}

void dp_arena_reset(dp_arena_t *arena) {
    if (arena->head->next) merge_blocks(arena);
    arena->head->used = 0;
    arena->used_total = 0;
    arena->num_records = 0;
    dp_arena_deferred_clear(arena);
    if (arena->host) dp_arena_reset(arena->host);
}

void *dp_arena_host_alloc(dp_arena_t *arena, size_t bytes) {
    if (!arena->backend) return dp_arena_alloc(arena, bytes);
    if (!arena->host && !(arena->host = dp_arena_new(4096))) return NULL;
    return dp_arena_alloc(arena->host, bytes);
}

/* A forward allocation's record (tensor.h). Without memory for it the
 * allocation goes unrecorded: the plan leaves it alone. */
static void record(dp_arena_t *arena, unsigned char *p, size_t bytes, int block) {
    if (arena->num_records == arena->records_capacity) {
        int capacity = arena->records_capacity ? 2 * arena->records_capacity : 1024;
        dp_arena_record_t *r = realloc(arena->records, sizeof *r * (size_t)capacity);
        if (!r) return;
        arena->records = r;
        arena->records_capacity = capacity;
    }
    arena->records[arena->num_records++] = (dp_arena_record_t){.p = p, .bytes = bytes, .node = arena->forward_node,
                                                                    .block = block};
}

void *dp_arena_alloc(dp_arena_t *arena, size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    arena_block_t *b = arena->head;
    if (arena->range && b->size - b->used < rounded) { /* the range grows */
        if (rounded > arena->range_bytes - b->used) {
            dp_fail(DP_ERR_NOMEM, "out of memory: a step needs more than the %zu bytes of address space its arena "
                    "has", arena->range_bytes);
            return NULL;
        }
        size_t committed = arena->backend->commit(arena->backend->ctx, b->base, b->size, b->used + rounded,
                                                  "arena memory");
        if (!committed) return NULL;
        b->size = committed;
    } else if (b->base && b->size - b->used < rounded && rounded >= OWN_BLOCK) {
        /* a block of its own behind the head, which keeps its room for the smaller requests */
        arena_block_t *own = block_new(arena->backend, rounded);
        if (!own) return NULL;
        own->serial = arena->blocks_made++;
        own->next = b->next;
        b->next = own;
        b = own;
    } else if (!b->base || b->size - b->used < rounded) {
        size_t size = b->base ? arena->used_total / 4 : arena->peak; /* no base: an empty head (merge_blocks) */
        if (b->base && size > SMALL_BLOCK_MAX) size = SMALL_BLOCK_MAX;
        if (size < rounded) size = rounded;
        if (size < 4096) size = 4096;
        arena_block_t *nb = block_new(arena->backend, size);
        if (!nb) return NULL;
        nb->serial = arena->blocks_made++;
        nb->next = b;
        arena->head = nb;
        b = nb;
    }
    void *p = b->base + b->used;
    b->used += rounded;
    arena->used_total += rounded;
    if (arena->used_total > arena->peak) arena->peak = arena->used_total;
    if (arena->forward_node >= 0 && arena->record_forward) record(arena, p, rounded, b->serial);
    return p;
}

float *dp_arena_floats(dp_arena_t *arena, size_t count) {
    return dp_arena_alloc(arena, count * sizeof(float));
}

float *dp_arena_zeros(dp_arena_t *arena, size_t count) {
    float *p = dp_arena_floats(arena, count);
    if (p && arena->backend) arena->backend->zero(arena->backend->ctx, p, count * sizeof(float));
    else if (p) memset(p, 0, count * sizeof(float));
    return p;
}

/* --- Deferred gradient buffers ---------------------------------------------
 * Placeholders are addresses from PLACEHOLDER_BASE up: above 2^52, beyond
 * any user address of x86-64 (non-canonical: a load faults) and of arm64's
 * 48- and 52-bit address spaces, and below its top byte (which arm64 may
 * ignore). A device given one reports an illegal address. */
#define PLACEHOLDER_BASE ((uintptr_t)0x00F0000000000000ull)
#define PLACEHOLDER_LIMIT ((uintptr_t)0x00FF000000000000ull)

void dp_arena_defer_grads(dp_arena_t *arena, int on) {
    arena->defer_grads = on && sizeof(uintptr_t) >= 8; /* a 32-bit address space has no room for them */
}

int dp_arena_defers_grads(const dp_arena_t *arena) { return arena->defer_grads; }

static float *defer_grad(dp_arena_t *arena, dp_tensor_t *t, size_t count) {
    size_t bytes = (count * sizeof(float) + 63) & ~(size_t)63;
    if (!bytes) bytes = 64; /* every placeholder its own */
    if (arena->requested_bytes + bytes > PLACEHOLDER_LIMIT - PLACEHOLDER_BASE) {
        dp_fail(DP_ERR_NOMEM, "a step asked for more than %zu bytes of activation gradients",
                (size_t)(PLACEHOLDER_LIMIT - PLACEHOLDER_BASE));
        return NULL;
    }
    if (arena->num_requests == arena->requests_capacity) {
        int capacity = arena->requests_capacity ? 2 * arena->requests_capacity : 256;
        dp_grad_request_t *r = realloc(arena->requests, sizeof *r * (size_t)capacity);
        if (!r) {
            dp_fail(DP_ERR_NOMEM, "out of memory recording %d gradient buffers", capacity);
            return NULL;
        }
        arena->requests = r;
        arena->requests_capacity = capacity;
    }
    dp_grad_request_t *r = &arena->requests[arena->num_requests++];
    r->t = t;
    r->at = arena->requested_bytes;
    r->bytes = bytes;
    r->node = -1;
    arena->requested_bytes += bytes;
    return (float *)(PLACEHOLDER_BASE + r->at);
}

dp_grad_request_t *dp_arena_deferred(dp_arena_t *arena, int *count) {
    *count = arena->num_requests;
    return arena->requests;
}

void dp_arena_deferred_tag(dp_arena_t *arena, int from, int node) {
    for (int i = from < 0 ? 0 : from; i < arena->num_requests; i++) arena->requests[i].node = node;
}

void dp_arena_deferred_clear(dp_arena_t *arena) {
    arena->num_requests = 0;
    arena->requested_bytes = 0;
}

dp_grad_request_t *dp_arena_deferred_find(dp_arena_t *arena, const float *p, size_t *offset) {
    const uintptr_t a = (uintptr_t)p;
    if (a < PLACEHOLDER_BASE || a >= PLACEHOLDER_BASE + arena->requested_bytes) return NULL;
    const size_t at = a - PLACEHOLDER_BASE;
    int lo = 0, hi = arena->num_requests - 1; /* the last request starting at or before `at` */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (arena->requests[mid].at <= at) lo = mid;
        else hi = mid - 1;
    }
    dp_grad_request_t *r = &arena->requests[lo];
    *offset = at - r->at;
    return r;
}

/* --- Forward allocations by node (tensor.h) ------------------------------- */

size_t dp_arena_peak(const dp_arena_t *arena) { return arena->peak; }

void dp_arena_record_forward(dp_arena_t *arena, int on) { arena->record_forward = on; }

void dp_arena_forward_node(dp_arena_t *arena, int node) { arena->forward_node = node < 0 ? -1 : node; }

const dp_arena_record_t *dp_arena_forward_records(const dp_arena_t *arena, int *count) {
    *count = arena->num_records;
    return arena->records;
}
