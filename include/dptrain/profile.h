/* profile.h - per-layer times of training steps on one device (`dptrain
 * train --profile`): a profiler is attached to a device's tape
 * (dp_tape_set_profiler), which times every op it runs forward and
 * backward under the layer label the model's forward gives it
 * (dp_tape_set_label); the trainer marks where each step begins and ends.
 *
 * Which steps: the first `warmup` steps are not timed, then the next
 * `window` steps are (fewer when training ends first). Ops run outside a
 * step (evaluation) and steps outside the window record nothing.
 *
 * How: on a backend with timing marks (backend.h: timer_new, a GPU's
 * events) a mark is recorded on the device's queue before and after each
 * op and at the step's begin and end, from a pool made once when the window
 * opens, and the marks are read once, when the window closes (after one
 * wait for the device): no host wait inside the timed steps. Otherwise the
 * device's ops are synchronous on its thread and the host clock
 * (CLOCK_MONOTONIC) is read around each op and at the step's begin and end.
 *
 * The report: per (layer, op, direction) row the mean milliseconds per
 * timed step and the share of the mean step; the rest of the step (data
 * upload, gradient sums, optimizer, waits) is "outside the layers": the step
 * time minus the rows' sum, per step. A step is the trainer's
 * dp_trainer_step, from its start to its end on the device (on a GPU: from
 * the first to the last mark on its stream).
 *
 * DESIGN. The device's thread calls dp_profiler_op_begin/end (through the
 * tape) inside the step's tasks; the caller's thread calls step_begin,
 * step_end, finish and report between waits for the device, so the two
 * never run at once.
 */
#ifndef DPTRAIN_PROFILE_H
#define DPTRAIN_PROFILE_H

#include "dptrain/ops.h"

typedef struct dp_profiler dp_profiler_t;

typedef enum { DP_PROFILE_FORWARD, DP_PROFILE_BACKWARD } dp_profile_direction_t;

/* Defaults of `dptrain train --profile`. */
#define DP_PROFILE_DEFAULT_WARMUP 5
#define DP_PROFILE_DEFAULT_WINDOW 20

typedef struct {
    char layer[136]; /* the model's name: "conv1", "relu2", "conv1+relu1" (a fused pair), "loss" */
    char op[40];     /* the op table's name: "conv", "conv+relu", "batch_norm+relu6", "softmax_xent" */
    dp_profile_direction_t direction;
    long calls;      /* ops timed (timed steps x micro-batches) */
    double ms;       /* mean per timed step */
    double share;    /* ms / step_ms */
} dp_profile_row_t;

typedef struct {
    int warmup, window; /* as asked */
    int steps;          /* steps timed: window, or fewer when training ended first */
    double step_ms;     /* mean step */
    double layers_ms;   /* the rows' sum */
    double outside_ms;  /* step_ms - layers_ms */
    double outside_share;
    double process_cpu_ms; /* the process's CPU time (every thread, user + system) between this device's
                            * step marks on the host, mean per timed step: on a shared machine the steadier
                            * figure; with CPU devices it covers every device's work */
    int num_rows;
    const dp_profile_row_t *rows; /* in the order first run: forward layers, then backward */
} dp_profile_report_t;

/* A profiler for a device of `backend` (its timer_* members when it has
 * them), warmup >= 0, window >= 1. */
dp_status_t dp_profiler_new(const dp_backend_t *backend, int warmup, int window, dp_profiler_t **out);
void dp_profiler_free(dp_profiler_t *p);

/* The caller's thread, between waits: a step begins / ended (the step
 * counts only when its end is marked). The window's last step_end reads
 * the marks (a wait for the device). */
dp_status_t dp_profiler_step_begin(dp_profiler_t *p);
dp_status_t dp_profiler_step_end(dp_profiler_t *p);
/* Reads what the window timed so far (a wait for the device) when it has
 * not closed yet (training ended first), and returns the report, valid
 * until the profiler is freed. Failures (a device's) are the status. */
dp_status_t dp_profiler_report(dp_profiler_t *p, const dp_profile_report_t **out);

/* The tape's side (device's thread): an op is about to run (returns a
 * handle for op_end, or -1 when nothing is timed now) / has run. */
int dp_profiler_op_begin(dp_profiler_t *p, const char *label, const char *label2, const dp_node_t *node,
                         dp_profile_direction_t direction);
void dp_profiler_op_end(dp_profiler_t *p, int handle);

#endif
