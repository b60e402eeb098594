/* test_cuda_conv_direct.c - conv_direct.cu's forward (DPTRAIN_CONV_DIRECT=on)
 * through the cuda:0 op table, against the host's formula bit for bit (skipped
 * without a GPU): each output the window's products summed in (c, kh, kw)
 * order by fused multiply-adds, then one FP32 addition of the bias, then the
 * ReLU. LeNet's conv1 (1x3x3 over 28x28, bias + fused ReLU), a CIFAR 3x5x5
 * layer (75 taps), padding with stride 2, dilation, a 1-D convolution and a
 * 1x1 without bias, negative pre-activations and a NaN input (kept through
 * the ReLU). A convolution past the kernel's limit (81 taps) and a grouped
 * one go to cuDNN as before: y within the fixtures' tolerance of the
 * formula (cuDNN's implicit GEMM may give the same bits). The backward
 * stays cuDNN's (test_cuda_ops with the variable set: emu_test_cuda_ops_direct). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "test_cuda_common.h"
#include "testing.h"

static const dp_backend_t *be;

typedef struct {
    const char *name;
    int N, C, H, W, K, kh, kw, sh, sw, ph, pw, dh, dw, groups, bias, relu, nan_at;
    int direct; /* 1: the direct kernel's bits are expected */
} direct_case_t;

