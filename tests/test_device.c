/* test_device.c - the device model: tasks on one device run in order, two
 * devices run at the same time, events order work across devices and for
 * the caller, wait/waitall return the first failure, and freeing a device
 * with tasks still queued runs them first. Built also under ThreadSanitizer
 * (scripts/sanitize.sh thread). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/device.h"
#include "testing.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- order ------------------------------------------------------------------ */
typedef struct {
    int log[1000];
    int count; /* written only by the one device's worker */
} order_log_t;

typedef struct {
    order_log_t *log;
    int value;
} order_task_t;

static dp_status_t append_task(void *arg) {
    order_task_t *t = arg;
    t->log->log[t->log->count++] = t->value;
    return DP_OK;
}

static void test_order(void) {
    dp_device_t *d;
    CHECK(dp_device_new(0, -1, &d) == DP_OK, "%s", dp_error_message());
    CHECK(strcmp(dp_device_name(d), "cpu:0") == 0, "name %s", dp_device_name(d));
    order_log_t log = {.count = 0};
    order_task_t tasks[1000];
    for (int i = 0; i < 1000; i++) { /* more than the queue's first capacity: it grows */
        tasks[i] = (order_task_t){&log, i};
        CHECK(dp_device_submit(d, append_task, &tasks[i]) == DP_OK, "submit %d", i);
    }
    CHECK(dp_device_wait(d) == DP_OK, "wait");
    int in_order = log.count == 1000;
    for (int i = 0; i < log.count; i++) in_order &= log.log[i] == i;
    CHECK(in_order, "1000 tasks did not run in submission order (%d ran)", log.count);
    dp_device_free(d);
}

/* --- two devices at once: each task waits for the other one's -------------- */
typedef struct {
    atomic_int *arrived;
    int ok;
} rendezvous_t;

static dp_status_t rendezvous_task(void *arg) {
    rendezvous_t *r = arg;
    atomic_fetch_add(r->arrived, 1);
    for (int i = 0; i < 2000 && atomic_load(r->arrived) < 2; i++) sleep_ms(1);
    r->ok = atomic_load(r->arrived) == 2;
    return DP_OK;
}

static void test_parallel(void) {
    dp_device_t *devices[2];
    dp_device_new(0, -1, &devices[0]);
    dp_device_new(1, -1, &devices[1]);
    atomic_int arrived = 0;
    rendezvous_t r[2] = {{&arrived, 0}, {&arrived, 0}};
    dp_device_submit(devices[0], rendezvous_task, &r[0]);
    dp_device_submit(devices[1], rendezvous_task, &r[1]);
    CHECK(dp_waitall(devices, 2) == DP_OK, "waitall");
    CHECK(r[0].ok && r[1].ok, "tasks on two devices did not run at the same time");
    dp_device_free(devices[0]);
    dp_device_free(devices[1]);
}

/* --- events ----------------------------------------------------------------- */
typedef struct {
    atomic_int value;
    int seen;
} shared_t;

static dp_status_t slow_write_task(void *arg) {
    shared_t *s = arg;
    sleep_ms(50);
    atomic_store(&s->value, 42);
    return DP_OK;
}

static dp_status_t read_task(void *arg) {
    shared_t *s = arg;
    s->seen = atomic_load(&s->value);
    return DP_OK;
}

static void test_events(void) {
    dp_device_t *a, *b;
    dp_device_new(0, -1, &a);
    dp_device_new(1, -1, &b);
    dp_event_t *e;
    CHECK(dp_event_new(&e) == DP_OK, "event");
    dp_event_wait(e); /* never recorded: complete, does not block */
    shared_t s = {0};
    dp_device_submit(a, slow_write_task, &s);
    dp_device_record(a, e);
    dp_device_wait_event(b, e); /* b's next task waits for a's write */
    dp_device_submit(b, read_task, &s);
    CHECK(dp_device_wait(b) == DP_OK, "wait b");
    CHECK(s.seen == 42, "device b ran before the event it waited for (saw %d)", s.seen);

    /* The caller waits for an event. */
    atomic_store(&s.value, 0);
    dp_device_submit(a, slow_write_task, &s);
    dp_device_record(a, e);
    dp_event_wait(e);
    CHECK(atomic_load(&s.value) == 42, "dp_event_wait returned before the work before the event");
    dp_waitall((dp_device_t *[]){a, b}, 2);
    dp_event_free(e);
    dp_device_free(a);
    dp_device_free(b);
}

