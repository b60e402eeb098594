/* profile.c - the per-layer profiler of a device's tape (profile.h): marks
 * around every op and every step of the timed window, read once when the
 * window closes, summed per (layer, op, direction) row.
 *
 * A mark is a time in milliseconds: the host clock's, read when the mark is
 * made, or a backend timing mark's (a GPU's event), made on the device's
 * queue and read relative to the window's first mark at the end. Either way
 * a timed op is a pair of marks (begin, end) and its row, a timed step a
 * pair of marks; nothing is summed before the window closes.
 *
 * The window opens at the step_begin after `warmup` counted steps. A pool
 * of backend marks is made then, sized from the ops counted in the last
 * step (DEFAULT_MARKS without one: a window that opens at the first step); a
 * step that would not fit in what is left is not timed, and the window
 * closes early (the report's steps says how many were timed).
 */
#include "dptrain/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/backend.h"

#define DEFAULT_MARKS 4096

typedef struct {
    const char *label, *label2; /* the tape's pointers: the row's key */
    dp_op_kind_t kind;
    int fused; /* attr.fuse_relu: 0, DP_FUSE_RELU or DP_FUSE_RELU6 */
    dp_profile_direction_t direction;
} row_key_t;

typedef struct {
    int row;
    int begin, end; /* marks */
} timed_t;

struct dp_profiler {
    const dp_backend_t *backend;
    int warmup, window;
    int steps_seen;    /* step_end calls */
    int in_step;       /* between step_begin and step_end */
    int timing;        /* this step is timed */
    int closed;        /* the window is over (read, or nothing more to time) */
    int read;          /* the marks have been read into ms */
    int ops_this_step, ops_last_step;
    /* marks: ms (host clock: when made; backend: after the read) */
    double *ms;
    int num_marks, mark_capacity;
    void *timer; /* the backend's pool (mark_capacity marks), NULL on the host clock */
    struct timespec origin;
    /* ops timed, and steps timed (pairs of marks) */
    timed_t *ops;
    int num_ops, op_capacity;
    int (*steps)[2];
    int steps_timed;
    int step_marks_begin, step_ops_begin; /* where the current step's marks and ops start */
    double cpu_begin_ms, cpu_total_ms;    /* the process's CPU time at the timed step's begin; over the timed steps */
    /* rows */
    row_key_t *keys;
    dp_profile_row_t *rows;
    int num_rows, row_capacity, next_row;
    dp_profile_report_t report;
    dp_status_t failure;
};

dp_status_t dp_profiler_new(const dp_backend_t *backend, int warmup, int window, dp_profiler_t **out) {
    *out = NULL;
    if (warmup < 0 || window < 1)
        return dp_fail(DP_ERR_ARG, "profile: warm-up steps must be >= 0 and timed steps >= 1, found %d and %d",
                       warmup, window);
    dp_profiler_t *p = dp_alloc_zeroed(1, sizeof *p, "profiler");
    if (!p) return DP_ERR_NOMEM;
    p->backend = backend && backend->timer_new ? backend : NULL;
    p->warmup = warmup;
    p->window = window;
    p->steps = dp_alloc(sizeof *p->steps * (size_t)window, "profiler steps");
    if (!p->steps) {
        free(p);
        return DP_ERR_NOMEM;
    }
    *out = p;
    return DP_OK;
}

void dp_profiler_free(dp_profiler_t *p) {
    if (!p) return;
    if (p->timer) p->backend->timer_free(p->backend->ctx, p->timer);
    free(p->ms);
    free(p->ops);
    free(p->steps);
    free(p->keys);
    free(p->rows);
    free(p);
}

/* The process's CPU time (every thread, user + system), in ms. */
static double process_cpu_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return 1e3 * (double)now.tv_sec + 1e-6 * (double)now.tv_nsec;
}

static double host_ms(const dp_profiler_t *p) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return 1e3 * (double)(now.tv_sec - p->origin.tv_sec) + 1e-6 * (double)(now.tv_nsec - p->origin.tv_nsec);
}

/* A new mark, or -1 when the pool is full. */
static int mark(dp_profiler_t *p) {
    if (p->num_marks == p->mark_capacity) {
        if (p->timer) return -1; /* the pool is made once */
        int capacity = p->mark_capacity ? 2 * p->mark_capacity : 1024;
        double *ms = realloc(p->ms, sizeof *ms * (size_t)capacity);
        if (!ms) return -1;
        p->ms = ms;
        p->mark_capacity = capacity;
    }
    int i = p->num_marks++;
    if (p->timer) p->backend->timer_mark(p->backend->ctx, p->timer, i);
    else p->ms[i] = host_ms(p);
    return i;
}

