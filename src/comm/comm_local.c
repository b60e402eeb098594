/* comm_local.c - in-process allreduce: the naive version and one worker's
 * chunk of the parallel version (comm.h). */
#include "dptrain/comm.h"

#include <string.h>

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
    float *sum = buffers[0];
    for (int r = 1; r < k; r++) {
        const float *b = buffers[r];
        for (size_t i = 0; i < n; i++) sum[i] += b[i];
    }
    for (int r = 1; r < k; r++) memcpy(buffers[r], sum, sizeof(float) * n);
}

void dp_allreduce_chunk(float *const *buffers, int k, size_t n, int d) {
    size_t start, count;
    dp_chunk_range(n, k, d, &start, &count);
    if (count == 0) return;
    float *sum = buffers[0] + start;
    for (int r = 1; r < k; r++) {
        const float *b = buffers[r] + start;
        for (size_t i = 0; i < count; i++) sum[i] += b[i];
    }
    for (int r = 1; r < k; r++) memcpy(buffers[r] + start, sum, sizeof(float) * count);
}
