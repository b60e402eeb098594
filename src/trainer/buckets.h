/* buckets.h - the gradient buckets: fixed ranges of the flat gradient
 * buffer that the overlapping strategies (sync_overlap.c, sync_mpi.c,
 * sync_peer.c) sum while backward runs, and the per-bucket counters that
 * tell which device completes a bucket (buckets.c). Library internal.
 */
#ifndef DPTRAIN_BUCKETS_H
#define DPTRAIN_BUCKETS_H

#include <stdatomic.h>

#include "replica.h"

/* Gradient bucket size for the overlapped and the MPI sums: 64 KB. LeNet's
 * 129,068 parameters make 8 buckets. */
#define DP_BUCKET_FLOATS ((size_t)16384)

/* Bucket b of the gradients: [*start, *start + *count). */
void dp_bucket_range(const dp_trainer_t *t, long b, size_t *start, size_t *count);

/* The bucket counting that the overlapping strategies share.
 * The device that counts bucket b last calls complete(t, b). */
typedef struct dp_bucket_counter {
    atomic_int *done; /* (num_buckets) devices that have counted the bucket this step */
    void (*complete)(dp_trainer_t *t, long b);
} dp_bucket_counter_t;
dp_status_t dp_bucket_counter_init(dp_bucket_counter_t *c, const dp_trainer_t *t,
                                   void (*complete)(dp_trainer_t *t, long b));
void dp_bucket_counter_release(dp_bucket_counter_t *c);
void dp_bucket_counter_begin_step(dp_bucket_counter_t *c, dp_trainer_t *t);
void dp_bucket_counter_count(dp_bucket_counter_t *c, dp_replica_t *r);

#endif
