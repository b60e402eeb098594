/* test_comm.c - the in-process allreduce: for k = 1..8 replicas and sizes
 * that k does not divide, sizes smaller than k and smaller than a cache
 * line, the naive version and the chunked version (every worker's part run
 * by its own thread at once) give the exact sum in every replica, and the
 * two agree to the bit. Chunks cover the buffer exactly once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "dptrain/rng.h"
#include "testing.h"

typedef struct {
    float **buffers;
    int k, d;
    size_t n;
} chunk_job_t;

static void *chunk_worker(void *arg) {
    chunk_job_t *job = arg;
    dp_allreduce_chunk(job->buffers, job->k, job->n, job->d);
    return NULL;
}

static void check_size(int k, size_t n, dp_rng_t *rng) {
    float *naive[8] = {0}, *chunked[8] = {0};
    double *want = calloc(n ? n : 1, sizeof(double));
    for (int r = 0; r < k; r++) {
        naive[r] = malloc(sizeof(float) * (n ? n : 1));
        chunked[r] = malloc(sizeof(float) * (n ? n : 1));
        for (size_t i = 0; i < n; i++) {
            /* small integers: every float sum is exact, whatever the order */
            naive[r][i] = chunked[r][i] = (float)((int)dp_rng_below(rng, 201) - 100);
            want[i] += naive[r][i];
        }
    }
    dp_allreduce_naive(naive, k, n);
    pthread_t threads[8];
    chunk_job_t jobs[8];
    for (int d = 0; d < k; d++) {
        jobs[d] = (chunk_job_t){chunked, k, d, n};
        pthread_create(&threads[d], NULL, chunk_worker, &jobs[d]);
    }
    for (int d = 0; d < k; d++) pthread_join(threads[d], NULL);
    int exact = 1, same = 1;
    for (int r = 0; r < k; r++)
        for (size_t i = 0; i < n; i++) {
            exact &= naive[r][i] == (float)want[i] && chunked[r][i] == (float)want[i];
            same &= memcmp(&naive[r][i], &chunked[r][i], sizeof(float)) == 0;
        }
    CHECK(exact, "k %d n %zu: a replica does not hold the sum", k, n);
    CHECK(same, "k %d n %zu: naive and chunked differ", k, n);
    size_t next = 0;
    for (int d = 0; d < k; d++) {
        size_t start, count;
        dp_chunk_range(n, k, d, &start, &count);
        CHECK(start == next && (count == 0 || start % 16 == 0), "k %d n %zu chunk %d at %zu (+%zu)", k, n, d,
              start, count);
        next = start + count;
    }
    CHECK(next == n, "k %d n %zu: chunks cover %zu", k, n, next);
    for (int r = 0; r < k; r++) {
        free(naive[r]);
        free(chunked[r]);
    }
    free(want);
}

/* Real gradients: random floats; naive and chunked must still agree to the
 * bit (same order of additions). */
static void check_bits(int k, size_t n, dp_rng_t *rng) {
    float *a[8], *b[8];
    for (int r = 0; r < k; r++) {
        a[r] = malloc(sizeof(float) * n);
        b[r] = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) a[r][i] = b[r][i] = (float)dp_rng_normal(rng);
    }
    dp_allreduce_naive(a, k, n);
    for (int d = 0; d < k; d++) dp_allreduce_chunk(b, k, n, d);
    int same = 1;
    for (int r = 0; r < k; r++) same &= memcmp(a[r], b[r], sizeof(float) * n) == 0;
    CHECK(same, "k %d n %zu: random floats, naive and chunked differ", k, n);
    for (int r = 0; r < k; r++) {
        free(a[r]);
        free(b[r]);
    }
}

int main(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 8);
    static const size_t sizes[] = {0, 1, 3, 7, 15, 16, 17, 100, 129068, 1000003};
    for (int k = 1; k <= 8; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) check_size(k, sizes[s], &rng);
    for (int k = 2; k <= 8; k++) check_bits(k, 129068, &rng); /* LeNet's gradient */
    return testing_finish("test_comm");
}
