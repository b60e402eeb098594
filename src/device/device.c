/* device.c - worker threads with in-order task queues, and events.
 *
 * DESIGN. Each device owns one worker thread, one mutex, two condition
 * variables and a FIFO ring of tasks (like Redis's bio.c). The submitting
 * thread appends under the mutex and signals `work`; the worker pops one
 * task at a time, runs it without the lock, and counts it done; callers of
 * dp_device_wait sleep on `idle` until done == submitted. The ring grows
 * (under the mutex) when full, so steady-state training allocates nothing.
 * Shutdown sets `stopping`; the worker drains what is queued, then exits.
 *
 * An event is a flag with its own mutex and condition variable. Recording
 * resets the flag and queues a task that sets it; waiting for an event on a
 * device queues a task that blocks on the flag. Who waits for whom: callers
 * wait for devices (idle) and events; workers wait only for events recorded
 * on other devices, never for the caller, so there is no cycle unless the
 * user builds one out of events.
 */
#define _GNU_SOURCE
#include "dptrain/device.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    dp_task_fn fn;
    void *arg;
} task_t;

struct dp_device {
    const dp_backend_t *backend;
    char name[32];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a task was queued, or stopping */
    pthread_cond_t idle; /* a task finished */
    task_t *ring;        /* (capacity) queued tasks, head .. head + count */
    int capacity, head, count;
    unsigned long long submitted, done;
    int stopping;
    dp_status_t failure; /* the first failure since the last wait */
    char failure_message[1024];
};

struct dp_event {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int complete;
};

static void *worker_main(void *arg) {
    dp_device_t *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (d->count == 0 && !d->stopping) pthread_cond_wait(&d->work, &d->lock);
        if (d->count == 0) break; /* stopping and drained */
        task_t task = d->ring[d->head];
        d->head = (d->head + 1) % d->capacity;
        d->count--;
        pthread_mutex_unlock(&d->lock);
        dp_error_clear();
        dp_status_t status = task.fn(task.arg);
        pthread_mutex_lock(&d->lock);
        if (status != DP_OK && d->failure == DP_OK) {
            d->failure = status;
            const char *message = dp_error_message()[0] ? dp_error_message() : dp_status_name(status);
            size_t name_length = strlen(d->name);
            int named = strncmp(message, d->name, name_length) == 0 && message[name_length] == ':';
            snprintf(d->failure_message, sizeof d->failure_message, "%s%s%s", named ? "" : d->name,
                     named ? "" : ": ", message); /* a GPU's messages name their device already */
        }
        d->done++;
        pthread_cond_broadcast(&d->idle);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

dp_status_t dp_device_new(int index, int pin_core, dp_device_t **out) {
    return dp_device_new_on(dp_backend_cpu(), index, pin_core, out);
}

dp_status_t dp_device_new_on(const dp_backend_t *backend, int index, int pin_core, dp_device_t **out) {
    *out = NULL;
    dp_device_t *d = dp_alloc_zeroed(1, sizeof *d, "device");
    if (!d) return DP_ERR_NOMEM;
    d->backend = backend;
    snprintf(d->name, sizeof d->name, "%s:%d", backend->name, index);
    d->capacity = 16;
    d->ring = dp_alloc(sizeof *d->ring * (size_t)d->capacity, "device task queue");
    if (!d->ring) {
        free(d);
        return DP_ERR_NOMEM;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->idle, NULL);
    int rc = pthread_create(&d->thread, NULL, worker_main, d);
    if (rc != 0) {
        dp_fail(DP_ERR_NOMEM, "cannot start the worker thread of %s: %s", d->name, strerror(rc));
        free(d->ring);
        free(d);
        return DP_ERR_NOMEM;
    }
    if (pin_core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pin_core, &set);
        (void)pthread_setaffinity_np(d->thread, sizeof set, &set); /* best effort */
    }
    *out = d;
    return DP_OK;
}

void dp_device_free(dp_device_t *d) {
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->idle);
    pthread_cond_destroy(&d->work);
    pthread_mutex_destroy(&d->lock);
    free(d->ring);
    free(d);
}

const char *dp_device_name(const dp_device_t *d) { return d->name; }

const dp_backend_t *dp_device_backend(const dp_device_t *d) { return d->backend; }

