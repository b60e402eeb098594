/* comm.h - collectives over the replicas of one process (threads share
 * memory), the building blocks of the trainer's gradient sync.
 *
 * dp_allreduce_naive is the seeds' version: sum every buffer into buffer 0,
 * copy it back to all; one worker does everything (the teaching baseline and
 * the tests' oracle). dp_allreduce_chunk is one worker's part of the
 * efficient version (the book's exercise 3): worker d sums chunk d of the
 * buffers across all k replicas and writes the sum back into every replica,
 * a reduce-scatter and an all-gather in one pass; run by k workers at once,
 * each moves 1/k of the data and no one waits for another. Both sum the
 * replicas in the order 0, 1, ..., k-1, so they give the same bits. Both are
 * made of the CPU backend's primitives (backend.h), which the trainer uses
 * directly on any backend.
 */
#ifndef DPTRAIN_COMM_H
#define DPTRAIN_COMM_H

#include <stddef.h>

#include "dptrain/status.h"

/* The in-process gradient sum. "chunked" is a reduce-scatter + all-gather
 * over shared memory (no ring: every worker reads its chunk of all the
 * replicas at once); "ring" is an accepted alias of it. */
typedef enum {
    DP_ALLREDUCE_NAIVE,   /* --allreduce naive: one worker sums everything, copies it back */
    DP_ALLREDUCE_CHUNKED, /* --allreduce chunked (default; alias ring): all workers at once */
    DP_ALLREDUCE_RING = DP_ALLREDUCE_CHUNKED, /* an alias of DP_ALLREDUCE_CHUNKED (--allreduce ring) */
} dp_allreduce_kind_t;

/* Chunk d of k over n floats: [*start, *start + *count). Boundaries are
 * multiples of 16 floats (one cache line), so no two workers write the same
 * line; chunks may be empty when n is small. */
void dp_chunk_range(size_t n, int k, int d, size_t *start, size_t *count);

void dp_allreduce_naive(float *const *buffers, int k, size_t n);

/* Worker d's part: sums chunk d (dp_chunk_range) over buffers[0..k) and
 * writes it to all of them. */
void dp_allreduce_chunk(float *const *buffers, int k, size_t n, int d);

/* --- Processes (MPI) ---------------------------------------------------------
 * Every rank runs the same program (SPMD) over its own devices. MPI is used
 * only when the process was started by mpirun; a build without MPI runs as a
 * single rank and says so when started by mpirun. Under mpirun one
 * communication thread per process makes every MPI call: the collectives
 * below may be called from any thread and are queued to it (blocking ones
 * wait for their own turn). Every rank must make the same collectives in
 * the same order. */
typedef struct {
    int rank, size;
} dp_world_t;

/* Starts MPI when launched by mpirun (else rank 0 of 1). */
dp_status_t dp_world_init(int *argc, char ***argv, dp_world_t *world);

/* The communication timeout: a collective that has not completed after this
 * many seconds means a rank has stopped; the watchdog then fails it with
 * DP_ERR_COMM and a message naming the collective and the ranks that have
 * not reached it (with more than 2 ranks, from arrival notices the ranks
 * send each other before every collective). The world is then broken:
 * every later collective fails the same way, and dp_world_finalize does
 * not finalize MPI; the caller exits non-zero (`dptrain`: 3) and mpirun
 * ends the job. A collective that MPI fails does the same. Default 300 s;
 * <= 0 turns it off. */
void dp_world_set_timeout(double seconds);
/* The communication timeout set (seconds; <= 0: none). The GPU backend's
 * NCCL waits use it too (backend.h: peer_group_new). */
double dp_world_timeout(void);
void dp_world_finalize(void);
/* Every rank gives its own status at the same point of its set-up,
 * whatever it is (`mine`; when it failed, this thread's message says why):
 * DP_OK on every rank when every status is DP_OK, else on every rank the
 * status of the lowest failing rank, with its message (prefixed "rank R
 * of N: " on the other ranks). One MPI_Allgather; with one rank, `mine`.
 * So ranks that meet a mistake before anything runs end together, each
 * knowing why, and call dp_world_finalize as usual. */
dp_status_t dp_world_agree(dp_status_t mine);
/* In place of dp_world_finalize after a failure the other ranks may not
 * know of (one rank's, while the others may wait for it in a collective):
 * the communication thread stops at once, abandoning its collectives, and
 * MPI is not finalized; the caller then exits non-zero, which makes
 * mpirun end the other ranks (without MPI_Abort's banner). A no-op for
 * one rank. */
void dp_world_leave(void);
/* After a collective stalled (the DP_ERR_COMM above): the ranks it waited
 * for, as its message names them (up to max; how many). 0 otherwise. */
int dp_world_stalled_ranks(int *ranks, int max);
/* Ends every rank of the job with `code` (MPI_Abort, whose banner Open MPI
 * prints); a no-op for one rank. */
void dp_world_abort(int code);
/* Whether this build has MPI. */
int dp_world_has_mpi(void);

/* In-place sums across all ranks. No-ops for a single rank. */
dp_status_t dp_world_sum_floats(float *buffer, size_t n);
dp_status_t dp_world_sum_doubles(double *buffer, int n);

/* Queues an in-place sum of buffer[0..n) across ranks and returns at once
 * (it waits only while 1024 collectives are already queued); after the sum,
 * done(ctx) (unless NULL) runs on the communication thread (at once on the
 * caller's thread for a single rank). The buffer must stay untouched until then. A failed
 * sum does not call done; dp_world_drain reports it. */
typedef void (*dp_world_done_fn)(void *ctx);
void dp_world_sum_floats_async(float *buffer, size_t n, dp_world_done_fn done, void *ctx);
/* Waits until every queued collective has run (and its done); returns the
 * first failure of a queued sum since the last drain. */
dp_status_t dp_world_drain(void);
/* Seconds the communication thread has spent in collectives so far (from
 * posting to completion: includes waiting for the slowest rank). */
double dp_world_mpi_seconds(void);

/* The parameter server's collectives: the sum of every rank's buffer ends up
 * on rank 0 only (MPI_Reduce); rank 0's buffer is copied to every rank
 * (MPI_Bcast). No-ops for a single rank. */
dp_status_t dp_world_reduce_to_root(float *buffer, size_t n);
dp_status_t dp_world_broadcast(float *buffer, size_t n);

/* Bytes among ranks (set-up: the GPUs' identities, NCCL's unique id):
 * all[r * n .. (r + 1) * n) = rank r's `mine` (n bytes) on every rank;
 * buffer[0..n) = rank 0's on every rank. For a single rank, the copy and
 * a no-op. */
dp_status_t dp_world_allgather_bytes(const void *mine, void *all, size_t n);
dp_status_t dp_world_broadcast_bytes(void *buffer, size_t n);

/* Fails on every rank, naming the first rank that differs from rank 0, when
 * the ranks' `bytes` differ (options, models, ...). */
dp_status_t dp_world_check_same(const dp_world_t *world, const char *what, const void *bytes, size_t n);

#endif
