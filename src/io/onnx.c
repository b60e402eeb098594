/* onnx.c - the ONNX export (onnx.h): a small protobuf encoder for the
 * messages of onnx.proto that a feed-forward graph needs, and the mapping
 * of dptrain's layers to ONNX ops.
 * (hardswish and hardsigmoid as HardSigmoid [and Mul], a squeeze-excitation
 * scaling as a broadcast Mul, gelu as Mul, Erf, Add, Mul, Mul and a layer
 * norm over the channels as ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div,
 * Mul, Add: opset 13 has neither Gelu nor LayerNormalization; silu as
 * x * Sigmoid(x): opset 13 has no SiLU).
 *
 * Protobuf wire format, as used here: every field is a key varint
 * (field_number << 3 | wire_type) and a value: wire type 0 a varint
 * (int64 / int32 / enum; negative numbers as 10-byte two's complement),
 * 2 a varint length and that many bytes (strings, bytes, nested messages),
 * 5 four little-endian bytes (float). Repeated fields are written one key
 * per element (proto2's unpacked form, which every reader accepts). Nested
 * messages are built in their own buffer and appended with their length.
 *
 * Field numbers (onnx.proto, IR version 7):
 *   ModelProto         ir_version 1, producer_name 2, producer_version 3,
 *                      doc_string 6, graph 7, opset_import 8, metadata_props 14
 *   StringStringEntryProto key 1, value 2
 *   OperatorSetIdProto domain 1, version 2
 *   GraphProto         node 1, name 2, initializer 5, input 11, output 12
 *   NodeProto          input 1, output 2, name 3, op_type 4, attribute 5
 *   AttributeProto     name 1, f 2, i 3, ints 8, type 20 (FLOAT 1, INT 2, INTS 7)
 *   TensorProto        dims 1, data_type 2 (FLOAT 1), name 8, raw_data 9
 *   ValueInfoProto     name 1, type 2; TypeProto tensor_type 1;
 *   TypeProto.Tensor   elem_type 1, shape 2; TensorShapeProto dim 1;
 *   Dimension          dim_value 1, dim_param 2
 */
#include "dptrain/onnx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/io.h"

/* --- protobuf encoding ------------------------------------------------------------ */

typedef struct {
    unsigned char *data;
    size_t size, capacity;
    int failed; /* an allocation failed: the buffer is unusable */
} pb_t;

