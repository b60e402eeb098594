/* test_optim.c - the optimizers and learning-rate schedules against
 * PyTorch-written trajectories (tools/make_optim_fixtures.py), the state API
 * for checkpoints, bad configurations, and the optimizers inside the
 * data-parallel trainer (1 device against several, overlap, parameter
 * server). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "dptrain/schedule.h"
#include "fixture.h"
#include "testing.h"

/* float32 tolerance for a parameter or state value after up to 6 steps:
 * PyTorch fuses some a + alpha * b into one FMA where dptrain rounds twice,
 * so the two may differ by a few ulps; 1e-6 relative is ~8 ulps. The
 * absolute parts cover values that cancel to near 0: parameters are ~1
 * (ulp 1.2e-7), state terms ~0.1 (ulp 7.5e-9). */
#define RTOL 1e-6
#define ATOL 1e-7
#define STATE_ATOL 1e-8

static const char *const optim_cases[] = {
    "optim-sgd", "optim-sgd-wd", "optim-sgd-lr2", "optim-momentum", "optim-momentum-wd",
    "optim-nesterov", "optim-nesterov-wd", "optim-adagrad", "optim-adagrad-wd", "optim-adagrad-eps",
    "optim-adam", "optim-adam-wd", "optim-adam-betas", "optim-adam-defaults",
    "optim-adamw", "optim-adamw-wd", "optim-adamw-betas", "optim-adamw-wd0",
};
#define NUM_OPTIM_CASES (sizeof optim_cases / sizeof optim_cases[0])

static dp_optim_config_t config_from_fixture(const fixture_t *f) {
    const fixture_tensor_t *c = fixture_get(f, "config");
    DP_ASSERT(c && c->numel == 7);
    const float *v = c->data;
    int kind = dp_optim_kind_from_name(f->op);
    DP_ASSERT(kind >= 0);
    return (dp_optim_config_t){.kind = (dp_optim_kind_t)kind, .lr = v[0], .weight_decay = v[1],
                               .momentum = v[2], .nesterov = v[3] != 0.0f, .beta1 = v[4], .beta2 = v[5],
                               .eps = v[6]};
}

/* One step in chunks of `chunk` elements, last chunk first (as devices
 * finish in any order). */
static void step_in_chunks(dp_optimizer_t *opt, float *params, const float *grads, size_t n, size_t chunk) {
    dp_optimizer_begin_step(opt);
    size_t chunks = (n + chunk - 1) / chunk;
    for (size_t c = chunks; c-- > 0;) {
        size_t start = c * chunk;
        dp_optimizer_step_range(opt, params, grads, start, start + chunk <= n ? chunk : n - start);
    }
}

/* Replays the fixture's gradients whole and in chunks; after every step
 * both must match torch's parameters and state buffers, and each other to
 * the bit. Returns the worst violation seen (<= 1: within tolerance). */
static double replay_case(const char *name, double *worst_diff) {
    fixture_t f;
    *worst_diff = INFINITY;
    if (!fixture_load("optim", name, &f)) return INFINITY;
    dp_optim_config_t config = config_from_fixture(&f);
    const fixture_tensor_t *p0 = fixture_get(&f, "params0"), *grads = fixture_get(&f, "grads"),
                           *expected = fixture_get(&f, "params");
    DP_ASSERT(p0 && grads && expected && grads->shape.ndim == 2);
    size_t n = p0->numel, steps = (size_t)grads->shape.shape[0];
    dp_optimizer_t *whole, *chunked;
    CHECK(dp_optimizer_new(&config, n, &whole) == DP_OK, "%s: %s", name, dp_error_message());
    CHECK(dp_optimizer_new(&config, n, &chunked) == DP_OK, "%s: %s", name, dp_error_message());
    float *pw = malloc(n * sizeof(float)), *pc = malloc(n * sizeof(float));
    memcpy(pw, p0->data, n * sizeof(float));
    memcpy(pc, p0->data, n * sizeof(float));
    double worst = 0.0;
    *worst_diff = 0.0;
    int same_bits = 1, states_named = 1;
    for (size_t s = 0; s < steps; s++) {
        const float *g = (const float *)grads->data + s * n;
        dp_optimizer_step(whole, pw, g);
        step_in_chunks(chunked, pc, g, n, 5);
        same_bits &= memcmp(pw, pc, n * sizeof(float)) == 0;
        size_t at;
        const float *want = (const float *)expected->data + s * n;
        double v = testing_max_violation(pw, want, n, RTOL, ATOL, &at);
        if (v > worst) worst = v;
        for (size_t i = 0; i < n; i++) *worst_diff = fmax(*worst_diff, fabs((double)pw[i] - want[i]));
        CHECK(v <= 1.0, "%s step %zu: params[%zu] %.9g, torch %.9g", name, s + 1, at, pw[at], want[at]);
        for (int k = 0; k < dp_optimizer_num_states(whole); k++) {
            const char *state_name, *chunked_name;
            float *state = dp_optimizer_state(whole, k, &state_name);
            float *state_chunked = dp_optimizer_state(chunked, k, &chunked_name);
            const fixture_tensor_t *ref = fixture_get(&f, state_name);
            states_named &= ref != NULL;
            if (!ref) continue;
            same_bits &= memcmp(state, state_chunked, n * sizeof(float)) == 0;
            const float *ref_s = (const float *)ref->data + s * n;
            /* a state is a sum whose terms may cancel (m = b1 m + (1 - b1) g): without FMA its
             * rounding is the terms', up to ~50 ulps of a small result, so the absolute part is
             * RTOL of the tensor's largest value (with FMA the bits are torch's anyway) */
            double largest = 0.0;
            for (size_t i = 0; i < n; i++) largest = fmax(largest, fabs((double)ref_s[i]));
            v = testing_max_violation(state, ref_s, n, RTOL, fmax(STATE_ATOL, RTOL * largest), &at);
            if (v > worst) worst = v;
            CHECK(v <= 1.0, "%s step %zu: %s[%zu] %.9g, torch %.9g", name, s + 1, state_name, at, state[at],
                  ref_s[at]);
        }
    }
    CHECK(states_named, "%s: a state buffer's name is not in the fixture", name);
    CHECK(same_bits, "%s: the update in chunks differs from the whole update", name);
    CHECK(dp_optimizer_steps(whole) == steps && dp_optimizer_steps(chunked) == steps, "%s: steps %llu", name,
          (unsigned long long)dp_optimizer_steps(whole));
    free(pw);
    free(pc);
    dp_optimizer_free(whole);
    dp_optimizer_free(chunked);
    fixture_free(&f);
    return worst;
}

