/* emu_cudnn.c - the cuDNN functions the CUDA backend calls, on the CPU
 * (cuda_emulator.h): a handle bound to a device and a stream, float tensor
 * and filter descriptors (4-D NCHW or NHWC by cudnnSetTensor4dDescriptor /
 * cudnnSetFilter4dDescriptor, or 4-D / 5-D NC(D)HW by the Nd setters, 4-D
 * NHWC too: a tensor's strides, a filter's CUDNN_TENSOR_NHWC format (KRSC);
 * the tensors packed), convolution descriptors of 2 or 3 spatial dims (pads,
 * strides, dilations, cross-correlation or convolution, groups, math type),
 * the workspace queries, and the convolution forward, backward data and
 * backward filter by their definitions (output = alpha * op + beta * output;
 * the output not read when beta is 0), summing in FP32 in the order of the
 * loops, over (D, H, W) with D = 1 for 4-D tensors; an NHWC operand is
 * put in NCHW order first and an NHWC result back after the loops, so an
 * NHWC convolution gives the NCHW one's bits (compute_nhwc). Checked as cuDNN does
 * bf16 (cuDNN's PSEUDO_BFLOAT16_CONFIG): x, w and y all CUDNN_DATA_BFLOAT16
 * with the convolution's compute type FLOAT (the only compute type taken);
 * the operands are widened to float (exact), summed in FP32 in the same
 * loops, blended with alpha and beta (floats) and the output rounded to
 * bf16, to nearest with ties to even; a convolution mixing float and bf16
 * descriptors is CUDNN_STATUS_NOT_SUPPORTED, as in cuDNN, whose legacy API
 * has no such configuration. Checked as cuDNN does
 * (CUDNN_STATUS_BAD_PARAM): descriptors that do not fit each other (number
 * of dims, channels, groups, each output size for the geometry), a
 * workspace smaller than its query said; and every operand's whole extent
 * must be memory of the handle's GPU (else one line and abort). What the
 * emulator does not take (other layouts or strides, other data types,
 * 1 or more than 3 spatial dims) is CUDNN_STATUS_NOT_SUPPORTED, and so is,
 * as in cuDNN, a tensor or filter of 2^31 elements or more.
 *
 * The heuristics (cudnnGet*Algorithm_v7) list every algorithm of a
 * direction in an order built to trap a caller that filters their results
 * badly; each convolution and workspace query checks the algorithm it is
 * handed against that list (see "algorithms" below). Every algorithm runs
 * the same loops here: the choice never changes the bits. The
 * measurements (cudnnFind*Algorithm) give that list with made-up,
 * deterministic times, the traps fastest. Settings
 * (cuda_emulator.h): DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED (algorithms refused
 * as CUDNN_STATUS_NOT_SUPPORTED), DPTRAIN_CUDA_EMU_STATS (a line counting
 * descriptors created, heuristic queries, refusals, the convolutions run
 * in bf16, the fused convolution-bias-activation calls and find queries). On a capturing stream a convolution is
 * checked and recorded (emu_graph.c), and computed when its graph runs.
 * cudnnConvolutionBiasActivationForward (FP32, alpha2 = 0, IDENTITY or
 * RELU): see "the fused convolution" at the end. */
#include <cudnn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emulator.h"

struct cudnnContext {
    int device;
    cudaStream_t stream;
};
/* sizes (D, H, W): D = 1 for 4-D descriptors */
struct cudnnTensorStruct {
    int set, nb, n, c, size[3];
    cudnnDataType_t type; /* FLOAT or BFLOAT16 */
    int nhwc;             /* 4-D, packed in (N, H, W, C) order */
};
struct cudnnFilterStruct {
    int set, nb, k, c, size[3];
    cudnnDataType_t type;
    int nhwc; /* 4-D, CUDNN_TENSOR_NHWC: packed in (K, R, S, C) order */
};
/* (D, H, W): pad 0, stride 1, dilation 1 along D for 2 spatial dims */
struct cudnnConvolutionStruct {
    int set, spatial, pad[3], stride[3], dilation[3], flip, groups;
    cudnnMathType_t math;
};

/* The workspace of an algorithm: EMU_WORKSPACE x (1 + algo % 3), so that
 * the caller's workspace handling runs and a workspace sized for another
 * algorithm is caught; the heuristics' workspace trap asks for
 * EMU_HUGE_WORKSPACE (1 TiB: no sane limit takes it, no GPU has it). */
#define EMU_WORKSPACE 4096
#define EMU_HUGE_WORKSPACE ((size_t)1 << 40)

/* DPTRAIN_CUDA_EMU_STATS: cuDNN's part, one line at exit */
static long stat_descriptors, stat_heuristics, stat_refusals, stat_finds, stat_bf16, stat_fused, stat_fused_relu;
static void tally(long *counter) { __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED); }
static void print_stats(void) {
    fprintf(stderr, "cuda emulator: cuDNN: %ld descriptors created, %ld heuristic queries, %ld calls refused as not "
            "supported, %ld bf16 convolutions, %ld fused with a bias (%ld with a ReLU), %ld find queries\n",
            stat_descriptors, stat_heuristics, stat_refusals, stat_bf16, stat_fused, stat_fused_relu, stat_finds);
}
static void register_stats(void) {
    const char *v = getenv("DPTRAIN_CUDA_EMU_STATS");
    if (v && *v && strcmp(v, "0") != 0) atexit(print_stats);
}

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

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    static pthread_once_t stats_once = PTHREAD_ONCE_INIT;
    pthread_once(&stats_once, register_stats);
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
    tally(&stat_descriptors);
    return (*desc = calloc(1, sizeof **desc)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
/* As cuDNN: a tensor or filter of 2^31 elements or more is CUDNN_STATUS_NOT_SUPPORTED (its setters refuse it). */
/* The data types emulated: float and bf16 (PSEUDO_BFLOAT16_CONFIG's). */
static int emulated_type(cudnnDataType_t type) { return type == CUDNN_DATA_FLOAT || type == CUDNN_DATA_BFLOAT16; }
static size_t type_size(cudnnDataType_t type) { return type == CUDNN_DATA_BFLOAT16 ? 2 : 4; }

static int too_large(int nb, const int dims[]) {
    long long elements = 1;
    for (int i = 0; i < nb; i++) elements *= dims[i];
    return elements >= (1LL << 31);
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
    if (!d || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !emulated_type(type))
        return CUDNN_STATUS_NOT_SUPPORTED; /* emulated */
    const int dims[4] = {n, c, h, w};
    if (too_large(4, dims)) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnTensorStruct){1, 4, n, c, {1, h, w}, type, format == CUDNN_TENSOR_NHWC};
    return CUDNN_STATUS_SUCCESS;
}

