/* tensor.h - float32 tensors (up to 5-D, row-major NCHW / NCDHW) and the
 * step arena that activations are allocated from.
 *
 * A dp_tensor_t is a view: it does not own its data. Parameters and their
 * gradients are views into a replica's two flat buffers; activations and
 * their gradients are views into an arena that is reset once per step, so
 * the training loop does no malloc/free after its first step.
 */
#ifndef DPTRAIN_TENSOR_H
#define DPTRAIN_TENSOR_H

#include <stddef.h>

#include "dptrain/status.h"

#define DP_MAX_DIMS 5

typedef struct dp_tensor {
    int ndim;
    int shape[DP_MAX_DIMS];
    float *data; /* (numel) values */
    float *grad; /* (numel) gradient of the loss, or NULL when none is needed */
    int grad_unset; /* 1 while grad holds nothing yet (see dp_grad_alloc) */
    int layout;     /* how data and grad are stored: 0 = floats, row-major in shape order (NCHW),
                       the only form the CPU backend and the code above the backends ever see;
                       other values are a GPU backend's own marks, which only its ops set and
                       read: the memory order (backend.h set_channels_last) and the number format
                       of data (bf16 activations with --precision bf16; grad stays floats).
                       Zero-initialise every tensor. */
} dp_tensor_t;

typedef struct dp_arena dp_arena_t;
typedef struct dp_backend dp_backend_t; /* backend.h */

/* Number of elements (product of the shape; 1 for ndim == 0). */
size_t dp_tensor_numel(const dp_tensor_t *t);

/* Sets ndim and shape from a list; returns the tensor for chaining. */
dp_tensor_t *dp_tensor_set_shape(dp_tensor_t *t, int ndim, const int *shape);

/* --- Gradient buffers of activations ----------------------------------------
 * An op's output gradient is allocated without zeroing and marked unset; the
 * first op whose backward produces it writes it (dp_grad_claim) instead of
 * adding to zeros, or zeroes it first (dp_grad_prepare) when it can only add.
 * That saves a memset and a read of every activation gradient with a single
 * consumer. A tensor made by the caller has grad_unset = 0: its grad holds
 * values (zeros, or a sum so far) and ops add to it. */

/* t->grad = count floats from the arena, unset. Returns t->grad (NULL when
 * memory runs out). */
float *dp_grad_alloc(dp_arena_t *arena, dp_tensor_t *t, size_t count);

/* Before adding into t->grad: zeroes it if it is still unset. */
void dp_grad_prepare(dp_tensor_t *t);

/* Before writing every element of t->grad: 1 if the caller may overwrite
 * (it was unset; it is set from now on), 0 if the caller must add. */
int dp_grad_claim(dp_tensor_t *t);

/* --- Gradient buffers placed by liveness (grad_plan.h) ---------------------
 * With deferral on (dp_arena_defer_grads), dp_grad_alloc takes no memory:
 * t->grad becomes a placeholder, a unique address that is never memory
 * (dereferencing it faults), and the arena records the request. Forward
 * ops only test a gradient for NULL or copy the pointer (a view's output
 * shares its input's). Before backward, dp_grad_plan_apply (grad_plan.h)
 * places every request in one region of the arena, sharing memory between
 * gradients whose lifetimes in backward do not meet, and replaces each
 * placeholder by its address. Off (the default), dp_grad_alloc takes the
 * memory from the arena at once. */
typedef struct {
    dp_tensor_t *t;   /* the tensor whose grad was asked for */
    size_t at, bytes; /* its placeholder's offset in the placeholder range, and its size (64-byte multiple) */
    int node;         /* the tape's node whose forward asked for it (dp_arena_deferred_tag); -1: none yet */
} dp_grad_request_t;

void dp_arena_defer_grads(dp_arena_t *arena, int on);
int dp_arena_defers_grads(const dp_arena_t *arena);
/* The requests since the last reset or dp_arena_deferred_clear, in the
 * order made (their `at` increasing); *count of them. */