static void test_against_pytorch(void) {
    for (size_t c = 0; c < NUM_OPTIM_CASES; c++) {
        double diff;
        double v = replay_case(optim_cases[c], &diff);
        printf("%-22s worst |param - torch| %.3g, worst violation %.3f of tolerance\n", optim_cases[c], diff, v);
    }
}

/* Optimizer state saved after `split` steps and loaded into a fresh
 * optimizer (buffers + set_steps) continues bit for bit. */
static void test_state_round_trip(const char *name, int split) {
    fixture_t f;
    if (!fixture_load("optim", name, &f)) return;
    dp_optim_config_t config = config_from_fixture(&f);
    const fixture_tensor_t *p0 = fixture_get(&f, "params0"), *grads = fixture_get(&f, "grads");
    size_t n = p0->numel, steps = (size_t)grads->shape.shape[0];
    dp_optimizer_t *a, *b;
    DP_ASSERT(dp_optimizer_new(&config, n, &a) == DP_OK && dp_optimizer_new(&config, n, &b) == DP_OK);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    memcpy(pa, p0->data, n * sizeof(float));
    for (int s = 0; s < split; s++) dp_optimizer_step(a, pa, (const float *)grads->data + (size_t)s * n);
    memcpy(pb, pa, n * sizeof(float));
    for (int k = 0; k < dp_optimizer_num_states(a); k++) {
        const char *na, *nb;
        float *sa = dp_optimizer_state(a, k, &na), *sb = dp_optimizer_state(b, k, &nb);
        CHECK(strcmp(na, nb) == 0, "%s: state %d named %s and %s", name, k, na, nb);
        memcpy(sb, sa, n * sizeof(float));
    }
    dp_optimizer_set_steps(b, dp_optimizer_steps(a));
    CHECK(dp_optimizer_steps(b) == (uint64_t)split, "%s: set_steps gave %llu", name,
          (unsigned long long)dp_optimizer_steps(b));
    for (size_t s = (size_t)split; s < steps; s++) {
        dp_optimizer_step(a, pa, (const float *)grads->data + s * n);
        dp_optimizer_step(b, pb, (const float *)grads->data + s * n);
    }
    CHECK(memcmp(pa, pb, n * sizeof(float)) == 0, "%s: restored after %d steps, the run differs", name, split);
    free(pa);
    free(pb);
    dp_optimizer_free(a);
    dp_optimizer_free(b);
    fixture_free(&f);
}

static void test_state_api(void) {
    static const struct {
        dp_optim_kind_t kind;
        const char *name;
        int num_states;
        const char *states[2];
    } kinds[] = {
        {DP_OPTIM_SGD, "sgd", 0, {NULL, NULL}},
        {DP_OPTIM_MOMENTUM, "momentum", 1, {"momentum_buffer", NULL}},
        {DP_OPTIM_ADAGRAD, "adagrad", 1, {"sum", NULL}},
        {DP_OPTIM_ADAM, "adam", 2, {"exp_avg", "exp_avg_sq"}},
        {DP_OPTIM_ADAMW, "adamw", 2, {"exp_avg", "exp_avg_sq"}},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        CHECK(dp_optim_kind_from_name(kinds[k].name) == (int)kinds[k].kind, "kind of %s", kinds[k].name);
        CHECK(strcmp(dp_optim_kind_name(kinds[k].kind), kinds[k].name) == 0, "name of %s", kinds[k].name);
        dp_optimizer_t *opt;
        dp_optim_config_t config = {.kind = kinds[k].kind, .lr = 0.5f};
        DP_ASSERT(dp_optimizer_new(&config, 10, &opt) == DP_OK);
        CHECK(dp_optimizer_num_states(opt) == kinds[k].num_states, "%s: %d states", kinds[k].name,
              dp_optimizer_num_states(opt));
        for (int i = 0; i < kinds[k].num_states; i++) {
            const char *name = NULL;
            float *state = dp_optimizer_state(opt, i, &name);
            int zero = 1;
            for (int j = 0; state && j < 10; j++) zero &= state[j] == 0.0f;
            CHECK(state && name && strcmp(name, kinds[k].states[i]) == 0 && zero, "%s state %d: %s",
                  kinds[k].name, i, name ? name : "(null)");
        }
        const char *name = "x";
        CHECK(dp_optimizer_state(opt, kinds[k].num_states, &name) == NULL && name == NULL,
              "%s: state past the end", kinds[k].name);
        CHECK(dp_optimizer_steps(opt) == 0, "%s: a new optimizer has taken steps", kinds[k].name);
        dp_optimizer_set_lr(opt, 0.25f);
        CHECK(dp_optimizer_lr(opt) == 0.25f, "%s: set_lr", kinds[k].name);
        dp_optimizer_free(opt);
    }
    CHECK(dp_optim_kind_from_name("rmsprop") == -1 && dp_optim_kind_from_name("") == -1, "unknown kind accepted");
    test_state_round_trip("optim-momentum", 1);
    test_state_round_trip("optim-nesterov-wd", 3);
    test_state_round_trip("optim-adagrad-wd", 2);
    test_state_round_trip("optim-adam-wd", 1);
    test_state_round_trip("optim-adam-betas", 4);
    test_state_round_trip("optim-adamw", 2);
    test_state_round_trip("optim-adamw-wd", 1);
    test_state_round_trip("optim-adamw-betas", 5);
}

/* AdamW's decay is decoupled: with a zero gradient the moments stay 0 and
 * the step is p * (1 - lr * wd) alone (Adam's L2 term would move p by about
 * lr instead); its weight decay 0 is no decay (not torch's default 0.01),
 * the same update as Adam's without weight decay, bit for bit; defaults
 * as Adam's. */
