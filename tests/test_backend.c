/* test_backend.c - the device backend seam (backend.h): a second,
 * deliberately trivial backend built here, "checked", is the CPU backend
 * with every function wrapped:
 *   - every allocation is its own mmap, filled with NaN poison when it is
 *     made (nothing may rely on fresh memory being zero) and when it is
 *     freed (then unmapped, so a use after free faults); allocations and
 *     frees are counted and must balance once the trainer is gone;
 *   - uploads, downloads and op calls are counted (host accesses through
 *     the device API);
 *   - while no backend function runs, every allocation is mprotect'ed
 *     PROT_NONE: a wrapper opens them all, runs the CPU function, closes
 *     them again (one global lock serialises the wrappers, so this also
 *     holds with 2 devices). Any touch of device memory from outside the
 *     backend (the trainer reading a loss, a memset of the gradients, a
 *     copy of the parameters) faults, and the SIGSEGV handler names it and
 *     fails the test.
 * LeNet trains a few steps through the trainer on it (1 and 2 devices,
 * chunked, naive, overlapped, parameter server) and must give the CPU
 * backend's losses, accuracy and parameters bit for bit.
 * Its downloads can also be made to fail as a GPU's do (poison left in the
 * copy, the failure told by backend.h's `failure`): the trainer must report
 * that failure, never the poison it read, and dp_fit must write no
 * checkpoint from it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dptrain/backend.h"
#include "dptrain/device.h"
#include "dptrain/fit.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "testing.h"

/* --- The checked backend ------------------------------------------------------ */

#define MAX_REGIONS 4096

typedef struct {
    unsigned char *base;
    size_t mapped; /* bytes, whole pages */
    int live;
} region_t;

static struct {
    pthread_mutex_t lock; /* recursive: an op may allocate (arena growth) */
    int depth;            /* nesting of wrappers on the lock's owner */
    int protect;          /* 1: memory is PROT_NONE outside the wrappers */
    int expect_fault;     /* the probe children of test_protection_catches */
    region_t regions[MAX_REGIONS];
    int num_regions;
    long allocs, frees, uploads, downloads, copies, ops, metrics;
    size_t upload_bytes, download_bytes;
    size_t fail_downloads_over; /* > 0: a download of more bytes fails (poison in the copy) */
    int failed;                 /* a download failed: `failure` says so from then on */
} checked;

static dp_backend_t checked_backend;
static dp_op_def_t checked_ops[DP_OP_COUNT];

static void set_protection(int prot) {
    for (int i = 0; i < checked.num_regions; i++)
        if (checked.regions[i].live && mprotect(checked.regions[i].base, checked.regions[i].mapped, prot) != 0)
            abort();
}

static void enter(void) {
    pthread_mutex_lock(&checked.lock);
    if (checked.depth++ == 0 && checked.protect) set_protection(PROT_READ | PROT_WRITE);
}

static void leave(void) {
    if (--checked.depth == 0 && checked.protect) set_protection(PROT_NONE);
    pthread_mutex_unlock(&checked.lock);
}

static void poison(void *p, size_t bytes) { memset(p, 0xff, bytes); /* NaN in every float */ }

static region_t *find_region(const void *p, int live) {
    const unsigned char *c = p;
    for (int i = 0; i < checked.num_regions; i++) {
        region_t *r = &checked.regions[i];
        if (r->live == live && c >= r->base && c < r->base + r->mapped) return r;
    }
    return NULL;
}

static void *checked_alloc(void *ctx, size_t bytes, const char *what) {
    enter();
    size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (bytes + page - 1) / page * page;
    void *p = NULL;
    if (checked.num_regions < MAX_REGIONS) {
        p = mmap(NULL, mapped ? mapped : page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) p = NULL;
    }
    if (p) {
        poison(p, mapped);
        checked.regions[checked.num_regions++] = (region_t){p, mapped ? mapped : page, 1};
        checked.allocs++;
    } else {
        dp_fail(DP_ERR_NOMEM, "checked backend: cannot allocate %zu bytes for %s", bytes, what);
    }
    leave();
    return p;
}

static void checked_free(void *ctx, void *ptr) {
    if (!ptr) return;
    enter();
    region_t *r = find_region(ptr, 1);
    if (!r || (unsigned char *)ptr != r->base) abort(); /* not ours, or freed twice */
    poison(r->base, r->mapped);
    munmap(r->base, r->mapped);
    r->live = 0;
    checked.frees++;
    leave();
}