dp_grad_request_t *dp_arena_deferred(dp_arena_t *arena, int *count);
/* Tags the requests from index `from` on with `node`. */
void dp_arena_deferred_tag(dp_arena_t *arena, int from, int node);
/* Forgets the requests (their placeholders were all replaced). */
void dp_arena_deferred_clear(dp_arena_t *arena);
/* The request whose placeholder range holds p (NULL: p is no placeholder);
 * p's offset into it in *offset. */
dp_grad_request_t *dp_arena_deferred_find(dp_arena_t *arena, const float *p, size_t *offset);

/* Forward allocations by node, so that gradients may take the memory of
 * activations backward is done with (grad_plan.h). With recording on
 * (dp_arena_record_forward), every allocation made while a node is set
 * (dp_arena_forward_node: the tape sets the node whose forward runs, -1
 * after it) is recorded with that node, in the order made; allocations
 * made with no node set (the batch, backward's scratch) are not. Everything
 * a node's forward allocates (its output, what it saves for its backward,
 * its converted copies of inputs) is read only by that node's backward and
 * by the backward of nodes after it, so it is dead once that node's
 * backward has run: a caller that wants a layer output or the loss reads
 * it before backward (the trainer counts its metrics first). The records
 * last until the next reset; a record that cannot be made (no memory)
 * only leaves its allocation unused by the plan. */
typedef struct {
    unsigned char *p; /* the allocation (64-byte aligned) */
    size_t bytes;     /* its rounded size: allocations made one after another in a block are adjacent */
    int node;
    int block; /* the arena's block it lies in (a serial number): memory of two blocks is never one run */
} dp_arena_record_t;

void dp_arena_record_forward(dp_arena_t *arena, int on);
void dp_arena_forward_node(dp_arena_t *arena, int node);
const dp_arena_record_t *dp_arena_forward_records(const dp_arena_t *arena, int *count);

/* Writes "[2, 3, 28, 28]" into buf. */
const char *dp_tensor_shape_str(const dp_tensor_t *t, char *buf, size_t size);

/* --- The step arena ------------------------------------------------------
 * A bump allocator. Allocations are 64-byte aligned and live until the
 * next dp_arena_reset. On a backend that lends a range growing in place
 * (backend.h reserve: the CPU's) the arena is that one range, committed as
 * far as the largest step went: it never chains, and what it holds is what
 * the steps used (rounded to the backend's granule). Otherwise, when a step
 * outgrows the current block the arena chains more: a request of 1 MiB or
 * more gets a block of its own size, smaller ones a block of a quarter of
 * what the step holds so far (at most 4 MiB). The reset after such a step
 * frees the chain and makes one block of the most any step used, so
 * steady-state steps allocate nothing.
 *
 * An arena's memory belongs to a backend (backend.h): dp_arena_new's is host
 * memory; dp_arena_new_on's comes from the backend's alloc (or its range),
 * so it is device memory that only the backend's own functions (its ops,
 * copies) may touch. The bookkeeping is host memory either way. */

dp_arena_t *dp_arena_new(size_t initial_bytes);
/* An arena of `backend`'s memory (NULL: host memory, as dp_arena_new). */
dp_arena_t *dp_arena_new_on(const dp_backend_t *backend, size_t initial_bytes);
void dp_arena_free(dp_arena_t *arena);
void dp_arena_reset(dp_arena_t *arena);
/* The most bytes handed out between two resets so far. */
size_t dp_arena_peak(const dp_arena_t *arena);
/* NULL (with an error message) when memory runs out. */
void *dp_arena_alloc(dp_arena_t *arena, size_t bytes);
float *dp_arena_floats(dp_arena_t *arena, size_t count);
/* count zeros (through the backend's zero for a device arena). */
float *dp_arena_zeros(dp_arena_t *arena, size_t count);
/* bytes of HOST memory that live as long as the arena's allocations (until
 * the next dp_arena_reset): an op's host-side records next to its device
 * memory (a host arena: the arena itself). NULL (with an error message)
 * when memory runs out. */
void *dp_arena_host_alloc(dp_arena_t *arena, size_t bytes);

#endif
