/* test_ema.c - the model's moving average (optim.h dp_ema_*, parallel.h
 * config.model_ema, fit.h model_ema_*):
 * - against torchvision's ExponentialMovingAverage (an AveragedModel of
 *   parameters and buffers, tools/make_optim_fixtures.py's ema-* cases):
 *   the decay from its options' adjustment, and the average after every
 *   update, bit for bit (the first update and the warm-up's copy the
 *   model);
 * - in the trainer, bit for bit: after each step the average of every
 *   replica is the host's dp_ema_update of the parameters the step left,
 *   on 1 device and on 3 with the chunked, overlapping and parameter-server
 *   strategies and on several backend tables; the swap shows the average
 *   to dp_trainer_params and back; a step refuses to run while swapped;
 *   without config.model_ema the calls are refused in one line.
 * dp_fit's schedule of updates, the checkpoints and `eval --ema`:
 * tests/cli_model_ema.sh.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/data.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/parallel.h"
#include "fixture.h"
#include "testing.h"

static void replay_fixture(const char *name) {
    fixture_t f;
    if (!fixture_load("optim", name, &f)) return;
    const fixture_tensor_t *bits = fixture_get(&f, "config_f64_bits"), *states = fixture_get(&f, "states"),
                           *averages = fixture_get(&f, "averages");
    DP_ASSERT(bits && bits->numel == 12 && states && averages && states->shape.ndim == 2);
    double c[6];
    memcpy(c, bits->data, sizeof c);
    const double decay = dp_ema_decay(c[0], (int)c[1], (int)c[2], (int)c[3]);
    CHECK(memcmp(&decay, &c[5], sizeof decay) == 0, "%s: decay %.17g, torchvision's %.17g", name, decay, c[5]);
    const int warmup = (int)c[4];
    const size_t steps = (size_t)states->shape.shape[0], n = (size_t)states->shape.shape[1];
    float *avg = malloc(n * sizeof(float));
    size_t differ = 0;
    for (size_t s = 0, updates = 0; s < steps; s++) {
        const float *x = (const float *)states->data + s * n;
        if (updates == 0) memcpy(avg, x, n * sizeof(float));
        else dp_ema_update(avg, x, (float)decay, (float)(1.0 - decay), n);
        updates = (int)s < warmup ? 0 : updates + 1; /* the warm-up resets the count after the update */
        const float *want = (const float *)averages->data + s * n;
        for (size_t i = 0; i < n; i++) differ += memcmp(&avg[i], &want[i], sizeof(float)) != 0;
    }
    CHECK(differ == 0, "%s: %zu of %zu averaged floats differ from torchvision's", name, differ, steps * n);
    printf("%s: decay %.17g, %zu updates of %zu floats: torchvision's bits\n", name, decay, steps, n);
    free(avg);
    fixture_free(&f);
}

typedef struct {
    const char *name;
    int devices, overlap, split;
    dp_sync_kind_t sync;
} setup_t;

static dp_trainer_t *new_trainer(const dp_model_t *m, const setup_t *s, int ema) {
    const dp_backend_t *split[3] = {dp_backend_cpu_split(0), dp_backend_cpu_split(1), dp_backend_cpu_split(2)};
    dp_trainer_config_t config = {.model = m, .num_devices = s->devices, .threads_per_device = 1,
                                  .overlap = s->overlap, .sync = s->sync, .seed = 4, .model_ema = ema,
                                  .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f},
                                  .backends = s->split ? split : NULL};
    dp_trainer_t *t;
    DP_ASSERT(dp_trainer_new(&config, &t) == DP_OK);
    return t;
}

/* Four steps, an update after each (decay 0.75: the averages move visibly);
 * the host replays the updates from the parameters each step left. */
