/* emu_cudnn.c - the cuDNN functions the CUDA backend calls, on the CPU
 * (cuda_emulator.h): a handle bound to a device and a stream, 4-D NCHW
 * float tensor and filter descriptors, 2-D convolution descriptors (pads,
 * strides, dilations, cross-correlation or convolution, groups, math type),
 * the workspace queries, and the convolution forward, backward data and
 * backward filter by their definitions (output = alpha * op + beta * output;
 * the output not read when beta is 0), summing in FP32 in the order of the
 * loops. Checked as cuDNN does (CUDNN_STATUS_BAD_PARAM): descriptors that
 * do not fit each other (channels, groups, the output's size for the
 * geometry), a workspace smaller than its query said; and every operand's
 * whole extent must be memory of the handle's GPU (else one line and abort). */
#include <cudnn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emulator.h"

struct cudnnContext {
    int device;
    cudaStream_t stream;
};
struct cudnnTensorStruct {
    int set, n, c, h, w;
};
struct cudnnFilterStruct {
    int set, k, c, r, s;
};
struct cudnnConvolutionStruct {
    int set, pad[2], stride[2], dilation[2], flip, groups;
    cudnnMathType_t math;
};

/* The workspace every convolution asks for: some, so that the caller's
 * workspace handling runs. */
#define EMU_WORKSPACE 4096

const char *cudnnGetErrorString(cudnnStatus_t status) {
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
    }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    struct cudnnContext *h = calloc(1, sizeof *h);
    if (!h) return CUDNN_STATUS_ALLOC_FAILED;
    h->device = emu_current_device();
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
    if (stream && emu_stream_device(stream) != handle->device) return CUDNN_STATUS_BAD_PARAM;
    handle->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

