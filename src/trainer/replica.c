/* replica.c - the operations over every replica of a trainer that the
 * synchronisation strategies and the trainer share (replica.h): a task on
 * every device, the optimizers' steps and uploads, the sum and update of a
 * gradient range, the buffers after a step, MPI's host staging, and a
 * replica's release. Every access goes through the replica's backend.
 */
#include <stdio.h>
#include <stdlib.h>

#include "replica.h"

#include "dptrain/nn.h"
#include "dptrain/no_grad.h"
#include "dptrain/profile.h"
#include "trainer_state.h"

void dp_replica_free(dp_replica_t *r) {
    dp_device_free(r->device); /* first: runs what is queued, then joins */
    r->backend->free(r->backend->ctx, r->params);
    r->backend->free(r->backend->ctx, r->ema);
    r->backend->free(r->backend->ctx, r->grads);
    dp_tape_free(r->tape);
    dp_no_grad_free(r->no_grad);
    dp_profiler_free(r->profiler);
    dp_arena_free(r->arena);
    if (r->optimizer && r->backend->optimizer_forget) r->backend->optimizer_forget(r->backend->ctx, r->optimizer);
    dp_optimizer_free(r->optimizer);
    r->backend->free(r->backend->ctx, r->metrics_block);
    free(r->host_params);
    r->backend->free(r->backend->ctx, r->step_in.pixels);
    r->backend->free(r->backend->ctx, r->step_in.labels);
    r->backend->free(r->backend->ctx, r->eval_in.pixels);
    r->backend->free(r->backend->ctx, r->eval_in.labels);
    r->backend->free(r->backend->ctx, r->mix_in.pixels);
    r->backend->free(r->backend->ctx, r->mix_in.labels);
}

dp_status_t dp_trainer_run_on_all(dp_trainer_t *t, dp_task_fn fn) {
    for (int d = 0; d < t->num_devices; d++) {
        dp_status_t status = dp_device_submit(t->devices[d], fn, &t->replicas[d]);
        if (status != DP_OK) {
            char message[1024];
            snprintf(message, sizeof message, "%s", dp_error_message());
            dp_waitall(t->devices, d);
            return dp_fail(status, "%s", message);
        }
    }
    return dp_waitall(t->devices, t->num_devices);
}

void dp_trainer_begin_optimizer_steps(dp_trainer_t *t) {
    for (int d = 0; d < t->num_devices; d++) dp_optimizer_begin_step(t->replicas[d].optimizer);
}

void dp_trainer_optimizers_uploaded(dp_trainer_t *t) {
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (be->optimizer_upload) be->optimizer_upload(be->ctx, t->replicas[d].optimizer);
    }
    if (t->server_optimizer && t->backend->optimizer_upload)
        t->backend->optimizer_upload(t->backend->ctx, t->server_optimizer);
}

void dp_sync_reduce_to_first(dp_trainer_t *t, size_t start, size_t count) {
    dp_replicas_reduce(t, t->backend, t->grad_buffers[0], start, count);
}

void dp_sync_broadcast_update(dp_trainer_t *t, size_t start, size_t count) {
    dp_replicas_broadcast(t, t->grad_buffers, 0, start, count);
    for (int e = 0; e < t->num_devices; e++) {
        dp_replica_t *other = &t->replicas[e];
        other->backend->optimizer_update(other->backend->ctx, other->optimizer, other->params, other->grads, start,
                                         count);
    }
}

static dp_status_t broadcast_update_chunk_task(void *arg) {
    dp_replica_t *r = arg;
    dp_trainer_t *t = r->trainer;
    size_t start, count;
    dp_chunk_range(t->num_trainable, t->num_devices, r->index, &start, &count);
    dp_sync_broadcast_update(t, start, count);
    return DP_OK;
}

dp_status_t dp_sync_broadcast_update_chunks(dp_trainer_t *t) {
    return dp_trainer_run_on_all(t, broadcast_update_chunk_task);
}

dp_status_t dp_trainer_sync_buffers(dp_trainer_t *t) {
    size_t start = t->buffers_at, count = t->num_params - start; /* not the frozen parameters: never changed */
    /* With synchronised batch norm every replica on every rank updated its
     * running statistics from the same global sums, in the same order: they
     * are equal already (dp_trainer_check_replicas checks it), but for a
     * step with empty shards, whose devices ran no batch norm (replica 0
     * of rank 0 always has examples: theirs are the ones to copy). */
    if (count == 0 || (t->config.sync_batch_norm && !t->empty_shards)) return DP_OK;
    if (t->peer_group) { /* NCCL's broadcast from the first GPU of rank 0, joined before the next forward */
        const dp_backend_t *be = t->replicas[0].backend;
        DP_TRY(be->peer_broadcast(t->peer_group, t->param_buffers, start, count));
        return be->peer_join(t->peer_group);
    }
    float *source = t->replicas[0].params;
    if (t->ranks > 1) { /* through host memory when MPI may not read the device's */
        DP_TRY(dp_world_broadcast(dp_trainer_stage_down(t, source, start, count), count));
        dp_trainer_stage_up(t, source, start, count);
    }
    dp_replicas_broadcast(t, t->param_buffers, 0, start, count);
    return DP_OK;
}

float *dp_trainer_stage_down(dp_trainer_t *t, const float *device_buffer, size_t start, size_t count) {
    if (!t->host_stage) return (float *)device_buffer + start;
    t->backend->download(t->backend->ctx, t->host_stage + start, device_buffer + start, sizeof(float) * count);
    return t->host_stage + start;
}

void dp_trainer_stage_up(dp_trainer_t *t, float *device_buffer, size_t start, size_t count) {
    if (t->host_stage)
        t->backend->upload(t->backend->ctx, device_buffer + start, t->host_stage + start, sizeof(float) * count);
}

dp_status_t dp_trainer_optimizer_new(const dp_trainer_t *t, dp_optimizer_t **out) {
    DP_TRY(dp_optimizer_new(&t->config.optim, t->num_trainable, out));
    dp_decay_range_t *ranges;
    int count;
    dp_status_t status = dp_model_decay_ranges(t->config.model, &t->config.optim, &ranges, &count);
    if (status == DP_OK) status = dp_optimizer_set_decay_ranges(*out, ranges, count);
    free(ranges);
    if (status != DP_OK) {
        dp_optimizer_free(*out);
        *out = NULL;
    }
    return status;
}
