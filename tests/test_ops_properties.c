/* test_ops_properties.c - properties of the ops that PyTorch fixtures
 * cannot pin down: dropout's own mask and synchronised batch norm.
 *
 * Dropout (training): the same seed gives the same mask, another seed
 * another; the kept fraction is 1 - p within 5 standard deviations and kept
 * values are x / (1 - p); a batch split into shards with example_offset
 * gives the bits of the whole batch, forward and backward; backward uses
 * the forward's mask and adds into a grad that holds values; p = 0 and
 * inference are the identity.
 *
 * Drop path (stochastic depth, training): every example is kept whole (all
 * its values x / (1 - p)) or zeroed whole; the kept fraction of examples
 * is 1 - p within 5 standard deviations; the same seed gives the same
 * mask; shards with example_offset give the whole batch's bits, forward
 * and backward; backward follows the forward's mask; p = 0 and inference
 * are the identity.
 *
 * Sync batch norm: PARTICIPANTS threads each run batch norm on an uneven
 * shard of one batch, with a stat_sync hook that sums their buffers in
 * rank order between two barriers (as an all-reduce would). Every shard's
 * output, input gradient and running stats must equal plain batch norm over
 * the whole batch, and the participants' weight / bias gradients must add
 * up to the whole batch's. Without the hook the shards' outputs differ
 * (the check can fail).
 *
 * Also: add with both inputs the same tensor gets 2 dy; a convolution
 * whose small-plane forward takes several chunks of images matches a direct
 * convolution; batch norm with fuse_relu (DP_FUSE_RELU, DP_FUSE_RELU6)
 * gives the bits of batch norm + relu (relu6) (bn_relu_check.h), and conv
 * and add refuse DP_FUSE_RELU6 in one line.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "dptrain/rng.h"
#include "bn_relu_check.h"
#include "testing.h"

/* --- helpers ----------------------------------------------------------------- */

static float *random_floats(dp_rng_t *rng, size_t n, float scale, float offset) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = offset + scale * (float)dp_rng_normal(rng);
    return v;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - (double)b[i]) > worst) worst = fabs((double)a[i] - (double)b[i]);
    return worst;
}

/* Runs a one-input op forward on (data, shape) with the given attributes;
 * returns a malloc'd copy of the output. With `grad` (numel floats,
 * holding values) also runs backward with out.grad = dy. */
static float *run_unary(dp_op_kind_t kind, const dp_op_attr_t *attr, float *data, int ndim, const int *shape,
                        float *grad, const float *dy) {
    dp_tensor_t x = {0};
    dp_tensor_set_shape(&x, ndim, shape);
    x.data = data;
    x.grad = grad;
    dp_node_t node = {.kind = kind, .attr = *attr, .in = {&x}};
    dp_arena_t *arena = dp_arena_new(1 << 16);
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "%s forward: %s", dp_op_table[kind].name, dp_error_message());
    size_t n = dp_tensor_numel(&x);
    float *y = malloc(n * sizeof(float));
    if (st == DP_OK) memcpy(y, node.out.data, n * sizeof(float));
    if (st == DP_OK && grad) {
        dp_grad_prepare(&node.out);
        for (size_t i = 0; i < n; i++) node.out.grad[i] += dy[i];
        st = dp_op_backward(&node, arena);
        CHECK(st == DP_OK, "%s backward: %s", dp_op_table[kind].name, dp_error_message());
    }
    dp_arena_free(arena);
    return y;
}

/* --- dropout ------------------------------------------------------------------- */

