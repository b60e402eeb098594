/* test_cuda_ops.c - the CUDA op table against the PyTorch fixtures of
 * tests/fixtures/ops (skipped without a GPU).
 *
 * Every fixture of every op (conv, conv_transpose, max_pool, avg_pool on
 * 1-D to 3-D inputs; linear, relu, relu6, hardswish, hardsigmoid, gelu, silu, scale_channels, layer_norm,
 * flatten, softmax_xent, sigmoid, tanh,
 * add, dropout, drop_path, global_avg_pool, mse, batch_norm with its running
 * statistics) runs as in test_ops_fixtures.c, with the same tolerances,
 * but on device memory: inputs and grads (pre-filled with GRAD_PREFILL, so
 * adding instead of overwriting is checked; then again unset and filled
 * with NaN, so writing instead of adding is checked) are uploaded, the op
 * runs from the cuda:0 table with an arena of GPU memory, and the results
 * are downloaded and compared. Each case runs twice: the second run must
 * give the same bits (deterministic algorithms). Also: every op of the
 * table had at least one case (none is left undone); conv_transpose with
 * output_padding >= stride and a pad (the buffered path no fixture takes)
 * gives the CPU op's results, and fuse_relu on it fails with one line as on
 * the CPU; dropout in training drops the CPU's elements (the same bits,
 * forward and backward); softmax_xent with and without label smoothing
 * gives the CPU op's loss and gradient (besides the smoothing fixtures). */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "fixture.h"
#include "test_cuda_common.h"
#include "testing.h"

#define RTOL 1e-4
#define ATOL 1e-5
#define GRAD_PREFILL 0.25f

static const dp_backend_t *be;
static int cases_per_op[DP_OP_COUNT];

static int op_kind(const char *name) {
    for (int k = 0; k < DP_OP_COUNT; k++)
        if (strcmp(dp_op_table[k].name, name) == 0) return k;
    return -1;
}

/* Every op of the table is done on the GPU, on every input the fixtures
 * have (1-D to 3-D convs, transposed convs and pools included). */
static int done_on_gpu(int kind, const fixture_t *f) {
    (void)f;
    return kind >= 0 && kind < DP_OP_COUNT;
}

static void *upload(const void *host, size_t bytes) {
    void *d = be->alloc(be->ctx, bytes ? bytes : 4, "test tensor");
    if (d && bytes) be->upload(be->ctx, d, host, bytes);
    return d;
}

static float *download_floats(const float *d, size_t n) {
    float *h = malloc(sizeof(float) * n + 4);
    be->download(be->ctx, h, d, sizeof(float) * n);
    return h;
}

/* The passes over a case: x without a grad; every grad holding GRAD_PREFILL
 * (the op must add); every grad unset and filled with NaN (the op must
 * write each element, dp_grad_claim: the path the trainer's activations take). */
enum { PASS_NO_DX, PASS_ADD, PASS_UNSET };

/* One run of a case on the GPU; results (y, then the grads of in[0..2]) are
 * downloaded into out[0..3] (malloc'd, NULL where absent). Returns 1 when it ran. */
