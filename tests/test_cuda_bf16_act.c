/* test_cuda_bf16_act.c - activations stored in bf16 with --precision bf16
 * on a CUDA device (src/backend/cuda/layout_cuda.h; skipped without a GPU;
 * on the emulator as emu_test_cuda_bf16_act): every op that reads a stored
 * bf16 activation, forward and backward, gives the bits it gives on an FP32
 * input holding the same values, and stores its own output as one rounding
 * of its FP32 result.
 *
 * Each case is a small tape: v (N, C, H, W: values that are bf16 numbers,
 * NCHW FP32 as every input made above the backend) -> an identity 1x1
 * convolution -> y -> the op under test -> o -> flatten -> MSE against a
 * fixed target. y's gradient is a buffer the test hangs on y (unset, so the
 * op writes it), so the op's dx is read there and nothing flows further.
 * Three runs:
 *   A: --precision bf16 throughout: y is cuDNN's bf16 result, stored bf16
 *      (marked, checked), the op reads bf16;
 *   B: the identity conv in FP32 (y FP32, unmarked, checked, the same
 *      values), then --precision bf16 for the op: it reads FP32;
 *   C: FP32 throughout (the reference).
 * A and B must agree bit for bit: o (through flatten's FP32 copy), the
 * loss, y's gradient (the op's dx) and the op's parameter gradients; both
 * store o in bf16 when it has 3 or more dims (the mark checked), FP32
 * flatten output. Against C, so that the check cannot pass by both runs
 * misreading the same memory: o in A is C's o rounded to bf16 (to nearest,
 * ties to even: bf16.h) bit for bit for the ops whose FP32 arithmetic sees
 * the same inputs, and the rest within 2^-5 of the largest |value| of C's
 * (their dy comes from the rounded o); 2^-3 for conv and conv_transpose,
 * whose products take bf16 operands. A conv run in FP32 precision on A's
 * bf16 y (a precision changed between ops) reads an FP32 copy: A = B
 * again. The same cases again with channels-last on (y and o NHWC and
 * bf16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cuda/bf16.h"
#include "dptrain/autograd.h"
#include "dptrain/ops.h"
#include "test_cuda_common.h"
#include "testing.h"

static const dp_backend_t *be;

/* The CUDA backend's marks (src/backend/cuda/layout_cuda.h, which needs CUDA's headers) */
#define DP_CUDA_NHWC 1
#define DP_CUDA_BF16 0x20

#define N 2
#define C 4
#define H 6
#define W 6

static uint64_t rng;
static float uniform(void) { return cuda_test_uniform(&rng); } /* in [-1, 1) */
static float bf16_round(float f) { return dp_bf16_to_float(dp_bf16_from_float(f)); }

/* A device tensor of `shape` with `host` data (random when NULL, from
 * `seed`; bf16 numbers when `bf16`) and, with grad, a zeroed grad. */
static dp_tensor_t *device_tensor(dp_tensor_t *t, int ndim, const int *shape, uint64_t seed, int bf16, int grad,
                                  const float *host) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    float *h = malloc(sizeof(float) * n);
    rng = seed;
    for (size_t i = 0; i < n; i++) h[i] = host ? host[i] : bf16 ? bf16_round(uniform() * 2.0f) : uniform();
    cuda_test_tensor(be, t, ndim, shape, h, grad);
    free(h);
    return t;
}

typedef struct {
    const char *name;
    dp_op_kind_t kind;
    int fuse_relu;
    int bf16_out; /* o is stored in bf16 in runs A and B */
    int exact;    /* A's o is C's rounded to bf16, bit for bit */
    int loose;    /* the results against C within 2^-3 (a convolution's bf16 operands), else 2^-5 */
    int fp32_op;  /* A and B run the op in FP32 precision (A's bf16 y converted to FP32 first) */
} act_case_t;

