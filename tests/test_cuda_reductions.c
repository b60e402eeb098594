/* test_cuda_reductions.c - the CUDA backend's per-channel sums spread over
 * the grid (bias gradients of conv and linear, batch norm's statistics and
 * gradient sums) and its elementwise per-channel kernels (bias + ReLU,
 * ReLU's masks, batch norm's apply and dx, average pooling's backward), on
 * shapes that take every path of the split: one channel and many, L = 1
 * (linear and batch norm over features: the columns layout), N = 1, sizes
 * that are no multiple of the block or the slice, many slices per channel
 * (N = 256, C = 3, 28 x 28), a large plane. Skipped (77) without a GPU;
 * emu_test_cuda_reductions runs it on the CUDA emulator.
 *
 * For each shape:
 *   - sums of small integers are exact in any order, so the GPU's sums must
 *     equal the host's exact sums bit for bit (a slice or an element lost
 *     or counted twice shows);
 *   - sums of other values: two runs give the same bits, and the result is
 *     the CPU op's within the tolerances of test_cuda_ops.c;
 *   - elementwise results are bit-identical to a host reference that is the
 *     per-element formula of the kernels (ops_batch_norm.c's coefficients,
 *     the pooling divisor, ...) on the same inputs, the batch norm
 *     statistics and gradient sums taken from the GPU (downloaded, or seen
 *     by a SyncBatchNorm hook that passes them through unchanged);
 *   - batch norm with fuse_relu gives batch norm + relu's (relu6's) bits (bn_relu_check.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "bn_relu_check.h"
#include "test_cuda_common.h"
#include "testing.h"

#define RTOL 1e-4
#define ATOL 1e-5

static const dp_backend_t *be;

/* One rounding per operation on the host too, whatever the compiler's
 * contraction setting (the kernels are built without FMA contraction). */
static float fmul(float a, float b) {
    volatile float r = a * b;
    return r;
}
static float fadd(float a, float b) {
    volatile float r = a + b;
    return r;
}
static double dmul(double a, double b) {
    volatile double r = a * b;
    return r;
}

static void *upload(const void *host, size_t bytes) {
    void *d = be->alloc(be->ctx, bytes ? bytes : 4, "test tensor");
    if (d && bytes) be->upload(be->ctx, d, host, bytes);
    return d;
}

static void download(void *host, const void *dev, size_t bytes) { be->download(be->ctx, host, dev, bytes); }

static float *floats(size_t n) { return calloc(n + 1, sizeof(float)); }

