/* buckets.c - the gradient buckets (buckets.h): their ranges, and the
 * per-bucket counters of the overlapping strategies (sync_overlap.c,
 * sync_mpi.c, sync_peer.c).
 *
 * DESIGN. During backward each device's thread counts every bucket inside
 * its replica's final suffix of the gradients (r->ready_from) on an atomic
 * counter per bucket; the device whose count brings a bucket to the number
 * of devices calls the strategy's complete(t, b) for it, on its own thread.
 * begin_step, on the caller's thread between steps, zeroes the counters and
 * every replica's next_bucket.
 */
#include <stdlib.h>

#include "buckets.h"
#include "trainer_state.h"

void dp_bucket_range(const dp_trainer_t *t, long b, size_t *start, size_t *count) {
    *start = (size_t)b * DP_BUCKET_FLOATS;
    *count = t->num_trainable - *start < DP_BUCKET_FLOATS ? t->num_trainable - *start : DP_BUCKET_FLOATS;
}

dp_status_t dp_bucket_counter_init(dp_bucket_counter_t *c, const dp_trainer_t *t,
                                   void (*complete)(dp_trainer_t *t, long b)) {
    c->complete = complete;
    c->done = dp_alloc_zeroed((size_t)t->num_buckets + 1, sizeof *c->done, "bucket counters");
    return c->done ? DP_OK : DP_ERR_NOMEM;
}

void dp_bucket_counter_release(dp_bucket_counter_t *c) {
    free(c->done);
    c->done = NULL;
}

void dp_bucket_counter_begin_step(dp_bucket_counter_t *c, dp_trainer_t *t) {
    for (long b = 0; b < t->num_buckets; b++) atomic_store_explicit(&c->done[b], 0, memory_order_relaxed);
    for (int d = 0; d < t->num_devices; d++) t->replicas[d].next_bucket = t->num_buckets - 1;
}

/* Counts every bucket inside this device's final suffix; the last device to
 * count a bucket completes it. */
void dp_bucket_counter_count(dp_bucket_counter_t *c, dp_replica_t *r) {
    dp_trainer_t *t = r->trainer;
    while (r->next_bucket >= 0 && (size_t)r->next_bucket * DP_BUCKET_FLOATS >= r->ready_from) {
        long b = r->next_bucket--;
        if (atomic_fetch_add_explicit(&c->done[b], 1, memory_order_acq_rel) + 1 != t->num_devices) continue;
        c->complete(t, b);
    }
}
