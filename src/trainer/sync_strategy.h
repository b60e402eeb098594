/* sync_strategy.h - the small interface every synchronisation strategy
 * (sync_*.c) implements and the trainer (trainer.c) calls, the strategies'
 * tables, and sync_peer.c's and sync_batch_norm.c's entry points. Library
 * internal. The strategies are built on replica.h and buckets.h.
 *
 * A step (trainer.c) is: the strategy's begin_step on the caller's thread;
 * phase 1 on every device (forward, backward), during which an overlapping
 * strategy's range_final is called on the device's thread each time more of
 * that replica's gradients are final; then, on the caller's thread, the
 * strategy's drain (work it still has in flight, also after a failure) and,
 * if phase 1 succeeded, its end_step (the sum and the update of whatever
 * was not done during backward, and the buffers). One file per strategy:
 *   sync_local_chunked.c  one process, reduce-scatter + all-gather over shared memory
 *   sync_local_naive.c    one process, device 0 sums everything (the seeds' version)
 *   sync_overlap.c        one process, buckets summed while backward runs
 *   sync_mpi.c            several processes, hierarchical, with or without overlap
 *   sync_ps.c             the parameter server
 *   sync_peer.c           devices on distinct GPUs: NCCL (the backend's peer
 *                         collectives), in one process or across ranks,
 *                         with or without overlap
 * and sync_batch_norm.c: batch statistics summed across devices inside the
 * forward (orthogonal to the strategy).
 * Every memory access to a replica goes through its device's backend
 * (backend.h): the strategies sum, copy and update ranges with its
 * reduce_range, broadcast_range and optimizer_update; what MPI reads or
 * writes is staged through host memory (dp_trainer_stage_down/up) when the
 * backend's memory is not host memory.
 */
#ifndef DPTRAIN_SYNC_STRATEGY_H
#define DPTRAIN_SYNC_STRATEGY_H

#include "replica.h"

/* A synchronisation strategy. NULL members do nothing. */
typedef struct dp_sync_strategy {
    const char *name;
    /* After the replicas exist (parameters initialised, equal); allocates
     * the strategy's state. release undoes it and waits for anything the
     * strategy still has in flight; it may run after a failed init. */
    dp_status_t (*init)(dp_trainer_t *t);
    void (*release)(dp_trainer_t *t);
    /* Caller's thread, before phase 1. */
    void (*begin_step)(dp_trainer_t *t);
    /* Device r's thread, during backward: r->ready_from has moved down,
     * gradients at offsets >= r->ready_from are final for this step (0:
     * all, also when the device failed). Set only by overlapping strategies. */
    void (*range_final)(dp_replica_t *r);
    /* Caller's thread after phase 1, even when it failed: waits for what is
     * in flight. A strategy with a drain is timed in MPI from before phase 1. */
    dp_status_t (*drain)(dp_trainer_t *t);
    /* Caller's thread after a successful phase 1: the rest of the sum and
     * the update, and the buffers (dp_trainer_sync_buffers). */
    dp_status_t (*end_step)(dp_trainer_t *t);
} dp_sync_strategy_t;

extern const dp_sync_strategy_t dp_sync_local_chunked, dp_sync_local_naive, dp_sync_overlap,
    dp_sync_mpi, dp_sync_mpi_overlap, dp_sync_ps, dp_sync_peer, dp_sync_peer_overlap;

/* sync_peer.c: with the replicas made, chooses NCCL or the host paths
 * (the same choice on every rank: a collective with ranks > 1) and makes
 * t->peer_group for NCCL; dp_sync_peer_release frees it. */
dp_status_t dp_sync_peer_choose(dp_trainer_t *t);
void dp_sync_peer_release(dp_trainer_t *t);

/* sync_batch_norm.c */
dp_status_t dp_sync_batch_norm_init(dp_trainer_t *t);
void dp_sync_batch_norm_release(dp_trainer_t *t);
void dp_sync_batch_norm_rearm(dp_trainer_t *t);
void dp_sync_batch_norm_break(dp_trainer_t *t);
/* dp_stat_sync_t.sum (ctx: the replica) */
void dp_sync_batch_norm_sum(void *ctx, double *values, int count);
/* A replica without examples in this micro-batch (a short last batch):
 * takes part in every sum the others make, with zeros (adding nothing). */
dp_status_t dp_sync_batch_norm_absent(dp_replica_t *r);

#endif