enum { R_O, R_LOSS, R_DY, R_DP1, R_DP2, R_COUNT };
static const char *const result_names[R_COUNT] = {"o (flattened)", "loss", "y's gradient (the op's dx)",
                                                  "op parameter 1 gradient", "op parameter 2 gradient"};
typedef struct {
    float *r[R_COUNT];
    size_t n[R_COUNT];
    int y_layout, o_layout, flat_layout;
} act_result_t;

enum { RUN_A, RUN_B, RUN_C };

static void set_precision(dp_precision_t p) {
    CHECK(be->set_precision(be->ctx, p) == DP_OK, "set_precision %s: %s", dp_precision_name(p), dp_error_message());
}

static void run_case(const act_case_t *k, int run, int channels_last, act_result_t *res) {
    memset(res, 0, sizeof *res);
    CHECK(be->set_channels_last(be->ctx, channels_last) == DP_OK, "set_channels_last: %s", dp_error_message());
    set_precision(run == RUN_C ? DP_PRECISION_FP32 : run == RUN_A ? DP_PRECISION_BF16 : DP_PRECISION_FP32);
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    dp_tape_t *tape = dp_tape_new_on(be, arena);
    dp_tensor_t v, id, p1, p2, z, w2, target;
    const int vs[4] = {N, C, H, W}, ids[4] = {C, C, 1, 1}, ps[1] = {C}, w2s[4] = {C, C, 3, 3};
    float identity[C * C] = {0};
    for (int i = 0; i < C; i++) identity[i * C + i] = 1.0f;
    device_tensor(&v, 4, vs, 1, 1, 0, NULL);
    device_tensor(&id, 4, ids, 0, 0, 0, identity);
    device_tensor(&p1, 1, ps, 4, 0, 1, NULL);
    device_tensor(&p2, 1, ps, 5, 0, 1, NULL);
    device_tensor(&z, 4, vs, 6, 0, 0, NULL); /* an FP32 operand of add, not bf16 numbers */
    device_tensor(&w2, 4, w2s, 7, 0, 1, NULL);
    float *y_grad = be->alloc(be->ctx, sizeof(float) * N * C * H * W, "y's gradient");
    dp_op_attr_t conv_attr = dp_op_attr_default();
    dp_tensor_t *y = dp_tape_op(tape, DP_OP_CONV, &conv_attr, &v, &id, NULL, NULL);
    CHECK(y != NULL, "%s: identity conv: %s", k->name, dp_error_message());
    if (!y) return;
    y->grad = y_grad; /* the op's dx lands here; the identity conv has nothing to pass on */
    y->grad_unset = 1;
    res->y_layout = y->layout;
    if (run == RUN_B) set_precision(DP_PRECISION_BF16);
    if (k->fp32_op) set_precision(DP_PRECISION_FP32);
    /* add: y + y with fuse_relu, else y + z (z FP32); conv with a bias: the bf16 input is cuDNN's operand as
     * it is; conv_transpose and flatten alone (o = y): converted to FP32 first */
    dp_tensor_t *o = cuda_test_op(tape, k->kind, k->fuse_relu, y, &z, &p1, &p2, &w2, &p1);
    CHECK(o != NULL, "%s: the op: %s", k->name, dp_error_message());
    if (!o) return;
    res->o_layout = o->layout;
    dp_tensor_t *flat = dp_tape_op(tape, DP_OP_FLATTEN, NULL, o, NULL, NULL, NULL);
    CHECK(flat != NULL, "%s: flatten: %s", k->name, dp_error_message());
    if (!flat) return;
    res->flat_layout = flat->layout;
    device_tensor(&target, flat->ndim, flat->shape, 8, 0, 0, NULL);
    dp_tensor_t *loss = dp_tape_op(tape, DP_OP_MSE, NULL, flat, &target, NULL, NULL);
    CHECK(loss != NULL, "%s: mse: %s", k->name, dp_error_message());
    if (!loss) return;
    res->n[R_O] = dp_tensor_numel(flat);
    res->r[R_O] = cuda_test_download(be, flat->data, res->n[R_O]);
    res->n[R_LOSS] = 1;
    res->r[R_LOSS] = cuda_test_download(be, loss->data, 1);
    CHECK(dp_tape_backward(tape, loss, NULL, NULL) == DP_OK, "%s: backward: %s", k->name, dp_error_message());
    res->n[R_DY] = (size_t)N * C * H * W;
    res->r[R_DY] = cuda_test_download(be, y_grad, res->n[R_DY]);
    const dp_tensor_t *params[2] = {&p1, &p2};
    if (k->kind == DP_OP_CONV || k->kind == DP_OP_CONV_TRANSPOSE) params[1] = &w2;
    for (int i = 0; i < 2; i++) {
        res->n[R_DP1 + i] = dp_tensor_numel(params[i]);
        res->r[R_DP1 + i] = cuda_test_download(be, params[i]->grad, res->n[R_DP1 + i]);
    }
    CHECK(be->failure(be->ctx) == DP_OK, "%s: the device failed: %s", k->name, dp_error_message());
    dp_tape_free(tape);
    dp_arena_free(arena);
    be->free(be->ctx, y_grad);
    dp_tensor_t *const all[] = {&v, &id, &p1, &p2, &z, &w2, &target};
    cuda_test_free(be, all, sizeof all / sizeof all[0]);
}

