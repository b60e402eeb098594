/* test_staged.c - the staged CPU backend (backend_cpu_staged.c), the test
 * double of a GPU, through the same calls test_cuda_staging.c makes on a GPU:
 *
 *   the table: name "staged", host_memory 0 (a batch's bytes are uploaded),
 *     no set_precision, the optimizer state calls present;
 *   optimizer_update keeps the state in a copy of its own: after 3 Adam steps
 *     the host buffers are still zeros; optimizer_download gives the CPU
 *     optimizer's state bit for bit, and the parameters are the CPU's bits;
 *   optimizer_upload: host state rewritten (to another optimizer's), then
 *     uploaded: the next step is that optimizer's next step, bit for bit;
 *   a restore without upload (the host's step count jumps): the next update
 *     takes the host state (as the CUDA backend does);
 *   optimizer_forget: nothing left to download;
 *   the trainer on 2 staged devices (Adam, overlap, --augment): the same
 *     losses, parameters and dp_trainer_optimizer state (downloaded) as on 2
 *     CPU devices, bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "testing.h"

enum { N = 2500 };

static void fill(float *x, size_t n, uint64_t seed) {
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)dp_rng_normal(&rng);
}

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

/* One step of both: the CPU optimizer on host memory, the staged one on
 * its device memory (two ranges, in either order). */
static void step_both(const dp_backend_t *be, dp_optimizer_t *cpu, float *p_cpu, dp_optimizer_t *staged, float *p_dev,
                      float *g_dev, uint64_t seed) {
    static float g[N];
    fill(g, N, seed);
    be->upload(be->ctx, g_dev, g, sizeof g);
    dp_optimizer_begin_step(cpu);
    dp_optimizer_begin_step(staged);
    dp_optimizer_step_range(cpu, p_cpu, g, 0, N);
    be->optimizer_update(be->ctx, staged, p_dev, g_dev, 700, N - 700);
    be->optimizer_update(be->ctx, staged, p_dev, g_dev, 0, 700);
}

static void check_table(void) {
    const dp_backend_t *be = dp_backend_cpu_staged();
    CHECK(strcmp(be->name, "staged") == 0 && !be->host_memory, "staged: name %s, host_memory %d", be->name,
          be->host_memory);
    CHECK(be->input_from_bytes && !be->set_precision && be->optimizer_download && be->optimizer_upload &&
              be->optimizer_forget,
          "staged: the table's optional functions are not a GPU's");
    /* (the tables themselves; finding backends by name is
     * test_backend_registry's) */
    const dp_backend_t *cpu = dp_backend_cpu();
    CHECK(!cpu->optimizer_download && !cpu->optimizer_upload && !cpu->optimizer_forget && !cpu->set_precision,
          "cpu: the host optimizer's buffers are its state; it has no TF32");
}

