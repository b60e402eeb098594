/* stop_vote_bench.c - what preemption costs a run that is never preempted:
 * fit.h's stop_request makes every step boundary queue one float summed
 * across ranks (the vote, read at the next boundary), which `dptrain train`
 * always asks for. Same run, same machine: dp_fit of LeNet (batch 256,
 * synthetic images, 1 CPU device per rank, SGD) for one epoch without the
 * vote (stop_request NULL) and with it (a flag never set), in alternating
 * rounds (the order swapped every round, so that the machine's load hits
 * both alike); prints each round's training seconds (the epoch's steps,
 * without evaluation) and the median of the ratios with / without.
 *
 * usage: mpirun -np 2 build/stop_vote_bench [rounds] [images]   (defaults 6, 15360: 60 steps)
 * One rank works too: its vote is a read of the flag.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "dptrain/comm.h"
#include "dptrain/fit.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"

#include "bench_util.h"

static double epoch_sec;
static dp_status_t on_epoch(const dp_epoch_stats_t *s, void *ctx) {
    (void)ctx;
    epoch_sec = s->epoch_sec;
    return DP_OK;
}

/* One epoch from the same initialisation; its training seconds. */
static double one_epoch(dp_model_t *model, const dp_dataset_t *train, const dp_dataset_t *test,
                        const dp_world_t *world, const volatile sig_atomic_t *request) {
    dp_trainer_config_t tc = {.model = model, .num_devices = 1, .threads_per_device = 1,
                              .allreduce = DP_ALLREDUCE_RING, .overlap = world->size > 1, .world = *world,
                              .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 0};
    dp_trainer_t *t = NULL;
    if (dp_trainer_new(&tc, &t) != DP_OK) return -1.0;
    dp_fit_config_t fc = {.trainer = t, .model = model, .train_set = train, .test_set = test, .world = *world,
                          .batch_size = 256, .epochs = 1, .seed = 0, .schedule = {.kind = DP_LR_CONSTANT, .lr = 0.1},
                          .eval_batch_size = 256, .stop_request = request};
    dp_status_t status = dp_fit(&fc, on_epoch, NULL, NULL);
    dp_trainer_free(t);
    return status == DP_OK ? epoch_sec : -1.0;
}

int main(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK) {
        fprintf(stderr, "stop_vote_bench: %s\n", dp_error_message());
        return 1;
    }
    int rounds = 6, images = 15360;
    if (argc > 3) {
        if (world.rank == 0) fprintf(stderr, "usage: stop_vote_bench [rounds >= 1] [images >= 256 a rank]\n");
        dp_world_finalize();
        return 2;
    }
    const char *me = world.rank == 0 ? "stop_vote_bench" : NULL; /* one rank says what is wrong */
    if ((argc > 1 && !bench_int_arg(me, "rounds", argv[1], 1, 1000000, &rounds)) ||
        (argc > 2 && !bench_int_arg(me, "images", argv[2], 256 * world.size, 1 << 24, &images))) {
        dp_world_finalize();
        return 2;
    }
    if (!bench_cpu_line("stop_vote_bench", world.rank == 0)) {
        dp_world_finalize();
        return 1;
    }
    dp_model_t *model = NULL;
    dp_dataset_t train = {0}, test = {0};
    if (dp_model_load("lenet", &model) != DP_OK || bench_synthetic_images(images, &train) != DP_OK ||
        bench_synthetic_images(256, &test) != DP_OK) {
        fprintf(stderr, "stop_vote_bench: %s\n", dp_error_message());
        return 1;
    }
    static volatile sig_atomic_t never; /* a stop request that never comes */
    double *ratios = malloc(sizeof(double) * (size_t)rounds);
    if (world.rank == 0)
        printf("LeNet, %d images (%d steps of 256), %d rank%s x 1 CPU device; training seconds of one epoch\n", images,
               (images + 255) / 256, world.size, world.size > 1 ? "s" : "");
    one_epoch(model, &train, &test, &world, NULL); /* warm-up */
    for (int r = 0; r < rounds; r++) {
        double without, with;
        if (r % 2 == 0) {
            without = one_epoch(model, &train, &test, &world, NULL);
            with = one_epoch(model, &train, &test, &world, &never);
        } else {
            with = one_epoch(model, &train, &test, &world, &never);
            without = one_epoch(model, &train, &test, &world, NULL);
        }
        if (without <= 0.0 || with <= 0.0) {
            fprintf(stderr, "stop_vote_bench: %s\n", dp_error_message());
            return 1;
        }
        ratios[r] = with / without;
        if (world.rank == 0) printf("round %d: without the vote %.3f s, with it %.3f s (x%.3f)\n", r + 1, without, with,
                                    ratios[r]);
    }
    if (world.rank == 0) printf("median with / without the vote: x%.3f over %d rounds\n", bench_median(ratios, rounds), rounds);
    free(ratios);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    dp_model_free(model);
    dp_world_finalize();
    return 0;
}
