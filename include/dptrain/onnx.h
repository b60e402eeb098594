/* onnx.h - exporting a model with its trained parameters as an ONNX file.
 *
 * The model in inference form: batch norm uses its running statistics
 * (BatchNormalization), dropout and routes are removed (a route is an alias,
 * dropout the identity in inference). Opset 13 (IR version 7): the newest
 * opset whose every op used here both Debian's onnx 1.12 (opsets up to 17)
 * and OpenCV 4.6's dnn importer read, and PyTorch 1.13's default export
 * neighbourhood; the ops are Conv, ConvTranspose, MaxPool, AveragePool,
 * GlobalAveragePool, Gemm (transB = 1), BatchNormalization, Relu, Sigmoid,
 * Tanh, Add and Flatten. The graph has one input "input" of shape
 * (batch, C, H, W) with a symbolic batch dimension and one output "logits"
 * (batch, classes); every parameter is an initializer under its own name
 * ("conv1.weight", "bn1.running_mean", ...), float32 raw data.
 *
 * The file is written by our own protobuf encoder (the few message types
 * of onnx.proto it needs), atomically (io.h's dp_file_begin/commit): a
 * failure leaves no file, or the old one as it was. A layer ONNX cannot
 * express fails with one line naming it.
 */
#ifndef DPTRAIN_ONNX_H
#define DPTRAIN_ONNX_H

#include "dptrain/nn.h"
#include "dptrain/status.h"

#define DP_ONNX_OPSET 13
#define DP_ONNX_IR_VERSION 7

/* A metadata_props entry of the ModelProto (onnx.proto's
 * StringStringEntryProto), e.g. {"classes", "[\"cat\",\"dog\"]"}. */
typedef struct {
    const char *key, *value;
} dp_onnx_prop_t;

/* params: dp_model_num_params floats (a checkpoint's, dp_checkpoint_load_params).
 * producer_version: written as the model's producer_version (NULL: none).
 * props: (num_props) written as the model's metadata_props, in order
 * (`dptrain export` writes "classes", the checkpoint's data.classes). */
dp_status_t dp_onnx_export(const dp_model_t *model, const float *params, const char *path,
                           const char *producer_version, const dp_onnx_prop_t *props, int num_props);

#endif
