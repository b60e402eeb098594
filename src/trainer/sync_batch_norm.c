/* sync_batch_norm.c - synchronised batch norm (--sync-batch-norm, PyTorch's
 * SyncBatchNorm): batch norm uses the statistics of the whole minibatch,
 * all devices of all ranks, rather than each device's shard. Orthogonal to
 * the synchronisation strategy: it happens inside the forward.
 *
 * DESIGN. The forward tasks meet inside each batch norm op: the op calls
 * stat_sum (dp_sync_batch_norm_sum) on every device with its partial sums
 * (host doubles the op owns); a barrier; device 0 adds the k arrays in
 * device order and (several ranks) has them summed across ranks by the
 * communication thread (dp_world_sum_doubles, a blocking call queued like
 * any other; no bucket is queued during a forward); a barrier; the others
 * copy device 0's result; a last barrier before device 0's array may
 * change. A task that fails breaks the barrier so that no device waits for
 * it; the caller re-arms it before each step, when no device is inside a
 * task. Every replica then updates its running statistics from the same
 * sums, so the buffers need no copy after the step.
 *
 * A device whose shard is empty (a short last batch with fewer examples
 * than devices, or a rank without any) runs no forward, yet the others
 * wait for it in every sum: it takes part with zeros, in the order the
 * ops sum (dp_sync_batch_norm_absent: each batch norm layer's forward,
 * [m, S1 (C), S2 (C)], in layer order, then each one's backward, 2C, in
 * reverse order), so every count and every MPI call matches. A frozen
 * batch norm layer (nn.h: dp_model_freeze) uses its running statistics and
 * sums nothing; a layer's backward sums only when its input carries a
 * gradient (dp_model_output_needs_grad: not below the lowest layer that
 * trains).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sync_strategy.h"
#include "trainer_state.h"

dp_status_t dp_sync_batch_norm_init(dp_trainer_t *t) {
    dp_stat_barrier_t *b = &t->barrier;
    if (pthread_mutex_init(&b->lock, NULL) != 0) return dp_fail(DP_ERR_NOMEM, "cannot make the batch norm barrier");
    if (pthread_cond_init(&b->cond, NULL) != 0) {
        pthread_mutex_destroy(&b->lock);
        return dp_fail(DP_ERR_NOMEM, "cannot make the batch norm barrier");
    }
    t->barrier_ready = 1;
    b->count = t->config.num_devices;
    return DP_OK;
}

void dp_sync_batch_norm_release(dp_trainer_t *t) {
    if (!t->barrier_ready) return;
    pthread_mutex_destroy(&t->barrier.lock);
    pthread_cond_destroy(&t->barrier.cond);
    t->barrier_ready = 0;
}

void dp_sync_batch_norm_rearm(dp_trainer_t *t) {
    t->barrier.broken = 0;
    t->barrier.waiting = 0;
    t->stat_status = DP_OK;
}

/* 0 when all `count` tasks arrived, -1 when the barrier is (or gets) broken. */
static int barrier_wait(dp_stat_barrier_t *b) {
    pthread_mutex_lock(&b->lock);
    unsigned long generation = b->generation;
    if (!b->broken && ++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cond);
    } else {
        while (!b->broken && b->generation == generation) pthread_cond_wait(&b->cond, &b->lock);
    }
    int broken = b->broken;
    pthread_mutex_unlock(&b->lock);
    return broken ? -1 : 0;
}

void dp_sync_batch_norm_break(dp_trainer_t *t) {
    dp_stat_barrier_t *b = &t->barrier;
    pthread_mutex_lock(&b->lock);
    b->broken = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* dp_stat_sync_t.sum: every device of every rank gets the sum of all. */
void dp_sync_batch_norm_sum(void *ctx, double *values, int count) {
    dp_replica_t *r = ctx;
    dp_trainer_t *t = r->trainer;
    r->stat_values = values;
    r->stat_count = count;
    if (barrier_wait(&t->barrier) != 0) return;
    if (r->index == 0) {
        for (int d = 1; d < t->num_devices && t->stat_status == DP_OK; d++) {
            const dp_replica_t *other = &t->replicas[d];
            if (other->stat_count != count) {
                t->stat_status = DP_ERR_SHAPE;
                snprintf(t->stat_error, sizeof t->stat_error,
                         "sync batch norm: %s summed %d statistics, %s %d", dp_device_name(t->devices[0]), count,
                         dp_device_name(t->devices[d]), other->stat_count);
                break;
            }
            for (int i = 0; i < count; i++) values[i] += other->stat_values[i];
        }
        if (t->config.world.size > 1 && t->stat_status == DP_OK &&
            dp_world_sum_doubles(values, count) != DP_OK) {
            t->stat_status = DP_ERR_IO;
            snprintf(t->stat_error, sizeof t->stat_error, "sync batch norm: %s", dp_error_message());
        }
    }
    if (barrier_wait(&t->barrier) != 0) return;
    if (r->index != 0) memcpy(values, t->replicas[0].stat_values, sizeof(double) * (size_t)count);
    barrier_wait(&t->barrier); /* device 0's array stays as it is until everyone has copied it */
}

dp_status_t dp_sync_batch_norm_absent(dp_replica_t *r) {
    const dp_model_t *m = r->trainer->model;
    int layers = dp_model_num_layers(m), widest = 0;
    for (int i = 1; i <= layers; i++) {
        dp_layer_info_t l;
        DP_TRY(dp_model_layer(m, i, &l));
        if (l.kind == DP_LAYER_BATCH_NORM && l.out_shape[0] > widest) widest = l.out_shape[0];
    }
    if (widest == 0) return DP_OK;
    double *zeros = dp_alloc(sizeof(double) * (size_t)(2 * widest + 1), "batch norm sums of an empty shard");
    if (!zeros) return DP_ERR_NOMEM;
    for (int pass = 0; pass < 2; pass++) /* the forward's sums in layer order, then the backward's in reverse */
        for (int j = 1; j <= layers; j++) {
            dp_layer_info_t l;
            if (dp_model_layer(m, pass == 0 ? j : layers + 1 - j, &l) != DP_OK || l.kind != DP_LAYER_BATCH_NORM)
                continue; /* (every layer number here exists) */
            int frozen = l.weight >= 0 && dp_model_param(m, l.weight)->frozen;
            if (frozen || (pass == 1 && !dp_model_output_needs_grad(m, l.input)))
                continue; /* the ops that sum nothing */
            int count = pass == 0 ? 2 * l.out_shape[0] + 1 : 2 * l.out_shape[0];
            memset(zeros, 0, sizeof(double) * (size_t)count);
            dp_sync_batch_norm_sum(r, zeros, count);
        }
    free(zeros);
    return DP_OK;
}
