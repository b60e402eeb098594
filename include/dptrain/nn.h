/* nn.h - models: a graph of layers (a sequence with routes and skip
 * connections) with named parameters in one flat buffer.
 *
 * A dp_model_t describes an architecture only: layers, the shape each one
 * produces, and the parameter table (name, shape, offset into the flat
 * buffer). The numbers live in replicas (parallel.h): one params buffer and
 * one grads buffer of dp_model_num_params() floats each, split into views by
 * the table, so the optimizer and allreduce each see one (float *, n).
 *
 * Shapes are inferred as layers are added, so a network that does not fit
 * its input fails when it is built, with a message naming the layer.
 */
#ifndef DPTRAIN_NN_H
#define DPTRAIN_NN_H

#include <stddef.h>

#include "dptrain/autograd.h"
#include "dptrain/optim.h"
#include "dptrain/rng.h" /* dp_seed_mix, which the trainer includes nn.h for */

typedef struct dp_model dp_model_t;

/* How parameters are initialised. */
typedef enum {
    DP_INIT_NORMAL,        /* weights ~ N(0, scale^2), biases 0 (d2l's `scale = 0.01`) */
    DP_INIT_TORCH_DEFAULT, /* PyTorch's default for Conv/Linear: weights and biases
                              ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    DP_INIT_KAIMING_FAN_OUT, /* torchvision's ResNet and MobileNetV2 convolutions:
                              torch.nn.init.kaiming_normal_(w, mode="fan_out",
                              nonlinearity="relu"), weights ~ N(0, 2 / fan_out) with
                              fan_out = shape[0] x the kernel's size, biases 0 */
    DP_INIT_UNIFORM_FAN_OUT, /* torchvision's EfficientNet classifier: weights
                              ~ U(-1/sqrt(fan_out), 1/sqrt(fan_out)) (a linear layer's
                              fan_out: its out_features), biases 0 */
    DP_INIT_KAIMING_FAN_OUT_TORCH_BIAS, /* torchvision's RegNet squeeze-excitation
                              convolutions: weights as DP_INIT_KAIMING_FAN_OUT, biases
                              PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (its
                              init loop sets the weight only) */
    DP_INIT_KAIMING_FAN_IN, /* torchvision's DenseNet convolutions: kaiming_normal_(w) with
                              its defaults (mode fan_in, gain sqrt(2)), weights ~ N(0, 2 / fan_in),
                              biases 0 */
    DP_INIT_TORCH_ZERO_BIAS, /* torchvision's DenseNet classifier: weights as
                              DP_INIT_TORCH_DEFAULT, biases 0 */
    DP_INIT_KAIMING_UNIFORM, /* torchvision's SqueezeNet convolutions: kaiming_uniform_(w) with
                              its defaults (mode fan_in, gain sqrt(2)), weights
                              ~ U(-sqrt(6 / fan_in), sqrt(6 / fan_in)), biases 0 */
} dp_init_kind_t;

typedef struct {
    const char *name; /* "conv1.weight" */
    int ndim;
    int shape[DP_MAX_DIMS];
    size_t offset; /* into the flat buffer, in floats */
    size_t numel;
    int trainable; /* 1: a weight or bias; 0: a buffer (batch norm's running statistics) */
    int frozen;    /* 1: a weight or bias of a layer dp_model_freeze froze: it has no gradient
                      and no optimizer state, and never changes; 0 otherwise */
} dp_param_info_t;

/* An empty model taking inputs of shape (N, channels, height, width). */
dp_status_t dp_model_new(const char *name, int channels, int height, int width,
                         dp_init_kind_t init, float init_scale, dp_model_t **out);
void dp_model_free(dp_model_t *model);

/* The initialisation of the last layer added (a conv, conv_transpose or
 * linear layer) instead of the model's: e.g. torchvision's ResNet has
 * kaiming_fan_out convolutions but a PyTorch-default fc. DP_ERR_ARG when
 * the last layer has no weight. */
dp_status_t dp_model_set_layer_init(dp_model_t *m, dp_init_kind_t init, float init_scale);

