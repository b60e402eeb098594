/* fault_inject.h - faults injected on purpose by the test suite and the
 * soak benchmark (fault_inject.c): the environment variable DPTRAIN_FAULT
 * makes a chosen rank exit, kill itself, hang, stop or ask itself to stop
 * (SIGTERM) once the trainer's step count reaches a chosen step, in a
 * chosen attempt of `dptrain launch` (DPTRAIN_ATTEMPT, which the launcher
 * sets). Read by the fit loop only (fit_stop.c), at its step boundaries.
 * Library internal.
 *
 *   DPTRAIN_FAULT=FAULT[,FAULT...]   FAULT = ACTION:RANK:STEP[:ATTEMPT]
 *   ACTION  kill (SIGKILL), hang (the main thread sleeps for ever: it stops
 *           answering while its communication thread lives), stop
 *           (SIGSTOP: nothing answers), term (SIGTERM: a preemption
 *           request), exitN (exits at once with status N, 1 to 255)
 *   STEP    the trainer's step count (optimizer steps since the start of
 *           training, resumes included) after which it happens: after
 *           that step's checkpoint, if it has one
 *   ATTEMPT the launcher's attempt (0 = the first, the default), or * (every
 *           attempt)
 */
#ifndef DPTRAIN_FAULT_INJECT_H
#define DPTRAIN_FAULT_INJECT_H

#include <stdint.h>

#include "dptrain/status.h"

#define DP_FAULTS_MAX 32

typedef enum { DP_FAULT_KILL, DP_FAULT_HANG, DP_FAULT_STOP, DP_FAULT_TERM, DP_FAULT_EXIT } dp_fault_action_t;

typedef struct {
    dp_fault_action_t action;
    int exit_status; /* DP_FAULT_EXIT */
    int rank;
    uint64_t step;
    int attempt; /* -1: every attempt */
} dp_fault_t;

typedef struct {
    dp_fault_t fault[DP_FAULTS_MAX];
    int count;
    int rank, attempt; /* this process's */
} dp_faults_t;

/* Parses `text` (DPTRAIN_FAULT's syntax) for this rank in this attempt;
 * DP_ERR_ARG naming DPTRAIN_FAULT and the bad part. NULL or "": none. */
dp_status_t dp_faults_parse(const char *text, int rank, int attempt, dp_faults_t *out);

/* Reads DPTRAIN_FAULT and DPTRAIN_ATTEMPT (default 0) for this rank. */
dp_status_t dp_faults_from_env(int rank, dp_faults_t *out);

/* The trainer's step count is now `step`: does this rank's fault for it,
 * if any (returns only for none, or after term's signal). */
void dp_faults_at_step(const dp_faults_t *faults, uint64_t step);

#endif
