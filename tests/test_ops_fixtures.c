/* test_ops_fixtures.c - every op against fixtures written by PyTorch.
 *
 * Reads every .bin file in tests/fixtures/ops (written by tools/make_fixtures.py;
 * the format is described there and in fixture_read below), runs the case's
 * forward and backward through dp_op_table and compares the output and the
 * gradient of every input with PyTorch's. Each case runs twice:
 *   pass "all grads": every input has a grad, pre-filled with GRAD_PREFILL, so
 *     the check also proves that backward adds instead of overwriting;
 *   pass "no dx": the data input (x) has no grad (like a network's first
 *     layer); parameters still get theirs, and ops without parameters must
 *     then produce no out.grad at all.
 * Prints the largest violation per case and tensor (|got - want| /
 * (ATOL + RTOL |want|), <= 1 passes). Also checks that every op in the
 * table has a fixture, and a few error paths (bad shapes, bad labels).
 *
 * Attributes beyond the header's (output_padding, training, eps, momentum,
 * fuse_relu, dropout_p, label_smoothing) travel as "attr.*" tensors; batch norm's running
 * stats as "running_mean" / "running_var", compared after the forward with
 * "running_mean_after" / "running_var_after" (tools/make_fixtures.py).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "dptrain/rng.h"
#include "fixture.h"
#include "testing.h"

/* float32 against a float64 reference rounded to float32:
 * |got - want| <= ATOL * max(1, max |want| of the tensor) + RTOL * |want|.
 * The floor scales with the tensor because a sum of n float products
 * carries an absolute error of about eps sqrt(n) times its terms, so an
 * element that cancels to near 0 is only as exact as its neighbours. */
#define RTOL 1e-4
#define ATOL 1e-5
#define GRAD_PREFILL 0.25f

/* --- running ----------------------------------------------------------------- */

static int op_kind(const char *name) {
    for (int k = 0; k < DP_OP_COUNT; k++)
        if (strcmp(dp_op_table[k].name, name) == 0) return k;
    return -1;
}

/* A copy of a fixture float tensor, with a grad pre-filled when wanted. */
static void tensor_from_fixture(dp_tensor_t *t, const fixture_tensor_t *ft, int with_grad) {
    dp_tensor_set_shape(t, ft->shape.ndim, ft->shape.shape);
    t->data = malloc(ft->numel * sizeof(float) + 1);
    memcpy(t->data, ft->data, ft->numel * sizeof(float));
    t->grad = NULL;
    t->grad_unset = 0; /* a caller's grad holds values: ops add to it */
    if (with_grad) {
        t->grad = malloc(ft->numel * sizeof(float) + 1);
        for (size_t i = 0; i < ft->numel; i++) t->grad[i] = GRAD_PREFILL;
    }
}

