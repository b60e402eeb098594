/* backend_cpu_staged.c - the staged CPU backend ("staged", backend.h): a test
 * double of a GPU on the CPU. Its kernels, copies and collectives are the CPU
 * backend's, but it declares host_memory = 0 and behaves like a device with
 * memory of its own where that is visible above the seam:
 *   - a batch's bytes and labels are uploaded into its memory before the
 *     step (its memory is not the host's), as for the CUDA backend;
 *   - the optimizer state lives in a device copy (a shadow optimizer with
 *     its own buffers) that the host optimizer's buffers see only through
 *     optimizer_download / optimizer_upload, as the CUDA backend's does;
 *   - MPI may not be handed its memory (host_memory = 0): the strategies
 *     across ranks stage through host buffers.
 * A trainer on "staged" devices must give the CPU backend's bits; a path
 * above the seam that forgets a download or an upload of the optimizer state
 * shows as a different checkpoint (tests/cli_staged.sh).
 *
 * DESIGN. The shadows are a list under one mutex: optimizer_update may run
 * on several device threads (and the MPI communication thread) at once, on
 * disjoint ranges of one optimizer. Under the mutex an update finds or makes
 * the shadow and, when the host's step count or lr moved, copies them (only
 * then: within a step every update sees them equal and writes nothing; steps
 * are separated by the trainer's waits); the update itself runs outside the
 * mutex on the shadow's buffers (optim.c's per-element ranges). A jump of
 * the host's step count by more than one (a restore through the host
 * buffers without optimizer_upload) re-takes the host state, as the CUDA
 * backend does. */
#include "dptrain/backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct shadow {
    const dp_optimizer_t *host; /* the key */
    dp_optimizer_t *device;     /* the device copy: its own state buffers */
    struct shadow *next;
} shadow_t;

static pthread_mutex_t shadow_lock = PTHREAD_MUTEX_INITIALIZER;
static shadow_t *shadows;

static shadow_t *find_shadow(const dp_optimizer_t *host) {
    for (shadow_t *s = shadows; s; s = s->next)
        if (s->host == host) return s;
    return NULL;
}

/* dst's state buffers = src's (same kind and size). */
static void copy_states(dp_optimizer_t *dst, dp_optimizer_t *src) {
    size_t n = dp_optimizer_num_params(src);
    for (int i = 0; i < dp_optimizer_num_states(src); i++)
        memcpy(dp_optimizer_state(dst, i, NULL), dp_optimizer_state(src, i, NULL), sizeof(float) * (n ? n : 1));
}

static void staged_optimizer_update(void *ctx, dp_optimizer_t *optimizer, float *params, const float *grads,
                                    size_t start, size_t count) {
    (void)ctx;
    pthread_mutex_lock(&shadow_lock);
    shadow_t *s = find_shadow(optimizer);
    int fresh = 0;
    if (!s) {
        /* the configuration is the host's, checked when it was made: only
         * memory can fail, and this test double has no way to report it */
        s = calloc(1, sizeof *s);
        DP_ASSERT(s && "staged backend: out of memory for an optimizer's device state");
        DP_ASSERT(dp_optimizer_new(dp_optimizer_config(optimizer), dp_optimizer_num_params(optimizer),
                                   &s->device) == DP_OK);
        const dp_decay_range_t *ranges;
        int num_ranges = dp_optimizer_decay_ranges(optimizer, &ranges);
        DP_ASSERT(dp_optimizer_set_decay_ranges(s->device, ranges, num_ranges) == DP_OK);
        s->host = optimizer;
        s->next = shadows;
        shadows = s;
        fresh = 1;
    }
    uint64_t steps = dp_optimizer_steps(optimizer), had = dp_optimizer_steps(s->device);
    if (fresh || (steps != had && steps != had + 1)) copy_states(s->device, optimizer);
    if (steps != had) dp_optimizer_set_steps(s->device, steps);
    float lr = dp_optimizer_lr(optimizer), old_lr = dp_optimizer_lr(s->device);
    if (memcmp(&lr, &old_lr, sizeof lr) != 0) dp_optimizer_set_lr(s->device, lr);
    dp_optimizer_t *device = s->device;
    pthread_mutex_unlock(&shadow_lock);
    dp_optimizer_step_range(device, params, grads, start, count);
}

static void staged_optimizer_download(void *ctx, dp_optimizer_t *optimizer) {
    (void)ctx;
    pthread_mutex_lock(&shadow_lock);
    shadow_t *s = find_shadow(optimizer);
    if (s) copy_states(optimizer, s->device);
    pthread_mutex_unlock(&shadow_lock);
}

static void staged_optimizer_upload(void *ctx, dp_optimizer_t *optimizer) {
    (void)ctx;
    pthread_mutex_lock(&shadow_lock);
    shadow_t *s = find_shadow(optimizer);
    if (s) {
        copy_states(s->device, optimizer);
        dp_optimizer_set_steps(s->device, dp_optimizer_steps(optimizer));
    }
    pthread_mutex_unlock(&shadow_lock);
}

static void staged_optimizer_forget(void *ctx, const dp_optimizer_t *optimizer) {
    (void)ctx;
    pthread_mutex_lock(&shadow_lock);
    for (shadow_t **p = &shadows; *p; p = &(*p)->next)
        if ((*p)->host == optimizer) {
            shadow_t *s = *p;
            *p = s->next;
            dp_optimizer_free(s->device);
            free(s);
            break;
        }
    pthread_mutex_unlock(&shadow_lock);
}

static dp_backend_t staged_backend;
static pthread_once_t staged_once = PTHREAD_ONCE_INIT;

static void staged_init(void) {
    staged_backend = *dp_backend_cpu();
    staged_backend.name = "staged";
    staged_backend.host_memory = 0;
    staged_backend.optimizer_update = staged_optimizer_update;
    staged_backend.optimizer_download = staged_optimizer_download;
    staged_backend.optimizer_upload = staged_optimizer_upload;
    staged_backend.optimizer_forget = staged_optimizer_forget;
    staged_backend.set_precision = NULL;
    /* a step arena of blocks from alloc, as the CUDA backend's (no range growing in place) */
    staged_backend.reserve = NULL;
    staged_backend.commit = NULL;
    staged_backend.release = NULL;
}

const dp_backend_t *dp_backend_cpu_staged(void) {
    pthread_once(&staged_once, staged_init);
    return &staged_backend;
}
