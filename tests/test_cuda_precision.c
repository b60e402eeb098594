/* test_cuda_precision.c - --precision bf16 on a CUDA device (skipped
 * without a GPU; on the emulator as emu_test_cuda_precision): the ops
 * that take bf16 operands (conv 1-D and 2-D, strided and grouped;
 * conv_transpose; linear) against the CPU's FP32 ops, within a bound
 * derived from bf16's precision, forward and backward, their gradients
 * written (unset, NaN-filled) and added (zero-filled) alike; and the
 * casts bit for bit.
 *
 * The bound. bf16 keeps p = 8 significant bits (7 stored): rounding to
 * nearest has unit roundoff u = 2^-8 (relative error at most u); FP32's is
 * v = 2^-24. An output is y = sum_k a_k b_k over K terms (plus a bias).
 * The GPU rounds each operand to bf16, a_k (1 + al_k) and b_k (1 + be_k),
 * |al|, |be| <= u; their product is exact in FP32 (8 + 8 significant bits
 * fit in 24); the sum of K such products in FP32, in any order, is off by
 * at most gamma_K = K v / (1 - K v) times sum |a_k b_k| (1 + u)^2; cuDNN's
 * bf16 result is rounded once more (1 + de), |de| <= u (cuBLAS's is FP32:
 * no such term); the bias is added in FP32, and a convolution's output,
 * stored in bf16 (layout_cuda.h), is rounded once more after it
 * ((1 + u)^4 for y with a bias). With S = sum_k |a_k| |b_k| +
 * |bias| (the CPU op run on the absolute values: the same sums), and the
 * CPU's own FP32 error (at most gamma_{K+1} S):
 *   convolutions: |gpu - cpu| <= ((1 + u)^3 - 1 + 2.2 (K + 1) v) S
 *   linear:       |gpu - cpu| <= ((1 + u)^2 - 1 + 2.2 (K + 1) v) S
 *   bias gradients (FP32 on both): <= 2.2 (K + 1) v S
 * (2.2 (K + 1) v covers gamma_K (1 + u)^3 + gamma_{K+1} for K v < 0.01;
 * K is the largest sum of the op's three products). The worst ratio of
 * error to bound is printed; it must be <= 1. And the bf16 path must have
 * run: the outputs' largest error relative to S is past 8 (K + 1) v, which
 * FP32 sums alone cannot reach.
 *
 * The casts: linear with the identity as weight gives y = bf16(x) exactly
 * (the other products are zeros) and dx = bf16(dy): over values with
 * ties, subnormals and neighbours of ties, y and dx must be bf16.h's
 * dp_bf16_from_float of x and dy, bit for bit (that conversion is checked
 * against a reference in test_bf16.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cuda/bf16.h"
#include "dptrain/ops.h"
#include "test_cuda_common.h"
#include "testing.h"

static const dp_backend_t *be;

#define U_BF16 0.00390625         /* 2^-8 */
#define V_FP32 5.9604644775390625e-8 /* 2^-24 */

typedef struct {
    const char *name;
    dp_op_kind_t kind;
    int xdim, x[5], wdim, w[5], bias;
    int stride, pad, groups, output_padding;
} op_case_t;

/* x, w, b, dy and the four results y, dx, dw, db of one case */
enum { T_X, T_W, T_B, T_DY, T_COUNT };
enum { R_Y, R_DX, R_DW, R_DB, R_COUNT };
typedef struct {
    size_t n[T_COUNT];
    float *in[T_COUNT];
    size_t rn[R_COUNT];
    float *out[R_COUNT];
} op_data_t;

static size_t numel(int nd, const int *s) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)s[i];
    return n;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float uniform(void) { return cuda_test_uniform(&rng); } /* in [-1, 1) */