/* Layers. `name` prefixes the layer's parameters ("conv1" -> "conv1.weight").
 * attr: stride/pad/dilation/groups (conv), kernel/stride/pad (pooling). */
dp_status_t dp_model_add_conv(dp_model_t *m, const char *name, int out_channels,
                              int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                              int bias);
dp_status_t dp_model_add_pool(dp_model_t *m, dp_op_kind_t kind, const dp_op_attr_t *attr);
dp_status_t dp_model_add_relu(dp_model_t *m);
dp_status_t dp_model_add_flatten(dp_model_t *m);
dp_status_t dp_model_add_linear(dp_model_t *m, const char *name, int out_features, int bias);

/* --- The operator family's other layers ---------------------------------------
 * Layer outputs are numbered: 0 is the model's input, i is the output of the
 * i-th layer added (1-based); dp_model_num_layers() is the last one. A layer
 * reads the previous output unless it says otherwise (route, add). */
int dp_model_num_layers(const dp_model_t *m);
/* Shape of output i without the batch dim; returns its ndim. */
int dp_model_output_shape(const dp_model_t *m, int output, int shape[DP_MAX_DIMS]);
/* The most examples one inference forward may take so that every layer's
 * output (and a convolution's scratch) would stay under about `bytes`
 * (twice every output's floats per example, the input's included), at
 * least 1: a bound that holds even with DPTRAIN_FORWARD_LIVENESS=off,
 * when the forward keeps every output in the device's arena (with a
 * no_grad.h runner it holds a few at a time). The trainer's evaluation
 * and the predictor split larger batches into such forwards; 1 GiB is
 * theirs. */
#define DP_INFERENCE_ARENA_BYTES ((size_t)1 << 30)
int dp_model_inference_batch_cap(const dp_model_t *m, size_t bytes);
/* The bytes that count: twice every output's floats, the input's included,
 * for `examples` examples. */
size_t dp_model_inference_bytes(const dp_model_t *m, int examples);
dp_status_t dp_model_add_conv_transpose(dp_model_t *m, const char *name, int out_channels,
                                        int kernel_h, int kernel_w, const dp_op_attr_t *attr,
                                        int bias);
/* Batch norm over channels (C, H, W) or features (F): "name.weight", "name.bias"
 * (trainable, init 1 and 0) and buffers "name.running_mean", "name.running_var"
 * (init 0 and 1). attr: eps, momentum (NULL: PyTorch's defaults). */
dp_status_t dp_model_add_batch_norm(dp_model_t *m, const char *name, const dp_op_attr_t *attr);
dp_status_t dp_model_add_dropout(dp_model_t *m, float p);
/* Layer norm over the channels at every position of a (C, H, W) or (F)
 * input (DP_OP_LAYER_NORM; ConvNeXt's LayerNorm2d and its blocks'
 * nn.LayerNorm on channels-last data): parameters name.weight and
 * name.bias (C), init 1 and 0; eps > 0 (torch's default 1e-5, ConvNeXt's 1e-6). */
dp_status_t dp_model_add_layer_norm(dp_model_t *m, const char *name, float eps);
/* The last layer, a 1x1 convolution (stride 1, no padding, no groups),
 * stores its weight as a linear layer's (OUT, IN) instead of (OUT, IN, 1,
 * 1): ConvNeXt's nn.Linear on channels-last data, by torchvision's names
 * and shapes. The same op runs. */
dp_status_t dp_model_set_conv_weight_2d(dp_model_t *m);
/* A learned factor per channel of a (C, H, W) or (F) input: the parameter
 * name.layer_scale (C, 1, 1), every value `init` (ConvNeXt's layer scale,
 * 1e-6), times the input (DP_OP_SCALE_CHANNELS). The tensor goes before
 * the first earlier tensor named name.* (PyTorch's state_dict order: a
 * module's own parameters before its submodules'). */
dp_status_t dp_model_add_layer_scale(dp_model_t *m, const char *name, float init);
/* Stochastic depth (torchvision.ops.StochasticDepth(p, "row"), DP_OP_DROP_PATH):
 * in training each example kept whole with probability 1 - p and scaled by
 * 1 / (1 - p), else zeroed; the identity in inference. */
