/* launch.h - what the parts of `dptrain launch` share: launch.c (the
 * options and the attempts: restart, resume, give up), launch_hosts.c (the
 * hosts of each attempt: --hosts, a host file read again, a discovery
 * command, failed hosts cooling off, waiting for MIN ranks),
 * launch_attempt.c (one run of mpirun: its command, its output filtered,
 * the signals passed on), launch_summary.c (what the ranks' records say
 * of an attempt that failed) and launch_unreachable.c (a host whose
 * daemon mpirun could not start). CLI internal.
 */
#ifndef DPTRAIN_CLI_LAUNCH_H
#define DPTRAIN_CLI_LAUNCH_H

#include <signal.h>
#include <stddef.h>

#include "dptrain/status.h"
#include "rank_record.h"

/* --- Hosts (launch_hosts.c) ----------------------------------------------- */

#define LAUNCH_HOSTS_MAX 256

typedef struct {
    char name[256];
    int slots;
    int failures;      /* attempts this host failed (elastic mode) */
    double cool_until; /* monotonic seconds: left out until then */
} launch_host_t;

typedef struct {
    /* where the hosts come from: at most one (none: this machine) */
    const char *list;      /* --hosts h1:2,h2:2 */
    const char *file;      /* --hostfile FILE, read before each attempt */
    const char *discovery; /* --host-discovery COMMAND, run before each attempt */
    double cooling;        /* --cooling: seconds a host that failed twice is left out (doubling) */
    launch_host_t host[LAUNCH_HOSTS_MAX]; /* every host seen, with its failures */
    int count;
} launch_hosts_t;

/* The hosts of an attempt: n of them, in order, with the ranks each runs. */
typedef struct {
    int count, ranks;
    char names[LAUNCH_HOSTS_MAX][256];
    int slots[LAUNCH_HOSTS_MAX];
    char mpirun_hosts[8192]; /* "h1:2,h2:1" for mpirun --host ("" for this machine) */
} launch_pick_t;

/* Parses one host line or list entry ("host", "host:N", "host slots=N")
 * into name and slots; DP_ERR_ARG naming `where` when malformed. */
dp_status_t launch_parse_host(const char *text, size_t len, const char *where, char *name, size_t size, int *slots);

/* The hosts available now (read again from the file or the command; the
 * ones cooling off left out) and the ranks for np_min..np_max of them;
 * waits up to min_wait seconds (reading again every second) while fewer
 * than np_min are available, saying so once. DP_ERR_ARG for a bad host
 * list or file, or a --hosts list with fewer slots than np_min (it never
 * changes: no wait); DP_ERR_COMM (with one line saying what is missing) when
 * np_min cannot be reached in time, or a signal (launch_signals) ends the
 * wait. */
dp_status_t launch_hosts_pick(launch_hosts_t *h, int np_min, int np_max, double min_wait, const char *log_dir,
                              launch_pick_t *pick);

/* An attempt failed on `host` (elastic mode: with a host file or a
 * discovery command): its second failure leaves it out for --cooling
 * seconds, each later one for twice as long as the one before. Returns the
 * seconds it is left out (0: not). */
double launch_hosts_failed(launch_hosts_t *h, const char *host);

/* `host` could not be reached (mpirun could not start its daemon there):
 * left out at once, in every mode, for --cooling seconds, twice as long
 * after each further failure. Returns the seconds it is left out. */
double launch_hosts_unreachable(launch_hosts_t *h, const char *host);

/* Whether the hosts come from a file or a command (elastic mode). */
int launch_hosts_elastic(const launch_hosts_t *h);

/* --- One attempt (launch_attempt.c) --------------------------------------- */

/* What the signal handlers set (launch_attempt.c installs them). */
typedef struct {
    volatile sig_atomic_t preempt;   /* SIGTERM or SIGUSR1: the ranks save at the next step boundary */
    volatile sig_atomic_t interrupt; /* SIGINT, or SIGTERM again: the job ends at once (the signal) */
} launch_signals_t;

extern launch_signals_t launch_signals;

void launch_signals_install(void);

