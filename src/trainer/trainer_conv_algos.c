/* trainer_conv_algos.c - the GPU convolution algorithm choices of a
 * trainer's devices (parallel.h: dp_trainer_conv_algorithms,
 * dp_trainer_install_conv_algorithms) over their backends' optional
 * conv_algorithms members (backend.h), for the checkpoint's
 * cuda.conv_algorithms. */
#include <stdlib.h>
#include <string.h>

#include "trainer_state.h"

static int by_key(const void *a, const void *b) {
    return strcmp(((const dp_conv_algo_t *)a)->key, ((const dp_conv_algo_t *)b)->key);
}

/* Whether list[0..n) holds key. */
static int holds(const dp_conv_algo_t *list, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].key, key) == 0) return 1;
    return 0;
}

dp_status_t dp_trainer_conv_algorithms(const dp_trainer_t *t, dp_conv_algo_t **out, int *count) {
    *out = NULL;
    *count = 0;
    dp_conv_algo_t *all = NULL;
    int n = 0;
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        int shared = 0; /* a table asked before (devices sharing a GPU): the same choices */
        for (int e = 0; e < d; e++) shared |= t->replicas[e].backend == be;
        if (!be->conv_algorithms || shared) continue;
        dp_conv_algo_t *list = NULL;
        int m = 0;
        dp_status_t status = be->conv_algorithms(be->ctx, &list, &m);
        dp_conv_algo_t *grown = status == DP_OK && m > 0 ? realloc(all, sizeof *all * (size_t)(n + m)) : all;
        if (status == DP_OK && m > 0 && !grown)
            status = dp_fail(DP_ERR_NOMEM, "out of memory merging %d algorithm choices", m);
        for (int i = 0; status == DP_OK && i < m; i++)
            if (!holds(grown, n, list[i].key)) grown[n++] = list[i];
        free(list);
        if (status != DP_OK) {
            free(grown ? grown : all);
            return status;
        }
        all = grown;
    }
    if (n == 0) {
        free(all);
        return DP_OK;
    }
    qsort(all, (size_t)n, sizeof *all, by_key);
    *out = all;
    *count = n;
    return DP_OK;
}

dp_status_t dp_trainer_install_conv_algorithms(dp_trainer_t *t, const dp_conv_algo_t *choices, int count) {
    for (int d = 0; d < t->num_devices && count > 0; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (be->conv_algorithms_install) DP_TRY(be->conv_algorithms_install(be->ctx, choices, count));
    }
    return DP_OK;
}