/* Drops the marks and ops of the step being timed. */
static void forget_step(dp_profiler_t *p) {
    p->num_marks = p->step_marks_begin;
    p->num_ops = p->step_ops_begin;
}

/* The step did not fit in the pool: it is not timed, and the window closes. */
static void step_did_not_fit(dp_profiler_t *p) {
    forget_step(p);
    p->timing = 0;
    p->closed = 1;
}

/* Opens the window: the backend's pool, sized for the window. */
static dp_status_t open_window(dp_profiler_t *p) {
    clock_gettime(CLOCK_MONOTONIC, &p->origin);
    if (!p->backend) return DP_OK;
    long per_step = p->ops_last_step > 0 ? 2L * p->ops_last_step + 2 : 0;
    long marks = per_step ? per_step * p->window : DEFAULT_MARKS;
    if (marks > (1L << 24)) marks = 1L << 24;
    p->ms = dp_alloc(sizeof *p->ms * (size_t)marks, "profiler marks");
    if (!p->ms) return DP_ERR_NOMEM;
    p->timer = p->backend->timer_new(p->backend->ctx, (int)marks);
    if (!p->timer) return dp_error_status() != DP_OK ? dp_error_status() : DP_ERR_NOMEM;
    p->mark_capacity = (int)marks;
    return DP_OK;
}

dp_status_t dp_profiler_step_begin(dp_profiler_t *p) {
    if (p->timing) forget_step(p); /* the last step never ended (it failed) */
    p->in_step = 1;
    p->ops_this_step = 0;
    p->timing = 0;
    if (p->closed || p->steps_seen < p->warmup) return DP_OK;
    if (p->steps_timed == 0 && p->num_marks == 0 && !p->timer && !p->ms) {
        dp_status_t status = open_window(p);
        if (status != DP_OK) {
            p->closed = 1;
            return p->failure = status;
        }
    }
    /* a step that would not fit in the pool closes the window */
    if (p->timer && p->ops_last_step > 0 && p->mark_capacity - p->num_marks < 2 * p->ops_last_step + 2) {
        p->closed = 1;
        return DP_OK;
    }
    p->step_marks_begin = p->num_marks;
    p->step_ops_begin = p->num_ops;
    int begin = mark(p);
    if (begin < 0) {
        p->closed = 1;
        return DP_OK;
    }
    p->steps[p->steps_timed][0] = begin;
    p->timing = 1;
    p->cpu_begin_ms = process_cpu_ms();
    return DP_OK;
}

/* Reads the marks (the backend's: one wait) and sums the rows. */
static dp_status_t read_window(dp_profiler_t *p) {
    if (p->read) return p->failure;
    p->read = 1;
    p->closed = 1;
    if (p->timer && p->num_marks > 0) {
        dp_status_t status = p->backend->timer_read(p->backend->ctx, p->timer, p->num_marks, p->ms);
        if (status != DP_OK) return p->failure = status;
    }
    dp_profile_report_t *r = &p->report;
    r->warmup = p->warmup;
    r->window = p->window;
    r->steps = p->steps_timed;
    r->rows = p->rows;
    r->num_rows = p->steps_timed ? p->num_rows : 0; /* rows of a forgotten step alone: none */
    double step_total = 0.0, layers_total = 0.0;
    for (int s = 0; s < p->steps_timed; s++) step_total += p->ms[p->steps[s][1]] - p->ms[p->steps[s][0]];
    for (int i = 0; i < p->num_ops; i++) {
        const timed_t *op = &p->ops[i];
        double ms = p->ms[op->end] - p->ms[op->begin];
        p->rows[op->row].ms += ms;
        p->rows[op->row].calls++;
        layers_total += ms;
    }
    if (p->steps_timed == 0) return DP_OK;
    double steps = (double)p->steps_timed;
    r->step_ms = step_total / steps;
    r->layers_ms = layers_total / steps;
    r->outside_ms = r->step_ms - r->layers_ms;
    r->process_cpu_ms = p->cpu_total_ms / steps;
    for (int i = 0; i < p->num_rows; i++) {
        p->rows[i].ms /= steps;
        p->rows[i].share = r->step_ms > 0.0 ? p->rows[i].ms / r->step_ms : 0.0;
    }
    r->outside_share = r->step_ms > 0.0 ? r->outside_ms / r->step_ms : 0.0;
    return DP_OK;
}

