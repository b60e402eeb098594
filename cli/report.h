/* report.h - how the dptrain subcommands end: one line on stderr naming
 * what went wrong, and an exit status that tells a mistake (fix the
 * command) from a fault (the same command may succeed when run again),
 * which `dptrain launch` restarts. docs/multi-process.md, "Exit statuses",
 * is this table. */
#ifndef DPTRAIN_CLI_REPORT_H
#define DPTRAIN_CLI_REPORT_H

#include <stddef.h>

#include "dptrain/status.h"

typedef enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_MISTAKE = 1,    /* a bad option, bad data, model or checkpoint file, a file that cannot be
                                read or written: never restarted */
    CLI_EXIT_USAGE = 2,      /* no command, or an unknown one */
    CLI_EXIT_COMM = 3,       /* a rank lost or stopped answering (--comm-timeout), MPI failed: a fault */
    CLI_EXIT_DEVICE = 4,     /* a device failed (a GPU that does not start, faults, is lost): a fault */
    CLI_EXIT_NOMEM = 5,      /* out of memory: not restarted (the same command needs the same memory) */
    CLI_EXIT_PREEMPTED = 6,  /* stopped by SIGTERM (or SIGUSR1) after saving at a step boundary */
    CLI_EXIT_NO_RANKS = 7,   /* launch: fewer ranks available than --np's MIN within --min-wait */
    CLI_EXIT_UNREACHABLE = 8, /* launch: a host could not be reached (mpirun could not start its daemon): a
                                fault, the host left out of the next attempt */
    CLI_EXIT_DIVERGED = 9,   /* training diverged (NaN or infinite parameters, not saved): not restarted
                                (the same run diverges again) */
    CLI_EXIT_NO_MPIRUN = 127 /* launch: mpirun cannot be run */
    /* 128 + N: killed by signal N (SIGINT, a second SIGTERM; a rank's signal, passed on by launch) */
} cli_exit_t;

/* The exit status of a failure with `status` (DP_OK: a failure all the same,
 * whose status was not kept: 1). */
int cli_exit_code(dp_status_t status);

/* Whether launch restarts a job that ended with `code` (faults: 3, 4, 8 and
 * signals other than SIGINT). */
int cli_exit_is_fault(int code);

/* In words: "a mistake", "a rank lost or stalled", "killed by signal 9
 * (Killed)", ... */
const char *cli_exit_meaning(int code, char *buffer, size_t size);

/* Prints "dptrain: MESSAGE" for the current error (dp_error_message) and
 * returns its exit status (cli_exit_code of dp_error_status). */
int cli_report_error(void);

#endif
