/* launch_summary.c - what the ranks' records (rank_record.h) say of an
 * attempt of `dptrain launch` that failed (launch.h): the first rank to
 * fail, by time, and why.
 *
 * A rank's record tells how it ended: by itself (an exit status and its
 * line, when), after a signal it caught (SIGTERM from mpirun, which ends
 * the other ranks once one has failed: a victim, not a cause), or neither:
 * it died of what it could not catch (SIGKILL, a crash), which mpirun's
 * exit status names (128 + the signal). The first failure is, in this
 * order: a rank that died without having been signalled (the cause: the
 * others were ended after it; the lowest such rank), else the rank that
 * ended by itself with a failure first, else the rank signalled first.
 * The failure is put on the host of the rank that failed, except for a
 * stalled collective, whose reporter names the silent ranks: then on the
 * first silent rank's host (the one to cool off).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "report.h"

/* The host that runs rank r: the pick's (mpirun fills each host's slots in
 * order), else the record's own name. */
static const char *host_of(const launch_pick_t *pick, const rank_record_t *records, const int *have, int r) {
    for (int i = 0, first = 0; i < pick->count; first += pick->slots[i++])
        if (r < first + pick->slots[i]) return pick->names[i];
    return r >= 0 && have[r] ? records[r].host : "?";
}

static void describe_step(const rank_record_t *rec, char *text, size_t size) {
    if (!rec->training) {
        snprintf(text, size, "before training");
        return;
    }
    unsigned long long step = rec->step;
    int per = rec->steps_per_epoch > 0 ? rec->steps_per_epoch : 1;
    if (step % (unsigned long long)per == 0 && step > 0)
        snprintf(text, size, "at step %llu (the end of epoch %llu)", step, step / (unsigned long long)per);
    else
        snprintf(text, size, "at step %llu (epoch %llu, step %llu of %d)", step, step / (unsigned long long)per + 1,
                 step % (unsigned long long)per, per);
}

int launch_rank_files(const char *dir, const char *prefix, int ranks) {
    char path[4200];
    int found = 0;
    for (int r = 0; r < ranks; r++) {
        snprintf(path, sizeof path, "%s/%s.%d", dir, prefix, r);
        found += access(path, F_OK) == 0;
    }
    return found;
}

void launch_summarize(const char *record_dir, const char *log_dir, const launch_pick_t *pick, int attempt,
                      int wait_status, launch_failure_t *out) {
    memset(out, 0, sizeof *out);
    out->rank = -1;
    int np = pick->ranks;
    int mpirun_code = wait_status < 0 ? CLI_EXIT_NO_MPIRUN
                      : WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    static rank_record_t records[4096];
    static int have[4096];
    if (np > 4096) np = 4096;
    int any = 0, died = -1, ended = -1, signalled = -1, all_ok = 1;
    for (int r = 0; r < np; r++) {
        have[r] = record_dir && rank_record_read(record_dir, r, attempt, &records[r]);
        if (!have[r]) {
            all_ok = 0;
            continue;
        }
        const rank_record_t *rec = &records[r];
        any = 1;
        if (!rec->ended && rec->signals == 0 && died < 0) died = r;
        if (rec->ended && rec->exit_code != 0 && (ended < 0 || rec->ended_at < records[ended].ended_at)) ended = r;
        if (!rec->ended && rec->signals > 0 && (signalled < 0 || rec->signal_at < records[signalled].signal_at))
            signalled = r;
        if (!rec->ended || rec->exit_code != 0) all_ok = 0;
    }
    if (all_ok) { /* finished: every rank saved and ended by itself; what mpirun did after cannot undo it */
        out->mpirun_after = mpirun_code;
        return;
    }
    /* a failure every rank agreed on: rank 0's words */
    if (died < 0 && ended > 0 && records[ended].agreed && have[0] && records[0].ended && records[0].agreed) ended = 0;
    int r = died >= 0 ? died : ended >= 0 ? ended : signalled;
    char meaning[128];
    if (!any || r < 0) { /* mpirun's word only */
        out->code = mpirun_code ? mpirun_code : 1;
        snprintf(out->line, sizeof out->line, "mpirun: %s (%s)", cli_exit_meaning(out->code, meaning, sizeof meaning),
                 any ? "the ranks that left a record ended well" : "no rank left a record: did the job start?");
        if (log_dir && launch_rank_files(log_dir, "worklog", np) > 0) /* a rank that started wrote one */
            snprintf(out->log, sizeof out->log, "see the worklogs in %s", log_dir);
        else snprintf(out->log, sizeof out->log, "see mpirun's message above");
        return;
    }
    const rank_record_t *rec = &records[r];
    out->known = 1;
    out->rank = r;
    out->pid = rec->pid;
    out->training = rec->training;
    out->step = rec->step;
    out->first_step = rec->first_step;
    out->steps_per_epoch = rec->steps_per_epoch;
    snprintf(out->host, sizeof out->host, "%s", host_of(pick, records, have, r));
    snprintf(out->message, sizeof out->message, "%s", rec->ended ? rec->message : "");
    int blamed = r;
    if (rec->ended && rec->exit_code == CLI_EXIT_COMM && rec->num_suspects > 0 && rec->suspects[0] >= 0 &&
        rec->suspects[0] < np)
        blamed = rec->suspects[0];
    snprintf(out->blamed_host, sizeof out->blamed_host, "%s", host_of(pick, records, have, blamed));
    char how[256], step[128];
    if (rec->ended) {
        out->code = rec->exit_code;
        snprintf(how, sizeof how, "exit status %d (%s)", rec->exit_code,
                 cli_exit_meaning(rec->exit_code, meaning, sizeof meaning));
    } else if (r == died && mpirun_code > 128) {
        out->code = mpirun_code;
        out->signal = mpirun_code - 128;
        snprintf(how, sizeof how, "killed by signal %d (%s)", out->signal, strsignal(out->signal));
    } else if (r == died) { /* mpirun's status is the first rank's to exit */
        out->code = mpirun_code ? mpirun_code : 1;
        snprintf(how, sizeof how, "exited with status %d (%s) without a word", out->code,
                 cli_exit_meaning(out->code, meaning, sizeof meaning));
    } else {
        out->code = mpirun_code ? mpirun_code : 128 + rec->signal;
        snprintf(how, sizeof how, "ended after signal %d (%s)", rec->signal, strsignal(rec->signal));
    }
    describe_step(rec, step, sizeof step);
    if (log_dir) snprintf(out->log, sizeof out->log, "log %s/worklog.%d", log_dir, r);
    else snprintf(out->log, sizeof out->log, "no log file (no --log-dir)");
    snprintf(out->line, sizeof out->line, "rank %d on %s (pid %d): %s %s", r, out->host, rec->pid, how, step);
}
