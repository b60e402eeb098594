/* launch_attempt.c - one run of mpirun for `dptrain launch` (launch.h): the
 * launcher's signals, mpirun as a child whose output passes through, and
 * the launch log.
 *
 * Signals. The handler only notes them; the loop that passes mpirun's
 * output on (woken by the signal) sends them on. The first SIGTERM (or
 * SIGUSR1) is a preemption: it goes to mpirun as SIGUSR1, which mpirun
 * forwards to every rank on every host (SIGTERM would make mpirun kill
 * them), and every rank saves at its next step boundary and exits with
 * the preempted status (train_signals.c); until mpirun and the ranks are
 * ready for it, it waits (FORWARD_AFTER_SEC). SIGINT, or another SIGTERM, ends
 * the job at once: SIGTERM to mpirun, which ends the ranks. mpirun runs in a process group of its own, so
 * that a terminal's Ctrl-C or a scheduler's signal to the launcher's group
 * reaches the launcher alone, which decides; it is sent SIGTERM by the
 * kernel if the launcher dies (PR_SET_PDEATHSIG), so nothing is left
 * running. Its stdin is /dev/null (a background process group must not
 * read the terminal).
 *
 * Output. mpirun's stdout (the ranks' stdout) passes through as it comes.
 * Its stderr passes through line by line, except Open MPI's messages about
 * a job that ended (the blocks between lines of dashes saying that a
 * process exited with a non-zero status, was killed by a signal or called
 * MPI_ABORT, its aggregation notes, its "Forwarding signal" lines): the
 * launcher's own line on the failure says which rank failed first, why and
 * where, and these blocks go to DIR/launch.log instead (with --log-dir).
 * So does its paragraph about a daemon it could not start, with what came
 * before and after it: until a rank has started (its record is there; 30
 * s at most), all mpirun's output is its and its daemons' (the launch
 * agent's "ssh: Could not resolve hostname h2: ...", a failing daemon's
 * own paragraphs, on stderr or stdout), and is held; the launcher's line
 * names the host instead (launch_unreachable.c). Held text that no such
 * paragraph follows passes through once a rank starts or mpirun ends, as
 * does any other block (not enough slots, ...).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "launch.h"

launch_signals_t launch_signals;

/* mpirun forwards SIGUSR1 once it has set itself up, and a rank takes it
 * once it has installed its handler; before, SIGUSR1 would end either. So
 * the request waits until mpirun has run FORWARD_AFTER_SEC and every rank
 * has made its record (after its handlers), or FORWARD_ANYWAY_SEC (records
 * that cannot be seen: hosts without the log directory). */
#define FORWARD_AFTER_SEC 1.0
#define FORWARD_ANYWAY_SEC 10.0

/* mpirun's output before any rank has started is held this long at most
 * (then passed on: a daemon failure after it is named all the same, its
 * agent's line said twice). */
#define HOLD_MAX_SEC 30.0


/* Notes the signal; launch_run_mpirun's loop (woken by it) passes it on. */
static void on_signal(int sig) {
    if (sig == SIGINT || (sig == SIGTERM && launch_signals.preempt)) launch_signals.interrupt = sig;
    else if (!launch_signals.preempt) launch_signals.preempt = sig; /* (SIGUSR1 again: asked already) */
}

void launch_signals_install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
}

void launch_log(const char *log_dir, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dptrain launch: %s\n", line);
    fflush(stderr);
    if (!log_dir) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/launch.log", log_dir);
    FILE *f = fopen(path, "a");
    if (!f) return;
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    fprintf(f, "%s %s\n", stamp, line);
    fclose(f);
}

/* --- mpirun's stderr, filtered ----------------------------------------------- */

/* Open MPI's messages about a job that ended: what the launcher's summary replaces. */
static const char *const ended_job[] = {
    "Primary job  terminated normally",
    "mpirun detected that one or more processes exited with non-zero status",
    "mpirun noticed that process rank",
    "MPI_ABORT was invoked",
    "mpirun has exited due to process rank",
};

typedef struct {
    char line[8192]; /* the line being read */
    size_t used;
    char *block; /* a dashed block being read (NULL: none) */
    size_t block_used, block_size;
    FILE *log; /* DIR/launch.log for what is left out, or NULL */
    const launch_pick_t *pick; /* the attempt's hosts and ranks */
    const char *record_dir;
    char held[16384], held_out[4096]; /* stderr and stdout before any rank started: mpirun's and its daemons' */
    size_t held_used, held_out_used;
    int started;       /* a rank has made its record (once seen, not looked for again) */
    double opened_at;  /* monotonic seconds: mpirun started */
    launch_mpirun_said_t *said; /* what mpirun said of a daemon it could not start */
} stderr_filter_t;

