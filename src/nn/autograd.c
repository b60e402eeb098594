/* autograd.c - the tape: a growing array of nodes from the step arena,
 * walked in reverse by backward (kann's dependency-sorted array: ops are
 * recorded in execution order, which is already a topological order).
 * The nodes come from a host arena, the ops' data from the data arena; for
 * dp_tape_new both are the caller's arena. */
#include "dptrain/autograd.h"

#include "dptrain/backend.h"
#include "dptrain/profile.h"

#include "grad_plan.h"

#include <stdlib.h>
#include <string.h>

struct dp_tape {
    dp_arena_t *arena;      /* the ops' outputs and scratch (device memory for dp_tape_new_on) */
    dp_arena_t *nodes_arena; /* nodes and tensor headers (host memory) */
    dp_arena_t *own_arena;   /* nodes_arena when the tape owns it (dp_tape_new_on), else NULL */
    const dp_backend_t *backend; /* NULL: the CPU kernels, host memory */
    const dp_op_def_t *ops;      /* (DP_OP_COUNT) */
    dp_node_t **nodes; /* (capacity) pointers into the arena */
    dp_tensor_t *(*inputs)[3]; /* (capacity) each node's inputs as given (a backend may swap node->in for copies) */
    int size, capacity;
    size_t grad_bytes;   /* the last backward's region of activation gradients (grad_plan.h); 0: none planned */
    size_t grad_reused;  /* and the bytes of them placed over activations it was done with */
    /* profiling (profile.h): NULL when off, and then nothing below is used */
    dp_profiler_t *profiler;
    const char *label, *label2; /* the layer the next ops belong to (dp_tape_set_label) */
    const char *(*labels)[2];   /* (labels_capacity) each node's, for its backward */
    int labels_capacity;
};

dp_tape_t *dp_tape_new(dp_arena_t *arena) {
    dp_tape_t *t = dp_alloc_zeroed(1, sizeof *t, "tape");
    if (!t) return NULL;
    t->arena = arena;
    t->nodes_arena = arena;
    t->ops = dp_op_table;
    t->capacity = 64;
    t->nodes = dp_alloc(sizeof *t->nodes * (size_t)t->capacity, "tape nodes");
    t->inputs = dp_alloc(sizeof *t->inputs * (size_t)t->capacity, "tape inputs");
    if (!t->nodes || !t->inputs) {
        free(t->nodes);
        free(t->inputs);
        free(t);
        return NULL;
    }
    return t;
}

dp_tape_t *dp_tape_new_on(const dp_backend_t *backend, dp_arena_t *data_arena) {
    dp_arena_t *nodes = dp_arena_new((size_t)1 << 16);
    if (!nodes) return NULL;
    dp_tape_t *t = dp_tape_new(data_arena);
    if (!t) {
        dp_arena_free(nodes);
        return NULL;
    }
    t->nodes_arena = t->own_arena = nodes;
    t->backend = backend;
    t->ops = backend->ops;
    return t;
}

void dp_tape_free(dp_tape_t *tape) {
    if (!tape) return;
    dp_arena_free(tape->own_arena);
    free(tape->labels);
    free(tape->inputs);
    free(tape->nodes);
    free(tape);
}

void dp_tape_reset(dp_tape_t *tape) {
    tape->size = 0;
    if (tape->own_arena) dp_arena_reset(tape->own_arena);
}

int dp_tape_size(const dp_tape_t *tape) { return tape->size; }

const dp_backend_t *dp_tape_backend(const dp_tape_t *tape) { return tape->backend; }

void dp_tape_set_arena(dp_tape_t *tape, dp_arena_t *arena) {
    DP_ASSERT(tape->own_arena); /* dp_tape_new's nodes live in its data arena */
    tape->arena = arena;
}

size_t dp_tape_grad_bytes(const dp_tape_t *tape) { return tape->grad_bytes; }

size_t dp_tape_grad_reused_bytes(const dp_tape_t *tape) { return tape->grad_reused; }

const dp_node_t *dp_tape_node(const dp_tape_t *tape, int i) {
    DP_ASSERT(i >= 0 && i < tape->size);
    return tape->nodes[i];
}

