/* commands.h - the dptrain subcommands, each `int cmd_NAME(argc, argv)`
 * returning the process exit status. */
#ifndef DPTRAIN_CLI_COMMANDS_H
#define DPTRAIN_CLI_COMMANDS_H

#include "dptrain/checkpoint.h"
#include "dptrain/parallel.h"

#define DPTRAIN_VERSION "0.1.0"

int cmd_train(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_predict(int argc, char **argv); /* predict.c */
int cmd_export(int argc, char **argv);  /* export.c */

/* train --resume FILE (eval.c): checks FILE against `run` (this run's model
 * name, optimizer, seed, batch size, training-set size, device and rank
 * counts; the policy is at the top of eval.c), loads the parameters into
 * every replica, the optimizer state into every device's optimizer and the
 * step count into the trainer, and copies the saved counters and loader
 * position into `run`. Warnings go to stderr when `speaks`. */
dp_status_t cli_resume(const char *path, const dp_model_t *model, dp_trainer_t *trainer,
                       dp_checkpoint_info_t *run, int speaks);
/* train --save FILE: replica 0's parameters, its optimizer's state (--sync ps: the server's), `run`
 * with the trainer's current step counts. */
dp_status_t cli_save(const char *path, const dp_model_t *model, dp_trainer_t *trainer, dp_checkpoint_info_t *run);

/* Prints "dptrain: MESSAGE" for the current error and returns exit status 1. */
int cli_report_error(void);

#endif