static void test_adamw_by_hand(void) {
    float p[3] = {1.0f, -2.0f, 0.5f}, zero[3] = {0.0f, 0.0f, 0.0f};
    dp_optimizer_t *opt;
    dp_optim_config_t config = {.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .weight_decay = 0.5f};
    CHECK(dp_optimizer_new(&config, 3, &opt) == DP_OK, "%s", dp_error_message());
    const dp_optim_config_t *held = dp_optimizer_config(opt);
    CHECK(held->beta1 == 0.9f && held->beta2 == 0.999f && held->eps == 1e-8f && held->weight_decay == 0.5f,
          "adamw's defaults: beta1 %g beta2 %g eps %g weight decay %g", held->beta1, held->beta2, held->eps,
          held->weight_decay);
    dp_optimizer_step(opt, p, zero);
    const float decay = (float)(1.0 - 0.1 * 0.5);
    CHECK(p[0] == 1.0f * decay && p[1] == -2.0f * decay && p[2] == 0.5f * decay, "adamw, zero gradient: %.9g %.9g %.9g",
          p[0], p[1], p[2]);
    dp_optimizer_free(opt);

    fixture_t f;
    if (!fixture_load("optim", "optim-adamw-wd0", &f)) return;
    dp_optim_config_t w = config_from_fixture(&f), a = w;
    a.kind = DP_OPTIM_ADAM;
    CHECK(w.kind == DP_OPTIM_ADAMW && w.weight_decay == 0.0f, "optim-adamw-wd0: kind %d, weight decay %g", (int)w.kind,
          w.weight_decay);
    const fixture_tensor_t *p0 = fixture_get(&f, "params0"), *grads = fixture_get(&f, "grads");
    size_t n = p0->numel, steps = (size_t)grads->shape.shape[0];
    dp_optimizer_t *ow, *oa;
    DP_ASSERT(dp_optimizer_new(&w, n, &ow) == DP_OK && dp_optimizer_new(&a, n, &oa) == DP_OK);
    float *pw = malloc(n * sizeof(float)), *pa = malloc(n * sizeof(float));
    memcpy(pw, p0->data, n * sizeof(float));
    memcpy(pa, p0->data, n * sizeof(float));
    for (size_t s = 0; s < steps; s++) {
        dp_optimizer_step(ow, pw, (const float *)grads->data + s * n);
        dp_optimizer_step(oa, pa, (const float *)grads->data + s * n);
    }
    CHECK(memcmp(pw, pa, n * sizeof(float)) == 0, "adamw with weight decay 0 differs from adam without");
    free(pw);
    free(pa);
    dp_optimizer_free(ow);
    dp_optimizer_free(oa);
    fixture_free(&f);
}

/* Weight-decay groups: an optimizer whose floats are in three groups
 * (torch's param_groups with their own weight decay) gives each float what
 * an optimizer of that group's decay alone gives it, bit for bit, whatever
 * the chunks step_range is called on (they cross the groups' borders). */
static void test_decay_groups(void) {
    enum { N = 40, STEPS = 3 };
    const dp_decay_range_t ranges[] = {{5, 5, DP_DECAY_NORM}, {10, 2, DP_DECAY_BIAS}, {12, 0, DP_DECAY_BIAS},
                                       {20, 10, DP_DECAY_NORM}, {35, 5, DP_DECAY_BIAS}};
    const int nr = (int)(sizeof ranges / sizeof ranges[0]);
    const dp_optim_kind_t kinds[] = {DP_OPTIM_SGD, DP_OPTIM_MOMENTUM, DP_OPTIM_ADAGRAD, DP_OPTIM_ADAM, DP_OPTIM_ADAMW};
    float p0[N], grads[STEPS][N];
    dp_rng_t rng;
    dp_rng_seed(&rng, 11);
    for (int i = 0; i < N; i++) p0[i] = dp_rng_normal(&rng);
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < N; i++) grads[s][i] = dp_rng_normal(&rng);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const char *kind = dp_optim_kind_name(kinds[k]);
        dp_optim_config_t c = {.kind = kinds[k], .lr = 0.05f, .weight_decay = 0.3f, .has_norm_weight_decay = 1,
                               .norm_weight_decay = 0.0f, .has_bias_weight_decay = 1, .bias_weight_decay = 0.7f};
        dp_optimizer_t *grouped, *alone[DP_DECAY_GROUPS];
        DP_ASSERT(dp_optimizer_new(&c, N, &grouped) == DP_OK);
        CHECK(dp_optimizer_set_decay_ranges(grouped, ranges, nr) == DP_OK, "%s: %s", kind, dp_error_message());
        float p[N], q[DP_DECAY_GROUPS][N];
        memcpy(p, p0, sizeof p);
        for (int g = 0; g < DP_DECAY_GROUPS; g++) {
            dp_optim_config_t one = {.kind = kinds[k], .lr = c.lr,
                                     .weight_decay = dp_optim_group_weight_decay(&c, (dp_decay_group_t)g)};
            DP_ASSERT(dp_optimizer_new(&one, N, &alone[g]) == DP_OK);
            memcpy(q[g], p0, sizeof p);
        }
        for (int s = 0; s < STEPS; s++) {
            dp_optimizer_begin_step(grouped);
            for (size_t at = 0; at < N; at += 7) dp_optimizer_step_range(grouped, p, grads[s], at, at + 7 <= N ? 7 : N - at);
            for (int g = 0; g < DP_DECAY_GROUPS; g++) dp_optimizer_step(alone[g], q[g], grads[s]);
        }
        for (int i = 0; i < N; i++) {
            dp_decay_group_t g = DP_DECAY_REST;
            for (int r = 0; r < nr; r++)
                if ((size_t)i >= ranges[r].start && (size_t)i < ranges[r].start + ranges[r].count) g = ranges[r].group;
            CHECK(memcmp(&p[i], &q[g][i], sizeof(float)) == 0, "%s: float %d (group %d): %.9g, alone %.9g", kind, i,
                  (int)g, p[i], q[g][i]);
        }
        CHECK(memcmp(q[DP_DECAY_NORM], q[DP_DECAY_BIAS], sizeof p) != 0, "%s: the groups' decays change nothing", kind);
        dp_optimizer_free(grouped);
        for (int g = 0; g < DP_DECAY_GROUPS; g++) dp_optimizer_free(alone[g]);
    }

    /* the runs: kept ranges only (the empty one dropped, adjacent ones of a group merged) */
    dp_optim_config_t c = {.kind = DP_OPTIM_SGD, .lr = 0.1f, .weight_decay = 0.3f, .has_norm_weight_decay = 1};
    dp_optimizer_t *opt;
    DP_ASSERT(dp_optimizer_new(&c, N, &opt) == DP_OK);
    const dp_decay_range_t adjacent[] = {{2, 3, DP_DECAY_NORM}, {5, 4, DP_DECAY_NORM}, {9, 2, DP_DECAY_BIAS}};
    DP_ASSERT(dp_optimizer_set_decay_ranges(opt, adjacent, 3) == DP_OK);
    const dp_decay_range_t *kept;
    CHECK(dp_optimizer_decay_ranges(opt, &kept) == 1 && kept[0].start == 2 && kept[0].count == 7,
          "kept ranges: the bias one (its decay is the rest's) dropped, the norm ones merged");
    dp_decay_group_t g;
    size_t run = dp_optimizer_decay_run(opt, 0, N, &g);
    CHECK(run == 2 && g == DP_DECAY_REST, "run from 0: %zu of group %d", run, (int)g);
    run = dp_optimizer_decay_run(opt, 3, N - 3, &g);
    CHECK(run == 6 && g == DP_DECAY_NORM, "run from 3: %zu of group %d", run, (int)g);
    run = dp_optimizer_decay_run(opt, 4, 2, &g);
    CHECK(run == 2 && g == DP_DECAY_NORM, "run from 4 of 2: %zu of group %d", run, (int)g);
    run = dp_optimizer_decay_run(opt, 9, N - 9, &g);
    CHECK(run == N - 9 && g == DP_DECAY_REST, "run from 9: %zu of group %d", run, (int)g);
    const dp_decay_range_t overlapping[] = {{2, 3, DP_DECAY_NORM}, {4, 4, DP_DECAY_BIAS}};
    const dp_decay_range_t outside[] = {{38, 3, DP_DECAY_NORM}};
    CHECK(dp_optimizer_set_decay_ranges(opt, overlapping, 2) == DP_ERR_ARG &&
              strstr(dp_error_message(), "decay range 1 [4, +4) of group 2"),
          "overlapping ranges: %s", dp_error_message());
    CHECK(dp_optimizer_set_decay_ranges(opt, outside, 1) == DP_ERR_ARG && strstr(dp_error_message(), "outside the 40"),
          "a range past the end: %s", dp_error_message());
    CHECK(dp_optimizer_decay_ranges(opt, &kept) == 1, "a refused set keeps the ranges");
    dp_optimizer_free(opt);
    /* without the flags every group decays as the rest: nothing kept */
    dp_optim_config_t plain = {.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .weight_decay = 0.3f};
    DP_ASSERT(dp_optimizer_new(&plain, N, &opt) == DP_OK);
    DP_ASSERT(dp_optimizer_set_decay_ranges(opt, ranges, nr) == DP_OK);
    CHECK(dp_optimizer_decay_ranges(opt, &kept) == 0, "no flags: ranges kept");
    dp_optimizer_free(opt);
}