static double largest(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static void compare(const act_case_t *k, int channels_last) {
    act_result_t r[3];
    for (int run = RUN_A; run <= RUN_C; run++) run_case(k, run, channels_last, &r[run]);
    const char *mode = channels_last ? "NHWC" : "NCHW";
    const int nhwc = channels_last ? DP_CUDA_NHWC : 0;
    CHECK(r[RUN_A].y_layout == (nhwc | DP_CUDA_BF16), "%s, %s: A's y is not stored bf16 (mark %#x)", k->name, mode,
          (unsigned)r[RUN_A].y_layout);
    CHECK(r[RUN_B].y_layout == nhwc && r[RUN_C].y_layout == nhwc, "%s, %s: B's or C's y marked %#x, %#x", k->name,
          mode, (unsigned)r[RUN_B].y_layout, (unsigned)r[RUN_C].y_layout);
    for (int run = RUN_A; run <= (k->kind == DP_OP_COUNT ? RUN_A : RUN_B); run++) /* flatten alone: o is y */
        CHECK(((r[run].o_layout & DP_CUDA_BF16) != 0) == k->bf16_out, "%s, %s: run %c: o's mark %#x, bf16 %s",
              k->name, mode, 'A' + run, (unsigned)r[run].o_layout, k->bf16_out ? "expected" : "not expected");
    CHECK(!(r[RUN_C].o_layout & DP_CUDA_BF16), "%s, %s: an FP32 run stored bf16", k->name, mode);
    for (int run = RUN_A; run <= RUN_C; run++)
        CHECK(r[run].flat_layout == 0, "%s, %s: run %c: flatten's output marked %#x", k->name, mode, 'A' + run,
              (unsigned)r[run].flat_layout);
    int exact_o = 1;
    double worst = 0.0;
    for (int i = 0; i < R_COUNT; i++) {
        const float *a = r[RUN_A].r[i], *b = r[RUN_B].r[i], *c = r[RUN_C].r[i];
        if (!a || !b || !c) continue;
        const size_t n = r[RUN_A].n[i];
        CHECK(memcmp(a, b, sizeof(float) * n) == 0, "%s, %s: %s: a bf16 input and an FP32 one differ in bits",
              k->name, mode, result_names[i]);
        if (i == R_O && k->exact) {
            for (size_t j = 0; j < n; j++) {
                float want = bf16_round(c[j]);
                if (memcmp(&a[j], &want, sizeof want) != 0) {
                    if (exact_o) CHECK(0, "%s, %s: o[%zu] = %.9g, C's %.9g rounded is %.9g", k->name, mode, j,
                                       (double)a[j], (double)c[j], (double)want);
                    exact_o = 0;
                }
            }
        } else if (i != R_LOSS) {
            const double scale = largest(c, n), tol = scale / (k->loose ? 8.0 : 32.0) + 1e-30;
            for (size_t j = 0; j < n; j++) {
                double e = fabs((double)a[j] - (double)c[j]) / tol;
                if (!(e <= worst)) {
                    worst = isnan(e) ? INFINITY : e;
                    if (!(e <= 1.0))
                        CHECK(0, "%s, %s: %s[%zu] = %.9g in bf16, %.9g in FP32: past 2^-%d of %.3g", k->name, mode,
                              result_names[i], j, (double)a[j], (double)c[j], k->loose ? 3 : 5, scale);
                }
            }
        }
        for (int run = RUN_A; run <= RUN_C; run++) free(r[run].r[i]);
    }
    printf("  %-28s %s: o %s, A = B bit for bit; against FP32: o %s, the rest at worst %.3g of 2^-%d\n", k->name,
           mode, k->bf16_out ? "bf16" : "FP32", k->exact ? (exact_o ? "rounded once" : "NOT rounded once") : "close",
           worst, k->loose ? 3 : 5);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_bf16_act");
    CHECK(be->set_channels_last != NULL && be->set_precision != NULL, "the CUDA table has no set_channels_last or "
          "set_precision");
    if (!be->set_channels_last || !be->set_precision) return testing_finish("test_cuda_bf16_act");
    const act_case_t cases[] = {
        {"relu", DP_OP_RELU, 0, 1, 1, 0, 0},
        {"sigmoid", DP_OP_SIGMOID, 0, 1, 1, 0, 0},
        {"tanh", DP_OP_TANH, 0, 1, 1, 0, 0},
        {"relu6", DP_OP_RELU6, 0, 1, 1, 0, 0},
        {"hardswish", DP_OP_HARDSWISH, 0, 1, 1, 0, 0},
        {"hardsigmoid", DP_OP_HARDSIGMOID, 0, 1, 1, 0, 0},
        {"gelu", DP_OP_GELU, 0, 1, 1, 0, 0},
        {"silu", DP_OP_SILU, 0, 1, 1, 0, 0},
        {"add (bf16 + FP32)", DP_OP_ADD, 0, 1, 1, 0, 0},
        {"add y + y, relu", DP_OP_ADD, 1, 1, 1, 0, 0},
        {"batch_norm", DP_OP_BATCH_NORM, 0, 1, 1, 0, 0},
        {"layer_norm (converted)", DP_OP_LAYER_NORM, 0, 0, 0, 0, 0},
        {"batch_norm + relu", DP_OP_BATCH_NORM, 1, 1, 1, 0, 0},
        {"max_pool", DP_OP_MAX_POOL, 0, 1, 1, 0, 0},
        {"avg_pool", DP_OP_AVG_POOL, 0, 1, 1, 0, 0},
        {"global_avg_pool", DP_OP_GLOBAL_AVG_POOL, 0, 1, 1, 0, 0},
        {"dropout", DP_OP_DROPOUT, 0, 1, 1, 0, 0},
        {"drop_path", DP_OP_DROP_PATH, 0, 1, 1, 0, 0},
        {"conv + bias + relu", DP_OP_CONV, 1, 1, 0, 1, 0},
        {"conv + bias", DP_OP_CONV, 0, 1, 0, 1, 0},
        {"conv_transpose (converted)", DP_OP_CONV_TRANSPOSE, 0, 0, 0, 1, 0},
        {"conv in FP32 (converted)", DP_OP_CONV, 1, 0, 0, 1, 1},
        {"flatten (converted)", DP_OP_COUNT, 0, 1, 1, 0, 0},
    };
    for (int channels_last = 0; channels_last <= 1; channels_last++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare(&cases[i], channels_last);
    be->set_channels_last(be->ctx, 0);
    be->set_precision(be->ctx, DP_PRECISION_FP32);
    return testing_finish("test_cuda_bf16_act");
}