/* --- failures ----------------------------------------------------------------- */
static dp_status_t failing_task(void *arg) {
    return dp_fail(DP_ERR_ARG, "task %d failed on purpose", *(int *)arg);
}

static dp_status_t named_failing_task(void *arg) {
    (void)arg;
    return dp_fail(DP_ERR_ARG, "cpu:1: failed on purpose");
}

static dp_status_t cpu10_failing_task(void *arg) {
    (void)arg;
    return dp_fail(DP_ERR_ARG, "cpu:10: failed");
}

static dp_status_t ok_task(void *arg) {
    (*(int *)arg)++;
    return DP_OK;
}

static void test_failures(void) {
    dp_device_t *devices[2];
    dp_device_new(0, -1, &devices[0]);
    dp_device_new(1, -1, &devices[1]);
    int first = 1, second = 2, after = 0;
    dp_device_submit(devices[1], failing_task, &first);
    dp_event_t *e;
    dp_event_new(&e);
    dp_device_record(devices[1], e);
    dp_event_wait(e); /* the failure has happened; nobody has waited on the device yet */
    CHECK(dp_device_failed(devices[1]) && !dp_device_failed(devices[0]), "dp_device_failed does not report it");
    dp_event_free(e);
    dp_device_submit(devices[1], failing_task, &second);
    dp_device_submit(devices[1], ok_task, &after);
    dp_status_t status = dp_waitall(devices, 2);
    CHECK(status == DP_ERR_ARG, "waitall returned %d", status);
    CHECK(strstr(dp_error_message(), "cpu:1") && strstr(dp_error_message(), "task 1 failed"),
          "message '%s' does not name the device and the first failure", dp_error_message());
    CHECK(after == 1, "the task after a failure did not run");
    CHECK(dp_waitall(devices, 2) == DP_OK, "the failure was not cleared by the wait");
    CHECK(!dp_device_failed(devices[1]), "dp_device_failed still set after the wait");
    /* a message that names its device already (a GPU's) is not named twice */
    dp_device_submit(devices[1], named_failing_task, &first);
    CHECK(dp_device_wait(devices[1]) == DP_ERR_ARG && strcmp(dp_error_message(), "cpu:1: failed on purpose") == 0,
          "message '%s', want 'cpu:1: failed on purpose'", dp_error_message());
    dp_device_submit(devices[1], cpu10_failing_task, &first); /* cpu:10 is another device */
    CHECK(dp_device_wait(devices[1]) == DP_ERR_ARG && strcmp(dp_error_message(), "cpu:1: cpu:10: failed") == 0,
          "message '%s', want 'cpu:1: cpu:10: failed'", dp_error_message());
    dp_device_free(devices[0]);
    dp_device_free(devices[1]);
}

/* --- shutdown with tasks pending ----------------------------------------------- */
static dp_status_t slow_count_task(void *arg) {
    sleep_ms(2);
    atomic_fetch_add((atomic_int *)arg, 1);
    return DP_OK;
}

static void test_shutdown_drains(void) {
    atomic_int ran = 0;
    dp_device_t *d;
    dp_device_new(3, -1, &d);
    for (int i = 0; i < 50; i++) dp_device_submit(d, slow_count_task, &ran);
    dp_device_free(d); /* no wait: free must run all 50 first */
    CHECK(atomic_load(&ran) == 50, "freeing a device dropped tasks: %d of 50 ran", atomic_load(&ran));
}

int main(void) {
    test_order();
    test_parallel();
    test_events();
    test_failures();
    test_shutdown_drains();
    return testing_finish("test_device");
}
