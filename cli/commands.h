/* commands.h - the dptrain subcommands, each `int cmd_NAME(argc, argv)`
 * returning the process exit status; cmd_train in train.c, cmd_launch in
 * launch.c, cmd_eval and cmd_inspect in eval.c. */
#ifndef DPTRAIN_CLI_COMMANDS_H
#define DPTRAIN_CLI_COMMANDS_H

#include "dptrain/checkpoint.h"
#include "dptrain/parallel.h"
#include "report.h" /* cli_report_error */

int cmd_train(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_predict(int argc, char **argv); /* predict.c */
int cmd_export(int argc, char **argv);  /* export.c */

#endif
