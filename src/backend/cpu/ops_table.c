/* ops_table.c - the operator table (dp_op_table) and the default attributes.
 *
 * Each op's forward and backward live side by side in one file per op
 * family (ops_conv.c, ops_conv_transpose.c, ops_pool.c, ops_linear.c,
 * ops_elementwise.c, ops_scale_channels.c, ops_layer_norm.c, ops_concat.c, ops_batch_norm.c, ops_dropout.c,
 * ops_loss.c); this
 * file only registers them. The kernels are library
 * internal: they are reached through dp_op_table, so their prototypes are
 * declared here and nowhere else.
 */
#include "dptrain/ops.h"

dp_status_t dp_conv_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_conv_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_max_pool_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_max_pool_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_avg_pool_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_avg_pool_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_linear_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_linear_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_relu_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_relu_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_softmax_xent_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_softmax_xent_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_conv_transpose_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_conv_transpose_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_global_avg_pool_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_global_avg_pool_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_batch_norm_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_batch_norm_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_dropout_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_dropout_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_sigmoid_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_sigmoid_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_tanh_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_tanh_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_add_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_add_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_mse_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_mse_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_relu6_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_relu6_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_hardswish_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_hardswish_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_hardsigmoid_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_hardsigmoid_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_scale_channels_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_scale_channels_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_gelu_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_gelu_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_layer_norm_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_layer_norm_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_silu_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_silu_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_drop_path_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_drop_path_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_concat_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_concat_backward(dp_node_t *node, dp_arena_t *arena);

/* Adding an op to dp_op_kind_t breaks this on purpose: give it an entry
 * below, a gradcheck case (tests/test_gradcheck.c) and fixtures
 * (tools/make_fixtures.py), then update the count. */
_Static_assert(DP_OP_COUNT == 24, "dp_op_table: a new op needs an entry, a gradcheck case and fixtures");

/* num_inputs counts the optional bias of conv, conv_transpose and linear
 * and the optional weight and bias of batch_norm: those may be NULL. */
const dp_op_def_t dp_op_table[DP_OP_COUNT] = {
    [DP_OP_CONV] = {"conv", 3, dp_conv_forward, dp_conv_backward},
    [DP_OP_MAX_POOL] = {"max_pool", 1, dp_max_pool_forward, dp_max_pool_backward},
    [DP_OP_AVG_POOL] = {"avg_pool", 1, dp_avg_pool_forward, dp_avg_pool_backward},
    [DP_OP_LINEAR] = {"linear", 3, dp_linear_forward, dp_linear_backward},
    [DP_OP_RELU] = {"relu", 1, dp_relu_forward, dp_relu_backward},
    [DP_OP_FLATTEN] = {"flatten", 1, dp_flatten_forward, dp_flatten_backward},
    [DP_OP_SOFTMAX_XENT] = {"softmax_xent", 1, dp_softmax_xent_forward, dp_softmax_xent_backward},
    [DP_OP_CONV_TRANSPOSE] = {"conv_transpose", 3, dp_conv_transpose_forward, dp_conv_transpose_backward},
    [DP_OP_GLOBAL_AVG_POOL] = {"global_avg_pool", 1, dp_global_avg_pool_forward, dp_global_avg_pool_backward},
    [DP_OP_BATCH_NORM] = {"batch_norm", 3, dp_batch_norm_forward, dp_batch_norm_backward},
    [DP_OP_DROPOUT] = {"dropout", 1, dp_dropout_forward, dp_dropout_backward},
    [DP_OP_SIGMOID] = {"sigmoid", 1, dp_sigmoid_forward, dp_sigmoid_backward},
    [DP_OP_TANH] = {"tanh", 1, dp_tanh_forward, dp_tanh_backward},
    [DP_OP_ADD] = {"add", 2, dp_add_forward, dp_add_backward},
    [DP_OP_MSE] = {"mse", 2, dp_mse_forward, dp_mse_backward},
    [DP_OP_RELU6] = {"relu6", 1, dp_relu6_forward, dp_relu6_backward},
    [DP_OP_HARDSWISH] = {"hardswish", 1, dp_hardswish_forward, dp_hardswish_backward},
    [DP_OP_HARDSIGMOID] = {"hardsigmoid", 1, dp_hardsigmoid_forward, dp_hardsigmoid_backward},
    [DP_OP_SCALE_CHANNELS] = {"scale_channels", 2, dp_scale_channels_forward, dp_scale_channels_backward},
    [DP_OP_GELU] = {"gelu", 1, dp_gelu_forward, dp_gelu_backward},
    [DP_OP_LAYER_NORM] = {"layer_norm", 3, dp_layer_norm_forward, dp_layer_norm_backward},
    [DP_OP_SILU] = {"silu", 1, dp_silu_forward, dp_silu_backward},
    [DP_OP_DROP_PATH] = {"drop_path", 1, dp_drop_path_forward, dp_drop_path_backward},
    [DP_OP_CONCAT] = {"concat", 2, dp_concat_forward, dp_concat_backward},
};

dp_op_attr_t dp_op_attr_default(void) {
    dp_op_attr_t attr = {
        .kernel = {1, 1, 1},
        .stride = {1, 1, 1},
        .pad = {0, 0, 0},
        .dilation = {1, 1, 1},
        .groups = 1,
        .count_include_pad = 1,
        .loss_denominator = 0.0f,
        .label_smoothing = 0.0f,
        .training = 1,
        .eps = 1e-5f,
        .momentum = 0.1f,
        .dropout_p = 0.5f,
    };
    return attr;
}