static void node_of(const op_case_t *k, dp_node_t *node, dp_tensor_t t[3]) {
    memset(node, 0, sizeof *node);
    memset(t, 0, 3 * sizeof *t);
    node->kind = k->kind;
    node->attr = dp_op_attr_default();
    for (int i = 0; i < 3; i++) {
        node->attr.stride[i] = k->stride ? k->stride : 1;
        node->attr.pad[i] = k->pad;
        node->attr.output_padding[i] = k->output_padding;
    }
    node->attr.groups = k->groups ? k->groups : 1;
    dp_tensor_set_shape(&t[0], k->xdim, k->x);
    dp_tensor_set_shape(&t[1], k->wdim, k->w);
    const int bshape[1] = {k->kind == DP_OP_CONV_TRANSPOSE ? k->w[1] * (k->groups ? k->groups : 1) : k->w[0]};
    dp_tensor_set_shape(&t[2], 1, bshape);
    node->in[0] = &t[0], node->in[1] = &t[1], node->in[2] = k->bias ? &t[2] : NULL;
}

/* The case on the CPU (gpu 0: host memory, the CPU's ops; grads start at
 * 0 and are added to) or on cuda:0 (grads unset and NaN-filled when
 * `unset`, else zero-filled and added to); results malloc'd into d->out. */
static int run_case(const op_case_t *k, op_data_t *d, int gpu, int unset) {
    dp_node_t node;
    dp_tensor_t t[3];
    node_of(k, &node, t);
    dp_arena_t *arena = gpu ? dp_arena_new_on(be, 1 << 16) : dp_arena_new(1 << 16);
    int ok = 0;
    for (int i = 0; i < 3; i++) {
        if (!node.in[i]) continue;
        size_t bytes = sizeof(float) * d->n[i];
        float *fill = malloc(bytes);
        for (size_t j = 0; j < d->n[i]; j++) fill[j] = gpu && unset ? NAN : 0.0f;
        if (gpu) {
            t[i].data = be->alloc(be->ctx, bytes, "test input");
            t[i].grad = be->alloc(be->ctx, bytes, "test grad");
            be->upload(be->ctx, t[i].data, d->in[i], bytes);
            be->upload(be->ctx, t[i].grad, fill, bytes);
            free(fill);
        } else {
            t[i].data = malloc(bytes);
            memcpy(t[i].data, d->in[i], bytes);
            t[i].grad = fill;
        }
        t[i].grad_unset = gpu && unset;
    }
    dp_status_t st = gpu ? be->ops[k->kind].forward(&node, arena) : dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "%s: forward on %s: %s", k->name, gpu ? "cuda:0" : "cpu", dp_error_message());
    if (st != DP_OK) goto done;
    d->rn[R_Y] = dp_tensor_numel(&node.out);
    CHECK(d->rn[R_Y] == d->n[T_DY], "%s: output of %zu values, dy of %zu", k->name, d->rn[R_Y], d->n[T_DY]);
    if (d->rn[R_Y] != d->n[T_DY]) goto done;
    d->out[R_Y] = malloc(sizeof(float) * d->rn[R_Y]);
    if (gpu) {
        /* conv's output is a stored bf16 activation (the backend's mark 0x20, DP_CUDA_BF16 in
         * src/backend/cuda/layout_cuda.h), conv_transpose's and linear's FP32 */
        const int stored_bf16 = (node.out.layout & 0x20) != 0;
        CHECK(stored_bf16 == (k->kind == DP_OP_CONV), "%s: the output's mark %#x: %s expected", k->name,
              (unsigned)node.out.layout, k->kind == DP_OP_CONV ? "bf16" : "FP32");
        if (stored_bf16) {
            uint16_t *h = malloc(sizeof(uint16_t) * d->rn[R_Y]);
            be->download(be->ctx, h, node.out.data, sizeof(uint16_t) * d->rn[R_Y]);
            for (size_t j = 0; j < d->rn[R_Y]; j++) d->out[R_Y][j] = dp_bf16_to_float(h[j]);
            free(h);
        } else {
            be->download(be->ctx, d->out[R_Y], node.out.data, sizeof(float) * d->rn[R_Y]);
        }
        be->upload(be->ctx, node.out.grad, d->in[T_DY], sizeof(float) * d->n[T_DY]);
        node.out.grad_unset = 0;
        st = be->ops[k->kind].backward(&node, arena);
    } else {
        memcpy(d->out[R_Y], node.out.data, sizeof(float) * d->rn[R_Y]);
        dp_grad_prepare(&node.out);
        for (size_t j = 0; j < d->n[T_DY]; j++) node.out.grad[j] += d->in[T_DY][j];
        st = dp_op_backward(&node, arena);
    }
    CHECK(st == DP_OK, "%s: backward on %s: %s", k->name, gpu ? "cuda:0" : "cpu", dp_error_message());
    for (int i = 0; i < 3 && st == DP_OK; i++) {
        if (!node.in[i]) continue;
        d->rn[R_DX + i] = d->n[i];
        d->out[R_DX + i] = malloc(sizeof(float) * d->n[i]);
        if (gpu) be->download(be->ctx, d->out[R_DX + i], t[i].grad, sizeof(float) * d->n[i]);
        else memcpy(d->out[R_DX + i], t[i].grad, sizeof(float) * d->n[i]);
    }
    ok = st == DP_OK && (!gpu || be->failure == NULL || be->failure(be->ctx) == DP_OK);
