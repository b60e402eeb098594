/* emu_cublas.c - the cuBLAS functions the CUDA backend calls, on the CPU
 * (cuda_emulator.h): a handle bound to a device and a stream, its math and
 * pointer modes, and SGEMM by the BLAS definition (column-major, op(A) m x k,
 * op(B) k x n, C m x n; C not read when beta is 0), summing in k order in
 * FP32. Arguments are checked as cuBLAS documents (negative sizes, leading
 * dimensions below the rows stored), and every operand's whole extent must
 * be memory of the handle's GPU (else one line and abort: the caller's
 * leading dimension or pointer is wrong). On a capturing stream a call is
 * recorded (emu_graph.c) and its operands checked when the graph runs. */
#include <cublas_v2.h>
#include <stdlib.h>

#include "cuda_emulator.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
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

/* Bytes of a column-major rows x cols matrix with leading dimension ld. */
static size_t extent(int rows, int cols, int ld) {
    return rows == 0 || cols == 0 ? 0 : sizeof(float) * ((size_t)ld * (size_t)(cols - 1) + (size_t)rows);
}

/* A captured SGEMM, run when its graph is launched (host scalars by value). */
typedef struct {
    cublasHandle_t handle;
    cublasOperation_t transa, transb;
    int m, n, k;
    float alpha;
    const float *A;
    int lda;
    const float *B;
    int ldb;
    float beta;
    float *C;
    int ldc;
} sgemm_call_t;

static void replay_sgemm(void *arg, const void *stream) {
    sgemm_call_t *c = arg;
    cublasPointerMode_t mode = c->handle->pointer_mode;
    cudaStream_t was = c->handle->stream;
    c->handle->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    c->handle->stream = (cudaStream_t)stream;
    cublasSgemm_v2(c->handle, c->transa, c->transb, c->m, c->n, c->k, &c->alpha, c->A, c->lda, c->B, c->ldb, &c->beta,
                   c->C, c->ldc);
    c->handle->pointer_mode = mode;
    c->handle->stream = was;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
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
        emu_check_device_memory("cublasSgemm", "alpha", alpha, sizeof *alpha, device);
        emu_check_device_memory("cublasSgemm", "beta", beta, sizeof *beta, device);
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (emu_capture_status(handle->stream)) { /* recorded with its scalars' values (emu_graph.c) */
        sgemm_call_t call = {handle, transa, transb, m, n, k, a_scale, A, lda, B, ldb, b_scale, C, ldc};
        return emu_capture_call(handle->stream, replay_sgemm, &call, sizeof call) ? CUBLAS_STATUS_EXECUTION_FAILED
                                                                                  : CUBLAS_STATUS_SUCCESS;
    }
    if (k > 0 && a_scale != 0.0f) {
        emu_check_device_memory("cublasSgemm", "A", A, extent(a_rows, a_cols, lda), device);
        emu_check_device_memory("cublasSgemm", "B", B, extent(b_rows, b_cols, ldb), device);
    }
    emu_check_device_memory("cublasSgemm", "C", C, extent(m, n, ldc), device);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k && a_scale != 0.0f; p++) {
                float a = ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
                float b = tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
                s += a * b;
            }
            float *c = &C[(size_t)j * ldc + i];
            *c = b_scale == 0.0f ? a_scale * s : a_scale * s + b_scale * *c;
        }
    return CUBLAS_STATUS_SUCCESS;
}