/* --- descriptors --------------------------------------------------------------- */

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc) {
    return (*desc = calloc(1, sizeof **desc)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
    if (!d || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED; /* emulated */
    *d = (struct cudnnTensorStruct){1, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *desc) {
    return (*desc = calloc(1, sizeof **desc)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    if (!d || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnFilterStruct){1, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *desc) {
    if (!(*desc = calloc(1, sizeof **desc))) return CUDNN_STATUS_ALLOC_FAILED;
    (*desc)->groups = 1;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (!d || pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
        return CUDNN_STATUS_BAD_PARAM;
    if (compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    d->set = 1;
    d->pad[0] = pad_h, d->pad[1] = pad_w, d->stride[0] = u, d->stride[1] = v;
    d->dilation[0] = dilation_h, d->dilation[1] = dilation_w;
    d->flip = mode == CUDNN_CONVOLUTION;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
    if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    if (!d || (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
               math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH))
        return CUDNN_STATUS_BAD_PARAM;
    d->math = math;
    return CUDNN_STATUS_SUCCESS;
}

/* --- convolutions ------------------------------------------------------------------ */

static int out_size(int in, int k, int stride, int pad, int dilation) {
    return (in + 2 * pad - ((k - 1) * dilation + 1)) / stride + 1;
}

/* x, w, y fit each other and the geometry (cuDNN's BAD_PARAM otherwise). */
static int fits(const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y) {
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set) return 0;
    return x->c == w->c * cv->groups && w->k % cv->groups == 0 && y->n == x->n && y->c == w->k &&
           y->h == out_size(x->h, w->r, cv->stride[0], cv->pad[0], cv->dilation[0]) &&
           y->w == out_size(x->w, w->s, cv->stride[1], cv->pad[1], cv->dilation[1]) && y->h >= 1 && y->w >= 1;
}

static size_t tensor_bytes(const struct cudnnTensorStruct *t) {
    return sizeof(float) * (size_t)t->n * t->c * t->h * t->w;
}
static size_t filter_bytes(const struct cudnnFilterStruct *f) {
    return sizeof(float) * (size_t)f->k * f->c * f->r * f->s;
}

typedef enum { FORWARD, BACKWARD_DATA, BACKWARD_FILTER } pass_t;

/* [*lo, *hi): the outputs o in [0, out) whose input o * stride - pad + tap
 * lies in [0, in). */
static void valid_range(int out, int in, int stride, int pad, int tap, int *lo, int *hi) {
    int first = pad - tap; /* o * stride >= pad - tap */
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    int last = in - 1 + pad - tap; /* o * stride <= in - 1 + pad - tap */
    *hi = last < 0 ? 0 : last / stride + 1;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* One pass over every (output, tap) pair, an output row at a time:
 * forward sums into y (each output over c, r, s in order), backward data
 * into x, backward filter into w; the result (`sum`, zeroed) then goes out
 * as alpha * sum + beta * out. */
static void convolve(pass_t pass, const struct cudnnTensorStruct *xd, const struct cudnnFilterStruct *wd,
                     const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *yd, const float *x,
                     const float *w, const float *y, float *sum) {
    int kg = wd->k / cv->groups;
    for (int n = 0; n < yd->n; n++)
        for (int k = 0; k < yd->c; k++) {
            int g = k / kg;
            for (int c = 0; c < wd->c; c++)
                for (int r = 0; r < wd->r; r++)
                    for (int s = 0; s < wd->s; s++) {
                        int fr = cv->flip ? wd->r - 1 - r : r, fs = cv->flip ? wd->s - 1 - s : s;
                        size_t wi = (((size_t)k * wd->c + c) * wd->r + fr) * wd->s + fs;
                        int oh0, oh1, ow0, ow1;
                        valid_range(yd->h, xd->h, cv->stride[0], cv->pad[0], r * cv->dilation[0], &oh0, &oh1);
                        valid_range(yd->w, xd->w, cv->stride[1], cv->pad[1], s * cv->dilation[1], &ow0, &ow1);
                        for (int oh = oh0; oh < oh1; oh++) {
                            int ih = oh * cv->stride[0] - cv->pad[0] + r * cv->dilation[0];
                            size_t yrow = (((size_t)n * yd->c + k) * yd->h + oh) * yd->w;
                            size_t xrow = (((size_t)n * xd->c + (size_t)g * wd->c + c) * xd->h + ih) * xd->w;
                            int shift = s * cv->dilation[1] - cv->pad[1], stride = cv->stride[1];
                            float wv = w ? w[wi] : 0.0f;
                            if (pass == FORWARD && stride == 1) {
                                float *restrict out = sum + yrow;
                                const float *restrict in = x + xrow + shift;
                                for (int ow = ow0; ow < ow1; ow++) out[ow] += in[ow] * wv;
                            } else if (pass == FORWARD)
                                for (int ow = ow0; ow < ow1; ow++)
                                    sum[yrow + ow] += x[xrow + ow * stride + shift] * wv;
                            else if (pass == BACKWARD_DATA)
                                for (int ow = ow0; ow < ow1; ow++)
                                    sum[xrow + ow * stride + shift] += wv * y[yrow + ow];
                            else
                                for (int ow = ow0; ow < ow1; ow++)
                                    sum[wi] += x[xrow + ow * stride + shift] * y[yrow + ow];
                        }
                    }
        }
}

static void blend(float *out, const float *sum, size_t count, const void *alpha, const void *beta) {
    float a = *(const float *)alpha, b = *(const float *)beta;
    for (size_t i = 0; i < count; i++) out[i] = b == 0.0f ? a * sum[i] : a * sum[i] + b * out[i];
}

static cudnnStatus_t run(const char *call, pass_t pass, cudnnHandle_t handle, const void *alpha,
                         const struct cudnnTensorStruct *xd, const float *x, const struct cudnnFilterStruct *wd,
                         const float *w, const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *yd,
                         const float *y, void *workspace, size_t workspace_bytes, const void *beta, float *out) {
    if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
    if (!fits(xd, wd, cv, yd) || workspace_bytes < EMU_WORKSPACE || !alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
    int device = handle->device;
    if (emu_current_device() != device || emu_device_fault(device)) return CUDNN_STATUS_EXECUTION_FAILED;
    emu_check_device_memory(call, "the workspace", workspace, workspace_bytes, device);
    if (pass != BACKWARD_DATA) emu_check_device_memory(call, "x", x, tensor_bytes(xd), device);
    if (pass != BACKWARD_FILTER) emu_check_device_memory(call, "w", w, filter_bytes(wd), device);
    if (pass != FORWARD) emu_check_device_memory(call, "dy", y, tensor_bytes(yd), device);
    size_t bytes = pass == FORWARD ? tensor_bytes(yd) : pass == BACKWARD_DATA ? tensor_bytes(xd) : filter_bytes(wd);
    emu_check_device_memory(call, "the output", out, bytes, device);
    float *sum = calloc(1, bytes);
    if (!sum) return CUDNN_STATUS_ALLOC_FAILED;
    convolve(pass, xd, wd, cv, yd, x, w, y, sum);
    blend(out, sum, bytes / sizeof(float), alpha, beta);
    free(sum);
    return CUDNN_STATUS_SUCCESS;
}

/* A workspace query: EMU_WORKSPACE bytes for descriptors that fit and a
 * known algorithm. */
static cudnnStatus_t workspace_query(cudnnHandle_t handle, int fit, int algo, int algo_count, size_t *bytes) {
    if (!handle || !fit || algo < 0 || algo >= algo_count) return CUDNN_STATUS_BAD_PARAM;
    *bytes = EMU_WORKSPACE;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes) {
    return workspace_query(handle, fits(x, w, conv, y), (int)algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes) {
    return workspace_query(handle, fits(dx, w, conv, dy), (int)algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes) {
    return workspace_query(handle, fits(x, dw, conv, dy), (int)algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, bytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xd,
                                      const void *x, const cudnnFilterDescriptor_t wd, const void *w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void *workspace, size_t workspace_bytes, const void *beta,
                                      const cudnnTensorDescriptor_t yd, void *y) {
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) return CUDNN_STATUS_BAD_PARAM;
    return run("cudnnConvolutionForward", FORWARD, handle, alpha, xd, x, wd, w, conv, yd, NULL, workspace,
               workspace_bytes, beta, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wd,
                                           const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *workspace, size_t workspace_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx) {
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT) return CUDNN_STATUS_BAD_PARAM;
    return run("cudnnConvolutionBackwardData", BACKWARD_DATA, handle, alpha, dxd, NULL, wd, w, conv, dyd, dy,
               workspace, workspace_bytes, beta, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xd,
                                             const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *workspace,
                                             size_t workspace_bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw) {
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT) return CUDNN_STATUS_BAD_PARAM;
    return run("cudnnConvolutionBackwardFilter", BACKWARD_FILTER, handle, alpha, xd, x, dwd, NULL, conv, dyd, dy,
               workspace, workspace_bytes, beta, dw);
}