/* dims (N, C, [D,] H, W) with strides; packed NC(D)HW and, 4-D, packed NHWC are emulated */
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nb, const int dims[],
                                         const int strides[]) {
    if (!d || !dims || !strides || nb < 3 || nb > CUDNN_DIM_MAX) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < nb; i++)
        if (dims[i] < 1 || strides[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    if (nb < 4 || nb > 5 || !emulated_type(type) || too_large(nb, dims)) return CUDNN_STATUS_NOT_SUPPORTED;
    long packed = 1;
    int nchw = 1, nhwc = nb == 4;
    for (int i = nb - 1; i >= 0; i--) {
        nchw &= strides[i] == packed;
        packed *= dims[i];
    }
    if (nhwc) { /* (N, C, H, W) dims with strides (H W C, 1, W C, C) */
        const long c = dims[1], w = dims[3], h = dims[2];
        nhwc = strides[1] == 1 && strides[3] == c && strides[2] == w * c && strides[0] == h * w * c;
    }
    if (!nchw && !nhwc) return CUDNN_STATUS_NOT_SUPPORTED; /* emulated: packed only */
    *d = (struct cudnnTensorStruct){1, nb, dims[0], dims[1], {nb == 5 ? dims[2] : 1, dims[nb - 2], dims[nb - 1]}, type,
                                    !nchw};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *desc) {
    tally(&stat_descriptors);
    return (*desc = calloc(1, sizeof **desc)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    if (!d || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !emulated_type(type))
        return CUDNN_STATUS_NOT_SUPPORTED;
    const int dims[4] = {k, c, h, w};
    if (too_large(4, dims)) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnFilterStruct){1, 4, k, c, {1, h, w}, type, format == CUDNN_TENSOR_NHWC};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int nb, const int dims[]) {
    if (!d || !dims || nb < 3 || nb > CUDNN_DIM_MAX) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < nb; i++)
        if (dims[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    if (nb < 4 || nb > 5 || !(format == CUDNN_TENSOR_NCHW || (format == CUDNN_TENSOR_NHWC && nb == 4)) ||
        !emulated_type(type) || too_large(nb, dims))
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnFilterStruct){1, nb, dims[0], dims[1], {nb == 5 ? dims[2] : 1, dims[nb - 2], dims[nb - 1]},
                                    type, format == CUDNN_TENSOR_NHWC};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *desc) {
    tally(&stat_descriptors);
    if (!(*desc = calloc(1, sizeof **desc))) return CUDNN_STATUS_ALLOC_FAILED;
    (*desc)->groups = 1;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
/* pad, stride, dilation of `spatial` dims (2: H, W; 3: D, H, W) */
static cudnnStatus_t set_convolution(cudnnConvolutionDescriptor_t d, int spatial, const int *pad, const int *stride,
                                     const int *dilation, cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
    if (!d || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < spatial; i++)
        if (pad[i] < 0 || stride[i] < 1 || dilation[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    if (compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    d->set = 1;
    d->spatial = spatial;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - spatial); /* < 0: D of a 2-D convolution */
        d->pad[i] = j < 0 ? 0 : pad[j];
        d->stride[i] = j < 0 ? 1 : stride[j];
        d->dilation[i] = j < 0 ? 1 : dilation[j];
    }
    d->flip = mode == CUDNN_CONVOLUTION;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    const int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dilation[2] = {dilation_h, dilation_w};
    return set_convolution(d, 2, pad, stride, dilation, mode, compute);
}
/* arrayLength = the tensors' dims - 2 */
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int length, const int pad[],
                                              const int stride[], const int dilation[], cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (!d || !pad || !stride || !dilation || length < 1 || length > CUDNN_DIM_MAX - 2) return CUDNN_STATUS_BAD_PARAM;
    if (length < 2 || length > 3) return CUDNN_STATUS_NOT_SUPPORTED; /* emulated: 2-D and 3-D */
    return set_convolution(d, length, pad, stride, dilation, mode, compute);
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

/* x, w, y fit each other and the geometry (cuDNN's BAD_PARAM otherwise):
 * the same number of dims, conv's spatial dims 2 fewer; channels and
 * groups; y's size along each dim the output size of x's. */
static int fits(const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y) {
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set) return 0;
    if (x->nb != y->nb || w->nb != x->nb || cv->spatial != x->nb - 2) return 0;
    if (x->c != w->c * cv->groups || w->k % cv->groups != 0 || y->n != x->n || y->c != w->k) return 0;
    for (int i = 0; i < 3; i++)
        if (y->size[i] < 1 ||
            y->size[i] != out_size(x->size[i], w->size[i], cv->stride[i], cv->pad[i], cv->dilation[i]))
            return 0;
    return 1;
}

static size_t plane_of(const int size[3]) { return (size_t)size[0] * size[1] * size[2]; }
static size_t tensor_count(const struct cudnnTensorStruct *t) { return (size_t)t->n * t->c * plane_of(t->size); }
static size_t filter_count(const struct cudnnFilterStruct *f) { return (size_t)f->k * f->c * plane_of(f->size); }
static size_t tensor_bytes(const struct cudnnTensorStruct *t) { return type_size(t->type) * tensor_count(t); }
static size_t filter_bytes(const struct cudnnFilterStruct *f) { return type_size(f->type) * filter_count(f); }

/* The configurations of cuDNN's legacy convolutions emulated: x, w and y
 * all float (FLOAT_CONFIG) or all bf16 (PSEUDO_BFLOAT16_CONFIG; the
 * compute type is FLOAT in both, set_convolution takes no other). */
static int one_config(const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                      const struct cudnnTensorStruct *y) {
    return x->type == w->type && x->type == y->type;
}

/* bf16 (the top half of a float) to float: exact */
static float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
/* float to bf16, to nearest with ties to even; a NaN stays a quiet NaN */
static uint16_t float_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if (isnan(f)) return (uint16_t)(v.u >> 16 | 0x40);
    uint32_t lower = v.u & 0xffff, upper = v.u >> 16;
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++; /* past half way, or a tie to an odd */
    return (uint16_t)upper;
}
/* n values of `type` at p as floats (malloc'd; NULL: out of memory) */
static float *widened(const void *p, cudnnDataType_t type, size_t n) {
    float *f = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; f && i < n; i++)
        f[i] = type == CUDNN_DATA_BFLOAT16 ? bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
    return f;
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
 * forward sums into y (each output over c, then taps t, r, s along D, H,
 * W, in order), backward data into x, backward filter into w; the result
 * (`sum`, zeroed) then goes out as alpha * sum + beta * out. */
static void convolve(pass_t pass, const struct cudnnTensorStruct *xd, const struct cudnnFilterStruct *wd,
                     const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *yd, const float *x,
                     const float *w, const float *y, float *sum) {
    const int kg = wd->k / cv->groups;
    const int *X = xd->size, *Y = yd->size, *F = wd->size;
    for (int n = 0; n < yd->n; n++)
        for (int k = 0; k < yd->c; k++) {
            int g = k / kg;
            for (int c = 0; c < wd->c; c++)
                for (int t = 0; t < F[0]; t++)
                    for (int r = 0; r < F[1]; r++)
                        for (int s = 0; s < F[2]; s++) {
                            int ft = cv->flip ? F[0] - 1 - t : t, fr = cv->flip ? F[1] - 1 - r : r,
                                fs = cv->flip ? F[2] - 1 - s : s;
                            size_t wi = ((((size_t)k * wd->c + c) * F[0] + ft) * F[1] + fr) * F[2] + fs;
                            int od0, od1, oh0, oh1, ow0, ow1;
                            valid_range(Y[0], X[0], cv->stride[0], cv->pad[0], t * cv->dilation[0], &od0, &od1);
                            valid_range(Y[1], X[1], cv->stride[1], cv->pad[1], r * cv->dilation[1], &oh0, &oh1);
                            valid_range(Y[2], X[2], cv->stride[2], cv->pad[2], s * cv->dilation[2], &ow0, &ow1);
                            const int shift = s * cv->dilation[2] - cv->pad[2], stride = cv->stride[2];
                            const float wv = w ? w[wi] : 0.0f;
                            for (int od = od0; od < od1; od++)
                                for (int oh = oh0; oh < oh1; oh++) {
                                    int id = od * cv->stride[0] - cv->pad[0] + t * cv->dilation[0];
                                    int ih = oh * cv->stride[1] - cv->pad[1] + r * cv->dilation[1];
                                    size_t yrow = ((((size_t)n * yd->c + k) * Y[0] + od) * Y[1] + oh) * Y[2];
                                    size_t xrow =
                                        ((((size_t)n * xd->c + (size_t)g * wd->c + c) * X[0] + id) * X[1] + ih) * X[2];
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

/* --- algorithms --------------------------------------------------------------------- *
 * For each shape (the descriptors' geometry, math type aside) and
 * direction, the heuristics list every algorithm of the direction once:
 *   1. one advertised as NON-deterministic,
 *   2. one with tensor-op math,
 *   3. one whose workspace is EMU_HUGE_WORKSPACE,
 *   4. for about half the shapes, one whose status is NOT_SUPPORTED,
 *   5. the others: deterministic, FMA math, status SUCCESS, in an order
 *      rotated by the shape (so neither the winning index nor the winning
 *      algorithm is always the same).
 * The traps (1-4) are drawn by a hash of the shape from the algorithms
 * other than the one cuDNN documents as deterministic for every shape
 * (forward IMPLICIT_PRECOMP_GEMM, backward data and filter ALGO_1): a
 * caller that falls back to those never meets a trap. A convolution handed
 * trap 1 or 4 of its shape, or trap 2 while its descriptor's math type is
 * CUDNN_FMA_MATH, aborts with one line; trap 3 asks for its workspace.
 * DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED refuses algorithms on top of that
 * (read once): entries DIR:ALGO[@run], comma-separated, DIR fwd, bwd_data
 * or bwd_filter, ALGO a number or * (every one); the workspace query and
 * the convolution both return CUDNN_STATUS_NOT_SUPPORTED, or only the
 * convolution with @run. */

static const char *const pass_names[3] = {"fwd", "bwd_data", "bwd_filter"};
static const int pass_algo_count[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
static const int pass_safe_algo[3] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
#define EMU_MAX_ALGOS 8
_Static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= EMU_MAX_ALGOS && CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= EMU_MAX_ALGOS &&
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= EMU_MAX_ALGOS,
               "emu_cudnn.c: EMU_MAX_ALGOS holds every algorithm of a direction");

typedef struct {
    int nondeterministic, tensor_op, huge, unsupported; /* unsupported -1: none for this shape */
    unsigned hash;
} traps_t;

static unsigned mix(unsigned h, int v) { return (h ^ (unsigned)v) * 16777619u; }

static traps_t traps_of(pass_t pass, const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                        const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y) {
    unsigned h = mix(2166136261u, (int)pass);
    const int ints[] = {x->nb, x->n, x->c, w->k, w->c, y->c, cv->groups, cv->flip};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) h = mix(h, ints[i]);
    for (int i = 0; i < 3; i++) {
        h = mix(mix(mix(h, x->size[i]), w->size[i]), y->size[i]);
        h = mix(mix(mix(h, cv->pad[i]), cv->stride[i]), cv->dilation[i]);
    }
    h ^= h >> 13;
    const int n = pass_algo_count[pass], safe = pass_safe_algo[pass];
    int others[EMU_MAX_ALGOS], m = 0;
    for (int a = 0; a < n; a++)
        if (a != safe) others[m++] = a;
    traps_t t = {others[h % m], others[(h + 1) % m], others[(h + 2) % m], -1, h};
    if (h & 16) t.unsupported = others[(h + 3) % m];
    return t;
}

static int is_trap(const traps_t *t, int algo) {
    return algo == t->nondeterministic || algo == t->tensor_op || algo == t->huge || algo == t->unsupported;
}

static size_t workspace_of(const traps_t *t, int algo) {
    return algo == t->huge ? EMU_HUGE_WORKSPACE : (size_t)EMU_WORKSPACE * (size_t)(1 + algo % 3);
}

typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} emu_perf_t;

/* The heuristics' list for (pass, t): every algorithm once, traps first. */
static int heuristic_list(pass_t pass, const traps_t *t, emu_perf_t out[EMU_MAX_ALGOS]) {
    int n = 0;
    out[n++] = (emu_perf_t){t->nondeterministic, CUDNN_STATUS_SUCCESS, workspace_of(t, t->nondeterministic),
                            CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH};
    out[n++] = (emu_perf_t){t->tensor_op, CUDNN_STATUS_SUCCESS, workspace_of(t, t->tensor_op), CUDNN_DETERMINISTIC,
                            CUDNN_TENSOR_OP_MATH};
    out[n++] = (emu_perf_t){t->huge, CUDNN_STATUS_SUCCESS, EMU_HUGE_WORKSPACE, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH};
    if (t->unsupported >= 0)
        out[n++] = (emu_perf_t){t->unsupported, CUDNN_STATUS_NOT_SUPPORTED, 0, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH};
    const int count = pass_algo_count[pass];
    for (int i = 0; i < count; i++) {
        int algo = (int)((t->hash / 7 + (unsigned)i) % (unsigned)count);
        if (!is_trap(t, algo))
            out[n++] = (emu_perf_t){algo, CUDNN_STATUS_SUCCESS, workspace_of(t, algo), CUDNN_DETERMINISTIC,
                                    CUDNN_FMA_MATH};
    }
    return n;
}

/* DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED, read once: refused[pass][algo] bit 1
 * at the workspace query, bit 2 at the convolution. */
static unsigned char refused[3][EMU_MAX_ALGOS];
static int refused_fused; /* the entry "fused": every fused convolution-bias-activation call refused */

static void bad_setting(const char *entry) {
    fprintf(stderr, "cuda emulator: DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED: '%s' is not DIR:ALGO[@run] (DIR fwd, "
            "bwd_data or bwd_filter; ALGO a number or *)\n", entry);
    fflush(stderr);
    abort();
}

static void read_unsupported(void) {
    const char *v = getenv("DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED");
    char buf[512];
    if (!v || !*v) return;
    if (strlen(v) >= sizeof buf) bad_setting(v);
    strcpy(buf, v);
    for (char *save = NULL, *entry = strtok_r(buf, ",", &save); entry; entry = strtok_r(NULL, ",", &save)) {
        if (strcmp(entry, "fused") == 0) { /* every cudnnConvolutionBiasActivationForward */
            refused_fused = 1;
            continue;
        }
        char *colon = strchr(entry, ':'), *at = strchr(entry, '@');
        int pass = -1;
        if (!colon) bad_setting(entry);
        for (int p = 0; p < 3; p++)
            if ((size_t)(colon - entry) == strlen(pass_names[p]) && strncmp(entry, pass_names[p], strlen(pass_names[p])) == 0)
                pass = p;
        if (pass < 0 || (at && strcmp(at, "@run") != 0)) bad_setting(entry);
        unsigned char bits = at ? 2 : 3;
        char *algo = colon + 1, *end = NULL;
        if (at) *at = '\0';
        if (strcmp(algo, "*") == 0) {
            for (int a = 0; a < pass_algo_count[pass]; a++) refused[pass][a] |= bits;
            continue;
        }
        long a = strtol(algo, &end, 10);
        if (end == algo || *end || a < 0 || a >= pass_algo_count[pass]) bad_setting(entry);
        refused[pass][a] |= bits;
    }
}

/* 1 when the setting refuses `algo` of `pass` at the query (at_run 0) or the convolution (1). */
static pthread_once_t unsupported_once = PTHREAD_ONCE_INIT;
static int refuses(pass_t pass, int algo, int at_run) {
    pthread_once(&unsupported_once, read_unsupported);
    int refused_here = algo >= 0 && algo < EMU_MAX_ALGOS && (refused[pass][algo] & (at_run ? 2 : 1));
    if (refused_here) tally(&stat_refusals);
    return refused_here;
}

static void trap_sprung(const char *call, int algo, const char *why) {
    fprintf(stderr, "cuda emulator: %s: algorithm %d %s\n", call, algo, why);
    fflush(stderr);
    abort();
}

/* --- convolutions, run ------------------------------------------------------------- */

/* dst = src (n, c, plane) in the other order: to_nchw 1 from (n, plane, c), 0 to it */
static void permute(float *dst, const float *src, int n, int c, size_t plane, int to_nchw) {
    for (int b = 0; b < n; b++)
        for (int k = 0; k < c; k++)
            for (size_t l = 0; l < plane; l++) {
                size_t nchw = ((size_t)b * c + k) * plane + l, nhwc = ((size_t)b * plane + l) * c + k;
                if (to_nchw) dst[nchw] = src[nhwc];
                else dst[nhwc] = src[nchw];
            }
}

/* An operand as NCHW floats (malloc'd): widened, then put in NCHW order when `nhwc`. */
static float *nchw_floats(const void *p, cudnnDataType_t type, int nhwc, int n, int c, size_t plane) {
    float *f = widened(p, type, (size_t)n * c * plane);
    if (!f || !nhwc) return f;
    const size_t count = (size_t)n * c * plane;
    float *g = malloc(sizeof(float) * (count ? count : 1));
    if (g) permute(g, f, n, c, plane, 1);
    free(f);
    return g;
}

/* A convolution with an NHWC tensor or filter: the operands put in NCHW
 * order (exact), the NCHW loops (convolve: the same sums in the same order
 * per output element as an NCHW convolution of the same values, hence the
 * same bits), the sums put in the output's order, then blended (and
 * rounded to bf16) element by element as compute does. */
static cudnnStatus_t compute_nhwc(pass_t pass, const struct cudnnTensorStruct *xd, const void *x,
                                  const struct cudnnFilterStruct *wd, const void *w,
                                  const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *yd,
                                  const void *y, const void *alpha, const void *beta, void *out, size_t bytes) {
    const int bf16 = xd->type == CUDNN_DATA_BFLOAT16;
    if (bf16) tally(&stat_bf16);
    const size_t count = bytes / type_size(xd->type);
    const size_t xplane = plane_of(xd->size), yplane = plane_of(yd->size), wplane = plane_of(wd->size);
    float *xf = pass != BACKWARD_DATA ? nchw_floats(x, xd->type, xd->nhwc, xd->n, xd->c, xplane) : NULL;
    float *wf = pass != BACKWARD_FILTER ? nchw_floats(w, wd->type, wd->nhwc, wd->k, wd->c, wplane) : NULL;
    float *yf = pass != FORWARD ? nchw_floats(y, yd->type, yd->nhwc, yd->n, yd->c, yplane) : NULL;
    float *sum = calloc(count ? count : 1, sizeof(float)), *ordered = malloc(sizeof(float) * (count ? count : 1));
    float *prior = !bf16                           ? out
                   : *(const float *)beta != 0.0f ? widened(out, xd->type, count)
                                                   : calloc(count ? count : 1, sizeof(float));
    cudnnStatus_t status = CUDNN_STATUS_ALLOC_FAILED;
    if (sum && ordered && prior && (pass == BACKWARD_DATA || xf) && (pass == BACKWARD_FILTER || wf) &&
        (pass == FORWARD || yf)) {
        convolve(pass, xd, wd, cv, yd, xf, wf, yf, sum);
        if (pass == FORWARD && yd->nhwc) permute(ordered, sum, yd->n, yd->c, yplane, 0);
        else if (pass == BACKWARD_DATA && xd->nhwc) permute(ordered, sum, xd->n, xd->c, xplane, 0);
        else if (pass == BACKWARD_FILTER && wd->nhwc) permute(ordered, sum, wd->k, wd->c, wplane, 0);
        else memcpy(ordered, sum, sizeof(float) * count);
        blend(prior, ordered, count, alpha, beta);
        if (bf16)
            for (size_t i = 0; i < count; i++) ((uint16_t *)out)[i] = float_to_bf16(prior[i]);
        status = CUDNN_STATUS_SUCCESS;
    }
    free(xf), free(wf), free(yf), free(sum), free(ordered);
    if (bf16) free(prior);
    return status;
}

/* out (bytes) = alpha * the pass's sums + beta * out: FP32 descriptors in
 * float; bf16 ones with the operands widened, the float loops and the
 * output rounded to nearest even. */
static cudnnStatus_t compute(pass_t pass, const struct cudnnTensorStruct *xd, const void *x,
                             const struct cudnnFilterStruct *wd, const void *w, const struct cudnnConvolutionStruct *cv,
                             const struct cudnnTensorStruct *yd, const void *y, const void *alpha, const void *beta,
                             void *out, size_t bytes) {
    if (xd->nhwc || yd->nhwc || wd->nhwc) return compute_nhwc(pass, xd, x, wd, w, cv, yd, y, alpha, beta, out, bytes);
    if (xd->type == CUDNN_DATA_FLOAT) {
        float *sum = calloc(1, bytes);
        if (!sum) return CUDNN_STATUS_ALLOC_FAILED;
        convolve(pass, xd, wd, cv, yd, x, w, y, sum);
        blend(out, sum, bytes / sizeof(float), alpha, beta);
        free(sum);
        return CUDNN_STATUS_SUCCESS;
    }
    /* bf16: the operands widened, the float loops, the output rounded */
    tally(&stat_bf16);
    const size_t count = bytes / sizeof(uint16_t);
    float *xf = pass != BACKWARD_DATA ? widened(x, xd->type, tensor_count(xd)) : NULL;
    float *wf = pass != BACKWARD_FILTER ? widened(w, wd->type, filter_count(wd)) : NULL;
    float *yf = pass != FORWARD ? widened(y, yd->type, tensor_count(yd)) : NULL;
    float *sum = calloc(count ? count : 1, sizeof(float));
    float *prior = *(const float *)beta != 0.0f ? widened(out, xd->type, count) : calloc(count ? count : 1, sizeof(float));
    cudnnStatus_t status = CUDNN_STATUS_ALLOC_FAILED;
    if (sum && prior && (pass == BACKWARD_DATA || xf) && (pass == BACKWARD_FILTER || wf) && (pass == FORWARD || yf)) {
        convolve(pass, xd, wd, cv, yd, xf, wf, yf, sum);
        blend(prior, sum, count, alpha, beta);
        for (size_t i = 0; i < count; i++) ((uint16_t *)out)[i] = float_to_bf16(prior[i]);
        status = CUDNN_STATUS_SUCCESS;
    }
    free(xf), free(wf), free(yf), free(sum), free(prior);
    return status;
}

/* A captured convolution (emu_graph.c), run when its graph is launched:
 * the descriptors and scalars as they were at the call, checked then. */
typedef struct {
    pass_t pass;
    struct cudnnTensorStruct xd;
    const void *x;
    struct cudnnFilterStruct wd;
    const void *w;
    struct cudnnConvolutionStruct cv;
    struct cudnnTensorStruct yd;
    const void *y;
    float alpha, beta;
    void *out;
} conv_call_t;

static void replay_convolution(void *arg, const void *stream) {
    conv_call_t *c = arg;
    (void)stream;
    size_t bytes = c->pass == FORWARD ? tensor_bytes(&c->yd) : c->pass == BACKWARD_DATA ? tensor_bytes(&c->xd)
                                                                                         : filter_bytes(&c->wd);
    if (compute(c->pass, &c->xd, c->x, &c->wd, c->w, &c->cv, &c->yd, c->y, &c->alpha, &c->beta, c->out, bytes) !=
        CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "cuda emulator: a captured convolution: out of host memory for its sums\n");
        abort();
    }
}

static cudnnStatus_t run(const char *call, pass_t pass, int algo, cudnnHandle_t handle, const void *alpha,
                         const struct cudnnTensorStruct *xd, const void *x, const struct cudnnFilterStruct *wd,
                         const void *w, const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *yd,
                         const void *y, void *workspace, size_t workspace_bytes, const void *beta, void *out) {
    if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
    if (algo < 0 || algo >= pass_algo_count[pass] || !fits(xd, wd, cv, yd) || !alpha || !beta)
        return CUDNN_STATUS_BAD_PARAM;
    if (!one_config(xd, wd, yd)) return CUDNN_STATUS_NOT_SUPPORTED;
    traps_t t = traps_of(pass, xd, wd, cv, yd);
    if (algo == t.nondeterministic)
        trap_sprung(call, algo, "was listed as non-deterministic for this shape by the heuristics");
    if (algo == t.unsupported)
        trap_sprung(call, algo, "was listed as CUDNN_STATUS_NOT_SUPPORTED for this shape by the heuristics");
    if (algo == t.tensor_op && cv->math == CUDNN_FMA_MATH)
        trap_sprung(call, algo, "was listed with tensor-op math for this shape, and the descriptor's math type is "
                    "CUDNN_FMA_MATH");
    /* cuDNN's legacy API runs a convolution on tensor cores only with CUDNN_TENSOR_OP_MATH(_ALLOW_CONVERSION)
     * on its descriptor: a bf16 one without runs on slow fallback kernels (an H200, 2026-11-27) */
    if (xd->type == CUDNN_DATA_BFLOAT16 && cv->math != CUDNN_TENSOR_OP_MATH &&
        cv->math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        trap_sprung(call, algo, "is a bf16 convolution whose descriptor's math type is not CUDNN_TENSOR_OP_MATH "
                    "(cuDNN's legacy API would run it without tensor cores)");
    if (refuses(pass, algo, 1)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (workspace_bytes < workspace_of(&t, algo)) return CUDNN_STATUS_BAD_PARAM;
    int device = handle->device;
    if (emu_current_device() != device || emu_device_fault(device)) return CUDNN_STATUS_EXECUTION_FAILED;
    emu_check_device_memory(call, "the workspace", workspace, workspace_bytes, device);
    if (pass != BACKWARD_DATA) emu_check_device_memory(call, "x", x, tensor_bytes(xd), device);
    if (pass != BACKWARD_FILTER) emu_check_device_memory(call, "w", w, filter_bytes(wd), device);
    if (pass != FORWARD) emu_check_device_memory(call, "dy", y, tensor_bytes(yd), device);
    size_t bytes = pass == FORWARD ? tensor_bytes(yd) : pass == BACKWARD_DATA ? tensor_bytes(xd) : filter_bytes(wd);
    emu_check_device_memory(call, "the output", out, bytes, device);
    if (emu_capture_status(handle->stream)) { /* recorded with copies of its descriptors and scalars */
        conv_call_t rec = {pass, *xd, x, *wd, w, *cv, *yd, y, *(const float *)alpha, *(const float *)beta, out};
        return emu_capture_call(handle->stream, replay_convolution, &rec, sizeof rec) ? CUDNN_STATUS_EXECUTION_FAILED
                                                                                     : CUDNN_STATUS_SUCCESS;
    }
    return compute(pass, xd, x, wd, w, cv, yd, y, alpha, beta, out, bytes);
}

/* A workspace query: the algorithm's workspace for descriptors that fit and a known algorithm. */
static cudnnStatus_t workspace_query(cudnnHandle_t handle, pass_t pass, const struct cudnnTensorStruct *x,
                                     const struct cudnnFilterStruct *w, const struct cudnnConvolutionStruct *cv,
                                     const struct cudnnTensorStruct *y, int algo, size_t *bytes) {
    if (!handle || !bytes || !fits(x, w, cv, y) || algo < 0 || algo >= pass_algo_count[pass])
        return CUDNN_STATUS_BAD_PARAM;
    if (!one_config(x, w, y) || refuses(pass, algo, 0)) return CUDNN_STATUS_NOT_SUPPORTED;
    traps_t t = traps_of(pass, x, w, cv, y);
    *bytes = workspace_of(&t, algo);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes) {
    return workspace_query(handle, FORWARD, x, w, conv, y, (int)algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes) {
    return workspace_query(handle, BACKWARD_DATA, dx, w, conv, dy, (int)algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes) {
    return workspace_query(handle, BACKWARD_FILTER, x, dw, conv, dy, (int)algo, bytes);
}

/* --- the heuristics (cuDNN's cudnnGet*Algorithm_v7) ---------------------------------- *
 * As cuDNN documents them: CUDNN_STATUS_BAD_PARAM when the handle, a
 * descriptor, returnedAlgoCount or perfResults is NULL, requestedAlgoCount
 * is not positive, or the descriptors do not fit each other; otherwise the
 * first min(requestedAlgoCount, every algorithm) results, best first, each
 * with its algorithm, status, time (-1: a heuristic times nothing),
 * workspace (memory), determinism and math type. */

static int heuristic_query(cudnnHandle_t handle, pass_t pass, const struct cudnnTensorStruct *x,
                           const struct cudnnFilterStruct *w, const struct cudnnConvolutionStruct *cv,
                           const struct cudnnTensorStruct *y, int requested, int *returned, const void *results,
                           emu_perf_t list[EMU_MAX_ALGOS]) {
    if (!handle || !returned || !results || requested <= 0 || !fits(x, w, cv, y)) return -1;
    tally(&stat_heuristics);
    traps_t t = traps_of(pass, x, w, cv, y);
    int n = heuristic_list(pass, &t, list);
    *returned = n < requested ? n : requested;
    return *returned;
}

/* The end of a query: BAD_PARAM (n < 0) or n results from list, with their times (NULL: -1, none timed). */
#define RETURN_TIMED(results, list, times, n)                                                               \
    do {                                                                                                   \
        const float *times_ = (times);                                                                     \
        if ((n) < 0) return CUDNN_STATUS_BAD_PARAM;                                                        \
        for (int i = 0; i < (n); i++) {                                                                    \
            memset(&(results)[i], 0, sizeof(results)[i]);                                                  \
            (results)[i].algo = (list)[i].algo, (results)[i].status = (list)[i].status;                    \
            (results)[i].time = times_ ? times_[i] : -1.0f, (results)[i].memory = (list)[i].memory;        \
            (results)[i].determinism = (list)[i].determinism, (results)[i].mathType = (list)[i].math;      \
        }                                                                                                  \
        return CUDNN_STATUS_SUCCESS;                                                                       \
    } while (0)
/* The end of a heuristic query: BAD_PARAM (n < 0) or n results from list (time -1: nothing timed). */
#define RETURN_RESULTS(results, list, n) RETURN_TIMED(results, list, (const float *)NULL, n)

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int *returned, cudnnConvolutionFwdAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    int n = heuristic_query(handle, FORWARD, x, w, conv, y, requested, returned, results, list);
    RETURN_RESULTS(results, list, n);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int *returned, cudnnConvolutionBwdDataAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    int n = heuristic_query(handle, BACKWARD_DATA, dx, w, conv, dy, requested, returned, results, list);
    RETURN_RESULTS(results, list, n);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int *returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    int n = heuristic_query(handle, BACKWARD_FILTER, x, dw, conv, dy, requested, returned, results, list);
    RETURN_RESULTS(results, list, n);
}

/* --- the measurements (cuDNN's cudnnFind*Algorithm) ------------------------------------ *
 * The heuristics' list (traps included) with made-up times that depend only
 * on the shape and the algorithm, sorted fastest first as cuDNN sorts them,
 * the traps the fastest (a caller that keeps the fastest result without
 * filtering springs one); a NOT_SUPPORTED result last with time -1.
 * Nothing runs. Counted as "find queries" in the statistics line. */

static float made_up_time(const traps_t *t, int algo, int trap) {
    return trap ? 0.01f * (float)(1 + algo % 3) : 0.1f + 0.01f * (float)((t->hash / 11 + (unsigned)algo * 37u) % 97u);
}

static int find_query(cudnnHandle_t handle, pass_t pass, const struct cudnnTensorStruct *x,
                      const struct cudnnFilterStruct *w, const struct cudnnConvolutionStruct *cv,
                      const struct cudnnTensorStruct *y, int requested, int *returned, const void *results,
                      emu_perf_t list[EMU_MAX_ALGOS], float times[EMU_MAX_ALGOS]) {
    if (!handle || !returned || !results || requested <= 0 || !fits(x, w, cv, y)) return -1;
    tally(&stat_finds);
    traps_t t = traps_of(pass, x, w, cv, y);
    int n = heuristic_list(pass, &t, list);
    for (int i = 0; i < n; i++)
        times[i] = list[i].status != CUDNN_STATUS_SUCCESS ? -1.0f
                                                          : made_up_time(&t, list[i].algo, is_trap(&t, list[i].algo));
    for (int i = 1; i < n; i++) /* insertion sort: fastest first, failures (-1) last */
        for (int j = i; j > 0; j--) {
            int later = times[j - 1] < 0 || (times[j] >= 0 && times[j] < times[j - 1]);
            if (!later || times[j] < 0) break;
            emu_perf_t e = list[j];
            list[j] = list[j - 1], list[j - 1] = e;
            float f = times[j];
            times[j] = times[j - 1], times[j - 1] = f;
        }
    *returned = n < requested ? n : requested;
    return *returned;
}


cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                   const cudnnFilterDescriptor_t w,
                                                   const cudnnConvolutionDescriptor_t conv,
                                                   const cudnnTensorDescriptor_t y, const int requested, int *returned,
                                                   cudnnConvolutionFwdAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    float times[EMU_MAX_ALGOS];
    int n = find_query(handle, FORWARD, x, w, conv, y, requested, returned, results, list, times);
    RETURN_TIMED(results, list, times, n);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                        const cudnnTensorDescriptor_t dy,
                                                        const cudnnConvolutionDescriptor_t conv,
                                                        const cudnnTensorDescriptor_t dx, const int requested,
                                                        int *returned, cudnnConvolutionBwdDataAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    float times[EMU_MAX_ALGOS];
    int n = find_query(handle, BACKWARD_DATA, dx, w, conv, dy, requested, returned, results, list, times);
    RETURN_TIMED(results, list, times, n);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnFilterDescriptor_t dw, const int requested,
                                                          int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *results) {
    emu_perf_t list[EMU_MAX_ALGOS];
    float times[EMU_MAX_ALGOS];
    int n = find_query(handle, BACKWARD_FILTER, x, dw, conv, dy, requested, returned, results, list, times);
    RETURN_TIMED(results, list, times, n);
}

/* --- convolutions ------------------------------------------------------------------ */

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xd,
                                      const void *x, const cudnnFilterDescriptor_t wd, const void *w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void *workspace, size_t workspace_bytes, const void *beta,
                                      const cudnnTensorDescriptor_t yd, void *y) {
    return run("cudnnConvolutionForward", FORWARD, (int)algo, handle, alpha, xd, x, wd, w, conv, yd, NULL, workspace,
               workspace_bytes, beta, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wd,
                                           const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *workspace, size_t workspace_bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx) {
    return run("cudnnConvolutionBackwardData", BACKWARD_DATA, (int)algo, handle, alpha, dxd, NULL, wd, w, conv, dyd,
               dy, workspace, workspace_bytes, beta, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xd,
                                             const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *workspace,
                                             size_t workspace_bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw) {
    return run("cudnnConvolutionBackwardFilter", BACKWARD_FILTER, (int)algo, handle, alpha, xd, x, dwd, NULL, conv,
               dyd, dy, workspace, workspace_bytes, beta, dw);
}

/* --- the fused convolution, bias and activation ------------------------------------
 * cudnnConvolutionBiasActivationForward: y = act(alpha1 conv(x) + alpha2 z +
 * bias), emulated for FP32 tensors with alpha2 = 0 (z then not read): the
 * convolution as cudnnConvolutionForward with beta 0, then per element
 * y + bias[channel] and the activation, IDENTITY or RELU (negative values to
 * 0, a NaN kept), one FP32 addition each: the bits of a convolution
 * followed by its own bias and ReLU pass. As in cuDNN, RELU is taken only
 * with CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM (any other
 * algorithm: CUDNN_STATUS_NOT_SUPPORTED); IDENTITY with every algorithm. */
struct cudnnActivationStruct {
    int set;
    cudnnActivationMode_t mode;
};

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *desc) {
    tally(&stat_descriptors);
    return (*desc = calloc(1, sizeof **desc)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t desc) {
    free(desc);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double coef) {
    (void)nan, (void)coef;
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (mode != CUDNN_ACTIVATION_RELU && mode != CUDNN_ACTIVATION_IDENTITY) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnActivationStruct){1, mode};
    return CUDNN_STATUS_SUCCESS;
}

/* The epilogue of a fused call, run after its convolution (at once, or
 * when a captured graph runs). */
typedef struct {
    struct cudnnTensorStruct yd;
    float *y;
    const float *bias;
    int relu;
} epilogue_call_t;

static void epilogue(const epilogue_call_t *e) {
    const size_t plane = plane_of(e->yd.size), n = tensor_count(&e->yd), C = (size_t)e->yd.c;
    for (size_t i = 0; i < n; i++) {
        float v = e->y[i] + e->bias[e->yd.nhwc ? i % C : (i / plane) % C];
        e->y[i] = e->relu && v < 0.0f ? 0.0f : v;
    }
}

static void replay_epilogue(void *arg, const void *stream) {
    (void)stream;
    epilogue(arg);
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void *alpha1, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionFwdAlgo_t algo, void *workspace, size_t workspace_bytes, const void *alpha2,
    const cudnnTensorDescriptor_t zd, const void *z, const cudnnTensorDescriptor_t bd, const void *bias,
    const cudnnActivationDescriptor_t ad, const cudnnTensorDescriptor_t yd, void *y) {
    static const char call[] = "cudnnConvolutionBiasActivationForward";
    static const float zero = 0.0f;
    if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
    if (!alpha2 || !zd || !z || !bd || !bias || !ad || !ad->set || !yd || !yd->set || !zd->set || !bd->set)
        return CUDNN_STATUS_BAD_PARAM;
    if (zd->nb != yd->nb || zd->n != yd->n || zd->c != yd->c || plane_of(zd->size) != plane_of(yd->size) ||
        bd->nb != yd->nb || bd->n != 1 || bd->c != yd->c || plane_of(bd->size) != 1)
        return CUDNN_STATUS_BAD_PARAM;
    /* emulated: FP32, alpha2 = 0 */
    if (yd->type != CUDNN_DATA_FLOAT || bd->type != CUDNN_DATA_FLOAT || *(const float *)alpha2 != 0.0f)
        return CUDNN_STATUS_NOT_SUPPORTED;
    pthread_once(&unsupported_once, read_unsupported);
    if ((ad->mode == CUDNN_ACTIVATION_RELU && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) || refused_fused) {
        tally(&stat_refusals);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    cudnnStatus_t s =
        run(call, FORWARD, (int)algo, handle, alpha1, xd, x, wd, w, conv, yd, NULL, workspace, workspace_bytes, &zero, y);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    emu_check_device_memory(call, "the bias", bias, sizeof(float) * (size_t)yd->c, handle->device);
    epilogue_call_t e = {*yd, y, bias, ad->mode == CUDNN_ACTIVATION_RELU};
    tally(&stat_fused);
    if (e.relu) tally(&stat_fused_relu);
    if (emu_capture_status(handle->stream))
        return emu_capture_call(handle->stream, replay_epilogue, &e, sizeof e) ? CUDNN_STATUS_EXECUTION_FAILED
                                                                              : CUDNN_STATUS_SUCCESS;
    epilogue(&e);
    return CUDNN_STATUS_SUCCESS;
}
