/* test_accumulate.c - gradient accumulation (dp_trainer_config_t.accumulate)
 * and augmentation in the trainer's step.
 *
 * LeNet (lenet-paddle) on 512 synthetic 28x28 images (a bright column per
 * class), SGD with momentum, 4 steps of a 256-example batch:
 * - for every synchronisation strategy of one process (chunked, naive,
 *   chunked with overlap, the parameter server) on 1, 2 and 3 devices, with
 *   and without --augment crop:4,flip: 4 micro-batches of 64 per step
 *   (accumulate 4) end with the parameters of 1 batch of 256 per step, to
 *   float rounding: max |a - b| / (1e-6 + 2e-5 |b|) <= 1 (docs/training.md states
 *   the largest relative difference seen); the loss sums agree to 1e-5
 *   relative; and the parameters did move (the check can fail);
 * - accumulate 2 on 3 devices with a short last batch of 7 examples (fewer
 *   than 2 x 3: the step takes 1 micro-batch) still works;
 * - with augmentation, 1, 2 and 3 devices give the same loss to 1e-5
 *   relative, and augmentation changes the loss (it is applied): the crops
 *   are keyed by the example's position in the epoch, not by the shard;
 * - accumulate < 0 is refused by dp_trainer_new, a crop padding of 65 by
 *   dp_memory_source_new.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/model_file.h"
#include "dptrain/parallel.h"
#include "testing.h"

#define COUNT 512
/* The sanitizers run this 10-30x slower (and CI's machine is shared): there
 * one step of a 64-example batch (accumulate 4 x 16; the threaded and memory
 * paths are the same in every step and at every size), elsewhere 4 steps of
 * 256. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define BATCH 64
#define STEPS 1
#else
#define BATCH 256
#define STEPS 4
#endif

typedef struct {
    const char *name;
    dp_sync_kind_t sync;
    dp_allreduce_kind_t allreduce;
    int overlap;
} strategy_t;

static const strategy_t strategies[] = {
    {"chunked", DP_SYNC_ALLREDUCE, DP_ALLREDUCE_CHUNKED, 0},
    {"naive", DP_SYNC_ALLREDUCE, DP_ALLREDUCE_NAIVE, 0},
    {"overlap", DP_SYNC_ALLREDUCE, DP_ALLREDUCE_CHUNKED, 1},
    {"ps", DP_SYNC_PS, DP_ALLREDUCE_CHUNKED, 0},
};

/* Trains STEPS steps of `batch` examples; the parameters into `out`, the
 * summed loss into *loss. 0 on failure. */
static int train(const dp_model_t *m, const dp_dataset_t *ds, const strategy_t *s, int devices, int accumulate,
                 const dp_augment_t *aug, int batch, float *out, double *loss) {
    dp_trainer_config_t c = {.model = m, .num_devices = devices, .threads_per_device = 1, .sync = s->sync,
                             .allreduce = s->allreduce, .overlap = s->overlap,
                             .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f}, .seed = 7,
                             .accumulate = accumulate};
    dp_trainer_t *t = NULL;
    dp_batch_source_t *src = NULL;
    if (dp_trainer_new(&c, &t) != DP_OK || dp_memory_source_new((dp_dataset_t *)ds, aug, 0, &src) != DP_OK) {
        fprintf(stderr, "dp_trainer_new: %s\n", dp_error_message());
        dp_trainer_free(t);
        return 0;
    }
    int indices[COUNT];
    for (int i = 0; i < COUNT; i++) indices[i] = (i * 37) % COUNT;
    *loss = 0.0;
    int ok = 1;
    testing_batch_t b = {0};
    for (int step = 0; step < STEPS && ok; step++) {
        int first = (step * batch) % COUNT, n = first + batch <= COUNT ? batch : COUNT - first;
        const dp_fill_keys_t keys = {.seed = 7, .epoch = step * batch / COUNT, .first_position = first,
                                     .training = 1};
        ok = dp_trainer_step(t, testing_source_batch(&b, src, indices + first, n, &keys), loss, NULL) == DP_OK;
        if (!ok) fprintf(stderr, "step: %s\n", dp_error_message());
    }
    if (ok) memcpy(out, dp_trainer_params(t, 0), sizeof(float) * dp_model_num_params(m));
    testing_batch_free(&b);
    dp_batch_source_free(src);
    dp_trainer_free(t);
    return ok;
}