static void check_setup(const dp_model_t *m, const dp_dataset_t *ds, const setup_t *s) {
    const size_t np = dp_model_num_params(m);
    const double decay = 0.75;
    float *avg = malloc(np * sizeof(float));
    dp_trainer_t *t = new_trainer(m, s, 1);
    int indices[48], ok = 1;
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 48; i++) indices[i] = (k * 48 + i * 7) % ds->count;
        DP_ASSERT(testing_step(t, ds, indices, 48, NULL, NULL) == DP_OK);
        CHECK(dp_trainer_ema_update(t, decay) == DP_OK, "%s: update: %s", s->name, dp_error_message());
        const float *p = dp_trainer_params(t, 0);
        if (k == 0) memcpy(avg, p, np * sizeof(float));
        else dp_ema_update(avg, p, (float)decay, (float)(1.0 - decay), np);
        CHECK(dp_trainer_ema_swap(t) == DP_OK, "%s: swap: %s", s->name, dp_error_message());
        for (int d = 0; d < s->devices; d++) ok &= memcmp(dp_trainer_params(t, d), avg, np * sizeof(float)) == 0;
        CHECK(testing_step(t, ds, indices, 48, NULL, NULL) == DP_ERR_ARG &&
                  strstr(dp_error_message(), "moving average is swapped in"),
              "%s: a step ran with the average swapped in", s->name);
        CHECK(dp_trainer_ema_swap(t) == DP_OK, "%s: swap back: %s", s->name, dp_error_message());
    }
    CHECK(ok, "%s: a replica's average is not the host's replay of the updates", s->name);
    CHECK(dp_trainer_ema_updates(t) == 4, "%s: %llu updates", s->name, (unsigned long long)dp_trainer_ema_updates(t));
    CHECK(dp_trainer_check_replicas(t) == DP_OK, "%s: %s", s->name, dp_error_message());
    /* a restart: the next update copies the model */
    dp_trainer_ema_restart(t);
    DP_ASSERT(dp_trainer_ema_update(t, decay) == DP_OK && dp_trainer_ema_swap(t) == DP_OK);
    memcpy(avg, dp_trainer_params(t, 0), np * sizeof(float));
    DP_ASSERT(dp_trainer_ema_swap(t) == DP_OK);
    CHECK(memcmp(avg, dp_trainer_params(t, 0), np * sizeof(float)) == 0, "%s: after a restart the average is not the "
          "model", s->name);
    printf("%s: 4 updates, every replica's average the host's replay, bit for bit\n", s->name);
    dp_trainer_free(t);
    free(avg);
}

static void test_in_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_load(testing_path("models/tiny_resnet.cfg"), &m) == DP_OK); /* running statistics too */
    int ch, h, w;
    dp_model_input_shape(m, &ch, &h, &w);
    dp_dataset_t ds = testing_column_dataset(200, h, 10, 2, 3, 64, 5);
    const setup_t setups[] = {
        {"1 device", 1, 0, 0, DP_SYNC_ALLREDUCE},
        {"3 devices, chunked", 3, 0, 0, DP_SYNC_ALLREDUCE},
        {"3 devices, overlap", 3, 1, 0, DP_SYNC_ALLREDUCE},
        {"3 devices, parameter server", 3, 0, 0, DP_SYNC_PS},
        {"3 devices on 3 backend tables", 3, 0, 1, DP_SYNC_ALLREDUCE},
    };
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) check_setup(m, &ds, &setups[i]);
    /* without config.model_ema: refused */
    dp_trainer_t *t = new_trainer(m, &setups[0], 0);
    CHECK(dp_trainer_ema_update(t, 0.5) == DP_ERR_ARG && strstr(dp_error_message(), "config.model_ema is 0") &&
              dp_trainer_ema_swap(t) == DP_ERR_ARG,
          "a trainer without an average: %s", dp_error_message());
    dp_trainer_free(t);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    replay_fixture("ema-torchvision");
    replay_fixture("ema-short");
    replay_fixture("ema-warmup");
    replay_fixture("ema-alpha-one");
    test_in_trainer();
    return testing_finish("test_ema");
}
