/* report.c - cli_report_error (report.h): the one-line error of every
 * subcommand. */
#include "report.h"

#include <stdio.h>

#include "dptrain/status.h"

int cli_report_error(void) {
    const char *message = dp_error_message();
    fprintf(stderr, "dptrain: %s\n", message[0] ? message : "unknown error");
    return 1;
}
