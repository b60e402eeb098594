/* allreduce_bench.c - local allreduce throughput against memcpy, same run.
 *
 * For k devices (worker threads) and a gradient of n floats per replica:
 * times the naive allreduce (device 0 sums all, copies back) and the chunked
 * one (every device its 1/k, at once), and a plain memcpy of the same bytes
 * (n floats, on one thread). Bytes counted for GB/s: n * 4 per replica, the
 * size of the gradient being reduced, so the figure compares with
 * memcpy's n * 4 bytes copied.
 *
 * usage: allreduce_bench [k] [repeats]     (sizes: LeNet's 129,068 floats and 64 MB)
 *   k: devices, 1 to 64 (default 2); repeats: per size (default 0: 2000 for
 *   LeNet's, 20 for 64 MB)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dptrain/comm.h"
#include "dptrain/device.h"

typedef struct {
    float **buffers;
    int k, d;
    size_t n;
} job_t;

static dp_status_t chunk_task(void *arg) {
    job_t *j = arg;
    dp_allreduce_chunk(j->buffers, j->k, j->n, j->d);
    return DP_OK;
}

static dp_status_t naive_task(void *arg) {
    job_t *j = arg;
    dp_allreduce_naive(j->buffers, j->k, j->n);
    return DP_OK;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int k = 2, repeats = 0;
    if (argc > 3) {
        fprintf(stderr, "usage: allreduce_bench [k] [repeats]\n");
        return 2;
    }
    if ((argc > 1 && !bench_int_arg("allreduce_bench", "k (devices)", argv[1], 1, 64, &k)) ||
        (argc > 2 && !bench_int_arg("allreduce_bench", "repeats", argv[2], 0, 1000000, &repeats))) {
        return 2;
    }
    if (!bench_cpu_line("allreduce_bench", 1)) return 1;
    dp_device_t **devices = calloc((size_t)k, sizeof *devices);
    for (int d = 0; d < k; d++) dp_device_new(d, d, &devices[d]);
    size_t sizes[2] = {129068, (size_t)64 << 18};
    const char *names[2] = {"LeNet gradient (0.5 MB)", "64 MB"};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        int reps = repeats > 0 ? repeats : (s == 0 ? 2000 : 20);
        float **buffers = malloc(sizeof(float *) * (size_t)k);
        for (int d = 0; d < k; d++) {
            buffers[d] = malloc(sizeof(float) * n);
            for (size_t i = 0; i < n; i++) buffers[d][i] = 1e-6f * (float)(i % 100);
        }
        float *src = malloc(sizeof(float) * n), *dst = malloc(sizeof(float) * n);
        memset(src, 1, sizeof(float) * n);
        memset(dst, 0, sizeof(float) * n);
        job_t *jobs = malloc(sizeof(job_t) * (size_t)k);
        for (int d = 0; d < k; d++) jobs[d] = (job_t){buffers, k, d, n};
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            for (int d = 0; d < k; d++) dp_device_submit(devices[d], chunk_task, &jobs[d]);
            dp_waitall(devices, k);
        }
        double t1 = now();
        for (int r = 0; r < reps; r++) {
            dp_device_submit(devices[0], naive_task, &jobs[0]);
            dp_device_wait(devices[0]);
        }
        double t2 = now();
        for (int r = 0; r < reps; r++) {
            memcpy(dst, src, sizeof(float) * n);
            src[r % n] += dst[(r * 7) % n]; /* keep the copies from being merged */
        }
        double t3 = now();
        double gb = (double)n * 4 * reps / 1e9;
        printf("%-24s k=%d: ring %7.2f GB/s (%.3f ms), naive %7.2f GB/s (%.3f ms), memcpy %7.2f GB/s; "
               "ring/memcpy %.2f\n",
               names[s], k, gb / (t1 - t0), (t1 - t0) / reps * 1e3, gb / (t2 - t1), (t2 - t1) / reps * 1e3,
               gb / (t3 - t2), (t3 - t2) / (t1 - t0));
        for (int d = 0; d < k; d++) free(buffers[d]);
        free(buffers);
        free(src);
        free(dst);
        free(jobs);
    }
    for (int d = 0; d < k; d++) dp_device_free(devices[d]);
    free(devices);
    return 0;
}