static void test_dropout(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 7);
    enum { N = 6, C = 4, H = 50, W = 50 };
    const int shape[4] = {N, C, H, W};
    const size_t numel = (size_t)N * C * H * W, per_example = numel / N;
    float *x = random_floats(&rng, numel, 1.0f, 3.0f); /* no zeros: y == 0 means dropped */
    for (size_t i = 0; i < numel; i++)
        if (x[i] == 0.0f) x[i] = 1.0f;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.training = 1;

    /* kept fraction and scaling, for several p */
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        attr.dropout_p = ps[k];
        attr.dropout_seed = 42;
        float *y = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
        size_t kept = 0, wrong_scale = 0;
        float scale = (float)(1.0 / (1.0 - (double)ps[k]));
        for (size_t i = 0; i < numel; i++) {
            if (y[i] == 0.0f) continue;
            kept++;
            if (y[i] != x[i] * scale) wrong_scale++;
        }
        double fraction = (double)kept / (double)numel, want = 1.0 - ps[k];
        double sigma = sqrt(ps[k] * want / (double)numel);
        printf("  dropout p=%.1f: kept %.5f (want %.5f +- %.5f)\n", (double)ps[k], fraction, want, 5 * sigma);
        CHECK(fabs(fraction - want) <= 5 * sigma, "dropout p=%g: kept fraction %.5f, want %.5f", (double)ps[k],
              fraction, want);
        CHECK(wrong_scale == 0, "dropout p=%g: %zu kept values are not x / (1 - p)", (double)ps[k], wrong_scale);
        free(y);
    }

    /* same seed -> same bits; another seed -> another mask; examples differ */
    attr.dropout_p = 0.5f;
    attr.dropout_seed = 1234;
    float *y1 = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
    float *y2 = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(y1, y2, numel * sizeof(float)) == 0, "dropout: the same seed gave different outputs");
    attr.dropout_seed = 1235;
    float *y3 = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
    size_t differ = 0;
    for (size_t i = 0; i < numel; i++) differ += (y1[i] == 0.0f) != (y3[i] == 0.0f);
    CHECK(differ > numel / 3, "dropout: seeds 1234 and 1235 share most of the mask (%zu of %zu differ)", differ, numel);
    size_t same_pattern = 0; /* example 0's mask against example 1's */
    for (size_t i = 0; i < per_example; i++) same_pattern += (y1[i] == 0.0f) == (y1[per_example + i] == 0.0f);
    CHECK(same_pattern < per_example * 3 / 4, "dropout: examples 0 and 1 have nearly the same mask");

    /* shards: examples [0, 2) and [2, 6) with example_offset, forward and backward */
    attr.dropout_seed = 1234;
    float *dy = random_floats(&rng, numel, 1.0f, 0.0f);
    float *grad_whole = calloc(numel, sizeof(float)), *grad_shards = calloc(numel, sizeof(float));
    float *whole = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, grad_whole, dy);
    const int split = 2, shape_a[4] = {split, C, H, W}, shape_b[4] = {N - split, C, H, W};
    float *shard_a = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape_a, grad_shards, dy);
    attr.example_offset = split;
    float *shard_b = run_unary(DP_OP_DROPOUT, &attr, x + split * per_example, 4, shape_b,
                               grad_shards + split * per_example, dy + split * per_example);
    attr.example_offset = 0;
    CHECK(memcmp(whole, shard_a, split * per_example * sizeof(float)) == 0 &&
              memcmp(whole + split * per_example, shard_b, (N - split) * per_example * sizeof(float)) == 0,
          "dropout: shards with example_offset differ from the whole batch");
    CHECK(memcmp(grad_whole, grad_shards, numel * sizeof(float)) == 0,
          "dropout backward: shards with example_offset differ from the whole batch");
    /* backward uses the forward's mask: dx = dy / (1 - p) where kept, else 0 */
    size_t bad = 0;
    for (size_t i = 0; i < numel; i++) bad += grad_whole[i] != (whole[i] != 0.0f ? dy[i] * 2.0f : 0.0f);
    CHECK(bad == 0, "dropout backward: %zu gradients disagree with the forward's mask", bad);
    /* a grad holding values is added to */
    for (size_t i = 0; i < numel; i++) grad_shards[i] = 1.0f;
    free(run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, grad_shards, dy));
    bad = 0;
    for (size_t i = 0; i < numel; i++) bad += grad_shards[i] != 1.0f + grad_whole[i];
    CHECK(bad == 0, "dropout backward: %zu gradients were not added to the existing ones", bad);

    /* p = 0 and inference: the identity */
    attr.dropout_p = 0.0f;
    float *ident = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(ident, x, numel * sizeof(float)) == 0, "dropout p=0 is not the identity");
    free(ident);
    attr.dropout_p = 0.5f;
    attr.training = 0;
    ident = run_unary(DP_OP_DROPOUT, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(ident, x, numel * sizeof(float)) == 0, "dropout in inference is not the identity");
    free(ident);

    free(x), free(y1), free(y2), free(y3), free(dy), free(grad_whole), free(grad_shards);
    free(whole), free(shard_a), free(shard_b);
}

