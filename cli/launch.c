/* launch.c - `dptrain launch`: the seeds' `paddle.distributed.launch
 * --log_dir ./mylog`, on Open MPI, and a job that survives its faults.
 * Builds the mpirun command (root and oversubscription handled, hosts
 * passed on), creates the log directory (and locks it: one launch per
 * directory), and stays the parent of mpirun
 * (launch_attempt.c); every rank writes its output to DIR/worklog.RANK
 * (train.c reads DPTRAIN_LOG_DIR) and its state to DIR/rank.RANK
 * (rank_record.h), which the launcher reads when an attempt fails
 * (launch_summary.c) to say which rank failed first, why, where and when.
 *
 * Restarts (--restarts K, torchrun's --max-restarts): a fault (a rank lost
 * or stalled, a device failed, a rank killed by a signal: report.h) runs
 * the job again, up to K times, resuming from its --save checkpoint when
 * there is one (--resume PATH added or replaced, a fine-tuning job's --init
 * FILE dropped: the save holds the run's weights); a mistake (a bad option,
 * bad data: exit status 1) ends at once, as does out of memory. The failed
 * attempt's worklogs are kept as DIR/worklog.RANK.attemptN. A job whose
 * ranks were preempted (SIGTERM to a rank, not to the launcher) saved at a
 * step boundary and is resumed without counting as a restart. The train
 * options are checked here first, so a typo is said once, before any rank.
 *
 * Elastic membership (launch_hosts.c): --np MIN:MAX with a host file read
 * again before each attempt, or a discovery command: an attempt starts
 * with as many ranks as the hosts offer, up to MAX, and waits (--min-wait)
 * for MIN; the run resumes on that rank count (same bits on the same
 * count, the float tolerance otherwise); a host that failed twice cools
 * off. A host mpirun could not reach (launch_unreachable.c: exit status 8)
 * is left out of the next attempt at once, from a --hosts list too, which
 * then runs on the remaining slots if they are --np's MIN.
 *
 * Across hosts, mpirun's daemons talk over TCP, and a dead link is only
 * noticed when TCP gives up. launch turns on TCP keepalive on those
 * connections (oob_tcp_keepalive_*: probes from 1 s of silence, 5 of them,
 * I = ceil((T + 2) / 5) s apart, T being the job's --comm-timeout), so an
 * idle daemon link that dies is declared lost after T + 2 to T + 3 + I
 * seconds: later than the ranks' own check, which names the silent rank.
 * Once a rank has ended the job, mpirun's message to the lost host's daemon
 * is pending, and then TCP's retransmission limit decides instead
 * (net.ipv4.tcp_retries2 on the launching host: about 15 minutes by
 * default, about 3 s with 3; see docs/multi-process.md). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"
#include "dptrain/status.h"
#include "launch.h"
#include "options.h"
#include "train.h"

static const char launch_usage[] =
    "usage: dptrain launch --np N|MIN:MAX [--hosts LIST | --hostfile FILE | --host-discovery COMMAND]\n"
    "                      [--log-dir DIR] [--restarts K] [--cooling SECONDS] [--min-wait SECONDS]\n"
    "                      -- train [train options]\n"
    "\n"
    "Starts N processes with mpirun, each running `dptrain train ...` as one rank, and\n"
    "stays with them: it restarts the job after a fault, passes SIGTERM on as a request\n"
    "to save and stop, and says which rank failed first, why, where and when.\n"
    "\n"
    "options:\n"
    "  --np N|MIN:MAX              number of processes (ranks); MIN:MAX: as many as the\n"
    "                              hosts offer, at most MAX, at least MIN\n"
    "  --hosts LIST                hosts and slots, passed to mpirun --host (default: this\n"
    "                              machine)\n"
    "  --hostfile FILE             hosts and slots, one per line (host:slots, or host\n"
    "                              slots=N), read again before every attempt\n"
    "  --host-discovery COMMAND    a command printing host:slots lines, run before every\n"
    "                              attempt (Horovod's convention)\n"
    "  --log-dir DIR               one log per process: DIR/worklog.0, DIR/worklog.1, ...\n"
    "                              (created); without it the ranks' output goes to this\n"
    "                              terminal\n"
    "  --restarts K                when the job fails by a fault (a rank lost, stalled or\n"
    "                              killed, a device failed, a host not reached: left out),\n"
    "                              run it again, up to K times, resuming from the --save\n"
    "                              checkpoint when it exists; a mistake (exit status 1) is\n"
    "                              never retried (default 0)\n"
    "  --cooling SECONDS           with --hostfile or --host-discovery: a host that failed\n"
    "                              twice is left out this long, twice as long after each\n"
    "                              further failure (default 10)\n"
    "  --min-wait SECONDS          how long an attempt waits for MIN ranks (default 60)\n"
    "  --help                      show this help\n"
    "\n"
    "SIGTERM (or SIGUSR1): every rank saves at its next step boundary and the job ends\n"
    "with exit status 6; SIGINT or a second SIGTERM ends it at once.\n";

/* mkdir -p for one level; an existing directory is fine. */
static dp_status_t make_log_dir(const char *dir) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK) == 0) return DP_OK;
    }
    return dp_fail(DP_ERR_IO, "launch: --log-dir %s: cannot create or write the directory (%s)", dir,
                   strerror(errno));
}