static void checked_zero(void *ctx, void *dst, size_t bytes) {
    enter();
    dp_backend_cpu()->zero(NULL, dst, bytes);
    leave();
}

static void checked_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    enter();
    checked.uploads++;
    checked.upload_bytes += bytes;
    dp_backend_cpu()->upload(NULL, dst, src, bytes);
    leave();
}

static void checked_download(void *ctx, void *dst, const void *src, size_t bytes) {
    enter();
    checked.downloads++;
    checked.download_bytes += bytes;
    if (checked.fail_downloads_over && bytes > checked.fail_downloads_over) {
        poison(dst, bytes); /* as the CUDA backend leaves a failed download's copy */
        checked.failed = 1;
    } else {
        dp_backend_cpu()->download(NULL, dst, src, bytes);
    }
    leave();
}

static dp_status_t checked_failure(void *ctx) {
    (void)ctx;
    return checked.failed ? dp_fail(DP_ERR_ARG, "checked:0: a download failed: injected by the test") : DP_OK;
}

static void checked_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    enter();
    checked.copies++;
    dp_backend_cpu()->copy(NULL, dst, src, bytes);
    leave();
}

static void checked_optimizer_update(void *ctx, dp_optimizer_t *o, float *params, const float *grads,
                                     size_t start, size_t count) {
    enter();
    dp_backend_cpu()->optimizer_update(NULL, o, params, grads, start, count);
    leave();
}

static void checked_reduce_range(void *ctx, float *dst, const float *const *src, int k, size_t start,
                                 size_t count) {
    enter();
    dp_backend_cpu()->reduce_range(NULL, dst, src, k, start, count);
    leave();
}

static void checked_broadcast_range(void *ctx, float *const *dst, int k, const float *src, size_t start,
                                    size_t count) {
    enter();
    dp_backend_cpu()->broadcast_range(NULL, dst, k, src, start, count);
    leave();
}

static void checked_input_from_bytes(void *ctx, float *x, const uint8_t *pixels, int n, int channels, size_t plane,
                                     const dp_normalize_t *norm) {
    enter();
    dp_backend_cpu()->input_from_bytes(NULL, x, pixels, n, channels, plane, norm);
    leave();
}

static void checked_count_metrics(void *ctx, double *sums, const float *loss, double scale, const float *logits,
                                  const int32_t *labels, int n, int k) {
    enter();
    checked.metrics++;
    dp_backend_cpu()->count_metrics(NULL, sums, loss, scale, logits, labels, n, k);
    leave();
}

static dp_status_t checked_forward(dp_node_t *node, dp_arena_t *arena) {
    enter();
    checked.ops++;
    dp_status_t status = dp_backend_cpu()->ops[node->kind].forward(node, arena);
    leave();
    return status;
}

static dp_status_t checked_backward(dp_node_t *node, dp_arena_t *arena) {
    enter();
    checked.ops++;
    dp_status_t status = dp_backend_cpu()->ops[node->kind].backward(node, arena);
    leave();
    return status;
}

/* A touch of device memory outside the wrappers: name it and fail. */
static void on_fault(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    int live = find_region(info->si_addr, 1) != NULL, freed = !live && find_region(info->si_addr, 0) != NULL;
    const char *what = live    ? "device memory touched outside the backend\n"
                       : freed ? "device memory used after it was freed\n"
                               : "segmentation fault outside device memory\n";
    const char *prefix = checked.expect_fault ? "test_backend: caught as expected: " : "test_backend: FAILED: ";
    ssize_t ignored = write(2, prefix, strlen(prefix));
    ignored = write(2, what, strlen(what));
    (void)ignored;
    _exit(live ? 3 : freed ? 4 : 5);
}

static void checked_setup(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&checked.lock, &attr);
    pthread_mutexattr_destroy(&attr);
    const dp_backend_t *cpu = dp_backend_cpu();
    for (int k = 0; k < DP_OP_COUNT; k++) {
        checked_ops[k] = cpu->ops[k];
        checked_ops[k].forward = checked_forward;
        checked_ops[k].backward = checked_backward;
    }
    checked_backend = (dp_backend_t){
        .name = "checked",
        .host_memory = 0, /* MPI may not read it: a single process only */
        .alloc = checked_alloc,
        .free = checked_free,
        .zero = checked_zero,
        .upload = checked_upload,
        .download = checked_download,
        .failure = checked_failure,
        .copy = checked_copy,
        .ops = checked_ops,
        .optimizer_update = checked_optimizer_update,
        .reduce_range = checked_reduce_range,
        .broadcast_range = checked_broadcast_range,
        .input_from_bytes = checked_input_from_bytes,
        .count_metrics = checked_count_metrics,
    };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

