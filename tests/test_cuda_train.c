/* test_cuda_train.c - the trainer on cuda:0 (skipped without a GPU): LeNet,
 * 4 steps of momentum SGD (lr 0.2) on 400 synthetic 28x28 images.
 *
 *   1 device on the GPU against 1 CPU device: losses and parameters within
 *     TOL_CPU (conv and gemm sum in other orders on the GPU; the measured
 *     worst goes to the output so the tolerance can be justified);
 *   2 and 3 devices sharing the GPU (chunked, naive, overlap, parameter
 *     server) against 1 GPU device: parameters within 1e-4;
 *   the same seed twice on the GPU: the same bits;
 *   parameters moved GPU -> CPU (dp_trainer_params, dp_trainer_set_params)
 *     evaluate to the same accuracy, within one example;
 *   gradient clipping, 1 device and 2 with overlap: the update applies the
 *     unclipped sum times the coefficient of its norm, bit for bit, and the
 *     parameters are one CPU optimizer step with it;
 *   tests/models/tiny_resnet.cfg (batch norm, residual add, dropout, global
 *     average pooling) on 2 devices sharing the GPU with synchronised batch
 *     norm against 2 CPU devices: losses and parameters within TOL_CPU, and
 *     no deadlock (both devices meet inside the op while sharing the GPU's
 *     lock: an alarm fails the test after SYNC_BN_SECONDS). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/data.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"
#include "dptrain/parallel.h"
#include "test_cuda_common.h"
#include "testing.h"

#define STEPS 4
#define BATCH 64
#define TOL_CPU 1e-3
#define SYNC_BN_SECONDS 120

static const dp_backend_t *gpu;

typedef struct {
    const char *name;
    int devices;
    dp_allreduce_kind_t allreduce;
    int overlap;
    dp_sync_kind_t sync;
    int sync_bn;
} run_config_t;

typedef struct {
    double losses[STEPS];
    int correct, eval;
    float *params;
} run_result_t;

static int run(const dp_model_t *m, const dp_dataset_t *ds, const run_config_t *rc, const dp_backend_t *be,
               run_result_t *out) {
    int ids[3] = {0, 0, 0}; /* every device on GPU 0 (the CPU ignores this) */
    dp_trainer_config_t config = {.model = m, .num_devices = rc->devices, .threads_per_device = 1,
                                  .device_ids = be ? ids : NULL, .allreduce = rc->allreduce,
                                  .overlap = rc->overlap, .sync = rc->sync,
                                  .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.2f, .momentum = 0.9f},
                                  .seed = 21, .backend = be, .sync_batch_norm = rc->sync_bn};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "%s: trainer: %s", rc->name, dp_error_message());
    if (status != DP_OK) return 0;
    dp_loader_t *loader;
    DP_ASSERT(dp_loader_new(ds->count, BATCH, 1, 5, &loader) == DP_OK);
    dp_loader_start_epoch(loader, 0);
    out->correct = 0;
    int ok = 1;
    testing_batch_t b = {0};
    for (int s = 0; s < STEPS && ok; s++) {
        const int *indices;
        int n = dp_loader_next(loader, &indices);
        out->losses[s] = 0;
        status = dp_trainer_step(t, testing_batch(&b, ds, indices, n), &out->losses[s], &out->correct);
        CHECK(status == DP_OK, "%s: step %d: %s", rc->name, s, dp_error_message());
        ok = status == DP_OK;
    }
    testing_batch_free(&b);
    dp_loader_free(loader);
    if (ok) {
        status = testing_evaluate(t, ds, 100, &out->eval);
        CHECK(status == DP_OK, "%s: evaluate: %s", rc->name, dp_error_message());
        ok = status == DP_OK;
    }
    size_t np = dp_model_num_params(m);
    out->params = malloc(sizeof(float) * np);
    memcpy(out->params, dp_trainer_params(t, 0), sizeof(float) * np);
    dp_trainer_free(t);
    return ok;
}

