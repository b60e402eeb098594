/* timer_cuda.c - the CUDA backend's timing marks (backend.h: timer_new,
 * timer_mark, timer_read, timer_free), the profiler's (profile.h): a pool of
 * timing events made once, recorded on the GPU's stream with no host wait,
 * and read with cudaEventElapsedTime after one wait for the last recorded.
 */
#include <stdlib.h>

#include "cuda_context.h"
#include "cuda_parts.h"

typedef struct {
    int count, made;
    cudaEvent_t *events; /* (count) */
} cuda_timer_t;

static void cuda_timer_free(void *ctx, void *timer) {
    dp_cuda_ctx_t *c = ctx;
    cuda_timer_t *t = timer;
    if (!t) return;
    dp_cuda_enter(c);
    for (int i = 0; i < t->made; i++) cudaEventDestroy(t->events[i]);
    dp_cuda_leave(c);
    free(t->events);
    free(t);
}

static void *cuda_timer_new(void *ctx, int count) {
    dp_cuda_ctx_t *c = ctx;
    cuda_timer_t *t = dp_alloc_zeroed(1, sizeof *t, "timing events");
    if (!t) return NULL;
    t->count = count;
    t->events = dp_alloc_zeroed((size_t)count, sizeof *t->events, "timing events");
    if (!t->events) {
        free(t);
        return NULL;
    }
    cudaError_t err = cudaSuccess;
    dp_cuda_enter(c);
    while (t->made < count && (err = cudaEventCreateWithFlags(&t->events[t->made], cudaEventDefault)) == cudaSuccess)
        t->made++;
    dp_cuda_leave(c);
    if (err != cudaSuccess) {
        dp_fail(DP_ERR_NOMEM, "%s: cannot make %d timing events: %s", c->name, count, cudaGetErrorString(err));
        cuda_timer_free(ctx, t);
        return NULL;
    }
    return t;
}

static void cuda_timer_mark(void *ctx, void *timer, int i) {
    dp_cuda_ctx_t *c = ctx;
    cuda_timer_t *t = timer;
    DP_ASSERT(i >= 0 && i < t->count);
    dp_cuda_enter(c);
    dp_cuda_check(c, cudaEventRecord(t->events[i], c->stream), "a timing event");
    dp_cuda_leave(c);
}

static dp_status_t cuda_timer_read(void *ctx, void *timer, int count, double *ms) {
    dp_cuda_ctx_t *c = ctx;
    cuda_timer_t *t = timer;
    DP_ASSERT(count >= 1 && count <= t->count);
    dp_cuda_enter(c);
    int failed = dp_cuda_check(c, dp_cuda_wait(c, t->events[count - 1]), "waiting for the timing events");
    for (int i = 0; i < count && !failed; i++) {
        float elapsed = 0.0f;
        failed = dp_cuda_check(c, cudaEventElapsedTime(&elapsed, t->events[0], t->events[i]),
                               "reading a timing event");
        ms[i] = elapsed;
    }
    dp_status_t status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

void dp_cuda_timer_register(dp_backend_t *table) {
    table->timer_new = cuda_timer_new;
    table->timer_mark = cuda_timer_mark;
    table->timer_read = cuda_timer_read;
    table->timer_free = cuda_timer_free;
}