static int dashes(const char *line) {
    size_t n = strspn(line, "-");
    return n >= 20 && (line[n] == '\n' || line[n] == '\0');
}

static int contains(const char *text, size_t n, const char *needle) {
    size_t len = strlen(needle);
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(text + i, needle, len) == 0) return 1;
    return 0;
}

static void emit(const char *text, size_t n) {
    if (fwrite(text, 1, n, stderr) != n) { /* a closed stderr: nothing to say it on */
    }
}

/* Adds text to what mpirun said of a daemon (as much as fits). */
static void add_said(stderr_filter_t *f, const char *text, size_t n) {
    size_t used = strlen(f->said->text), room = sizeof f->said->text - 1 - used;
    if (n > room) n = room;
    memcpy(f->said->text + used, text, n);
    f->said->text[used + n] = '\0';
}

/* The held text: passed on, or (a daemon could not start) kept for the
 * launcher's line and the log. */
static void release_held(stderr_filter_t *f) {
    if (f->said->daemon_failed) {
        add_said(f, f->held_out, f->held_out_used);
        add_said(f, f->held, f->held_used);
        if (f->log) fwrite(f->held_out, 1, f->held_out_used, f->log), fwrite(f->held, 1, f->held_used, f->log);
    } else {
        if (fwrite(f->held_out, 1, f->held_out_used, stdout) != f->held_out_used) { /* a closed stdout */
        }
        fflush(stdout);
        emit(f->held, f->held_used);
    }
    f->held_used = f->held_out_used = 0;
}

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether no rank of the attempt has started yet (what mpirun's output
 * carries is then its and its daemons' own), for HOLD_MAX_SEC at most:
 * ranks on hosts that do not share the record directory are never seen. */
static int before_ranks(stderr_filter_t *f) {
    if (f->started || monotonic_now() - f->opened_at >= HOLD_MAX_SEC) return 0; /* no more looking at records */
    f->started = launch_rank_files(f->record_dir, "rank", f->pick->ranks) > 0; /* some rank made its record */
    return !f->started;
}

/* mpirun's stdout: passed on, or held with its stderr while no rank has
 * started (a failing daemon may write there). */
static void pass_stdout(stderr_filter_t *f, const char *text, size_t n) {
    if (before_ranks(f) && f->held_out_used + n <= sizeof f->held_out) {
        memcpy(f->held_out + f->held_out_used, text, n);
        f->held_out_used += n;
        return;
    }
    if (f->held_used || f->held_out_used) release_held(f);
    if (fwrite(text, 1, n, stdout) != n) { /* a closed stdout */
    }
    fflush(stdout);
}

/* Passes text on, or holds it while no rank has started. */
static void pass_on(stderr_filter_t *f, const char *text, size_t n) {
    if (!before_ranks(f)) {
        if (f->held_used || f->held_out_used) release_held(f);
        emit(text, n);
        return;
    }
    if (f->held_used + n > sizeof f->held) release_held(f); /* too much to hold: in order all the same */
    if (n > sizeof f->held) emit(text, n);
    else memcpy(f->held + f->held_used, text, n), f->held_used += n;
}

/* A block has ended (or the stream did): pass it on or leave it out. */
static void end_block(stderr_filter_t *f) {
    int daemon = launch_daemon_failure_block(f->block, f->block_used);
    if (daemon) { /* to the log; a failure's words (not its aftermath's) for the launcher's line */
        if (daemon == 1) {
            f->said->daemon_failed = 1;
            release_held(f);
            add_said(f, f->block, f->block_used);
        }
        if (f->log) fwrite(f->block, 1, f->block_used, f->log);
        free(f->block);
        f->block = NULL;
        f->block_used = f->block_size = 0;
        return;
    }
    int drop = 0;
    for (size_t i = 0; i < sizeof ended_job / sizeof ended_job[0] && !drop; i++)
        drop = contains(f->block, f->block_used, ended_job[i]);
    if (!drop) pass_on(f, f->block, f->block_used);
    else if (f->log) fwrite(f->block, 1, f->block_used, f->log);
    free(f->block);
    f->block = NULL;
    f->block_used = f->block_size = 0;
}

static void add_to_block(stderr_filter_t *f, const char *line, size_t n) {
    if (f->block_used + n > f->block_size) {
        size_t size = 2 * (f->block_used + n) + 1024;
        char *bigger = realloc(f->block, size);
        if (!bigger) { /* pass it on rather than lose it */
            emit(f->block, f->block_used);
            emit(line, n);
            f->block_used = 0;
            return;
        }
        f->block = bigger;
        f->block_size = size;
    }
    memcpy(f->block + f->block_used, line, n);
    f->block_used += n;
}

static void filter_line(stderr_filter_t *f, const char *line, size_t n) {
    if (f->block) {
        add_to_block(f, line, n);
        if (dashes(line)) end_block(f);
        return;
    }
    if (dashes(line)) {
        f->block = malloc(1);
        f->block_size = 1;
        f->block_used = 0;
        add_to_block(f, line, n);
        return;
    }
    int drop = strstr(line, "Forwarding signal") && strncmp(line, "mpirun:", 7) == 0;
    drop = drop || (strstr(line, "more process") && strstr(line, "has sent help message")) ||
           strstr(line, "orte_base_help_aggregate") != NULL;
    if (!drop) pass_on(f, line, n);
    else if (f->log) fwrite(line, 1, n, f->log);
}

static void filter_bytes(stderr_filter_t *f, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (f->used < sizeof f->line - 1) f->line[f->used++] = bytes[i];
        if (bytes[i] == '\n' || f->used == sizeof f->line - 1) {
            f->line[f->used] = '\0';
            filter_line(f, f->line, f->used);
            f->used = 0;
        }
    }
    fflush(stderr);
}