static double params_violation(const float *a, const float *b, size_t n, double tol) {
    size_t worst;
    return testing_max_violation(a, b, n, tol, tol, &worst);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: sync batch norm on 2 devices of cuda:0 did not finish in time (deadlock?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* Synchronised batch norm with two devices on one GPU, against two CPU devices. */
static void check_sync_batch_norm(const dp_dataset_t *ds) {
    dp_model_t *m = NULL;
    dp_status_t st = dp_model_load(testing_path("models/tiny_resnet.cfg"), &m);
    CHECK(st == DP_OK, "tiny_resnet.cfg: %s", dp_error_message());
    if (st != DP_OK) return;
    const run_config_t two = {"2 devices sync bn", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE, 1};
    run_result_t cpu = {0}, g = {0};
    signal(SIGALRM, on_alarm);
    alarm(SYNC_BN_SECONDS);
    int ok = run(m, ds, &two, NULL, &cpu) && run(m, ds, &two, gpu, &g);
    alarm(0);
    if (ok) {
        size_t np = dp_model_num_params(m);
        double worst_loss = 0;
        for (int s = 0; s < STEPS; s++)
            worst_loss = fmax(worst_loss, fabs(g.losses[s] - cpu.losses[s]) / fabs(cpu.losses[s]));
        double v = params_violation(g.params, cpu.params, np, TOL_CPU);
        printf("  tiny_resnet, sync batch norm, 2 devices on cuda:0 vs 2 CPU devices: loss relative difference %.3g, "
               "parameters (running statistics included) violation %.3g at tol %g\n", worst_loss, v, TOL_CPU);
        CHECK(worst_loss <= TOL_CPU && v <= 1.0, "tiny_resnet with sync batch norm: GPU and CPU differ beyond %g",
              TOL_CPU);
    }
    free(cpu.params);
    free(g.params);
    dp_model_free(m);
}

/* One step of a trainer on cuda:0 (devices sharing it) with gradient
 * clipping at `clip` (0: none); *out = the gradient the update applied,
 * *params0 (when not NULL) = the initial parameters, *norm = the last norm. */
static dp_trainer_t *clip_step(const dp_model_t *m, const dp_dataset_t *ds, int devices, int overlap, float clip,
                               float *applied, float *params0, float *norm) {
    int ids[2] = {0, 0};
    dp_trainer_config_t config = {.model = m, .num_devices = devices, .threads_per_device = 1, .device_ids = ids,
                                  .overlap = overlap, .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.2f, .momentum = 0.9f},
                                  .seed = 21, .backend = gpu, .clip_grad_norm = clip};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "clipping trainer: %s", dp_error_message());
    if (status != DP_OK) return NULL;
    if (params0) memcpy(params0, dp_trainer_params(t, 0), sizeof(float) * dp_model_num_params(m));
    int indices[BATCH];
    for (int i = 0; i < BATCH; i++) indices[i] = i * 3;
    status = testing_step(t, ds, indices, BATCH, NULL, NULL);
    CHECK(status == DP_OK, "clipping step: %s", dp_error_message());
    dp_trainer_read_grads(t, applied);
    *norm = dp_trainer_last_grad_norm(t);
    CHECK(dp_trainer_check_devices(t) == DP_OK, "clipping: %s", dp_error_message());
    return t;
}

/* Gradient clipping on the GPU (the norm downloaded, the sum scaled on the
 * device): the update applies exactly the unclipped sum times the
 * coefficient of its norm, the norm is the CPU's of that sum, and the
 * parameters are one step of the CPU's optimizer with it (rtol 1e-6). */
static void check_clip(const dp_model_t *m, const dp_dataset_t *ds, int devices, int overlap) {
    const size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *g = malloc(sizeof(float) * nt), *applied = malloc(sizeof(float) * nt), *p = malloc(sizeof(float) * np);
    float none, norm_seen;
    dp_trainer_t *plain = clip_step(m, ds, devices, overlap, 0.0f, g, NULL, &none);
    const float norm = dp_clip_total_norm(dp_sum_squares(g, nt)), bound = norm / 2;
    dp_trainer_t *clipped = plain ? clip_step(m, ds, devices, overlap, bound, applied, p, &norm_seen) : NULL;
    if (clipped) {
        CHECK(isnan(none) && norm_seen == norm, "%d device(s): norm %.9g, the CPU's of the sum %.9g", devices,
              norm_seen, norm);
        const float coef = dp_clip_coefficient(norm, bound);
        size_t differ = 0;
        for (size_t i = 0; i < nt; i++) differ += applied[i] != g[i] * coef;
        CHECK(differ == 0, "%d device(s): %zu applied gradients are not the sum times %.9g", devices, differ, coef);
        dp_optimizer_t *ref;
        DP_ASSERT(dp_optimizer_new(&(dp_optim_config_t){.kind = DP_OPTIM_MOMENTUM, .lr = 0.2f, .momentum = 0.9f}, nt,
                                   &ref) == DP_OK);
        dp_optimizer_step(ref, p, applied);
        dp_optimizer_free(ref);
        size_t worst;
        double v = testing_max_violation(dp_trainer_params(clipped, devices - 1), p, np, 1e-6, 1e-7, &worst);
        printf("  clipping on %d device(s) of cuda:0%s: norm %.6g clipped at %.6g, the sum times %.6g bit for bit, "
               "parameters violation %.3g\n", devices, overlap ? " (overlap)" : "", norm, bound, coef, v);
        CHECK(v <= 1.0, "%d device(s): parameter %zu %.9g, one CPU step %.9g", devices, worst,
              dp_trainer_params(clipped, devices - 1)[worst], p[worst]);
        CHECK(dp_trainer_check_replicas(clipped) == DP_OK, "%s", dp_error_message());
    }
    dp_trainer_free(plain);
    dp_trainer_free(clipped);
    free(g);
    free(applied);
    free(p);
}

