/* sync_bench.c - the per-step cost of keeping replicas in agreement:
 * allreduce against the parameter server, for LeNet's gradient (0.52 MB)
 * and for a 64 MB one (a single 784 -> 20480 linear layer, 16 M
 * parameters), in one process over several devices or under mpirun across
 * ranks. Trains each configuration for some steps on synthetic data and
 * reads the trainer's sync time (everything after forward/backward).
 *
 * usage: sync_bench [devices] [steps]         (or: mpirun -np 2 sync_bench 1)
 */
#include <stdio.h>
#include <stdlib.h>

#include "dptrain/comm.h"
#include "dptrain/parallel.h"

#include "bench_util.h"

static dp_model_t *wide_model(void) { /* 784 * 20480 + 20480 floats = 64.3 MB */
    dp_model_t *m;
    dp_model_new("wide", 1, 28, 28, DP_INIT_TORCH_DEFAULT, 0.0f, &m);
    dp_model_add_flatten(m);
    dp_model_add_linear(m, "fc", 20480, 1);
    return m;
}

static double sync_ms(const dp_model_t *m, dp_sync_kind_t sync, int devices, const dp_world_t *world,
                      const dp_dataset_t *ds, int batch, int steps) {
    dp_trainer_config_t config = {.model = m, .num_devices = devices, .threads_per_device = 1,
                                  .allreduce = DP_ALLREDUCE_RING, .sync = sync, .world = *world,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.01f}};
    dp_trainer_t *t;
    if (dp_trainer_new(&config, &t) != DP_OK) {
        fprintf(stderr, "sync_bench: %s\n", dp_error_message());
        exit(1);
    }
    int *indices = malloc(sizeof(int) * (size_t)batch);
    uint8_t *pixels = malloc((size_t)batch * ds->channels * ds->height * ds->width);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    for (int i = 0; i < batch; i++) indices[i] = i;
    dp_batch_source_t *src;
    dp_batch_t b;
    dp_fill_keys_t keys = {0};
    if (!pixels || !labels || dp_memory_source_new((dp_dataset_t *)ds, NULL, 0, &src) != DP_OK ||
        dp_batch_source_fill_batch(src, indices, batch, &keys, pixels, labels, &b) != DP_OK) {
        fprintf(stderr, "sync_bench: %s\n", dp_error_message());
        exit(1);
    }
    for (int s = 0; s < 3; s++) dp_trainer_step(t, &b, NULL, NULL);
    double before = dp_trainer_sync_seconds(t, NULL);
    for (int s = 0; s < steps; s++) dp_trainer_step(t, &b, NULL, NULL);
    double ms = (dp_trainer_sync_seconds(t, NULL) - before) / steps * 1e3;
    dp_world_sum_doubles(&ms, 1); /* summed over ranks, then the mean */
    free(indices);
    free(pixels);
    free(labels);
    dp_batch_source_free(src);
    dp_trainer_free(t);
    return ms / world->size;
}

int main(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK) return 1;
    int devices = 2, steps = 50;
    if (argc > 3) {
        if (world.rank == 0) fprintf(stderr, "usage: sync_bench [devices] [steps]\n");
        dp_world_finalize();
        return 2;
    }
    const char *me = world.rank == 0 ? "sync_bench" : NULL; /* one rank says what is wrong */
    if ((argc > 1 && !bench_int_arg(me, "devices", argv[1], 1, 64, &devices)) ||
        (argc > 2 && !bench_int_arg(me, "steps", argv[2], 1, 1000000, &steps))) {
        dp_world_finalize();
        return 2;
    }
    if (!bench_cpu_line("sync_bench", world.rank == 0)) {
        dp_world_finalize();
        return 1;
    }
    int count = 256;
    dp_dataset_t ds;
    if (bench_synthetic_images(count, &ds) != DP_OK) return 1;
    dp_model_t *lenet, *wide = wide_model();
    dp_model_builtin("lenet", &lenet);
    struct { const char *name; dp_model_t *model; int batch, steps; } cases[2] = {
        {"LeNet gradient", lenet, 256, steps}, {"64 MB gradient", wide, 8 * devices * world.size, steps / 5 + 2}};
    for (int c = 0; c < 2; c++) {
        double ar = sync_ms(cases[c].model, DP_SYNC_ALLREDUCE, devices, &world, &ds, cases[c].batch, cases[c].steps);
        double ps = sync_ms(cases[c].model, DP_SYNC_PS, devices, &world, &ds, cases[c].batch, cases[c].steps);
        if (world.rank == 0)
            printf("%-15s (%.2f MB), %d rank(s) x %d device(s): allreduce %.3f ms/step, parameter server "
                   "%.3f ms/step, ps/allreduce %.2fx\n",
                   cases[c].name, dp_model_num_params(cases[c].model) * 4.0 / 1e6, world.size, devices, ar, ps,
                   ps / ar);
    }
    dp_model_free(lenet);
    dp_model_free(wide);
    dp_dataset_free(&ds);
    dp_world_finalize();
    return 0;
}
