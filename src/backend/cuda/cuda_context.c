/* cuda_context.c - the CUDA backend's per-GPU context (cuda_context.h):
 * the published contexts, the lock, the first failure kept as the
 * context's sticky error (forgotten only where a step graph's capture
 * alone made it: graph_cuda.c), waits (an NCCL group's polling wait
 * through the hook peer_nccl.c sets), and the device memory the backend
 * holds, counted block by block for its peak and its out-of-memory line.
 * Every other file of the backend stands on this one; it calls none of
 * them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_context.h"

static dp_cuda_ctx_t *contexts[DP_CUDA_MAX_GPUS];

dp_cuda_ctx_t *dp_cuda_ctx(int gpu) { return gpu >= 0 && gpu < DP_CUDA_MAX_GPUS ? contexts[gpu] : NULL; }

void dp_cuda_ctx_publish(int gpu, dp_cuda_ctx_t *c) { contexts[gpu] = c; }

void dp_cuda_enter(dp_cuda_ctx_t *c) {
    pthread_mutex_lock(&c->lock);
    cudaSetDevice(c->gpu);
}

void dp_cuda_leave(dp_cuda_ctx_t *c) { pthread_mutex_unlock(&c->lock); }

void dp_cuda_fail(dp_cuda_ctx_t *c, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = 1;
    int named = snprintf(c->error, sizeof c->error, "%s: ", c->name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error + named, sizeof c->error - (size_t)named, fmt, ap);
    va_end(ap);
}

int dp_cuda_check(dp_cuda_ctx_t *c, cudaError_t err, const char *what) {
    if (err == cudaSuccess) return 0;
    dp_cuda_fail(c, "%s failed: %s", what, cudaGetErrorString(err));
    return 1;
}

void dp_cuda_forget_failure(dp_cuda_ctx_t *c) {
    c->failed = 0;
    c->failed_comm = 0;
    c->error[0] = '\0';
    (void)cudaGetLastError();
}

/* Only failures this backend saw: cuDNN and cuBLAS may leave errors they
 * handled themselves in the runtime's last-error, which are not ours. A
 * fault of asynchronous work shows at the next synchronising call (a
 * download), which records it here. */
dp_status_t dp_cuda_status(dp_cuda_ctx_t *c) {
    if (!c->failed) return DP_OK;
    return dp_fail(c->failed_comm ? DP_ERR_COMM : DP_ERR_DEVICE, "%s", c->error);
}

cudaError_t dp_cuda_wait(dp_cuda_ctx_t *c, cudaEvent_t event) {
    if (c->peer) return c->peer_wait(c, event);
    return event ? cudaEventSynchronize(event) : cudaStreamSynchronize(c->stream);
}

/* --- Device memory accounting ------------------------------------------------ *
 * Every cudaMalloc of the backend goes through dp_cuda_malloc and every
 * cudaFree through dp_cuda_free_idle: the context keeps each block's size
 * (a short list: parameters, optimizer state, arena blocks, input buffers, the
 * cuDNN workspace), the bytes held now and the most held at once
 * (memory_peak, the run's figure). cuDNN's and cuBLAS's own allocations
 * are not counted. */
struct dp_cuda_block {
    void *ptr;
    size_t bytes;
};

cudaError_t dp_cuda_malloc(dp_cuda_ctx_t *c, void **ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes == 0) bytes = 1;
    if (c->block_count == c->block_cap) {
        int cap = c->block_cap ? 2 * c->block_cap : 64;
        struct dp_cuda_block *grown = realloc(c->blocks, sizeof *grown * (size_t)cap);
        if (!grown) return cudaErrorMemoryAllocation;
        c->blocks = grown;
        c->block_cap = cap;
    }
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err != cudaSuccess) return err;
    c->blocks[c->block_count++] = (struct dp_cuda_block){*ptr, bytes};
    c->mem_in_use += bytes;
    if (c->mem_in_use > c->mem_peak) c->mem_peak = c->mem_in_use;
    return cudaSuccess;
}

dp_status_t dp_cuda_out_of_memory(dp_cuda_ctx_t *c, const char *what, size_t bytes) {
    cudaGetLastError(); /* an out-of-memory error is not sticky */
    size_t free_bytes = 0, total = 0;
    char gpu[64] = "";
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
        snprintf(gpu, sizeof gpu, ", %.1f of the GPU's %.1f MiB free", free_bytes / 1048576.0, total / 1048576.0);
    else cudaGetLastError();
    return dp_fail(DP_ERR_NOMEM,
                   "%s: out of GPU memory: %s needs %zu bytes (%.1f MiB) beside the %.1f MiB dptrain holds on it%s: use "
                   "a smaller --batch-size, or more devices",
                   c->name, what ? what : "memory", bytes, bytes / 1048576.0, c->mem_in_use / 1048576.0, gpu);
}

void dp_cuda_free_idle(dp_cuda_ctx_t *c, void *ptr, const char *what) {
    if (!ptr) return;
    dp_cuda_check(c, dp_cuda_wait(c, NULL), what);
    dp_cuda_check(c, cudaFree(ptr), what);
    c->frees++;
    for (int i = 0; i < c->block_count; i++)
        if (c->blocks[i].ptr == ptr) {
            c->mem_in_use -= c->blocks[i].bytes;
            c->blocks[i] = c->blocks[--c->block_count];
            break;
        }
}
