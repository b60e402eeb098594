/* test_emu_nhwc.c - the emulator's cuDNN with NHWC tensors and KRSC
 * filters (emu_cudnn.c), called directly (this program links the
 * emulator's runtime and cuDNN sources, not the backend):
 * - a convolution (padded, strided, grouped) of random floats, forward,
 *   backward data and backward filter, each with beta 0 and then beta 1
 *   onto a random prior output, gives with NHWC descriptors the NCHW
 *   convolution's results in NHWC order bit for bit (the emulator sums each
 *   output in the NCHW order): the layouts set by cudnnSetTensor4dDescriptor
 *   / cudnnSetFilter4dDescriptor with CUDNN_TENSOR_NHWC, by
 *   cudnnSetTensorNdDescriptor with NHWC strides and cudnnSetFilterNdDescriptor
 *   with CUDNN_TENSOR_NHWC, and mixed (x NHWC, the filter and y NCHW);
 *   in FP32 and in bf16 (PSEUDO_BFLOAT16);
 * - strides that are neither packed NCHW nor packed NHWC, and an NHWC
 *   5-D filter, are CUDNN_STATUS_NOT_SUPPORTED. */
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/bf16.h"
#include "emu_test_memory.h"
#include "testing.h"

enum { N = 2, C = 4, H = 7, W = 6, K = 6, G = 2, R = 3, S = 2, PAD = 1, STRIDE = 2 };
enum { OH = (H + 2 * PAD - R) / STRIDE + 1, OW = (W + 2 * PAD - S) / STRIDE + 1, CG = C / G };
enum { NX = N * C * H * W, NW = K * CG * R * S, NY = N * K * OH * OW };

/* dst (n, c, plane) = src in the other order: to_nhwc 1 from NCHW, 0 from NHWC */
static void permute(float *dst, const float *src, int n, int c, int plane, int to_nhwc) {
    for (int b = 0; b < n; b++)
        for (int k = 0; k < c; k++)
            for (int l = 0; l < plane; l++) {
                size_t nchw = ((size_t)b * c + k) * plane + l, nhwc = ((size_t)b * plane + l) * c + k;
                if (to_nhwc) dst[nhwc] = src[nchw];
                else dst[nchw] = src[nhwc];
            }
}


static uint64_t rng = 12345;
static float uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

/* how the three descriptors are set */
typedef enum { SET_NCHW, SET_4D_NHWC, SET_ND_NHWC, SET_MIXED } setting_t;
static const char *const setting_names[] = {"NCHW", "4-D NHWC", "Nd NHWC strides", "x NHWC, w and y NCHW"};

static int set_tensor(cudnnTensorDescriptor_t t, cudnnDataType_t type, int setting, int n, int c, int h, int w) {
    if (setting == SET_NCHW) return cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, type, n, c, h, w) == 0;
    if (setting == SET_4D_NHWC) return cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, type, n, c, h, w) == 0;
    const int dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return cudnnSetTensorNdDescriptor(t, type, 4, dims, strides) == 0;
}
static int set_filter(cudnnFilterDescriptor_t f, cudnnDataType_t type, int setting) {
    if (setting == SET_NCHW) return cudnnSetFilter4dDescriptor(f, type, CUDNN_TENSOR_NCHW, K, CG, R, S) == 0;
    if (setting == SET_4D_NHWC) return cudnnSetFilter4dDescriptor(f, type, CUDNN_TENSOR_NHWC, K, CG, R, S) == 0;
    const int dims[4] = {K, CG, R, S};
    return cudnnSetFilterNdDescriptor(f, type, CUDNN_TENSOR_NHWC, 4, dims) == 0;
}

/* host values (floats) as the device type */
static void *device_values(const float *v, size_t n, int bf16) {
    if (!bf16) return device_copy(v, sizeof(float) * n);
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) h[i] = dp_bf16_from_float(v[i]);
    void *d = device_copy(h, sizeof(uint16_t) * n);
    free(h);
    return d;
}
static void host_values(float *v, const void *d, size_t n, int bf16) {
    if (!bf16) {
        to_host(v, d, sizeof(float) * n);
        return;
    }
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    to_host(h, d, sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) v[i] = dp_bf16_to_float(h[i]);
    free(h);
}