void *dp_device_alloc(dp_device_t *d, size_t bytes, const char *what) {
    return d->backend->alloc(d->backend->ctx, bytes, what);
}

void dp_device_free_memory(dp_device_t *d, void *ptr) { d->backend->free(d->backend->ctx, ptr); }

void dp_device_upload(dp_device_t *d, void *dst, const void *host_src, size_t bytes) {
    d->backend->upload(d->backend->ctx, dst, host_src, bytes);
}

void dp_device_download(dp_device_t *d, void *host_dst, const void *src, size_t bytes) {
    d->backend->download(d->backend->ctx, host_dst, src, bytes);
}

void dp_device_set_name(dp_device_t *d, const char *name) { snprintf(d->name, sizeof d->name, "%s", name); }

dp_status_t dp_device_submit(dp_device_t *d, dp_task_fn fn, void *arg) {
    pthread_mutex_lock(&d->lock);
    if (d->count == d->capacity) {
        int capacity = d->capacity * 2;
        task_t *ring = malloc(sizeof *ring * (size_t)capacity);
        if (!ring) {
            pthread_mutex_unlock(&d->lock);
            return dp_fail(DP_ERR_NOMEM, "%s: out of memory growing the task queue", d->name);
        }
        for (int i = 0; i < d->count; i++) ring[i] = d->ring[(d->head + i) % d->capacity];
        free(d->ring);
        d->ring = ring;
        d->capacity = capacity;
        d->head = 0;
    }
    d->ring[(d->head + d->count) % d->capacity] = (task_t){fn, arg};
    d->count++;
    d->submitted++;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    return DP_OK;
}

dp_status_t dp_device_wait(dp_device_t *d) {
    pthread_mutex_lock(&d->lock);
    while (d->done != d->submitted) pthread_cond_wait(&d->idle, &d->lock);
    dp_status_t status = d->failure;
    if (status != DP_OK) dp_fail(status, "%s", d->failure_message);
    d->failure = DP_OK;
    pthread_mutex_unlock(&d->lock);
    /* what failed out of sight of the tasks (backend.h: failure) */
    if (status == DP_OK && d->backend->failure) status = d->backend->failure(d->backend->ctx);
    return status;
}

dp_status_t dp_waitall(dp_device_t *const *devices, int count) {
    dp_status_t first = DP_OK;
    char message[1024] = "";
    for (int i = 0; i < count; i++) {
        dp_status_t status = dp_device_wait(devices[i]);
        if (status != DP_OK && first == DP_OK) {
            first = status;
            snprintf(message, sizeof message, "%s", dp_error_message());
        }
    }
    if (first != DP_OK) dp_fail(first, "%s", message);
    return first;
}

int dp_device_failed(const dp_device_t *d) {
    dp_device_t *m = (dp_device_t *)d;
    pthread_mutex_lock(&m->lock);
    int failed = m->failure != DP_OK;
    pthread_mutex_unlock(&m->lock);
    return failed;
}

dp_status_t dp_event_new(dp_event_t **out) {
    dp_event_t *e = dp_alloc_zeroed(1, sizeof *e, "event");
    if (!e) return DP_ERR_NOMEM;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->changed, NULL);
    e->complete = 1; /* a never-recorded event is complete, as in CUDA */
    *out = e;
    return DP_OK;
}

void dp_event_free(dp_event_t *e) {
    if (!e) return;
    pthread_cond_destroy(&e->changed);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static void event_set(dp_event_t *e, int complete) {
    pthread_mutex_lock(&e->lock);
    e->complete = complete;
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->lock);
}

static dp_status_t complete_event_task(void *arg) {
    event_set(arg, 1);
    return DP_OK;
}

static dp_status_t wait_event_task(void *arg) {
    dp_event_wait(arg);
    return DP_OK;
}

dp_status_t dp_device_record(dp_device_t *d, dp_event_t *e) {
    event_set(e, 0);
    return dp_device_submit(d, complete_event_task, e);
}

dp_status_t dp_device_wait_event(dp_device_t *d, dp_event_t *e) {
    return dp_device_submit(d, wait_event_task, e);
}

void dp_event_wait(dp_event_t *e) {
    pthread_mutex_lock(&e->lock);
    while (!e->complete) pthread_cond_wait(&e->changed, &e->lock);
    pthread_mutex_unlock(&e->lock);
}
