/* commands.h - the dptrain subcommands, each `int cmd_NAME(argc, argv)`
 * returning the process exit status. */
#ifndef DPTRAIN_CLI_COMMANDS_H
#define DPTRAIN_CLI_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_launch(int argc, char **argv);

/* Prints "dptrain: MESSAGE" for the current error and returns exit status 1. */
int cli_report_error(void);

#endif