/* Holds DIR/launch.lock (flock) for the launcher's life, so that a second
 * launch on the same log directory stops at once instead of overwriting
 * the first one's worklogs and rank records. The kernel releases it when
 * the launcher ends, however it ends. */
static dp_status_t lock_log_dir(const char *dir) {
    char path[4200], holder[32] = "";
    snprintf(path, sizeof path, "%s/launch.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dp_fail(DP_ERR_IO, "launch: --log-dir %s: cannot create %s (%s)", dir, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = read(fd, holder, sizeof holder - 1);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (e != EWOULDBLOCK) return dp_fail(DP_ERR_IO, "launch: --log-dir %s: cannot lock %s (%s)", dir, path, strerror(e));
        return dp_fail(DP_ERR_ARG, "launch: --log-dir %s is in use by another dptrain launch%s%s%s: give each job a log "
                       "directory of its own", dir, holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "");
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || write(fd, pid, (size_t)len) != len) { /* the pid is only for the message above */
    }
    return DP_OK; /* fd stays open: the lock lasts until the launcher exits */
}

/* --np N or MIN:MAX. */
static dp_status_t parse_np(const char *text, int *np_min, int *np_max) {
    char *end;
    long a = strtol(text, &end, 10), b = a;
    if (end != text && *end == ':') {
        const char *second = end + 1;
        b = strtol(second, &end, 10);
        if (end == second) b = -1;
    }
    if (end == text || *end || a < 1 || b < a || b > 4096)
        return dp_fail(DP_ERR_ARG, "launch: --np: '%s' is not N or MIN:MAX (1 <= MIN <= MAX <= 4096)", text);
    *np_min = (int)a;
    *np_max = (int)b;
    return DP_OK;
}

/* Keeps DIR/worklog.R of a failed attempt as DIR/worklog.R.attemptN. */
static void keep_worklogs(const char *log_dir, int np, int attempt) {
    char from[4200], to[4300];
    for (int r = 0; r < np; r++) {
        snprintf(from, sizeof from, "%s/worklog.%d", log_dir, r);
        snprintf(to, sizeof to, "%s/worklog.%d.attempt%d", log_dir, r, attempt);
        rename(from, to); /* a rank that never started has none */
    }
}

/* Removes DIR/rank.R for R < np (an earlier attempt's records). */
static void remove_records(const char *dir, int np) {
    char path[4200];
    for (int r = 0; r < np; r++) {
        snprintf(path, sizeof path, "%s/rank.%d", dir, r);
        unlink(path);
    }
}

/* What stays the same across attempts. */
typedef struct {
    const char *self, *log_dir, *record_dir;
    launch_hosts_t hosts;
    char keepalive_intvl[32];
    char **train_args; /* "train" and its options, as given */
    int train_argc;
    const char *save, *resume; /* the job's --save, and the --resume to use (the save once it exists) */
    const char *given_resume;  /* the job's own --resume (NULL: none) */
} job_t;

