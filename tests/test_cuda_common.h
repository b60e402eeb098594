/* test_cuda_common.h - what the GPU tests share: skip (exit 77, which ctest
 * reports as skipped) when there is no GPU; fail when there is one that
 * does not open. */
#ifndef DPTRAIN_TEST_CUDA_COMMON_H
#define DPTRAIN_TEST_CUDA_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "dptrain/backend.h"
#include "testing.h"

#define TEST_SKIPPED 77

/* GPU 0's backend; exits 77 (SKIPPED) without a GPU, 1 when it does not open. */
static inline const dp_backend_t *cuda_backend_or_skip(const char *test) {
    const char *why = NULL;
    if (dp_backend_cuda_count(&why) == 0) {
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
