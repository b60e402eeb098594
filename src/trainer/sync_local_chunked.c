/* sync_local_chunked.c - one process, the default strategy: after backward,
 * device d sums chunk d of the gradients over all replicas (a reduce-scatter),
 * writes the sum back to every replica (an all-gather) and updates chunk d
 * of every replica's parameters: the book's exercise 3 over shared memory.
 * (Called "ring" before; it is no ring: each worker reads its chunk of
 * every replica directly.) With one device it is just the update.
 *
 * DESIGN. One task per device after phase 1; the chunks
 * (dp_chunk_range, whole cache lines) are disjoint, so the k tasks write
 * disjoint ranges of every replica and need no lock. The caller waits for
 * all of them. The sums run in device order (backend reduce_range), so
 * they are the naive strategy's bits. With gradient clipping
 * (clip_grad.c) the sums, the norm of replica 0's whole sum, and the
 * copies and updates are three phases.
 */
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

static dp_status_t reduce_update_chunk_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    size_t start, count;
    dp_chunk_range(t->num_trainable, t->num_devices, r->index, &start, &count);
    dp_sync_reduce_to_first(t, start, count);
    dp_sync_broadcast_update(t, start, count);
    return DP_OK;
}

static dp_status_t reduce_chunk_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    size_t start, count;
    dp_chunk_range(t->num_trainable, t->num_devices, r->index, &start, &count);
    dp_sync_reduce_to_first(t, start, count);
    return DP_OK;
}

static dp_status_t chunked_end_step(dp_trainer_t *t) {
    if (dp_clipping(t)) { /* the whole sum's norm before any update */
        DP_TRY(dp_trainer_run_on_all(t, reduce_chunk_task));
        DP_TRY(dp_clip_gradients(t, t->backend, t->grad_buffers[0]));
        DP_TRY(dp_sync_broadcast_update_chunks(t));
    } else {
        DP_TRY(dp_trainer_run_on_all(t, reduce_update_chunk_task));
    }
    return dp_trainer_sync_buffers(t);
}

const dp_sync_strategy_t dp_sync_local_chunked = {
    .name = "chunked",
    .begin_step = dp_trainer_begin_optimizer_steps,
    .end_step = chunked_end_step,
};
