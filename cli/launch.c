/* launch.c - `dptrain launch`: the seeds' `paddle.distributed.launch
 * --log_dir ./mylog`, on Open MPI. Builds the mpirun command (root and
 * oversubscription handled, hosts passed on), creates the log directory,
 * and replaces itself with mpirun; every rank then writes its output to
 * DIR/worklog.RANK (train.c reads DPTRAIN_LOG_DIR).
 *
 * Across hosts (--hosts), mpirun's daemons talk over TCP, and a dead link is
 * only noticed when TCP gives up. launch turns on TCP keepalive on those
 * connections (oob_tcp_keepalive_*: probes from 1 s of silence, 5 of them,
 * I = ceil((T + 2) / 5) s apart, T being the job's --comm-timeout), so an
 * idle daemon link that dies is declared lost after T + 2 to T + 3 + I
 * seconds: later than the ranks' own check, which names the silent rank.
 * Once a rank has ended the job, mpirun's message to the lost host's daemon
 * is pending, and then TCP's retransmission limit decides instead
 * (net.ipv4.tcp_retries2 on the launching host: about 15 minutes by
 * default, about 3 s with 3; see docs/multi-process.md).
 *
 * --restarts K (like torchrun's --max-restarts): launch stays the parent of
 * mpirun and, when the job fails, runs it again, up to K times, saying why on
 * stderr and in DIR/launch.log; when the job has a --save checkpoint on
 * disk, the rerun resumes from it (--resume PATH added or replaced). The
 * failed attempt's worklogs are kept as DIR/worklog.RANK.attemptN. An
 * interrupt (SIGINT, SIGTERM) is passed to mpirun and never restarted. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "dptrain/status.h"
#include "options.h"

static const char launch_usage[] =
    "usage: dptrain launch --np N [--hosts h1:2,h2:2] [--log-dir DIR] [--restarts K] -- train [train options]\n"
    "\n"
    "Starts N processes with mpirun, each running `dptrain train ...` as one rank.\n"
    "\n"
    "options:\n"
    "  --np N            number of processes (ranks)\n"
    "  --hosts LIST      hosts and slots, passed to mpirun --host (default: this machine)\n"
    "  --log-dir DIR     one log per process: DIR/worklog.0, DIR/worklog.1, ... (created);\n"
    "                    without it the ranks' output goes to this terminal\n"
    "  --restarts K      when the job fails (a rank dies or stops answering), run it\n"
    "                    again, up to K times, resuming from the --save checkpoint\n"
    "                    when it exists; each restart is logged with its reason (default 0)\n"
    "  --help            show this help\n";

/* mkdir -p for one level; an existing directory is fine. */
static dp_status_t make_log_dir(const char *dir) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK) == 0) return DP_OK;
    }
    return dp_fail(DP_ERR_IO, "launch: --log-dir %s: cannot create or write the directory (%s)", dir,
                   strerror(errno));
}

/* The value of train option --NAME in args (either "--NAME V" or
 * "--NAME=V"), or NULL; the last one given counts. */
static const char *train_option(char **args, int n, const char *name) {
    const char *value = NULL;
    size_t len = strlen(name);
    for (int i = 0; i < n; i++) {
        if (strncmp(args[i], "--", 2) != 0 || strncmp(args[i] + 2, name, len) != 0) continue;
        const char *rest = args[i] + 2 + len;
        if (*rest == '=') value = rest + 1;
        else if (*rest == '\0' && i + 1 < n) value = args[++i];
    }
    return value;
}

static volatile sig_atomic_t interrupted;
static volatile pid_t running_child;

static void on_interrupt(int sig) {
    interrupted = sig;
    if (running_child > 0 && sig == SIGTERM) kill(running_child, SIGTERM); /* SIGINT reaches it from the terminal */
}