int main(void) {
    gpu = cuda_backend_or_skip("test_cuda_train");
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    size_t np = dp_model_num_params(m);
    dp_dataset_t ds = testing_column_dataset(400, 28, 10, 2, 3, 64, 3);
    const run_config_t one = {"1 device", 1, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE, 0};
    run_result_t cpu = {0}, g1 = {0}, again = {0};
    if (!run(m, &ds, &one, NULL, &cpu) || !run(m, &ds, &one, gpu, &g1) || !run(m, &ds, &one, gpu, &again))
        return testing_finish("test_cuda_train");

    double worst_loss = 0;
    for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, fabs(g1.losses[s] - cpu.losses[s]) / fabs(cpu.losses[s]));
    double v = params_violation(g1.params, cpu.params, np, TOL_CPU);
    printf("  1 GPU device vs 1 CPU device: loss relative difference %.3g, parameters violation %.3g at tol %g\n",
           worst_loss, v, TOL_CPU);
    CHECK(worst_loss <= TOL_CPU, "GPU losses differ from the CPU's by %.3g relative", worst_loss);
    CHECK(v <= 1.0, "GPU parameters differ from the CPU's (violation %.3g at tol %g)", v, TOL_CPU);
    CHECK(abs(g1.eval - cpu.eval) <= 1, "GPU evaluation %d correct, CPU %d", g1.eval, cpu.eval);
    CHECK(memcmp(g1.params, again.params, sizeof(float) * np) == 0 && g1.losses[STEPS - 1] == again.losses[STEPS - 1],
          "the same seed twice on the GPU gave different bits");

    const run_config_t many[] = {
        {"2 devices chunked", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE, 0},
        {"3 devices chunked", 3, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE, 0},
        {"2 devices naive", 2, DP_ALLREDUCE_NAIVE, 0, DP_SYNC_ALLREDUCE, 0},
        {"2 devices overlap", 2, DP_ALLREDUCE_CHUNKED, 1, DP_SYNC_ALLREDUCE, 0},
        {"2 devices ps", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_PS, 0},
    };
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) {
        run_result_t r = {0};
        if (run(m, &ds, &many[i], gpu, &r)) {
            double w = params_violation(r.params, g1.params, np, 1e-4);
            printf("  %-18s on cuda:0 vs 1 device: parameters violation %.3g at tol 1e-4\n", many[i].name, w);
            CHECK(w <= 1.0, "%s: parameters differ from 1 GPU device's (violation %.3g at 1e-4)", many[i].name, w);
        }
        free(r.params);
    }

    check_sync_batch_norm(&ds);
    check_clip(m, &ds, 1, 0);
    check_clip(m, &ds, 2, 1);

    /* GPU parameters continue on the CPU: the same evaluation */
    dp_trainer_config_t config = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 1};
    dp_trainer_t *t = NULL;
    CHECK(dp_trainer_new(&config, &t) == DP_OK, "cpu trainer: %s", dp_error_message());
    if (t) {
        dp_trainer_set_params(t, g1.params);
        int eval = -1;
        CHECK(testing_evaluate(t, &ds, 100, &eval) == DP_OK && abs(eval - g1.eval) <= 1,
              "GPU parameters on the CPU: %d correct, on the GPU %d", eval, g1.eval);
        dp_trainer_free(t);
    }
    free(cpu.params);
    free(g1.params);
    free(again.params);
    dp_model_free(m);
    dp_dataset_free(&ds);
    return testing_finish("test_cuda_train");
}
