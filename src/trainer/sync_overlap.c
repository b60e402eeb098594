/* sync_overlap.c - one process, the gradient sum overlapped with backward
 * (--overlap; PyTorch DDP's and Horovod's buckets).
 *
 * DESIGN. The gradients are grouped in buckets of DP_BUCKET_FLOATS of the
 * flat buffer. Parameters lie in layer order and backward visits layers in
 * reverse, so after each tape node the gradients that are final form a
 * suffix of the buffer (the trainer's backward_hook moves each replica's
 * ready_from down and calls range_final on the device's thread). Each
 * device counts every bucket its suffix covers on an atomic per-bucket
 * counter (buckets.c); the device that brings a bucket's
 * count to k completes it: here, sums that bucket over all replicas into
 * replica 0, copies it back and updates it in every replica, while the
 * other devices are still in backward on earlier layers. A bucket's
 * parameters and gradients are not touched again by any device in the step
 * once all k have counted it, so the completing device owns it. The sums
 * and updates are the chunked strategy's, element by element, so the
 * results are the same bits. The caller's wait for phase 1 waits for all
 * of it: nothing is left for end_step but the buffers. With gradient
 * clipping (clip_grad.c) a bucket is only summed into replica 0 during
 * backward; end_step measures the norm of the whole sum, scales it, and
 * copies and updates it chunk by chunk (the chunked strategy's phase 2),
 * as DDP leaves the optimizer's step after its overlapped allreduce.
 */
#include <stdlib.h>

#include "buckets.h"
#include "sync_strategy.h"
#include "trainer_state.h"

/* One rank: sum the bucket, copy it back, update it everywhere. */
static void complete_bucket(dp_trainer_t *t, long b) {
    size_t start, count;
    dp_bucket_range(t, b, &start, &count);
    dp_sync_reduce_to_first(t, start, count);
    if (!dp_clipping(t)) dp_sync_broadcast_update(t, start, count); /* else: end_step, after the norm */
}

static dp_status_t overlap_init(dp_trainer_t *t) {
    dp_bucket_counter_t *c = dp_alloc_zeroed(1, sizeof *c, "bucket counter");
    if (!c) return DP_ERR_NOMEM;
    t->sync_state = c;
    return dp_bucket_counter_init(c, t, complete_bucket);
}

static void overlap_release(dp_trainer_t *t) {
    if (!t->sync_state) return;
    dp_bucket_counter_release(t->sync_state);
    free(t->sync_state);
    t->sync_state = NULL;
}

static void overlap_begin_step(dp_trainer_t *t) {
    dp_trainer_begin_optimizer_steps(t);
    dp_bucket_counter_begin_step(t->sync_state, t);
}

static void overlap_range_final(dp_replica_t *r) { dp_bucket_counter_count(r->trainer->sync_state, r); }

static dp_status_t overlap_end_step(dp_trainer_t *t) {
    if (dp_clipping(t)) {
        DP_TRY(dp_clip_gradients(t, t->backend, t->grad_buffers[0]));
        DP_TRY(dp_sync_broadcast_update_chunks(t));
    }
    return dp_trainer_sync_buffers(t);
}

const dp_sync_strategy_t dp_sync_overlap = {
    .name = "overlap",
    .init = overlap_init,
    .release = overlap_release,
    .begin_step = overlap_begin_step,
    .range_final = overlap_range_final,
    .end_step = overlap_end_step,
};