static long live_allocations(void) { return checked.allocs - checked.frees; }

/* --- Training on both backends ----------------------------------------------- */

#define STEPS 3
#define BATCH 48

typedef struct {
    const char *name;
    int devices;
    dp_allreduce_kind_t allreduce;
    int overlap;
    dp_sync_kind_t sync;
} run_config_t;

static dp_trainer_t *make_trainer(const dp_model_t *m, const run_config_t *rc, const dp_backend_t *backend) {
    dp_trainer_config_t config = {.model = m, .num_devices = rc->devices, .threads_per_device = 1,
                                  .allreduce = rc->allreduce, .overlap = rc->overlap, .sync = rc->sync,
                                  .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.2f, .momentum = 0.9f},
                                  .seed = 21, .backend = backend};
    dp_trainer_t *t = NULL;
    dp_status_t status = dp_trainer_new(&config, &t);
    CHECK(status == DP_OK, "%s: trainer: %s", rc->name, dp_error_message());
    return t;
}

/* STEPS steps on the same batches; losses[s] = step s's loss sum. */
static void run_steps(dp_trainer_t *t, const dp_dataset_t *ds, double *losses, int *correct) {
    dp_loader_t *loader;
    DP_ASSERT(dp_loader_new(ds->count, BATCH, 1, 5, &loader) == DP_OK);
    dp_loader_start_epoch(loader, 0);
    const int *indices;
    int n;
    *correct = 0;
    testing_batch_t b = {0};
    for (int s = 0; s < STEPS; s++) {
        losses[s] = 0;
        n = dp_loader_next(loader, &indices);
        DP_ASSERT(n > 0);
        dp_status_t status = dp_trainer_step(t, testing_batch(&b, ds, indices, n), &losses[s], correct);
        CHECK(status == DP_OK, "step %d: %s", s, dp_error_message());
    }
    testing_batch_free(&b);
    dp_loader_free(loader);
}

static void test_same_training(const dp_model_t *m, const dp_dataset_t *ds, const run_config_t *rc) {
    size_t np = dp_model_num_params(m);
    double cpu_losses[STEPS], checked_losses[STEPS];
    int cpu_correct, checked_correct, cpu_eval = -1, checked_eval = -2;

    dp_trainer_t *cpu = make_trainer(m, rc, NULL);
    if (!cpu) return;
    run_steps(cpu, ds, cpu_losses, &cpu_correct);
    CHECK(testing_evaluate(cpu, ds, 100, &cpu_eval) == DP_OK, "%s: evaluate: %s", rc->name, dp_error_message());
    float *cpu_params = malloc(sizeof(float) * np);
    memcpy(cpu_params, dp_trainer_params(cpu, 0), sizeof(float) * np);
    dp_trainer_free(cpu);

    long allocs_before = checked.allocs, ops_before = checked.ops;
    checked.protect = 1;
    set_protection(PROT_NONE); /* nothing is live yet; the wrappers protect what they make */
    dp_trainer_t *t = make_trainer(m, rc, &checked_backend);
    if (!t) {
        free(cpu_params);
        return;
    }
    CHECK(strncmp(dp_trainer_device_names(t), "checked:0", 9) == 0, "%s: device names %s", rc->name,
          dp_trainer_device_names(t));
    CHECK(dp_trainer_backend(t) == &checked_backend, "%s: the trainer's backend", rc->name);
    long downloads_before = checked.downloads, metrics_before = checked.metrics;
    run_steps(t, ds, checked_losses, &checked_correct);
    /* every step counts its loss and accuracy on each device, and (asked
     * for them) downloads them: one download of every device's sums */
    CHECK(checked.metrics - metrics_before == (long)STEPS * rc->devices, "%s: %ld metric counts in %d steps",
          rc->name, checked.metrics - metrics_before, STEPS);
    CHECK(checked.downloads - downloads_before == STEPS, "%s: %ld downloads in %d steps", rc->name,
          checked.downloads - downloads_before, STEPS);
    CHECK(testing_evaluate(t, ds, 100, &checked_eval) == DP_OK, "%s: evaluate: %s", rc->name,
          dp_error_message());
    CHECK(checked.ops > ops_before, "%s: the tapes did not run the device's op table", rc->name);
    CHECK(checked.allocs > allocs_before, "%s: the replicas did not allocate through the device", rc->name);

    for (int s = 0; s < STEPS; s++)
        CHECK(checked_losses[s] == cpu_losses[s], "%s: step %d loss %.17g on the checked backend, %.17g on cpu",
              rc->name, s, checked_losses[s], cpu_losses[s]);
    CHECK(checked_correct == cpu_correct, "%s: %d correct vs %d", rc->name, checked_correct, cpu_correct);
    CHECK(checked_eval == cpu_eval, "%s: evaluation %d correct vs %d", rc->name, checked_eval, cpu_eval);

    /* dp_trainer_params: a host copy downloaded through the device */
    size_t bytes_before = checked.download_bytes;
    for (int d = 0; d < rc->devices; d++) {
        float *p = dp_trainer_params(t, d);
        CHECK(memcmp(p, cpu_params, sizeof(float) * np) == 0, "%s: replica %d's parameters differ from cpu's",
              rc->name, d);
        p[0] += 1.0f; /* a host copy: the replica keeps its value */
        CHECK(dp_trainer_params(t, d)[0] == cpu_params[0], "%s: writing the host copy changed replica %d",
              rc->name, d);
    }
    CHECK(checked.download_bytes - bytes_before == 2 * (size_t)rc->devices * np * sizeof(float),
          "%s: %zu bytes downloaded for the parameters", rc->name, checked.download_bytes - bytes_before);
    CHECK(dp_trainer_check_replicas(t) == DP_OK, "%s: %s", rc->name, dp_error_message());

    /* dp_trainer_set_params uploads to every replica (and the server) */
    long uploads_before = checked.uploads;
    dp_trainer_set_params(t, cpu_params);
    CHECK(checked.uploads - uploads_before == rc->devices + (rc->sync == DP_SYNC_PS),
          "%s: set_params made %ld uploads", rc->name, checked.uploads - uploads_before);

    dp_trainer_free(t);
    checked.protect = 0;
    CHECK(live_allocations() == 0, "%s: %ld device allocations not freed", rc->name, live_allocations());
    free(cpu_params);
}

