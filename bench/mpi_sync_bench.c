/* mpi_sync_bench.c - the cost of dptrain's gradient sync across ranks against
 * a bare MPI_Allreduce of the same bytes between the same ranks, same run.
 *
 * Run under mpirun (e.g. mpirun -np 2 build/mpi_sync_bench [steps] [devices]).
 * Trains LeNet (batch 256, synthetic data) with two trainers, --overlap off
 * and on, and times bare MPI_Allreduce calls on a buffer of the same number
 * of floats (each after a barrier, from the main thread while dptrain's
 * communication thread is idle), in 4 interleaved rounds of steps/4 each
 * (off first in even rounds, on first in odd ones), so that the machine's
 * load hits all three alike. Every figure is taken per step on every rank;
 * the benchmark reports the median over the steps of the smallest value
 * over the ranks (the rank that arrives last at the sync waits for no one,
 * so its figure is the sync itself), and of the largest for the exposed
 * sync and the step time:
 *   off: the sync time the caller waits after backward (local reduce, the
 *        sums across ranks, copy back to the devices, the SGD update, task
 *        and thread hand-offs), split into the time the communication thread
 *        spends inside MPI collectives and dptrain's own work, the rest. Own
 *        work is shown with the SGD update and without it: the update
 *        (timed here on its own, over the same floats) is part of the step,
 *        not of the gradient sync, in PyTorch DDP's terms. (Until the
 *        communication thread, this benchmark reported the own work with
 *        the update, the slowest rank's mean, against a single blocking
 *        MPI_Allreduce.)
 *   on:  the exposed sync time: what the caller still waits for after
 *        backward (the buckets not yet summed across ranks and updated);
 *        the rest of the sync ran during backward.
 * Figures as a percentage of the bare MPI_Allreduce: how much dptrain's
 * synchronisation adds to the collective itself.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/batch_source.h"
#include "dptrain/comm.h"
#include "dptrain/parallel.h"

#include "bench_util.h"

#define ROUNDS 4

/* Per-step figures of one trainer, in seconds. */
typedef struct {
    dp_trainer_t *trainer;
    double *sync, *in_mpi, *own, *step; /* (steps) */
    int done;
} timed_trainer_t;

static int run_steps(timed_trainer_t *tt, const dp_batch_t *batch, int steps) {
    for (int s = 0; s < steps; s++) {
        double mpi_before, mpi_after;
        double before = dp_trainer_sync_seconds(tt->trainer, &mpi_before), start = MPI_Wtime();
        if (dp_trainer_step(tt->trainer, batch, NULL, NULL) != DP_OK) return -1;
        double step = MPI_Wtime() - start, sync = dp_trainer_sync_seconds(tt->trainer, &mpi_after) - before;
        if (!tt->sync) continue; /* warm-up */
        tt->step[tt->done] = step;
        tt->sync[tt->done] = sync;
        tt->in_mpi[tt->done] = mpi_after - mpi_before;
        tt->own[tt->done] = sync - (mpi_after - mpi_before);
        tt->done++;
    }
    return 0;
}

/* Every rank's values[i] becomes the smallest (MPI_MIN) or largest over the
 * ranks. */
static void over_ranks(double *values, int n, MPI_Op op) {
    MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, op, MPI_COMM_WORLD);
}

/* The batch: examples 0..255 of ds (which must outlive it). */
static const dp_batch_t *first_batch(dp_dataset_t *ds) {
    static int indices[256];
    static int32_t labels[256];
    static dp_batch_t batch;
    uint8_t *pixels = malloc((size_t)256 * ds->channels * ds->height * ds->width); /* kept to the end */
    dp_batch_source_t *src;
    dp_fill_keys_t keys = {0};
    for (int i = 0; i < 256; i++) indices[i] = i;
    if (!pixels || dp_memory_source_new(ds, NULL, 0, &src) != DP_OK ||
        dp_batch_source_fill_batch(src, indices, 256, &keys, pixels, labels, &batch) != DP_OK)
        return NULL;
    static dp_normalize_t none;
    batch.normalize = &none; /* the source's goes with it */
    dp_batch_source_free(src);
    return &batch;
}

/* Seconds of one SGD update over n floats (the mean of 200). */
static double update_seconds(size_t n) {
    dp_optim_config_t sgd = {.kind = DP_OPTIM_SGD, .lr = 1e-6f};
    dp_optimizer_t *opt;
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    if (!params || !grads || dp_optimizer_new(&sgd, n, &opt) != DP_OK) return 0.0;
    double start = MPI_Wtime();
    for (int i = 0; i < 200; i++) dp_optimizer_step(opt, params, grads);
    double seconds = (MPI_Wtime() - start) / 200;
    dp_optimizer_free(opt);
    free(params);
    free(grads);
    return seconds;
}