/* --- drop path ------------------------------------------------------------------ */

/* Examples of y (N of per_example) kept whole (y = x * scale) or zeroed whole; *mixed counts the others. */
static size_t examples_kept(const float *x, const float *y, int N, size_t per_example, float scale, size_t *mixed) {
    size_t kept = 0;
    *mixed = 0;
    for (int n = 0; n < N; n++) {
        size_t same = 0, zero = 0;
        for (size_t i = (size_t)n * per_example; i < (size_t)(n + 1) * per_example; i++) {
            same += y[i] == x[i] * scale;
            zero += y[i] == 0.0f;
        }
        if (same == per_example) kept++;
        else if (zero != per_example) ++*mixed;
    }
    return kept;
}

static void test_drop_path(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 11);
    enum { N = 4000, C = 3, H = 2, W = 5 };
    const int shape[4] = {N, C, H, W};
    const size_t numel = (size_t)N * C * H * W, per_example = numel / N;
    float *x = random_floats(&rng, numel, 1.0f, 3.0f); /* no zeros: y == 0 means dropped */
    for (size_t i = 0; i < numel; i++)
        if (x[i] == 0.0f) x[i] = 1.0f;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.training = 1;
    const float ps[] = {0.0125f, 0.2f, 0.5f};
    for (int k = 0; k < 3; k++) {
        attr.dropout_p = ps[k];
        attr.dropout_seed = 42;
        float *y = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
        size_t mixed = 0, kept = examples_kept(x, y, N, per_example, (float)(1.0 / (1.0 - (double)ps[k])), &mixed);
        double fraction = (double)kept / N, want = 1.0 - ps[k], sigma = sqrt(ps[k] * want / N);
        printf("  drop_path p=%g: kept %.5f of the examples (want %.5f +- %.5f)\n", (double)ps[k], fraction, want,
               5 * sigma);
        CHECK(mixed == 0, "drop_path p=%g: %zu examples neither kept whole (x / (1 - p)) nor zeroed whole",
              (double)ps[k], mixed);
        CHECK(fabs(fraction - want) <= 5 * sigma, "drop_path p=%g: kept fraction %.5f, want %.5f", (double)ps[k],
              fraction, want);
        free(y);
    }
    /* the same seed, the same mask; another seed, another */
    attr.dropout_p = 0.5f;
    attr.dropout_seed = 1234;
    float *y1 = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
    float *y2 = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(y1, y2, numel * sizeof(float)) == 0, "drop_path: the same seed gave different outputs");
    attr.dropout_seed = 1235;
    float *y3 = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
    size_t differ = 0;
    for (int n = 0; n < N; n++) differ += (y1[n * per_example] == 0.0f) != (y3[n * per_example] == 0.0f);
    CHECK(differ > N / 3, "drop_path: seeds 1234 and 1235 share most of the mask (%zu of %d differ)", differ, N);
    /* shards [0, 1500) and [1500, N) with example_offset, forward and backward */
    attr.dropout_seed = 1234;
    float *dy = random_floats(&rng, numel, 1.0f, 0.0f);
    float *grad_whole = calloc(numel, sizeof(float)), *grad_shards = calloc(numel, sizeof(float));
    float *whole = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, grad_whole, dy);
    const int split = 1500, shape_a[4] = {split, C, H, W}, shape_b[4] = {N - split, C, H, W};
    float *shard_a = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape_a, grad_shards, dy);
    attr.example_offset = split;
    float *shard_b = run_unary(DP_OP_DROP_PATH, &attr, x + split * per_example, 4, shape_b,
                               grad_shards + split * per_example, dy + split * per_example);
    attr.example_offset = 0;
    CHECK(memcmp(whole, shard_a, split * per_example * sizeof(float)) == 0 &&
              memcmp(whole + split * per_example, shard_b, (N - split) * per_example * sizeof(float)) == 0,
          "drop_path: shards with example_offset differ from the whole batch");
    CHECK(memcmp(grad_whole, grad_shards, numel * sizeof(float)) == 0,
          "drop_path backward: shards with example_offset differ from the whole batch");
    size_t bad = 0;
    for (size_t i = 0; i < numel; i++) bad += grad_whole[i] != (whole[i] != 0.0f ? dy[i] * 2.0f : 0.0f);
    CHECK(bad == 0, "drop_path backward: %zu gradients disagree with the forward's mask", bad);
    /* p = 0 and inference: the identity */
    attr.dropout_p = 0.0f;
    float *ident = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(ident, x, numel * sizeof(float)) == 0, "drop_path p=0 is not the identity");
    free(ident);
    attr.dropout_p = 0.5f;
    attr.training = 0;
    ident = run_unary(DP_OP_DROP_PATH, &attr, x, 4, shape, NULL, NULL);
    CHECK(memcmp(ident, x, numel * sizeof(float)) == 0, "drop_path in inference is not the identity");
    free(ident);
    free(x), free(y1), free(y2), free(y3), free(dy), free(grad_whole), free(grad_shards);
    free(whole), free(shard_a), free(shard_b);
}

