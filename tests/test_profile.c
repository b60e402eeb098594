/* test_profile.c - the per-layer profiler (profile.h) through the trainer
 * (dp_trainer_config_t.profile_steps) on CPU devices.
 *
 * A tiny model with a fused conv+ReLU, a conv followed by a batch norm fused
 * with its ReLU, max pooling, a ReLU of its own, flatten and a linear layer, on 64 synthetic
 * 12x12 images, 2 CPU devices, batches of 16:
 * - 10 steps, warm-up 3, window 4, an evaluation inside the window: every
 *   layer (and the loss) has a forward and a backward row on every device,
 *   each timed 4 times (once per timed step: nothing outside the window, the
 *   evaluation's forward neither), times >= 0, the rows' shares plus the
 *   share outside the layers sum to 1, the step time covers the layers;
 * - the same run without profiling gives the same parameters, bit for bit;
 * - accumulate 2: every row timed twice per step;
 * - a window cut short by the end of training (warm-up 8, window 20: 2
 *   steps timed) and one never reached (warm-up 10: nothing timed);
 * - a backend with timing marks (the CPU table plus marks read from the
 *   host clock, standing in for a GPU's events): one pool made when the
 *   window opens, sized from the last warm-up step, read once, after the
 *   window's last step, and never before; warm-up 0 uses a default pool;
 * - dp_profiler_new refuses a window of 0; dp_trainer_profile fails on a
 *   trainer that does not profile.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/profile.h"
#include "testing.h"

#define COUNT 64
#define BATCH 16

static dp_model_t *tiny_model(void) {
    dp_model_t *m = NULL;
    dp_op_attr_t pool = dp_op_attr_default();
    pool.kernel[0] = pool.kernel[1] = 2;
    pool.stride[0] = pool.stride[1] = 2;
    int ok = dp_model_new("tiny", 1, 12, 12, DP_INIT_TORCH_DEFAULT, 0.0f, &m) == DP_OK &&
             dp_model_add_conv(m, "conv1", 4, 3, 3, NULL, 1) == DP_OK && dp_model_add_relu(m) == DP_OK &&
             dp_model_add_conv(m, "conv2", 4, 3, 3, NULL, 1) == DP_OK &&
             dp_model_add_batch_norm(m, "bn", NULL) == DP_OK && dp_model_add_relu(m) == DP_OK &&
             dp_model_add_pool(m, DP_OP_MAX_POOL, &pool) == DP_OK && dp_model_add_relu(m) == DP_OK &&
             dp_model_add_flatten(m) == DP_OK &&
             dp_model_add_linear(m, "fc", 10, 1) == DP_OK;
    CHECK(ok, "tiny model: %s", dp_error_message());
    return m;
}

/* The layers as the profile names them, and their ops. */
static const char *const expected_layers[] = {"conv1+relu1", "conv2", "bn+relu2", "maxpool1", "relu3", "flatten1", "fc",
                                              "loss"};
static const char *const expected_ops[] = {"conv+relu", "conv", "batch_norm+relu", "max_pool", "relu", "flatten", "linear",
                                           "softmax_xent"};
#define NUM_LAYERS (int)(sizeof expected_layers / sizeof expected_layers[0])

typedef struct {
    int warmup, window, accumulate, devices, evaluate_at;
    const dp_backend_t *backend;
} run_t;

/* Trains `steps` steps; the parameters of device 0 into params (when not
 * NULL); the trainer stays for the caller when *out is asked for. */
static int train(const dp_model_t *m, const dp_dataset_t *ds, const run_t *run, int steps, float *params,
                 dp_trainer_t **out) {
    const dp_backend_t *backends[2] = {run->backend, run->backend};
    dp_trainer_config_t c = {.model = m, .num_devices = run->devices, .threads_per_device = 1,
                             .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f}, .seed = 5,
                             .accumulate = run->accumulate, .profile_steps = run->window,
                             .profile_warmup = run->warmup, .backends = run->backend ? backends : NULL};
    dp_trainer_t *t = NULL;
    if (dp_trainer_new(&c, &t) != DP_OK) {
        CHECK(0, "dp_trainer_new: %s", dp_error_message());
        return 0;
    }
    int indices[BATCH];
    int ok = 1;
    for (int s = 0; s < steps && ok; s++) {
        for (int i = 0; i < BATCH; i++) indices[i] = (s * BATCH + i * 5) % COUNT;
        ok = testing_step(t, ds, indices, BATCH, NULL, NULL) == DP_OK;
        CHECK(ok, "step %d: %s", s, dp_error_message());
        int correct;
        if (ok && s == run->evaluate_at) CHECK(testing_evaluate(t, ds, 32, &correct) == DP_OK, "evaluate: %s",
                                               dp_error_message());
    }
    if (ok && params) memcpy(params, dp_trainer_params(t, 0), sizeof(float) * dp_model_num_params(m));
    if (ok && out) *out = t;
    else dp_trainer_free(t);
    return ok;
}