dp_tensor_t *dp_tape_tensor(dp_tape_t *tape, int ndim, const int *shape) {
    dp_tensor_t *t = dp_arena_alloc(tape->nodes_arena, sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    return dp_tensor_set_shape(t, ndim, shape);
}

void dp_tape_set_profiler(dp_tape_t *tape, dp_profiler_t *profiler) { tape->profiler = profiler; }

void dp_tape_set_label(dp_tape_t *tape, const char *label, const char *label2) {
    tape->label = label;
    tape->label2 = label2;
}

/* Forward of the node about to be recorded at tape->size, timed, its label
 * kept for its backward. */
static dp_status_t forward_profiled(dp_tape_t *tape, dp_node_t *node) {
    if (tape->labels_capacity < tape->capacity) {
        const char *(*labels)[2] = realloc(tape->labels, sizeof *labels * (size_t)tape->capacity);
        if (!labels) return dp_fail(DP_ERR_NOMEM, "out of memory for the tape's %d layer labels", tape->capacity);
        tape->labels = labels;
        tape->labels_capacity = tape->capacity;
    }
    tape->labels[tape->size][0] = tape->label;
    tape->labels[tape->size][1] = tape->label2;
    int handle = dp_profiler_op_begin(tape->profiler, tape->label, tape->label2, node, DP_PROFILE_FORWARD);
    dp_status_t status = tape->ops[node->kind].forward(node, tape->arena);
    dp_profiler_op_end(tape->profiler, handle);
    return status;
}

static dp_status_t backward_profiled(dp_tape_t *tape, int i) {
    dp_node_t *node = tape->nodes[i];
    int handle = dp_profiler_op_begin(tape->profiler, tape->labels[i][0], tape->labels[i][1], node,
                                      DP_PROFILE_BACKWARD);
    dp_status_t status = tape->ops[node->kind].backward(node, tape->arena);
    dp_profiler_op_end(tape->profiler, handle);
    return status;
}

dp_tensor_t *dp_tape_op(dp_tape_t *tape, dp_op_kind_t kind, const dp_op_attr_t *attr,
                        dp_tensor_t *a, dp_tensor_t *b, dp_tensor_t *c,
                        const int32_t *labels) {
    DP_ASSERT(kind >= 0 && kind < DP_OP_COUNT);
    if (tape->size == tape->capacity) {
        int capacity = tape->capacity * 2;
        dp_node_t **nodes = realloc(tape->nodes, sizeof *nodes * (size_t)capacity);
        if (!nodes) {
            dp_fail(DP_ERR_NOMEM, "out of memory growing the tape to %d nodes", capacity);
            return NULL;
        }
        tape->nodes = nodes;
        dp_tensor_t *(*inputs)[3] = realloc(tape->inputs, sizeof *inputs * (size_t)capacity);
        if (!inputs) {
            dp_fail(DP_ERR_NOMEM, "out of memory growing the tape to %d nodes", capacity);
            return NULL;
        }
        tape->inputs = inputs;
        tape->capacity = capacity;
    }
    dp_node_t *node = dp_arena_alloc(tape->nodes_arena, sizeof *node);
    if (!node) return NULL;
    memset(node, 0, sizeof *node);
    node->kind = kind;
    node->attr = attr ? *attr : dp_op_attr_default();
    node->in[0] = a;
    node->in[1] = b;
    node->in[2] = c;
    node->labels = labels;
    int requests; /* the deferred gradients asked for so far: this node's come after them */
    dp_arena_deferred(tape->arena, &requests);
    dp_arena_forward_node(tape->arena, tape->size); /* what the forward allocates dies with this node's backward */
    dp_status_t status = tape->profiler ? forward_profiled(tape, node) : tape->ops[kind].forward(node, tape->arena);
    dp_arena_forward_node(tape->arena, -1);
    if (status != DP_OK) return NULL;
    dp_arena_deferred_tag(tape->arena, requests, tape->size);
    tape->inputs[tape->size][0] = a;
    tape->inputs[tape->size][1] = b;
    tape->inputs[tape->size][2] = c;
    tape->nodes[tape->size++] = node;
    return &node->out;
}

dp_status_t dp_tape_backward(dp_tape_t *tape, dp_tensor_t *loss,
                             dp_tape_hook_t hook, void *hook_ctx) {
    if (tape->size == 0 || &tape->nodes[tape->size - 1]->out != loss)
        return dp_fail(DP_ERR_ARG, "backward: the loss must be the last op recorded on the tape");
    if (dp_tensor_numel(loss) != 1)
        return dp_fail(DP_ERR_SHAPE, "backward: the loss must be a scalar, found %zu values",
                       dp_tensor_numel(loss));
    if (!loss->grad) return DP_OK; /* nothing requires a gradient */
    /* deferred activation gradients get their memory now, the loss's included */
    DP_TRY(dp_grad_plan_apply(tape->arena, tape->nodes, (dp_tensor_t *const(*)[3])tape->inputs, tape->size,
                              &tape->grad_bytes, &tape->grad_reused));
    const float one = 1.0f;
    if (tape->backend) tape->backend->upload(tape->backend->ctx, loss->grad, &one, sizeof one);
    else loss->grad[0] = one;
    loss->grad_unset = 0;
    for (int i = tape->size - 1; i >= 0; i--) {
        dp_node_t *node = tape->nodes[i];
        /* An output gradient still unset got nothing: the node passes nothing on. */
        if (node->out.grad && !node->out.grad_unset)
            DP_TRY(tape->profiler ? backward_profiled(tape, i) : tape->ops[node->kind].backward(node, tape->arena));
        if (hook) hook(hook_ctx, i, node);
    }
    return DP_OK;
}