static void filter_end(stderr_filter_t *f) {
    if (f->used) {
        f->line[f->used] = '\0';
        filter_line(f, f->line, f->used);
        f->used = 0;
    }
    if (f->block) emit(f->block, f->block_used), free(f->block), f->block = NULL;
    release_held(f);
    fflush(stderr);
}

/* --- mpirun as a child ----------------------------------------------------------- */

static void child(const char *const *args, int out, int err, pid_t parent) {
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    if (getppid() != parent) _exit(127); /* the launcher is gone already */
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    execvp(args[0], (char *const *)args);
    fprintf(stderr, "dptrain: launch: cannot run %s (%s): install openmpi-bin\n", args[0], strerror(errno));
    _exit(127);
}

int launch_run_mpirun(const char *const *args, const char *log_dir, const char *record_dir, const launch_pick_t *pick,
                      launch_mpirun_said_t *said) {
    int ranks = pick->ranks;
    memset(said, 0, sizeof *said);
    int out[2], err[2];
    if (pipe(out) != 0) return -1;
    if (pipe(err) != 0) {
        close(out[0]), close(out[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        close(out[0]), close(err[0]);
        child(args, out[1], err[1], parent);
    }
    close(out[1]), close(err[1]);
    double started = monotonic_now(), now = started;
    int sent_term = 0, sent_usr1 = 0;
    static stderr_filter_t filter;
    memset(&filter, 0, sizeof filter);
    filter.pick = pick;
    filter.record_dir = record_dir;
    filter.said = said;
    filter.opened_at = started;
    if (log_dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/launch.log", log_dir);
        filter.log = fopen(path, "a");
    }
    struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2, status = 0, exited = 0;
    double exited_at = 0.0;
    char buffer[65536];
    while (open_fds > 0) {
        if (launch_signals.interrupt && !sent_term && !exited) kill(pid, SIGTERM), sent_term = 1;
        if (launch_signals.preempt && !sent_usr1 && !sent_term && !exited &&
            ((now - started >= FORWARD_AFTER_SEC && launch_rank_files(record_dir, "rank", ranks) == ranks) ||
             now - started >= FORWARD_ANYWAY_SEC))
            kill(pid, SIGUSR1), sent_usr1 = 1;
        int ready = poll(fds, 2, 100);
        if (ready < 0 && errno != EINTR) break;
        for (int i = 0; i < 2 && ready > 0; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                pass_stdout(&filter, buffer, (size_t)n);
            } else {
                filter_bytes(&filter, buffer, (size_t)n);
            }
        }
        if ((filter.held_used || filter.held_out_used) && !before_ranks(&filter)) release_held(&filter), fflush(stderr);
        now = monotonic_now();
        /* once mpirun has gone, a rank that kept its pipes open must not hold the launcher */
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            exited_at = now;
        }
        if (exited && now - exited_at > 2.0) break;
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    filter_end(&filter);
    if (filter.log) fclose(filter.log);
    while (!exited && waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    return status;
}