/* out[pass][beta] = the three passes with beta 0 then 1 (onto prior values), results in NCHW order */
static void run(cudnnHandle_t h, int setting, int bf16, const float *x, const float *w, const float *dy,
                const float *prior[3], float *out[3][2]) {
    const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const int xs = setting == SET_MIXED ? SET_ND_NHWC : setting, others = setting == SET_MIXED ? SET_NCHW : setting;
    const int x_nhwc = xs != SET_NCHW, w_nhwc = others != SET_NCHW, y_nhwc = others != SET_NCHW;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cv;
    cudnnCreateTensorDescriptor(&xd), cudnnCreateTensorDescriptor(&yd), cudnnCreateFilterDescriptor(&wd);
    cudnnCreateConvolutionDescriptor(&cv);
    CHECK(set_tensor(xd, type, xs, N, C, H, W) && set_tensor(yd, type, others, N, K, OH, OW) &&
              set_filter(wd, type, others) &&
              cudnnSetConvolution2dDescriptor(cv, PAD, PAD, STRIDE, STRIDE, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT) == 0 &&
              cudnnSetConvolutionGroupCount(cv, G) == 0,
          "%s%s: descriptors refused", setting_names[setting], bf16 ? ", bf16" : "");
    cudnnSetConvolutionMathType(cv, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    /* the operands in their descriptors' orders */
    float xo[NX], wo[NW], dyo[NY], po[3][NX > NY ? NX : NY];
    const int counts[3] = {NY, NX, NW};
    if (x_nhwc) permute(xo, x, N, C, H * W, 1); else memcpy(xo, x, sizeof xo);
    if (w_nhwc) permute(wo, w, K, CG, R * S, 1); else memcpy(wo, w, sizeof wo);
    if (y_nhwc) permute(dyo, dy, N, K, OH * OW, 1); else memcpy(dyo, dy, sizeof dyo);
    if (y_nhwc) permute(po[0], prior[0], N, K, OH * OW, 1); else memcpy(po[0], prior[0], sizeof(float) * NY);
    if (x_nhwc) permute(po[1], prior[1], N, C, H * W, 1); else memcpy(po[1], prior[1], sizeof(float) * NX);
    if (w_nhwc) permute(po[2], prior[2], K, CG, R * S, 1); else memcpy(po[2], prior[2], sizeof(float) * NW);
    void *dx = device_values(xo, NX, bf16), *dw = device_values(wo, NW, bf16), *ddy = device_values(dyo, NY, bf16);
    const size_t ws_bytes = 1 << 20;
    void *ws = device_copy(NULL, ws_bytes);
    const float one = 1.0f, zero = 0.0f;
    for (int pass = 0; pass < 3; pass++)
        for (int beta = 0; beta < 2; beta++) {
            void *o = device_values(po[pass], (size_t)counts[pass], bf16);
            const float *b = beta ? &one : &zero;
            cudnnStatus_t s =
                pass == 0 ? cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cv,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ws, ws_bytes, b, yd, o)
                : pass == 1 ? cudnnConvolutionBackwardData(h, &one, wd, dw, yd, ddy, cv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                           ws, ws_bytes, b, xd, o)
                            : cudnnConvolutionBackwardFilter(h, &one, xd, dx, yd, ddy, cv,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws, ws_bytes, b, wd, o);
            CHECK(s == CUDNN_STATUS_SUCCESS, "%s%s: pass %d refused: %d", setting_names[setting], bf16 ? ", bf16" : "",
                  pass, (int)s);
            float got[NX > NY ? NX : NY];
            host_values(got, o, (size_t)counts[pass], bf16);
            out[pass][beta] = malloc(sizeof(float) * (size_t)counts[pass]);
            const int nhwc = pass == 0 ? y_nhwc : pass == 1 ? x_nhwc : w_nhwc;
            if (!nhwc) memcpy(out[pass][beta], got, sizeof(float) * (size_t)counts[pass]);
            else if (pass == 0) permute(out[pass][beta], got, N, K, OH * OW, 0);
            else if (pass == 1) permute(out[pass][beta], got, N, C, H * W, 0);
            else permute(out[pass][beta], got, K, CG, R * S, 0);
            cudaFree(o);
        }
    cudaFree(dx), cudaFree(dw), cudaFree(ddy), cudaFree(ws);
    cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cv);
}

static void check_layouts(cudnnHandle_t h) {
    static float x[NX], w[NW], dy[NY], p0[NY], p1[NX], p2[NW];
    for (int i = 0; i < NX; i++) x[i] = uniform(), p1[i] = uniform();
    for (int i = 0; i < NW; i++) w[i] = uniform(), p2[i] = uniform();
    for (int i = 0; i < NY; i++) dy[i] = uniform(), p0[i] = uniform();
    const float *prior[3] = {p0, p1, p2};
    const int counts[3] = {NY, NX, NW};
    static const char *const passes[3] = {"forward", "backward data", "backward filter"};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        float *ref[3][2], *got[3][2];
        run(h, SET_NCHW, bf16, x, w, dy, prior, ref);
        for (int setting = SET_4D_NHWC; setting <= SET_MIXED; setting++) {
            run(h, setting, bf16, x, w, dy, prior, got);
            for (int pass = 0; pass < 3; pass++)
                for (int beta = 0; beta < 2; beta++) {
                    CHECK(memcmp(ref[pass][beta], got[pass][beta], sizeof(float) * (size_t)counts[pass]) == 0,
                          "%s%s: %s with beta %d: not the NCHW bits", setting_names[setting], bf16 ? ", bf16" : "",
                          passes[pass], beta);
                    free(got[pass][beta]);
                }
        }
        /* the results are not trivially equal: beta 1 added the prior outputs */
        CHECK(memcmp(ref[0][0], ref[0][1], sizeof(float) * NY) != 0, "beta 1 changed nothing");
        for (int pass = 0; pass < 3; pass++)
            for (int beta = 0; beta < 2; beta++) free(ref[pass][beta]);
    }
}

static void check_refusals(void) {
    cudnnTensorDescriptor_t t;
    cudnnFilterDescriptor_t f;
    cudnnCreateTensorDescriptor(&t), cudnnCreateFilterDescriptor(&f);
    const int dims[4] = {N, C, H, W}, padded[4] = {H * W * C * 2, 1, W * C * 2, C * 2}, fdims[5] = {K, CG, 2, R, S};
    CHECK(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, dims, padded) == CUDNN_STATUS_NOT_SUPPORTED,
          "NHWC strides with gaps were taken");
    CHECK(cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 5, fdims) == CUDNN_STATUS_NOT_SUPPORTED,
          "a 5-D NHWC filter was taken");
    cudnnDestroyTensorDescriptor(t), cudnnDestroyFilterDescriptor(f);
}

int main(void) {
    cudnnHandle_t dnn;
    CHECK(cudaSetDevice(0) == cudaSuccess && cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS,
          "the emulator's GPU 0 or cuDNN did not start");
    check_layouts(dnn);
    check_refusals();
    return testing_finish("test_emu_nhwc");
}