/* The protection can fail: a child touches device memory directly (as a
 * trainer reading replica memory would) and must be stopped by the fault
 * handler (exit 3); another frees memory and then reads it (exit 4). */
static void test_protection_catches(void) {
    for (int use_after_free = 0; use_after_free <= 1; use_after_free++) {
        pid_t pid = fork();
        if (pid == 0) {
            checked.expect_fault = 1;
            checked.protect = !use_after_free;
            float *p = checked_alloc(NULL, 4096, "probe");
            if (use_after_free) checked_free(NULL, p);
            volatile float v = p[1]; /* must fault */
            (void)v;
            _exit(0);
        }
        int wstatus = 0;
        waitpid(pid, &wstatus, 0);
        CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 3 + use_after_free,
              "%s: the child was not stopped by the fault handler (status %d)",
              use_after_free ? "use after free" : "direct access", wstatus);
    }
}

/* The CPU backend's collectives: the sum in device order, into a buffer or
 * in place, and the copy to the others. */
static void test_cpu_primitives(void) {
    const dp_backend_t *cpu = dp_backend_cpu();
    CHECK(strcmp(cpu->name, "cpu") == 0 && cpu->host_memory == 1, "cpu backend %s", cpu->name);
    float a[40], b[40], c[40], out[40];
    for (int i = 0; i < 40; i++) {
        a[i] = 0.1f * (float)i;
        b[i] = 1e8f;
        c[i] = -1e8f;
    }
    const float *src[3] = {a, b, c};
    cpu->reduce_range(NULL, out, src, 3, 8, 16);
    int ok = 1;
    for (int i = 8; i < 24; i++) ok &= out[i] == (a[i] + b[i]) + c[i]; /* device order, not a + (b + c) */
    CHECK(ok, "reduce_range is not the sum in device order");
    float *dst[3] = {a, b, c};
    cpu->reduce_range(NULL, a, src, 3, 0, 40);
    cpu->broadcast_range(NULL, dst, 3, a, 4, 8);
    CHECK(b[4] == a[4] && c[11] == a[11] && b[3] == 1e8f && c[12] == -1e8f, "broadcast_range copied %g %g %g %g",
          b[4], c[11], b[3], c[12]);

    dp_device_t *dev;
    CHECK(dp_device_new_on(cpu, 7, -1, &dev) == DP_OK, "device");
    CHECK(strcmp(dp_device_name(dev), "cpu:7") == 0 && dp_device_backend(dev) == cpu, "name %s",
          dp_device_name(dev));
    float *mem = dp_device_alloc(dev, 64, "probe");
    float host[16] = {1, 2, 3}, back[16] = {0};
    dp_device_upload(dev, mem, host, sizeof host);
    dp_device_download(dev, back, mem, sizeof back);
    CHECK(memcmp(host, back, sizeof host) == 0, "upload/download round trip");
    dp_device_free_memory(dev, mem);
    dp_device_free(dev);
}

