/* bn_relu_check.h - batch norm with fuse_relu (ops.h: DP_FUSE_RELU and
 * DP_FUSE_RELU6) against batch norm followed by the relu or relu6 op, on
 * one backend (the CPU's, or a CUDA GPU's: every tensor through the
 * backend's alloc, upload and download): the fused op must give the two
 * ops' bits exactly, y, dx, dgamma, dbeta and the running statistics, in
 * training and in inference. Two kinds of data: smooth values (the
 * activation zeroes some and keeps some in every channel), and kinks:
 * batches built so that the normalisation is exact (small integers per
 * channel with a mean and a variance that are powers of two, eps 0), whose
 * batch norm outputs are -4, -3, -2, exactly 0, 3, exactly 6, 8, 9 and 10
 * in every channel (checked on the batch norm alone), plus a NaN per
 * channel in inference. Used by test_ops_properties.c (CPU) and
 * test_cuda_reductions.c (GPU). */
#ifndef DPTRAIN_TEST_BN_RELU_CHECK_H
#define DPTRAIN_TEST_BN_RELU_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/ops.h"
#include "testing.h"

/* One batch norm's inputs: x, dy (N, C, H, W); weight, bias and the running
 * statistics before the step (C); eps. */
typedef struct {
    int shape[4];
    float *x, *dy, *w, *b, *rm, *rv;
    float eps;
    const char *name; /* "smooth" or "kinks" */
} bn_relu_case_t;

typedef struct {
    float *y, *dx, *dw, *db, *rm, *rv;
} bn_relu_result_t;

static const char *bn_relu_act_name(int fuse) {
    return fuse == DP_FUSE_RELU6 ? "relu6" : fuse == DP_FUSE_RELU ? "relu" : "none";
}

static void *bn_relu_upload(const dp_backend_t *be, const float *host, size_t n) {
    void *d = be->alloc(be->ctx, sizeof(float) * n, "bn_relu test tensor");
    if (d) be->upload(be->ctx, d, host, sizeof(float) * n);
    return d;
}

/* Batch norm then activation `fuse` (DP_FUSE_RELU, DP_FUSE_RELU6, or 0:
 * the batch norm alone), fused (attr.fuse_relu) or as the batch norm
 * followed by the relu / relu6 op, forward and backward of dy on `be`; the
 * results downloaded into r. 1 on success. */
static int bn_relu_run(const dp_backend_t *be, const bn_relu_case_t *k, int training, int fuse, int fused,
                       bn_relu_result_t *r) {
    const int *shape = k->shape;
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    float *zeros = calloc(n, sizeof(float));
    dp_tensor_t xt = {.ndim = 4, .shape = {shape[0], shape[1], shape[2], shape[3]}, .data = bn_relu_upload(be, k->x, n),
                      .grad = bn_relu_upload(be, zeros, n), .grad_unset = 1};
    dp_tensor_t wt = {.ndim = 1, .shape = {shape[1]}, .data = bn_relu_upload(be, k->w, C),
                      .grad = bn_relu_upload(be, zeros, C), .grad_unset = 1};
    dp_tensor_t bt = {.ndim = 1, .shape = {shape[1]}, .data = bn_relu_upload(be, k->b, C),
                      .grad = bn_relu_upload(be, zeros, C), .grad_unset = 1};
    dp_op_attr_t attr = dp_op_attr_default();
    attr.training = training;
    attr.eps = k->eps;
    attr.running_mean = bn_relu_upload(be, k->rm, C);
    attr.running_var = bn_relu_upload(be, k->rv, C);
    attr.fuse_relu = fused ? fuse : 0;
    const int separate = fuse && !fused; /* the activation as an op of its own */
    const dp_op_kind_t act_kind = fuse == DP_FUSE_RELU6 ? DP_OP_RELU6 : DP_OP_RELU;
    dp_node_t bn = {.kind = DP_OP_BATCH_NORM, .attr = attr, .in = {&xt, &wt, &bt}};
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    dp_status_t st = be->ops[DP_OP_BATCH_NORM].forward(&bn, arena);
    dp_node_t act = {.kind = act_kind, .attr = dp_op_attr_default(), .in = {&bn.out}};
    if (st == DP_OK && separate) st = be->ops[act_kind].forward(&act, arena);
    dp_tensor_t *out = separate ? &act.out : &bn.out;
    if (st == DP_OK) {
        be->upload(be->ctx, out->grad, k->dy, sizeof(float) * n);
        out->grad_unset = 0;
        be->download(be->ctx, r->y, out->data, sizeof(float) * n);
        if (separate) st = be->ops[act_kind].backward(&act, arena);
    }
    if (st == DP_OK) st = be->ops[DP_OP_BATCH_NORM].backward(&bn, arena);
    if (st == DP_OK) {
        be->download(be->ctx, r->dx, xt.grad, sizeof(float) * n);
        be->download(be->ctx, r->dw, wt.grad, sizeof(float) * C);
        be->download(be->ctx, r->db, bt.grad, sizeof(float) * C);
        be->download(be->ctx, r->rm, attr.running_mean, sizeof(float) * C);
        be->download(be->ctx, r->rv, attr.running_var, sizeof(float) * C);
    }
    CHECK(st == DP_OK, "batch_norm%s%s: %s", fused ? " with fuse_relu " : " + ", bn_relu_act_name(fuse),
          dp_error_message());
    dp_arena_free(arena);
    void *dev[] = {xt.data, xt.grad, wt.data, wt.grad, bt.data, bt.grad, attr.running_mean, attr.running_var};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->free(be->ctx, dev[i]);
    free(zeros);
    return st == DP_OK;
}

