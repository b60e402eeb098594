/* ops.h - the operator table: forward and backward of every op, side by side.
 *
 * An op runs on a dp_node_t: its inputs, attributes and output. forward()
 * checks the input shapes, sets the output shape, allocates the output (and,
 * when any input carries a gradient, an output gradient, unset: tensor.h)
 * from the arena, and computes. backward() reads out.grad and ADDS into the
 * grad of every input whose grad is not NULL: gradients accumulate, for
 * parameters (shared by several uses) and activations (used by several ops)
 * alike; an input grad that is still unset is written instead (or zeroed
 * first). Inputs with grad == NULL get no gradient and cost nothing. A
 * caller that seeds an op's out.grad by hand calls dp_grad_prepare(&out)
 * first (or writes every element and clears out.grad_unset).
 *
 * Ops are plain synchronous functions over float32 NCHW / NCDHW tensors; they
 * run on whichever thread calls them. Each op names the PyTorch operator it
 * matches; tests compare them with fixtures that PyTorch wrote.
 */
#ifndef DPTRAIN_OPS_H
#define DPTRAIN_OPS_H

#include <stdint.h>

#include "dptrain/tensor.h"

typedef enum {
    DP_OP_CONV,         /* torch.nn.functional.conv{1,2,3}d */
    DP_OP_MAX_POOL,     /* torch.nn.functional.max_pool{1,2,3}d */
    DP_OP_AVG_POOL,     /* torch.nn.functional.avg_pool{1,2,3}d */
    DP_OP_LINEAR,       /* torch.nn.functional.linear: y = x W^T + b */
    DP_OP_RELU,         /* torch.relu */
    DP_OP_FLATTEN,      /* torch.flatten(x, 1): a view, shares data and grad */
    DP_OP_SOFTMAX_XENT, /* torch.nn.functional.cross_entropy (label_smoothing too), summed / denominator */
    DP_OP_CONV_TRANSPOSE, /* torch.nn.functional.conv_transpose{1,2,3}d */
    DP_OP_GLOBAL_AVG_POOL, /* torch.nn.functional.adaptive_avg_pool{1,2,3}d(x, 1): keeps ndim */
    DP_OP_BATCH_NORM,   /* torch.nn.functional.batch_norm (training: batch statistics) */
    DP_OP_DROPOUT,      /* torch.nn.functional.dropout, with dptrain's own counter-based mask */
    DP_OP_SIGMOID,      /* torch.sigmoid */
    DP_OP_TANH,         /* torch.tanh */
    DP_OP_ADD,          /* x + y, same shapes (skip connections); fuse_relu: relu(x + y) */
    DP_OP_MSE,          /* torch.nn.functional.mse_loss summed / denominator (Paddle's
                           square_error_cost): in[1] is the target, same shape, no grad */
    DP_OP_RELU6,        /* torch.nn.functional.relu6: min(max(x, 0), 6) (MobileNetV2) */
    DP_OP_HARDSWISH,    /* torch.nn.functional.hardswish: x relu6(x + 3) / 6 (MobileNetV3) */
    DP_OP_HARDSIGMOID,  /* torch.nn.functional.hardsigmoid: relu6(x + 3) / 6 (MobileNetV3) */
    DP_OP_SCALE_CHANNELS, /* x * s, s (N, C, 1, ...) broadcast over the spatial dims (squeeze-excitation),
                             or (1, C, 1, ...) over the batch too (ConvNeXt's layer scale) */
    DP_OP_GELU,         /* torch.nn.functional.gelu (exact, erf): x (1 + erf(x / sqrt 2)) / 2 (ConvNeXt) */
    DP_OP_LAYER_NORM,   /* torch.nn.functional.layer_norm over the channels at every position (ConvNeXt's
                           LayerNorm2d): (N, C, ...) normalised over C, eps, affine weight and bias (C) */
    DP_OP_SILU,         /* torch.nn.functional.silu: x sigmoid(x) (EfficientNet) */
    DP_OP_DROP_PATH,    /* torchvision.ops.stochastic_depth(x, p, "row"): dropout's mask, one draw per example */
    DP_OP_CONCAT,       /* torch.cat([a, b], dim=1): channels of a, then of b (DenseNet) */
    DP_OP_COUNT
} dp_op_kind_t;

