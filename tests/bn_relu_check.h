/* bn_relu_check.h - batch norm with fuse_relu (ops.h) against batch norm
 * followed by the relu op, on one backend (the CPU's, or a CUDA GPU's:
 * every tensor through the backend's alloc, upload and download): the
 * fused op must give the two ops' bits exactly, y, dx, dgamma, dbeta and
 * the running statistics, in training and in inference, with values that
 * the ReLU zeroes and ones it keeps in every channel. Used by
 * test_ops_properties.c (CPU) and test_cuda_reductions.c (GPU). */
#ifndef DPTRAIN_TEST_BN_RELU_CHECK_H
#define DPTRAIN_TEST_BN_RELU_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "testing.h"

typedef struct {
    float *y, *dx, *dw, *db, *rm, *rv;
} bn_relu_result_t;

static void *bn_relu_upload(const dp_backend_t *be, const float *host, size_t n) {
    void *d = be->alloc(be->ctx, sizeof(float) * n, "bn_relu test tensor");
    if (d) be->upload(be->ctx, d, host, sizeof(float) * n);
    return d;
}

/* Batch norm (fused: with fuse_relu, else followed by the relu op) forward
 * and backward of dy on `be`; the results downloaded into r. 1 on success. */
static int bn_relu_run(const dp_backend_t *be, const int shape[4], const float *x, const float *dy, const float *w,
                       const float *b, int training, int fused, bn_relu_result_t *r) {
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    float *zeros = calloc(n, sizeof(float));
    float *rm = malloc(sizeof(float) * C), *rv = malloc(sizeof(float) * C);
    for (size_t c = 0; c < C; c++) rm[c] = 0.05f * (float)c, rv[c] = 1.0f + 0.25f * (float)(c % 3);
    dp_tensor_t xt = {.ndim = 4, .shape = {shape[0], shape[1], shape[2], shape[3]}, .data = bn_relu_upload(be, x, n),
                      .grad = bn_relu_upload(be, zeros, n), .grad_unset = 1};
    dp_tensor_t wt = {.ndim = 1, .shape = {shape[1]}, .data = bn_relu_upload(be, w, C),
                      .grad = bn_relu_upload(be, zeros, C), .grad_unset = 1};
    dp_tensor_t bt = {.ndim = 1, .shape = {shape[1]}, .data = bn_relu_upload(be, b, C),
                      .grad = bn_relu_upload(be, zeros, C), .grad_unset = 1};
    dp_op_attr_t attr = dp_op_attr_default();
    attr.training = training;
    attr.running_mean = bn_relu_upload(be, rm, C);
    attr.running_var = bn_relu_upload(be, rv, C);
    attr.fuse_relu = fused;
    dp_node_t bn = {.kind = DP_OP_BATCH_NORM, .attr = attr, .in = {&xt, &wt, &bt}};
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    dp_status_t st = be->ops[DP_OP_BATCH_NORM].forward(&bn, arena);
    dp_node_t relu = {.kind = DP_OP_RELU, .attr = dp_op_attr_default(), .in = {&bn.out}};
    if (st == DP_OK && !fused) st = be->ops[DP_OP_RELU].forward(&relu, arena);
    dp_tensor_t *out = fused ? &bn.out : &relu.out;
    if (st == DP_OK) {
        be->upload(be->ctx, out->grad, dy, sizeof(float) * n);
        out->grad_unset = 0;
        be->download(be->ctx, r->y, out->data, sizeof(float) * n);
        if (!fused) st = be->ops[DP_OP_RELU].backward(&relu, arena);
    }
    if (st == DP_OK) st = be->ops[DP_OP_BATCH_NORM].backward(&bn, arena);
    if (st == DP_OK) {
        be->download(be->ctx, r->dx, xt.grad, sizeof(float) * n);
        be->download(be->ctx, r->dw, wt.grad, sizeof(float) * C);
        be->download(be->ctx, r->db, bt.grad, sizeof(float) * C);
        be->download(be->ctx, r->rm, attr.running_mean, sizeof(float) * C);
        be->download(be->ctx, r->rv, attr.running_var, sizeof(float) * C);
    }
    CHECK(st == DP_OK, "batch_norm%s: %s", fused ? " with fuse_relu" : " + relu", dp_error_message());
    dp_arena_free(arena);
    void *dev[] = {xt.data, xt.grad, wt.data, wt.grad, bt.data, bt.grad, attr.running_mean, attr.running_var};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->free(be->ctx, dev[i]);
    free(zeros), free(rm), free(rv);
    return st == DP_OK;
}

