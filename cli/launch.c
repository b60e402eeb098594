/* launch.c - `dptrain launch`: the seeds' `paddle.distributed.launch
 * --log_dir ./mylog`, on Open MPI. Builds the mpirun command (root and
 * oversubscription handled, hosts passed on), creates the log directory,
 * and replaces itself with mpirun; every rank then writes its output to
 * DIR/worklog.RANK (train.c reads DPTRAIN_LOG_DIR). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "dptrain/status.h"
#include "options.h"

static const char launch_usage[] =
    "usage: dptrain launch --np N [--hosts h1:2,h2:2] [--log-dir DIR] -- train [train options]\n"
    "\n"
    "Starts N processes with mpirun, each running `dptrain train ...` as one rank.\n"
    "\n"
    "options:\n"
    "  --np N            number of processes (ranks)\n"
    "  --hosts LIST      hosts and slots, passed to mpirun --host (default: this machine)\n"
    "  --log-dir DIR     one log per process: DIR/worklog.0, DIR/worklog.1, ... (created);\n"
    "                    without it the ranks' output goes to this terminal\n"
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

int cmd_launch(int argc, char **argv) {
    int np = 0;
    const char *hosts = NULL, *log_dir = NULL;
    const option_t options[] = {
        {"np", OPT_INT, &np, 1, 4096},
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

    const char **args = calloc((size_t)argc + 16, sizeof *args);
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
    }
    if (log_dir) {
        args[n++] = "-x";
        args[n++] = log_env;
    }
    args[n++] = self;
    for (int i = split + 1; i < argc; i++) args[n++] = argv[i];
    args[n] = NULL;
    if (log_dir) setenv("DPTRAIN_LOG_DIR", log_env + strlen("DPTRAIN_LOG_DIR="), 1);
    fflush(stdout);
    execvp("mpirun", (char *const *)args);
    dp_fail(DP_ERR_IO, "launch: cannot run mpirun (%s): install openmpi-bin", strerror(errno));
    free(args);
    return cli_report_error();
}
