/* test_backend_registry.c - backends by name (backend_registry.c), in any
 * build, the CUDA module's loading from many threads at once:
 *
 *   "cpu" and "staged" are their tables; an unknown name is one line;
 *   16 threads ask for "cuda" (GPU 0) at the same moment, twice each, and
 *   count the GPUs: every answer is the same (the module is loaded once,
 *   under a pthread_once): the same table for all when a GPU opens, else the
 *   same one-line error (this build's reason: "built without CUDA" in a
 *   build without it, "cuda:0: ..." in one with it) and the same count and
 *   reason from dp_backend_cuda_count;
 *   a build without CUDA: count 0 and "this dptrain was built without CUDA".
 * Run under ThreadSanitizer (label threads). */
#include <pthread.h>
#include <string.h>

#include "dptrain/backend.h"
#include "testing.h"

enum { THREADS = 16 };

typedef struct {
    pthread_barrier_t *start;
    const dp_backend_t *table[2];
    dp_status_t status[2];
    char error[2][512];
    int count;
    const char *why;
} answer_t;

static void *ask(void *arg) {
    answer_t *a = arg;
    pthread_barrier_wait(a->start);
    for (int i = 0; i < 2; i++) {
        dp_error_clear();
        a->status[i] = dp_backend_by_name("cuda", 0, &a->table[i]);
        snprintf(a->error[i], sizeof a->error[i], "%s", a->status[i] == DP_OK ? "" : dp_error_message());
    }
    a->count = dp_backend_cuda_count(&a->why);
    return NULL;
}

int main(void) {
    const dp_backend_t *be = NULL;
    CHECK(dp_backend_by_name("cpu", 0, &be) == DP_OK && be == dp_backend_cpu(), "cpu by name");
    CHECK(dp_backend_by_name("staged", 3, &be) == DP_OK && be == dp_backend_cpu_staged(), "staged by name");
    CHECK(dp_backend_by_name("tpu", 0, &be) == DP_ERR_ARG && !be &&
              strcmp(dp_error_message(), "unknown backend 'tpu' (expected cpu or cuda)") == 0,
          "unknown backend: %s", dp_error_message());

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    answer_t answers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&answers[t], 0, sizeof answers[t]);
        answers[t].start = &start;
        pthread_create(&threads[t], NULL, ask, &answers[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&start);

    const answer_t *first = &answers[0];
    printf("cuda:0 from %d threads: %s; %d GPUs (%s)\n", THREADS, first->status[0] == DP_OK ? "opened" : first->error[0],
           first->count, first->why ? first->why : "-");
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < 2; i++) {
            const answer_t *a = &answers[t];
            CHECK(a->status[i] == first->status[0] && a->table[i] == first->table[0] &&
                      strcmp(a->error[i], first->error[0]) == 0,
                  "thread %d, call %d: status %d, table %p, '%s' against thread 0's %d, %p, '%s'", t, i,
                  (int)a->status[i], (const void *)a->table[i], a->error[i], (int)first->status[0],
                  (const void *)first->table[0], first->error[0]);
            CHECK(a->count == first->count && (a->why == first->why || (a->why && first->why && !strcmp(a->why, first->why))),
                  "thread %d: count %d (%s) against %d (%s)", t, a->count, a->why ? a->why : "-", first->count,
                  first->why ? first->why : "-");
        }
    if (first->status[0] == DP_OK) {
        CHECK(first->table[0] && strcmp(first->table[0]->name, "cuda") == 0 && first->count >= 1,
              "an opened GPU: name %s, %d GPUs", first->table[0] ? first->table[0]->name : "-", first->count);
    } else {
        CHECK(first->status[0] == DP_ERR_ARG && !first->table[0] && !strchr(first->error[0], '\n'),
              "a failure: status %d, one line: '%s'", (int)first->status[0], first->error[0]);
        if (dp_backend_cuda_built())
            CHECK(strncmp(first->error[0], "cuda:0: ", 8) == 0, "the error names cuda:0: '%s'", first->error[0]);
    }
    if (!dp_backend_cuda_built()) {
        CHECK(strstr(first->error[0], "this dptrain was built without CUDA") && first->count == 0 && first->why &&
                  strcmp(first->why, "this dptrain was built without CUDA") == 0,
              "a build without CUDA: '%s', %d (%s)", first->error[0], first->count, first->why ? first->why : "-");
    }
    return testing_finish("test_backend_registry");
}