done:
    for (int i = 0; i < 3; i++) {
        if (gpu) be->free(be->ctx, t[i].data), be->free(be->ctx, t[i].grad);
        else free(t[i].data), free(t[i].grad);
    }
    dp_arena_free(arena);
    return ok;
}

static void free_results(op_data_t *d) {
    for (int r = 0; r < R_COUNT; r++) free(d->out[r]), d->out[r] = NULL;
}

/* The largest number of products summed into one result of the case. */
static double terms_of(const op_case_t *k, const op_data_t *d) {
    if (k->kind == DP_OP_LINEAR) { /* y: IN, dx: OUT, dw: N */
        double a = k->x[1], b = k->w[0], c = k->x[0];
        return fmax(a, fmax(b, c));
    }
    const size_t taps = numel(k->wdim - 2, k->w + 2);
    /* conv: y sums C/g x taps, dx at most K/g x taps, dw N x out positions; conv_transpose the same with roles swapped */
    double per_y = (double)k->w[1] * taps, per_dx = (double)k->w[0] * taps;
    double per_dw = (double)d->n[T_DY] / (k->kind == DP_OP_CONV ? k->w[0] : k->w[1] * (k->groups ? k->groups : 1));
    if (k->kind == DP_OP_CONV_TRANSPOSE) per_dw = (double)d->n[T_X] / k->w[0];
    return fmax(per_y, fmax(per_dx, per_dw));
}