static int same_shape(const dp_tensor_t *a, const dp_tensor_t *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* A malloc'd copy of a float fixture tensor, or NULL when there is none. */
static float *copy_floats(const fixture_t *f, const char *name) {
    const fixture_tensor_t *t = fixture_get(f, name);
    if (!t) return NULL;
    float *copy = malloc(t->numel * sizeof(float) + 1);
    memcpy(copy, t->data, t->numel * sizeof(float));
    return copy;
}

/* Runs one pass of a case; x_grad says whether the data input gets a grad.
 * in[1] is "weight", or "other" (add) or "target" (mse, never a grad). */
static void run_pass(const fixture_t *f, int kind, int x_grad) {
    const char *pass = x_grad ? "all grads" : "no dx";
    const char *input_names[3] = {"x", "weight", "bias"};
    const char *grad_names[3] = {"dx", "dweight", "dbias"};
    if (fixture_get(f, "other")) {
        input_names[1] = "other";
        grad_names[1] = "dother";
    } else if (fixture_get(f, "target")) {
        input_names[1] = "target";
        grad_names[1] = NULL;
    }
    dp_tensor_t inputs[3];
    dp_node_t node;
    memset(&node, 0, sizeof node);
    node.kind = (dp_op_kind_t)kind;
    node.attr = f->attr;
    fixture_read_attrs(f, &node.attr);
    float *running_mean = copy_floats(f, "running_mean"), *running_var = copy_floats(f, "running_var");
    node.attr.running_mean = running_mean;
    node.attr.running_var = running_var;
    int any_grad = 0;
    for (int i = 0; i < 3; i++) {
        const fixture_tensor_t *ft = fixture_get(f, input_names[i]);
        if (!ft) continue;
        int with_grad = i == 0 ? x_grad : grad_names[i] != NULL;
        tensor_from_fixture(&inputs[i], ft, with_grad);
        node.in[i] = &inputs[i];
        any_grad |= with_grad;
    }
    const fixture_tensor_t *labels = fixture_get(f, "labels");
    if (labels) node.labels = labels->data;
    const fixture_tensor_t *y = fixture_get(f, "y"), *dy = fixture_get(f, "dy");
    CHECK(node.in[0] && y && dy, "%s: fixture lacks x, y or dy", f->name);
    if (!node.in[0] || !y || !dy) goto done;

    dp_arena_t *arena = dp_arena_new(1 << 16);
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "%s (%s): forward failed: %s", f->name, pass, dp_error_message());
    if (st != DP_OK) goto done_arena;
    CHECK(same_shape(&node.out, &y->shape), "%s (%s): output shape differs", f->name, pass);
    if (!same_shape(&node.out, &y->shape)) goto done_arena;
    char report[256] = "";
    fixture_compare(f, RTOL, ATOL, pass, "y", node.out.data, 0.0f, y, report, sizeof report);
    const fixture_tensor_t *mean_after = fixture_get(f, "running_mean_after");
    const fixture_tensor_t *var_after = fixture_get(f, "running_var_after");
    CHECK((mean_after != NULL) == (running_mean != NULL) && (var_after != NULL) == (running_var != NULL),
          "%s: running stats without their expected values (or the reverse)", f->name);
    if (mean_after && running_mean) fixture_compare(f, RTOL, ATOL, pass, "running_mean", running_mean, 0.0f, mean_after, report, sizeof report);
    if (var_after && running_var) fixture_compare(f, RTOL, ATOL, pass, "running_var", running_var, 0.0f, var_after, report, sizeof report);
    CHECK((node.out.grad != NULL) == any_grad, "%s (%s): out.grad is %s but inputs %s grads", f->name, pass,
          node.out.grad ? "set" : "NULL", any_grad ? "have" : "have no");
    if (node.out.grad) {
        /* += so that a view (flatten) sends dy into the input's pre-filled
         * grad; an op's own out.grad is unset until someone writes it */
        dp_grad_prepare(&node.out);
        for (size_t i = 0; i < dy->numel; i++) node.out.grad[i] += ((const float *)dy->data)[i];
        st = dp_op_backward(&node, arena);
        CHECK(st == DP_OK, "%s (%s): backward failed: %s", f->name, pass, dp_error_message());
        for (int i = 0; i < 3 && st == DP_OK; i++) {
            if (!node.in[i] || !node.in[i]->grad) continue;
            const fixture_tensor_t *want = fixture_get(f, grad_names[i]);
            CHECK(want != NULL, "%s: fixture lacks %s", f->name, grad_names[i]);
            if (want) fixture_compare(f, RTOL, ATOL, pass, grad_names[i], node.in[i]->grad, GRAD_PREFILL, want, report, sizeof report);
        }
    }
    printf("  %-40s %-9s max violation:%s\n", f->name, pass, report);
done_arena:
    dp_arena_free(arena);
done:
    for (int i = 0; i < 3; i++)
        if (node.in[i]) {
            free(node.in[i]->data);
            free(node.in[i]->grad);
        }
    free(running_mean);
    free(running_var);
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --- error paths ---------------------------------------------------------- */

/* Error paths of the ops beyond LeNet's (transposed conv, global pool,
 * batch norm, dropout, sigmoid, tanh, add, mse); `data` is 4096 zeros. */
static void check_new_op_errors(dp_arena_t *arena, float *data) {
    dp_tensor_t x = {4, {2, 4, 5, 5}, data, NULL, 0, 0}, w = {4, {4, 3, 3, 3}, data, NULL, 0, 0};
    dp_node_t ct = {.kind = DP_OP_CONV_TRANSPOSE, .attr = dp_op_attr_default(), .in = {&x, &w, NULL}};
    ct.attr.stride[0] = ct.attr.stride[1] = 2;
    ct.attr.output_padding[1] = 2; /* must be < max(stride, dilation) = 2 */
    dp_status_t st = dp_op_forward(&ct, arena);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "output_padding 2 along W"),
          "conv_transpose output_padding 2 with stride 2: status %d, '%s'", st, dp_error_message());
    ct.attr.output_padding[1] = 1;
    w.shape[0] = 3; /* C_in of the weight differs from the input's 4 */
    st = dp_op_forward(&ct, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "C_in = 4"), "conv_transpose weight C_in: status %d, '%s'",
          st, dp_error_message());
    w.shape[0] = 4;
    ct.attr.pad[0] = 9; /* output size (5-1)*2 - 18 + 2 + 1 < 1 */
    st = dp_op_forward(&ct, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "output size along H"),
          "conv_transpose output < 1: status %d, '%s'", st, dp_error_message());

    dp_tensor_t one = {4, {1, 4, 1, 1}, data, NULL, 0, 0}; /* one value per channel */
    dp_node_t bn = {.kind = DP_OP_BATCH_NORM, .attr = dp_op_attr_default(), .in = {&one}};
    st = dp_op_forward(&bn, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "more than 1 value per channel"),
          "batch_norm training on 1 value per channel: status %d, '%s'", st, dp_error_message());
    bn.attr.training = 0;
    st = dp_op_forward(&bn, arena);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "running_mean"),
          "batch_norm inference without running stats: status %d, '%s'", st, dp_error_message());
    dp_tensor_t gamma = {1, {3}, data, NULL, 0, 0};
    bn.in[0] = &x;
    bn.in[1] = &gamma;
    bn.attr.training = 1;
    st = dp_op_forward(&bn, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "weight must be (4)"),
          "batch_norm weight of 3 for 4 channels: status %d, '%s'", st, dp_error_message());

    dp_node_t drop = {.kind = DP_OP_DROPOUT, .attr = dp_op_attr_default(), .in = {&x}};
    drop.attr.dropout_p = 1.0f;
    st = dp_op_forward(&drop, arena);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "dropout_p"), "dropout p = 1: status %d, '%s'", st,
          dp_error_message());

    dp_tensor_t other = {4, {2, 4, 5, 4}, data, NULL, 0, 0};
    dp_node_t add = {.kind = DP_OP_ADD, .attr = dp_op_attr_default(), .in = {&x, &other}};
    st = dp_op_forward(&add, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "[2, 4, 5, 4]"), "add shape mismatch: status %d, '%s'",
          st, dp_error_message());
    dp_node_t mse = {.kind = DP_OP_MSE, .attr = dp_op_attr_default(), .in = {&x, &other}};
    st = dp_op_forward(&mse, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "mse"), "mse shape mismatch: status %d, '%s'", st,
          dp_error_message());
    dp_tensor_t flat = {2, {2, 4}, data, NULL, 0, 0};
    dp_node_t gap = {.kind = DP_OP_GLOBAL_AVG_POOL, .attr = dp_op_attr_default(), .in = {&flat}};
    st = dp_op_forward(&gap, arena);
    CHECK(st == DP_ERR_SHAPE, "global_avg_pool of (N, C): status %d, '%s'", st, dp_error_message());
}

