/* report.h - how the dptrain subcommands report an error: one line on
 * stderr, exit status 1. */
#ifndef DPTRAIN_CLI_REPORT_H
#define DPTRAIN_CLI_REPORT_H

/* Prints "dptrain: MESSAGE" for the current error (dp_error_message) and
 * returns exit status 1. */
int cli_report_error(void);

#endif