dp_status_t dp_model_add_drop_path(dp_model_t *m, float p);
/* DP_OP_RELU, DP_OP_RELU6, DP_OP_SIGMOID, DP_OP_TANH, DP_OP_HARDSWISH, DP_OP_HARDSIGMOID, DP_OP_GELU
 * or DP_OP_SILU. */
dp_status_t dp_model_add_activation(dp_model_t *m, dp_op_kind_t kind);
dp_status_t dp_model_add_global_avg_pool(dp_model_t *m);
/* The next layer reads output `from` instead of the previous one (Darknet's
 * [route]); adds no op. The route counts as a layer: its output number is
 * an alias of output `from`. */
dp_status_t dp_model_add_route(dp_model_t *m, int from);
/* previous output + output `from` (same shapes), optionally followed by a ReLU:
 * the skip connection of a residual block. */
dp_status_t dp_model_add_residual(dp_model_t *m, int from, int relu);
/* output `from` (C, H, W) times the previous output (C, 1, 1), one factor
 * per channel (DP_OP_SCALE_CHANNELS): a squeeze-excitation block's end. */
dp_status_t dp_model_add_scale_channels(dp_model_t *m, int from);
/* output `from` (Ca, H, W) and the previous output (Cb, H, W) joined along
 * the channels, (Ca + Cb, H, W): torch.cat([from, previous], 1)
 * (DP_OP_CONCAT), DenseNet's concatenation of features. */
dp_status_t dp_model_add_concat(dp_model_t *m, int from);

/* The built-in networks: "lenet" (d2l 12.5), "lenet-paddle" (the
 * PaddlePaddle tutorial's MNIST CNN), "resnet18" (d2l 13.6's ResNet-18 with
 * batch norm; parameter names as its PyTorch state_dict) and "alexnet" (an
 * AlexNet scaled to 28x28, with dropout; see src/nn/builtin_models.c), all for 1x28x28
 * inputs, 10 classes. */
dp_status_t dp_model_builtin(const char *name, dp_model_t **out);
/* Names of the built-in models, NULL-terminated. */
extern const char *const dp_builtin_models[];

const char *dp_model_name(const dp_model_t *m);
/* The model's outputs against the `classes` of the data it trains on or is
 * evaluated on (`data`: "training data", "test data"; `name` names the
 * model): fewer is DP_ERR_ARG naming both counts and the labels that have
 * no output; more writes a warning into `warning` (outputs that are no
 * class), else "" there. */
dp_status_t dp_model_check_classes(const dp_model_t *m, const char *name, int classes, const char *data,
                                   char *warning, size_t size);
/* Samples of (c, h, w) against the model's input: DP_ERR_ARG, one line
 * "WHAT samples are C x H x W (C x H x W), model NAME takes ..." when they
 * differ (what: "step: the batch's"; name names the model). */
dp_status_t dp_model_check_input(const dp_model_t *m, const char *name, const char *what, int c, int h, int w);
/* The model file's text the model was built from (model_file.h:
 * dp_model_parse, dp_model_load_file, dp_model_load of a file),
 * NUL-terminated, its length in *len (len may be NULL); NULL (and 0) for a
 * built-in network or one built with the calls below. Checkpoints carry it
 * (checkpoint.h, "model_text"), so they rebuild the model anywhere. */
const char *dp_model_source(const dp_model_t *m, size_t *len);
/* Floats in the flat buffer: the trained parameters first, then the frozen
 * ones (dp_model_freeze; none unless frozen), then the buffers (running
 * statistics); frozen parameters and buffers have no gradient, are not
 * summed between devices and are not touched by the optimizer. */
size_t dp_model_num_params(const dp_model_t *m);
/* The weight-decay groups of the model's trained floats (optim.h,
 * dp_optimizer_set_decay_ranges): each batch norm layer's weight and bias
 * DP_DECAY_NORM, every other bias DP_DECAY_BIAS (a batch norm's bias too
 * when config->has_bias_weight_decay), sorted by offset; *ranges (free
 * it) has *count entries. Frozen tensors have no optimizer state: none. */