/* Fused against the two ops on `be`, shape (N, C, H, W); `who` names the backend in messages. */
static void check_bn_relu_fused(const dp_backend_t *be, const char *who, const int shape[4]) {
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    float *x = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
    float *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        x[i] = (float)((h >> 8) % 1000) / 250.0f - 1.5f + 0.01f * (float)(i % 7);
        dy[i] = (float)((h >> 4) % 777) / 388.5f - 1.0f;
    }
    for (size_t c = 0; c < C; c++) w[c] = 0.5f + 0.125f * (float)c, b[c] = 0.2f * (float)(c % 3) - 0.2f;
    for (int training = 1; training >= 0; training--) {
        bn_relu_result_t r[2];
        for (int k = 0; k < 2; k++) {
            r[k].y = calloc(n, sizeof(float)), r[k].dx = calloc(n, sizeof(float));
            r[k].dw = calloc(C, sizeof(float)), r[k].db = calloc(C, sizeof(float));
            r[k].rm = calloc(C, sizeof(float)), r[k].rv = calloc(C, sizeof(float));
        }
        int ran = bn_relu_run(be, shape, x, dy, w, b, training, 0, &r[0]) &&
                  bn_relu_run(be, shape, x, dy, w, b, training, 1, &r[1]);
        size_t zeroed = 0;
        for (size_t i = 0; i < n; i++) zeroed += r[0].y[i] == 0.0f;
        int same = ran && memcmp(r[0].y, r[1].y, sizeof(float) * n) == 0 &&
                   memcmp(r[0].dx, r[1].dx, sizeof(float) * n) == 0 && memcmp(r[0].dw, r[1].dw, sizeof(float) * C) == 0 &&
                   memcmp(r[0].db, r[1].db, sizeof(float) * C) == 0 && memcmp(r[0].rm, r[1].rm, sizeof(float) * C) == 0 &&
                   memcmp(r[0].rv, r[1].rv, sizeof(float) * C) == 0;
        size_t ydiff = 0, dxdiff = 0;
        for (size_t i = 0; ran && i < n; i++) ydiff += r[0].y[i] != r[1].y[i], dxdiff += r[0].dx[i] != r[1].dx[i];
        CHECK(same, "%s batch_norm (%d, %d, %d, %d) %s: fuse_relu differs from batch_norm + relu (y: %zu, dx: %zu of %zu)",
              who, shape[0], shape[1], shape[2], shape[3], training ? "training" : "inference", ydiff, dxdiff, n);
        /* the ReLU must matter: some outputs zeroed, some kept */
        CHECK(ran && zeroed > 0 && zeroed < n, "%s batch_norm + relu: %zu of %zu outputs zeroed (want some, not all)",
              who, zeroed, n);
        printf("  %s batch_norm (%d, %d, %d, %d) %s: fused = batch_norm + relu bits: %d (%zu of %zu zeroed)\n", who,
               shape[0], shape[1], shape[2], shape[3], training ? "training" : "inference", same, zeroed, n);
        for (int k = 0; k < 2; k++) free(r[k].y), free(r[k].dx), free(r[k].dw), free(r[k].db), free(r[k].rm), free(r[k].rv);
    }
    free(x), free(dy), free(w), free(b);
}

#endif
