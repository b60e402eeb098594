/* test_clip.c - gradient clipping by the total norm (optim.h dp_clip_*,
 * parallel.h config.clip_grad_norm):
 * - the arithmetic against torch.nn.utils.clip_grad_norm_ followed by SGD
 *   with momentum (tools/make_optim_fixtures.py's clip-* cases): the norm,
 *   the clipped gradients and the parameters after each step;
 * - the coefficient's edges (NaN, infinite and zero norms) and the sum of
 *   squares' fixed order;
 * - in the trainer, bit for bit: the gradient the first step's update
 *   applied (dp_trainer_read_grads) is the unclipped run's sum times the
 *   coefficient of its norm, the parameters are one optimizer step with it
 *   from the initial ones, and dp_trainer_last_grad_norm is that norm
 *   (dp_trainer_grad_norms counts it, clipped or not, and resets); on 1
 *   device and on 3 with every strategy (chunked, naive, overlap, the parameter server, devices
 *   on several backend tables), with gradient accumulation too; a bound
 *   the norm never reaches changes no bit; bad bounds are refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "fixture.h"
#include "testing.h"

/* torch's norm is the float32 norm of per-tensor float32 norms, dptrain's
 * the double sum of every square rounded once: they may differ by an ulp
 * or two, and so may the coefficient and what it scales */
#define NORM_RTOL 4e-7
#define RTOL 1e-6
#define ATOL 1e-7

static void replay_fixture(const char *name) {
    fixture_t f;
    if (!fixture_load("optim", name, &f)) return;
    const fixture_tensor_t *config = fixture_get(&f, "config"), *p0 = fixture_get(&f, "params0"),
                           *grads = fixture_get(&f, "grads"), *norms = fixture_get(&f, "total_norm"),
                           *clipped = fixture_get(&f, "clipped"), *expected = fixture_get(&f, "params");
    DP_ASSERT(config && config->numel == 8 && p0 && grads && norms && clipped && expected);
    const float *c = config->data;
    const float max_norm = c[7];
    dp_optim_config_t oc = {.kind = DP_OPTIM_MOMENTUM, .lr = c[0], .momentum = c[2]};
    size_t n = p0->numel, steps = norms->numel;
    dp_optimizer_t *opt;
    DP_ASSERT(dp_optimizer_new(&oc, n, &opt) == DP_OK);
    float *params = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    memcpy(params, p0->data, n * sizeof(float));
    int clipped_steps = 0;
    for (size_t s = 0; s < steps; s++) {
        memcpy(g, (const float *)grads->data + s * n, n * sizeof(float));
        const float norm = dp_clip_total_norm(dp_sum_squares(g, n)), want_norm = ((const float *)norms->data)[s];
        CHECK(fabs((double)norm - want_norm) <= NORM_RTOL * want_norm, "%s step %zu: norm %.9g, torch %.9g", name,
              s + 1, norm, want_norm);
        const float coef = dp_clip_coefficient(norm, max_norm);
        clipped_steps += coef < 1.0f;
        CHECK(coef == dp_clip_coefficient(want_norm, max_norm) || fabs(coef - dp_clip_coefficient(want_norm, max_norm)) <= 2e-7 * coef,
              "%s step %zu: coefficient %.9g from torch's norm %.9g", name, s + 1, coef,
              dp_clip_coefficient(want_norm, max_norm));
        if (coef != 1.0f)
            for (size_t i = 0; i < n; i++) g[i] *= coef;
        size_t at;
        const float *want_g = (const float *)clipped->data + s * n;
        double v = testing_max_violation(g, want_g, n, RTOL, 1e-9, &at);
        CHECK(v <= 1.0, "%s step %zu: clipped[%zu] %.9g, torch %.9g", name, s + 1, at, g[at], want_g[at]);
        /* torch's own clipped gradients through dptrain's optimizer: its step alone */
        dp_optimizer_step(opt, params, g);
        const float *want_p = (const float *)expected->data + s * n;
        v = testing_max_violation(params, want_p, n, RTOL, ATOL, &at);
        CHECK(v <= 1.0, "%s step %zu: params[%zu] %.9g, torch %.9g", name, s + 1, at, params[at], want_p[at]);
    }
    if (strcmp(name, "clip-never") == 0) CHECK(clipped_steps == 0, "%s: %d steps clipped", name, clipped_steps);
    else CHECK(clipped_steps >= 3, "%s: only %d of %zu steps clipped", name, clipped_steps, steps);
    printf("%s: %d of %zu steps clipped, norms and parameters within tolerance of torch's\n", name, clipped_steps,
           steps);
    free(params);
    free(g);
    dp_optimizer_free(opt);
    fixture_free(&f);
}