static int run_once(const fixture_t *f, int kind, int mode, float *out[6], size_t out_n[6]) {
    const char *input_names[3] = {"x", "weight", "bias"};
    int target = 0; /* mse: in[1] is the target, never a grad */
    if (fixture_get(f, "other")) input_names[1] = "other";
    else if (fixture_get(f, "target")) input_names[1] = "target", target = 1;
    dp_tensor_t inputs[3];
    dp_node_t node;
    memset(&node, 0, sizeof node);
    memset(inputs, 0, sizeof inputs);
    node.kind = (dp_op_kind_t)kind;
    node.attr = f->attr;
    fixture_read_attrs(f, &node.attr);
    const fixture_tensor_t *rm = fixture_get(f, "running_mean"), *rv = fixture_get(f, "running_var");
    if (rm && rv) { /* batch norm's running statistics, on the GPU too */
        node.attr.running_mean = upload(rm->data, sizeof(float) * rm->numel);
        node.attr.running_var = upload(rv->data, sizeof(float) * rv->numel);
    }
    int any_grad = 0;
    for (int i = 0; i < 3; i++) {
        const fixture_tensor_t *ft = fixture_get(f, input_names[i]);
        if (!ft) continue;
        int with_grad = i == 0 ? mode != PASS_NO_DX : !(i == 1 && target);
        dp_tensor_set_shape(&inputs[i], ft->shape.ndim, ft->shape.shape);
        inputs[i].data = upload(ft->data, sizeof(float) * ft->numel);
        if (with_grad) {
            float *prefill = malloc(sizeof(float) * ft->numel + 4);
            for (size_t j = 0; j < ft->numel; j++) prefill[j] = mode == PASS_UNSET ? NAN : GRAD_PREFILL;
            inputs[i].grad = upload(prefill, sizeof(float) * ft->numel);
            inputs[i].grad_unset = mode == PASS_UNSET;
            free(prefill);
        }
        node.in[i] = &inputs[i];
        any_grad |= with_grad;
    }
    const fixture_tensor_t *labels = fixture_get(f, "labels");
    if (labels) node.labels = upload(labels->data, sizeof(int32_t) * labels->numel);
    const fixture_tensor_t *dy = fixture_get(f, "dy");
    int ran = 0;
    dp_arena_t *arena = dp_arena_new_on(be, 1 << 16);
    dp_status_t st = be->ops[kind].forward(&node, arena);
    CHECK(st == DP_OK, "%s: forward failed on the GPU: %s", f->name, dp_error_message());
    if (st != DP_OK) goto done;
    out_n[0] = dp_tensor_numel(&node.out);
    out[0] = download_floats(node.out.data, out_n[0]);
    if (rm && rv) {
        out_n[4] = rm->numel, out_n[5] = rv->numel;
        out[4] = download_floats(node.attr.running_mean, rm->numel);
        out[5] = download_floats(node.attr.running_var, rv->numel);
    }
    CHECK((node.out.grad != NULL) == any_grad, "%s: out.grad is %s but inputs %s grads", f->name,
          node.out.grad ? "set" : "NULL", any_grad ? "have" : "have no");
    if (node.out.grad && dy) { /* out.grad += dy (a view's out.grad holds the input's prefill) */
        float *g = calloc(dy->numel + 1, sizeof(float));
        if (!node.out.grad_unset) be->download(be->ctx, g, node.out.grad, sizeof(float) * dy->numel);
        for (size_t i = 0; i < dy->numel; i++) g[i] += ((const float *)dy->data)[i];
        be->upload(be->ctx, node.out.grad, g, sizeof(float) * dy->numel);
        node.out.grad_unset = 0;
        free(g);
        st = be->ops[kind].backward(&node, arena);
        CHECK(st == DP_OK, "%s: backward failed on the GPU: %s", f->name, dp_error_message());
        for (int i = 0; i < 3 && st == DP_OK; i++)
            if (node.in[i] && node.in[i]->grad) {
                out_n[1 + i] = dp_tensor_numel(node.in[i]);
                out[1 + i] = download_floats(node.in[i]->grad, out_n[1 + i]);
            }
    }
    ran = st == DP_OK;
done:
    dp_arena_free(arena);
    for (int i = 0; i < 3; i++) {
        be->free(be->ctx, inputs[i].data);
        be->free(be->ctx, inputs[i].grad);
    }
    be->free(be->ctx, (void *)node.labels);
    be->free(be->ctx, node.attr.running_mean);
    be->free(be->ctx, node.attr.running_var);
    return ran;
}