/* --- Failures out of sight of the tasks (backend.h: failure) ------------------ */

static int says_injected(const char *what) {
    int ok = strstr(dp_error_message(), "checked:0: a download failed: injected") != NULL;
    CHECK(ok, "%s: the error is '%s', not the download's failure", what, dp_error_message());
    return ok;
}

static void test_failure_reported(const dp_model_t *m, const dp_dataset_t *ds) {
    const run_config_t rc = {"failing downloads", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE};
    /* a step's figures: the poison read would be a NaN count */
    dp_trainer_t *t = make_trainer(m, &rc, &checked_backend);
    double loss = 0;
    int correct = 0;
    int indices[BATCH];
    for (int i = 0; i < BATCH; i++) indices[i] = i;
    testing_batch_t b = {0};
    const dp_batch_t *batch = testing_batch(&b, ds, indices, BATCH);
    CHECK(dp_trainer_step(t, batch, &loss, &correct) == DP_OK, "a step: %s", dp_error_message());
    checked.fail_downloads_over = 1;
    CHECK(dp_trainer_step(t, batch, &loss, &correct) != DP_OK, "a step read poisoned figures");
    testing_batch_free(&b);
    says_injected("the step's figures");
    CHECK(dp_trainer_check_devices(t) != DP_OK, "dp_trainer_check_devices saw no failure");
    says_injected("dp_trainer_check_devices");
    CHECK(dp_trainer_check_replicas(t) != DP_OK, "the replicas compared equal through poison");
    says_injected("dp_trainer_check_replicas");
    dp_device_t *dev;
    CHECK(dp_device_new_on(&checked_backend, 0, -1, &dev) == DP_OK, "device");
    CHECK(dp_device_wait(dev) != DP_OK, "dp_device_wait saw no failure");
    says_injected("dp_device_wait");
    dp_device_free(dev);
    dp_trainer_free(t);
    checked.failed = 0;

    /* a checkpoint: the figures (a few bytes) download, the parameters fail */
    t = make_trainer(m, &rc, &checked_backend);
    const char *path = testing_tmp_file("failed.safetensors");
    unlink(path);
    checked.fail_downloads_over = 4096;
    dp_fit_config_t fc = {.trainer = t, .model = m, .model_name = "lenet", .train_set = ds, .test_set = ds,
                          .batch_size = BATCH, .epochs = 1, .seed = 0, .schedule = {.lr = 0.1},
                          .eval_batch_size = BATCH, .save_path = path};
    dp_fit_result_t result;
    CHECK(dp_fit(&fc, NULL, NULL, &result) != DP_OK, "dp_fit saved parameters it could not download");
    says_injected("dp_fit's checkpoint");
    CHECK(access(path, F_OK) != 0, "dp_fit wrote %s from a failed download", path);
    dp_trainer_free(t);
    checked.failed = 0;
    checked.fail_downloads_over = 0;
}

int main(void) {
    checked_setup();
    test_cpu_primitives();
    test_protection_catches();
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    dp_dataset_t ds = testing_column_dataset(240, 28, 10, 2, 3, 64, 3);
    const run_config_t runs[] = {
        {"1 device", 1, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE},
        {"2 devices chunked", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_ALLREDUCE},
        {"2 devices naive", 2, DP_ALLREDUCE_NAIVE, 0, DP_SYNC_ALLREDUCE},
        {"2 devices overlap", 2, DP_ALLREDUCE_CHUNKED, 1, DP_SYNC_ALLREDUCE},
        {"2 devices ps", 2, DP_ALLREDUCE_CHUNKED, 0, DP_SYNC_PS},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) test_same_training(m, &ds, &runs[i]);
    test_failure_reported(m, &ds);
    dp_model_free(m);
    dp_dataset_free(&ds);
    return testing_finish("test_backend");
}