/* --- sync batch norm ------------------------------------------------------------- */

enum { PARTICIPANTS = 3, BN_C = 3, BN_H = 4, BN_W = 5, MAX_SYNC = 2 * BN_C + 1 };
static const int shard_sizes[PARTICIPANTS] = {2, 3, 1}; /* uneven on purpose */

/* The fake all-reduce: each participant writes its buffer into its slot;
 * after the barrier everyone sums the slots in rank order; a second
 * barrier keeps a fast participant from overwriting a slot still read. */
typedef struct {
    pthread_barrier_t barrier;
    double slots[PARTICIPANTS][MAX_SYNC];
    int calls[PARTICIPANTS];
} sync_shared_t;

typedef struct {
    sync_shared_t *shared;
    int rank;
} sync_ctx_t;

static void fake_allreduce_sum(void *ctx, double *values, int count) {
    sync_ctx_t *c = ctx;
    DP_ASSERT(count <= MAX_SYNC);
    memcpy(c->shared->slots[c->rank], values, (size_t)count * sizeof(double));
    c->shared->calls[c->rank]++;
    pthread_barrier_wait(&c->shared->barrier);
    for (int i = 0; i < count; i++) {
        double sum = 0.0;
        for (int p = 0; p < PARTICIPANTS; p++) sum += c->shared->slots[p][i];
        values[i] = sum;
    }
    pthread_barrier_wait(&c->shared->barrier);
}

/* One batch norm forward + backward on (n, C, H, W) at x, dy; writes y and
 * adds into dx, dgamma, dbeta; updates running stats. */
typedef struct {
    int n;
    const float *x, *dy, *gamma, *beta;
    float *y, *dx, *dgamma, *dbeta, running_mean[BN_C], running_var[BN_C];
    const dp_stat_sync_t *sync;
    dp_status_t status;
} bn_run_t;

static void *bn_run(void *arg) {
    bn_run_t *r = arg;
    const int x_shape[4] = {r->n, BN_C, BN_H, BN_W}, c_shape[1] = {BN_C};
    dp_tensor_t x = {0}, w = {0}, b = {0};
    dp_tensor_set_shape(&x, 4, x_shape);
    dp_tensor_set_shape(&w, 1, c_shape);
    dp_tensor_set_shape(&b, 1, c_shape);
    x.data = (float *)r->x, x.grad = r->dx;
    w.data = (float *)r->gamma, w.grad = r->dgamma;
    b.data = (float *)r->beta, b.grad = r->dbeta;
    dp_node_t node = {.kind = DP_OP_BATCH_NORM, .attr = dp_op_attr_default(), .in = {&x, &w, &b}};
    node.attr.running_mean = r->running_mean;
    node.attr.running_var = r->running_var;
    node.attr.stat_sync = r->sync;
    dp_arena_t *arena = dp_arena_new(1 << 16);
    r->status = dp_op_forward(&node, arena);
    size_t n = dp_tensor_numel(&x);
    if (r->status == DP_OK) {
        memcpy(r->y, node.out.data, n * sizeof(float));
        dp_grad_prepare(&node.out);
        for (size_t i = 0; i < n; i++) node.out.grad[i] += r->dy[i];
        r->status = dp_op_backward(&node, arena);
    }
    dp_arena_free(arena);
    return NULL;
}