/* A case's buffers for shape (N, C, H, W), dy filled (never 0), the
 * running statistics PyTorch-like (mean 0.05 c, var 1 to 1.5). */
static void bn_relu_case_alloc(bn_relu_case_t *k, const int shape[4], const char *name) {
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    memcpy(k->shape, shape, sizeof k->shape);
    k->name = name;
    k->eps = 1e-5f;
    k->x = malloc(sizeof(float) * n), k->dy = malloc(sizeof(float) * n);
    k->w = malloc(sizeof(float) * C), k->b = malloc(sizeof(float) * C);
    k->rm = malloc(sizeof(float) * C), k->rv = malloc(sizeof(float) * C);
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        k->dy[i] = (float)((h >> 4) % 777) / 388.5f - 1.0f;
    }
    for (size_t c = 0; c < C; c++) k->rm[c] = 0.05f * (float)c, k->rv[c] = 1.0f + 0.25f * (float)(c % 3);
}

static void bn_relu_case_free(bn_relu_case_t *k) {
    free(k->x), free(k->dy), free(k->w), free(k->b), free(k->rm), free(k->rv);
}

/* Smooth values; `gain` scales gamma (relu6: 6, so that some outputs pass 6). */
static void bn_relu_case_smooth(bn_relu_case_t *k, const int shape[4], float gain) {
    bn_relu_case_alloc(k, shape, "smooth");
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        k->x[i] = (float)((h >> 8) % 1000) / 250.0f - 1.5f + 0.01f * (float)(i % 7);
    }
    for (size_t c = 0; c < C; c++) k->w[c] = gain * (0.5f + 0.125f * (float)c), k->b[c] = 0.2f * (float)(c % 3) - 0.2f;
}

/* Kinks: N H W a multiple of 16 (a power of two). Channel c's values are
 * mu + s v, v from KINK_V (sum 0, sum of squares 256: mean mu, variance
 * 16 s^2 exactly in any order), s = 0.5, 1 or 2, mu a multiple of 1/4, each
 * block of 16 in a channel's own order; gamma 4, beta 3, eps 0: the batch
 * norm output is v + 3 exactly, in training and (running mean mu, var 16
 * s^2) in inference. nan: x = NaN at one v = 0 of each channel. The
 * expected batch norm output into pre (NaN there). */
static const float KINK_V[16] = {-7, -6, -5, -3, -3, 0, 0, 0, 0, 0, 0, 3, 3, 5, 6, 7};

static void bn_relu_case_kinks(bn_relu_case_t *k, const int shape[4], int nan, float *pre) {
    bn_relu_case_alloc(k, shape, "kinks");
    const size_t C = (size_t)shape[1], plane = (size_t)shape[2] * shape[3], m = (size_t)shape[0] * plane;
    k->eps = 0.0f;
    for (size_t c = 0; c < C; c++) {
        const float s = c % 3 == 0 ? 0.5f : c % 3 == 1 ? 1.0f : 2.0f, mu = 0.25f * (float)((int)(c % 5) - 2);
        k->w[c] = 4.0f, k->b[c] = 3.0f, k->rm[c] = mu, k->rv[c] = 16.0f * s * s;
        for (size_t p = 0; p < m; p++) { /* p = n plane + spatial index */
            size_t at = (p / plane * C + c) * plane + p % plane, v = (5 * (p % 16) + 3 * c) % 16;
            int poisoned = nan && p == (16 + 5 - (3 * c) % 16) * 13 % 16; /* (5 p + 3 c) % 16 == 5: a v = 0 */
            k->x[at] = poisoned ? NAN : mu + s * KINK_V[v];
            pre[at] = poisoned ? NAN : KINK_V[v] + 3.0f;
        }
    }
}

/* Batch norm then `fuse` (DP_FUSE_RELU or DP_FUSE_RELU6): the two ops,
 * then the fused op, compared bit for bit; pre (not NULL): the batch
 * norm's own output must be exactly pre. */