/* mpirun's command for an attempt on `pick` (NULL-terminated; free it). */
static const char **attempt_command(const job_t *job, const launch_pick_t *pick, char *np_text, size_t np_size) {
    const char **args = calloc((size_t)job->train_argc + 40, sizeof *args);
    if (!args) return NULL;
    int n = 0;
    snprintf(np_text, np_size, "%d", pick->ranks);
    args[n++] = "mpirun";
    if (geteuid() == 0) args[n++] = "--allow-run-as-root";
    if (pick->count == 0 && pick->ranks > sysconf(_SC_NPROCESSORS_ONLN)) args[n++] = "--oversubscribe";
    args[n++] = "-np";
    args[n++] = np_text;
    if (pick->count > 0) {
        args[n++] = "--host";
        args[n++] = pick->mpirun_hosts;
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_time";
        args[n++] = "1";
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_intvl";
        args[n++] = job->keepalive_intvl;
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_probes";
        args[n++] = "5";
    }
    if (job->log_dir) args[n++] = "-x", args[n++] = "DPTRAIN_LOG_DIR";
    args[n++] = "-x", args[n++] = "DPTRAIN_RECORD_DIR";
    args[n++] = "-x", args[n++] = "DPTRAIN_ATTEMPT";
    if (getenv("DPTRAIN_FAULT")) args[n++] = "-x", args[n++] = "DPTRAIN_FAULT"; /* the test suite's faults */
    args[n++] = job->self;
    for (int i = 0; i < job->train_argc; i++) { /* the job's own --resume (and --init) give way to its save */
        const char *a = job->train_args[i];
        int init = strcmp(a, "--init") == 0; /* the weights a fine-tuning job started from: its save holds them now */
        if (job->resume && (init || strcmp(a, "--resume") == 0) && i + 1 < job->train_argc) {
            i++;
            continue;
        }
        if (job->resume && strcmp(a, "--fresh-head") == 0) continue; /* --init's, gone with it */
        if (job->resume && (strncmp(a, "--resume=", 9) == 0 || strncmp(a, "--init=", 7) == 0)) continue;
        args[n++] = a;
    }
    if (job->resume) args[n++] = "--resume", args[n++] = job->resume;
    args[n] = NULL;
    return args;
}

/* "from the beginning (...)" or "resuming from PATH". */
static const char *resume_words(const job_t *job, char *text, size_t size) {
    if (job->resume) snprintf(text, size, "resuming from %s", job->resume);
    else if (job->save) snprintf(text, size, "from the beginning (no checkpoint in %s yet)", job->save);
    else snprintf(text, size, "from the beginning (the job has no --save)");
    return text;
}

/* How a job the launcher was asked to stop goes on: a new launch resumes
 * only from the --resume it is given, so the same command continues only
 * where that is the save already. */
static const char *continue_words(const job_t *job, char *text, size_t size) {
    if (!job->save) snprintf(text, size, "nothing was saved (the job has no --save): the same command starts over");
    else if (!job->resume || strcmp(job->resume, job->save) != 0)
        snprintf(text, size, "no checkpoint in %s yet: the same command starts over", job->save);
    else if (job->given_resume && strcmp(job->given_resume, job->resume) == 0)
        snprintf(text, size, "the same command continues, resuming from %s", job->resume);
    else if (job->given_resume)
        snprintf(text, size, "saved to %s: continue with the same command, --resume %s in place of --resume %s",
                 job->resume, job->resume, job->given_resume);
    else snprintf(text, size, "saved to %s: continue with the same command and --resume %s", job->resume,
                  job->resume);
    return text;
}

/* After a failed attempt: resume from the save once it exists. */
static void update_resume(job_t *job) {
    struct stat st;
    if (job->save && stat(job->save, &st) == 0 && S_ISREG(st.st_mode)) job->resume = job->save;
}

/* "a mistake, exit status 1, is not a fault", or for a status that is not
 * one of dptrain's (mpirun's own 255) "exit status 255 is not a fault". */
static const char *not_a_fault_words(int code, char *text, size_t size) {
    char meaning[128];
    const char *what = cli_exit_meaning(code, meaning, sizeof meaning);
    if (strncmp(what, "exit status", 11) == 0) snprintf(text, size, "exit status %d is not a fault", code);
    else snprintf(text, size, "%s, exit status %d, is not a fault", what, code);
    return text;
}

/* After an attempt that could not reach hosts (f), before the next: leaves
 * them out (launch_hosts_unreachable), saying for how long (and in f's
 * line, for the summary); with a fixed --hosts list, whether what is left
 * still has --np's MIN slots (0, said in one line, when not: waiting
 * cannot bring more). */
