/* grad_plan.h - activation gradients placed by liveness (tensor.h's
 * deferred gradient buffers), for the tape (autograd.c).
 *
 * A tape whose arena defers gradients calls dp_grad_plan_apply once its
 * forward pass is recorded, before backward. Each request's lifetime is
 * the span of nodes that name it (as an output's gradient, an input's, or
 * the node whose forward asked for it, which covers a backend's converted
 * copies of inputs); backward walks the nodes from the last to the first,
 * so two requests whose spans do not meet are never live at once and may
 * share memory. Placement: largest first, each at the lowest offset that
 * meets no placed request alive beside it (the greedy by size that
 * TFLite's and ONNX Runtime's arena planners use). The same tape gives the
 * same offsets, so a step's addresses repeat (what a captured CUDA graph
 * relies on). */
#ifndef DPTRAIN_GRAD_PLAN_H
#define DPTRAIN_GRAD_PLAN_H

#include "dptrain/ops.h"

/* Places the arena's deferred requests in one region of the arena and
 * replaces every placeholder held by the nodes' outputs, their inputs
 * (node->in[]), the inputs as recorded (`inputs[n]`: what the tape was
 * given, which a backend may have swapped for a converted copy in
 * node->in), and the requesting tensors. NULL inputs: node->in only.
 * Returns DP_ERR_NOMEM (message set) when the region cannot be had.
 * Without requests it does nothing. *bytes (may be NULL): the region's
 * size, 0 without requests. */
dp_status_t dp_grad_plan_apply(dp_arena_t *arena, dp_node_t *const *nodes, dp_tensor_t *const (*inputs)[3], int size,
                               size_t *bytes);

#endif
