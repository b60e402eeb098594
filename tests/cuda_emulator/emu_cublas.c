/* emu_cublas.c - the cuBLAS functions the CUDA backend calls, on the CPU
 * (cuda_emulator.h): a handle bound to a device and a stream, its math and
 * pointer modes, and SGEMM by the BLAS definition (column-major, op(A) m x k,
 * op(B) k x n, C m x n; C not read when beta is 0), summing in k order in
 * FP32. cublasGemmEx with bf16 A and B (CUDA_R_16BF), an FP32 C and
 * CUBLAS_COMPUTE_32F (or its pedantic variant): the operands widened to
 * float (exact), the same sums; also all-FP32 operands (SGEMM's). Other
 * type combinations are CUBLAS_STATUS_NOT_SUPPORTED: those cuBLAS refuses
 * (A and B of different types, a compute type that does not fit them),
 * and those it takes but the emulator does not (bf16 or FP16 C, FP16,
 * integer and complex types, the other compute types). Arguments are
 * checked as cuBLAS documents (negative sizes, leading dimensions below
 * the rows stored), and every operand's whole extent must be memory of
 * the handle's GPU (else one line and abort: the caller's leading
 * dimension or pointer is wrong). DPTRAIN_CUDA_EMU_STATS: a line at exit
 * counting the products run in FP32 and in bf16. On a capturing stream a
 * call is recorded (emu_graph.c) and its operands checked when the graph
 * runs. */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emulator.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
};

/* DPTRAIN_CUDA_EMU_STATS: cuBLAS's part, one line at exit */
static long stat_fp32, stat_bf16;
static void print_stats(void) {
    fprintf(stderr, "cuda emulator: cuBLAS: %ld FP32 products, %ld bf16 products\n", stat_fp32, stat_bf16);
}
static void register_stats(void) {
    const char *v = getenv("DPTRAIN_CUDA_EMU_STATS");
    if (v && *v && strcmp(v, "0") != 0) atexit(print_stats);
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    static pthread_once_t stats_once = PTHREAD_ONCE_INIT;
    pthread_once(&stats_once, register_stats);
    struct cublasContext *h = calloc(1, sizeof *h);
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    h->device = emu_current_device();
    h->math = CUBLAS_DEFAULT_MATH;
    h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (stream && emu_stream_device(stream) != handle->device) return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasMath_t base = (cublasMath_t)(mode & 0xf);
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
        base != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* Bytes of a column-major rows x cols matrix of `size`-byte elements with leading dimension ld. */
static size_t extent(int rows, int cols, int ld, size_t size) {
    return rows == 0 || cols == 0 ? 0 : size * ((size_t)ld * (size_t)(cols - 1) + (size_t)rows);
}

/* A captured product, run when its graph is launched (host scalars by value). */
typedef struct {
    const char *call;
    cublasHandle_t handle;
    cublasOperation_t transa, transb;
    int m, n, k;
    float alpha;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    int bf16;
    float beta;
    float *C;
    int ldc;
} gemm_call_t;

static cublasStatus_t gemm(const char *call, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float *alpha, const void *A, int lda, const void *B, int ldb,
                           int bf16, const float *beta, float *C, int ldc);

static void replay_gemm(void *arg, const void *stream) {
    gemm_call_t *c = arg;
    cublasPointerMode_t mode = c->handle->pointer_mode;
    cudaStream_t was = c->handle->stream;
    c->handle->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    c->handle->stream = (cudaStream_t)stream;
    gemm(c->call, c->handle, c->transa, c->transb, c->m, c->n, c->k, &c->alpha, c->A, c->lda, c->B, c->ldb, c->bf16,
         &c->beta, c->C, c->ldc);
    c->handle->pointer_mode = mode;
    c->handle->stream = was;
}

/* element i of a matrix of floats (bf16 0) or bf16 values (bf16 1), as a float */
static float element(const void *m, size_t i, int bf16) {
    if (!bf16) return ((const float *)m)[i];
    uint32_t u = (uint32_t)((const uint16_t *)m)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* C = alpha op(A) op(B) + beta C, C float; A and B float or bf16 (both
 * alike): the checks and the sums of SGEMM. */
static cublasStatus_t gemm(const char *call, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float *alpha, const void *A, int lda, const void *B, int ldb,
                           int bf16, const float *beta, float *C, int ldc) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    int device = handle->device;
    if (emu_current_device() != device) return CUBLAS_STATUS_EXECUTION_FAILED; /* its GPU must be current */
    if (emu_device_fault(device)) return CUBLAS_STATUS_EXECUTION_FAILED;
    float a_scale = *alpha, b_scale = *beta; /* host pointers (the pointer mode the backend sets) */
    if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
        emu_check_device_memory(call, "alpha", alpha, sizeof *alpha, device);
        emu_check_device_memory(call, "beta", beta, sizeof *beta, device);
    }
    if (emu_capture_status(handle->stream)) { /* recorded with its scalars' values (emu_graph.c), counted when run */
        gemm_call_t rec = {call, handle, transa, transb, m, n, k, a_scale, A, lda, B, ldb, bf16, b_scale, C, ldc};
        return emu_capture_call(handle->stream, replay_gemm, &rec, sizeof rec) ? CUBLAS_STATUS_EXECUTION_FAILED
                                                                               : CUBLAS_STATUS_SUCCESS;
    }
    __atomic_add_fetch(bf16 ? &stat_bf16 : &stat_fp32, 1, __ATOMIC_RELAXED);
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const size_t size = bf16 ? sizeof(uint16_t) : sizeof(float);
    if (k > 0 && a_scale != 0.0f) {
        emu_check_device_memory(call, "A", A, extent(a_rows, a_cols, lda, size), device);
        emu_check_device_memory(call, "B", B, extent(b_rows, b_cols, ldb, size), device);
    }
    emu_check_device_memory(call, "C", C, extent(m, n, ldc, sizeof(float)), device);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k && a_scale != 0.0f; p++) {
                float a = element(A, ta ? (size_t)i * lda + p : (size_t)p * lda + i, bf16);
                float b = element(B, tb ? (size_t)p * ldb + j : (size_t)j * ldb + p, bf16);
                s += a * b;
            }
            float *c = &C[(size_t)j * ldc + i];
            *c = b_scale == 0.0f ? a_scale * s : a_scale * s + b_scale * *c;
        }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
    return gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, 0, beta, C, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* with FP32 compute (scale type float): A and B both bf16 or both float, C float */
    int bf16 = Atype == CUDA_R_16BF;
    if (Atype != Btype || (Atype != CUDA_R_16BF && Atype != CUDA_R_32F) || Ctype != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, bf16, beta, C, ldc);
}