static int leave_out_unreachable(job_t *job, launch_failure_t *f, int np_min, int np_max) {
    for (int i = 0; i < f->unreachable_count; i++) {
        double seconds = launch_hosts_unreachable(&job->hosts, f->unreachable[i]);
        launch_log(job->log_dir, "host %s left out for %g s (it could not be reached)", f->unreachable[i], seconds);
        if (i == 0) {
            size_t used = strlen(f->line);
            snprintf(f->line + used, sizeof f->line - used, ", left out for %g s", seconds);
        }
    }
    if (!job->hosts.list || f->unreachable_count == 0) return 1;
    static launch_pick_t next;
    if (launch_hosts_pick(&job->hosts, np_min, np_max, 0.0, NULL, &next) == DP_OK) return 1;
    launch_log(job->log_dir, "%s; not restarted", dp_error_message());
    return 0;
}

#define FAILURES_MAX 64

/* The attempts, until one finishes, one fails by a mistake, the restarts
 * run out, fewer than MIN ranks come, or a signal ends it. */
static int run_attempts(job_t *job, int np_min, int np_max, int restarts, double min_wait) {
    launch_failure_t failures[FAILURES_MAX];
    int failed = 0, restarted = 0, exit_code = 1;
    char words[4400], meaning[128], attempt_text[16];
    for (int attempt = 0;; attempt++) {
        launch_pick_t pick;
        if (launch_hosts_pick(&job->hosts, np_min, np_max, min_wait, job->log_dir, &pick) != DP_OK) {
            if (dp_error_status() == DP_ERR_ARG) return cli_report_error();
            if (!launch_signals.interrupt && !launch_signals.preempt) {
                launch_log(job->log_dir, "%s", dp_error_message());
                exit_code = CLI_EXIT_NO_RANKS;
                break;
            }
        }
        if (launch_signals.interrupt || launch_signals.preempt) { /* asked before it ran */
            launch_log(job->log_dir, "stopped before attempt %d (%s)", attempt + 1,
                       strsignal(launch_signals.interrupt ? launch_signals.interrupt : launch_signals.preempt));
            exit_code = launch_signals.interrupt ? 128 + launch_signals.interrupt : CLI_EXIT_PREEMPTED;
            break;
        }
        if (attempt > 0)
            launch_log(job->log_dir, "attempt %d: %d rank%s%s%s", attempt + 1, pick.ranks, pick.ranks == 1 ? "" : "s",
                       pick.count ? " on " : "", pick.mpirun_hosts);
        remove_records(job->record_dir, pick.ranks);
        snprintf(attempt_text, sizeof attempt_text, "%d", attempt);
        setenv("DPTRAIN_ATTEMPT", attempt_text, 1);
        char np_text[16];
        const char **args = attempt_command(job, &pick, np_text, sizeof np_text);
        if (!args) return cli_report_error();
        static launch_mpirun_said_t said;
        int status = launch_run_mpirun(args, job->log_dir, job->record_dir, &pick, &said);
        free(args);
        if (status == -1) {
            launch_log(job->log_dir, "cannot start mpirun (%s)", strerror(errno));
            return CLI_EXIT_NO_MPIRUN;
        }
        launch_failure_t f;
        launch_summarize(job->record_dir, job->log_dir, &pick, attempt, status, &f);
        if (said.daemon_failed && f.code != 0) { /* a host not reached, unless a rank's record says otherwise */
            static launch_failure_t unreachable;
            launch_name_unreachable(&pick, job->record_dir, job->log_dir, attempt, said.text, &unreachable);
            if (!f.known || unreachable.unreachable_count > 0) f = unreachable;
        }
        if (f.code == 0) {
            exit_code = 0;
            if (f.mpirun_after) /* e.g. Ctrl-C after the last rank had ended, before mpirun had */
                launch_log(job->log_dir, "every rank had finished when mpirun ended (%s): the job is done",
                           cli_exit_meaning(f.mpirun_after, meaning, sizeof meaning));
            if (failed) launch_log(job->log_dir, "the job finished after %d restart%s", attempt, attempt > 1 ? "s" : "");
            break;
        }
        exit_code = f.code;
        int fault = cli_exit_is_fault(f.code), preempted = f.code == CLI_EXIT_PREEMPTED;
        int again = !launch_signals.interrupt && !launch_signals.preempt &&
                    (preempted || (fault && restarted < restarts));
        if (again && job->log_dir) { /* the next attempt writes worklog.R again */
            keep_worklogs(job->log_dir, pick.ranks, attempt + 1);
            if (f.rank >= 0)
                snprintf(f.log, sizeof f.log, "log %s/worklog.%d.attempt%d", job->log_dir, f.rank, attempt + 1);
        }
        update_resume(job);
        int stored = failed < FAILURES_MAX;
        if (stored) failures[failed++] = f;
        if (launch_signals.interrupt) { /* the ranks were ended by mpirun on the launcher's word */
            launch_log(job->log_dir, "interrupted (%s): the job was ended at step %llu, not restarted",
                       strsignal(launch_signals.interrupt), f.step);
            exit_code = 128 + launch_signals.interrupt;
            break;
        }
        if (launch_signals.preempt && preempted) {
            launch_log(job->log_dir, "preempted (%s): every rank stopped after step %llu; %s",
                       strsignal(launch_signals.preempt), f.step, continue_words(job, words, sizeof words));
            break;
        }
        /* a mistake's line is on the terminal already when the ranks write there */
        int mistake = !fault && !preempted, say_message = f.message[0] && (job->log_dir || !f.known);
        if (mistake) { /* one line: the rank's own on the terminal, or this one (always when no rank said it) */
            if (job->log_dir || !f.known)
                launch_log(job->log_dir, "the job failed: %s%s%s; %s; not restarted (%s)", f.line,
                           say_message ? ": " : "", say_message ? f.message : "", f.log,
                           not_a_fault_words(f.code, meaning, sizeof meaning));
            break;
        }
        launch_log(job->log_dir, "attempt %d failed: %s%s%s; %s", attempt + 1, f.line, say_message ? ": " : "",
                   say_message ? f.message : "", f.log);
        if (launch_signals.preempt) {
            launch_log(job->log_dir, "asked to stop (%s): not restarting", strsignal(launch_signals.preempt));
            break;
        }
        if (preempted) { /* a rank was told to stop, not the launcher: a node going away */
            launch_log(job->log_dir, "a rank was asked to stop (preempted): running the job again, %s (not counted "
                       "as a restart)", resume_words(job, words, sizeof words));
            continue;
        }
        if (f.code == CLI_EXIT_UNREACHABLE) {
            int next = !again || leave_out_unreachable(job, &f, np_min, np_max);
            if (stored) failures[failed - 1] = f; /* its line says it was left out */
            if (!next) break;
        } else {
            double cooling = launch_hosts_failed(&job->hosts, f.blamed_host);
            if (cooling > 0.0)
                launch_log(job->log_dir, "host %s has failed again: left out for %g s", f.blamed_host, cooling);
        }
        if (!again) {
            if (restarts > 0) launch_log(job->log_dir, "no restarts left (--restarts %d)", restarts);
            break;
        }
        restarted++;
        launch_log(job->log_dir, "restart %d of %d, %s", restarted, restarts, resume_words(job, words, sizeof words));
    }
    if (failed > 1 || (failed == 1 && exit_code == 0)) { /* the summary: every failure survived or not */
        launch_log(job->log_dir, "%d failure%s:", failed, failed == 1 ? "" : "s");
        for (int i = 0; i < failed; i++)
            launch_log(job->log_dir, "  %d. %s; %s", i + 1, failures[i].line, failures[i].log);
    }
    return exit_code;
}