static void run_op_case(const op_case_t *k) {
    op_data_t d = {0}, mag = {0}, cpu = {0}, gpu_w = {0}, gpu_a = {0};
    d.n[T_X] = numel(k->xdim, k->x), d.n[T_W] = numel(k->wdim, k->w);
    d.n[T_B] = k->kind == DP_OP_CONV_TRANSPOSE ? (size_t)k->w[1] * (k->groups ? k->groups : 1) : (size_t)k->w[0];
    /* dy's size: from a CPU forward on zeros (the op's own shape rules) */
    {
        dp_node_t node;
        dp_tensor_t t[3];
        node_of(k, &node, t);
        float *zx = calloc(d.n[T_X], sizeof(float)), *zw = calloc(d.n[T_W], sizeof(float)),
              *zb = calloc(d.n[T_B], sizeof(float));
        t[0].data = zx, t[1].data = zw, t[2].data = zb;
        dp_arena_t *arena = dp_arena_new(1 << 16);
        CHECK(dp_op_forward(&node, arena) == DP_OK, "%s: shape: %s", k->name, dp_error_message());
        d.n[T_DY] = dp_tensor_numel(&node.out);
        dp_arena_free(arena);
        free(zx), free(zw), free(zb);
    }
    for (int i = 0; i < T_COUNT; i++) {
        d.in[i] = malloc(sizeof(float) * d.n[i]);
        mag.in[i] = malloc(sizeof(float) * d.n[i]);
        mag.n[i] = d.n[i];
        for (size_t j = 0; j < d.n[i]; j++) d.in[i][j] = uniform(), mag.in[i][j] = fabsf(d.in[i][j]);
    }
    memcpy(cpu.n, d.n, sizeof d.n), memcpy(cpu.in, d.in, sizeof d.in);
    memcpy(gpu_w.n, d.n, sizeof d.n), memcpy(gpu_w.in, d.in, sizeof d.in);
    memcpy(gpu_a.n, d.n, sizeof d.n), memcpy(gpu_a.in, d.in, sizeof d.in);
    if (run_case(k, &cpu, 0, 0) && run_case(k, &mag, 0, 0) && run_case(k, &gpu_w, 1, 1) && run_case(k, &gpu_a, 1, 0)) {
        const double K = terms_of(k, &d), u = U_BF16, v = V_FP32;
        const double fp32 = 2.2 * (K + 1) * v;
        const double coef = k->kind == DP_OP_LINEAR ? (1 + u) * (1 + u) - 1 + fp32 : (1 + u) * (1 + u) * (1 + u) - 1 + fp32;
        /* a convolution's stored bf16 y with a bias: rounded once more after the bias is added */
        const double coef_y = k->kind == DP_OP_CONV && k->bias ? (1 + u) * (1 + u) * (1 + u) * (1 + u) - 1 + fp32 : coef;
        const char *names[R_COUNT] = {"y", "dx", "dw", "db"};
        double worst = 0.0, beyond_fp32 = 0.0;
        int same = 1;
        for (int r = 0; r < R_COUNT; r++) {
            if (!cpu.out[r]) continue;
            const double c = r == R_DB ? fp32 : r == R_Y ? coef_y : coef;
            for (size_t j = 0; j < cpu.rn[r]; j++) {
                double S = mag.out[r][j], err = fabs((double)gpu_w.out[r][j] - (double)cpu.out[r][j]);
                double ratio = err / (c * S + 1e-30);
                if (!(ratio <= worst)) worst = isnan(ratio) ? INFINITY : ratio;
                if (r != R_DB && S > 0 && err / S > beyond_fp32) beyond_fp32 = err / S;
                if (!(ratio <= 1.0) && worst == ratio)
                    CHECK(0, "%s: %s[%zu] = %.9g on cuda:0, %.9g on cpu: past the bound %.3g", k->name, names[r], j,
                          gpu_w.out[r][j], cpu.out[r][j], c * S);
            }
            same &= memcmp(gpu_w.out[r], gpu_a.out[r], sizeof(float) * cpu.rn[r]) == 0;
        }
        CHECK(worst <= 1.0, "%s: error / bound %.3g", k->name, worst);
        CHECK(beyond_fp32 > 8 * (K + 1) * v, "%s: largest error / S %.3g, within FP32's 8 (K + 1) v = %.3g: the bf16 "
              "path did not run", k->name, beyond_fp32, 8 * (K + 1) * v);
        CHECK(same, "%s: gradients written (unset) and added to zeros differ", k->name);
        printf("  %-34s K %6.0f: worst error / bound %.3f (bound %.4f S), largest error / S %.2e\n", k->name, K,
               worst, coef, beyond_fp32);
    }
    free_results(&cpu), free_results(&mag), free_results(&gpu_w), free_results(&gpu_a);
    for (int i = 0; i < T_COUNT; i++) free(d.in[i]), free(mag.in[i]);
}