static void run_pass(const fixture_t *f, int kind, int mode) {
    const char *pass = mode == PASS_UNSET ? "unset" : mode == PASS_ADD ? "all grads" : "no dx";
    const float offset = mode == PASS_UNSET ? 0.0f : GRAD_PREFILL;
    const char *grad_names[3] = {"dx", fixture_get(f, "other") ? "dother" : "dweight", "dbias"};
    float *a[6] = {0}, *b[6] = {0};
    size_t an[6] = {0}, bn[6] = {0};
    if (run_once(f, kind, mode, a, an) && run_once(f, kind, mode, b, bn)) {
        char report[256] = "";
        const fixture_tensor_t *y = fixture_get(f, "y");
        CHECK(y && an[0] == y->numel, "%s: output has %zu floats, want %zu", f->name, an[0], y ? y->numel : 0);
        if (y && an[0] == y->numel) fixture_compare(f, RTOL, ATOL, pass, "y", a[0], 0.0f, y, report, sizeof report);
        for (int i = 0; i < 3; i++) {
            if (!a[1 + i]) continue;
            const fixture_tensor_t *want = fixture_get(f, grad_names[i]);
            CHECK(want && want->numel == an[1 + i], "%s: fixture lacks %s", f->name, grad_names[i]);
            if (want && want->numel == an[1 + i])
                fixture_compare(f, RTOL, ATOL, pass, grad_names[i], a[1 + i], offset, want, report, sizeof report);
        }
        const char *stats[2] = {"running_mean_after", "running_var_after"};
        for (int i = 0; i < 2; i++) {
            const fixture_tensor_t *want = fixture_get(f, stats[i]);
            CHECK((want != NULL) == (a[4 + i] != NULL), "%s: running statistics without expected values", f->name);
            if (want && a[4 + i] && want->numel == an[4 + i])
                fixture_compare(f, RTOL, ATOL, pass, stats[i], a[4 + i], 0.0f, want, report, sizeof report);
        }
        int same = 1;
        for (int i = 0; i < 6; i++) same &= an[i] == bn[i] && (!a[i] || memcmp(a[i], b[i], sizeof(float) * an[i]) == 0);
        CHECK(same, "%s (%s): two runs gave different bits", f->name, pass);
        printf("  %-40s %-9s max violation:%s%s\n", f->name, pass, report, same ? ", same bits twice" : "");
    }
    for (int i = 0; i < 6; i++) {
        free(a[i]);
        free(b[i]);
    }
}

