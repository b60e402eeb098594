/* test_split.c - devices on several backend tables (config.backends: one
 * table per GPU), on the split CPU backend (backend_cpu_split.c), the test
 * double of distinct GPUs:
 *
 *   the tables: split:N is one table per N (the same for the same N), named
 *     "split", host_memory 0; NULL outside 0..63;
 *   each table works on its own memory (upload/download round trip, copy,
 *     reduce_range and broadcast_range among its own allocations) and aborts
 *     with one line naming the function and both tables when handed memory
 *     of another (download, reduce_range's sources, broadcast_range's
 *     destinations, optimizer_update, copy from host memory, free): each in
 *     a child process, its exit by SIGABRT and its stderr line checked;
 *   the trainer on split:0,split:1,split:2 (config.backends, Adam, overlap,
 *     --augment) and on split:0,split:0,split:1 (two devices on one table):
 *     the same losses, parameters and dp_trainer_optimizer state (device 2's,
 *     downloaded from its own table) as on 3 CPU devices, bit for bit;
 *     a NULL entry in config.backends is refused with one line. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dptrain/backend.h"
#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "testing.h"

static void check_tables(void) {
    const dp_backend_t *a = dp_backend_cpu_split(0), *b = dp_backend_cpu_split(1), *last = dp_backend_cpu_split(63);
    CHECK(a && b && last && a != b && a->ctx != b->ctx && dp_backend_cpu_split(1) == b,
          "split: one table per index, the same table for the same index");
    CHECK(!dp_backend_cpu_split(64) && !dp_backend_cpu_split(-1), "split: indices outside 0..63 have no table");
    CHECK(strcmp(a->name, "split") == 0 && !a->host_memory && a->optimizer_download && !a->set_precision,
          "split: name %s, host_memory %d: not the staged backend's kind", a->name, a->host_memory);
    const dp_backend_t *named = NULL;
    CHECK(dp_backend_by_name("split", 5, &named) == DP_OK && named == dp_backend_cpu_split(5),
          "split: by name: %s", dp_error_message());
}

/* Each table on its own memory. */
static void check_own_memory(void) {
    const dp_backend_t *be = dp_backend_cpu_split(2);
    enum { N = 1000 };
    float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.25f;
    float *x = be->alloc(be->ctx, sizeof host, "x"), *y = be->alloc(be->ctx, sizeof host, "y");
    DP_ASSERT(x && y);
    be->upload(be->ctx, x, host, sizeof host);
    be->copy(be->ctx, y, x, sizeof host);
    const float *pair[2] = {x, y};
    be->reduce_range(be->ctx, y, pair, 2, 10, 20); /* y[10..30) = 2 x */
    float *both[2] = {x, y};
    be->broadcast_range(be->ctx, both, 2, y, 500, 5); /* x[500..505) = y's */
    be->download(be->ctx, back, y, sizeof back);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == (i >= 10 && i < 30 ? 2.0f : 1.0f) * host[i];
    CHECK(ok, "split: own memory: copy and reduce_range give the wrong values");
    be->download(be->ctx, back, x, sizeof back);
    CHECK(memcmp(back, host, sizeof back) == 0, "split: broadcast_range of equal values changed x");
    be->free(be->ctx, x);
    be->free(be->ctx, y);
}

typedef enum { MISUSE_DOWNLOAD, MISUSE_REDUCE, MISUSE_BROADCAST, MISUSE_UPDATE, MISUSE_COPY_HOST, MISUSE_FREE } misuse_t;

/* In a child: table 3 handed memory of table 4 (or host memory); the child
 * must die of SIGABRT with one stderr line naming `function` and `owner`. */
static void check_misuse(misuse_t what, const char *function, const char *owner) {
    char path[4096];
    snprintf(path, sizeof path, "%s", testing_tmp_file("misuse.err"));
    fflush(NULL);
    pid_t pid = fork();
    DP_ASSERT(pid >= 0);
    if (pid == 0) {
        if (!freopen(path, "w", stderr)) _exit(3);
        const dp_backend_t *mine = dp_backend_cpu_split(3), *other = dp_backend_cpu_split(4);
        float *own = mine->alloc(mine->ctx, 4096, "own"), *theirs = other->alloc(other->ctx, 4096, "theirs");
        static float host[1024];
        if (!own || !theirs) _exit(3);
        const float *sources[2] = {own, theirs};
        float *targets[2] = {own, theirs};
        dp_optimizer_t *opt = NULL;
        dp_optim_config_t cf = {.kind = DP_OPTIM_SGD, .lr = 0.1f};
        switch (what) {
        case MISUSE_DOWNLOAD: mine->download(mine->ctx, host, theirs, 64); break;
        case MISUSE_REDUCE: mine->reduce_range(mine->ctx, own, sources, 2, 0, 16); break;
        case MISUSE_BROADCAST: mine->broadcast_range(mine->ctx, targets, 2, own, 0, 16); break;
        case MISUSE_UPDATE:
            if (dp_optimizer_new(&cf, 16, &opt) != DP_OK) _exit(3);
            dp_optimizer_begin_step(opt);
            mine->optimizer_update(mine->ctx, opt, theirs, own, 0, 16);
            break;
        case MISUSE_COPY_HOST: mine->copy(mine->ctx, own, host, 64); break;
        case MISUSE_FREE: mine->free(mine->ctx, theirs); break;
        }
        _exit(0); /* not refused */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char line[512] = "", extra[512] = "";
    FILE *f = fopen(path, "r");
    int lines = 0;
    if (f) {
        if (fgets(line, sizeof line, f)) lines++;
        while (fgets(extra, sizeof extra, f)) /* qemu-user (the aarch64 check) adds its own line about the signal */
            lines += strncmp(extra, "qemu: ", 6) != 0;
        fclose(f);
    }
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "misuse of %s: not aborted (status %d)", function,
          status);
    CHECK(lines == 1 && strstr(line, "split:3") && strstr(line, function) && strstr(line, owner),
          "misuse of %s: stderr '%s' (%d lines) does not name split:3, the function and %s", function, line, lines,
          owner);
}

