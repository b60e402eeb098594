/* report.c - cli_report_error and the exit statuses (report.h): the one-line
 * error of every subcommand. */
#include "report.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int cli_exit_code(dp_status_t status) {
    switch (status) {
    case DP_ERR_COMM: return CLI_EXIT_COMM;
    case DP_ERR_DEVICE: return CLI_EXIT_DEVICE;
    case DP_ERR_NOMEM: return CLI_EXIT_NOMEM;
    case DP_ERR_PREEMPTED: return CLI_EXIT_PREEMPTED;
    case DP_ERR_DIVERGED: return CLI_EXIT_DIVERGED;
    default: return CLI_EXIT_MISTAKE;
    }
}

int cli_exit_is_fault(int code) {
    return code == CLI_EXIT_COMM || code == CLI_EXIT_DEVICE || code == CLI_EXIT_UNREACHABLE || (code > 128 && code < 128 + 65 && code != 128 + SIGINT);
}

const char *cli_exit_meaning(int code, char *buffer, size_t size) {
    switch (code) {
    case CLI_EXIT_OK: return "finished";
    case CLI_EXIT_MISTAKE: return "a mistake";
    case CLI_EXIT_USAGE: return "a usage error";
    case CLI_EXIT_COMM: return "a rank lost or stalled";
    case CLI_EXIT_DEVICE: return "a device failed";
    case CLI_EXIT_NOMEM: return "out of memory";
    case CLI_EXIT_PREEMPTED: return "preempted";
    case CLI_EXIT_NO_RANKS: return "too few ranks available";
    case CLI_EXIT_UNREACHABLE: return "a host could not be reached";
    case CLI_EXIT_DIVERGED: return "the training diverged";
    case CLI_EXIT_NO_MPIRUN: return "mpirun could not be run";
    }
    if (code > 128 && code < 128 + 65) snprintf(buffer, size, "killed by signal %d (%s)", code - 128, strsignal(code - 128));
    else snprintf(buffer, size, "exit status %d", code);
    return buffer;
}

int cli_report_error(void) {
    const char *message = dp_error_message();
    fprintf(stderr, "dptrain: %s\n", message[0] ? message : "unknown error");
    return cli_exit_code(dp_error_status());
}