enum { WIRE_VARINT = 0, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void pb_free(pb_t *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

static void pb_raw(pb_t *b, const void *bytes, size_t n) {
    if (b->failed) return;
    if (b->size + n > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 256;
        while (capacity < b->size + n) capacity *= 2;
        unsigned char *grown = realloc(b->data, capacity);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->data = grown;
        b->capacity = capacity;
    }
    if (n) memcpy(b->data + b->size, bytes, n);
    b->size += n;
}

static void pb_varint(pb_t *b, uint64_t v) {
    unsigned char bytes[10];
    int n = 0;
    do {
        bytes[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) bytes[n] |= 0x80;
        n++;
    } while (v);
    pb_raw(b, bytes, (size_t)n);
}

static void pb_key(pb_t *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_int(pb_t *b, int field, int64_t v) {
    pb_key(b, field, WIRE_VARINT);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(pb_t *b, int field, const void *bytes, size_t n) {
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, n);
    pb_raw(b, bytes, n);
}

static void pb_string(pb_t *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

static void pb_float(pb_t *b, int field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                           (unsigned char)(u >> 24)};
    pb_key(b, field, WIRE_FIXED32);
    pb_raw(b, le, 4);
}

/* Appends `child` as a nested message and frees it. */
static void pb_message(pb_t *b, int field, pb_t *child) {
    if (child->failed) b->failed = 1;
    else pb_bytes(b, field, child->data, child->size);
    pb_free(child);
}

/* --- ONNX messages ------------------------------------------------------------------ */

enum { ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_INTS = 7 };
enum { ONNX_FLOAT = 1 };

static void attr_int(pb_t *node, const char *name, int64_t v) {
    pb_t a = {0};
    pb_string(&a, 1, name);
    pb_int(&a, 3, v);
    pb_int(&a, 20, ATTR_INT);
    pb_message(node, 5, &a);
}

static void attr_float(pb_t *node, const char *name, float v) {
    pb_t a = {0};
    pb_string(&a, 1, name);
    pb_float(&a, 2, v);
    pb_int(&a, 20, ATTR_FLOAT);
    pb_message(node, 5, &a);
}

static void attr_ints(pb_t *node, const char *name, const int *v, int n) {
    pb_t a = {0};
    pb_string(&a, 1, name);
    for (int i = 0; i < n; i++) pb_int(&a, 8, v[i]);
    pb_int(&a, 20, ATTR_INTS);
    pb_message(node, 5, &a);
}

/* A node's inputs (NULL entries skipped), output, name and op; the caller
 * adds attributes and then appends it with pb_message(graph, 1, node). */
static pb_t node_begin(const char *op_type, const char *name, const char *const *inputs, int num_inputs,
                       const char *output) {
    pb_t n = {0};
    for (int i = 0; i < num_inputs; i++)
        if (inputs[i]) pb_string(&n, 1, inputs[i]);
    pb_string(&n, 2, output);
    pb_string(&n, 3, name);
    pb_string(&n, 4, op_type);
    return n;
}

/* A float32 initializer (little-endian raw data). */
static void add_initializer(pb_t *graph, const char *name, const int *dims, int ndim, const float *values) {
    pb_t t = {0};
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        pb_int(&t, 1, dims[i]);
        count *= (size_t)dims[i];
    }
    pb_int(&t, 2, ONNX_FLOAT);
    pb_string(&t, 8, name);
    /* raw_data: little-endian float32, written in place */
    pb_key(&t, 9, WIRE_LEN);
    pb_varint(&t, count * 4);
    size_t at = t.size;
    pb_raw(&t, values, count * 4); /* host order; rewritten little-endian below */
    {
        if (!t.failed) {
            unsigned char *p = t.data + at;
            for (size_t i = 0; i < count; i++) {
                uint32_t u;
                memcpy(&u, &values[i], 4);
                p[4 * i] = (unsigned char)u;
                p[4 * i + 1] = (unsigned char)(u >> 8);
                p[4 * i + 2] = (unsigned char)(u >> 16);
                p[4 * i + 3] = (unsigned char)(u >> 24);
            }
        }
    }
    pb_message(graph, 5, &t);
}

/* A graph input or output: float32 of shape (batch, dims...). */
static void add_value_info(pb_t *graph, int field, const char *name, const int *dims, int ndim) {
    pb_t shape = {0};
    pb_t dim = {0};
    pb_string(&dim, 2, "batch");
    pb_message(&shape, 1, &dim);
    for (int i = 0; i < ndim; i++) {
        dim = (pb_t){0};
        pb_int(&dim, 1, dims[i]);
        pb_message(&shape, 1, &dim);
    }
    pb_t tensor = {0};
    pb_int(&tensor, 1, ONNX_FLOAT);
    pb_message(&tensor, 2, &shape);
    pb_t type = {0};
    pb_message(&type, 1, &tensor);
    pb_t info = {0};
    pb_string(&info, 1, name);
    pb_message(&info, 2, &type);
    pb_message(graph, field, &info);
}

/* --- layers to nodes ------------------------------------------------------------------ */

static const char *layer_kind_name(dp_layer_kind_t kind) {
    switch (kind) {
    case DP_LAYER_CONV: return "conv";
    case DP_LAYER_CONV_TRANSPOSE: return "conv_transpose";
    case DP_LAYER_POOL: return "pool";
    case DP_LAYER_ACTIVATION: return "activation";
    case DP_LAYER_FLATTEN: return "flatten";
    case DP_LAYER_LINEAR: return "linear";
    case DP_LAYER_BATCH_NORM: return "batchnorm";
    case DP_LAYER_DROPOUT: return "dropout";
    case DP_LAYER_DROP_PATH: return "drop_path";
    case DP_LAYER_GLOBAL_AVG_POOL: return "global_avgpool";
    case DP_LAYER_ROUTE: return "route";
    case DP_LAYER_RESIDUAL: return "residual";
    case DP_LAYER_SCALE_CHANNELS: return "scale_channels";
    case DP_LAYER_LAYER_NORM: return "layernorm";
    case DP_LAYER_LAYER_SCALE: return "layer_scale";
    case DP_LAYER_CONCAT: return "concat";
    }
    return "unknown";
}

#define NAME_MAX_LEN 96

/* Spatial attributes (kernel_shape, strides, pads begin+end, dilations) of
 * a conv-like or pooling node with `spatial` dims. kernel NULL: not written. */
static void spatial_attrs(pb_t *node, const dp_op_attr_t *a, int spatial, const int *kernel, int dilations) {
    int pads[6];
    for (int d = 0; d < spatial; d++) pads[d] = pads[spatial + d] = a->pad[d];
    if (kernel) attr_ints(node, "kernel_shape", kernel, spatial);
    attr_ints(node, "strides", a->stride, spatial);
    attr_ints(node, "pads", pads, 2 * spatial);
    if (dilations) attr_ints(node, "dilations", a->dilation, spatial);
}

/* relu6(x) = min(max(x, 0), 6) as Relu(x) - Relu(x - 6): opset 13's Clip
 * takes its bounds as inputs, which OpenCV 4.6's importer refuses (it reads
 * Clip with attributes only, opset < 11), and Min with a constant it cannot
 * read either; Relu and Sub every runtime has. Exact up to one rounding of
 * x - 6 for x > 6. */
#define RELU6_CONSTANT "relu6.six"
static void add_relu6(pb_t *graph, const char *node_name, const char *in, const char *out) {
    char relu[NAME_MAX_LEN + 16], shifted[NAME_MAX_LEN + 16], relu_shifted[NAME_MAX_LEN + 24];
    snprintf(relu, sizeof relu, "%s.relu", node_name);
    snprintf(shifted, sizeof shifted, "%s.minus6", node_name);
    snprintf(relu_shifted, sizeof relu_shifted, "%s.relu_minus6", node_name);
    const char *relu_in[1] = {in}, *sub_in[2] = {in, RELU6_CONSTANT}, *relu2_in[1] = {shifted};
    const char *diff_in[2] = {relu, relu_shifted};
    pb_t node = node_begin("Relu", relu, relu_in, 1, relu);
    pb_message(graph, 1, &node);
    node = node_begin("Sub", shifted, sub_in, 2, shifted);
    pb_message(graph, 1, &node);
    node = node_begin("Relu", relu_shifted, relu2_in, 1, relu_shifted);
    pb_message(graph, 1, &node);
    node = node_begin("Sub", node_name, diff_in, 2, out);
    pb_message(graph, 1, &node);
}

/* hardsigmoid(x) = relu6(x + 3) / 6 as HardSigmoid(x; alpha 1/6, beta 1/2)
 * = max(0, min(1, x / 6 + 1 / 2)), and hardswish(x) as x times that (opset
 * 13 has no HardSwish: it came with 14). Both OpenCV 4.6 reads. Equal up to
 * the rounding of x / 6 + 1 / 2 against (x + 3) / 6. */
static void add_hard_activation(pb_t *graph, const char *node_name, const char *in, const char *out, int swish) {
    char gate[NAME_MAX_LEN + 16];
    snprintf(gate, sizeof gate, "%s.hardsigmoid", node_name);
    const char *gate_in[1] = {in}, *mul_in[2] = {in, gate};
    pb_t node = node_begin("HardSigmoid", swish ? gate : node_name, gate_in, 1, swish ? gate : out);
    attr_float(&node, "alpha", 1.0f / 6.0f);
    attr_float(&node, "beta", 0.5f);
    pb_message(graph, 1, &node);
    if (!swish) return;
    node = node_begin("Mul", node_name, mul_in, 2, out);
    pb_message(graph, 1, &node);
}

/* gelu(x) = x * 0.5 * (1 + erf(x * M_SQRT1_2)), torch's exact GELU in its
 * order, with three constants shared by every gelu (GELU_CONSTANTS). */
#define GELU_SQRT1_2 "gelu.sqrt1_2"
#define GELU_ONE "gelu.one"
#define GELU_HALF "gelu.half"
static void add_gelu(pb_t *graph, const char *node_name, const char *in, const char *out, int *have_constants) {
    if (!*have_constants) {
        int one = 1;
        const float sqrt1_2 = 0.70710678118654752440f, unit = 1.0f, half = 0.5f;
        add_initializer(graph, GELU_SQRT1_2, &one, 1, &sqrt1_2);
        add_initializer(graph, GELU_ONE, &one, 1, &unit);
        add_initializer(graph, GELU_HALF, &one, 1, &half);
        *have_constants = 1;
    }
    char scaled[NAME_MAX_LEN + 16], erf[NAME_MAX_LEN + 16], cdf[NAME_MAX_LEN + 16], half_x[NAME_MAX_LEN + 16];
    snprintf(scaled, sizeof scaled, "%s.scaled", node_name);
    snprintf(erf, sizeof erf, "%s.erf", node_name);
    snprintf(cdf, sizeof cdf, "%s.one_plus_erf", node_name);
    snprintf(half_x, sizeof half_x, "%s.half_x", node_name);
    const char *scale_in[2] = {in, GELU_SQRT1_2}, *erf_in[1] = {scaled}, *cdf_in[2] = {GELU_ONE, erf};
    const char *half_in[2] = {in, GELU_HALF}, *out_in[2] = {half_x, cdf};
    pb_t node = node_begin("Mul", scaled, scale_in, 2, scaled);
    pb_message(graph, 1, &node);
    node = node_begin("Erf", erf, erf_in, 1, erf);
    pb_message(graph, 1, &node);
    node = node_begin("Add", cdf, cdf_in, 2, cdf);
    pb_message(graph, 1, &node);
    node = node_begin("Mul", half_x, half_in, 2, half_x);
    pb_message(graph, 1, &node);
    node = node_begin("Mul", node_name, out_in, 2, out);
    pb_message(graph, 1, &node);
}

/* A layer norm over the channels (axis 1) of an (N, C, ...) input with
 * in_ndim dims besides N: mean = ReduceMean(x), d = x - mean, var =
 * ReduceMean(d d), y = d / Sqrt(var + eps) * weight + bias, the weight and
 * bias as (C, 1, ...) copies (broadcast over the positions) named
 * NODE.weight and NODE.bias. */
static dp_status_t add_layer_norm(pb_t *graph, const dp_model_t *model, const float *params, const dp_layer_info_t *l,
                                  int in_ndim, const int *in_shape, const char *in, const char *node_name,
                                  const char *out) {
    if (l->weight < 0 || l->bias < 0 || in_ndim < 1) return DP_ERR_ARG;
    char t[9][NAME_MAX_LEN + 16];
    static const char *const suffix[9] = {"mean", "centered", "squared", "var", "var_eps", "std", "normalized",
                                          "weight", "bias"};
    for (int k = 0; k < 9; k++) snprintf(t[k], sizeof t[k], "%s.%s", node_name, suffix[k]);
    char eps_name[NAME_MAX_LEN + 16], scaled[NAME_MAX_LEN + 16];
    snprintf(eps_name, sizeof eps_name, "%s.eps", node_name);
    snprintf(scaled, sizeof scaled, "%s.scaled", node_name);
    int dims[DP_MAX_DIMS] = {in_shape[0]}, one = 1, axis = 1;
    for (int d = 1; d < in_ndim; d++) dims[d] = 1;
    const float eps = l->attr.eps;
    add_initializer(graph, eps_name, &one, 1, &eps);
    add_initializer(graph, t[7], dims, in_ndim, params + dp_model_param(model, l->weight)->offset);
    add_initializer(graph, t[8], dims, in_ndim, params + dp_model_param(model, l->bias)->offset);
    const char *mean_in[1] = {in}, *sub_in[2] = {in, t[0]}, *sq_in[2] = {t[1], t[1]}, *var_in[1] = {t[2]};
    const char *eps_in[2] = {t[3], eps_name}, *std_in[1] = {t[4]}, *div_in[2] = {t[1], t[5]};
    const char *mul_in[2] = {t[6], t[7]}, *add_in[2] = {scaled, t[8]};
    pb_t node = node_begin("ReduceMean", t[0], mean_in, 1, t[0]);
    attr_ints(&node, "axes", &axis, 1);
    attr_int(&node, "keepdims", 1);
    pb_message(graph, 1, &node);
    node = node_begin("Sub", t[1], sub_in, 2, t[1]);
    pb_message(graph, 1, &node);
    node = node_begin("Mul", t[2], sq_in, 2, t[2]);
    pb_message(graph, 1, &node);
    node = node_begin("ReduceMean", t[3], var_in, 1, t[3]);
    attr_ints(&node, "axes", &axis, 1);
    attr_int(&node, "keepdims", 1);
    pb_message(graph, 1, &node);
    node = node_begin("Add", t[4], eps_in, 2, t[4]);
    pb_message(graph, 1, &node);
    node = node_begin("Sqrt", t[5], std_in, 1, t[5]);
    pb_message(graph, 1, &node);
    node = node_begin("Div", t[6], div_in, 2, t[6]);
    pb_message(graph, 1, &node);
    node = node_begin("Mul", scaled, mul_in, 2, scaled);
    pb_message(graph, 1, &node);
    node = node_begin("Add", node_name, add_in, 2, out);
    pb_message(graph, 1, &node);
    return DP_OK;
}

/* silu as torch.onnx exports it at opset 13: Sigmoid, then Mul by x. */
static void add_silu(pb_t *graph, const char *node_name, const char *in, const char *out) {
    char gate[NAME_MAX_LEN + 16];
    snprintf(gate, sizeof gate, "%s.sigmoid", node_name);
    const char *gate_in[1] = {in}, *mul_in[2] = {in, gate};
    pb_t node = node_begin("Sigmoid", gate, gate_in, 1, gate);
    pb_message(graph, 1, &node);
    node = node_begin("Mul", node_name, mul_in, 2, out);
    pb_message(graph, 1, &node);
}

/* The nodes of an activation layer (op) from `in` to `out`; the shared
 * constants of relu6 and gelu added once (*have_six, *have_gelu).
 * DP_ERR_ARG (no message) for an op ONNX cannot express. */
static dp_status_t add_activation(pb_t *graph, dp_op_kind_t op, const char *node_name, const char *in,
                                  const char *out, int *have_six, int *have_gelu) {
    if (op == DP_OP_RELU6) {
        if (!*have_six) { /* the constant 6, one initializer for every relu6 */
            int one = 1;
            const float six = 6.0f;
            add_initializer(graph, RELU6_CONSTANT, &one, 1, &six);
            *have_six = 1;
        }
        add_relu6(graph, node_name, in, out);
    } else if (op == DP_OP_HARDSWISH || op == DP_OP_HARDSIGMOID) {
        add_hard_activation(graph, node_name, in, out, op == DP_OP_HARDSWISH);
    } else if (op == DP_OP_GELU) {
        add_gelu(graph, node_name, in, out, have_gelu);
    } else if (op == DP_OP_SILU) {
        add_silu(graph, node_name, in, out);
    } else {
        const char *type = op == DP_OP_RELU ? "Relu" : op == DP_OP_SIGMOID ? "Sigmoid" : op == DP_OP_TANH ? "Tanh" : NULL;
        if (!type) return DP_ERR_ARG;
        const char *inputs[1] = {in};
        pb_t node = node_begin(type, node_name, inputs, 1, out);
        pb_message(graph, 1, &node);
    }
    return DP_OK;
}

/* Every parameter as an initializer under its name (a 1x1 convolution's
 * 2-D weight, weight_1x1[p], as (OUT, IN, 1, 1)), the graph's name, its
 * input (batch, C, H, W) and output (batch, classes). */
static void finish_graph(pb_t *graph, const dp_model_t *model, const float *params, const char *weight_1x1) {
    for (int p = 0; p < dp_model_num_param_tensors(model); p++) {
        const dp_param_info_t *info = dp_model_param(model, p);
        int dims_1x1[4] = {info->shape[0], info->shape[1], 1, 1};
        add_initializer(graph, info->name, weight_1x1[p] ? dims_1x1 : info->shape, weight_1x1[p] ? 4 : info->ndim,
                        params + info->offset);
    }
    pb_string(graph, 2, dp_model_name(model));
    int c, h, w;
    dp_model_input_shape(model, &c, &h, &w);
    int in_dims[3] = {c, h, w};
    add_value_info(graph, 11, "input", in_dims, 3);
    int classes = dp_model_num_outputs(model);
    add_value_info(graph, 12, "logits", &classes, 1);
}

/* The BatchNormalization node of layer l (its running statistics; a
 * layer without affine parameters gets scale 1 and shift 0 as constants in
 * the graph). */
static dp_status_t batch_norm_node(pb_t *graph, const dp_model_t *model, const dp_layer_info_t *l, int channels,
                                   const char *in, const char *node_name, const char *out, pb_t *node) {
    const dp_param_info_t *w = l->weight >= 0 ? dp_model_param(model, l->weight) : NULL;
    const dp_param_info_t *b = l->bias >= 0 ? dp_model_param(model, l->bias) : NULL;
    char scale[NAME_MAX_LEN + 8] = "", shift[NAME_MAX_LEN + 8] = "";
    if (!w) {
        snprintf(scale, sizeof scale, "%s.scale", node_name);
        float *ones = dp_alloc(sizeof(float) * (size_t)channels, "batch norm scale");
        if (!ones) return DP_ERR_NOMEM;
        for (int c = 0; c < channels; c++) ones[c] = 1.0f;
        add_initializer(graph, scale, &channels, 1, ones);
        free(ones);
    }
    if (!b) {
        snprintf(shift, sizeof shift, "%s.shift", node_name);
        float *zeros = dp_alloc_zeroed((size_t)channels, sizeof(float), "batch norm shift");
        if (!zeros) return DP_ERR_NOMEM;
        add_initializer(graph, shift, &channels, 1, zeros);
        free(zeros);
    }
    const char *bn_inputs[5] = {in, w ? w->name : scale, b ? b->name : shift,
                                dp_model_param(model, l->running_mean)->name,
                                dp_model_param(model, l->running_var)->name};
    *node = node_begin("BatchNormalization", node_name, bn_inputs, 5, out);
    attr_float(node, "epsilon", l->attr.eps);
    attr_float(node, "momentum", 1.0f - l->attr.momentum); /* ONNX's momentum weighs the old value */
    return DP_OK;
}

/* The model proto around graph (taken: freed here), with its producer and
 * metadata_props, written to path whole or not at all. */
static dp_status_t write_model(pb_t *graph, const char *path, const char *producer_version,
                               const dp_onnx_prop_t *props, int num_props) {
    pb_t onnx = {0};
    pb_int(&onnx, 1, DP_ONNX_IR_VERSION);
    pb_string(&onnx, 2, "dptrain");
    if (producer_version) pb_string(&onnx, 3, producer_version);
    pb_string(&onnx, 6, "exported by dptrain export --onnx: inference form (batch norm with running "
                        "statistics, no dropout); input: images scaled to [0, 1]");
    pb_message(&onnx, 7, graph);
    pb_t opset = {0};
    pb_string(&opset, 1, "");
    pb_int(&opset, 2, DP_ONNX_OPSET);
    pb_message(&onnx, 8, &opset);
    for (int i = 0; i < num_props; i++) {
        pb_t prop = {0};
        pb_string(&prop, 1, props[i].key);
        pb_string(&prop, 2, props[i].value);
        pb_message(&onnx, 14, &prop);
    }
    if (onnx.failed) {
        pb_free(&onnx);
        return dp_fail(DP_ERR_NOMEM, "export: out of memory building the ONNX model for %s", path);
    }
    char tmp_path[4096];
    FILE *f;
    dp_status_t status = dp_file_begin(path, tmp_path, sizeof tmp_path, &f);
    if (status == DP_OK) {
        fwrite(onnx.data, 1, onnx.size, f);
        status = dp_file_commit(f, tmp_path, path); /* checks the stream's error flag */
    }
    pb_free(&onnx);
    return status;
}

/* dst = src, names of NAME_MAX_LEN bytes; src is an earlier layer's name (or the input's) and may be dst's
 * own bytes: copied as memmove, which may overlap. */
static void copy_name(char *dst, const char *src) {
    size_t len = strnlen(src, NAME_MAX_LEN - 1);
    memmove(dst, src, len);
    dst[len] = '\0';
}

/* The Relu a conv or residual fuses: NODE.relu from its op's result `pre_relu` to `out`. */
static void add_fused_relu(pb_t *graph, const char *node_name, const char *pre_relu, const char *out) {
    char relu_name[NAME_MAX_LEN + 8];
    snprintf(relu_name, sizeof relu_name, "%s.relu", node_name);
    const char *relu_in[1] = {pre_relu};
    pb_t node = node_begin("Relu", relu_name, relu_in, 1, out);
    pb_message(graph, 1, &node);
}

dp_status_t dp_onnx_export(const dp_model_t *model, const float *params, const char *path,
                           const char *producer_version, const dp_onnx_prop_t *props, int num_props) {
    int num_layers = dp_model_num_layers(model);
    if (num_layers < 1) return dp_fail(DP_ERR_ARG, "export: model %s has no layers", dp_model_name(model));
    /* names[i]: the ONNX tensor holding output i */
    char (*names)[NAME_MAX_LEN] = dp_alloc_zeroed((size_t)num_layers + 1, NAME_MAX_LEN, "ONNX tensor names");
    if (!names) return DP_ERR_NOMEM;
    /* weight_1x1[p]: parameter p is a 1x1 convolution's weight stored 2-D (dp_model_set_conv_weight_2d) */
    char *weight_1x1 = dp_alloc_zeroed((size_t)dp_model_num_param_tensors(model) + 1, 1, "ONNX weight shapes");
    if (!weight_1x1) {
        free(names);
        return DP_ERR_NOMEM;
    }
    snprintf(names[0], NAME_MAX_LEN, "input");
    pb_t graph = {0};
    dp_status_t status = DP_OK;
    int last_is_alias = 0, have_six = 0, have_gelu = 0;
    for (int i = 1; i <= num_layers && status == DP_OK; i++) {
        dp_layer_info_t l;
        if ((status = dp_model_layer(model, i, &l)) != DP_OK) break;
        const char *in = names[l.input];
        int in_shape[DP_MAX_DIMS];
        int in_ndim = dp_model_output_shape(model, l.input, in_shape);
        int spatial = in_ndim - 1;
        const dp_param_info_t *w = l.weight >= 0 ? dp_model_param(model, l.weight) : NULL;
        const dp_param_info_t *b = l.bias >= 0 ? dp_model_param(model, l.bias) : NULL;
        char node_name[NAME_MAX_LEN];
        /* "layer3.conv", "layer4.relu", "layer5.max_pool": the layer number and what it does */
        const char *what = l.kind == DP_LAYER_ACTIVATION || l.kind == DP_LAYER_POOL ? dp_op_table[l.op].name
                                                                                   : layer_kind_name(l.kind);
        snprintf(node_name, sizeof node_name, "layer%d.%s", i, what);
        if (i == num_layers) snprintf(names[i], NAME_MAX_LEN, "logits");
        else snprintf(names[i], NAME_MAX_LEN, "%s", node_name);
        last_is_alias = 0;
        const char *inputs[5] = {in, w ? w->name : NULL, b ? b->name : NULL, NULL, NULL};
        pb_t node;
        /* a layer followed by a ReLU of its own (residual's fuse_relu) writes
         * its op's result here and the Relu writes names[i] */
        char pre_relu[NAME_MAX_LEN + 16];
        snprintf(pre_relu, sizeof pre_relu, "%s.pre_relu", node_name);
        switch (l.kind) {
        case DP_LAYER_ROUTE:
        case DP_LAYER_DROPOUT:
        case DP_LAYER_DROP_PATH:
            /* an alias: a route reads an earlier output; dropout and drop path are the identity in inference */
            copy_name(names[i], in);
            last_is_alias = 1;
            continue;
        case DP_LAYER_CONV:
        case DP_LAYER_CONV_TRANSPOSE: {
            if (!w || spatial < 1 || spatial > 3) goto unsupported;
            int is_t = l.kind == DP_LAYER_CONV_TRANSPOSE;
            if (!is_t && w->ndim == 2) weight_1x1[l.weight] = 1; /* stored as a linear layer's: written (OUT, IN, 1, 1) */
            node = node_begin(is_t ? "ConvTranspose" : "Conv", node_name, inputs, 3,
                              l.attr.fuse_relu ? pre_relu : names[i]);
            static const int one_by_one[2] = {1, 1};
            spatial_attrs(&node, &l.attr, spatial, w->ndim == 2 ? one_by_one : w->shape + 2, 1);
            attr_int(&node, "group", l.attr.groups);
            if (is_t) attr_ints(&node, "output_padding", l.attr.output_padding, spatial);
            break;
        }
        case DP_LAYER_POOL: {
            if (spatial < 1 || spatial > 3) goto unsupported;
            int is_max = l.op == DP_OP_MAX_POOL;
            if (!is_max && l.op != DP_OP_AVG_POOL) goto unsupported;
            node = node_begin(is_max ? "MaxPool" : "AveragePool", node_name, inputs, 1, names[i]);
            spatial_attrs(&node, &l.attr, spatial, l.attr.kernel, 0);
            if (!is_max) attr_int(&node, "count_include_pad", l.attr.count_include_pad ? 1 : 0);
            if (is_max && l.attr.ceil_mode) attr_int(&node, "ceil_mode", 1); /* opset >= 10 */
            break;
        }
        case DP_LAYER_GLOBAL_AVG_POOL:
            node = node_begin("GlobalAveragePool", node_name, inputs, 1, names[i]);
            break;
        case DP_LAYER_ACTIVATION:
            if (add_activation(&graph, l.op, node_name, in, names[i], &have_six, &have_gelu) != DP_OK)
                goto unsupported;
            continue;
        case DP_LAYER_FLATTEN:
            node = node_begin("Flatten", node_name, inputs, 1, names[i]);
            attr_int(&node, "axis", 1);
            break;
        case DP_LAYER_LINEAR:
            if (!w) goto unsupported;
            node = node_begin("Gemm", node_name, inputs, 3, names[i]);
            attr_int(&node, "transB", 1);
            break;
        case DP_LAYER_BATCH_NORM:
            if (l.running_mean < 0 || l.running_var < 0) goto unsupported;
            status = batch_norm_node(&graph, model, &l, in_shape[0], in, node_name, names[i], &node);
            break;
        case DP_LAYER_RESIDUAL: {
            const char *add_inputs[2] = {in, names[l.other]};
            node = node_begin("Add", node_name, add_inputs, 2, l.attr.fuse_relu ? pre_relu : names[i]);
            break;
        }
        case DP_LAYER_LAYER_NORM:
            if (add_layer_norm(&graph, model, params, &l, in_ndim, in_shape, in, node_name, names[i]) != DP_OK)
                goto unsupported;
            continue;
        case DP_LAYER_LAYER_SCALE: { /* the (C, 1, 1) parameter times x (N, C, H, W), torchvision's order */
            if (!w) goto unsupported;
            const char *mul_inputs[2] = {w->name, in};
            node = node_begin("Mul", node_name, mul_inputs, 2, names[i]);
            break;
        }
        case DP_LAYER_SCALE_CHANNELS: { /* s (N, C, 1, 1) * x (N, C, H, W), ONNX's broadcasting, in torchvision's
                                          * order (`scale * input`): the one OpenCV 4.6 reads (at batch 1 only) */
            const char *mul_inputs[2] = {in, names[l.other]};
            node = node_begin("Mul", node_name, mul_inputs, 2, names[i]);
            break;
        }
        case DP_LAYER_CONCAT: { /* torch.cat([other, input], 1) */
            const char *cat_inputs[2] = {names[l.other], in};
            node = node_begin("Concat", node_name, cat_inputs, 2, names[i]);
            attr_int(&node, "axis", 1);
            break;
        }
        default:
            goto unsupported;
        }
        if (status != DP_OK) break;
        pb_message(&graph, 1, &node);
        if ((l.kind == DP_LAYER_CONV || l.kind == DP_LAYER_CONV_TRANSPOSE || l.kind == DP_LAYER_RESIDUAL) &&
            l.attr.fuse_relu)
            add_fused_relu(&graph, node_name, pre_relu, names[i]);
        continue;
    unsupported:
        status = dp_fail(DP_ERR_ARG, "export: model %s: layer %d (%s, op %s) cannot be expressed in ONNX",
                         dp_model_name(model), i, layer_kind_name(l.kind), dp_op_table[l.op].name);
    }
    if (status == DP_OK && last_is_alias) {
        /* the model ends in a route or dropout: name its output "logits" */
        const char *id_in[1] = {names[num_layers]};
        pb_t node = node_begin("Identity", "output", id_in, 1, "logits");
        pb_message(&graph, 1, &node);
    }
    if (status == DP_OK) finish_graph(&graph, model, params, weight_1x1);
    free(names);
    free(weight_1x1);
    if (status != DP_OK) {
        pb_free(&graph);
        return status;
    }
    return write_model(&graph, path, producer_version, props, num_props);
}
