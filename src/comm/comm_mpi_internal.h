/* comm_mpi_internal.h - what the communication thread (comm_mpi.c) uses
 * of the stall detection (comm_mpi_stall.c): the arrival notices and
 * heartbeats between the ranks' communication threads, and the watchdog's
 * report. Called on the communication thread only (dp_notices_start and
 * dp_notices_stop by the thread that starts and ends MPI, while no
 * communication thread runs). Library internal; MPI builds only.
 */
#ifndef DPTRAIN_COMM_MPI_INTERNAL_H
#define DPTRAIN_COMM_MPI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dptrain/status.h"

/* Every communication thread sends a notice at least this often (more
 * than 2 ranks), also while it idles. */
#define HEARTBEAT_SEC 0.25

static inline double dp_comm_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* With more than 2 ranks: the side communicator and a receive posted per
 * peer (nothing with 2 or fewer); dp_notices_stop undoes it (its MPI part
 * only when mpi_usable: not after a collective was abandoned). */
dp_status_t dp_notices_start(int rank, int size);
void dp_notices_stop(int mpi_usable);
/* Whether notices are exchanged (more than 2 ranks). */
int dp_notices_on(void);
/* The number of collectives this rank has joined. */
int64_t dp_notices_joined(void);
/* This rank joins its next collective: tells the others. */
void dp_notices_announce(void);
/* Takes every notice that has arrived. */
void dp_notices_collect(void);
/* While waiting or idle: collects every few milliseconds, beats every
 * HEARTBEAT_SEC. */
void dp_notices_tick(void);
/* Collective number `seq` (`what`) has waited `waited` s, more than the
 * timeout `limit`: the line naming the ranks it waits for (into line[0..size),
 * without "rank R of N: "), which becomes the callers' DP_ERR_COMM. */
void dp_describe_stall(int64_t seq, const char *what, double waited, double limit, char *line, size_t size);
/* The ranks the last dp_describe_stall named (up to max); how many. */
int dp_stall_suspects(int *ranks, int max);

#endif