/* Every layer forward and backward, each timed `calls` times, and the sums. */
static void check_report(const dp_profile_report_t *r, int steps, int calls, const char *what) {
    CHECK(r->steps == steps, "%s: %d steps timed, expected %d", what, r->steps, steps);
    if (steps == 0) {
        CHECK(r->num_rows == 0, "%s: nothing timed, yet %d rows", what, r->num_rows);
        return;
    }
    CHECK(r->num_rows == 2 * NUM_LAYERS, "%s: %d rows, expected %d", what, r->num_rows, 2 * NUM_LAYERS);
    for (int l = 0; l < NUM_LAYERS; l++)
        for (int dir = 0; dir < 2; dir++) {
            int found = 0;
            for (int i = 0; i < r->num_rows; i++) {
                const dp_profile_row_t *row = &r->rows[i];
                if (strcmp(row->layer, expected_layers[l]) != 0 || (int)row->direction != dir) continue;
                found++;
                CHECK(strcmp(row->op, expected_ops[l]) == 0, "%s: %s: op %s, expected %s", what, row->layer, row->op,
                      expected_ops[l]);
                CHECK(row->calls == calls, "%s: %s %s: timed %ld times, expected %d", what, row->layer,
                      dir ? "backward" : "forward", row->calls, calls);
                CHECK(row->ms >= 0.0 && row->share >= 0.0 && row->share <= 1.0, "%s: %s: %g ms, share %g", what,
                      row->layer, row->ms, row->share);
            }
            CHECK(found == 1, "%s: layer %s %s: %d rows, expected 1", what, expected_layers[l],
                  dir ? "backward" : "forward", found);
        }
    /* the forward rows come first, in layer order */
    for (int l = 0; l < NUM_LAYERS && r->num_rows == 2 * NUM_LAYERS; l++)
        CHECK(strcmp(r->rows[l].layer, expected_layers[l]) == 0 && r->rows[l].direction == DP_PROFILE_FORWARD,
              "%s: row %d is %s, expected %s forward", what, l, r->rows[l].layer, expected_layers[l]);
    double shares = r->outside_share, layers = 0.0;
    for (int i = 0; i < r->num_rows; i++) shares += r->rows[i].share, layers += r->rows[i].ms;
    CHECK(fabs(shares - 1.0) < 1e-9, "%s: shares sum to %.12g", what, shares);
    CHECK(fabs(layers - r->layers_ms) < 1e-9 * (1.0 + layers), "%s: rows sum to %g ms, layers_ms %g", what, layers,
          r->layers_ms);
    CHECK(r->step_ms > 0.0 && r->outside_ms >= 0.0 && r->layers_ms > 0.0 && r->layers_ms <= r->step_ms,
          "%s: step %g ms, layers %g ms, outside %g ms", what, r->step_ms, r->layers_ms, r->outside_ms);
}

/* --- a backend with timing marks: the CPU's, marks from the host clock --- */

static struct {
    int pools, reads, marks_in_pool, marks_made, read_count;
} timer_calls;

typedef struct {
    int count;
    double *ms;
} host_timer_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void *host_timer_new(void *ctx, int count) {
    (void)ctx;
    host_timer_t *t = malloc(sizeof *t);
    t->count = count;
    t->ms = calloc((size_t)count, sizeof *t->ms);
    __atomic_add_fetch(&timer_calls.pools, 1, __ATOMIC_RELAXED);
    timer_calls.marks_in_pool = count;
    return t;
}

static void host_timer_mark(void *ctx, void *timer, int i) {
    (void)ctx;
    host_timer_t *t = timer;
    DP_ASSERT(i >= 0 && i < t->count);
    t->ms[i] = now_ms();
    __atomic_add_fetch(&timer_calls.marks_made, 1, __ATOMIC_RELAXED);
}

static dp_status_t host_timer_read(void *ctx, void *timer, int count, double *ms) {
    (void)ctx;
    host_timer_t *t = timer;
    for (int i = 0; i < count; i++) ms[i] = t->ms[i] - t->ms[0];
    __atomic_add_fetch(&timer_calls.reads, 1, __ATOMIC_RELAXED);
    timer_calls.read_count = count;
    return DP_OK;
}

static void host_timer_free(void *ctx, void *timer) {
    (void)ctx;
    host_timer_t *t = timer;
    free(t->ms);
    free(t);
}