/* One line on stderr and, with a log directory, appended to DIR/launch.log. */
static void launch_log(const char *log_dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void launch_log(const char *log_dir, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dptrain launch: %s\n", line);
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

/* Why mpirun ended, in words. mpirun exits with 128 + N when a rank was
 * killed by signal N, with the rank's status when a rank failed, 3 for
 * dptrain's --comm-timeout. */
static void describe_status(int status, char *out, size_t size) {
    if (WIFSIGNALED(status)) {
        snprintf(out, size, "mpirun was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else {
        int code = WEXITSTATUS(status);
        if (code > 128 && code < 128 + 65)
            snprintf(out, size, "mpirun exit status %d: a rank was killed by signal %d (%s)", code, code - 128,
                     strsignal(code - 128));
        else if (code == 3)
            snprintf(out, size, "mpirun exit status 3: a rank stopped answering (--comm-timeout)");
        else if (code == 127)
            snprintf(out, size, "mpirun exit status 127: mpirun could not be run");
        else
            snprintf(out, size, "mpirun exit status %d: a rank failed", code);
    }
}

/* Runs argv to completion as a child; returns its wait status, -1 when it
 * could not start. */
static int run_child(const char *const *args) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(args[0], (char *const *)args);
        fprintf(stderr, "dptrain: launch: cannot run %s (%s): install openmpi-bin\n", args[0], strerror(errno));
        _exit(127);
    }
    running_child = pid;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    running_child = 0;
    return status;
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

int cmd_launch(int argc, char **argv) {
    int np = 0, restarts = 0;
    const char *hosts = NULL, *log_dir = NULL;
    const option_t options[] = {
        {"np", OPT_INT, &np, 1, 4096},
        {"restarts", OPT_INT, &restarts, 0, 1000},
        {"hosts", OPT_STRING, &hosts, 0, 0},
        {"log-dir", OPT_STRING, &log_dir, 0, 0},
        {NULL, 0, NULL, 0, 0},
    };
    int split = argc; /* the "--" that starts the command */
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            split = i;
            break;
        }
    int help = 0;
    if (options_parse("launch", options, split, argv, 2, &help) != DP_OK) return cli_report_error();
    if (help) {
        fputs(launch_usage, stdout);
        return 0;
    }
    if (np < 1) {
        dp_fail(DP_ERR_ARG, "launch: --np N is required (the number of processes)");
        return cli_report_error();
    }
    if (split + 1 >= argc || strcmp(argv[split + 1], "train") != 0) {
        dp_fail(DP_ERR_ARG, "launch: expected `-- train [train options]` after the launch options");
        return cli_report_error();
    }
    if (log_dir && make_log_dir(log_dir) != DP_OK) return cli_report_error();

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        dp_fail(DP_ERR_IO, "launch: cannot find the dptrain executable (/proc/self/exe)");
        return cli_report_error();
    }
    self[len] = '\0';
    char log_env[4200];
    if (log_dir) {
        char absolute[4096];
        if (!realpath(log_dir, absolute)) snprintf(absolute, sizeof absolute, "%s", log_dir);
        snprintf(log_env, sizeof log_env, "DPTRAIN_LOG_DIR=%s", absolute);
    }
    char np_text[16];
    snprintf(np_text, sizeof np_text, "%d", np);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    /* --comm-timeout of the job, for the daemons' keepalive across hosts */
    char keepalive_intvl[32], keepalive_probes[] = "5";
    {
        double timeout = 300.0; /* train's default */
        const char *text = train_option(argv + split + 2, argc - split - 2, "comm-timeout");
        if (text && strtod(text, NULL) > 0.0) timeout = strtod(text, NULL);
        if (timeout > 100000.0) timeout = 100000.0;
        /* declared lost after 5 unanswered probes, one every I seconds,
         * starting 1 s after the last traffic: 5 I >= T + 2 */
        snprintf(keepalive_intvl, sizeof keepalive_intvl, "%d", (int)ceil((timeout + 2.0) / 5.0));
    }

    const char **args = calloc((size_t)argc + 32, sizeof *args);
    if (!args) return cli_report_error();
    int n = 0;
    args[n++] = "mpirun";
    if (geteuid() == 0) args[n++] = "--allow-run-as-root";
    if (!hosts && np > cores) args[n++] = "--oversubscribe"; /* more ranks than cores here */
    args[n++] = "-np";
    args[n++] = np_text;
    if (hosts) {
        args[n++] = "--host";
        args[n++] = hosts;
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_time";
        args[n++] = "1";
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_intvl";
        args[n++] = keepalive_intvl;
        args[n++] = "--mca";
        args[n++] = "oob_tcp_keepalive_probes";
        args[n++] = keepalive_probes;
    }
    if (log_dir) {
        args[n++] = "-x";
        args[n++] = log_env;
    }
    args[n++] = self;
    const int first_train_arg = n;
    for (int i = split + 1; i < argc; i++) args[n++] = argv[i];
    args[n] = NULL;
    if (log_dir) setenv("DPTRAIN_LOG_DIR", log_env + strlen("DPTRAIN_LOG_DIR="), 1);
    if (restarts == 0) { /* mpirun replaces launch: signals and the exit status are its own */
        fflush(stdout);
        execvp("mpirun", (char *const *)args);
        dp_fail(DP_ERR_IO, "launch: cannot run mpirun (%s): install openmpi-bin", strerror(errno));
        free(args);
        return cli_report_error();
    }

    const char *save = train_option(argv + split + 2, argc - split - 2, "save");
    struct sigaction action = {0};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    int exit_code = 1;
    for (int attempt = 0;; attempt++) {
        int status = run_child(args);
        if (status == -1) {
            launch_log(log_dir, "cannot start mpirun (%s)", strerror(errno));
            break;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            if (attempt > 0) launch_log(log_dir, "the job finished after %d restart%s", attempt, attempt > 1 ? "s" : "");
            exit_code = 0;
            break;
        }
        char why[256];
        describe_status(status, why, sizeof why);
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (interrupted) {
            launch_log(log_dir, "interrupted (%s); not restarting: %s", strsignal(interrupted), why);
            break;
        }
        if (attempt == restarts) {
            launch_log(log_dir, "the job failed: %s; no restarts left (--restarts %d)", why, restarts);
            break;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
            launch_log(log_dir, "the job failed: %s; not restarting", why);
            break;
        }
        if (log_dir) keep_worklogs(log_dir, np, attempt + 1);
        /* resume from the job's checkpoint when there is one */
        struct stat st;
        const char *from = NULL;
        if (save && stat(save, &st) == 0 && S_ISREG(st.st_mode)) {
            from = save;
            int m = first_train_arg;
            for (int i = first_train_arg; args[i]; i++) {
                if (strcmp(args[i], "--resume") == 0 && args[i + 1]) { /* drop "--resume X" */
                    i++;
                    continue;
                }
                if (strncmp(args[i], "--resume=", 9) == 0) continue;
                args[m++] = args[i];
            }
            args[m++] = "--resume";
            args[m++] = save;
            args[m] = NULL;
        }
        launch_log(log_dir, "the job failed: %s; restart %d of %d, %s%s", why, attempt + 1, restarts,
                   from ? "resuming from " : "from the start (no checkpoint yet", from ? from : ")");
    }
    free(args);
    return exit_code;
}