/* Plain SGD by hand: p -= lr * (g + wd * p). */
static void test_sgd_by_hand(void) {
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, 0.25f, -1.0f};
    dp_optimizer_t *opt;
    dp_optim_config_t config = {.kind = DP_OPTIM_SGD, .lr = 0.1f};
    CHECK(dp_optimizer_new(&config, 3, &opt) == DP_OK, "%s", dp_error_message());
    dp_optimizer_step(opt, p, g);
    CHECK(p[0] == 1.0f - 0.1f * 0.5f && p[1] == -2.0f - 0.1f * 0.25f && p[2] == 0.5f + 0.1f,
          "sgd gave %g %g %g", p[0], p[1], p[2]);
    dp_optimizer_free(opt);
    config.weight_decay = 0.5f;
    float q = 2.0f, gq = 1.0f;
    DP_ASSERT(dp_optimizer_new(&config, 1, &opt) == DP_OK);
    dp_optimizer_step(opt, &q, &gq);
    CHECK(fabsf(q - (2.0f - 0.1f * (1.0f + 0.5f * 2.0f))) < 1e-7f, "weight decay gave %g", q);
    dp_optimizer_free(opt);
}

static void test_bad_configs(void) {
    static const struct {
        dp_optim_config_t config;
        const char *message;
    } cases[] = {
        {{.kind = DP_OPTIM_SGD, .lr = 0.0f}, "learning rate must be a positive number, found 0"},
        {{.kind = DP_OPTIM_SGD, .lr = -1.0f}, "learning rate must be a positive number, found -1"},
        {{.kind = DP_OPTIM_ADAM, .lr = INFINITY}, "learning rate must be a positive number, found inf"},
        {{.kind = DP_OPTIM_ADAM, .lr = NAN}, "learning rate must be a positive number"},
        {{.kind = DP_OPTIM_SGD, .lr = 0.1f, .weight_decay = -1.0f}, "weight decay must be >= 0, found -1"},
        {{.kind = DP_OPTIM_MOMENTUM, .lr = 0.1f, .momentum = 1.0f}, "momentum must be in [0, 1), found 1"},
        {{.kind = DP_OPTIM_MOMENTUM, .lr = 0.1f, .momentum = -0.5f}, "momentum must be in [0, 1), found -0.5"},
        {{.kind = DP_OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f}, "momentum 0.9 applies to the momentum optimizer"},
        {{.kind = DP_OPTIM_SGD, .lr = 0.1f, .nesterov = 1}, "nesterov needs momentum > 0"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .nesterov = 1}, "nesterov needs momentum > 0"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .beta1 = 1.0f}, "beta1 must be in [0, 1), found 1"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .beta2 = 1.5f}, "beta2 must be in [0, 1), found 1.5"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .beta2 = -0.1f}, "beta2 must be in [0, 1), found -0.1"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .eps = -1e-8f}, "eps must be a positive number, found -1e-08"},
        {{.kind = DP_OPTIM_ADAGRAD, .lr = 0.1f, .eps = INFINITY}, "eps must be a positive number, found inf"},
        {{.kind = DP_OPTIM_MOMENTUM, .lr = 0.1f, .beta1 = 0.5f}, "beta1 and beta2 apply to adam and adamw only"},
        {{.kind = DP_OPTIM_SGD, .lr = 0.1f, .eps = 0.1f}, "eps applies to adagrad, adam and adamw only"},
        {{.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .weight_decay = -0.01f}, "weight decay must be >= 0, found -0.01"},
        {{.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .beta2 = 1.0f}, "beta2 must be in [0, 1), found 1"},
        {{.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .eps = -1.0f}, "eps must be a positive number, found -1"},
        {{.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .momentum = 0.9f}, "optimizer adamw: momentum 0.9 applies to the momentum"},
        {{.kind = (dp_optim_kind_t)7, .lr = 0.1f}, "unknown kind 7"},
        {{.kind = DP_OPTIM_SGD, .lr = 0.1f, .has_norm_weight_decay = 1, .norm_weight_decay = -0.5f},
         "norm weight decay must be >= 0, found -0.5"},
        {{.kind = DP_OPTIM_ADAMW, .lr = 0.1f, .has_bias_weight_decay = 1, .bias_weight_decay = NAN},
         "bias weight decay must be >= 0"},
        {{.kind = DP_OPTIM_ADAM, .lr = 0.1f, .bias_weight_decay = 0.1f}, "given without its flag"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dp_optimizer_t *opt = (dp_optimizer_t *)&opt;
        dp_status_t st = dp_optimizer_new(&cases[c].config, 4, &opt);
        CHECK(st == DP_ERR_ARG && opt == NULL, "case %zu (%s): status %d", c, cases[c].message, (int)st);
        CHECK(strstr(dp_error_message(), cases[c].message) != NULL && !strchr(dp_error_message(), '\n'),
              "case %zu: message '%s', expected '%s'", c, dp_error_message(), cases[c].message);
        CHECK(dp_optim_config_check(&cases[c].config) == DP_ERR_ARG, "case %zu: check accepts it", c);
    }
    dp_optim_config_t nesterov = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.1f, .nesterov = 1};
    CHECK(dp_optim_config_check(&nesterov) == DP_OK, "nesterov with the default momentum: %s",
          dp_error_message());
}