/* label_smoothing 0 is the op as it was before the attribute: its loss
 * and gradient bit for bit those of the unsmoothed arithmetic, written
 * out here as ops_loss.c had it (log-sum-exp per row in double; the
 * gradient scale * (p - onehot)), on logits with large and small rows. */
static void check_smoothing_zero(dp_arena_t *arena) {
    enum { N = 7, K = 9 };
    static float x[N * K], dx[N * K], want_dx[N * K];
    int32_t labels[N];
    dp_rng_t rng;
    dp_rng_seed(&rng, 31);
    for (int i = 0; i < N * K; i++) x[i] = (float)dp_rng_normal(&rng) * (i < K ? 40.0f : 2.0f);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)dp_rng_below(&rng, K);
    const float dy = 0.75f, denominator = 11.0f;
    double loss = 0.0;
    for (int i = 0; i < N; i++) {
        const float *row = x + i * K;
        float max = row[0], p[K];
        for (int k = 1; k < K; k++)
            if (row[k] > max) max = row[k];
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(row[k] - max);
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] *= inv;
        loss += log(sum) + (double)max - (double)row[labels[i]];
        float scale = (float)(dy / (double)denominator);
        for (int k = 0; k < K; k++) want_dx[i * K + k] = scale * (p[k] - (k == labels[i] ? 1.0f : 0.0f));
    }
    const float want_loss = (float)(loss / denominator);
    dp_tensor_t logits = {2, {N, K}, x, dx, 1, 0};
    dp_node_t node = {.kind = DP_OP_SOFTMAX_XENT, .attr = dp_op_attr_default(), .in = {&logits}, .labels = labels};
    node.attr.loss_denominator = denominator;
    CHECK(node.attr.label_smoothing == 0.0f, "dp_op_attr_default's label_smoothing is %g", node.attr.label_smoothing);
    dp_arena_reset(arena);
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "softmax_xent (label_smoothing 0): %s", dp_error_message());
    if (st != DP_OK) return;
    node.out.grad[0] = dy;
    node.out.grad_unset = 0;
    st = dp_op_backward(&node, arena);
    CHECK(st == DP_OK, "softmax_xent backward (label_smoothing 0): %s", dp_error_message());
    CHECK(memcmp(&node.out.data[0], &want_loss, sizeof want_loss) == 0 && memcmp(dx, want_dx, sizeof dx) == 0,
          "label_smoothing 0: loss %.9g (unsmoothed %.9g) or its gradient is not the unsmoothed op's bits",
          node.out.data[0], want_loss);
    /* and a factor, however small, changes the loss */
    node.attr.label_smoothing = 0.01f;
    dp_arena_reset(arena);
    st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK && node.out.data[0] != want_loss, "label_smoothing 0.01: loss %.9g, the unsmoothed %.9g",
          node.out.data[0], want_loss);
}

