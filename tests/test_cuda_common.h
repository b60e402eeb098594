/* test_cuda_common.h - what the GPU tests share: skip (exit 77, which ctest
 * reports as skipped) when there is no GPU; fail when there is one that
 * does not open, or when the CUDA module does not load on a machine with a
 * GPU device. The backend comes through dp_backend_by_name, which loads the
 * module as the command does (backend_registry.c). And the tensors of
 * the op tests: made, downloaded, freed. */
#ifndef DPTRAIN_TEST_CUDA_COMMON_H
#define DPTRAIN_TEST_CUDA_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/autograd.h"
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

/* The tests' random values: the next of a 64-bit LCG at *state, in [-1, 1). */
static inline float cuda_test_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*state >> 11) / 4503599627370496.0 - 1.0);
}

/* t (zeroed first) of `shape` on be's device with the n values of host
 * uploaded, and with `grad` a zeroed grad beside. */
static inline dp_tensor_t *cuda_test_tensor(const dp_backend_t *be, dp_tensor_t *t, int ndim, const int *shape,
                                            const float *host, int grad) {
    memset(t, 0, sizeof *t);
    dp_tensor_set_shape(t, ndim, shape);
    size_t bytes = sizeof(float) * dp_tensor_numel(t);
    t->data = be->alloc(be->ctx, bytes, "test tensor");
    be->upload(be->ctx, t->data, host, bytes);
    if (grad) {
        t->grad = be->alloc(be->ctx, bytes, "test grad");
        be->zero(be->ctx, t->grad, bytes);
    }
    return t;
}

/* n floats of device memory, malloc'd on the host. */
static inline float *cuda_test_download(const dp_backend_t *be, const float *dev, size_t n) {
    float *h = malloc(sizeof(float) * n);
    be->download(be->ctx, h, dev, sizeof(float) * n);
    return h;
}

/* The op under test of the layout and format tests, on y, recorded on
 * tape: relu, sigmoid, tanh, relu6, hardswish, hardsigmoid, gelu, silu, global average pooling alone; add y + y
 * with a fused ReLU (fuse_relu) or y + z; concat of y and z; batch norm with weight p1 and bias p2 (fuse_relu: its
 * ReLU); layer norm over the channels (eps 1e-6) with weight p1 and bias p2; max and average pooling 3x3, stride 2,
 * pad 1; dropout and drop path 0.3 (seed 42); conv by w2 (3x3, pad 1, bias conv_bias or none,
 * fuse_relu); conv_transpose by w2 (stride 2, bias p1); any other kind: y
 * itself. NULL (the tape's message) when the op fails. */
static inline dp_tensor_t *cuda_test_op(dp_tape_t *tape, dp_op_kind_t kind, int fuse_relu, dp_tensor_t *y,
                                        dp_tensor_t *z, dp_tensor_t *p1, dp_tensor_t *p2, dp_tensor_t *w2,
                                        dp_tensor_t *conv_bias) {
    dp_op_attr_t a = dp_op_attr_default();
    switch (kind) {
    case DP_OP_RELU:
    case DP_OP_SIGMOID:
    case DP_OP_TANH:
    case DP_OP_RELU6:
    case DP_OP_HARDSWISH:
    case DP_OP_HARDSIGMOID:
    case DP_OP_GELU:
    case DP_OP_SILU:
    case DP_OP_GLOBAL_AVG_POOL:
        return dp_tape_op(tape, kind, &a, y, NULL, NULL, NULL);
    case DP_OP_CONCAT: /* y's channels, then z's */
        return dp_tape_op(tape, DP_OP_CONCAT, &a, y, z, NULL, NULL);
    case DP_OP_ADD:
        a.fuse_relu = fuse_relu;
        return dp_tape_op(tape, DP_OP_ADD, &a, y, fuse_relu ? y : z, NULL, NULL);
    case DP_OP_BATCH_NORM:
        a.fuse_relu = fuse_relu;
        return dp_tape_op(tape, DP_OP_BATCH_NORM, &a, y, p1, p2, NULL);
    case DP_OP_LAYER_NORM:
        a.eps = 1e-6f;
        return dp_tape_op(tape, DP_OP_LAYER_NORM, &a, y, p1, p2, NULL);
    case DP_OP_MAX_POOL:
    case DP_OP_AVG_POOL:
        a.kernel[0] = a.kernel[1] = 3;
        a.stride[0] = a.stride[1] = 2;
        a.pad[0] = a.pad[1] = 1;
        return dp_tape_op(tape, kind, &a, y, NULL, NULL, NULL);
    case DP_OP_DROPOUT:
    case DP_OP_DROP_PATH:
        a.dropout_p = 0.3f;
        a.dropout_seed = 42;
        return dp_tape_op(tape, kind, &a, y, NULL, NULL, NULL);
    case DP_OP_CONV:
        a.pad[0] = a.pad[1] = 1;
        a.fuse_relu = fuse_relu;
        return dp_tape_op(tape, DP_OP_CONV, &a, y, w2, conv_bias, NULL);
    case DP_OP_CONV_TRANSPOSE:
        a.stride[0] = a.stride[1] = 2;
        return dp_tape_op(tape, DP_OP_CONV_TRANSPOSE, &a, y, w2, p1, NULL);
    default:
        return y;
    }
}

/* The data and grad of each of n tensors freed. */
static inline void cuda_test_free(const dp_backend_t *be, dp_tensor_t *const *all, size_t n) {
    for (size_t i = 0; i < n; i++) {
        be->free(be->ctx, all[i]->data);
        be->free(be->ctx, all[i]->grad);
    }
}

#endif