static void bn_init_running(bn_run_t *r) {
    for (int c = 0; c < BN_C; c++) r->running_mean[c] = 0.1f * (float)c, r->running_var[c] = 1.0f + (float)c;
}

static void test_sync_batch_norm(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 99);
    int total = 0;
    for (int p = 0; p < PARTICIPANTS; p++) total += shard_sizes[p];
    const size_t per_example = (size_t)BN_C * BN_H * BN_W, numel = (size_t)total * per_example;
    float *x = random_floats(&rng, numel, 2.0f, 5.0f), *dy = random_floats(&rng, numel, 1.0f, 0.0f);
    float *gamma = random_floats(&rng, BN_C, 0.3f, 1.0f), *beta = random_floats(&rng, BN_C, 0.5f, 0.0f);

    /* the reference: plain batch norm over the whole batch */
    bn_run_t whole = {.n = total, .x = x, .dy = dy, .gamma = gamma, .beta = beta};
    whole.y = malloc(numel * sizeof(float));
    whole.dx = calloc(numel, sizeof(float));
    whole.dgamma = calloc(BN_C, sizeof(float));
    whole.dbeta = calloc(BN_C, sizeof(float));
    bn_init_running(&whole);
    bn_run(&whole);
    CHECK(whole.status == DP_OK, "batch norm over the whole batch: %s", dp_error_message());

    /* the participants, on threads, with and without the hook */
    for (int synced = 1; synced >= 0; synced--) {
        sync_shared_t shared;
        memset(&shared, 0, sizeof shared);
        pthread_barrier_init(&shared.barrier, NULL, PARTICIPANTS);
        sync_ctx_t ctx[PARTICIPANTS];
        dp_stat_sync_t hooks[PARTICIPANTS];
        bn_run_t runs[PARTICIPANTS];
        pthread_t threads[PARTICIPANTS];
        float *y = malloc(numel * sizeof(float)), *dx = calloc(numel, sizeof(float));
        float dgamma[PARTICIPANTS][BN_C] = {{0}}, dbeta[PARTICIPANTS][BN_C] = {{0}};
        size_t first = 0;
        for (int p = 0; p < PARTICIPANTS; p++) {
            ctx[p] = (sync_ctx_t){&shared, p};
            hooks[p] = (dp_stat_sync_t){fake_allreduce_sum, &ctx[p]};
            runs[p] = (bn_run_t){.n = shard_sizes[p], .x = x + first, .dy = dy + first, .gamma = gamma, .beta = beta,
                                 .y = y + first, .dx = dx + first, .dgamma = dgamma[p], .dbeta = dbeta[p],
                                 .sync = synced ? &hooks[p] : NULL};
            bn_init_running(&runs[p]);
            first += (size_t)shard_sizes[p] * per_example;
            pthread_create(&threads[p], NULL, bn_run, &runs[p]);
        }
        for (int p = 0; p < PARTICIPANTS; p++) pthread_join(threads[p], NULL);
        pthread_barrier_destroy(&shared.barrier);
        double y_diff = max_abs_diff(y, whole.y, numel);
        if (!synced) {
            printf("  batch norm per shard without stat_sync: max |y - y_whole| %.3g (must differ)\n", y_diff);
            CHECK(y_diff > 1e-2, "batch norm without stat_sync matches the whole batch: the test cannot fail");
            free(y), free(dx);
            continue;
        }
        double dx_diff = max_abs_diff(dx, whole.dx, numel), stat_diff = 0.0, param_diff = 0.0;
        for (int p = 0; p < PARTICIPANTS; p++) {
            CHECK(runs[p].status == DP_OK, "participant %d failed", p);
            CHECK(shared.calls[p] == 2, "participant %d called stat_sync %d times, want 2 (forward, backward)", p,
                  shared.calls[p]);
            double d = max_abs_diff(runs[p].running_mean, whole.running_mean, BN_C);
            double v = max_abs_diff(runs[p].running_var, whole.running_var, BN_C);
            stat_diff = fmax(stat_diff, fmax(d, v));
        }
        for (int c = 0; c < BN_C; c++) {
            double sum_g = 0.0, sum_b = 0.0;
            for (int p = 0; p < PARTICIPANTS; p++) sum_g += dgamma[p][c], sum_b += dbeta[p][c];
            param_diff = fmax(param_diff, fmax(fabs(sum_g - whole.dgamma[c]), fabs(sum_b - whole.dbeta[c])));
        }
        printf("  sync batch norm, %d participants (shards 2+3+1) vs whole batch: max diff y %.3g, dx %.3g, "
               "running stats %.3g, summed dgamma/dbeta %.3g\n",
               PARTICIPANTS, y_diff, dx_diff, stat_diff, param_diff);
        CHECK(y_diff < 1e-5, "sync batch norm: y differs from the whole batch by %.3g", y_diff);
        CHECK(dx_diff < 1e-5, "sync batch norm: dx differs from the whole batch by %.3g", dx_diff);
        CHECK(stat_diff < 1e-5, "sync batch norm: running stats differ from the whole batch by %.3g", stat_diff);
        CHECK(param_diff < 1e-4, "sync batch norm: summed dgamma / dbeta differ from the whole batch by %.3g",
              param_diff);
        free(y), free(dx);
    }
    free(x), free(dy), free(gamma), free(beta), free(whole.y), free(whole.dx), free(whole.dgamma), free(whole.dbeta);
}

