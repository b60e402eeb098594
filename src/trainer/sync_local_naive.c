/* sync_local_naive.c - one process, the seeds' allreduce: after backward,
 * device 0 sums every replica's gradients into its own and copies the sum
 * back (one task), then every device updates its own replica. The teaching
 * baseline and the oracle of the chunked strategy (the same sums in the same
 * device order, so the same bits).
 *
 * DESIGN. Two phases after phase 1, the caller waiting after each: device
 * 0's task reads and writes every replica's gradients while the other
 * devices are idle; then each device updates only its own replica.
 */
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

static dp_status_t reduce_naive_task(void *arg) {
    dp_trainer_t *t = ((dp_replica_t *)arg)->trainer;
    dp_sync_reduce_to_first(t, 0, t->num_trainable);
    DP_TRY(dp_clip_gradients(t, t->backend, t->grad_buffers[0])); /* with clipping (clip_grad.c) */
    dp_replicas_broadcast(t, t->grad_buffers, 0, 0, t->num_trainable);
    return DP_OK;
}

static dp_status_t update_task(void *arg) {
    dp_replica_t *r = arg;
    r->backend->optimizer_update(r->backend->ctx, r->optimizer, r->params, r->grads, 0, r->trainer->num_trainable);
    return DP_OK;
}

static dp_status_t naive_end_step(dp_trainer_t *t) {
    DP_TRY(dp_device_submit(t->devices[0], reduce_naive_task, &t->replicas[0]));
    DP_TRY(dp_device_wait(t->devices[0]));
    DP_TRY(dp_trainer_run_on_all(t, update_task));
    return dp_trainer_sync_buffers(t);
}

const dp_sync_strategy_t dp_sync_local_naive = {
    .name = "naive",
    .begin_step = dp_trainer_begin_optimizer_steps,
    .end_step = naive_end_step,
};