#define STEPS 3
#define BATCH 48
#define DEVICES 3

typedef struct {
    double losses[STEPS];
    float *params, *state;
} result_t;

static int train(const dp_model_t *m, const dp_dataset_t *ds, const dp_backend_t *const *backends, const char *name,
                 result_t *out) {
    dp_trainer_config_t config = {.model = m, .num_devices = DEVICES, .threads_per_device = 1, .overlap = 1,
                                  .optim = {.kind = DP_OPTIM_ADAM, .lr = 1e-3f}, .seed = 6, .backends = backends};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "trainer on %s: %s", name, dp_error_message());
    if (status != DP_OK) return 0;
    const dp_augment_t augment = {.crop_padding = 3, .flip = 1};
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_memory_source_new((dp_dataset_t *)ds, &augment, 0, &src) == DP_OK);
    int ok = testing_train_source_steps(t, src, 6, STEPS, BATCH, 5, out->losses, name);
    dp_batch_source_free(src);
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    out->params = malloc(sizeof(float) * np);
    out->state = malloc(sizeof(float) * nt);
    DP_ASSERT(out->params && out->state);
    memcpy(out->params, dp_trainer_params(t, DEVICES - 1), sizeof(float) * np);
    memcpy(out->state, dp_optimizer_state(dp_trainer_optimizer(t, DEVICES - 1), 1, NULL), sizeof(float) * nt);
    CHECK(ok && dp_trainer_check_replicas(t) == DP_OK, "%s: replicas differ: %s", name, dp_error_message());
    dp_trainer_free(t);
    return ok;
}

static void check_trainer(void) {
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    dp_dataset_t ds = testing_column_dataset(200, 28, 10, 2, 3, 64, 3);
    const dp_backend_t *cpu[DEVICES] = {dp_backend_cpu(), dp_backend_cpu(), dp_backend_cpu()};
    const dp_backend_t *apart[DEVICES] = {dp_backend_cpu_split(0), dp_backend_cpu_split(1), dp_backend_cpu_split(2)};
    const dp_backend_t *shared[DEVICES] = {dp_backend_cpu_split(0), dp_backend_cpu_split(0), dp_backend_cpu_split(1)};
    result_t want = {.params = NULL}, got[2] = {{.params = NULL}, {.params = NULL}};
    const dp_backend_t *const *runs[2] = {apart, shared};
    const char *names[2] = {"split:0,split:1,split:2", "split:0,split:0,split:1"};
    if (train(m, &ds, cpu, "cpu:0,cpu:1,cpu:2", &want)) {
        size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
        for (int r = 0; r < 2; r++) {
            if (!train(m, &ds, runs[r], names[r], &got[r])) continue;
            int nonzero = 0;
            for (size_t i = 0; i < nt; i++) nonzero += got[r].state[i] != 0.0f;
            CHECK(memcmp(want.losses, got[r].losses, sizeof want.losses) == 0, "%s: losses differ", names[r]);
            CHECK(memcmp(want.params, got[r].params, sizeof(float) * np) == 0, "%s: parameters differ", names[r]);
            CHECK(nonzero > 0 && memcmp(want.state, got[r].state, sizeof(float) * nt) == 0,
                  "%s: dp_trainer_optimizer's state differs (%d nonzero)", names[r], nonzero);
        }
    }
    free(want.params), free(want.state);
    for (int r = 0; r < 2; r++) free(got[r].params), free(got[r].state);

    const dp_backend_t *missing[DEVICES] = {dp_backend_cpu_split(0), NULL, dp_backend_cpu_split(1)};
    dp_trainer_config_t config = {.model = m, .num_devices = DEVICES, .threads_per_device = 1,
                                  .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .backends = missing};
    dp_trainer_t *t = NULL;
    CHECK(dp_trainer_new(&config, &t) == DP_ERR_ARG && !t && strcmp(dp_error_message(), "device 1 has no backend") == 0,
          "a NULL backend: %s", dp_error_message());
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    check_tables();
    check_own_memory();
    check_misuse(MISUSE_DOWNLOAD, "download", "split:4's");
    check_misuse(MISUSE_REDUCE, "reduce_range (a source)", "split:4's");
    check_misuse(MISUSE_BROADCAST, "broadcast_range (a destination)", "split:4's");
    check_misuse(MISUSE_UPDATE, "optimizer_update (parameters)", "split:4's");
    check_misuse(MISUSE_COPY_HOST, "copy (source)", "no device's");
    check_misuse(MISUSE_FREE, "free", "split:4's");
    check_trainer();
    return testing_finish("test_split");
}