/* What mpirun said of a daemon it could not start. */
typedef struct {
    int daemon_failed; /* Open MPI's paragraph saying a daemon could not start or connect */
    char text[32768];  /* that paragraph and what mpirun's stderr carried before it (no rank had started) */
} launch_mpirun_said_t;

/* Runs `args` (mpirun's command, NULL-terminated, starting pick's ranks
 * whose records go to record_dir) to its end: its stdout passed on, its
 * stderr passed on without Open MPI's messages about a job that ended (the
 * summary says it better) or about a daemon that could not start (into
 * *said, with what came before it: stderr is held until a rank starts),
 * SIGTERM passed on as SIGUSR1 (which mpirun
 * forwards to every rank; once mpirun and the ranks are ready for it) and
 * an interrupt as SIGTERM to mpirun. mpirun runs in a process group of its own (a terminal's or a
 * scheduler's signal to this one's group reaches the launcher only, which
 * decides) and is sent SIGTERM if the launcher dies. Returns its wait
 * status, -1 when it could not be started (errno). */
int launch_run_mpirun(const char *const *args, const char *log_dir, const char *record_dir, const launch_pick_t *pick,
                      launch_mpirun_said_t *said);

/* Appends "TIMESTAMP LINE" to DIR/launch.log and prints "dptrain launch:
 * LINE" on stderr. */
void launch_log(const char *log_dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* --- What an attempt's records say (launch_summary.c) ---------------------- */

#define LAUNCH_UNREACHABLE_MAX 8

typedef struct {
    int known;          /* a rank's record says who failed first; else only mpirun's status is known */
    int code;           /* the attempt's exit status: the first failure's (0: it finished) */
    int mpirun_after;   /* every rank ended by itself with status 0, and mpirun then with this status (not 0:
                           a launcher's SIGINT after the last rank ended, mpirun's own teardown): code is 0 */
    int rank;           /* the first rank to fail (by time), -1: unknown */
    char host[64];
    int pid;
    int signal;         /* killed by this signal (0: it exited, with `code`) */
    int training;       /* it had started training: step is meaningful */
    unsigned long long step, first_step;
    int steps_per_epoch;
    char message[512];  /* its line ("" for none) */
    char blamed_host[64]; /* the host the failure is put on: a stalled collective's silent rank's, else its own */
    char line[1024];    /* "rank 1 on vm (pid 42): killed by signal 9 (Killed) at step 37 (epoch 2, step 12 of
                           25)" */
    char log[4400];     /* "log DIR/worklog.1.attempt1", or that there is none */
    int unreachable_count; /* hosts mpirun could not reach (exit status 8), named in unreachable */
    char unreachable[LAUNCH_UNREACHABLE_MAX][256];
} launch_failure_t;

/* The first failure of attempt `attempt` (`pick`'s ranks, numbered from 0;
 * its log DIR/worklog.R) from the records in record_dir and mpirun's wait
 * status. */
void launch_summarize(const char *record_dir, const char *log_dir, const launch_pick_t *pick, int attempt,
                      int wait_status, launch_failure_t *out);
/* How many of DIR/PREFIX.R, R < ranks, exist (the ranks' records, rank.R;
 * their worklogs, worklog.R). */
int launch_rank_files(const char *dir, const char *prefix, int ranks);

/* --- A host mpirun could not reach (launch_unreachable.c) ------------------ */

/* Whether an Open MPI paragraph (between its dashed lines) says that a
 * daemon could not start or connect (1), or is what follows such a
 * failure, naming a host that is not to blame ([no-path]: 2), or neither
 * (0). */
int launch_daemon_failure_block(const char *block, size_t n);

/* The failure of attempt `attempt` whose daemon could not start (`said`:
 * what mpirun said, launch_mpirun_said_t): the hosts it names where no rank
 * started (else the attempt's one remote host), exit status 8, and the
 * agent's line naming the first (else Open MPI's first sentence) as its
 * message. */
void launch_name_unreachable(const launch_pick_t *pick, const char *record_dir, const char *log_dir, int attempt,
                             const char *said, launch_failure_t *out);

#endif
