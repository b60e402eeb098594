/* mpi_sync_bench.c - the cost of dptrain's gradient sync across ranks against
 * a bare MPI_Allreduce of the same bytes between the same ranks, same run.
 *
 * Run under mpirun (e.g. mpirun -np 2 build/mpi_sync_bench [steps] [devices]).
 * Trains LeNet for `steps` steps (batch 256, synthetic data) and reads the
 * trainer's sync time, split into the time inside MPI_Allreduce (which also
 * waits for the slower rank to finish its backward) and dptrain's own work
 * around it (local reduce, copy back to the devices, the SGD update, task
 * hand-offs); then times `steps` bare MPI_Allreduce calls on a buffer of the
 * same number of floats, each after a barrier. Prints per-step figures and
 * dptrain's own work as a percentage of the bare MPI_Allreduce.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "dptrain/parallel.h"

int main(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK || world.size < 2) {
        fprintf(stderr, "mpi_sync_bench: run it under mpirun with 2 or more ranks\n");
        dp_world_finalize();
        return 2;
    }
    int steps = argc > 1 ? atoi(argv[1]) : 200, devices = argc > 2 ? atoi(argv[2]) : 1;
    dp_model_t *model;
    dp_model_builtin("lenet", &model);
    size_t n = dp_model_num_params(model);
    int count = 512;
    unsigned char *pixels = malloc((size_t)count * 784), *labels = malloc((size_t)count);
    for (int i = 0; i < count * 784; i++) pixels[i] = (unsigned char)(i * 7);
    for (int i = 0; i < count; i++) labels[i] = (unsigned char)(i % 10);
    dp_dataset_t ds;
    dp_dataset_from_memory(&ds, count, 1, 28, 28, 10, pixels, labels);
    dp_trainer_config_t config = {.model = model, .num_devices = devices, .threads_per_device = 1,
                                  .allreduce = DP_ALLREDUCE_RING, .world = world,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}};
    dp_trainer_t *trainer;
    if (dp_trainer_new(&config, &trainer) != DP_OK) return 1;
    int indices[256];
    for (int i = 0; i < 256; i++) indices[i] = i;
    for (int s = 0; s < 5; s++) dp_trainer_step(trainer, &ds, indices, 256, NULL, NULL); /* warm-up */
    double mpi_before, mpi_after;
    double before = dp_trainer_sync_seconds(trainer, &mpi_before);
    for (int s = 0; s < steps; s++) dp_trainer_step(trainer, &ds, indices, 256, NULL, NULL);
    double dptrain_sync = (dp_trainer_sync_seconds(trainer, &mpi_after) - before) / steps;
    double in_mpi = (mpi_after - mpi_before) / steps, own = dptrain_sync - in_mpi;

    float *buffer = calloc(n, sizeof(float));
    double bare = 0.0;
    for (int s = 0; s < steps + 5; s++) {
        MPI_Barrier(MPI_COMM_WORLD); /* the ranks arrive together, as after a step */
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buffer, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (s >= 5) bare += MPI_Wtime() - t0;
    }
    bare /= steps;
    double mine[4] = {dptrain_sync, in_mpi, own, bare}, worst[4];
    MPI_Allreduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (world.rank == 0)
        printf("%d ranks x %d device(s), %zu floats (%.2f MB), per step (slowest rank): dptrain sync %.3f ms = "
               "%.3f in MPI_Allreduce (incl. waiting for the slower rank) + %.3f own work; bare MPI_Allreduce "
               "%.3f ms; own work = %.0f%% of the bare allreduce\n",
               world.size, devices, n, n * 4.0 / 1e6, worst[0] * 1e3, worst[1] * 1e3, worst[2] * 1e3,
               worst[3] * 1e3, worst[2] / worst[3] * 100.0);
    free(buffer);
    dp_trainer_free(trainer);
    dp_dataset_free(&ds);
    free(pixels);
    free(labels);
    dp_model_free(model);
    dp_world_finalize();
    return 0;
}
