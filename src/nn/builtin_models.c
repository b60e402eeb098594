/* builtin_models.c - the built-in networks (dp_model_builtin): LeNet (d2l
 * and PaddlePaddle's), ResNet-18 and a scaled AlexNet for 1x28x28 inputs,
 * each made through nn.h's builder API with its PyTorch state_dict names.
 */
#include <stdio.h>
#include <string.h>

#include "dptrain/nn.h"

static dp_op_attr_t pool_attr(int kernel, int stride, int pad) {
    dp_op_attr_t a = dp_op_attr_default();
    a.kernel[0] = a.kernel[1] = kernel;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    return a;
}

static dp_op_attr_t conv_attr(int stride, int pad) {
    dp_op_attr_t a = dp_op_attr_default();
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    return a;
}

/* d2l 12.5: conv 3x3 -> 20, ReLU, avg-pool 2/2, conv 5x5 -> 50, ReLU,
 * avg-pool 2/2, flatten, linear 800 -> 128, ReLU, linear 128 -> 10;
 * weights ~ N(0, 0.01^2), biases 0. */
static dp_status_t build_lenet(dp_model_t *m) {
    dp_op_attr_t pool = pool_attr(2, 2, 0);
    DP_TRY(dp_model_add_conv(m, "conv1", 20, 3, 3, NULL, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_AVG_POOL, &pool));
    DP_TRY(dp_model_add_conv(m, "conv2", 50, 5, 5, NULL, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_AVG_POOL, &pool));
    DP_TRY(dp_model_add_flatten(m));
    DP_TRY(dp_model_add_linear(m, "fc1", 128, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_linear(m, "fc2", 10, 1));
    return DP_OK;
}

/* PaddlePaddle's MNIST tutorial: conv 5x5 -> 20 pad 2, ReLU, max-pool 2/2,
 * conv 5x5 -> 20 pad 2, ReLU, max-pool 2/2, linear 980 -> 10; PyTorch's
 * default initialisation. */
static dp_status_t build_lenet_paddle(dp_model_t *m) {
    dp_op_attr_t conv = conv_attr(1, 2);
    dp_op_attr_t pool = pool_attr(2, 2, 0);
    DP_TRY(dp_model_add_conv(m, "conv1", 20, 5, 5, &conv, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_MAX_POOL, &pool));
    DP_TRY(dp_model_add_conv(m, "conv2", 20, 5, 5, &conv, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_pool(m, DP_OP_MAX_POOL, &pool));
    DP_TRY(dp_model_add_flatten(m));
    DP_TRY(dp_model_add_linear(m, "fc", 10, 1));
    return DP_OK;
}

/* d2l's Residual block (7.6 / 13.6), named as its state_dict names it
 * ("PREFIX.conv1.weight", ..., "PREFIX.bn2.running_var"):
 * relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut), the shortcut being x or,
 * with use_1x1conv, conv3(x) (1x1, the block's stride). */
static dp_status_t add_residual_block(dp_model_t *m, const char prefix[32], int channels, int use_1x1conv,
                                      int stride) {
    char name[64]; /* nn.c keeps 63 characters of a parameter's name */
    int block_input = dp_model_num_layers(m);
    dp_op_attr_t first = conv_attr(stride, 1), second = conv_attr(1, 1), shortcut = conv_attr(stride, 0);
    snprintf(name, sizeof name, "%s.conv1", prefix);
    DP_TRY(dp_model_add_conv(m, name, channels, 3, 3, &first, 1));
    snprintf(name, sizeof name, "%s.bn1", prefix);
    DP_TRY(dp_model_add_batch_norm(m, name, NULL));
    DP_TRY(dp_model_add_relu(m));
    snprintf(name, sizeof name, "%s.conv2", prefix);
    DP_TRY(dp_model_add_conv(m, name, channels, 3, 3, &second, 1));
    snprintf(name, sizeof name, "%s.bn2", prefix);
    DP_TRY(dp_model_add_batch_norm(m, name, NULL));
    if (!use_1x1conv) return dp_model_add_residual(m, block_input, 1);
    int main_path = dp_model_num_layers(m);
    DP_TRY(dp_model_add_route(m, block_input));
    snprintf(name, sizeof name, "%s.conv3", prefix);
    DP_TRY(dp_model_add_conv(m, name, channels, 1, 1, &shortcut, 1));
    return dp_model_add_residual(m, main_path, 1);
}

/* d2l 13.6's resnet18(10, 1) for 1x28x28: b1 = conv 3x3 -> 64 pad 1 ("0"),
 * BN ("1"), ReLU; four stages resnet_block1..4 of two blocks with 64, 128,
 * 256, 512 channels (stages 2-4 start with stride 2 and a 1x1 shortcut);
 * global average pool, flatten, linear 512 -> 10 ("fc.1"). Names follow the
 * PyTorch module's state_dict. Weights ~ N(0, 0.01^2) as d2l's init_weights
 * (biases 0, not PyTorch's uniform default); BN weight 1, bias 0. */
static dp_status_t build_resnet18(dp_model_t *m) {
    dp_op_attr_t b1 = conv_attr(1, 1);
    DP_TRY(dp_model_add_conv(m, "0", 64, 3, 3, &b1, 1));
    DP_TRY(dp_model_add_batch_norm(m, "1", NULL));
    DP_TRY(dp_model_add_relu(m));
    static const int channels[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; stage++) {
        for (int block = 0; block < 2; block++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "resnet_block%d.%d", stage + 1, block);
            int downsample = stage > 0 && block == 0;
            DP_TRY(add_residual_block(m, prefix, channels[stage], downsample, downsample ? 2 : 1));
        }
    }
    DP_TRY(dp_model_add_global_avg_pool(m));
    DP_TRY(dp_model_add_flatten(m));
    return dp_model_add_linear(m, "fc.1", 10, 1);
}

/* An AlexNet (d2l 8.1) scaled to 1x28x28: AlexNet's 5 convs (64, 192, 384,
 * 256, 256 channels) with 3x3 kernels, pad 1, and 2x2/2 max pools after the
 * 1st, 2nd and 5th (28 -> 14 -> 7 -> 3), then its classifier with 1024 wide
 * hidden layers instead of 4096: linear 2304 -> 1024, ReLU, dropout 0.5,
 * linear 1024 -> 1024, ReLU, dropout 0.5, linear 1024 -> 10 (5.67 M
 * parameters). d2l's 224x224 input (11x11 stride-4 first conv) would cost
 * 50x the compute per image. PyTorch's default initialisation. */
static dp_status_t build_alexnet(dp_model_t *m) {
    static const char *const names[5] = {"conv1", "conv2", "conv3", "conv4", "conv5"};
    static const int channels[5] = {64, 192, 384, 256, 256};
    dp_op_attr_t conv = conv_attr(1, 1), pool = pool_attr(2, 2, 0);
    for (int i = 0; i < 5; i++) {
        DP_TRY(dp_model_add_conv(m, names[i], channels[i], 3, 3, &conv, 1));
        DP_TRY(dp_model_add_relu(m));
        if (i == 0 || i == 1 || i == 4) DP_TRY(dp_model_add_pool(m, DP_OP_MAX_POOL, &pool));
    }
    DP_TRY(dp_model_add_flatten(m));
    DP_TRY(dp_model_add_linear(m, "fc1", 1024, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_dropout(m, 0.5f));
    DP_TRY(dp_model_add_linear(m, "fc2", 1024, 1));
    DP_TRY(dp_model_add_relu(m));
    DP_TRY(dp_model_add_dropout(m, 0.5f));
    return dp_model_add_linear(m, "fc3", 10, 1);
}

dp_status_t dp_model_builtin(const char *name, dp_model_t **out) {
    dp_status_t (*build)(dp_model_t *) = NULL;
    dp_init_kind_t init = DP_INIT_TORCH_DEFAULT;
    *out = NULL;
    if (!name) return dp_fail(DP_ERR_ARG, "built-in model: no name given (NULL)");
    if (strcmp(name, "lenet") == 0) {
        build = build_lenet;
        init = DP_INIT_NORMAL;
    } else if (strcmp(name, "lenet-paddle") == 0) {
        build = build_lenet_paddle;
    } else if (strcmp(name, "resnet18") == 0) {
        build = build_resnet18;
        init = DP_INIT_NORMAL;
    } else if (strcmp(name, "alexnet") == 0) {
        build = build_alexnet;
    } else {
        *out = NULL;
        return dp_fail(DP_ERR_ARG, "unknown model '%s' (built-in models: lenet, lenet-paddle, resnet18, alexnet)",
                       name);
    }
    DP_TRY(dp_model_new(name, 1, 28, 28, init, 0.01f, out));
    dp_status_t status = build(*out);
    if (status != DP_OK) {
        dp_model_free(*out);
        *out = NULL;
    }
    return status;
}
