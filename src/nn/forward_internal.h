/* forward_internal.h - what the model's forward (nn.c) and the runner of
 * the layers no backward reads (no_grad.c) share. Library internal. */
#ifndef DPTRAIN_FORWARD_INTERNAL_H
#define DPTRAIN_FORWARD_INTERNAL_H

#include "dptrain/no_grad.h"
#include "dptrain/nn.h"

/* Called around each op a forward runs: the op of layers first .. last
 * (last = first + 1: a conv or batch norm fused with the ReLU after it);
 * after it, outs[last + 1] is its output. A failure stops the forward. */
typedef struct dp_layer_hook {
    dp_status_t (*before)(struct dp_layer_hook *hook, int first, int last);
    dp_status_t (*after)(struct dp_layer_hook *hook, int first, int last, dp_tensor_t *const *outs);
} dp_layer_hook_t;

/* Layers [from, to) in order on `tape`: layer i reads outs[] of its inputs
 * and writes outs[i + 1] (a route or an inference-time dropout aliases its
 * input, with no op; a conv or batch norm fused with the ReLU after it,
 * both in range, writes the ReLU's output and leaves its own NULL). outs
 * has dp_model_num_layers(m) + 1 entries; outs[0] is the model's input.
 * hook: NULL, or called around every op. */
dp_status_t dp_model_forward_layers(const dp_model_t *m, dp_tape_t *tape, float *params, float *grads,
                                    const dp_forward_opts_t *opts, dp_tensor_t **outs, int from, int to,
                                    dp_layer_hook_t *hook);

/* no_grad.c: layers [0, prefix) on outs[0] (the batch) with runner ng, no
 * gradient computed; outs[1 .. prefix] that a layer from `prefix` on reads
 * (or the logits, when prefix is every layer) are left valid until the
 * runner's next forward, the others NULL (dead). `tape`: the pass's, of
 * the runner's backend. */
dp_status_t dp_no_grad_forward(dp_no_grad_t *ng, const dp_model_t *m, int prefix, dp_tape_t *tape, float *params,
                               const dp_forward_opts_t *opts, dp_tensor_t **outs);

#endif
