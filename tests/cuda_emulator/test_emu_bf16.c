/* test_emu_bf16.c - the emulator's bf16 in cuDNN and cuBLAS (emu_cudnn.c,
 * emu_cublas.c), called directly (this program links the emulator's
 * runtime, cuDNN and cuBLAS sources, not the backend):
 * - a bf16 convolution (PSEUDO_BFLOAT16: x, w, y bf16, compute FLOAT) of
 *   small integers, whose FP32 sums are exact (13 bits at most), gives
 *   each sum rounded to bf16 to nearest with ties to even (bf16.h's
 *   conversion of the exact integer), forward, backward data and backward
 *   filter; with beta 1 the prior bf16 output is added before the rounding;
 * - combinations cuDNN refuses are CUDNN_STATUS_NOT_SUPPORTED: x bf16 with
 *   a float y, a float filter with bf16 tensors (workspace query and
 *   convolution), and a bf16 compute type (no TRUE_BFLOAT16 configuration);
 * - cublasGemmEx with bf16 A and B, an FP32 C and CUBLAS_COMPUTE_32F gives
 *   the exact products of small integers (and adds C with beta 1); A and B
 *   of different types, a bf16 C (not emulated), a 16F compute type are
 *   CUBLAS_STATUS_NOT_SUPPORTED;
 * - DPTRAIN_CUDA_EMU_STATS's counts are checked by cli_bf16_emu. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/bf16.h"
#include "emu_test_memory.h"
#include "testing.h"

enum { N = 2, C = 3, H = 6, W = 6, K = 4, R = 3 };
enum { OH = H - R + 1, OW = W - R + 1 };


static uint16_t bf16_of_int(long v) { return dp_bf16_from_float((float)v); }

/* 1 when v > 0 lies halfway between two bf16 values (8 significant bits: the spacing above 2^e is 2^(e-7)) */
static int is_tie(long v) {
    int e = 0;
    while (e < 62 && (2L << e) <= v) e++;
    return e >= 8 && v % (1L << (e - 7)) == (1L << (e - 8));
}

static void check_convolutions(cudnnHandle_t h) {
    static long x[N][C][H][W], w[K][C][R][R], dy[N][K][OH][OW];
    uint16_t xb[N * C * H * W], wb[K * C * R * R], dyb[N * K * OH * OW];
    long i = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int a = 0; a < H; a++)
                for (int b = 0; b < W; b++, i++) xb[i] = bf16_of_int(x[n][c][a][b] = (i * 7 + 3) % 16);
    i = 0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int a = 0; a < R; a++)
                for (int b = 0; b < R; b++, i++) wb[i] = bf16_of_int(w[k][c][a][b] = (i * 5 + 1) % 15);
    i = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int a = 0; a < OH; a++)
                for (int b = 0; b < OW; b++, i++) dyb[i] = bf16_of_int(dy[n][k][a][b] = (i * 3 + 2) % 13);
    cudnnTensorDescriptor_t xd, yd, yfloat;
    cudnnFilterDescriptor_t wd, wfloat;
    cudnnConvolutionDescriptor_t cv, cv16;
    cudnnCreateTensorDescriptor(&xd), cudnnCreateTensorDescriptor(&yd), cudnnCreateTensorDescriptor(&yfloat);
    cudnnCreateFilterDescriptor(&wd), cudnnCreateFilterDescriptor(&wfloat);
    cudnnCreateConvolutionDescriptor(&cv), cudnnCreateConvolutionDescriptor(&cv16);
    CHECK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, N, C, H, W) == CUDNN_STATUS_SUCCESS &&
              cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, N, K, OH, OW) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnSetTensor4dDescriptor(yfloat, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, OH, OW) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, K, C, R, R) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnSetFilter4dDescriptor(wfloat, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, R) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnSetConvolution2dDescriptor(cv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
                  CUDNN_STATUS_SUCCESS,
          "bf16 descriptors refused");
    cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH); /* bf16: tensor cores (emu_cudnn.c's rule) */
    CHECK(cudnnSetConvolution2dDescriptor(cv16, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_BFLOAT16) ==
              CUDNN_STATUS_NOT_SUPPORTED,
          "a bf16 compute type (no TRUE_BFLOAT16 configuration) was taken");
    const cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    size_t ws_bytes = 0, bytes = 0;
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cv, yfloat, fwd, &bytes) == CUDNN_STATUS_NOT_SUPPORTED,
          "bf16 x with a float y: the workspace query did not refuse");
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wfloat, cv, yd, fwd, &bytes) == CUDNN_STATUS_NOT_SUPPORTED,
          "a float filter with bf16 tensors: the workspace query did not refuse");
    ws_bytes = 1 << 20;
    void *ws = device_copy(NULL, ws_bytes);
    uint16_t *dx = device_copy(xb, sizeof xb), *dw = device_copy(wb, sizeof wb), *ddy = device_copy(dyb, sizeof dyb);
    uint16_t *dout = device_copy(NULL, sizeof dyb), *dfloat_out = device_copy(NULL, 4 * sizeof dyb);
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cv, fwd, ws, ws_bytes, &zero, yfloat, dfloat_out) ==
              CUDNN_STATUS_NOT_SUPPORTED,
          "bf16 x with a float y: the convolution ran");
    /* forward, then again with beta 1 (the prior bf16 output added before rounding) */
    CHECK(cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cv, fwd, ws, ws_bytes, &zero, yd, dout) ==
              CUDNN_STATUS_SUCCESS,
          "bf16 forward refused");
    uint16_t y[N * K * OH * OW], y2[N * K * OH * OW];
    to_host(y, dout, sizeof y);
    CHECK(cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cv, fwd, ws, ws_bytes, &one, yd, dout) ==
              CUDNN_STATUS_SUCCESS,
          "bf16 forward with beta 1 refused");
    to_host(y2, dout, sizeof y2);
    long wrong = 0, ties = 0;
    i = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int a = 0; a < OH; a++)
                for (int b = 0; b < OW; b++, i++) {
                    long s = 0;
                    for (int c = 0; c < C; c++)
                        for (int p = 0; p < R; p++)
                            for (int q = 0; q < R; q++) s += x[n][c][a + p][b + q] * w[k][c][p][q];
                    wrong += y[i] != bf16_of_int(s);
                    wrong += y2[i] != dp_bf16_from_float((float)s + dp_bf16_to_float(bf16_of_int(s)));
                    ties += is_tie(s);
                }
    CHECK(wrong == 0, "bf16 forward: %ld of %d outputs are not the exact sum rounded to bf16 (ties to even)", wrong,
          2 * N * K * OH * OW);
    CHECK(ties > 0, "no forward sum fell on a tie: the rounding of ties is not checked");
    /* backward data and filter, beta 0 */
    uint16_t gx[N * C * H * W], gw[K * C * R * R];
    CHECK(cudnnConvolutionBackwardData(h, &one, wd, dw, yd, ddy, cv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws, ws_bytes,
                                       &zero, xd, dx) == CUDNN_STATUS_SUCCESS &&
              cudnnConvolutionBackwardFilter(h, &one, xd, device_copy(xb, sizeof xb), yd, ddy, cv,
                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws, ws_bytes, &zero, wd, dw) ==
                  CUDNN_STATUS_SUCCESS,
          "bf16 backward refused");
    to_host(gx, dx, sizeof gx);
    to_host(gw, dw, sizeof gw);
    long wrong_back = 0;
    i = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int a = 0; a < H; a++)
                for (int b = 0; b < W; b++, i++) {
                    long s = 0;
                    for (int k = 0; k < K; k++)
                        for (int p = 0; p < R; p++)
                            for (int q = 0; q < R; q++)
                                if (a - p >= 0 && a - p < OH && b - q >= 0 && b - q < OW)
                                    s += dy[n][k][a - p][b - q] * w[k][c][p][q];
                    wrong_back += gx[i] != bf16_of_int(s);
                }
    i = 0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int p = 0; p < R; p++)
                for (int q = 0; q < R; q++, i++) {
                    long s = 0;
                    for (int n = 0; n < N; n++)
                        for (int a = 0; a < OH; a++)
                            for (int b = 0; b < OW; b++) s += x[n][c][a + p][b + q] * dy[n][k][a][b];
                    wrong_back += gw[i] != bf16_of_int(s);
                }
    CHECK(wrong_back == 0, "bf16 backward: %ld results are not the exact sums rounded to bf16", wrong_back);
    printf("  cuDNN bf16: forward (beta 0 and 1), backward data and filter: %ld wrong, %ld ties seen; mixed "
           "types and a bf16 compute type refused\n", wrong + wrong_back, ties);
}