/* values of a pattern: small integers in [-5, 5] (exact sums), or fractions */
static float pattern(size_t i, int integers, int salt) {
    unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(salt * 40503u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    if (integers) return (float)((int)(h % 11u) - 5);
    return (float)(h % 100003u) / 50000.0f - 0.5f; /* [-0.5, 1.5): sums do not cancel */
}

/* node's forward on the GPU, then its backward from out.grad = dy (n floats);
 * DP_OK when both ran. */
static dp_status_t forward_backward(dp_node_t *node, dp_arena_t *arena, const float *dy, size_t n, const char *name) {
    dp_status_t st = be->ops[node->kind].forward(node, arena);
    CHECK(st == DP_OK, "%s: forward: %s", name, dp_error_message());
    if (st != DP_OK) return st;
    CHECK(dp_tensor_numel(&node->out) == n, "%s: output of %zu floats, want %zu", name, dp_tensor_numel(&node->out), n);
    if (dp_tensor_numel(&node->out) != n) return DP_ERR_SHAPE;
    be->upload(be->ctx, node->out.grad, dy, sizeof(float) * n);
    node->out.grad_unset = 0;
    st = be->ops[node->kind].backward(node, arena);
    CHECK(st == DP_OK, "%s: backward: %s", name, dp_error_message());
    return st;
}

static double violation(const float *a, const float *b, size_t n) {
    return testing_max_violation(a, b, n, RTOL, ATOL, NULL);
}

/* Frees the device data and grads of k tensors. */
static void free_tensors(dp_tensor_t *const *ts, int k) {
    for (int i = 0; i < k; i++) {
        be->free(be->ctx, ts[i]->data);
        be->free(be->ctx, ts[i]->grad);
    }
}

/* A bias gradient db (C) of run `run` against the host's double sums:
 * integers must be exact, others within tolerance (the worst kept); run 1
 * must repeat run 0's bits (kept in first). */
typedef struct {
    int exact, twice;
    double worst;
} bias_tally_t;

static void tally_bias(bias_tally_t *t, const float *db, const double *sum, int C, int integers, int run, float *first) {
    float *want = floats((size_t)C);
    for (int c = 0; c < C; c++) {
        want[c] = (float)sum[c];
        if (integers) t->exact &= (double)db[c] == sum[c];
    }
    double v = violation(db, want, (size_t)C);
    t->worst = v > t->worst ? v : t->worst;
    if (run == 0) memcpy(first, db, sizeof(float) * C);
    else t->twice &= memcmp(first, db, sizeof(float) * C) == 0;
    free(want);
}

static void report_bias(const bias_tally_t *t, const char *name) {
    CHECK(t->exact, "%s: the bias gradient of integers differs from the exact sum", name);
    CHECK(t->worst <= 1.0, "%s: the bias gradient differs from the double sum by %g tolerances", name, t->worst);
    CHECK(t->twice, "%s: two runs gave different bias gradient bits", name);
    printf("  %-40s exact %d, vs double sum %.3g tol, same bits twice %d", name, t->exact, t->worst, t->twice);
}

/* --- conv bias gradient (planes layout), with and without the fused ReLU mask ---------------- *
 * A depthwise 1x1 convolution of weight 1 (groups = C): y = relu(x + b)
 * exactly, and dx = the masked dy exactly, so bias + ReLU and the masked
 * gradient the fused kernel writes are checked bit for bit. */
static void check_conv_bias(int N, int C, int H, int W, int relu) {
    size_t L = (size_t)H * W, n = (size_t)N * C * L;
    char name[96];
    snprintf(name, sizeof name, "conv bias (%d, %d, %d, %d)%s", N, C, H, W, relu ? " + relu" : "");
    float *x = floats(n), *dy = floats(n), *w = floats((size_t)C), *b = floats((size_t)C);
    float *y = floats(n), *dx = floats(n), *zeros = floats(n);
    for (size_t i = 0; i < n; i++) x[i] = pattern(i, 0, 1) - 0.5f;
    for (int c = 0; c < C; c++) w[c] = 1.0f, b[c] = 0.125f * (float)(c % 5) - 0.25f;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.groups = C;
    attr.fuse_relu = relu;
    bias_tally_t tally = {1, 1, 0.0};
    int y_same = 1, dx_same = 1;
    float *db_first = floats((size_t)C), *db_gpu = floats((size_t)C);
    for (int integers = 1; integers >= 0; integers--)
        for (int run = 0; run < 2; run++) {
            for (size_t i = 0; i < n; i++) dy[i] = pattern(i, integers, 2);
            dp_tensor_t xt = {4, {N, C, H, W}, upload(x, sizeof(float) * n), upload(zeros, sizeof(float) * n), 1, 0};
            dp_tensor_t wt = {4, {C, 1, 1, 1}, upload(w, sizeof(float) * C), NULL, 0, 0};
            dp_tensor_t bt = {1, {C}, upload(b, sizeof(float) * C), upload(zeros, sizeof(float) * C), 1, 0};
            dp_node_t node = {.kind = DP_OP_CONV, .attr = attr, .in = {&xt, &wt, &bt}};
            dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
            if (forward_backward(&node, arena, dy, n, name) == DP_OK) {
                download(y, node.out.data, sizeof(float) * n);
                download(dx, xt.grad, sizeof(float) * n);
                download(db_gpu, bt.grad, sizeof(float) * C);
            }
            double *sum = calloc((size_t)C, sizeof(double));
            for (size_t i = 0; i < n; i++) {
                int c = (int)(i / L % (size_t)C);
                float v = fadd(x[i], b[c]);
                if (relu) v = v < 0.0f ? 0.0f : v;
                float g = !relu || v > 0.0f ? dy[i] : 0.0f;
                y_same &= memcmp(&v, &y[i], sizeof v) == 0;
                dx_same &= memcmp(&g, &dx[i], sizeof g) == 0;
                sum[c] += g;
            }
            tally_bias(&tally, db_gpu, sum, C, integers, run, db_first);
            free(sum);
            dp_arena_free(arena);
            free_tensors((dp_tensor_t *const[]){&xt, &wt, &bt}, 3);
        }
    report_bias(&tally, name);
    CHECK(y_same, "%s: y differs from relu(x + b) (bits)", name);
    CHECK(dx_same, "%s: dx (the masked dy) differs from the reference (bits)", name);
    printf(", y/dx bits %d/%d\n", y_same, dx_same);
    free(x), free(dy), free(w), free(b), free(y), free(dx), free(zeros), free(db_first), free(db_gpu);
}

/* --- linear bias gradient (columns layout) ------------------------------------------------------- */
static void check_linear_bias(int N, int OUT) {
    const int IN = 3;
    char name[96];
    snprintf(name, sizeof name, "linear bias (%d, %d)", N, OUT);
    size_t n = (size_t)N * OUT;
    float *x = floats((size_t)N * IN), *w = floats((size_t)OUT * IN), *b = floats((size_t)OUT), *dy = floats(n);
    float *db = floats((size_t)OUT), *first = floats((size_t)OUT);
    for (size_t i = 0; i < (size_t)N * IN; i++) x[i] = pattern(i, 0, 3);
    for (size_t i = 0; i < (size_t)OUT * IN; i++) w[i] = pattern(i, 0, 4);
    bias_tally_t tally = {1, 1, 0.0};
    double *sum = calloc((size_t)OUT, sizeof(double));
    for (int integers = 1; integers >= 0; integers--)
        for (int run = 0; run < 2; run++) {
            for (size_t i = 0; i < n; i++) dy[i] = pattern(i, integers, 5);
            dp_tensor_t xt = {2, {N, IN}, upload(x, sizeof(float) * N * IN), NULL, 0, 0};
            dp_tensor_t wt = {2, {OUT, IN}, upload(w, sizeof(float) * OUT * IN), NULL, 0, 0};
            dp_tensor_t bt = {1, {OUT}, upload(b, sizeof(float) * OUT), upload(b, sizeof(float) * OUT), 1, 0};
            dp_node_t node = {.kind = DP_OP_LINEAR, .attr = dp_op_attr_default(), .in = {&xt, &wt, &bt}};
            dp_arena_t *arena = dp_arena_new_on(be, 1 << 16);
            if (forward_backward(&node, arena, dy, n, name) == DP_OK)
                download(db, bt.grad, sizeof(float) * OUT);
            for (int c = 0; c < OUT; c++) {
                sum[c] = 0.0;
                for (int r = 0; r < N; r++) sum[c] += dy[(size_t)r * OUT + c];
            }
            tally_bias(&tally, db, sum, OUT, integers, run, first);
            dp_arena_free(arena);
            free_tensors((dp_tensor_t *const[]){&xt, &wt, &bt}, 3);
        }
    report_bias(&tally, name);
    printf("\n");
    free(x), free(w), free(b), free(dy), free(db), free(first), free(sum);
}

/* --- batch norm ------------------------------------------------------------------------------------ */

/* A SyncBatchNorm hook over one participant: the sum is the values
 * themselves; it keeps a copy of what it saw (forward: [m, S1, S2],
 * backward: gsums). */
typedef struct {
    double seen[2][1 + 2 * 512];
    int calls;
} sync_seen_t;

static void sync_pass_through(void *ctx, double *values, int count) {
    sync_seen_t *s = ctx;
    if (s->calls < 2 && count <= 1 + 2 * 512) memcpy(s->seen[s->calls], values, sizeof(double) * (size_t)count);
    s->calls++;
}

typedef struct {
    int N, C;
    size_t plane;
    int ndim, shape[5];
} bn_shape_t;

/* One batch norm forward and backward on the GPU (weight, bias, running
 * statistics; x, weight and bias with grads unset), results downloaded. */
typedef struct {
    float *y, *dx, *dw, *db, *rm, *rv;
    double *saved; /* [mean, invstd, m] */
} bn_result_t;

static int bn_run(const bn_shape_t *s, const float *x, const float *dy, const float *w, const float *b,
                  const float *rm0, const float *rv0, int training, const dp_stat_sync_t *sync, bn_result_t *r) {
    size_t n = (size_t)s->N * s->C * s->plane, C = (size_t)s->C;
    float *nan_fill = floats(n);
    for (size_t i = 0; i < n; i++) nan_fill[i] = NAN;
    dp_tensor_t xt = {s->ndim, {0}, upload(x, sizeof(float) * n), upload(nan_fill, sizeof(float) * n), 1, 0};
    memcpy(xt.shape, s->shape, sizeof(int) * (size_t)s->ndim);
    dp_tensor_t wt = {1, {s->C}, upload(w, sizeof(float) * C), upload(nan_fill, sizeof(float) * C), 1, 0};
    dp_tensor_t bt = {1, {s->C}, upload(b, sizeof(float) * C), upload(nan_fill, sizeof(float) * C), 1, 0};
    dp_op_attr_t attr = dp_op_attr_default();
    attr.training = training;
    attr.running_mean = upload(rm0, sizeof(float) * C);
    attr.running_var = upload(rv0, sizeof(float) * C);
    attr.stat_sync = sync;
    dp_node_t node = {.kind = DP_OP_BATCH_NORM, .attr = attr, .in = {&xt, &wt, &bt}};
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    dp_status_t st = be->ops[DP_OP_BATCH_NORM].forward(&node, arena);
    CHECK(st == DP_OK, "batch_norm forward: %s", dp_error_message());
    if (st == DP_OK) {
        be->upload(be->ctx, node.out.grad, dy, sizeof(float) * n);
        node.out.grad_unset = 0;
        download(r->y, node.out.data, sizeof(float) * n);
        download(r->saved, node.saved, sizeof(double) * (2 * C + 1));
        download(r->rm, attr.running_mean, sizeof(float) * C);
        download(r->rv, attr.running_var, sizeof(float) * C);
        st = be->ops[DP_OP_BATCH_NORM].backward(&node, arena);
        CHECK(st == DP_OK, "batch_norm backward: %s", dp_error_message());
        download(r->dx, xt.grad, sizeof(float) * n);
        download(r->dw, wt.grad, sizeof(float) * C);
        download(r->db, bt.grad, sizeof(float) * C);
    }
    dp_arena_free(arena);
    free_tensors((dp_tensor_t *const[]){&xt, &wt, &bt}, 3);
    be->free(be->ctx, attr.running_mean);
    be->free(be->ctx, attr.running_var);
    free(nan_fill);
    return st == DP_OK;
}

static void bn_alloc(bn_result_t *r, size_t n, size_t C) {
    r->y = floats(n), r->dx = floats(n), r->dw = floats(C), r->db = floats(C), r->rm = floats(C), r->rv = floats(C);
    r->saved = calloc(2 * C + 1, sizeof(double));
}
static void bn_release(bn_result_t *r) {
    free(r->y), free(r->dx), free(r->dw), free(r->db), free(r->rm), free(r->rv), free(r->saved);
}

/* The per-element formulas (ops_batch_norm.c's, as the kernels compute
 * them): y from saved, w, b; dx from saved, gsums, w. */
static float bn_y_ref(float x, int c, int C, const double *saved, const float *w, const float *b) {
    double scale = dmul(saved[C + c], (double)w[c]);
    float mean_hi = (float)saved[c];
    float shift = (float)((double)b[c] - dmul(saved[c] - (double)mean_hi, scale));
    return fadd(fmul(x - mean_hi, (float)scale), shift);
}

static float bn_dx_ref(float x, float dy, int c, int C, const double *saved, const double *gsums, const float *w,
                       int training) {
    double invstd = saved[C + c], gamma = (double)w[c], m = saved[2 * C];
    float k_dy = (float)dmul(gamma, invstd), k_x = 0.0f, k_0 = 0.0f;
    if (training) {
        k_x = (float)(dmul(dmul(dmul(-gamma, invstd), invstd), invstd) * gsums[C + c] / m);
        k_0 = (float)(dmul(-gamma, invstd) * gsums[c] / m);
    }
    float mean = (float)saved[c];
    k_0 = fadd(k_0, (float)dmul(-(double)k_x, saved[c] - (double)mean));
    return fadd(fadd(fmul(k_dy, dy), fmul(k_x, x - mean)), k_0);
}

static void check_batch_norm(const bn_shape_t *s) {
    size_t n = (size_t)s->N * s->C * s->plane, C = (size_t)s->C, L = s->plane;
    char name[96];
    snprintf(name, sizeof name, "batch_norm (%d, %d) x %zu", s->N, s->C, s->plane);
    float *x = floats(n), *dy = floats(n), *w = floats(C), *b = floats(C), *rm = floats(C), *rv = floats(C);
    for (size_t c = 0; c < C; c++)
        w[c] = 0.5f + 0.01f * (float)c, b[c] = 0.1f * (float)(c % 7) - 0.3f, rm[c] = 0.05f * (float)(c % 3),
        rv[c] = 1.0f + 0.1f * (float)(c % 4);
    bn_result_t r[2];
    bn_alloc(&r[0], n, C);
    bn_alloc(&r[1], n, C);

    /* 1. SyncBatchNorm's path (sums around 0) over integers: the sums are
     * exact; y and dx are the per-element formulas' bits on the GPU's own
     * statistics and gradient sums. */
    for (size_t i = 0; i < n; i++) x[i] = pattern(i, 1, 6), dy[i] = pattern(i, 1, 7);
    sync_seen_t seen = {.calls = 0};
    dp_stat_sync_t sync = {sync_pass_through, &seen};
    int sums_exact = 0, gsum_exact = 0, y_bits = 0, dx_bits = 0;
    double gsum2_err = 0.0;
    if (bn_run(s, x, dy, w, b, rm, rv, 1, &sync, &r[0])) {
        CHECK(seen.calls == 2, "%s: the sync hook ran %d times, want 2", name, seen.calls);
        sums_exact = seen.seen[0][0] == (double)s->N * (double)L;
        gsum_exact = 1;
        double *s1 = calloc(C, sizeof(double)), *s2 = calloc(C, sizeof(double)), *g1 = calloc(C, sizeof(double));
        double *g2 = calloc(C, sizeof(double)), *g2abs = calloc(C, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            size_t c = i / L % C;
            s1[c] += x[i], s2[c] += (double)x[i] * x[i], g1[c] += dy[i];
            double t = (double)dy[i] * ((double)x[i] - r[0].saved[c]);
            g2[c] += t, g2abs[c] += fabs(t);
        }
        for (size_t c = 0; c < C; c++) {
            sums_exact &= seen.seen[0][1 + c] == s1[c] && seen.seen[0][1 + C + c] == s2[c];
            gsum_exact &= seen.seen[1][c] == g1[c];
            double e = fabs(seen.seen[1][C + c] - g2[c]) / (g2abs[c] + 1e-300);
            gsum2_err = e > gsum2_err ? e : gsum2_err;
        }
        y_bits = dx_bits = 1;
        for (size_t i = 0; i < n; i++) {
            int c = (int)(i / L % C);
            float yr = bn_y_ref(x[i], c, (int)C, r[0].saved, w, b);
            float dxr = bn_dx_ref(x[i], dy[i], c, (int)C, r[0].saved, seen.seen[1], w, 1);
            y_bits &= memcmp(&yr, &r[0].y[i], sizeof yr) == 0;
            dx_bits &= memcmp(&dxr, &r[0].dx[i], sizeof dxr) == 0;
        }
        free(s1), free(s2), free(g1), free(g2), free(g2abs);
    }
    CHECK(sums_exact, "%s: the statistics of integers differ from the exact sums", name);
    CHECK(gsum_exact, "%s: sum dy of integers differs from the exact sum", name);
    CHECK(gsum2_err < 1e-12, "%s: sum dy (x - mean) is off by %g (relative to sum |.|)", name, gsum2_err);
    CHECK(y_bits, "%s: y differs from the per-element formula (bits)", name);
    CHECK(dx_bits, "%s: dx differs from the per-element formula (bits)", name);

    /* 2. The plain path (shifted sums) over fractions: twice the same bits,
     * and the CPU op's results within tolerance. */
    for (size_t i = 0; i < n; i++) x[i] = 3.0f * pattern(i, 0, 8) + 2.0f, dy[i] = pattern(i, 0, 9) - 0.5f;
    int twice = bn_run(s, x, dy, w, b, rm, rv, 1, NULL, &r[0]) && bn_run(s, x, dy, w, b, rm, rv, 1, NULL, &r[1]);
    twice = twice && memcmp(r[0].y, r[1].y, sizeof(float) * n) == 0 && memcmp(r[0].dx, r[1].dx, sizeof(float) * n) == 0 &&
            memcmp(r[0].dw, r[1].dw, sizeof(float) * C) == 0 && memcmp(r[0].db, r[1].db, sizeof(float) * C) == 0 &&
            memcmp(r[0].saved, r[1].saved, sizeof(double) * (2 * C + 1)) == 0;
    CHECK(twice, "%s: two runs gave different bits", name);
    float *cdx = floats(n), *cdw = floats(C), *cdb = floats(C), *crm = floats(C), *crv = floats(C);
    memcpy(crm, rm, sizeof(float) * C);
    memcpy(crv, rv, sizeof(float) * C);
    dp_tensor_t xc = {s->ndim, {0}, x, cdx, 1, 0}, wc = {1, {s->C}, w, cdw, 1, 0}, bc = {1, {s->C}, b, cdb, 1, 0};
    memcpy(xc.shape, s->shape, sizeof(int) * (size_t)s->ndim);
    dp_op_attr_t attr = dp_op_attr_default();
    attr.running_mean = crm, attr.running_var = crv;
    dp_node_t cpu = {.kind = DP_OP_BATCH_NORM, .attr = attr, .in = {&xc, &wc, &bc}};
    dp_arena_t *ha = dp_arena_new(1 << 20);
    double vy = INFINITY, vx = INFINITY, vw = INFINITY, vb = INFINITY, vr = INFINITY;
    if (dp_op_forward(&cpu, ha) == DP_OK) {
        vy = violation(r[0].y, cpu.out.data, n);
        vr = fmax(violation(r[0].rm, crm, C), violation(r[0].rv, crv, C));
        memcpy(cpu.out.grad, dy, sizeof(float) * n);
        cpu.out.grad_unset = 0;
        if (dp_op_backward(&cpu, ha) == DP_OK)
            vx = violation(r[0].dx, cdx, n), vw = violation(r[0].dw, cdw, C), vb = violation(r[0].db, cdb, C);
    }
    CHECK(vy <= 1.0 && vx <= 1.0 && vw <= 1.0 && vb <= 1.0 && vr <= 1.0,
          "%s: GPU vs CPU beyond tolerance: y %g dx %g dw %g db %g running %g", name, vy, vx, vw, vb, vr);

    /* 3. Inference: y and dx from the running statistics, bit for bit. */
    int inf_bits = 0;
    if (bn_run(s, x, dy, w, b, rm, rv, 0, NULL, &r[1])) {
        inf_bits = 1;
        for (size_t i = 0; i < n; i++) {
            int c = (int)(i / L % C);
            float yr = bn_y_ref(x[i], c, (int)C, r[1].saved, w, b);
            float dxr = bn_dx_ref(x[i], dy[i], c, (int)C, r[1].saved, NULL, w, 0);
            inf_bits &= memcmp(&yr, &r[1].y[i], sizeof yr) == 0 && memcmp(&dxr, &r[1].dx[i], sizeof dxr) == 0;
        }
    }
    CHECK(inf_bits, "%s: inference y or dx differs from the per-element formula (bits)", name);
    printf("  %-40s sums exact %d/%d (dy(x-mean) %.1e), y/dx bits %d/%d, twice %d, vs cpu y %.2g dx %.2g dw %.2g "
           "db %.2g run %.2g, inference bits %d\n",
           name, sums_exact, gsum_exact, gsum2_err, y_bits, dx_bits, twice, vy, vx, vw, vb, vr, inf_bits);
    dp_arena_free(ha);
    bn_release(&r[0]);
    bn_release(&r[1]);
    free(x), free(dy), free(w), free(b), free(rm), free(rv), free(cdx), free(cdw), free(cdb), free(crm), free(crv);
}

/* --- average pooling backward ------------------------------------------------------------------------ */

static int inside(int o, int k, int s, int p, int in) {
    int a = o * s - p, lo = a > 0 ? a : 0, hi = a + k < in ? a + k : in;
    return hi - lo;
}

/* dx of every input element: its outputs in (od, oh, ow) order, dy / divisor. */
static void avg_pool_backward_ref(const int in[3], const int out[3], const int k[3], const int st[3], const int pd[3],
                                  int include_pad, int planes, const float *dy, const float *prefill, float *dx) {
    size_t in_plane = (size_t)in[0] * in[1] * in[2], out_plane = (size_t)out[0] * out[1] * out[2];
    for (size_t i = 0; i < (size_t)planes * in_plane; i++) {
        size_t p = i / in_plane;
        int at = (int)(i % in_plane), pos[3] = {at / (in[1] * in[2]), at / in[2] % in[1], at % in[2]};
        float s = 0.0f;
        int lo[3], hi[3];
        for (int d = 0; d < 3; d++) { /* the outputs whose window holds pos[d] */
            lo[d] = 0, hi[d] = -1;
            for (int o = 0; o < out[d]; o++) {
                int a = o * st[d] - pd[d];
                if (pos[d] >= a && pos[d] < a + k[d]) {
                    if (hi[d] < 0) lo[d] = o;
                    hi[d] = o;
                }
            }
        }
        for (int od = lo[0]; od <= hi[0]; od++)
            for (int oh = lo[1]; oh <= hi[1]; oh++)
                for (int ow = lo[2]; ow <= hi[2]; ow++) {
                    float div = include_pad ? (float)(k[0] * k[1] * k[2])
                                            : (float)(inside(od, k[0], st[0], pd[0], in[0]) *
                                                      inside(oh, k[1], st[1], pd[1], in[1]) *
                                                      inside(ow, k[2], st[2], pd[2], in[2]));
                    volatile float q = dy[p * out_plane + ((size_t)od * out[1] + oh) * out[2] + ow] / div;
                    s = fadd(s, q);
                }
        dx[i] = prefill ? fadd(prefill[i], s) : s;
    }
}

/* y of every output: its window's inputs in (d, h, w) order, summed, / divisor. */
static void avg_pool_forward_ref(const int in[3], const int out[3], const int k[3], const int st[3], const int pd[3],
                                 int include_pad, int planes, const float *x, float *y) {
    size_t in_plane = (size_t)in[0] * in[1] * in[2], out_plane = (size_t)out[0] * out[1] * out[2];
    for (size_t i = 0; i < (size_t)planes * out_plane; i++) {
        size_t p = i / out_plane;
        int at = (int)(i % out_plane), o[3] = {at / (out[1] * out[2]), at / out[2] % out[1], at % out[2]};
        float s = 0.0f;
        for (int a = 0; a < k[0]; a++)
            for (int b = 0; b < k[1]; b++)
                for (int c = 0; c < k[2]; c++) {
                    int d = o[0] * st[0] - pd[0] + a, h = o[1] * st[1] - pd[1] + b, w = o[2] * st[2] - pd[2] + c;
                    if (d >= 0 && d < in[0] && h >= 0 && h < in[1] && w >= 0 && w < in[2])
                        s = fadd(s, x[p * in_plane + ((size_t)d * in[1] + h) * in[2] + w]);
                }
        float div = include_pad ? (float)(k[0] * k[1] * k[2])
                                : (float)(inside(o[0], k[0], st[0], pd[0], in[0]) *
                                          inside(o[1], k[1], st[1], pd[1], in[1]) *
                                          inside(o[2], k[2], st[2], pd[2], in[2]));
        volatile float q = s / div;
        y[i] = q;
    }
}

/* shape (N, C, spatial...), spatial dims 1 to 3 given as (D, H, W) with 1s
 * in front: y and dx (written and added) against the formulas, bit for bit */
static void check_avg_pool_backward(int N, int C, int nsp, const int in[3], const int k[3], const int st[3],
                                    const int pd[3], int include_pad) {
    char name[96];
    snprintf(name, sizeof name, "avg_pool (%d, %d, %dx%dx%d) k%d s%d p%d%s", N, C, in[0], in[1], in[2], k[2],
             st[2], pd[2], include_pad ? "" : " excl pad");
    int out[3];
    for (int d = 0; d < 3; d++) out[d] = (in[d] + 2 * pd[d] - k[d]) / st[d] + 1;
    int planes = N * C;
    size_t nx = (size_t)planes * in[0] * in[1] * in[2], ny = (size_t)planes * out[0] * out[1] * out[2];
    float *x = floats(nx), *dy = floats(ny), *prefill = floats(nx), *dx = floats(nx), *want = floats(nx);
    for (size_t i = 0; i < nx; i++) x[i] = pattern(i, 0, 10), prefill[i] = pattern(i, 0, 11);
    for (size_t i = 0; i < ny; i++) dy[i] = pattern(i, 0, 12) * 3.0f - 1.0f;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.count_include_pad = include_pad;
    for (int s = 0; s < nsp; s++) {
        int d = 3 - nsp + s;
        attr.kernel[s] = k[d], attr.stride[s] = st[d], attr.pad[s] = pd[d];
    }
    float *y = floats(ny), *y_want = floats(ny);
    avg_pool_forward_ref(in, out, k, st, pd, include_pad, planes, x, y_want);
    int same = 1, same_y = 1;
    for (int add = 0; add < 2; add++) {
        dp_tensor_t xt = {2 + nsp, {N, C}, upload(x, sizeof(float) * nx), upload(prefill, sizeof(float) * nx), !add, 0};
        for (int s = 0; s < nsp; s++) xt.shape[2 + s] = in[3 - nsp + s];
        dp_node_t node = {.kind = DP_OP_AVG_POOL, .attr = attr, .in = {&xt}};
        dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
        if (forward_backward(&node, arena, dy, ny, name) == DP_OK) {
            download(y, node.out.data, sizeof(float) * ny);
            same_y &= memcmp(y, y_want, sizeof(float) * ny) == 0;
            download(dx, xt.grad, sizeof(float) * nx);
            avg_pool_backward_ref(in, out, k, st, pd, include_pad, planes, dy, add ? prefill : NULL, want);
            same &= memcmp(dx, want, sizeof(float) * nx) == 0;
        } else {
            same = same_y = 0;
        }
        dp_arena_free(arena);
        free_tensors((dp_tensor_t *const[]){&xt}, 1);
    }
    CHECK(same_y, "%s: y differs from the window sums (bits)", name);
    CHECK(same, "%s: dx differs from the gather formula (bits)", name);
    printf("  %-40s y bits %d, dx bits (written and added) %d\n", name, same_y, same);
    free(x), free(dy), free(prefill), free(dx), free(want), free(y), free(y_want);
}

/* --- ReLU and add + ReLU backward: the masks' bits --------------------------------------------- */
static void check_relu_masks(size_t n) {
    float *a = floats(n), *z = floats(n), *dy = floats(n), *pre = floats(n), *got = floats(n), *got2 = floats(n);
    for (size_t i = 0; i < n; i++)
        a[i] = pattern(i, 0, 13) - 0.5f, z[i] = pattern(i, 0, 14) - 0.5f, dy[i] = pattern(i, 0, 15),
        pre[i] = pattern(i, 0, 16);
    int shape[2] = {1, (int)n};
    int relu_ok = 1, add_ok = 1, twice_ok = 1;
    /* relu: y = max(x, 0), dx += dy where y > 0 */
    dp_tensor_t xt = {2, {shape[0], shape[1]}, upload(a, sizeof(float) * n), upload(pre, sizeof(float) * n), 0, 0};
    dp_node_t relu = {.kind = DP_OP_RELU, .attr = dp_op_attr_default(), .in = {&xt}};
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 20);
    if (be->ops[DP_OP_RELU].forward(&relu, arena) == DP_OK) {
        be->upload(be->ctx, relu.out.grad, dy, sizeof(float) * n);
        relu.out.grad_unset = 0;
        CHECK(be->ops[DP_OP_RELU].backward(&relu, arena) == DP_OK, "relu backward: %s", dp_error_message());
        download(got, relu.out.data, sizeof(float) * n);
        download(got2, xt.grad, sizeof(float) * n);
        for (size_t i = 0; i < n; i++) {
            float y = a[i] < 0.0f ? 0.0f : a[i], g = fadd(pre[i], y > 0.0f ? dy[i] : 0.0f);
            relu_ok &= memcmp(&y, &got[i], 4) == 0 && memcmp(&g, &got2[i], 4) == 0;
        }
    } else {
        relu_ok = 0;
    }
    be->free(be->ctx, xt.data);
    be->free(be->ctx, xt.grad);
    /* add + relu: both grads (one added to, one written), then x + x (added twice) */
    for (int self = 0; self < 2; self++) {
        dp_tensor_t at = {2, {shape[0], shape[1]}, upload(a, sizeof(float) * n), upload(pre, sizeof(float) * n), 0, 0};
        dp_tensor_t zt = {2, {shape[0], shape[1]}, upload(z, sizeof(float) * n), upload(pre, sizeof(float) * n), 1, 0};
        dp_op_attr_t attr = dp_op_attr_default();
        attr.fuse_relu = 1;
        dp_node_t add = {.kind = DP_OP_ADD, .attr = attr, .in = {&at, self ? &at : &zt}};
        if (be->ops[DP_OP_ADD].forward(&add, arena) == DP_OK) {
            be->upload(be->ctx, add.out.grad, dy, sizeof(float) * n);
            add.out.grad_unset = 0;
            CHECK(be->ops[DP_OP_ADD].backward(&add, arena) == DP_OK, "add backward: %s", dp_error_message());
            download(got, at.grad, sizeof(float) * n);
            download(got2, zt.grad, sizeof(float) * n);
            for (size_t i = 0; i < n; i++) {
                float v = fadd(a[i], self ? a[i] : z[i]);
                float g = (v < 0.0f ? 0.0f : v) > 0.0f ? dy[i] : 0.0f;
                float ga = self ? fadd(fadd(pre[i], g), g) : fadd(pre[i], g);
                add_ok &= memcmp(&ga, &got[i], 4) == 0;
                if (!self) add_ok &= memcmp(&g, &got2[i], 4) == 0;
                else twice_ok &= memcmp(&pre[i], &got2[i], 4) == 0; /* z untouched */
            }
        } else {
            add_ok = 0;
        }
        be->free(be->ctx, at.data);
        be->free(be->ctx, at.grad);
        be->free(be->ctx, zt.data);
        be->free(be->ctx, zt.grad);
    }
    dp_arena_free(arena);
    CHECK(relu_ok, "relu (%zu): y or dx differs from the reference (bits)", n);
    CHECK(add_ok && twice_ok, "add + relu backward (%zu): grads differ from the reference (bits)", n);
    printf("  relu / add+relu masks (%zu)                 bits %d / %d\n", n, relu_ok, add_ok && twice_ok);
    free(a), free(z), free(dy), free(pre), free(got), free(got2);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_reductions");
    /* conv bias: many slices per channel; N = 1, C = 1; L < a block, no
     * multiple of anything; a large plane; many small channels */
    const int conv_shapes[][4] = {{256, 3, 28, 28}, {1, 1, 5, 7}, {3, 37, 9, 11}, {2, 5, 130, 129},
                                  {7, 64, 4, 4},    {1, 2, 300, 301}, {5, 3, 1, 1}};
    for (size_t i = 0; i < sizeof conv_shapes / sizeof conv_shapes[0]; i++)
        for (int relu = 0; relu < 2; relu++)
            check_conv_bias(conv_shapes[i][0], conv_shapes[i][1], conv_shapes[i][2], conv_shapes[i][3], relu);
    /* linear bias: the columns layout: C below, at and above a block's
     * columns; many slices of rows; N = 1 */
    const int linear_shapes[][2] = {{256, 10}, {1, 1}, {300, 500}, {1000, 33}, {5000, 1}, {1, 300}, {256, 128}};
    for (size_t i = 0; i < sizeof linear_shapes / sizeof linear_shapes[0]; i++)
        check_linear_bias(linear_shapes[i][0], linear_shapes[i][1]);
    const bn_shape_t bn_shapes[] = {
        {256, 3, 784, 4, {256, 3, 28, 28}}, {1, 1, 35, 4, {1, 1, 5, 7}},     {3, 37, 99, 4, {3, 37, 9, 11}},
        {2, 4, 16770, 4, {2, 4, 130, 129}}, {8, 300, 1, 2, {8, 300}},         {2000, 3, 1, 2, {2000, 3}},
        {2, 6, 60, 5, {2, 6, 3, 4, 5}},     {9, 70, 1, 3, {9, 70, 1}},
    };
    for (size_t i = 0; i < sizeof bn_shapes / sizeof bn_shapes[0]; i++) check_batch_norm(&bn_shapes[i]);
    /* batch norm with fuse_relu (its apply and gradient sums) = batch norm + relu (relu6), bit for bit */
    for (int fuse = DP_FUSE_RELU; fuse <= DP_FUSE_RELU6; fuse++) {
        check_bn_relu_fused(be, "cuda", (const int[4]){4, 3, 5, 6}, fuse);
        check_bn_relu_fused(be, "cuda", (const int[4]){16, 64, 8, 8}, fuse);
    }
    /* avg pool backward: LeNet's 2/2 on 26x26, overlapping windows with pad
     * (with and without the pad in the divisor), 3-D, 1-D */
    const int zero[3] = {0, 0, 0};
    check_avg_pool_backward(16, 20, 2, (const int[3]){1, 26, 26}, (const int[3]){1, 2, 2}, (const int[3]){1, 2, 2}, zero,
                            1);
    /* windows that tile the plane (the 2-D kernels' path): LeNet's second
     * pool (9x9: the last row and column in no window), a 3x2 window on
     * 11x10 (a row left over), 1-D as 2-D (1x29, 4/4: one left over),
     * planes of one window (k = in) */
    check_avg_pool_backward(4, 50, 2, (const int[3]){1, 9, 9}, (const int[3]){1, 2, 2}, (const int[3]){1, 2, 2}, zero, 0);
    check_avg_pool_backward(3, 5, 2, (const int[3]){1, 11, 10}, (const int[3]){1, 3, 2}, (const int[3]){1, 3, 2}, zero,
                            1);
    check_avg_pool_backward(3, 2, 1, (const int[3]){1, 1, 29}, (const int[3]){1, 1, 4}, (const int[3]){1, 1, 4}, zero, 0);
    check_avg_pool_backward(2, 7, 2, (const int[3]){1, 5, 3}, (const int[3]){1, 5, 3}, (const int[3]){1, 5, 3}, zero, 1);
    for (int include = 0; include < 2; include++) {
        check_avg_pool_backward(2, 3, 2, (const int[3]){1, 11, 10}, (const int[3]){1, 3, 3}, (const int[3]){1, 2, 2},
                                (const int[3]){0, 1, 1}, include);
        check_avg_pool_backward(1, 2, 3, (const int[3]){5, 6, 7}, (const int[3]){3, 3, 3}, (const int[3]){2, 2, 2},
                                (const int[3]){1, 1, 1}, include);
        check_avg_pool_backward(3, 2, 1, (const int[3]){1, 1, 29}, (const int[3]){1, 1, 4}, (const int[3]){1, 1, 3},
                                (const int[3]){0, 0, 2}, include);
    }
    check_relu_masks(1);
    check_relu_masks(100003);
    return testing_finish("test_cuda_reductions");
}