static void check_errors(void) {
    dp_arena_t *arena = dp_arena_new(1 << 16);
    float data[4096] = {0};
    dp_tensor_t x = {4, {2, 4, 6, 6}, data, NULL, 0, 0}, w = {4, {5, 3, 3, 3}, data, NULL, 0, 0};
    dp_node_t node = {.kind = DP_OP_CONV, .attr = dp_op_attr_default(), .in = {&x, &w, NULL}};
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "3 input channels per group"),
          "conv channel mismatch: status %d, message '%s'", st, dp_error_message());
    w.shape[1] = 4;
    w.shape[2] = 7; /* kernel 7 > input 6 */
    st = dp_op_forward(&node, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "output size"), "conv output < 1: status %d, '%s'", st,
          dp_error_message());
    w.shape[2] = 3;
    node.attr.groups = 3;
    st = dp_op_forward(&node, arena);
    CHECK(st == DP_ERR_SHAPE, "conv groups 3 with 4 channels: status %d, '%s'", st, dp_error_message());

    dp_tensor_t p = {4, {1, 1, 4, 4}, data, NULL, 0, 0};
    dp_node_t pool = {.kind = DP_OP_MAX_POOL, .attr = dp_op_attr_default(), .in = {&p}};
    pool.attr.kernel[0] = pool.attr.kernel[1] = 2;
    pool.attr.pad[0] = 2; /* more than half the kernel */
    st = dp_op_forward(&pool, arena);
    CHECK(st == DP_ERR_ARG, "max_pool pad > kernel / 2: status %d, '%s'", st, dp_error_message());

    dp_tensor_t lx = {2, {3, 5}, data, NULL, 0, 0}, lw = {2, {4, 6}, data, NULL, 0, 0};
    dp_node_t lin = {.kind = DP_OP_LINEAR, .attr = dp_op_attr_default(), .in = {&lx, &lw, NULL}};
    st = dp_op_forward(&lin, arena);
    CHECK(st == DP_ERR_SHAPE && strstr(dp_error_message(), "linear"), "linear mismatch: status %d, '%s'", st,
          dp_error_message());

    int32_t labels[3] = {0, 5, 1};
    dp_tensor_t logits = {2, {3, 5}, data, NULL, 0, 0};
    dp_node_t xent = {.kind = DP_OP_SOFTMAX_XENT, .attr = dp_op_attr_default(), .in = {&logits}, .labels = labels};
    st = dp_op_forward(&xent, arena);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "label 5"), "bad label: status %d, '%s'", st,
          dp_error_message());
    labels[1] = -1;
    st = dp_op_forward(&xent, arena);
    CHECK(st == DP_ERR_ARG, "negative label: status %d, '%s'", st, dp_error_message());
    labels[1] = 1;
    const float bad_smoothing[] = {-0.1f, 1.0f, 2.0f, NAN};
    for (size_t i = 0; i < sizeof bad_smoothing / sizeof bad_smoothing[0]; i++) {
        xent.attr.label_smoothing = bad_smoothing[i];
        st = dp_op_forward(&xent, arena);
        CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "label_smoothing must be in [0, 1)"),
              "label_smoothing %g: status %d, '%s'", (double)bad_smoothing[i], st, dp_error_message());
    }
    check_smoothing_zero(arena);
    check_new_op_errors(arena, data);
    dp_arena_free(arena);
}