static int compare_names(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* The largest |a - b| beyond ATOL + RTOL |b| over n floats (0: within tolerance). */
static double violation(const float *a, const float *b, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) - (ATOL + RTOL * fabs((double)b[i]));
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

/* conv_transpose with output_padding >= stride (allowed by a larger
 * dilation) and a pad along the same dim: the GPU runs it on a buffer and a
 * window of it (ops_cuda.c), a path the fixtures take only without a pad.
 * y, dx, dweight and dbias must be the CPU op's, within the fixtures'
 * tolerances; the grads start at 0 and are added to on both. */
static void check_conv_transpose_like_cpu(void) {
    enum { N = 2, CI = 4, CO = 3, G = 1, H = 4, W = 5, KH = 2, KW = 3 };
    static float x[N * CI * H * W], w[CI * (CO / G) * KH * KW], b[CO];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)((i * 29) % 23) / 11.0f - 1.0f;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = (float)((i * 17) % 13) / 9.0f - 0.6f;
    for (int i = 0; i < CO; i++) b[i] = 0.1f * (float)(i + 1);
    dp_op_attr_t attr = dp_op_attr_default();
    attr.stride[0] = 1, attr.stride[1] = 2;
    attr.pad[0] = 1, attr.pad[1] = 1;
    attr.dilation[0] = 3, attr.dilation[1] = 2;
    attr.output_padding[0] = 2, attr.output_padding[1] = 1; /* 2 >= stride 1 along H: the buffered path */
    static float zx[sizeof x / sizeof x[0]], zw[sizeof w / sizeof w[0]], zb[CO];
    static float cdx[sizeof x / sizeof x[0]], cdw[sizeof w / sizeof w[0]], cdb[CO];
    dp_tensor_t xc = {4, {N, CI, H, W}, x, cdx, 0, 0}, wc = {4, {CI, CO / G, KH, KW}, w, cdw, 0, 0};
    dp_tensor_t bc = {1, {CO}, b, cdb, 0, 0};
    dp_node_t cpu = {.kind = DP_OP_CONV_TRANSPOSE, .attr = attr, .in = {&xc, &wc, &bc}};
    dp_arena_t *ha = dp_arena_new(1 << 20);
    CHECK(dp_op_forward(&cpu, ha) == DP_OK, "cpu conv_transpose: %s", dp_error_message());
    size_t ny = dp_tensor_numel(&cpu.out);
    /* O = (I - 1) stride - 2 pad + dilation (k - 1) + output_padding + 1 */
    CHECK(cpu.out.shape[2] == (H - 1) * 1 - 2 + 3 * (KH - 1) + 2 + 1 &&
              cpu.out.shape[3] == (W - 1) * 2 - 2 + 2 * (KW - 1) + 1 + 1,
          "cpu conv_transpose: output %dx%d", cpu.out.shape[2], cpu.out.shape[3]);
    float *dy = malloc(sizeof(float) * ny), *gy = malloc(sizeof(float) * ny);
    for (size_t i = 0; i < ny; i++) dy[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    memcpy(cpu.out.grad, dy, sizeof(float) * ny);
    cpu.out.grad_unset = 0;
    CHECK(dp_op_backward(&cpu, ha) == DP_OK, "cpu conv_transpose backward: %s", dp_error_message());

    dp_tensor_t xg = {4, {N, CI, H, W}, upload(x, sizeof x), upload(zx, sizeof zx), 0, 0};
    dp_tensor_t wg = {4, {CI, CO / G, KH, KW}, upload(w, sizeof w), upload(zw, sizeof zw), 0, 0};
    dp_tensor_t bg = {1, {CO}, upload(b, sizeof b), upload(zb, sizeof zb), 0, 0};
    dp_node_t gpu = {.kind = DP_OP_CONV_TRANSPOSE, .attr = attr, .in = {&xg, &wg, &bg}};
    dp_arena_t *ga = dp_arena_new_on(be, 1 << 20);
    dp_status_t st = be->ops[DP_OP_CONV_TRANSPOSE].forward(&gpu, ga);
    CHECK(st == DP_OK, "gpu conv_transpose (buffered): %s", dp_error_message());
    if (st == DP_OK) {
        CHECK(dp_tensor_numel(&gpu.out) == ny && memcmp(gpu.out.shape, cpu.out.shape, sizeof cpu.out.shape) == 0,
              "gpu conv_transpose (buffered): output shape differs from the CPU's");
        be->download(be->ctx, gy, gpu.out.data, sizeof(float) * ny);
        double vy = violation(gy, cpu.out.data, ny);
        be->upload(be->ctx, gpu.out.grad, dy, sizeof(float) * ny);
        gpu.out.grad_unset = 0;
        st = be->ops[DP_OP_CONV_TRANSPOSE].backward(&gpu, ga);
        CHECK(st == DP_OK, "gpu conv_transpose backward (buffered): %s", dp_error_message());
        float gdx[sizeof x / sizeof x[0]], gdw[sizeof w / sizeof w[0]], gdb[CO];
        be->download(be->ctx, gdx, xg.grad, sizeof gdx);
        be->download(be->ctx, gdw, wg.grad, sizeof gdw);
        be->download(be->ctx, gdb, bg.grad, sizeof gdb);
        double vx = violation(gdx, cdx, sizeof x / sizeof x[0]), vw = violation(gdw, cdw, sizeof w / sizeof w[0]),
               vb = violation(gdb, cdb, CO);
        CHECK(vy == 0.0 && vx == 0.0 && vw == 0.0 && vb == 0.0,
              "gpu conv_transpose (buffered) differs from the CPU beyond tolerance: y %g dx %g dw %g db %g", vy, vx, vw,
              vb);
        printf("  conv_transpose buffered (pad 1, output_padding 2 >= stride 1) vs cpu: y %g dx %g dw %g db %g\n", vy,
               vx, vw, vb);
    }
    /* fuse_relu is refused as by the CPU op, in one line naming it */
    gpu.attr.fuse_relu = 1;
    st = be->ops[DP_OP_CONV_TRANSPOSE].forward(&gpu, ga);
    CHECK(st != DP_OK && strstr(dp_error_message(), "conv_transpose") && strstr(dp_error_message(), "fuse_relu") &&
              !strchr(dp_error_message(), '\n'),
          "conv_transpose with fuse_relu: status %d, '%s'", st, dp_error_message());
    dp_arena_free(ha);
    dp_arena_free(ga);
    dp_tensor_t *ts[3] = {&xg, &wg, &bg};
    for (int i = 0; i < 3; i++) {
        be->free(be->ctx, ts[i]->data);
        be->free(be->ctx, ts[i]->grad);
    }
    free(dy);
    free(gy);
}

/* Dropout and drop path in training (no fixture: the mask is dptrain's own)
 * drop the same elements as the CPU op, with the same kept values, forward
 * and backward. */
static void check_dropout_like_cpu(dp_op_kind_t kind) {
    const char *name = dp_op_table[kind].name;
    enum { N = 6, F = 500 };
    static float x[N * F], dy[N * F], y_cpu[N * F], y_gpu[N * F], dx_cpu[N * F], dx_gpu[N * F];
    for (int i = 0; i < N * F; i++) x[i] = (float)((i * 37) % 101) / 7.0f - 5.0f, dy[i] = (float)(i % 13) - 6.0f;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.dropout_p = 0.3f;
    attr.dropout_seed = 1234;
    attr.example_offset = 17;
    dp_tensor_t xc = {2, {N, F}, x, dx_cpu, 1, 0};
    dp_node_t cpu = {.kind = kind, .attr = attr, .in = {&xc}};
    dp_arena_t *ha = dp_arena_new(1 << 16);
    CHECK(dp_op_forward(&cpu, ha) == DP_OK, "cpu %s: %s", name, dp_error_message());
    memcpy(y_cpu, cpu.out.data, sizeof y_cpu);
    memcpy(cpu.out.grad, dy, sizeof dy);
    cpu.out.grad_unset = 0;
    CHECK(dp_op_backward(&cpu, ha) == DP_OK, "cpu %s backward: %s", name, dp_error_message());
    dp_tensor_t xg = {2, {N, F}, upload(x, sizeof x), upload(x, sizeof x), 1, 0};
    dp_node_t gpu_node = {.kind = kind, .attr = attr, .in = {&xg}};
    dp_arena_t *ga = dp_arena_new_on(be, 1 << 16);
    dp_status_t st = be->ops[kind].forward(&gpu_node, ga);
    CHECK(st == DP_OK, "gpu %s: %s", name, dp_error_message());
    if (st == DP_OK) {
        be->download(be->ctx, y_gpu, gpu_node.out.data, sizeof y_gpu);
        be->upload(be->ctx, gpu_node.out.grad, dy, sizeof dy);
        gpu_node.out.grad_unset = 0;
        st = be->ops[kind].backward(&gpu_node, ga);
        CHECK(st == DP_OK, "gpu %s backward: %s", name, dp_error_message());
        be->download(be->ctx, dx_gpu, xg.grad, sizeof dx_gpu);
        CHECK(memcmp(y_gpu, y_cpu, sizeof y_cpu) == 0, "%s forward: GPU mask or values differ from the CPU's", name);
        CHECK(memcmp(dx_gpu, dx_cpu, sizeof dx_cpu) == 0, "%s backward: GPU differs from the CPU's", name);
        size_t zeros = 0;
        for (int i = 0; i < N * F; i++) zeros += y_cpu[i] == 0.0f;
        CHECK(zeros > 0 && zeros < (size_t)N * F, "%s: %zu of %d zeros, expected some dropped and some kept", name,
              zeros, N * F);
    }
    dp_arena_free(ha);
    dp_arena_free(ga);
    be->free(be->ctx, xg.data);
    be->free(be->ctx, xg.grad);
}

/* softmax_xent with label smoothing (and without) gives the CPU op's loss
 * and gradient within the fixtures' tolerance (the GPU's expf and log may
 * round otherwise; the emulator's are the host's), the gradient added to
 * a pre-filled one; a factor outside [0, 1) is refused in one line, as on
 * the CPU. */
static void check_xent_smoothing_like_cpu(void) {
    enum { N = 9, K = 13 };
    static float x[N * K], dx_cpu[N * K], dx_gpu[N * K], prefill[N * K];
    int32_t labels[N];
    for (int i = 0; i < N * K; i++) x[i] = (float)((i * 37) % 101) / 9.0f - 5.0f + (i < K ? 60.0f : 0.0f);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)((i * 5 + 3) % K);
    const float smoothing[] = {0.1f, 0.0f, 0.7f};
    int32_t *glabels = upload(labels, sizeof labels);
    for (size_t c = 0; c < sizeof smoothing / sizeof smoothing[0]; c++) {
        dp_op_attr_t attr = dp_op_attr_default();
        attr.label_smoothing = smoothing[c];
        attr.loss_denominator = c == 2 ? 20.0f : 0.0f;
        const float dy = 1.25f;
        for (int i = 0; i < N * K; i++) dx_cpu[i] = prefill[i] = GRAD_PREFILL;
        dp_tensor_t xc = {2, {N, K}, x, dx_cpu, 0, 0};
        dp_node_t cpu = {.kind = DP_OP_SOFTMAX_XENT, .attr = attr, .in = {&xc}, .labels = labels};
        dp_arena_t *ha = dp_arena_new(1 << 16);
        CHECK(dp_op_forward(&cpu, ha) == DP_OK, "cpu softmax_xent: %s", dp_error_message());
        cpu.out.grad[0] = dy;
        cpu.out.grad_unset = 0;
        CHECK(dp_op_backward(&cpu, ha) == DP_OK, "cpu softmax_xent backward: %s", dp_error_message());
        dp_tensor_t xg = {2, {N, K}, upload(x, sizeof x), upload(prefill, sizeof prefill), 0, 0};
        dp_node_t gpu = {.kind = DP_OP_SOFTMAX_XENT, .attr = attr, .in = {&xg}, .labels = glabels};
        dp_arena_t *ga = dp_arena_new_on(be, 1 << 16);
        dp_status_t st = be->ops[DP_OP_SOFTMAX_XENT].forward(&gpu, ga);
        CHECK(st == DP_OK, "gpu softmax_xent (label_smoothing %g): %s", (double)smoothing[c], dp_error_message());
        if (st == DP_OK) {
            float loss;
            be->download(be->ctx, &loss, gpu.out.data, sizeof loss);
            be->upload(be->ctx, gpu.out.grad, &dy, sizeof dy);
            gpu.out.grad_unset = 0;
            st = be->ops[DP_OP_SOFTMAX_XENT].backward(&gpu, ga);
            CHECK(st == DP_OK, "gpu softmax_xent backward: %s", dp_error_message());
            be->download(be->ctx, dx_gpu, xg.grad, sizeof dx_gpu);
            double vy = violation(&loss, cpu.out.data, 1), vx = violation(dx_gpu, dx_cpu, N * K);
            CHECK(vy == 0.0 && vx == 0.0,
                  "gpu softmax_xent (label_smoothing %g) differs from the CPU beyond tolerance: loss %.9g (cpu %.9g), "
                  "y %g dx %g", (double)smoothing[c], loss, cpu.out.data[0], vy, vx);
            printf("  softmax_xent label_smoothing %g vs cpu: loss %.9g (cpu %.9g), dx %s\n", (double)smoothing[c], loss,
                   cpu.out.data[0], memcmp(dx_gpu, dx_cpu, sizeof dx_cpu) == 0 ? "the same bits" : "within tolerance");
        }
        dp_arena_free(ha);
        dp_arena_free(ga);
        be->free(be->ctx, xg.data);
        be->free(be->ctx, xg.grad);
    }
    /* refused as on the CPU */
    dp_tensor_t xg = {2, {N, K}, upload(x, sizeof x), NULL, 0, 0};
    dp_node_t bad = {.kind = DP_OP_SOFTMAX_XENT, .attr = dp_op_attr_default(), .in = {&xg}, .labels = glabels};
    bad.attr.label_smoothing = 1.0f;
    dp_arena_t *ga = dp_arena_new_on(be, 1 << 16);
    dp_status_t st = be->ops[DP_OP_SOFTMAX_XENT].forward(&bad, ga);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "label_smoothing must be in [0, 1)") &&
              !strchr(dp_error_message(), '\n'),
          "gpu softmax_xent label_smoothing 1: status %d, '%s'", st, dp_error_message());
    dp_arena_free(ga);
    be->free(be->ctx, xg.data);
    be->free(be->ctx, glabels);
}

