/* grad_plan.h - activation gradients placed by liveness (tensor.h's
 * deferred gradient buffers), for the tape (autograd.c).
 *
 * A tape whose arena defers gradients calls dp_grad_plan_apply once its
 * forward pass is recorded, before backward. Each request's lifetime is
 * the span of nodes that name it (as an output's gradient, an input's, or
 * the node whose forward asked for it, which covers a backend's converted
 * copies of inputs); backward walks the nodes from the last to the first,
 * so two requests whose spans do not meet are never live at once and may
 * share memory. When the arena records its forward allocations (tensor.h),
 * a request may also lie over what forward allocated for nodes after its
 * span's last node: backward has run those nodes before the request is
 * first written, and nothing reads that memory again (PyTorch's autograd
 * frees a node's saved tensors after its backward alike); an output that
 * no backward reads (a convolution's or batch norm's without a fused ReLU
 * read only by adds) is dead for all of backward. Placement:
 * largest first, each at the lowest address over such dead allocations
 * (runs of adjacent ones within a block) that meets no placed request
 * alive beside it, else at the lowest such offset in a region taken from
 * the arena (the greedy by size that TFLite's and ONNX Runtime's arena
 * planners use). The same tape on the same arena gives the same addresses,
 * so a step's addresses repeat (what a captured CUDA graph relies on). */
#ifndef DPTRAIN_GRAD_PLAN_H
#define DPTRAIN_GRAD_PLAN_H

#include "dptrain/ops.h"

/* Places the arena's deferred requests (over dead forward allocations, or
 * in one region of the arena) and replaces every placeholder held by the
 * nodes' outputs, their inputs
 * (node->in[]), the inputs as recorded (`inputs[n]`: what the tape was
 * given, which a backend may have swapped for a converted copy in
 * node->in), and the requesting tensors. NULL inputs: node->in only.
 * Returns DP_ERR_NOMEM (message set) when the region cannot be had.
 * Without requests it does nothing. *bytes (may be NULL): the region's
 * size, 0 without requests; *reused (may be NULL): the bytes of requests
 * placed over dead forward allocations. */
dp_status_t dp_grad_plan_apply(dp_arena_t *arena, dp_node_t *const *nodes, dp_tensor_t *const (*inputs)[3], int size,
                               size_t *bytes, size_t *reused);

#endif