/* Sums `count` values element-wise across every participant (all devices of
 * all ranks) in place: the SyncBatchNorm hook. Every participant calls it the
 * same number of times with the same count; the sum is taken in a fixed
 * order, so every participant gets the same bits. */
typedef struct {
    void (*sum)(void *ctx, double *values, int count);
    void *ctx;
} dp_stat_sync_t;

/* attr.fuse_relu's activations */
#define DP_FUSE_RELU 1  /* y = relu(v), dy masked where y > 0 (DP_OP_RELU) */
#define DP_FUSE_RELU6 2 /* y = relu6(v), dy masked where 0 < y < 6 (DP_OP_RELU6) */

/* Attributes; spatial arrays are indexed like the tensor's spatial dims
 * (2-D: [0] = H, [1] = W; 1-D: [0] = L; 3-D: [0] = D, [1] = H, [2] = W).
 * The number of spatial dims is the input's ndim - 2. */
typedef struct {
    int kernel[3];         /* pooling window (conv: taken from the weight) */
    int stride[3];         /* >= 1 */
    int pad[3];            /* zero padding on both sides (max pool: -inf) */
    int dilation[3];       /* >= 1 (conv) */
    int groups;            /* conv: >= 1, divides C_in and C_out */
    int count_include_pad; /* avg pool: padded zeros count in the divisor (PyTorch default: 1) */
    int ceil_mode;         /* max pool: 1 = PyTorch's ceil_mode=True output size (dp_pool_out_size),
                              0 (the default) = floor; avg pool refuses 1 */
    float loss_denominator; /* softmax_xent: loss = sum over examples / this; 0 means N;
                              mse: sum of squares / this; 0 means numel (reduction='mean').
                              With data parallelism set it to the global batch's value */
    float label_smoothing; /* softmax_xent: eps in [0, 1), torch's label_smoothing: example i's
                              loss is (1 - eps) (logsumexp - x[label]) + eps (logsumexp - mean_k x[k]),
                              the cross-entropy against (1 - eps) onehot + eps / K; 0 (the default):
                              none, the same bits as without the field */
    int fuse_relu;         /* an activation applied in the same pass, as the op after it would
                              (0: none): DP_FUSE_RELU (conv, add, batch_norm: torch.relu) or
                              DP_FUSE_RELU6 (batch_norm only: torch.nn.functional.relu6; conv
                              and add refuse it); conv_transpose: none (an error) */
    int in_place;          /* add: y is written over x (in[0]), whose memory it takes, as torchvision's
                              `out += identity`; the caller promises that nothing reads x's values after
                              this op, backward included (a backend may still give y its own memory) */
    int output_padding[3]; /* conv_transpose: extra size on one side of each output dim,
                              in [0, max(stride, dilation)) as PyTorch */
    int training;          /* batch_norm, dropout, drop_path: 1 = training behaviour, 0 = inference */
    float eps;             /* batch_norm, layer_norm: added to the variance (PyTorch default 1e-5) */
    float momentum;        /* batch_norm: running = (1 - momentum) running + momentum batch (0.1);
                              running_var takes the unbiased batch variance, as PyTorch */
    float *running_mean;   /* batch_norm: (C) updated in training, used in inference */
    float *running_var;    /* batch_norm: (C) */
    const dp_stat_sync_t *stat_sync; /* batch_norm: NULL = this device's statistics only (the
                              book's default); else statistics summed across participants:
                              training forward calls sum() once (2C + 1 doubles), backward
                              once (2C) when x needs a gradient; inference never */
    float dropout_p;       /* dropout, drop_path: probability of zeroing, in [0, 1); 0 = identity */
    uint64_t dropout_seed; /* dropout, drop_path: the mask of example e is a function of (seed, e) only
                              (splitmix64-based, ops_dropout.c); change it every step */
    int64_t example_offset; /* dropout, drop_path: global index of this shard's first example, so the
                              masks do not depend on how the batch is split */
} dp_op_attr_t;

