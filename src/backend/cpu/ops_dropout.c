/* ops_dropout.c - DP_OP_DROPOUT and DP_OP_DROP_PATH, forward and backward:
 * inverted dropout as torch.nn.functional.dropout
 * (https://pytorch.org/docs/stable/generated/torch.nn.functional.dropout.html),
 * and stochastic depth as torchvision.ops.stochastic_depth(x, p, "row")
 * (https://pytorch.org/vision/0.14/generated/torchvision.ops.stochastic_depth.html),
 * with dptrain's own mask instead of PyTorch's generator.
 *
 * Training (attr.training = 1, attr.dropout_p = p in (0, 1)): every element
 * is zeroed with probability p and the kept ones are scaled by 1 / (1 - p).
 * Inference, or p = 0: the identity, done as a view like flatten (out.data
 * = in.data, out.grad = in.grad), so it costs nothing.
 *
 * The mask is counter-based: element i (in [0, numel / N)) of the example
 * with global index e = attr.example_offset + n is kept when
 *     u = splitmix64(key(seed, e) + (i + 1) * GOLDEN) >> 11   (53 bits)
 * is >= p * 2^53, with key(seed, e) = splitmix64(splitmix64(seed) + e *
 * GOLDEN) (splitmix64 here is its output function, a bijective 64-bit mix;
 * the per-element values are the stream of a splitmix64 generator seeded
 * with the example's key). So the mask depends on (seed, e, i) only, never
 * on how a batch is split across devices or on what ran before; the caller
 * changes attr.dropout_seed every step. Backward recomputes the mask (a
 * few multiplies per element) instead of storing it: nothing is saved.
 *
 * Drop path (stochastic depth, "row" mode) is the same with one draw per
 * example: the whole example is kept, and scaled by 1 / (1 - p), when its
 * element 0 would be kept by dropout, else zeroed. Same attributes
 * (dropout_p, dropout_seed, example_offset, training), same identity view
 * in inference and at p = 0. torchvision applies it to a residual
 * branch before the sum (`result = stochastic_depth(result); result +=
 * input`).
 */
#include <math.h>
#include <stdint.h>

#include "../op_checks.h"
#include "dptrain/ops.h"

#define GOLDEN 0x9E3779B97F4A7C15ull

/* splitmix64's output function (Steele, Lea, Flood 2014): a bijection with
 * good avalanche. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of one example: every element's random value derives from it. */
static inline uint64_t example_key(uint64_t seed, int64_t example) {
    return mix64(mix64(seed) + (uint64_t)example * GOLDEN);
}

/* 1 when element i of the example with this key is kept. */
static inline int kept(uint64_t key, size_t i, uint64_t threshold) {
    return (mix64(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= threshold;
}

static int is_identity(const dp_op_attr_t *a) { return !a->training || a->dropout_p == 0.0f; }

/* Element i's mask index: i itself (dropout), 0 for every element (drop path: one draw per example). */
static inline size_t mask_index(int per_example_mask, size_t i) { return per_example_mask ? 0 : i; }

static inline __attribute__((always_inline)) dp_status_t masked_forward(dp_node_t *node, dp_arena_t *arena,
                                                                        const char *op, int per_example_mask) {
    DP_TRY(dp_masked_check(node, op));
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    dp_tensor_set_shape(&node->out, x->ndim, x->shape);
    node->saved = NULL;
    if (is_identity(a)) { /* a view, as flatten */
        node->out.data = x->data;
        node->out.grad = x->grad;
        node->out.grad_unset = x->grad_unset;
        return DP_OK;
    }
    size_t numel = dp_tensor_numel(x), per_example = numel / (size_t)x->shape[0];
    node->out.data = dp_arena_floats(arena, numel);
    node->out.grad = x->grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    if (!node->out.data || (x->grad && !node->out.grad))
        return dp_fail(DP_ERR_NOMEM, "%s: out of arena memory for an output of %zu floats", op, numel);
    const uint64_t threshold = (uint64_t)ldexp((double)a->dropout_p, 53);
    const float scale = (float)(1.0 / (1.0 - (double)a->dropout_p));
    for (int n = 0; n < x->shape[0]; n++) {
        uint64_t key = example_key(a->dropout_seed, a->example_offset + n);
        const float *src = x->data + (size_t)n * per_example;
        float *dst = node->out.data + (size_t)n * per_example;
        for (size_t i = 0; i < per_example; i++)
            dst[i] = kept(key, mask_index(per_example_mask, i), threshold) ? src[i] * scale : 0.0f;
    }
    return DP_OK;
}

static inline __attribute__((always_inline)) dp_status_t masked_backward(dp_node_t *node, int per_example_mask) {
    dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    if (is_identity(a)) { /* the view: the gradient is already in x->grad */
        if (x->grad) x->grad_unset = node->out.grad_unset;
        return DP_OK;
    }
    const float *dy = node->out.grad;
    if (!dy || !x->grad) return DP_OK;
    size_t numel = dp_tensor_numel(x), per_example = numel / (size_t)x->shape[0];
    const uint64_t threshold = (uint64_t)ldexp((double)a->dropout_p, 53);
    const float scale = (float)(1.0 / (1.0 - (double)a->dropout_p));
    int write = dp_grad_claim(x);
    for (int n = 0; n < x->shape[0]; n++) {
        uint64_t key = example_key(a->dropout_seed, a->example_offset + n);
        const float *src = dy + (size_t)n * per_example;
        float *dst = x->grad + (size_t)n * per_example;
        for (size_t i = 0; i < per_example; i++) {
            float g = kept(key, mask_index(per_example_mask, i), threshold) ? src[i] * scale : 0.0f;
            dst[i] = write ? g : dst[i] + g;
        }
    }
    return DP_OK;
}

dp_status_t dp_dropout_forward(dp_node_t *node, dp_arena_t *arena) {
    return masked_forward(node, arena, "dropout", 0);
}
dp_status_t dp_dropout_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return masked_backward(node, 0);
}
dp_status_t dp_drop_path_forward(dp_node_t *node, dp_arena_t *arena) {
    return masked_forward(node, arena, "drop_path", 1);
}
dp_status_t dp_drop_path_backward(dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return masked_backward(node, 1);
}
