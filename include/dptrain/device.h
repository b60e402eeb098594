/* device.h - a device: a worker thread with an in-order task queue, modelled
 * on a CUDA stream (and the seeds' asynchronous back end).
 *
 * dp_device_submit returns at once; tasks on one device run in the order
 * they were submitted, tasks on different devices run at the same time.
 * An event marks a point in one device's queue: another device's queue can
 * wait for it (dp_device_wait_event), or the caller can (dp_event_wait).
 * dp_device_wait and dp_waitall block the caller until queues are empty
 * (the seeds' wait_to_read / waitall at task granularity).
 *
 * A task returns a status; the first failure on a device is kept, with its
 * error message, and handed to the next dp_device_wait / dp_waitall, which
 * also clears it. Later tasks still run (they see the failure through
 * dp_device_failed and may skip work).
 *
 * A device is a backend (backend.h: its memory, op table, optimizer update
 * and collective primitives) plus that queue. dp_device_new makes a CPU
 * device; dp_device_new_on a device of any backend. dp_device_alloc and the
 * copies below are the backend's, synchronous for the calling thread: call
 * them from the device's tasks, or from the caller between waits.
 */
#ifndef DPTRAIN_DEVICE_H
#define DPTRAIN_DEVICE_H

#include <stddef.h>

#include "dptrain/backend.h"
#include "dptrain/status.h"

typedef struct dp_device dp_device_t;
typedef struct dp_event dp_event_t;
typedef dp_status_t (*dp_task_fn)(void *arg);

/* Device `index` ("cpu:INDEX"); its worker is pinned to core `pin_core`
 * when >= 0 and the system allows (failure to pin is not an error). */
dp_status_t dp_device_new(int index, int pin_core, dp_device_t **out);

/* Device `index` of `backend` (named "BACKEND:INDEX"; the backend is not
 * owned and must outlive the device), otherwise as dp_device_new. */
dp_status_t dp_device_new_on(const dp_backend_t *backend, int index, int pin_core, dp_device_t **out);

/* The device's backend. */
const dp_backend_t *dp_device_backend(const dp_device_t *device);

/* The backend's memory functions on this device (backend.h). dp_device_alloc
 * returns NULL with the error set when memory runs out. */
void *dp_device_alloc(dp_device_t *device, size_t bytes, const char *what);
void dp_device_free_memory(dp_device_t *device, void *ptr);
void dp_device_upload(dp_device_t *device, void *dst, const void *host_src, size_t bytes);
void dp_device_download(dp_device_t *device, void *host_dst, const void *src, size_t bytes);

/* Runs every task still queued, then stops and joins the worker. */
void dp_device_free(dp_device_t *device);

const char *dp_device_name(const dp_device_t *device);
/* Renames a device (e.g. "ps" for the parameter server); before any submit. */
void dp_device_set_name(dp_device_t *device, const char *name);

/* Queues fn(arg); returns at once. Fails only when memory runs out. */
dp_status_t dp_device_submit(dp_device_t *device, dp_task_fn fn, void *arg);

/* Blocks until every task submitted so far has run; returns the first
 * failure since the last wait (DP_OK if none), with its message set. */
dp_status_t dp_device_wait(dp_device_t *device);

/* dp_device_wait on every device; the first failure wins. */
dp_status_t dp_waitall(dp_device_t *const *devices, int count);

/* Whether a task on this device has failed since the last wait. */
int dp_device_failed(const dp_device_t *device);

dp_status_t dp_event_new(dp_event_t **out);
void dp_event_free(dp_event_t *event);

/* The event completes when every task submitted to `device` before this
 * call has run. Re-recording resets it. */
dp_status_t dp_device_record(dp_device_t *device, dp_event_t *event);

/* Tasks submitted to `device` after this call start only once `event` has
 * completed. */
dp_status_t dp_device_wait_event(dp_device_t *device, dp_event_t *event);

/* Blocks the caller until `event` has completed. */
void dp_event_wait(dp_event_t *event);

#endif