dp_status_t dp_model_decay_ranges(const dp_model_t *m, const dp_optim_config_t *config, dp_decay_range_t **ranges,
                                  int *count);

/* The first dp_model_num_trainable() floats of the flat buffer: the
 * parameters that train (trainable and not frozen). */
size_t dp_model_num_trainable(const dp_model_t *m);
/* The frozen floats, right after the trained ones: the buffers start at
 * dp_model_num_trainable() + dp_model_num_frozen(). */
size_t dp_model_num_frozen(const dp_model_t *m);
int dp_model_num_param_tensors(const dp_model_t *m);
const dp_param_info_t *dp_model_param(const dp_model_t *m, int i);
/* Input (C, H, W) and the output width (classes). */
void dp_model_input_shape(const dp_model_t *m, int *channels, int *height, int *width);
int dp_model_num_outputs(const dp_model_t *m);

/* Fills the flat buffer with the model's initialisation, drawing from rng
 * in parameter order. */
void dp_model_init_params(const dp_model_t *m, float *params, dp_rng_t *rng);

/* Runs the network forward on `x` (N, C, H, W), recording on the tape.
 * grads NULL: no gradients (evaluation). *logits is (N, outputs).
 * Training behaviour (batch statistics, dropout) iff grads != NULL; dropout
 * seeds 0 and example offset 0, per-device batch statistics. */
dp_status_t dp_model_forward(const dp_model_t *m, dp_tape_t *tape, float *params,
                             float *grads, dp_tensor_t *x, dp_tensor_t **logits);

/* What a training or evaluation pass needs beyond the tensors. */
typedef struct {
    int training;             /* batch norm: batch statistics + running update; dropout on */
    uint64_t seed;            /* dropout: layer i's masks use a seed mixed from (seed, i) */
    int64_t example_offset;   /* global index of x's first example in the minibatch */
    const dp_stat_sync_t *stat_sync; /* NULL: each device's own batch statistics */
    /* The layers no backward reads (every layer of an inference pass, a
     * training pass's frozen prefix: dp_model_frozen_prefix) run by this
     * runner (no_grad.h), in memory their outputs leave as they die; the
     * outputs later layers read stay valid until its next forward. NULL:
     * every output in `tape`'s arena until it is reset. */
    struct dp_no_grad *no_grad;
} dp_forward_opts_t;

dp_status_t dp_model_forward_opts(const dp_model_t *m, dp_tape_t *tape, float *params,
                                  float *grads, dp_tensor_t *x, const dp_forward_opts_t *opts,
                                  dp_tensor_t **logits);

/* The frozen prefix: how many of the first layers a training pass runs
 * with no gradient (no layer that trains or reads one that does); 0 when
 * the first layer trains. Backward never reads their outputs, only the
 * later layers' forward does (no_grad.h). */
int dp_model_frozen_prefix(const dp_model_t *m);

/* --- Frozen layers (fine-tuning) ----------------------------------------------
 * A layer is named by its parameters' prefix ("conv1" for "conv1.weight",
 * "layer1.0.bn1"); layers without parameters have no name here. `layers`
 * is a comma-separated list of names or prefixes of whole dotted
 * components: "layer1" matches layer1 and layer1.0.conv1, not layer10.
 * dp_model_freeze freezes every layer a name matches: its weight and bias
 * (torch's requires_grad_(False)) get no gradient, no optimizer state and
 * are never changed; its batch norm, if it is one, normalises with its
 * running statistics and leaves them as they are (torch's .eval() on a
 * frozen backbone) in training passes too. The flat buffer is laid out
 * again: [trained | frozen | buffers], so that every sum between devices
 * and ranks and every optimizer update (which cover the first
 * dp_model_num_trainable floats) leave the frozen parameters out. Fails
 * (DP_ERR_ARG, nothing changed) naming a name that matches no layer, an
 * empty name, or a list that would leave nothing to train. NULL or "":
 * nothing frozen. Call before making a trainer for the model; the list is
 * kept (dp_model_frozen) and recorded by checkpoints. */