/* --- Learning-rate schedules ------------------------------------------------------ */

static const char *const schedule_cases[] = {
    "schedule-constant", "schedule-constant-warmup", "schedule-step", "schedule-step-warmup",
    "schedule-cosine", "schedule-cosine-min", "schedule-cosine-warmup",
};

static void test_schedules_against_pytorch(void) {
    for (size_t c = 0; c < sizeof schedule_cases / sizeof schedule_cases[0]; c++) {
        fixture_t f;
        if (!fixture_load("optim", schedule_cases[c], &f)) continue;
        const float *cf = fixture_get(&f, "config")->data;
        const int *ci = fixture_get(&f, "config_int")->data;
        const fixture_tensor_t *lrs = fixture_get(&f, "lr");
        dp_lr_schedule_t s = {.kind = (dp_lr_schedule_kind_t)ci[0], .lr = cf[0], .step_epochs = ci[1],
                              .gamma = cf[1], .total_epochs = ci[2], .min_lr = cf[2], .warmup_epochs = cf[3],
                              .warmup_steps = (uint64_t)ci[4]};
        CHECK(dp_lr_schedule_check(&s) == DP_OK, "%s: %s", schedule_cases[c], dp_error_message());
        double worst = 0.0;
        size_t worst_t = 0;
        for (size_t t = 0; t < lrs->numel; t++) {
            double want = ((const float *)lrs->data)[t];
            double rel = fabs(dp_lr_schedule_lr(&s, t, (uint64_t)ci[3]) - want) / want;
            if (rel > worst) worst = rel, worst_t = t;
        }
        /* torch's lr in float64, stored as float32: 6e-8 relative */
        CHECK(worst <= 1e-7, "%s: step %zu: lr %.9g, torch %.9g", schedule_cases[c], worst_t,
              dp_lr_schedule_lr(&s, worst_t, (uint64_t)ci[3]), ((const float *)lrs->data)[worst_t]);
        printf("%-26s %zu steps, worst relative lr difference %.2g\n", schedule_cases[c], lrs->numel, worst);
        fixture_free(&f);
    }
}

/* torchvision's warm-ups, SequentialLR and ExponentialLR (make_optim_fixtures.py's
 * warmup_case), in float64: within 1e-12 relative. */
static const char *const warmup_cases[] = {
    "schedule-exponential", "schedule-step-linear-start", "schedule-cosine-constant-start",
    "schedule-cosine-sequential", "schedule-cosine-sequential-default", "schedule-exponential-sequential",
    "schedule-step-sequential",
};

static void test_warmups_against_pytorch(void) {
    for (size_t c = 0; c < sizeof warmup_cases / sizeof warmup_cases[0]; c++) {
        fixture_t f;
        if (!fixture_load("optim", warmup_cases[c], &f)) continue;
        const fixture_tensor_t *bits = fixture_get(&f, "config_f64_bits"), *lrs = fixture_get(&f, "lr_f64_bits");
        const int *ci = fixture_get(&f, "config_int")->data;
        DP_ASSERT(bits && bits->numel == 10 && lrs && lrs->numel % 2 == 0);
        double cf[5];
        memcpy(cf, bits->data, sizeof cf);
        dp_lr_schedule_t s = {.kind = (dp_lr_schedule_kind_t)ci[0], .lr = cf[0], .step_epochs = ci[1],
                              .gamma = cf[1], .total_epochs = ci[2], .min_lr = cf[2], .warmup_epochs = cf[3],
                              .warmup_steps = (uint64_t)ci[4], .warmup_start = cf[4],
                              .warmup_method = (dp_lr_warmup_method_t)ci[5], .warmup_sequential = ci[6]};
        CHECK(dp_lr_schedule_check(&s) == DP_OK, "%s: %s", warmup_cases[c], dp_error_message());
        double worst = 0.0, worst_want = 0.0;
        size_t worst_t = 0;
        for (size_t t = 0; t < lrs->numel / 2; t++) {
            double want;
            memcpy(&want, (const int32_t *)lrs->data + 2 * t, sizeof want);
            double rel = fabs(dp_lr_schedule_lr(&s, t, (uint64_t)ci[3]) - want) / want;
            if (rel >= worst) worst = rel, worst_t = t, worst_want = want;
        }
        CHECK(worst <= 1e-12, "%s: step %zu: lr %.17g, torch %.17g", warmup_cases[c], worst_t,
              dp_lr_schedule_lr(&s, worst_t, (uint64_t)ci[3]), worst_want);
        printf("%-36s %zu steps, worst relative lr difference %.2g\n", warmup_cases[c], lrs->numel / 2, worst);
        fixture_free(&f);
    }
}

/* The new fields at their defaults (linear, no start, chained) give the
 * schedules of before bit for bit: (t + 1) / W multiplied in last. */
