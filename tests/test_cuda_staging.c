/* test_cuda_staging.c - what the generic (non-host-memory) paths need from
 * the CUDA backend (skipped without a GPU). Written and compiled without a
 * GPU (scripts/check_cuda_build.sh); the same paths run on the CPU through
 * the staged backend (tests/cli_staged.sh, cli_staged_mpi.sh).
 *
 *   optimizer_download: after 3 Adam (then AdamW) steps on the GPU, the host buffers
 *     hold the GPU's state, within 1e-6 relative of the CPU's (as the
 *     parameters in test_cuda_backend.c);
 *   optimizer_upload: host state rewritten (to the CPU optimizer's), then
 *     uploaded: a 4th step from it gives the CPU's 4th step;
 *   optimizer_forget: a forgotten optimizer downloads nothing (its host
 *     buffers stay as they are);
 *   the trainer on cuda:0 with Adam and --augment crop:4,flip (the source's
 *     bytes augmented on the host, uploaded): 3 steps within 1e-3 of 1 CPU device (the loss and
 *     parameters, test_cuda_train.c's tolerance), and dp_trainer_optimizer's
 *     state (downloaded) within the same of the CPU trainer's;
 *   set_precision tf32, bf16, then fp32 succeed; in FP32 again the trainer
 *     gives the same bits as before. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "test_cuda_common.h"
#include "testing.h"

static const dp_backend_t *be;

static void fill(float *x, int n, unsigned seed) {
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) x[i] = dp_rng_normal(&rng);
}

static void check_optimizer_state(dp_optim_kind_t kind) {
    enum { N = 3000 };
    static float p_cpu[N], p_gpu[N], g[N];
    dp_optim_config_t config = {.kind = kind, .lr = 1e-3f, .weight_decay = kind == DP_OPTIM_ADAMW ? 0.1f : 1e-2f};
    const char *name = dp_optim_kind_name(kind);
    fill(p_cpu, N, 20);
    float *dp_ = be->alloc(be->ctx, sizeof p_cpu, "params"), *dg = be->alloc(be->ctx, sizeof g, "grads");
    CHECK(dp_ && dg, "alloc: %s", dp_error_message());
    if (!dp_ || !dg) return;
    be->upload(be->ctx, dp_, p_cpu, sizeof p_cpu);
    dp_optimizer_t *cpu = NULL, *gpu = NULL;
    DP_ASSERT(dp_optimizer_new(&config, N, &cpu) == DP_OK && dp_optimizer_new(&config, N, &gpu) == DP_OK);
    for (int step = 0; step < 3; step++) {
        fill(g, N, 30 + step);
        be->upload(be->ctx, dg, g, sizeof g);
        dp_optimizer_begin_step(cpu);
        dp_optimizer_begin_step(gpu);
        dp_optimizer_step_range(cpu, p_cpu, g, 0, N);
        be->optimizer_update(be->ctx, gpu, dp_, dg, 0, N);
    }
    CHECK(be->optimizer_download && be->optimizer_upload && be->optimizer_forget, "the CUDA backend lacks them");
    if (!be->optimizer_download || !be->optimizer_upload || !be->optimizer_forget) return;
    /* the host buffers are still the zeros they were made with */
    CHECK(dp_optimizer_state(gpu, 0, NULL)[7] == 0.0f, "host state changed before a download");
    be->optimizer_download(be->ctx, gpu);
    for (int s = 0; s < 2; s++) {
        size_t worst = 0;
        double v = testing_max_violation(dp_optimizer_state(gpu, s, NULL), dp_optimizer_state(cpu, s, NULL), N, 1e-6,
                                         1e-9, &worst);
        printf("  %s state %d downloaded after 3 steps: max violation %.3g\n", name, s, v);
        CHECK(v <= 1.0 && dp_optimizer_state(cpu, s, NULL)[worst] != 0.0f, "%s state %d: element %zu GPU %.9g CPU %.9g",
              name, s, worst, (double)dp_optimizer_state(gpu, s, NULL)[worst], (double)dp_optimizer_state(cpu, s, NULL)[worst]);
    }
    /* upload: the GPU continues from the CPU optimizer's state and parameters */
    for (int s = 0; s < 2; s++)
        memcpy(dp_optimizer_state(gpu, s, NULL), dp_optimizer_state(cpu, s, NULL), sizeof(float) * N);
    be->optimizer_upload(be->ctx, gpu);
    be->upload(be->ctx, dp_, p_cpu, sizeof p_cpu);
    fill(g, N, 40);
    be->upload(be->ctx, dg, g, sizeof g);
    dp_optimizer_begin_step(cpu);
    dp_optimizer_begin_step(gpu);
    dp_optimizer_step_range(cpu, p_cpu, g, 0, N);
    be->optimizer_update(be->ctx, gpu, dp_, dg, 0, N);
    be->download(be->ctx, p_gpu, dp_, sizeof p_gpu);
    size_t worst = 0;
    double v = testing_max_violation(p_gpu, p_cpu, N, 1e-6, 1e-7, &worst);
    printf("  %s step 4 after an upload of the CPU's state: max violation %.3g\n", name, v);
    CHECK(v <= 1.0, "%s after upload: parameter %zu GPU %.9g CPU %.9g", name, worst, (double)p_gpu[worst], (double)p_cpu[worst]);
    /* forget: nothing left to download */
    be->optimizer_forget(be->ctx, gpu);
    dp_optimizer_state(gpu, 0, NULL)[5] = 12345.0f;
    be->optimizer_download(be->ctx, gpu);
    CHECK(dp_optimizer_state(gpu, 0, NULL)[5] == 12345.0f, "a forgotten optimizer still downloads");
    dp_optimizer_free(cpu);
    dp_optimizer_free(gpu);
    be->free(be->ctx, dp_);
    be->free(be->ctx, dg);
}