/* A default attribute block: stride 1, pad 0, dilation 1, groups 1,
 * count_include_pad 1, ceil_mode 0, kernel 1, loss_denominator 0, label_smoothing 0, fuse_relu 0,
 * output_padding 0, training 1, eps 1e-5, momentum 0.1, no running stats, no stat sync,
 * dropout_p 0.5, dropout_seed 0, example_offset 0. */
dp_op_attr_t dp_op_attr_default(void);

typedef struct dp_node {
    dp_op_kind_t kind;
    dp_op_attr_t attr;
    /* conv:   in[0] x (N, C, [D,] [H,] W), in[1] weight (OC, C/groups, [kD,] [kH,] kW),
     *         in[2] bias (OC) or NULL
     * linear: in[0] x (N, IN), in[1] weight (OUT, IN), in[2] bias (OUT) or NULL
     * conv_transpose: in[0] x (N, C_in, ...), in[1] weight (C_in, C_out/groups, k...),
     *         in[2] bias (C_out) or NULL
     * batch_norm: in[0] x (N, C, ...) or (N, C), in[1] weight (C) or NULL (1),
     *         in[2] bias (C) or NULL (0)
     * layer_norm: in[0] x (N, C, ...) or (N, C), in[1] weight (C) or NULL (1), in[2] bias (C) or NULL (0)
     * add:    in[0] x, in[1] y (same shape)
     * scale_channels: in[0] x (N, C, ...), in[1] s (N, C, 1, ...): one factor per example and channel,
     *         or (1, C, 1, ...): one per channel
     * concat: in[0] a (N, Ca, ...), in[1] b (N, Cb, ...), the same other dims
     * mse:    in[0] prediction, in[1] target (same shape; its grad is not computed)
     * others: in[0] x */
    dp_tensor_t *in[3];
    const int32_t *labels; /* softmax_xent: (N) class indices in [0, K) */
    dp_tensor_t out;       /* softmax_xent: a scalar (ndim 0), the loss */
    void *saved;           /* op-private data kept for backward, from the arena */
} dp_node_t;

typedef struct {
    const char *name;
    int num_inputs; /* tensors in in[] the op needs (bias counts as optional) */
    dp_status_t (*forward)(dp_node_t *node, dp_arena_t *arena);
    dp_status_t (*backward)(dp_node_t *node, dp_arena_t *arena);
} dp_op_def_t;

/* Indexed by dp_op_kind_t; a static assert keeps it in sync with the enum. */
extern const dp_op_def_t dp_op_table[DP_OP_COUNT];

static inline dp_status_t dp_op_forward(dp_node_t *node, dp_arena_t *arena) {
    return dp_op_table[node->kind].forward(node, arena);
}
static inline dp_status_t dp_op_backward(dp_node_t *node, dp_arena_t *arena) {
    return dp_op_table[node->kind].backward(node, arena);
}

/* Output spatial size of a convolution / pooling window along one dim. */
int dp_conv_out_size(int in, int kernel, int stride, int pad, int dilation);

/* Output size of a pooling window along one dim: dp_conv_out_size, or with
 * ceil_mode PyTorch's rule (pooling_output_shape): the quotient rounded up,
 * so a partial window at the end counts, minus one when that last window
 * would start inside the right padding. (Inline: the CUDA module shares it.) */
static inline int dp_pool_out_size(int in, int kernel, int stride, int pad, int dilation, int ceil_mode) {
    int out = dp_conv_out_size(in, kernel, stride, pad, dilation);
    if (!ceil_mode || out < 1) return out;
    long span = (long)in + 2L * pad - (long)dilation * (kernel - 1) - 1;
    if (span % stride != 0) out++;
    if ((long)(out - 1) * stride >= (long)in + pad) out--;
    return out;
}

#endif