static void test_warmup_defaults_unchanged(void) {
    const dp_lr_schedule_t cases[] = {
        {.kind = DP_LR_CONSTANT, .lr = 0.4, .warmup_steps = 10},
        {.kind = DP_LR_STEP, .lr = 0.1, .step_epochs = 2, .gamma = 0.1, .warmup_epochs = 1.4},
        {.kind = DP_LR_COSINE, .lr = 0.3, .total_epochs = 12, .min_lr = 0.01, .warmup_steps = 13},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const dp_lr_schedule_t *s = &cases[c];
        const uint64_t n = 5, warmup = dp_lr_schedule_warmup_steps(s, n);
        for (uint64_t t = 0; t < 60; t++) {
            double lr = s->lr; /* the formula as it was written before the warm-up options */
            if (s->kind == DP_LR_STEP) lr *= pow(s->gamma, (double)(t / ((uint64_t)s->step_epochs * n)));
            if (s->kind == DP_LR_COSINE) {
                double progress = t >= 60 ? 1.0 : (double)t / 60.0;
                lr = s->min_lr + (s->lr - s->min_lr) * (1.0 + cos(M_PI * progress)) / 2.0;
            }
            if (t < warmup) lr *= (double)(t + 1) / (double)warmup;
            const double now = dp_lr_schedule_lr(s, t, n);
            CHECK(memcmp(&now, &lr, sizeof lr) == 0, "case %zu step %llu: %.17g, before %.17g", c,
                  (unsigned long long)t, now, lr);
        }
    }
    CHECK(dp_lr_warmup_method_from_name("constant") == DP_WARMUP_CONSTANT &&
          dp_lr_warmup_method_from_name("linear") == DP_WARMUP_LINEAR &&
          dp_lr_warmup_method_from_name("cosine") == -1 && dp_lr_schedule_kind_from_name("exponential") ==
          DP_LR_EXPONENTIAL, "warm-up method and schedule names");
    /* a warm-up start of 1 with the constant method: no warm-up at all */
    dp_lr_schedule_t flat = {.kind = DP_LR_COSINE, .lr = 0.3, .total_epochs = 12, .warmup_steps = 9,
                             .warmup_method = DP_WARMUP_CONSTANT, .warmup_start = 1.0};
    dp_lr_schedule_t none = {.kind = DP_LR_COSINE, .lr = 0.3, .total_epochs = 12};
    CHECK(dp_lr_schedule_lr(&flat, 4, 5) == dp_lr_schedule_lr(&none, 4, 5), "constant warm-up at 1");
    /* sequential cosine whose warm-up is as long as the run: min_lr after it */
    dp_lr_schedule_t all_warm = {.kind = DP_LR_COSINE, .lr = 0.3, .total_epochs = 2, .min_lr = 0.01,
                                 .warmup_epochs = 2.0, .warmup_sequential = 1};
    CHECK(dp_lr_schedule_lr(&all_warm, 10, 5) == 0.01 && dp_lr_schedule_lr(&all_warm, 12, 5) == 0.01,
          "sequential cosine after a warm-up of the whole run: %g", dp_lr_schedule_lr(&all_warm, 10, 5));
}

static void test_schedule_edges(void) {
    CHECK(dp_lr_schedule_kind_from_name("cosine") == DP_LR_COSINE && dp_lr_schedule_kind_from_name("step") ==
          DP_LR_STEP && dp_lr_schedule_kind_from_name("constant") == DP_LR_CONSTANT &&
          dp_lr_schedule_kind_from_name("linear") == -1, "schedule names");
    CHECK(strcmp(dp_lr_schedule_kind_name(DP_LR_STEP), "step") == 0, "name of step");
    /* cosine: min_lr at the end of the run and after it; half way (lr + min) / 2 */
    dp_lr_schedule_t cosine = {.kind = DP_LR_COSINE, .lr = 0.5, .total_epochs = 4, .min_lr = 0.1};
    CHECK(dp_lr_schedule_lr(&cosine, 40, 10) == 0.1 && dp_lr_schedule_lr(&cosine, 50, 10) == 0.1,
          "cosine after the run: %g", dp_lr_schedule_lr(&cosine, 50, 10));
    CHECK(fabs(dp_lr_schedule_lr(&cosine, 20, 10) - 0.3) < 1e-15, "cosine half way: %.17g",
          dp_lr_schedule_lr(&cosine, 20, 10));
    /* warm-up in epochs: rounded to steps; the step after it is the base lr */
    dp_lr_schedule_t warm = {.kind = DP_LR_CONSTANT, .lr = 1.0, .warmup_epochs = 0.5};
    CHECK(dp_lr_schedule_warmup_steps(&warm, 7) == 4, "0.5 epochs of 7 steps: %llu warm-up steps",
          (unsigned long long)dp_lr_schedule_warmup_steps(&warm, 7));
    CHECK(dp_lr_schedule_lr(&warm, 0, 7) == 0.25 && dp_lr_schedule_lr(&warm, 3, 7) == 1.0 &&
          dp_lr_schedule_lr(&warm, 4, 7) == 1.0, "warm-up 4 steps: %g %g", dp_lr_schedule_lr(&warm, 0, 7),
          dp_lr_schedule_lr(&warm, 3, 7));
    dp_lr_schedule_t step = {.kind = DP_LR_STEP, .lr = 1.0, .step_epochs = 2};
    CHECK(dp_lr_schedule_lr(&step, 19, 10) == 1.0 && fabs(dp_lr_schedule_lr(&step, 20, 10) - 0.1) < 1e-16,
          "step with the default gamma 0.1: %g", dp_lr_schedule_lr(&step, 20, 10));

    static const struct {
        dp_lr_schedule_t s;
        const char *message;
    } bad[] = {
        {{.kind = DP_LR_CONSTANT, .lr = 0.0}, "learning rate must be a positive number, found 0"},
        {{.kind = DP_LR_STEP, .lr = 0.1}, "step length must be >= 1 epoch, found 0"},
        {{.kind = DP_LR_STEP, .lr = 0.1, .step_epochs = 2, .gamma = 1.5}, "gamma must be in (0, 1], found 1.5"},
        {{.kind = DP_LR_STEP, .lr = 0.1, .step_epochs = 2, .gamma = -0.5}, "gamma must be in (0, 1], found -0.5"},
        {{.kind = DP_LR_COSINE, .lr = 0.1, .gamma = 0.5}, "apply to the step schedule only"},
        {{.kind = DP_LR_COSINE, .lr = 0.1}, "the run must last >= 1 epoch, found 0"},
        {{.kind = DP_LR_COSINE, .lr = 0.1, .total_epochs = 3, .min_lr = 0.1}, "must be in [0, 0.1), found 0.1"},
        {{.kind = DP_LR_STEP, .lr = 0.1, .step_epochs = 1, .min_lr = 0.01}, "applies to the cosine schedule only"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_epochs = -1.0}, "warm-up epochs must be >= 0, found -1"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_epochs = 1.0, .warmup_steps = 5}, "not both"},
        {{.kind = (dp_lr_schedule_kind_t)9, .lr = 0.1}, "unknown kind 9"},
        {{.kind = DP_LR_EXPONENTIAL, .lr = 0.1}, "lr schedule exponential: gamma must be in (0, 1], found 0"},
        {{.kind = DP_LR_EXPONENTIAL, .lr = 0.1, .gamma = 1.25}, "gamma must be in (0, 1], found 1.25"},
        {{.kind = DP_LR_EXPONENTIAL, .lr = 0.1, .gamma = 0.9, .step_epochs = 2}, "the step length applies to the "
                                                                                "step schedule only, found 2"},
        {{.kind = DP_LR_EXPONENTIAL, .lr = 0.1, .gamma = 0.9, .min_lr = 0.01}, "applies to the cosine schedule"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_steps = 5, .warmup_start = 1.5},
         "the warm-up's start factor must be in (0, 1], found 1.5"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_steps = 5, .warmup_start = -0.5},
         "the warm-up's start factor must be in (0, 1], found -0.5"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_steps = 5, .warmup_method = (dp_lr_warmup_method_t)2},
         "unknown warm-up method 2 (expected linear or constant)"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_sequential = 1}, "needs a warm-up length in epochs or steps"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_start = 0.5}, "needs a warm-up length in epochs or steps"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_method = DP_WARMUP_CONSTANT}, "needs a warm-up length"},
        {{.kind = DP_LR_CONSTANT, .lr = 0.1, .warmup_steps = 5, .warmup_sequential = 2}, "must be 0 or 1, found 2"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        CHECK(dp_lr_schedule_check(&bad[c].s) == DP_ERR_ARG && strstr(dp_error_message(), bad[c].message) &&
              !strchr(dp_error_message(), '\n'),
              "schedule case %zu: '%s', expected '%s'", c, dp_error_message(), bad[c].message);
    }
}