dp_status_t dp_model_freeze(dp_model_t *m, const char *layers);
/* What dp_model_freeze(m, layers) would freeze, without changing m:
 * frozen[i] = 1 for parameter i (dp_model_param) it would freeze, else 0
 * (num_param_tensors entries); the same failures. */
dp_status_t dp_model_freeze_mask(const dp_model_t *m, const char *layers, unsigned char *frozen);
/* The freeze list of a network's backbone: every layer with parameters but
 * the head (dp_model_head_layer), by the first components of their names
 * ("layer1" for layer1.0.conv1) unless the head's name starts with the same
 * one ("features" for MobileNetV2, whose head is classifier.1): fastai's
 * freeze(), Keras' base_model.trainable = False. *out is the caller's to
 * free. One line when the model has no linear or conv layer, or none below it with
 * parameters. */
dp_status_t dp_model_backbone_list(const dp_model_t *m, char **out);
/* The list the model was frozen with ("" when nothing is frozen). */
const char *dp_model_frozen(const dp_model_t *m);
/* Whether output `output` (0: the input, i: layer i's) carries a gradient
 * in a training pass: some layer on a path to it has trained parameters.
 * Backward stops below the lowest such layer: the ops of outputs without a
 * gradient never run backward. */
int dp_model_output_needs_grad(const dp_model_t *m, int output);

/* --- Reading a model's layers (export, tools) ------------------------------------
 * The same kinds in the same order as the builder calls above. */
typedef enum {
    DP_LAYER_CONV,
    DP_LAYER_CONV_TRANSPOSE,
    DP_LAYER_POOL,            /* op: DP_OP_MAX_POOL or DP_OP_AVG_POOL */
    DP_LAYER_ACTIVATION,      /* op: DP_OP_RELU, DP_OP_RELU6, DP_OP_SIGMOID, DP_OP_TANH, DP_OP_HARDSWISH, ... DP_OP_GELU */
    DP_LAYER_FLATTEN,
    DP_LAYER_LINEAR,
    DP_LAYER_BATCH_NORM,
    DP_LAYER_DROPOUT,         /* attr.dropout_p */
    DP_LAYER_GLOBAL_AVG_POOL,
    DP_LAYER_ROUTE,           /* no op: its output is output `input` */
    DP_LAYER_RESIDUAL,        /* output `input` + output `other`; attr.fuse_relu: then a ReLU */
    DP_LAYER_SCALE_CHANNELS,  /* output `other` (N, C, H, W) times output `input` (N, C, 1, 1) */
    DP_LAYER_LAYER_NORM,      /* layer norm over the channels at every position (attr.eps) */
    DP_LAYER_LAYER_SCALE,     /* op DP_OP_SCALE_CHANNELS by the (C, 1, 1) parameter `weight` (name.layer_scale) */
    DP_LAYER_DROP_PATH,       /* attr.dropout_p: stochastic depth, one draw per example */
    DP_LAYER_CONCAT,          /* output `other`'s channels, then output `input`'s */
} dp_layer_kind_t;

typedef struct {
    dp_layer_kind_t kind;
    dp_op_kind_t op;    /* the op the layer runs */
    dp_op_attr_t attr;  /* as built (kernel, stride, pad, dilation, groups, eps, ...) */
    int input;          /* the output it reads (0 = the model's input) */
    int other;          /* residual, scale_channels, concat: the second output it reads; -1 otherwise */
    int weight, bias;   /* indices into the parameter table (dp_model_param), -1 if none */
    int running_mean, running_var; /* batch norm's buffers, -1 if none */
    int out_ndim;       /* its output's shape without the batch dim */
    int out_shape[DP_MAX_DIMS];
} dp_layer_info_t;

/* Layer `layer` (1-based: its output number); DP_ERR_ARG if out of range. */
dp_status_t dp_model_layer(const dp_model_t *m, int layer, dp_layer_info_t *out);

/* The classifier's head, the layer --num-classes resizes and --fresh-head
 * and --freeze-backbone leave training: the last linear layer, or in a
 * network without one its last conv layer (torchvision's SqueezeNet: a 1x1
 * conv to the classes, ReLU, global average pooling); 0 when it has neither. */
int dp_model_head_layer(const dp_model_t *m);

#endif