static void check_gemm(cublasHandle_t h) {
    enum { M = 5, Nn = 4, Kk = 7 };
    uint16_t a[M * Kk], b[Kk * Nn];
    float af[M * Kk], c[M * Nn], c0[M * Nn];
    for (int i = 0; i < M * Kk; i++) a[i] = bf16_of_int(i % 11 - 5), af[i] = (float)(i % 11 - 5);
    for (int i = 0; i < Kk * Nn; i++) b[i] = bf16_of_int(i % 9 - 4);
    for (int i = 0; i < M * Nn; i++) c0[i] = (float)i;
    void *da = device_copy(a, sizeof a), *db = device_copy(b, sizeof b), *dc = device_copy(c0, sizeof c0);
    void *daf = device_copy(af, sizeof af);
    const float one = 1.0f;
    /* C (M, Nn) = A (M, Kk) B (Kk, Nn) + C, column-major */
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, Nn, Kk, &one, da, CUDA_R_16BF, M, db, CUDA_R_16BF,
                                    Kk, &one, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CHECK(s == CUBLAS_STATUS_SUCCESS, "bf16 GemmEx: status %d", (int)s);
    to_host(c, dc, sizeof c);
    long wrong = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < Nn; j++) {
            long sum = i + j * M;
            for (int p = 0; p < Kk; p++) sum += (long)((i + p * M) % 11 - 5) * ((p + j * Kk) % 9 - 4);
            wrong += c[i + j * M] != (float)sum;
        }
    CHECK(wrong == 0, "bf16 GemmEx: %ld of %d results are not the exact sums", wrong, M * Nn);
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, Nn, Kk, &one, daf, CUDA_R_32F, M, db, CUDA_R_16BF, Kk, &one, dc,
                       CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "GemmEx with float A and bf16 B was taken");
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, Nn, Kk, &one, da, CUDA_R_16BF, M, db, CUDA_R_16BF, Kk, &one, dc,
                       CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "GemmEx with a bf16 C (not emulated) was taken");
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, Nn, Kk, &one, da, CUDA_R_16BF, M, db, CUDA_R_16BF, Kk, &one, dc,
                       CUDA_R_32F, M, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "GemmEx with a 16F compute type was taken");
    printf("  cuBLAS GemmEx bf16: %ld of %d results wrong; mixed A/B, a bf16 C and 16F compute refused\n", wrong,
           M * Nn);
}

int main(void) {
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    CHECK(cudaSetDevice(0) == cudaSuccess && cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS &&
              cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS,
          "the emulator's GPU 0, cuDNN or cuBLAS did not start");
    check_convolutions(dnn);
    check_gemm(blas);
    return testing_finish("test_emu_bf16");
}
