/* replica_collectives.c - the sums and copies among one process's replicas
 * that every strategy uses: the gradients summed in device order, a range
 * copied from one replica to the others, the parameter server's buffers
 * copied to a replica. When every device is on one backend table
 * (cpu:0,cpu:1; cuda:0,cuda:0: one GPU) they are that table's reduce_range,
 * broadcast_range and copy. When the devices are on several tables (cuda:0,
 * cuda:1: one table per GPU, whose memories are apart) no table may be
 * handed another's pointers, so they go through host memory: each range is
 * downloaded from its device, summed on the CPU in device order (the CPU
 * backend's reduce_range, two at a time: ((g0 + g1) + g2) + ..., the order
 * every backend sums in) and uploaded to each device. The same bits as on
 * one table; slower by the copies. Devices each on a GPU of its own sum with
NCCL instead (sync_peer.c), when the backend has it; these paths remain
for the rest (tables shared by some devices, ranks sharing a GPU, --sync
ps, --allreduce naive, DPTRAIN_NCCL=0).
 *
 * DESIGN. The host buffers t->split_sum and t->split_part (num_params + 1
 * floats each, the buffers' own offsets) are used only at the offsets of
 * the range a call is given. The strategies call these functions at once
 * from several threads (device tasks, the communication thread) on
 * disjoint ranges only (chunks, buckets, the buffers' range after the
 * step), so the calls never share an offset. The parameter server's pull
 * copies the whole buffer on every device at once: it stages through each
 * replica's own host_params instead.
 */
#include "replica.h"
#include "trainer_state.h"

/* sum[start, start + count) += part[start, start + count) on the CPU. */
static void host_add(float *sum, float *part, size_t start, size_t count) {
    const float *pair[2] = {sum, part};
    const dp_backend_t *cpu = dp_backend_cpu();
    cpu->reduce_range(cpu->ctx, sum, pair, 2, start, count);
}

void dp_replicas_reduce(dp_trainer_t *t, const dp_backend_t *dst_backend, float *dst, size_t start,
                        size_t count) {
    if (!t->split_sum) {
        dst_backend->reduce_range(dst_backend->ctx, dst, (const float *const *)t->grad_buffers, t->num_devices,
                                  start, count);
        return;
    }
    if (count == 0) return;
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        float *host = d == 0 ? t->split_sum : t->split_part;
        be->download(be->ctx, host + start, t->grad_buffers[d] + start, sizeof(float) * count);
        if (d > 0) host_add(t->split_sum, t->split_part, start, count);
    }
    dst_backend->upload(dst_backend->ctx, dst + start, t->split_sum + start, sizeof(float) * count);
}

void dp_replicas_broadcast(dp_trainer_t *t, float *const *buffers, int source, size_t start, size_t count) {
    const dp_backend_t *from = t->replicas[source].backend;
    if (!t->split_sum) {
        from->broadcast_range(from->ctx, buffers, t->num_devices, buffers[source], start, count);
        return;
    }
    if (count == 0) return;
    int downloaded = 0;
    for (int e = 0; e < t->num_devices; e++) {
        const dp_backend_t *be = t->replicas[e].backend;
        if (e == source || buffers[e] == buffers[source]) continue;
        if (be == from) { /* the same table: its own device-to-device copy */
            be->copy(be->ctx, buffers[e] + start, buffers[source] + start, sizeof(float) * count);
            continue;
        }
        if (!downloaded) {
            from->download(from->ctx, t->split_sum + start, buffers[source] + start, sizeof(float) * count);
            downloaded = 1;
        }
        be->upload(be->ctx, buffers[e] + start, t->split_sum + start, sizeof(float) * count);
    }
}

void dp_replica_copy_in(dp_replica_t *r, const dp_backend_t *src_backend, const float *src, size_t start,
                        size_t count) {
    const dp_backend_t *be = r->backend;
    if (be == src_backend) {
        be->copy(be->ctx, r->params + start, src + start, sizeof(float) * count);
        return;
    }
    src_backend->download(src_backend->ctx, r->host_params + start, src + start, sizeof(float) * count);
    be->upload(be->ctx, r->params + start, r->host_params + start, sizeof(float) * count);
}