/* A node the ops must refuse, and how to spoil it. */
typedef struct {
    const char *what;
    dp_op_kind_t kind;
    int w_len, b_len; /* in[1] and in[2] of (len), 0 for none */
    int mse_target_len; /* mse: a target of (len) against x's 2 x 48 */
    void (*spoil)(dp_op_attr_t *a);
} refusal_t;

static void eps_negative(dp_op_attr_t *a) { a->eps = -1.0f; }
static void eps_nan(dp_op_attr_t *a) { a->eps = NAN; }
static void momentum_2(dp_op_attr_t *a) { a->momentum = 2.0f; }
static void fuse_7(dp_op_attr_t *a) { a->fuse_relu = 7; }
static void inference(dp_op_attr_t *a) { a->training = 0; }
static void dropout_1(dp_op_attr_t *a) { a->dropout_p = 1.0f; }
static void offset_negative(dp_op_attr_t *a) { a->example_offset = -1; }
static void smoothing_and_denominator(dp_op_attr_t *a) { a->label_smoothing = 2.0f, a->loss_denominator = -1.0f; }
static void denominator_inf(dp_op_attr_t *a) { a->loss_denominator = INFINITY; }
static void nothing(dp_op_attr_t *a) { (void)a; }

/* forward of `r`'s node on the CPU (gpu 0) or the GPU: its status, its message in `message` */
static dp_status_t refused_forward(const refusal_t *r, int gpu, char *message, size_t size) {
    static float x[2 * 48], t[2 * 48], w[8], b[8];
    static int32_t labels[2];
    for (int i = 0; i < 2 * 48; i++) x[i] = t[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 8; i++) w[i] = b[i] = 1.0f;
    void *on[4] = {x, w, b, labels};
    if (gpu) on[0] = upload(x, sizeof x), on[1] = upload(w, sizeof w), on[2] = upload(b, sizeof b),
             on[3] = upload(labels, sizeof labels);
    int xent = r->kind == DP_OP_SOFTMAX_XENT, mse = r->kind == DP_OP_MSE;
    dp_tensor_t xt = {xent ? 2 : 4, {2, xent ? 48 : 3, 4, 4}, on[0], NULL, 0, 0};
    if (mse) xt = (dp_tensor_t){2, {2, 48}, on[0], NULL, 0, 0};
    dp_tensor_t wt = {1, {r->w_len}, on[1], NULL, 0, 0}, bt = {1, {r->b_len}, on[2], NULL, 0, 0};
    dp_tensor_t tt = {2, {2, r->mse_target_len}, gpu ? upload(t, sizeof t) : t, NULL, 0, 0};
    dp_node_t node = {.kind = r->kind, .attr = dp_op_attr_default(), .labels = on[3]};
    node.in[0] = &xt;
    node.in[1] = mse ? &tt : r->w_len ? &wt : NULL;
    node.in[2] = r->b_len ? &bt : NULL;
    r->spoil(&node.attr);
    dp_arena_t *arena = gpu ? dp_arena_new_on(be, 1 << 16) : dp_arena_new(1 << 16);
    dp_status_t st = gpu ? be->ops[r->kind].forward(&node, arena) : dp_op_forward(&node, arena);
    snprintf(message, size, "%s", dp_error_message());
    dp_arena_free(arena);
    if (gpu) {
        for (int i = 0; i < 4; i++) be->free(be->ctx, on[i]);
        be->free(be->ctx, tt.data);
    }
    return st;
}

