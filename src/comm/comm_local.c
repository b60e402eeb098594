/* comm_local.c - in-process allreduce: the naive version and one worker's
 * chunk of the parallel version (comm.h), both made of the CPU backend's
 * collective primitives (backend.h: reduce_range, broadcast_range). */
#include "dptrain/comm.h"

#include "dptrain/backend.h"

void dp_chunk_range(size_t n, int k, int d, size_t *start, size_t *count) {
    const size_t line = 16; /* floats per 64-byte cache line */
    size_t lines = (n + line - 1) / line;
    size_t base = lines / (size_t)k, extra = lines % (size_t)k, ud = (size_t)d;
    size_t first = ud * base + (ud < extra ? ud : extra);
    size_t own = base + (ud < extra ? 1 : 0);
    size_t begin = first * line, end = (first + own) * line;
    if (begin > n) begin = n;
    if (end > n) end = n;
    *start = begin;
    *count = end - begin;
}

void dp_allreduce_naive(float *const *buffers, int k, size_t n) {
    const dp_backend_t *cpu = dp_backend_cpu();
    cpu->reduce_range(cpu->ctx, buffers[0], (const float *const *)buffers, k, 0, n);
    cpu->broadcast_range(cpu->ctx, buffers, k, buffers[0], 0, n);
}

void dp_allreduce_chunk(float *const *buffers, int k, size_t n, int d) {
    const dp_backend_t *cpu = dp_backend_cpu();
    size_t start, count;
    dp_chunk_range(n, k, d, &start, &count);
    cpu->reduce_range(cpu->ctx, buffers[0], (const float *const *)buffers, k, start, count);
    cpu->broadcast_range(cpu->ctx, buffers, k, buffers[0], start, count);
}