int main(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK || world.size < 2) {
        fprintf(stderr, "mpi_sync_bench: run it under mpirun with 2 or more ranks\n");
        dp_world_finalize();
        return 2;
    }
    int steps = 200, devices = 1;
    if (argc > 3) {
        if (world.rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpi_sync_bench [steps] [devices]\n");
        dp_world_finalize();
        return 2;
    }
    const char *me = world.rank == 0 ? "mpi_sync_bench" : NULL; /* one rank says what is wrong */
    if ((argc > 1 && !bench_int_arg(me, "steps", argv[1], 1, 1000000, &steps)) ||
        (argc > 2 && !bench_int_arg(me, "devices", argv[2], 1, 64, &devices))) {
        dp_world_finalize();
        return 2;
    }
    if (!bench_cpu_line("mpi_sync_bench", world.rank == 0)) {
        dp_world_finalize();
        return 1;
    }
    if (steps < ROUNDS) steps = ROUNDS;
    int per_round = steps / ROUNDS;
    steps = per_round * ROUNDS;
    dp_model_t *model;
    dp_model_builtin("lenet", &model);
    size_t n = dp_model_num_trainable(model);
    int count = 512;
    dp_dataset_t ds;
    if (bench_synthetic_images(count, &ds) != DP_OK) return 1;
    const dp_batch_t *batch = first_batch(&ds);
    if (!batch) return 1;
    timed_trainer_t modes[2] = {{0}, {0}}; /* overlap off, on */
    /* per step: off's sync, in_mpi, own; on's; the bare allreduce; the
     * steps' times and on's sync again (largest over the ranks) */
    double *series = calloc((size_t)steps * 10, sizeof(double)), *bare = series + 6 * (size_t)steps;
    double *exposed_max = bare + 3 * (size_t)steps;
    for (int m = 0; m < 2; m++) {
        dp_trainer_config_t config = {.model = model, .num_devices = devices, .threads_per_device = 1,
                                      .allreduce = DP_ALLREDUCE_RING, .overlap = m, .world = world,
                                      .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}};
        if (!series || dp_trainer_new(&config, &modes[m].trainer) != DP_OK) return 1;
        if (run_steps(&modes[m], batch, 5) != 0) return 1;
        modes[m].sync = series + (size_t)(3 * m) * steps;
        modes[m].in_mpi = modes[m].sync + steps;
        modes[m].own = modes[m].in_mpi + steps;
        modes[m].step = bare + (size_t)(1 + m) * steps;
    }
    float *buffer = calloc(n, sizeof(float));
    for (int round = 0, done = 0; round < ROUNDS; round++) {
        for (int i = 0; i < 2; i++) /* off first in even rounds, on first in odd ones */
            if (run_steps(&modes[i ^ (round & 1)], batch, per_round) != 0) return 1;
        for (int s = -(round == 0); s < per_round; s++) {
            MPI_Barrier(MPI_COMM_WORLD); /* the ranks arrive together, as after a step */
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buffer, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (s >= 0) bare[done++] = MPI_Wtime() - t0;
        }
    }
    memcpy(exposed_max, modes[1].sync, sizeof(double) * (size_t)steps);
    over_ranks(series, 7 * steps, MPI_MIN);
    over_ranks(bare + steps, 3 * steps, MPI_MAX);
    double update = update_seconds(n);
    MPI_Allreduce(MPI_IN_PLACE, &update, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    if (world.rank == 0) {
        double off = bench_median(modes[0].sync, steps), in_mpi = bench_median(modes[0].in_mpi, steps);
        double own = bench_median(modes[0].own, steps), exposed = bench_median(modes[1].sync, steps);
        double exposed_mpi = bench_median(modes[1].in_mpi, steps), allreduce = bench_median(bare, steps);
        double slowest = bench_median(exposed_max, steps);
        printf("%d ranks x %d device(s), %zu floats (%.2f MB), %d steps; medians over the steps of the smallest "
               "figure over the ranks:\n  bare MPI_Allreduce %.3f ms\n",
               world.size, devices, n, n * 4.0 / 1e6, steps, allreduce * 1e3);
        printf("  overlap off: step %.2f ms; sync %.3f ms, in MPI %.3f, own work %.3f ms = %.0f%% of the bare "
               "allreduce; without the SGD update (%.3f ms): %.3f ms = %.0f%%\n",
               bench_median(modes[0].step, steps) * 1e3, off * 1e3, in_mpi * 1e3, own * 1e3, own / allreduce * 100.0,
               update * 1e3, (own - update) * 1e3, (own - update) / allreduce * 100.0);
        printf("  overlap on:  step %.2f ms; exposed sync %.3f ms = %.0f%% of the bare allreduce (largest over "
               "the ranks, with the wait for the slower rank's backward: %.3f ms); in MPI %.3f ms, mostly "
               "during backward\n",
               bench_median(modes[1].step, steps) * 1e3, exposed * 1e3, exposed / allreduce * 100.0, slowest * 1e3,
               exposed_mpi * 1e3);
    }
    free(series);
    free(buffer);
    for (int m = 0; m < 2; m++) dp_trainer_free(modes[m].trainer);
    dp_dataset_free(&ds);
    dp_model_free(model);
    dp_world_finalize();
    return 0;
}