/* Bad nodes of the ops whose checks the CPU and the module share (op_checks.c): refused with the same status and
 * the very same one-line message on both. */
static void check_refusals_like_cpu(void) {
    static const refusal_t cases[] = {
        {"batch_norm eps -1", DP_OP_BATCH_NORM, 3, 3, 0, eps_negative},
        {"batch_norm momentum 2", DP_OP_BATCH_NORM, 3, 3, 0, momentum_2},
        {"batch_norm weight (4) for 3 channels", DP_OP_BATCH_NORM, 4, 3, 0, nothing},
        {"batch_norm fuse_relu 7", DP_OP_BATCH_NORM, 3, 3, 0, fuse_7},
        {"batch_norm inference without running statistics", DP_OP_BATCH_NORM, 3, 3, 0, inference},
        {"layer_norm eps NaN", DP_OP_LAYER_NORM, 3, 3, 0, eps_nan},
        {"layer_norm bias (2) for 3 channels", DP_OP_LAYER_NORM, 3, 2, 0, nothing},
        {"dropout p 1", DP_OP_DROPOUT, 0, 0, 0, dropout_1},
        {"drop_path example_offset -1", DP_OP_DROP_PATH, 0, 0, 0, offset_negative},
        {"softmax_xent label_smoothing 2 and loss_denominator -1", DP_OP_SOFTMAX_XENT, 0, 0, 0,
         smoothing_and_denominator},
        {"softmax_xent loss_denominator inf", DP_OP_SOFTMAX_XENT, 0, 0, 0, denominator_inf},
        {"mse target (2, 47)", DP_OP_MSE, 0, 0, 47, nothing},
        {"mse loss_denominator inf", DP_OP_MSE, 0, 0, 48, denominator_inf},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char on_cpu[1024], on_gpu[1024];
        dp_status_t cpu = refused_forward(&cases[i], 0, on_cpu, sizeof on_cpu);
        dp_status_t gpu = refused_forward(&cases[i], 1, on_gpu, sizeof on_gpu);
        CHECK(cpu != DP_OK && gpu == cpu && strcmp(on_cpu, on_gpu) == 0 && !strchr(on_gpu, '\n'),
              "%s: cpu status %d '%s', gpu status %d '%s'", cases[i].what, cpu, on_cpu, gpu, on_gpu);
        printf("  refused alike: %s: %s\n", cases[i].what, on_gpu);
    }
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_ops");
    const char *dir = testing_path("fixtures/ops");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d) return testing_finish("test_cuda_ops");
    char *names[512];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < 512) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0) names[count++] = strndup(e->d_name, len - 4);
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, compare_names);
    for (int i = 0; i < count; i++) {
        fixture_t f;
        if (fixture_load("ops", names[i], &f)) {
            int kind = op_kind(f.op);
            if (kind >= 0 && done_on_gpu(kind, &f)) {
                cases_per_op[kind]++;
                run_pass(&f, kind, PASS_ADD);
                run_pass(&f, kind, PASS_UNSET);
                run_pass(&f, kind, PASS_NO_DX);
            }
            fixture_free(&f);
        }
        free(names[i]);
    }
    for (int k = 0; k < DP_OP_COUNT; k++) /* every op of the table is done and ran */
        CHECK(be->ops[k].forward && be->ops[k].backward && cases_per_op[k] > 0, "no fixture ran for %s on the GPU",
              dp_op_table[k].name);
    check_conv_transpose_like_cpu();
    check_dropout_like_cpu(DP_OP_DROPOUT);
    check_dropout_like_cpu(DP_OP_DROP_PATH);
    check_xent_smoothing_like_cpu();
    check_refusals_like_cpu();
    return testing_finish("test_cuda_ops");
}