int main(void) {
    dp_model_t *m = tiny_model();
    if (!m) return testing_finish("test_profile");
    dp_dataset_t ds = testing_column_dataset(COUNT, 12, 10, 1, 1, 64, 3);
    size_t np = dp_model_num_params(m);
    float *with = malloc(sizeof(float) * np), *without = malloc(sizeof(float) * np);

    /* 10 steps, warm-up 3, window 4 (steps 4 to 7), an evaluation after step 5 */
    run_t run = {.warmup = 3, .window = 4, .devices = 2, .evaluate_at = 5};
    dp_trainer_t *t = NULL;
    if (train(m, &ds, &run, 10, with, &t)) {
        for (int d = 0; d < 2; d++) {
            const dp_profile_report_t *r;
            CHECK(dp_trainer_profile(t, d, &r) == DP_OK, "profile: %s", dp_error_message());
            if (r) check_report(r, 4, 4, d ? "device 1" : "device 0");
            if (r && d == 0) printf("device 0: step %.3f ms, layers %.3f ms, outside %.1f%%\n", r->step_ms,
                                    r->layers_ms, 100.0 * r->outside_share);
        }
        dp_trainer_free(t);
    }
    /* the profile changes no bit */
    run_t off = run;
    off.window = 0;
    if (train(m, &ds, &off, 10, without, NULL))
        CHECK(memcmp(with, without, sizeof(float) * np) == 0, "profiling changed the parameters");

    /* accumulate 2: two forward and backward passes per step */
    run_t acc = {.warmup = 1, .window = 3, .devices = 2, .accumulate = 2, .evaluate_at = -1};
    t = NULL;
    if (train(m, &ds, &acc, 5, NULL, &t)) {
        const dp_profile_report_t *r;
        CHECK(dp_trainer_profile(t, 1, &r) == DP_OK, "profile: %s", dp_error_message());
        if (r) check_report(r, 3, 6, "accumulate 2");
        dp_trainer_free(t);
    }

    /* training ends inside the window, and before it */
    for (int warmup = 8; warmup <= 10; warmup += 2) {
        run_t cut = {.warmup = warmup, .window = 20, .devices = 1, .evaluate_at = -1};
        t = NULL;
        if (train(m, &ds, &cut, 10, NULL, &t)) {
            const dp_profile_report_t *r;
            CHECK(dp_trainer_profile(t, 0, &r) == DP_OK, "profile: %s", dp_error_message());
            if (r) check_report(r, 10 - warmup, 10 - warmup, warmup == 8 ? "window cut short" : "window not reached");
            dp_trainer_free(t);
        }
    }

    /* timing marks: one pool, one read at the window's end */
    dp_backend_t timed = *dp_backend_cpu();
    timed.timer_new = host_timer_new;
    timed.timer_mark = host_timer_mark;
    timed.timer_read = host_timer_read;
    timed.timer_free = host_timer_free;
    run_t marks = {.warmup = 2, .window = 3, .devices = 2, .backend = &timed, .evaluate_at = -1};
    t = NULL;
    if (train(m, &ds, &marks, 5, NULL, &t)) { /* the window's last step is the last step */
        CHECK(timer_calls.pools == 2 && timer_calls.reads == 2, "timing marks: %d pools, %d reads, expected 2 and 2 "
              "(one per device)", timer_calls.pools, timer_calls.reads);
        /* per device: 2 marks per op (8 layers, forward and backward) and 2 per step */
        int per_device = 3 * (2 * 2 * NUM_LAYERS + 2);
        CHECK(timer_calls.marks_in_pool == per_device, "timing marks: a pool of %d, expected %d",
              timer_calls.marks_in_pool, per_device);
        CHECK(timer_calls.marks_made == 2 * per_device && timer_calls.read_count == per_device,
              "timing marks: %d made, %d read, expected %d and %d", timer_calls.marks_made, timer_calls.read_count,
              2 * per_device, per_device);
        const dp_profile_report_t *r;
        CHECK(dp_trainer_profile(t, 0, &r) == DP_OK, "profile: %s", dp_error_message());
        if (r) check_report(r, 3, 3, "timing marks");
        CHECK(timer_calls.reads == 2, "the report read the marks again: %d reads", timer_calls.reads);
        dp_trainer_free(t);
    }
    /* warm-up 0: a default pool, read when the report is asked for (training ended inside the window) */
    memset(&timer_calls, 0, sizeof timer_calls);
    run_t first = {.warmup = 0, .window = 6, .devices = 1, .backend = &timed, .evaluate_at = -1};
    t = NULL;
    if (train(m, &ds, &first, 4, NULL, &t)) {
        CHECK(timer_calls.pools == 1 && timer_calls.reads == 0 && timer_calls.marks_in_pool == 4096,
              "warm-up 0: %d pools of %d, %d reads before the report", timer_calls.pools, timer_calls.marks_in_pool,
              timer_calls.reads);
        const dp_profile_report_t *r;
        CHECK(dp_trainer_profile(t, 0, &r) == DP_OK, "profile: %s", dp_error_message());
        if (r) check_report(r, 4, 4, "warm-up 0");
        CHECK(timer_calls.reads == 1, "warm-up 0: %d reads", timer_calls.reads);
        dp_trainer_free(t);
    }

    /* refusals */
    dp_profiler_t *p = NULL;
    CHECK(dp_profiler_new(NULL, 0, 0, &p) == DP_ERR_ARG && !p, "a window of 0 was accepted");
    CHECK(strstr(dp_error_message(), "timed steps") != NULL, "message: %s", dp_error_message());
    run_t none = {.devices = 1, .evaluate_at = -1};
    t = NULL;
    if (train(m, &ds, &none, 1, NULL, &t)) {
        const dp_profile_report_t *r = (const dp_profile_report_t *)1;
        CHECK(dp_trainer_profile(t, 0, &r) == DP_ERR_ARG && !r, "a trainer without profiling gave a profile");
        dp_trainer_free(t);
    }
    free(with);
    free(without);
    dp_dataset_free(&ds);
    dp_model_free(m);
    return testing_finish("test_profile");
}