static void test_coefficient_edges(void) {
    CHECK(isnan(dp_clip_coefficient(NAN, 1.0f)), "a NaN norm: NaN, as torch.clamp keeps it");
    CHECK(dp_clip_coefficient(INFINITY, 1.0f) == 0.0f, "an infinite norm: 0");
    CHECK(dp_clip_coefficient(0.0f, 1.0f) == 1.0f, "a zero norm: 1");
    CHECK(dp_clip_coefficient(2.0f, 2.0f) < 1.0f, "the norm at the bound: just below 1 (the 1e-6)");
    CHECK(dp_clip_coefficient(4.0f, 1.0f) == (1.0f / (4.0f + 1e-6f)) * 1.0f, "the reciprocal, times max_norm");
    CHECK(dp_clip_total_norm(1e300) == INFINITY, "a sum beyond float: an infinite norm");
    /* squares of small integers are exact: any order gives 1^2 + ... + 20^2 = 2870 */
    float x[20];
    for (int i = 0; i < 20; i++) x[i] = (float)(i + 1);
    CHECK(dp_sum_squares(x, 20) == 2870.0, "sum of squares %.17g", dp_sum_squares(x, 20));
    CHECK(dp_sum_squares(x, 0) == 0.0, "no floats: 0");
    /* the fixed order: lane i mod 8, added pairwise; 1e16 + 1 - 1e16 shows it */
    float y[9] = {1e8f, 1.0f, 0, 0, 0, 0, 0, 0, -1e8f};
    const double s = dp_sum_squares(y, 9); /* lane 0: 1e16 + 1e16 = 2e16, lane 1: 1: 2e16 + 1 rounds to 2e16 */
    CHECK(s == 2e16, "sum of squares %.17g, expected the lanes' order (2e16)", s);
}

typedef struct {
    const char *name;
    int devices, overlap, accumulate, split;
    dp_allreduce_kind_t allreduce;
    dp_sync_kind_t sync;
} setup_t;

static dp_trainer_t *new_trainer(const dp_model_t *m, const setup_t *s, const dp_optim_config_t *optim, float clip) {
    const dp_backend_t *split[3] = {dp_backend_cpu_split(0), dp_backend_cpu_split(1), dp_backend_cpu_split(2)};
    dp_trainer_config_t config = {.model = m, .num_devices = s->devices, .threads_per_device = 1,
                                  .allreduce = s->allreduce, .overlap = s->overlap, .sync = s->sync,
                                  .optim = *optim, .seed = 9, .accumulate = s->accumulate, .clip_grad_norm = clip,
                                  .backends = s->split ? split : NULL};
    dp_trainer_t *t;
    DP_ASSERT(dp_trainer_new(&config, &t) == DP_OK);
    return t;
}

static void step(dp_trainer_t *t, const dp_dataset_t *ds, int s) {
    int indices[48];
    for (int i = 0; i < 48; i++) indices[i] = (s * 48 + i * 5) % ds->count;
    DP_ASSERT(testing_step(t, ds, indices, 48, NULL, NULL) == DP_OK);
}

/* One setup: a run without clipping gives the first step's sum g; the
 * clipped run from the same initial parameters must apply exactly
 * fl(g * coef) and land where one optimizer step with it lands, on every
 * device. */
