/* world.h - a subcommand run as one rank of an MPI job (`dptrain train`,
 * `dptrain eval`): the check that every rank runs the same command, and how
 * a rank ends (world.c). CLI internal; the world itself is comm.h's. */
#ifndef DPTRAIN_CLI_WORLD_H
#define DPTRAIN_CLI_WORLD_H

#include "dptrain/comm.h"
#include "dptrain/status.h"

/* Fails on every rank, naming the first rank that differs from rank 0,
 * when the ranks' options (argv[2..argc)) differ: mpirun gives every rank
 * the same, and every rank must run the same command. A collective. */
dp_status_t cli_world_check_options(const dp_world_t *world, int argc, char **argv);

/* The end of a rank's command with `status`: returns its exit status (0 for
 * DP_OK, else cli_exit_code's) after the failure's one line on stderr,
 * "dptrain: MESSAGE", said by a rank that `speaks` (rank 0, or every rank
 * into its own log) or by a rank whose failure is its own (`alone`: the
 * others may be waiting for it in a collective), then "dptrain: rank R of
 * N: MESSAGE". Flushes stdout and stderr. */
int cli_world_report(const dp_world_t *world, dp_status_t status, int alone, int speaks);

/* Ends the rank with exit status `code`. A failure every rank knows of
 * (agreed: dp_world_agree) or none: MPI finalized and `code` returned, so
 * every rank exits alike and mpirun has nothing to abort. A failure of this
 * rank `alone` under mpirun: MPI not finalized (dp_world_leave: the others
 * may never reach the finalize) and the process exits with `code` at once
 * (_exit: no exit handlers of MPI's that could wait for ranks that are
 * gone), which makes mpirun end the others; no MPI_Abort and its banner. */
int cli_world_end(const dp_world_t *world, int code, int alone);

#endif
