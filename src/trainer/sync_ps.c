/* sync_ps.c - the parameter server (--sync ps, the Paddle seed): a server
 * device holds the parameters and the optimizer; after backward the workers'
 * gradients are pushed to it and summed, the server updates, and every
 * device pulls the parameters (buffers included).
 *
 * DESIGN. The server is one more device of device 0's backend ("ps"),
 * with its own memory (with devices on several GPUs: on the first). Phase 2 on the server device (push): sum every
 * replica's gradients in device order (the allreduce's sum: backend
 * reduce_range) into the server's buffer and take replica 0's buffers; on
 * rank 0, update the server's parameters (with several ranks the caller
 * first MPI_Reduces the sums to rank 0, and afterwards MPI_Bcasts the
 * parameters: from the server's memory itself on a host-memory backend,
 * else through the trainer's host staging buffer, downloaded before and
 * uploaded after each collective). Phase 3 on every device (pull): copy the server's
 * parameters into its replica. MPI calls are made from the caller's thread,
 * between waits. Frozen parameters (nn.h: dp_model_freeze), between the
 * trained ones and the buffers, are neither pushed, broadcast nor pulled:
 * every replica and the server hold them from the start, and they never
 * change.
 */
#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

static dp_status_t ps_init(dp_trainer_t *t) {
    const dp_backend_t *be = t->backend;
    dp_status_t status = dp_device_new_on(be, t->num_devices, -1, &t->server);
    if (status != DP_OK) return status;
    dp_device_set_name(t->server, "ps");
    t->server_params = be->alloc(be->ctx, sizeof(float) * t->num_params, "server parameters");
    t->server_grads = be->alloc(be->ctx, sizeof(float) * (t->num_trainable + 1), "server gradients");
    if (!t->server_params || !t->server_grads) return DP_ERR_NOMEM;
    be->copy(be->ctx, t->server_params, t->replicas[0].params, sizeof(float) * t->num_params);
    return dp_trainer_optimizer_new(t, &t->server_optimizer);
}

static void ps_release(dp_trainer_t *t) {
    dp_device_free(t->server); /* first: runs what is queued, then joins */
    t->backend->free(t->backend->ctx, t->server_params);
    t->backend->free(t->backend->ctx, t->server_grads);
    if (t->server_optimizer && t->backend->optimizer_forget)
        t->backend->optimizer_forget(t->backend->ctx, t->server_optimizer);
    dp_optimizer_free(t->server_optimizer);
    t->server = NULL;
    t->server_params = t->server_grads = NULL;
    t->server_optimizer = NULL;
}

/* Push: the server sums every replica's gradients and takes replica 0's
 * buffers (rank 0's reach every rank with the parameters). */
static dp_status_t ps_push_task(void *arg) {
    dp_trainer_t *t = arg;
    const dp_backend_t *be = t->backend; /* the server's and replica 0's */
    dp_replicas_reduce(t, be, t->server_grads, 0, t->num_trainable);
    be->copy(be->ctx, t->server_params + t->buffers_at, t->replicas[0].params + t->buffers_at,
             sizeof(float) * (t->num_params - t->buffers_at));
    return DP_OK;
}

/* The server's optimizer counts its own steps; with clipping the server's
 * sum is clipped (rank 0: the other ranks take its parameters). */
static dp_status_t ps_update_task(void *arg) {
    dp_trainer_t *t = arg;
    dp_optimizer_begin_step(t->server_optimizer);
    DP_TRY(dp_clip_gradients(t, t->backend, t->server_grads)); /* with clipping (clip_grad.c) */
    t->backend->optimizer_update(t->backend->ctx, t->server_optimizer, t->server_params, t->server_grads, 0,
                                 t->num_trainable);
    return DP_OK;
}

/* Pull: every device copies the server's parameters into its replica. */
static dp_status_t ps_pull_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    dp_replica_copy_in(r, t->backend, t->server_params, 0, t->num_trainable);
    dp_replica_copy_in(r, t->backend, t->server_params, t->buffers_at, t->num_params - t->buffers_at);
    return DP_OK;
}

static dp_status_t ps_end_step(dp_trainer_t *t) {
    DP_TRY(dp_device_submit(t->server, ps_push_task, t));
    DP_TRY(dp_device_wait(t->server));
    if (t->ranks > 1) {
        DP_TRY(dp_world_reduce_to_root(dp_trainer_stage_down(t, t->server_grads, 0, t->num_trainable),
                                       t->num_trainable));
        if (t->config.world.rank == 0) dp_trainer_stage_up(t, t->server_grads, 0, t->num_trainable);
    }
    if (t->config.world.rank == 0) {
        DP_TRY(dp_device_submit(t->server, ps_update_task, t));
        DP_TRY(dp_device_wait(t->server));
    }
    if (t->ranks > 1) { /* the trained parameters and the buffers */
        size_t ranges[2][2] = {{0, t->num_trainable}, {t->buffers_at, t->num_params - t->buffers_at}};
        for (int i = 0; i < 2; i++) {
            if (ranges[i][1] == 0) continue;
            DP_TRY(dp_world_broadcast(dp_trainer_stage_down(t, t->server_params, ranges[i][0], ranges[i][1]),
                                      ranges[i][1]));
            dp_trainer_stage_up(t, t->server_params, ranges[i][0], ranges[i][1]);
        }
    }
    return dp_trainer_run_on_all(t, ps_pull_task);
}

const dp_sync_strategy_t dp_sync_ps = {
    .name = "ps",
    .init = ps_init,
    .release = ps_release,
    .end_step = ps_end_step,
};