static void check_optimizer_state(void) {
    const dp_backend_t *be = dp_backend_cpu_staged();
    static float p_cpu[N], p_host[N], other_p[N];
    dp_optim_config_t config = {.kind = DP_OPTIM_ADAM, .lr = 1e-3f, .weight_decay = 1e-2f};
    fill(p_cpu, N, 20);
    float *p_dev = be->alloc(be->ctx, sizeof p_cpu, "params"), *g_dev = be->alloc(be->ctx, sizeof p_cpu, "grads");
    DP_ASSERT(p_dev && g_dev);
    be->upload(be->ctx, p_dev, p_cpu, sizeof p_cpu);
    dp_optimizer_t *cpu, *staged, *other;
    DP_ASSERT(dp_optimizer_new(&config, N, &cpu) == DP_OK && dp_optimizer_new(&config, N, &staged) == DP_OK &&
              dp_optimizer_new(&config, N, &other) == DP_OK);
    for (int s = 0; s < 3; s++) step_both(be, cpu, p_cpu, staged, p_dev, g_dev, 30 + (uint64_t)s);
    int zeros = 1;
    for (int i = 0; i < N; i++) zeros &= dp_optimizer_state(staged, 0, NULL)[i] == 0.0f;
    CHECK(zeros, "the host buffers changed without a download (the state is not the device's own)");
    be->optimizer_download(be->ctx, staged);
    CHECK(same_floats(dp_optimizer_state(staged, 0, NULL), dp_optimizer_state(cpu, 0, NULL), N) &&
              same_floats(dp_optimizer_state(staged, 1, NULL), dp_optimizer_state(cpu, 1, NULL), N),
          "downloaded state: not the CPU optimizer's bits");
    be->download(be->ctx, p_host, p_dev, sizeof p_host);
    CHECK(same_floats(p_host, p_cpu, N), "parameters after 3 steps: not the CPU's bits");

    /* upload: continue from `other`'s state (5 steps of other gradients) */
    memcpy(other_p, p_cpu, sizeof other_p);
    static float g[N];
    for (int s = 0; s < 5; s++) {
        fill(g, N, 50 + (uint64_t)s);
        dp_optimizer_begin_step(other);
        dp_optimizer_step_range(other, other_p, g, 0, N);
    }
    for (int i = 0; i < 2; i++) {
        memcpy(dp_optimizer_state(staged, i, NULL), dp_optimizer_state(other, i, NULL), sizeof(float) * N);
        memcpy(dp_optimizer_state(cpu, i, NULL), dp_optimizer_state(other, i, NULL), sizeof(float) * N);
    }
    dp_optimizer_set_steps(staged, dp_optimizer_steps(other));
    dp_optimizer_set_steps(cpu, dp_optimizer_steps(other));
    be->optimizer_upload(be->ctx, staged);
    step_both(be, cpu, p_cpu, staged, p_dev, g_dev, 60);
    be->download(be->ctx, p_host, p_dev, sizeof p_host);
    CHECK(same_floats(p_host, p_cpu, N), "after optimizer_upload: not the CPU's next step");

    /* a restore without an upload: the step count jumps, the host state is taken */
    fill(dp_optimizer_state(cpu, 0, NULL), N, 70);
    memcpy(dp_optimizer_state(staged, 0, NULL), dp_optimizer_state(cpu, 0, NULL), sizeof(float) * N);
    memcpy(dp_optimizer_state(staged, 1, NULL), dp_optimizer_state(cpu, 1, NULL), sizeof(float) * N);
    dp_optimizer_set_steps(cpu, 20);
    dp_optimizer_set_steps(staged, 20);
    step_both(be, cpu, p_cpu, staged, p_dev, g_dev, 80);
    be->download(be->ctx, p_host, p_dev, sizeof p_host);
    CHECK(same_floats(p_host, p_cpu, N), "after a restore through the host buffers: not the CPU's step");

    be->optimizer_forget(be->ctx, staged);
    dp_optimizer_state(staged, 0, NULL)[3] = 42.0f;
    be->optimizer_download(be->ctx, staged);
    CHECK(dp_optimizer_state(staged, 0, NULL)[3] == 42.0f, "a forgotten optimizer still downloads");
    dp_optimizer_free(cpu);
    dp_optimizer_free(staged);
    dp_optimizer_free(other);
    be->free(be->ctx, p_dev);
    be->free(be->ctx, g_dev);
}

#define STEPS 3
#define BATCH 48

typedef struct {
    double losses[STEPS];
    float *params, *state;
} result_t;

static int train(const dp_model_t *m, const dp_dataset_t *ds, const dp_backend_t *be, result_t *out) {
    dp_trainer_config_t config = {.model = m, .num_devices = 2, .threads_per_device = 1, .overlap = 1,
                                  .optim = {.kind = DP_OPTIM_ADAM, .lr = 1e-3f}, .seed = 6, .backend = be};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "trainer on %s: %s", be->name, dp_error_message());
    if (status != DP_OK) return 0;
    const dp_augment_t augment = {.crop_padding = 3, .flip = 1};
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_memory_source_new((dp_dataset_t *)ds, &augment, 0, &src) == DP_OK);
    int ok = testing_train_source_steps(t, src, 6, STEPS, BATCH, 5, out->losses, be->name);
    dp_batch_source_free(src);
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    out->params = malloc(sizeof(float) * np);
    out->state = malloc(sizeof(float) * nt);
    DP_ASSERT(out->params && out->state);
    memcpy(out->params, dp_trainer_params(t, 1), sizeof(float) * np);
    memcpy(out->state, dp_optimizer_state(dp_trainer_optimizer(t, 1), 1, NULL), sizeof(float) * nt);
    dp_trainer_free(t);
    return ok;
}

static void check_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    dp_dataset_t ds = testing_column_dataset(200, 28, 10, 2, 3, 64, 3);
    result_t cpu = {0}, staged = {0};
    if (train(m, &ds, dp_backend_cpu(), &cpu) && train(m, &ds, dp_backend_cpu_staged(), &staged)) {
        size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
        int nonzero = 0;
        for (size_t i = 0; i < nt; i++) nonzero += staged.state[i] != 0.0f;
        CHECK(memcmp(cpu.losses, staged.losses, sizeof cpu.losses) == 0, "trainer: losses differ");
        CHECK(same_floats(cpu.params, staged.params, np), "trainer: parameters differ");
        CHECK(nonzero > 0 && same_floats(cpu.state, staged.state, nt),
              "trainer: dp_trainer_optimizer's state differs (%d nonzero)", nonzero);
    }
    free(cpu.params), free(cpu.state), free(staged.params), free(staged.state);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    check_table();
    check_optimizer_state();
    check_trainer();
    return testing_finish("test_staged");
}
