/* test_cuda_common.h - what the GPU tests share: skip (exit 77, which ctest
 * reports as skipped) when there is no GPU; fail when there is one that
 * does not open, or when the CUDA module does not load on a machine with a
 * GPU device. The backend comes through dp_backend_by_name, which loads the
 * module as the command does (backend_registry.c). */
#ifndef DPTRAIN_TEST_CUDA_COMMON_H
#define DPTRAIN_TEST_CUDA_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "testing.h"

#define TEST_SKIPPED 77

/* GPU 0's backend; exits 77 (SKIPPED) without a GPU, 1 when it does not open. */
static inline const dp_backend_t *cuda_backend_or_skip(const char *test) {
    const char *why = NULL;
    if (dp_backend_cuda_count(&why) == 0) {
        /* a GPU is there but the module (lib/libdptrain_cuda.so) did not load: a failure, not a skip */
        CHECK(!why || strncmp(why, "the CUDA backend module", 23) != 0, "%s", why);
        if (why && strncmp(why, "the CUDA backend module", 23) == 0) exit(testing_finish(test));
        printf("%s: SKIPPED: %s (nothing was checked)\n", test, why ? why : "no GPU");
        exit(TEST_SKIPPED);
    }
    const dp_backend_t *be = NULL;
    dp_status_t st = dp_backend_by_name("cuda", 0, &be);
    CHECK(st == DP_OK && be, "cuda:0 does not open: %s", dp_error_message());
    if (st != DP_OK || !be) exit(testing_finish(test));
    return be;
}

#endif