/* --- Inside the trainer ---------------------------------------------------------- */

/* Random 28x28 images and labels: enough to give every step a gradient. */
static dp_trainer_t *optim_trainer(const dp_model_t *m, int devices, const dp_optim_config_t *optim,
                                   int overlap, dp_sync_kind_t sync) {
    dp_trainer_config_t config = {.model = m, .num_devices = devices, .threads_per_device = 1,
                                  .allreduce = DP_ALLREDUCE_RING, .overlap = overlap, .sync = sync,
                                  .optim = *optim, .seed = 5};
    dp_trainer_t *t;
    DP_ASSERT(dp_trainer_new(&config, &t) == DP_OK);
    return t;
}

/* steps of batch 50, the lr halved before every step (set_lr on all replicas) */
static void train_steps(dp_trainer_t *t, const dp_dataset_t *ds, float lr, int steps) {
    int indices[50];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 50; i++) indices[i] = (s * 50 + i * 7) % ds->count;
        dp_trainer_set_lr(t, lr);
        lr *= 0.5f;
        DP_ASSERT(testing_step(t, ds, indices, 50, NULL, NULL) == DP_OK);
    }
}

static void test_in_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet-paddle", &m) == DP_OK);
    size_t np = dp_model_num_params(m);
    dp_dataset_t ds = testing_random_images(300, 77);
    const dp_optim_config_t configs[] = {
        {.kind = DP_OPTIM_ADAM, .lr = 0.01f, .weight_decay = 0.01f},
        {.kind = DP_OPTIM_ADAMW, .lr = 0.01f, .weight_decay = 0.1f},
        {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .nesterov = 1},
        {.kind = DP_OPTIM_ADAGRAD, .lr = 0.05f},
    };
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        const char *kind = dp_optim_kind_name(configs[c].kind);
        dp_trainer_t *one = optim_trainer(m, 1, &configs[c], 0, DP_SYNC_ALLREDUCE);
        train_steps(one, &ds, configs[c].lr, 4);
        CHECK(dp_optimizer_steps(dp_trainer_optimizer(one, 0)) == 4, "%s: optimizer steps", kind);
        /* 1 device against 3: the gradient sums differ in float order only */
        dp_trainer_t *three = optim_trainer(m, 3, &configs[c], 0, DP_SYNC_ALLREDUCE);
        train_steps(three, &ds, configs[c].lr, 4);
        /* Adagrad's and Adam's first steps are lr * g / |g|: where a gradient is
         * float noise (a sum that is ~0), the order of the sum flips its step, so
         * those two get an absolute bound of 1% of lr; SGD-like ones 1e-5. */
        double atol = configs[c].kind == DP_OPTIM_MOMENTUM ? 1e-5 : 0.01 * configs[c].lr;
        size_t at;
        double v = testing_max_violation(dp_trainer_params(three, 0), dp_trainer_params(one, 0), np, 1e-4, atol,
                                         &at);
        CHECK(v <= 1.0, "%s: 3 devices drift from 1: violation %g at %zu (%g vs %g)", kind, v, at,
              dp_trainer_params(three, 0)[at], dp_trainer_params(one, 0)[at]);
        CHECK(dp_trainer_check_replicas(three) == DP_OK, "%s: %s", kind, dp_error_message());
        for (int d = 0; d < 3; d++)
            CHECK(dp_optimizer_lr(dp_trainer_optimizer(three, d)) == configs[c].lr / 8,
                  "%s: replica %d lr %g", kind, d, dp_optimizer_lr(dp_trainer_optimizer(three, d)));
        /* overlap (buckets updated from several threads during backward) and
         * the parameter server apply the same updates to the bit */
        dp_trainer_t *over = optim_trainer(m, 3, &configs[c], 1, DP_SYNC_ALLREDUCE);
        dp_trainer_t *ps = optim_trainer(m, 3, &configs[c], 0, DP_SYNC_PS);
        train_steps(over, &ds, configs[c].lr, 4);
        train_steps(ps, &ds, configs[c].lr, 4);
        CHECK(memcmp(dp_trainer_params(over, 2), dp_trainer_params(three, 0), np * sizeof(float)) == 0,
              "%s: overlap differs from the ring", kind);
        CHECK(memcmp(dp_trainer_params(ps, 1), dp_trainer_params(three, 0), np * sizeof(float)) == 0,
              "%s: parameter server differs from the ring", kind);
        CHECK(dp_optimizer_lr(dp_trainer_optimizer(ps, 0)) == configs[c].lr / 8, "%s: server lr", kind);
        dp_trainer_free(one);
        dp_trainer_free(three);
        dp_trainer_free(over);
        dp_trainer_free(ps);
    }
    dp_dataset_free(&ds);
    dp_model_free(m);
}

/* a conv with bias, batch norm, a linear layer with bias: every group */
static dp_model_t *bn_model(void) {
    dp_model_t *m;
    dp_op_attr_t conv = dp_op_attr_default();
    DP_ASSERT(dp_model_new("bn-test", 1, 28, 28, DP_INIT_TORCH_DEFAULT, 0.0f, &m) == DP_OK);
    DP_ASSERT(dp_model_add_conv(m, "conv1", 4, 5, 5, &conv, 1) == DP_OK);
    DP_ASSERT(dp_model_add_batch_norm(m, "bn1", NULL) == DP_OK && dp_model_add_relu(m) == DP_OK);
    DP_ASSERT(dp_model_add_flatten(m) == DP_OK && dp_model_add_linear(m, "fc", 10, 1) == DP_OK);
    return m;
}