int main(void) {
    printf("tolerance: |got - want| <= %g max(1, max |want|) + %g |want| (violation <= 1 passes)\n", ATOL, RTOL);
    const char *dir_path = testing_path("fixtures/ops");
    char dir_name[4096];
    snprintf(dir_name, sizeof dir_name, "%s", dir_path);
    DIR *dir = opendir(dir_name);
    CHECK(dir != NULL, "cannot open fixture directory %s", dir_name);
    if (!dir) return testing_finish("test_ops_fixtures");
    char *names[1024];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && count < 1024) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0) names[count++] = strdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)count, sizeof names[0], compare_names);
    CHECK(count > 0, "no fixtures in %s", dir_name);

    int per_op[DP_OP_COUNT] = {0};
    for (int i = 0; i < count; i++) {
        char path[4608];
        snprintf(path, sizeof path, "%s/%s", dir_name, names[i]);
        fixture_t f;
        int ok = fixture_read(path, &f);
        CHECK(ok, "cannot read fixture %s", path);
        free(names[i]);
        if (!ok) continue;
        int kind = op_kind(f.op);
        CHECK(kind >= 0, "%s: unknown op '%s'", f.name, f.op);
        if (kind >= 0) {
            per_op[kind]++;
            run_pass(&f, kind, 1);
            run_pass(&f, kind, 0);
        }
        fixture_free(&f);
    }
    for (int k = 0; k < DP_OP_COUNT; k++)
        CHECK(per_op[k] > 0, "op %s has no fixture (add cases to tools/make_fixtures.py)", dp_op_table[k].name);
    check_errors();
    return testing_finish("test_ops_fixtures");
}