static void check_bn_relu_case(const dp_backend_t *be, const char *who, const bn_relu_case_t *k, int training,
                               int fuse, const float *pre) {
    const int *shape = k->shape;
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], C = (size_t)shape[1];
    bn_relu_result_t r[3];
    for (int i = 0; i < 3; i++) {
        r[i].y = calloc(n, sizeof(float)), r[i].dx = calloc(n, sizeof(float));
        r[i].dw = calloc(C, sizeof(float)), r[i].db = calloc(C, sizeof(float));
        r[i].rm = calloc(C, sizeof(float)), r[i].rv = calloc(C, sizeof(float));
    }
    const char *act = bn_relu_act_name(fuse), *mode = training ? "training" : "inference";
    int ran = bn_relu_run(be, k, training, fuse, 0, &r[0]) && bn_relu_run(be, k, training, fuse, 1, &r[1]);
    if (ran && pre) { /* the data hits the kinks exactly */
        ran = bn_relu_run(be, k, training, 0, 0, &r[2]);
        size_t off = 0;
        for (size_t i = 0; ran && i < n; i++) off += isnan(pre[i]) ? !isnan(r[2].y[i]) : r[2].y[i] != pre[i];
        CHECK(ran && off == 0, "%s batch_norm %s %s: %zu of %zu outputs are not the exact values planned", who,
              k->name, mode, off, n);
    }
    size_t zeroed = 0, six = 0, nans = 0, ydiff = 0, dxdiff = 0;
    for (size_t i = 0; ran && i < n; i++) {
        zeroed += r[0].y[i] == 0.0f, six += r[0].y[i] == 6.0f, nans += isnan(r[0].y[i]);
        ydiff += memcmp(&r[0].y[i], &r[1].y[i], sizeof(float)) != 0;
        dxdiff += memcmp(&r[0].dx[i], &r[1].dx[i], sizeof(float)) != 0;
    }
    int same = ran && ydiff == 0 && dxdiff == 0 && memcmp(r[0].dw, r[1].dw, sizeof(float) * C) == 0 &&
               memcmp(r[0].db, r[1].db, sizeof(float) * C) == 0 && memcmp(r[0].rm, r[1].rm, sizeof(float) * C) == 0 &&
               memcmp(r[0].rv, r[1].rv, sizeof(float) * C) == 0;
    CHECK(same, "%s batch_norm (%d, %d, %d, %d) %s %s: fuse_relu %s differs from batch_norm + %s (y: %zu, dx: %zu of %zu)",
          who, shape[0], shape[1], shape[2], shape[3], k->name, mode, act, act, ydiff, dxdiff, n);
    /* the activation must matter: some outputs zeroed, some kept (relu6: some clamped to 6) */
    CHECK(ran && zeroed > 0 && zeroed < n && (fuse != DP_FUSE_RELU6 || six > 0),
          "%s batch_norm + %s %s: %zu of %zu outputs zeroed, %zu six (want some zeroed, not all%s)", who, act, k->name,
          zeroed, n, six, fuse == DP_FUSE_RELU6 ? ", some six" : "");
    printf("  %s batch_norm (%d, %d, %d, %d) %s %s: fused = batch_norm + %s bits: %d (%zu of %zu zeroed, %zu six, "
           "%zu NaN)\n",
           who, shape[0], shape[1], shape[2], shape[3], k->name, mode, act, same, zeroed, n, six, nans);
    for (int i = 0; i < 3; i++) free(r[i].y), free(r[i].dx), free(r[i].dw), free(r[i].db), free(r[i].rm), free(r[i].rv);
}

/* Fused against the two ops on `be`, shape (N, C, H, W), for activation
 * `fuse` (DP_FUSE_RELU or DP_FUSE_RELU6), smooth values, and kinks when N
 * H W is a multiple of 16 and a power of two; `who` names the backend. */
static void check_bn_relu_fused(const dp_backend_t *be, const char *who, const int shape[4], int fuse) {
    const size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3], m = (size_t)shape[0] * shape[2] * shape[3];
    for (int training = 1; training >= 0; training--) {
        bn_relu_case_t k;
        bn_relu_case_smooth(&k, shape, fuse == DP_FUSE_RELU6 ? 6.0f : 1.0f);
        check_bn_relu_case(be, who, &k, training, fuse, NULL);
        bn_relu_case_free(&k);
        if (m % 16 != 0 || (m & (m - 1)) != 0) continue;
        float *pre = malloc(sizeof(float) * n);
        bn_relu_case_kinks(&k, shape, !training, pre);
        check_bn_relu_case(be, who, &k, training, fuse, pre);
        bn_relu_case_free(&k);
        free(pre);
    }
}

#endif