/* --- conv over several chunks of images ----------------------------------------------- */

/* ops_conv.c's tap-plane forward (padded output planes of <= 64 positions)
 * splits the batch into chunks by its buffer budget; a fixture big enough
 * to need two would weigh megabytes. Here x (17, 256, 7, 7) with a 3x3
 * kernel, pad 1, 48 output channels, bias and fused ReLU, at stride 2
 * (4x4 outputs) and stride 1 (7x7), takes about 75 KB per image, so
 * 14 + 3 images against the 1 MiB budget; every output must match a direct
 * convolution summed in double. */
static void check_conv_tap_plane_chunks(int stride) {
    enum { N = 17, C = 256, OC = 48, H = 7, W = 7, K = 3 };
    const int OH = (H + 2 - K) / stride + 1, OW = (W + 2 - K) / stride + 1;
    dp_rng_t rng;
    dp_rng_seed(&rng, 11);
    float *xd = random_floats(&rng, (size_t)N * C * H * W, 1.0f, 0.0f);
    float *wd = random_floats(&rng, (size_t)OC * C * K * K, 0.05f, 0.0f);
    float *bd = random_floats(&rng, OC, 0.5f, 0.0f);
    dp_tensor_t x = {0}, w = {0}, b = {0};
    dp_tensor_set_shape(&x, 4, (const int[]){N, C, H, W});
    dp_tensor_set_shape(&w, 4, (const int[]){OC, C, K, K});
    dp_tensor_set_shape(&b, 1, (const int[]){OC});
    x.data = xd;
    w.data = wd;
    b.data = bd;
    dp_node_t node = {.kind = DP_OP_CONV, .attr = dp_op_attr_default(), .in = {&x, &w, &b}};
    node.attr.stride[0] = node.attr.stride[1] = stride;
    node.attr.pad[0] = node.attr.pad[1] = 1;
    node.attr.fuse_relu = 1;
    /* grads (set before the forward, which then keeps out.grad) start at 0.25: backward must add */
    x.grad = random_floats(&rng, (size_t)N * C * H * W, 0.0f, 0.25f);
    w.grad = random_floats(&rng, (size_t)OC * C * K * K, 0.0f, 0.25f);
    b.grad = random_floats(&rng, OC, 0.0f, 0.25f);
    dp_arena_t *arena = dp_arena_new(1 << 20);
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "conv forward: %s", dp_error_message());
    double worst = 0.0;
    int positive = 0;
    for (int n = 0; st == DP_OK && n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double sum = bd[oc];
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh * stride + kh - 1, iw = ow * stride + kw - 1;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                sum += (double)xd[(((size_t)n * C + c) * H + ih) * W + iw] *
                                       wd[(((size_t)oc * C + c) * K + kh) * K + kw];
                            }
                    double want = sum > 0.0 ? sum : 0.0;
                    positive += want > 0.0;
                    float got = node.out.data[(((size_t)n * OC + oc) * OH + oh) * OW + ow];
                    if (fabs(got - want) > worst) worst = fabs(got - want);
                }
    CHECK(worst <= 1e-4, "conv x (17, 256, 7, 7) stride %d pad 1 + ReLU: max |got - want| = %g, expected <= 1e-4",
          stride, worst);
    CHECK(positive > N * OC * OH * OW / 4, "conv reference: only %d positive outputs, the ReLU hides too much",
          positive);
    printf("  conv (17, 256, 7, 7) stride %d pad 1 + ReLU, 2 chunks: max |y - direct| %.3g\n", stride, worst);

    /* Backward: dy random; the gradient reaching the conv is dy where
     * y > 0. dx, dw and db against direct sums in double. */
    const size_t ny = (size_t)N * OC * OH * OW, nx = (size_t)N * C * H * W, nw = (size_t)OC * C * K * K;
    float *dy = random_floats(&rng, ny, 1.0f, 0.0f);
    double *dx_ref = calloc(nx, sizeof(double)), *dw_ref = calloc(nw, sizeof(double)), db_ref[OC] = {0};
    CHECK(st != DP_OK || node.out.grad, "conv forward: no output gradient although the inputs have grads");
    if (st == DP_OK && node.out.grad) {
        dp_grad_prepare(&node.out);
        memcpy(node.out.grad, dy, ny * sizeof(float));
        st = dp_op_backward(&node, arena);
    }
    CHECK(st == DP_OK, "conv backward: %s", dp_error_message());
    for (int n = 0; st == DP_OK && n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    size_t o = (((size_t)n * OC + oc) * OH + oh) * OW + ow;
                    double gy = node.out.data[o] > 0.0f ? dy[o] : 0.0;
                    db_ref[oc] += gy;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh * stride + kh - 1, iw = ow * stride + kw - 1;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                size_t xi = (((size_t)n * C + c) * H + ih) * W + iw;
                                size_t wi = (((size_t)oc * C + c) * K + kh) * K + kw;
                                dx_ref[xi] += gy * wd[wi];
                                dw_ref[wi] += gy * xd[xi];
                            }
                }
    double dx_err = 0.0, dw_err = 0.0, db_err = 0.0;
    for (size_t i = 0; st == DP_OK && i < nx; i++) dx_err = fmax(dx_err, fabs(x.grad[i] - 0.25 - dx_ref[i]));
    for (size_t i = 0; st == DP_OK && i < nw; i++) dw_err = fmax(dw_err, fabs(w.grad[i] - 0.25 - dw_ref[i]));
    for (int i = 0; st == DP_OK && i < OC; i++) db_err = fmax(db_err, fabs(b.grad[i] - 0.25 - db_ref[i]));
    /* dw sums N * OH * OW (up to 833) products of unit-scale values */
    CHECK(dx_err <= 1e-5, "conv backward stride %d: max |dx - direct| = %g, expected <= 1e-5", stride, dx_err);
    CHECK(dw_err <= 2e-4, "conv backward stride %d: max |dw - direct| = %g, expected <= 2e-4", stride, dw_err);
    CHECK(db_err <= 1e-5, "conv backward stride %d: max |db - direct| = %g, expected <= 1e-5", stride, db_err);
    printf("  conv (17, 256, 7, 7) stride %d backward, 2 chunks: max |dx - direct| %.3g, |dw - direct| %.3g, "
           "|db - direct| %.3g\n", stride, dx_err, dw_err, db_err);
    dp_arena_free(arena);
    free(xd);
    free(wd);
    free(bd);
    free(dy);
    free(dx_ref);
    free(dw_ref);
    free(x.grad);
    free(w.grad);
    free(b.grad);
}