static const dp_param_info_t *param_named(const dp_model_t *m, const char *name) {
    for (int i = 0; i < dp_model_num_param_tensors(m); i++)
        if (strcmp(dp_model_param(m, i)->name, name) == 0) return dp_model_param(m, i);
    DP_ASSERT(!"no such parameter");
    return NULL;
}

/* the floats of tensor `name` in a and b are the same bits */
static int same_tensor(const dp_model_t *m, const char *name, const float *a, const float *b) {
    const dp_param_info_t *p = param_named(m, name);
    return memcmp(a + p->offset, b + p->offset, p->numel * sizeof(float)) == 0;
}

/* The trainer gives the groups what torchvision's set_weight_decay does:
 * batch norm's weight and bias the norm decay, every other bias the bias
 * decay (and batch norm's bias with it when given); after one step (equal
 * gradients) each tensor is what the run with its group's decay for every
 * tensor makes it; the strategies that split the buffer into chunks and
 * buckets (ring over 3 devices, overlap, parameter server) agree to the bit. */
static void test_decay_groups_in_trainer(void) {
    dp_model_t *m = bn_model();
    size_t np = dp_model_num_params(m);
    dp_optim_config_t norm_only = {.kind = DP_OPTIM_ADAMW, .lr = 0.01f, .weight_decay = 0.1f,
                                   .has_norm_weight_decay = 1, .norm_weight_decay = 0.0f};
    dp_decay_range_t *ranges;
    int count;
    DP_ASSERT(dp_model_decay_ranges(m, &norm_only, &ranges, &count) == DP_OK);
    const char *expect[] = {"conv1.bias", "bn1.weight", "bn1.bias", "fc.bias"};
    const dp_decay_group_t groups[] = {DP_DECAY_BIAS, DP_DECAY_NORM, DP_DECAY_NORM, DP_DECAY_BIAS};
    CHECK(count == 4, "ranges: %d, expected 4", count);
    for (int i = 0; i < count && i < 4; i++) {
        const dp_param_info_t *p = param_named(m, expect[i]);
        CHECK(ranges[i].start == p->offset && ranges[i].count == p->numel && ranges[i].group == groups[i],
              "range %d: [%zu, +%zu) group %d, expected %s's in group %d", i, ranges[i].start, ranges[i].count,
              (int)ranges[i].group, expect[i], (int)groups[i]);
    }
    free(ranges);
    dp_optim_config_t with_bias = norm_only;
    with_bias.has_bias_weight_decay = 1, with_bias.bias_weight_decay = 0.5f;
    DP_ASSERT(dp_model_decay_ranges(m, &with_bias, &ranges, &count) == DP_OK);
    CHECK(count == 4 && ranges[2].group == DP_DECAY_BIAS, "a bias weight decay takes batch norm's bias: group %d",
          count == 4 ? (int)ranges[2].group : -1);
    free(ranges);

    dp_dataset_t ds = testing_random_images(300, 77);
    dp_optim_config_t none = norm_only, plain = norm_only, grouped = with_bias;
    none.weight_decay = 0.0f, none.has_norm_weight_decay = 0;
    plain.has_norm_weight_decay = 0;
    grouped.bias_weight_decay = 0.0f; /* norm 0 (norm_only's), every bias 0: timm's no-decay group */
    dp_trainer_t *t_none = optim_trainer(m, 1, &none, 0, DP_SYNC_ALLREDUCE);
    dp_trainer_t *t_plain = optim_trainer(m, 1, &plain, 0, DP_SYNC_ALLREDUCE);
    dp_trainer_t *t_grouped = optim_trainer(m, 1, &grouped, 0, DP_SYNC_ALLREDUCE);
    train_steps(t_none, &ds, 0.01f, 1);
    train_steps(t_plain, &ds, 0.01f, 1);
    train_steps(t_grouped, &ds, 0.01f, 1);
    const float *pn = dp_trainer_params(t_none, 0), *pp = dp_trainer_params(t_plain, 0),
                *pg = dp_trainer_params(t_grouped, 0);
    CHECK(same_tensor(m, "conv1.weight", pg, pp) && same_tensor(m, "fc.weight", pg, pp),
          "grouped: the weights are not decayed as --weight-decay says");
    const char *undecayed[] = {"conv1.bias", "bn1.weight", "bn1.bias", "fc.bias"};
    for (int i = 0; i < 4; i++) {
        CHECK(same_tensor(m, undecayed[i], pg, pn), "grouped: %s is not the undecayed run's", undecayed[i]);
        if (strcmp(undecayed[i], "bn1.bias") != 0) /* starts at 0, which no decay changes */
            CHECK(!same_tensor(m, undecayed[i], pp, pn), "%s: the decay changes nothing (the test cannot fail)",
                  undecayed[i]);
    }
    dp_trainer_free(t_none);
    dp_trainer_free(t_plain);
    dp_trainer_free(t_grouped);

    dp_trainer_t *ring = optim_trainer(m, 3, &with_bias, 0, DP_SYNC_ALLREDUCE);
    dp_trainer_t *over = optim_trainer(m, 3, &with_bias, 1, DP_SYNC_ALLREDUCE);
    dp_trainer_t *ps = optim_trainer(m, 3, &with_bias, 0, DP_SYNC_PS);
    train_steps(ring, &ds, 0.01f, 3);
    train_steps(over, &ds, 0.01f, 3);
    train_steps(ps, &ds, 0.01f, 3);
    CHECK(memcmp(dp_trainer_params(over, 2), dp_trainer_params(ring, 0), np * sizeof(float)) == 0,
          "decay groups: overlap differs from the ring");
    CHECK(memcmp(dp_trainer_params(ps, 1), dp_trainer_params(ring, 0), np * sizeof(float)) == 0,
          "decay groups: parameter server differs from the ring");
    CHECK(dp_trainer_check_replicas(ring) == DP_OK, "decay groups: %s", dp_error_message());
    dp_trainer_free(ring);
    dp_trainer_free(over);
    dp_trainer_free(ps);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    test_sgd_by_hand();
    test_against_pytorch();
    test_state_api();
    test_adamw_by_hand();
    test_decay_groups();
    test_bad_configs();
    test_schedules_against_pytorch();
    test_schedule_edges();
    test_warmups_against_pytorch();
    test_warmup_defaults_unchanged();
    test_in_trainer();
    test_decay_groups_in_trainer();
    return testing_finish("test_optim");
}