dp_status_t dp_profiler_step_end(dp_profiler_t *p) {
    p->in_step = 0;
    if (p->ops_this_step > 0) p->ops_last_step = p->ops_this_step;
    if (!p->timing) {
        p->steps_seen++;
        return p->failure;
    }
    p->timing = 0;
    int end = mark(p);
    if (end < 0 || p->failure != DP_OK) {
        step_did_not_fit(p);
    } else {
        p->steps[p->steps_timed++][1] = end;
        p->cpu_total_ms += process_cpu_ms() - p->cpu_begin_ms;
    }
    p->steps_seen++;
    if (p->steps_timed == p->window || p->closed) return read_window(p);
    return DP_OK;
}

dp_status_t dp_profiler_report(dp_profiler_t *p, const dp_profile_report_t **out) {
    *out = NULL;
    DP_TRY(read_window(p));
    *out = &p->report;
    return DP_OK;
}

/* The row of a key: the next one in the order of the last step, else a
 * search, else a new row. -1 when memory runs out. */
static int find_row(dp_profiler_t *p, const row_key_t *key) {
    for (int n = 0; n < p->num_rows; n++) {
        int i = (p->next_row + n) % p->num_rows;
        const row_key_t *k = &p->keys[i];
        if (k->label == key->label && k->label2 == key->label2 && k->kind == key->kind && k->fused == key->fused &&
            k->direction == key->direction) {
            p->next_row = i + 1;
            return i;
        }
    }
    if (p->num_rows == p->row_capacity) {
        int capacity = p->row_capacity ? 2 * p->row_capacity : 64;
        row_key_t *keys = realloc(p->keys, sizeof *keys * (size_t)capacity);
        if (keys) p->keys = keys;
        dp_profile_row_t *rows = keys ? realloc(p->rows, sizeof *rows * (size_t)capacity) : NULL;
        if (!rows) return -1;
        p->rows = rows;
        p->row_capacity = capacity;
    }
    int i = p->num_rows++;
    p->keys[i] = *key;
    dp_profile_row_t *row = &p->rows[i];
    memset(row, 0, sizeof *row);
    const char *label = key->label ? key->label : "?";
    if (key->label2) snprintf(row->layer, sizeof row->layer, "%s+%s", label, key->label2);
    else snprintf(row->layer, sizeof row->layer, "%s", label);
    const char *fused = key->fused == DP_FUSE_RELU6 ? "+relu6" : key->fused ? "+relu" : "";
    snprintf(row->op, sizeof row->op, "%s%s", dp_op_table[key->kind].name, fused);
    row->direction = key->direction;
    p->next_row = i + 1;
    return i;
}

int dp_profiler_op_begin(dp_profiler_t *p, const char *label, const char *label2, const dp_node_t *node,
                         dp_profile_direction_t direction) {
    if (!p->in_step) return -1;
    p->ops_this_step++;
    if (!p->timing) return -1;
    row_key_t key = {label, label2, node->kind, node->attr.fuse_relu, direction};
    int row = find_row(p, &key);
    if (row < 0) {
        p->failure = dp_fail(DP_ERR_NOMEM, "profile: out of memory for the table's rows");
        return -1;
    }
    if (p->num_ops == p->op_capacity) {
        int capacity = p->op_capacity ? 2 * p->op_capacity : 256;
        timed_t *ops = realloc(p->ops, sizeof *ops * (size_t)capacity);
        if (!ops) {
            p->failure = dp_fail(DP_ERR_NOMEM, "profile: out of memory for %d timed ops", capacity);
            return -1;
        }
        p->ops = ops;
        p->op_capacity = capacity;
    }
    int begin = mark(p);
    if (begin < 0) {
        p->failure = p->timer ? DP_OK : dp_fail(DP_ERR_NOMEM, "profile: out of memory for the marks");
        step_did_not_fit(p);
        return -1;
    }
    int i = p->num_ops++;
    p->ops[i] = (timed_t){row, begin, -1};
    return i;
}

void dp_profiler_op_end(dp_profiler_t *p, int handle) {
    if (handle < 0 || !p->timing) return;
    int end = mark(p);
    if (end < 0) {
        step_did_not_fit(p);
        return;
    }
    p->ops[handle].end = end;
}