int cmd_launch(int argc, char **argv) {
    int restarts = 0;
    float cooling = 10.0f, min_wait = 60.0f;
    const char *np_text = NULL;
    job_t job = {0};
    const option_t options[] = {
        {"np", OPT_STRING, &np_text, 0, 0},
        {"restarts", OPT_INT, &restarts, 0, 1000},
        {"hosts", OPT_STRING, &job.hosts.list, 0, 0},
        {"hostfile", OPT_STRING, &job.hosts.file, 0, 0},
        {"host-discovery", OPT_STRING, &job.hosts.discovery, 0, 0},
        {"cooling", OPT_FLOAT, &cooling, 0, 0},
        {"min-wait", OPT_FLOAT, &min_wait, 0, 0},
        {"log-dir", OPT_STRING, &job.log_dir, 0, 0},
        {NULL, 0, NULL, 0, 0},
    };
    int split = argc; /* the "--" that starts the command */
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            split = i;
            break;
        }
    int help = 0, np_min = 0, np_max = 0;
    if (options_parse("launch", options, split, argv, 2, &help) != DP_OK) return cli_report_error();
    if (help) {
        fputs(launch_usage, stdout);
        return 0;
    }
    if (!np_text) {
        dp_fail(DP_ERR_ARG, "launch: --np N is required (the number of processes)");
        return cli_report_error();
    }
    if (parse_np(np_text, &np_min, &np_max) != DP_OK) return cli_report_error();
    if (!!job.hosts.list + !!job.hosts.file + !!job.hosts.discovery > 1) {
        dp_fail(DP_ERR_ARG, "launch: give one of --hosts, --hostfile and --host-discovery");
        return cli_report_error();
    }
    if (cooling < 0.0f || min_wait < 0.0f) {
        dp_fail(DP_ERR_ARG, "launch: --%s must be >= 0 seconds", cooling < 0.0f ? "cooling" : "min-wait");
        return cli_report_error();
    }
    job.hosts.cooling = cooling;
    if (split + 1 >= argc || strcmp(argv[split + 1], "train") != 0) {
        dp_fail(DP_ERR_ARG, "launch: expected `-- train [train options]` after the launch options");
        return cli_report_error();
    }
    /* the job's options, checked once here rather than by every rank */
    train_options_t train;
    int train_help = 0;
    if (train_options_parse(argc, argv, split + 2, &train, &train_help) != DP_OK) return cli_report_error();
    if (train_check_init_resume(&train, "launch: ") != DP_OK) return cli_report_error(); /* restarts drop --init */
    if (job.hosts.list) { /* a fixed list is checked once, before anything is made */
        static launch_pick_t pick;
        if (launch_hosts_pick(&job.hosts, np_min, np_max, 0.0, NULL, &pick) != DP_OK) return cli_report_error();
    }
    if (job.log_dir && (make_log_dir(job.log_dir) != DP_OK || lock_log_dir(job.log_dir) != DP_OK))
        return cli_report_error();

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        dp_fail(DP_ERR_IO, "launch: cannot find the dptrain executable (/proc/self/exe)");
        return cli_report_error();
    }
    self[len] = '\0';
    job.self = self;
    char log_dir[4096], record_dir[4096] = "";
    if (job.log_dir) {
        if (!realpath(job.log_dir, log_dir)) snprintf(log_dir, sizeof log_dir, "%s", job.log_dir);
        setenv("DPTRAIN_LOG_DIR", log_dir, 1);
        setenv("DPTRAIN_RECORD_DIR", log_dir, 1);
        job.record_dir = log_dir;
    } else { /* the records in a directory of our own */
        const char *tmp = getenv("TMPDIR");
        snprintf(record_dir, sizeof record_dir, "%s/dptrain-launch.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(record_dir)) {
            dp_fail(DP_ERR_IO, "launch: cannot make a directory for the ranks' records (%s): %s", record_dir,
                    strerror(errno));
            return cli_report_error();
        }
        setenv("DPTRAIN_RECORD_DIR", record_dir, 1);
        job.record_dir = record_dir;
    }
    /* --comm-timeout of the job, for the daemons' keepalive across hosts:
     * declared lost after 5 unanswered probes, one every I seconds,
     * starting 1 s after the last traffic: 5 I >= T + 2 */
    double timeout = train.comm_timeout > 0.0f ? train.comm_timeout : 300.0;
    if (timeout > 100000.0) timeout = 100000.0;
    snprintf(job.keepalive_intvl, sizeof job.keepalive_intvl, "%d", (int)ceil((timeout + 2.0) / 5.0));
    job.train_args = argv + split + 1;
    job.train_argc = argc - split - 1;
    job.save = train.save_path;
    job.resume = job.given_resume = train.resume_path;
    if (restarts > 0 && !job.save)
        launch_log(job.log_dir, "the job has no --save: a restart will start it over from the beginning");
    launch_signals_install();
    int code = run_attempts(&job, np_min, np_max, restarts, min_wait);
    remove_records(job.record_dir, np_max);
    if (record_dir[0]) rmdir(record_dir);
    return code;
}