static int out_size(int in, int k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* The formula: fmaf in (c, a, b) order, + bias, ReLU (NaN kept). */
static void reference(const direct_case_t *t, const float *x, const float *w, const float *b, float *y, int OH,
                      int OW) {
    const int Cg = t->C / t->groups, Kg = t->K / t->groups;
    for (int n = 0; n < t->N; n++)
        for (int k = 0; k < t->K; k++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    float s = 0.0f;
                    const int g = k / Kg;
                    for (int c = 0; c < Cg; c++)
                        for (int a = 0; a < t->kh; a++) {
                            int h = oh * t->sh - t->ph + a * t->dh;
                            if (h < 0 || h >= t->H) continue;
                            for (int bb = 0; bb < t->kw; bb++) {
                                int v = ow * t->sw - t->pw + bb * t->dw;
                                if (v < 0 || v >= t->W) continue;
                                s = fmaf(x[(((size_t)n * t->C + g * Cg + c) * t->H + h) * t->W + v],
                                         w[(((size_t)k * Cg + c) * t->kh + a) * t->kw + bb], s);
                            }
                        }
                    if (b) {
                        volatile float r = s + b[k];
                        s = r;
                    }
                    if (t->relu) s = s < 0.0f ? 0.0f : s;
                    y[(((size_t)n * t->K + k) * OH + oh) * OW + ow] = s;
                }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

static void check_case(const direct_case_t *t) {
    const int OH = out_size(t->H, t->kh, t->sh, t->ph, t->dh), OW = out_size(t->W, t->kw, t->sw, t->pw, t->dw);
    const int one_d = t->H == 1 && t->kh == 1;
    const size_t nx = (size_t)t->N * t->C * t->H * t->W, nw = (size_t)t->K * (t->C / t->groups) * t->kh * t->kw;
    const size_t ny = (size_t)t->N * t->K * OH * OW;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw), *b = malloc(sizeof(float) * t->K);
    float *want = malloc(sizeof(float) * ny);
    uint64_t state = 12345;
    for (size_t i = 0; i < nx; i++) x[i] = cuda_test_uniform(&state);
    for (size_t i = 0; i < nw; i++) w[i] = cuda_test_uniform(&state) * 0.5f;
    for (int i = 0; i < t->K; i++) b[i] = cuda_test_uniform(&state) * 0.25f;
    if (t->nan_at >= 0) x[t->nan_at] = NAN;
    reference(t, x, w, t->bias ? b : NULL, want, OH, OW);

    dp_tensor_t xt, wt, bt;
    const int xs[4] = {t->N, t->C, t->H, t->W}, xs1[3] = {t->N, t->C, t->W};
    const int ws[4] = {t->K, t->C / t->groups, t->kh, t->kw}, ws1[3] = {t->K, t->C / t->groups, t->kw};
    cuda_test_tensor(be, &xt, one_d ? 3 : 4, one_d ? xs1 : xs, x, 1);
    cuda_test_tensor(be, &wt, one_d ? 3 : 4, one_d ? ws1 : ws, w, 1);
    cuda_test_tensor(be, &bt, 1, (const int[]){t->K}, b, 1);
    dp_op_attr_t a = dp_op_attr_default();
    a.groups = t->groups;
    a.fuse_relu = t->relu;
    if (one_d) {
        a.stride[0] = t->sw, a.pad[0] = t->pw, a.dilation[0] = t->dw;
    } else {
        a.stride[0] = t->sh, a.stride[1] = t->sw, a.pad[0] = t->ph, a.pad[1] = t->pw;
        a.dilation[0] = t->dh, a.dilation[1] = t->dw;
    }
    dp_node_t node = {.kind = DP_OP_CONV, .attr = a, .in = {&xt, &wt, t->bias ? &bt : NULL}};
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    dp_status_t st = be->ops[DP_OP_CONV].forward(&node, arena);
    CHECK(st == DP_OK, "%s: forward: %s", t->name, dp_error_message());
    if (st == DP_OK) {
        float *y = cuda_test_download(be, node.out.data, ny);
        const int bits = same_bits(y, want, ny);
        double worst = testing_max_violation(y, want, ny, 1e-4, 1e-5, NULL);
        if (t->direct) CHECK(bits, "%s: y is not the direct formula's bits (max violation %.3g)", t->name, worst);
        else CHECK(worst <= 1.0, "%s: y off the formula (max violation %.3g)", t->name, worst);
        if (t->nan_at >= 0 && t->direct) {
            int nans = 0;
            for (size_t i = 0; i < ny; i++) nans += isnan(y[i]) != 0;
            CHECK(nans > 0, "%s: the NaN input left no NaN output", t->name);
        }
        printf("  %-36s y (%zu values) %s the direct formula's bits, max violation %.3g\n", t->name, ny,
               bits ? "has" : "has not", worst);
        free(y);
    }
    dp_arena_free(arena);
    be->free(be->ctx, xt.data), be->free(be->ctx, xt.grad), be->free(be->ctx, wt.data), be->free(be->ctx, wt.grad);
    be->free(be->ctx, bt.data), be->free(be->ctx, bt.grad);
    free(x), free(w), free(b), free(want);
}

int main(void) {
    setenv("DPTRAIN_CONV_DIRECT", "on", 1);
    be = cuda_backend_or_skip("test_cuda_conv_direct");
    const direct_case_t cases[] = {
        /* name                          N  C  H   W   K  kh kw sh sw ph pw dh dw g bias relu nan direct */
        {"lenet conv1 (bias, relu)",     8, 1, 28, 28, 20, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 1, -1, 1},
        {"lenet conv1, a NaN input",     2, 1, 28, 28, 20, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 1, 100, 1},
        {"3x5x5 (75 taps), relu",        3, 3, 12, 11, 6, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1, 1, -1, 1},
        {"pad 1 stride 2, no bias",      2, 4, 9, 10, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 0, -1, 1},
        {"dilation 2, stride (1, 3)",    2, 2, 13, 14, 3, 3, 2, 1, 3, 2, 1, 2, 2, 1, 1, 0, -1, 1},
        {"1-D, pad 1 stride 2",          3, 4, 1, 17, 5, 1, 3, 1, 2, 0, 1, 1, 1, 1, 1, 1, -1, 1},
        {"1x1, no bias",                 2, 64, 5, 4, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, -1, 1},
        {"9x3x3 (81 taps): cuDNN",       2, 9, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, 0},
        {"groups 2: cuDNN",              2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, 0, -1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
    return testing_finish("test_cuda_conv_direct");
}
