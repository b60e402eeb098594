/* autograd.h - the tape: records ops as they run forward, walks them in
 * reverse for backward.
 *
 * dp_tape_op() runs one op (ops.h) at once and appends its node; the output
 * tensor it returns lives as long as the arena's step. dp_tape_backward()
 * seeds d(loss)/d(loss) = 1 and calls every node's backward, last first;
 * gradients accumulate (+=) into every tensor whose grad is not NULL, so
 * parameter gradients must be zeroed by the caller before a step.
 *
 * Whether a gradient flows is decided by the tensors themselves: an op's
 * output gets a gradient buffer iff one of its inputs has one. Evaluation
 * passes parameters with grad == NULL and so records nothing to undo.
 *
 * A tape runs the op table of a backend (backend.h). dp_tape_new's tape runs
 * the CPU kernels and takes everything from one host arena.
 * dp_tape_new_on's runs its backend's ops on tensors whose data come from a
 * device arena, while the nodes and tensor headers (host bookkeeping) come
 * from a host arena the tape owns; the one value the tape itself writes
 * into device memory (the loss's seed gradient) goes through the backend.
 */
#ifndef DPTRAIN_AUTOGRAD_H
#define DPTRAIN_AUTOGRAD_H

#include "dptrain/ops.h"

typedef struct dp_tape dp_tape_t;

/* A tape allocating its nodes and tensors from `arena` (not owned). */
dp_tape_t *dp_tape_new(dp_arena_t *arena);
/* A tape running `backend`'s ops, their data from `data_arena` (of that
 * backend's memory: dp_arena_new_on; not owned). dp_tape_reset also resets
 * the tape's own host arena; the caller resets data_arena. NULL (with the
 * error set) when memory runs out. */
dp_tape_t *dp_tape_new_on(const dp_backend_t *backend, dp_arena_t *data_arena);
void dp_tape_free(dp_tape_t *tape);

/* Forgets every node. Call with (or before) resetting the arena. */
void dp_tape_reset(dp_tape_t *tape);

/* Runs op `kind` forward on inputs a, b, c (NULL where unused) and records
 * it. Returns the output tensor, or NULL with the error message set. */
dp_tensor_t *dp_tape_op(dp_tape_t *tape, dp_op_kind_t kind, const dp_op_attr_t *attr,
                        dp_tensor_t *a, dp_tensor_t *b, dp_tensor_t *c,
                        const int32_t *labels);

/* Called after each node's backward, with the node's position on the tape
 * (counting down to 0): the hook where gradient buckets can start reducing
 * while backward continues on earlier layers. */
typedef void (*dp_tape_hook_t)(void *ctx, int node_index, const dp_node_t *node);

/* Backward from the scalar `loss` (the last recorded output). On an arena
 * that records its forward allocations (tensor.h) the activations'
 * gradients may overwrite layer outputs and the loss as backward passes
 * them: read those before. */
dp_status_t dp_tape_backward(dp_tape_t *tape, dp_tensor_t *loss,
                             dp_tape_hook_t hook, void *hook_ctx);

/* The backend whose ops the tape runs (NULL: the CPU kernels on host
 * memory, dp_tape_new). */
const dp_backend_t *dp_tape_backend(const dp_tape_t *tape);
/* The arena the next ops take their data from (of the tape's backend's
 * memory), for a tape of dp_tape_new_on only: its nodes stay in its own. */
void dp_tape_set_arena(dp_tape_t *tape, dp_arena_t *arena);

/* Number of recorded nodes, and node i. */
int dp_tape_size(const dp_tape_t *tape);
/* Bytes of the activation gradients' region the last backward placed
 * (an arena that defers gradients: tensor.h, grad_plan.h); 0 otherwise. */
size_t dp_tape_grad_bytes(const dp_tape_t *tape);
/* Of those gradients, the bytes placed over activations that backward was
 * done with instead (an arena recording its forward allocations), counted
 * once per placement; 0 otherwise. */
size_t dp_tape_grad_reused_bytes(const dp_tape_t *tape);
const dp_node_t *dp_tape_node(const dp_tape_t *tape, int i);

/* Profiling (profile.h): with a profiler (not owned; NULL: off, the
 * default, and then an op costs one pointer test more), every op the tape
 * runs forward and backward is timed under the label set last: the layer's
 * name ("conv1"), and label2 the name of a second layer fused into the same
 * op ("relu1"; NULL: none). The labels are the caller's strings and must
 * live as long as the tape's nodes. */
typedef struct dp_profiler dp_profiler_t;
void dp_tape_set_profiler(dp_tape_t *tape, dp_profiler_t *profiler);
void dp_tape_set_label(dp_tape_t *tape, const char *label, const char *label2);

/* A tensor view allocated from the tape's (host) arena (shape only, data NULL). */
dp_tensor_t *dp_tape_tensor(dp_tape_t *tape, int ndim, const int *shape);

#endif