static void check_setup(const dp_model_t *m, const dp_dataset_t *ds, const setup_t *s, const dp_optim_config_t *optim) {
    const size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *g = malloc(nt * sizeof(float)), *applied = malloc(nt * sizeof(float)), *p = malloc(np * sizeof(float));
    dp_trainer_t *plain = new_trainer(m, s, optim, 0.0f);
    step(plain, ds, 0);
    dp_trainer_read_grads(plain, g);
    CHECK(isnan(dp_trainer_last_grad_norm(plain)), "%s: a norm without clipping", s->name);
    const float norm = dp_clip_total_norm(dp_sum_squares(g, nt));
    /* the bound: half the step's norm (clipped), and one it never reaches */
    const float bounds[2] = {norm / 2, 1e20f};
    for (int b = 0; b < 2; b++) {
        dp_trainer_t *clipped = new_trainer(m, s, optim, bounds[b]);
        memcpy(p, dp_trainer_params(clipped, 0), np * sizeof(float)); /* the initial parameters (seeded) */
        step(clipped, ds, 0);
        CHECK(dp_trainer_last_grad_norm(clipped) == norm, "%s, bound %g: last norm %.9g, the sum's %.9g", s->name,
              (double)bounds[b], dp_trainer_last_grad_norm(clipped), norm);
        dp_grad_norm_stats_t st, after;
        dp_trainer_grad_norms(clipped, &st, 1);
        dp_trainer_grad_norms(clipped, &after, 0);
        CHECK(st.steps == 1 && st.clipped == (b == 0) && st.norm_sum == norm && st.norm_max == norm &&
                  after.steps == 0 && after.clipped == 0 && after.norm_sum == 0.0,
              "%s, bound %g: stats %d steps, %d clipped, sum %g, max %g; after a reset %d", s->name, (double)bounds[b],
              st.steps, st.clipped, st.norm_sum, (double)st.norm_max, after.steps);
        if (b == 1) { /* never clipped: the plain run's bits */
            CHECK(memcmp(dp_trainer_params(clipped, 0), dp_trainer_params(plain, 0), np * sizeof(float)) == 0,
                  "%s: a bound never reached changed the parameters", s->name);
            dp_trainer_free(clipped);
            continue;
        }
        const float coef = dp_clip_coefficient(norm, bounds[b]);
        CHECK(coef < 0.51f && coef > 0.49f, "%s: coefficient %g", s->name, coef);
        dp_trainer_read_grads(clipped, applied);
        size_t differ = 0;
        for (size_t i = 0; i < nt; i++) differ += applied[i] != g[i] * coef;
        CHECK(differ == 0, "%s: %zu of %zu applied gradients are not the sum times %.9g", s->name, differ, nt, coef);
        dp_optimizer_t *ref;
        DP_ASSERT(dp_optimizer_new(optim, nt, &ref) == DP_OK);
        dp_optimizer_begin_step(ref);
        dp_optimizer_step_range(ref, p, applied, 0, nt);
        dp_optimizer_free(ref);
        for (int d = 0; d < s->devices; d++)
            CHECK(memcmp(dp_trainer_params(clipped, d), p, np * sizeof(float)) == 0,
                  "%s: device %d's parameters are not one optimizer step with the clipped gradient", s->name, d);
        CHECK(dp_trainer_check_replicas(clipped) == DP_OK, "%s: %s", s->name, dp_error_message());
        dp_trainer_free(clipped);
    }
    printf("%s: norm %.6g, clipped at %.6g: the update applied the sum times the coefficient, bit for bit\n",
           s->name, norm, norm / 2);
    dp_trainer_free(plain);
    free(g);
    free(applied);
    free(p);
}

static void test_in_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet-paddle", &m) == DP_OK);
    dp_dataset_t ds = testing_random_images(200, 41);
    const dp_optim_config_t optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f};
    const setup_t setups[] = {
        {"1 device", 1, 0, 1, 0, DP_ALLREDUCE_CHUNKED, DP_SYNC_ALLREDUCE},
        {"3 devices, chunked", 3, 0, 1, 0, DP_ALLREDUCE_CHUNKED, DP_SYNC_ALLREDUCE},
        {"3 devices, naive", 3, 0, 1, 0, DP_ALLREDUCE_NAIVE, DP_SYNC_ALLREDUCE},
        {"3 devices, overlap", 3, 1, 1, 0, DP_ALLREDUCE_CHUNKED, DP_SYNC_ALLREDUCE},
        {"3 devices, overlap, accumulate 2", 3, 1, 2, 0, DP_ALLREDUCE_CHUNKED, DP_SYNC_ALLREDUCE},
        {"3 devices, parameter server", 3, 0, 1, 0, DP_ALLREDUCE_CHUNKED, DP_SYNC_PS},
        {"3 devices on 3 backend tables", 3, 0, 1, 1, DP_ALLREDUCE_CHUNKED, DP_SYNC_ALLREDUCE},
    };
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) check_setup(m, &ds, &setups[i], &optim);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

static void test_bad_bounds(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet-paddle", &m) == DP_OK);
    const float bad[] = {-1.0f, NAN, INFINITY, 2e30f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dp_trainer_config_t config = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                      .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .clip_grad_norm = bad[i]};
        dp_trainer_t *t = NULL;
        CHECK(dp_trainer_new(&config, &t) == DP_ERR_ARG && !t, "clip_grad_norm %g taken", (double)bad[i]);
        CHECK(strstr(dp_error_message(), "clip_grad_norm") != NULL, "message: %s", dp_error_message());
    }
    dp_model_free(m);
}

int main(void) {
    replay_fixture("clip-mixed");
    replay_fixture("clip-always");
    replay_fixture("clip-never");
    test_coefficient_edges();
    test_in_trainer();
    test_bad_bounds();
    return testing_finish("test_clip");
}
