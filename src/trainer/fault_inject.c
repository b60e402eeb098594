/* fault_inject.c - DPTRAIN_FAULT (fault_inject.h): the test suite's and the
 * soak benchmark's faults on real processes. Exiting here is the point: it
 * stands for a process that crashes, is killed or hangs, which no status
 * could report; nothing else in the library exits. */
#include "fault_inject.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One FAULT (ACTION:RANK:STEP[:ATTEMPT]) of `len` bytes at `text`. */
static dp_status_t parse_one(const char *text, size_t len, dp_fault_t *f) {
    char item[128], action[32];
    if (len == 0 || len >= sizeof item)
        return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: '%.*s' is not ACTION:RANK:STEP[:ATTEMPT]", (int)len, text);
    memcpy(item, text, len);
    item[len] = '\0';
    long rank = -1;
    unsigned long long step = 0;
    char attempt[16] = "0";
    int n = 0, fields = sscanf(item, "%31[^:]:%ld:%llu%n:%15[^:]%n", action, &rank, &step, &n, attempt, &n);
    if (fields < 3 || (size_t)n != len || rank < 0 || rank > 1 << 20 || item[strcspn(item, "-")] == '-')
        return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: '%s' is not ACTION:RANK:STEP[:ATTEMPT] (e.g. kill:1:30)", item);
    *f = (dp_fault_t){.rank = (int)rank, .step = step, .attempt = -1};
    if (strcmp(attempt, "*") != 0) {
        char *end;
        long a = strtol(attempt, &end, 10);
        if (*end || end == attempt || a < 0 || a > 1 << 20)
            return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: '%s': the attempt '%s' is not a number or *", item, attempt);
        f->attempt = (int)a;
    }
    if (strcmp(action, "kill") == 0) f->action = DP_FAULT_KILL;
    else if (strcmp(action, "hang") == 0) f->action = DP_FAULT_HANG;
    else if (strcmp(action, "stop") == 0) f->action = DP_FAULT_STOP;
    else if (strcmp(action, "term") == 0) f->action = DP_FAULT_TERM;
    else if (strncmp(action, "exit", 4) == 0 && (f->exit_status = atoi(action + 4)) >= 1 && f->exit_status <= 255 &&
             strspn(action + 4, "0123456789") == strlen(action + 4))
        f->action = DP_FAULT_EXIT;
    else
        return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: '%s': the action '%s' is not kill, hang, stop, term or exitN "
                       "(N from 1 to 255)", item, action);
    return DP_OK;
}

dp_status_t dp_faults_parse(const char *text, int rank, int attempt, dp_faults_t *out) {
    *out = (dp_faults_t){.rank = rank, .attempt = attempt};
    if (!text) return DP_OK;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, ",");
        if (out->count == DP_FAULTS_MAX)
            return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: more than %d faults", DP_FAULTS_MAX);
        DP_TRY(parse_one(p, len, &out->fault[out->count]));
        out->count++;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p) return dp_fail(DP_ERR_ARG, "DPTRAIN_FAULT: '%s' ends with a comma", text);
        }
    }
    return DP_OK;
}

dp_status_t dp_faults_from_env(int rank, dp_faults_t *out) {
    const char *attempt_text = getenv("DPTRAIN_ATTEMPT");
    int attempt = 0;
    if (attempt_text && *attempt_text) {
        char *end;
        long a = strtol(attempt_text, &end, 10);
        if (*end || a < 0 || a > 1 << 20)
            return dp_fail(DP_ERR_ARG, "DPTRAIN_ATTEMPT: '%s' is not an attempt number", attempt_text);
        attempt = (int)a;
    }
    return dp_faults_parse(getenv("DPTRAIN_FAULT"), rank, attempt, out);
}

void dp_faults_at_step(const dp_faults_t *faults, uint64_t step) {
    for (int i = 0; i < faults->count; i++) {
        const dp_fault_t *f = &faults->fault[i];
        if (f->rank != faults->rank || f->step != step || (f->attempt >= 0 && f->attempt != faults->attempt))
            continue;
        char line[160];
        int n = snprintf(line, sizeof line, "dptrain: DPTRAIN_FAULT: rank %d, step %llu: %s\n", faults->rank,
                         (unsigned long long)step, f->action == DP_FAULT_KILL ? "SIGKILL"
                         : f->action == DP_FAULT_HANG ? "hanging" : f->action == DP_FAULT_STOP ? "SIGSTOP"
                         : f->action == DP_FAULT_TERM ? "SIGTERM" : "exiting");
        fflush(stdout);
        if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* the fault matters, not its line */
        }
        switch (f->action) {
        case DP_FAULT_KILL: raise(SIGKILL); break;
        case DP_FAULT_STOP: raise(SIGSTOP); break;
        case DP_FAULT_TERM: raise(SIGTERM); break;
        case DP_FAULT_EXIT: _exit(f->exit_status);
        case DP_FAULT_HANG:
            for (;;) {
                struct timespec pause = {3600, 0};
                while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
                }
            }
        }
    }
}