/* linear with W = I: y = bf16(x), dx = bf16(dy), bit for bit */
static void check_casts(void) {
    enum { M = 64 };
    static const uint32_t interesting[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x00018000u,
                                           0x007fffffu, 0x00008000u, 0xbf808000u, 0xc0218000u, 0x7f7f7fffu,
                                           0x3eaaaaabu, 0x40490fdbu, 0x00000001u, 0x80800000u, 0x41c8c000u};
    op_case_t k = {"linear, identity weight", DP_OP_LINEAR, 2, {M, M}, 2, {M, M}, 0, 0, 0, 0, 0};
    op_data_t d = {0};
    d.n[T_X] = d.n[T_W] = d.n[T_DY] = (size_t)M * M;
    d.n[T_B] = M;
    for (int i = 0; i < T_COUNT; i++) d.in[i] = calloc(d.n[i], sizeof(float));
    for (size_t j = 0; j < d.n[T_X]; j++) {
        uint32_t bits = j < sizeof interesting / sizeof interesting[0] ? interesting[j] : 0;
        float f;
        memcpy(&f, &bits, sizeof f);
        d.in[T_X][j] = bits ? f : uniform() * 3.0f;
        d.in[T_DY][j] = j % 7 == 0 ? d.in[T_X][j] : uniform() * 0.5f;
        if (d.in[T_X][j] == 0.0f) d.in[T_X][j] = 0.5f;
        if (d.in[T_DY][j] == 0.0f) d.in[T_DY][j] = 0.25f;
    }
    for (int i = 0; i < M; i++) d.in[T_W][(size_t)i * M + i] = 1.0f;
    long wrong = 0;
    if (run_case(&k, &d, 1, 1)) {
        for (size_t j = 0; j < d.n[T_X]; j++) {
            float want_y = dp_bf16_to_float(dp_bf16_from_float(d.in[T_X][j]));
            float want_dx = dp_bf16_to_float(dp_bf16_from_float(d.in[T_DY][j]));
            wrong += memcmp(&d.out[R_Y][j], &want_y, sizeof want_y) != 0;
            wrong += memcmp(&d.out[R_DX][j], &want_dx, sizeof want_dx) != 0;
        }
        CHECK(wrong == 0, "identity linear: %ld of %zu values are not bf16(x) or bf16(dy) bit for bit", wrong,
              2 * d.n[T_X]);
        printf("  identity linear: y = bf16(x) and dx = bf16(dy) bit for bit over %zu values, %ld differ\n",
               2 * d.n[T_X], wrong);
    }
    free_results(&d);
    for (int i = 0; i < T_COUNT; i++) free(d.in[i]);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_precision");
    CHECK(be->set_precision && be->set_precision(be->ctx, DP_PRECISION_BF16) == DP_OK, "set_precision bf16: %s",
          dp_error_message());
    static const op_case_t cases[] = {
        {"conv2d 3->4, 3x3, pad 1, bias", DP_OP_CONV, 4, {2, 3, 9, 9}, 4, {4, 3, 3, 3}, 1, 1, 1, 1, 0},
        {"conv2d 4->6, stride 2, groups 2", DP_OP_CONV, 4, {2, 4, 10, 10}, 4, {6, 2, 3, 3}, 1, 2, 1, 2, 0},
        {"conv1d 2->5, k 4, pad 2, no bias", DP_OP_CONV, 3, {3, 2, 17}, 3, {5, 2, 4}, 0, 1, 2, 1, 0},
        {"conv2d 8->16, 5x5 (LeNet's conv2)", DP_OP_CONV, 4, {2, 8, 12, 12}, 4, {16, 8, 5, 5}, 1, 1, 0, 1, 0},
        {"conv_transpose2d 3->4, stride 2", DP_OP_CONV_TRANSPOSE, 4, {2, 3, 5, 5}, 4, {3, 4, 3, 3}, 1, 2, 1, 1, 1},
        {"linear 40->9, bias", DP_OP_LINEAR, 2, {6, 40}, 2, {9, 40}, 1, 0, 0, 0, 0},
        {"linear 400->120 (LeNet's fc1)", DP_OP_LINEAR, 2, {16, 400}, 2, {120, 400}, 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_op_case(&cases[i]);
    check_casts();
    CHECK(be->set_precision(be->ctx, DP_PRECISION_FP32) == DP_OK, "set_precision fp32: %s", dp_error_message());
    return testing_finish("test_cuda_precision");
}