int main(void) {
    dp_model_t *m = NULL;
    if (dp_model_load("lenet-paddle", &m) != DP_OK) {
        fprintf(stderr, "%s\n", dp_error_message());
        return 2;
    }
    dp_dataset_t ds = testing_column_dataset(COUNT, 28, 10, 2, 3, 64, 11);
    size_t np = dp_model_num_params(m);
    float *a = malloc(sizeof(float) * np), *b = malloc(sizeof(float) * np), *init = malloc(sizeof(float) * np);
    dp_augment_t aug = {.crop_padding = 4, .flip = 1};
    double worst_rel = 0.0;

    /* the initial parameters, to see that training moved them */
    {
        dp_trainer_config_t c = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                 .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 7};
        dp_trainer_t *t = NULL;
        CHECK(dp_trainer_new(&c, &t) == DP_OK, "trainer: %s", dp_error_message());
        if (t) memcpy(init, dp_trainer_params(t, 0), sizeof(float) * np);
        dp_trainer_free(t);
    }
    double aug_loss[4] = {0};
    for (size_t s = 0; s < sizeof strategies / sizeof strategies[0]; s++)
        for (int devices = 1; devices <= 3; devices++)
            for (int with_aug = 0; with_aug < 2; with_aug++) {
                const dp_augment_t *au = with_aug ? &aug : NULL;
                double la, lb;
                int ok = train(m, &ds, &strategies[s], devices, 4, au, BATCH, a, &la) &&
                         train(m, &ds, &strategies[s], devices, 1, au, BATCH, b, &lb);
                CHECK(ok, "%s, %d devices: training failed", strategies[s].name, devices);
                if (!ok) continue;
                size_t worst;
                double v = testing_max_violation(a, b, np, 2e-5, 1e-6, &worst);
                CHECK(v <= 1.0, "%s, %d devices%s: accumulate 4 x %d and %d differ at %zu: %.9g vs %.9g",
                      strategies[s].name, devices, with_aug ? ", augment" : "", BATCH / 4, BATCH, worst, a[worst], b[worst]);
                for (size_t i = 0; i < np; i++) {
                    double rel = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) > 1e-3 ? fabs((double)b[i]) : 1e-3);
                    if (rel > worst_rel) worst_rel = rel;
                }
                CHECK(fabs(la - lb) <= 1e-5 * fabs(lb), "%s, %d devices: loss %.17g vs %.17g", strategies[s].name,
                      devices, la, lb);
                CHECK(testing_max_violation(b, init, np, 1e-3, 1e-4, &worst) > 1.0,
                      "%s, %d devices: the parameters did not move", strategies[s].name, devices);
                if (with_aug && s == 0) aug_loss[devices] = la;
                if (!with_aug && s == 0 && devices == 1) aug_loss[0] = la;
            }
    printf("accumulate 4 x %d vs %d: largest relative parameter difference %.3g (|b| floored at 1e-3)\n",
           BATCH / 4, BATCH, worst_rel);
    /* augmentation: split-independent (1, 2, 3 devices agree) and applied */
    for (int d = 2; d <= 3; d++)
        CHECK(fabs(aug_loss[d] - aug_loss[1]) <= 1e-5 * fabs(aug_loss[1]), "augment: %d devices' loss %.17g, 1 "
              "device's %.17g", d, aug_loss[d], aug_loss[1]);
    CHECK(fabs(aug_loss[1] - aug_loss[0]) > 1e-3 * fabs(aug_loss[0]),
          "augment changed nothing: loss %.17g with, %.17g without", aug_loss[1], aug_loss[0]);

    /* a short last batch: 7 examples on 3 devices, accumulate 2 -> 1 micro-batch */
    {
        double l;
        CHECK(train(m, &ds, &strategies[0], 3, 2, NULL, 7, a, &l) && l > 0.0,
              "a batch of 7 on 3 devices with accumulate 2 failed");
    }
    /* bad configurations */
    {
        dp_trainer_t *t = NULL;
        dp_trainer_config_t c = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                 .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .accumulate = -1};
        CHECK(dp_trainer_new(&c, &t) == DP_ERR_ARG && !t && strstr(dp_error_message(), "accumulate"),
              "accumulate -1 accepted (%s)", dp_error_message());
        dp_augment_t wide = {.crop_padding = 65};
        dp_batch_source_t *src = NULL;
        CHECK(dp_memory_source_new(&ds, &wide, 0, &src) == DP_ERR_ARG && !src &&
                  strstr(dp_error_message(), "crop padding"),
              "crop padding 65 accepted (%s)", dp_error_message());
    }
    free(a);
    free(b);
    free(init);
    dp_dataset_free(&ds);
    dp_model_free(m);
    return testing_finish("test_accumulate");
}