static void test_conv_tap_plane_chunks(void) {
    check_conv_tap_plane_chunks(2);
    check_conv_tap_plane_chunks(1);
}

/* --- add with itself --------------------------------------------------------------- */

/* conv and add fuse a ReLU only: DP_FUSE_RELU6 (batch norm's) is refused, naming fuse_relu */
static void test_fuse_relu6_refused(void) {
    float data[2 * 2 * 3 * 3] = {0}, weight[2 * 2] = {0};
    dp_tensor_t x = {4, {1, 2, 3, 3}, data, NULL, 0, 0}, w = {4, {2, 2, 1, 1}, weight, NULL, 0, 0};
    dp_node_t conv = {.kind = DP_OP_CONV, .attr = dp_op_attr_default(), .in = {&x, &w}};
    dp_node_t add = {.kind = DP_OP_ADD, .attr = dp_op_attr_default(), .in = {&x, &x}};
    dp_node_t *nodes[2] = {&conv, &add};
    dp_arena_t *arena = dp_arena_new(1 << 12);
    for (int i = 0; i < 2; i++) {
        nodes[i]->attr.fuse_relu = DP_FUSE_RELU6;
        dp_status_t st = dp_op_forward(nodes[i], arena);
        CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "fuse_relu"), "%s with DP_FUSE_RELU6: status %d, '%s'",
              dp_op_table[nodes[i]->kind].name, st, dp_error_message());
        nodes[i]->attr.fuse_relu = DP_FUSE_RELU;
        CHECK(dp_op_forward(nodes[i], arena) == DP_OK, "%s with DP_FUSE_RELU: %s", dp_op_table[nodes[i]->kind].name,
              dp_error_message());
    }
    dp_arena_free(arena);
}