#define STEPS 3

/* 3 steps of Adam with augmentation; params and the optimizer's first state
 * (copies, n floats each) and the losses. */
static int train(const dp_model_t *m, const dp_dataset_t *ds, const dp_backend_t *backend, float *params,
                 float *state, double *losses) {
    int ids[1] = {0};
    dp_trainer_config_t config = {.model = m, .num_devices = 1, .threads_per_device = 1,
                                  .device_ids = backend ? ids : NULL,
                                  .optim = {.kind = DP_OPTIM_ADAM, .lr = 1e-3f}, .seed = 4, .backend = backend};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "trainer on %s: %s", backend ? "cuda:0" : "cpu", dp_error_message());
    if (status != DP_OK) return 0;
    const dp_augment_t augment = {.crop_padding = 4, .flip = 1};
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_memory_source_new((dp_dataset_t *)ds, &augment, 0, &src) == DP_OK);
    int ok = testing_train_source_steps(t, src, 4, STEPS, 64, 7, losses, backend ? "cuda:0" : "cpu");
    dp_batch_source_free(src);
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    memcpy(params, dp_trainer_params(t, 0), sizeof(float) * np);
    memcpy(state, dp_optimizer_state(dp_trainer_optimizer(t, 0), 0, NULL), sizeof(float) * nt);
    dp_trainer_free(t);
    return ok;
}

static void check_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    dp_dataset_t ds = testing_column_dataset(300, 28, 10, 2, 3, 64, 3);
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *p_cpu = malloc(sizeof(float) * np), *p_gpu = malloc(sizeof(float) * np), *p_again = malloc(sizeof(float) * np);
    float *s_cpu = malloc(sizeof(float) * nt), *s_gpu = malloc(sizeof(float) * nt), *s_again = malloc(sizeof(float) * nt);
    double l_cpu[STEPS], l_gpu[STEPS], l_again[STEPS];
    DP_ASSERT(p_cpu && p_gpu && p_again && s_cpu && s_gpu && s_again);
    if (train(m, &ds, NULL, p_cpu, s_cpu, l_cpu) && train(m, &ds, be, p_gpu, s_gpu, l_gpu)) {
        size_t worst = 0;
        double vp = testing_max_violation(p_gpu, p_cpu, np, 1e-3, 1e-3, &worst);
        double vs = testing_max_violation(s_gpu, s_cpu, nt, 1e-3, 1e-6, &worst);
        double vl = fabs(l_gpu[STEPS - 1] - l_cpu[STEPS - 1]) / fabs(l_cpu[STEPS - 1]);
        printf("  trainer, adam + augment, cuda:0 vs cpu: loss %.3g relative, parameters violation %.3g, "
               "state violation %.3g (tol 1e-3)\n", vl, vp, vs);
        CHECK(vl <= 1e-3 && vp <= 1.0 && vs <= 1.0, "cuda:0 and cpu differ beyond 1e-3");
        int nonzero = 0;
        for (size_t i = 0; i < nt; i++) nonzero += s_gpu[i] != 0.0f;
        CHECK(nonzero > 0, "dp_trainer_optimizer's state is all zeros on cuda:0 (not downloaded)");
        /* TF32, bf16, then FP32: the backend takes each, and FP32 again gives the same bits */
        CHECK(be->set_precision && be->set_precision(be->ctx, DP_PRECISION_TF32) == DP_OK &&
                  be->set_precision(be->ctx, DP_PRECISION_BF16) == DP_OK &&
                  be->set_precision(be->ctx, DP_PRECISION_FP32) == DP_OK,
              "set_precision: %s", dp_error_message());
        if (train(m, &ds, be, p_again, s_again, l_again))
            CHECK(memcmp(p_again, p_gpu, sizeof(float) * np) == 0 && l_again[STEPS - 1] == l_gpu[STEPS - 1],
                  "TF32, bf16, then FP32 again: not the same bits as before");
    }
    free(p_cpu), free(p_gpu), free(p_again), free(s_cpu), free(s_gpu), free(s_again);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_staging");
    check_optimizer_state(DP_OPTIM_ADAM);
    check_optimizer_state(DP_OPTIM_ADAMW);
    check_trainer();
    return testing_finish("test_cuda_staging");
}