static void test_add_aliased(void) {
    float data[6] = {1, -2, 3, -4, 5, -6}, grad[6] = {0}, dy[6] = {1, 2, 3, 4, 5, 6};
    dp_tensor_t x = {2, {2, 3}, data, grad, 1, 0}; /* unset: the first write claims it */
    dp_node_t node = {.kind = DP_OP_ADD, .attr = dp_op_attr_default(), .in = {&x, &x}};
    dp_arena_t *arena = dp_arena_new(1 << 12);
    CHECK(dp_op_forward(&node, arena) == DP_OK, "add x + x: %s", dp_error_message());
    dp_grad_prepare(&node.out);
    for (int i = 0; i < 6; i++) node.out.grad[i] += dy[i];
    CHECK(dp_op_backward(&node, arena) == DP_OK, "add x + x backward: %s", dp_error_message());
    int bad = 0;
    for (int i = 0; i < 6; i++) bad += node.out.data[i] != 2 * data[i] || grad[i] != 2 * dy[i];
    CHECK(bad == 0, "add x + x: y must be 2x and dx 2 dy (%d wrong)", bad);
    dp_arena_free(arena);
}

int main(void) {
    test_dropout();
    test_drop_path();
    test_sync_batch_norm();
    test_add_aliased();
    test_fuse_relu6_refused();
    test_conv_tap_plane_chunks();
    /* batch norm with fuse_relu = batch norm + relu (relu6), bit for bit */
    for (int fuse = DP_FUSE_RELU; fuse <= DP_FUSE_RELU6; fuse++) {
        check_bn_relu_fused(dp_backend_cpu(), "cpu", (const int[4]){4, 3, 5, 6}, fuse);
        check_bn_relu_fused(dp_backend_cpu(), "cpu", (const int[4]){2, 8, 4, 4}, fuse);
    }
    return testing_finish("test_ops_properties");
}
