/* trainer_metrics.c - the training and evaluation figures (summed loss,
 * correct and top-5 counts) that the backends' count_metrics add up on the
 * devices: one block of device memory per backend table, read with one
 * download per table (dp_trainer_read_metrics, and the trainer's
 * evaluation).
 *
 * DESIGN. Replica d's train_sums and eval_sums point into the block of the
 * first replica on its backend table (metrics_owner); the devices add to
 * them inside their tasks, the caller's thread reads and zeroes them only
 * between waits.
 */
#include <limits.h>
#include <string.h>

#include "trainer_metrics.h"
#include "trainer_state.h"

/* The device sums of count_metrics (backend.h): one zeroed block per
 * backend table, [training | evaluation], DP_METRICS_SUMS doubles per device
 * in each. */
dp_status_t dp_trainer_metrics_alloc(dp_trainer_t *t) {
    const int k = t->num_devices, m = DP_METRICS_SUMS;
    if (!(t->host_metrics = dp_alloc_zeroed((size_t)2 * m * k, sizeof(double), "host copy of the step's metrics")))
        return DP_ERR_NOMEM;
    for (int d = 0; d < k; d++) {
        dp_replica_t *r = &t->replicas[d];
        int owner = 0;
        while (t->replicas[owner].backend != r->backend) owner++;
        r->metrics_owner = owner;
        r->metrics_slot = t->replicas[owner].metrics_slots++;
    }
    for (int d = 0; d < k; d++) {
        dp_replica_t *r = &t->replicas[d];
        if (r->metrics_owner != d) continue;
        size_t bytes = sizeof(double) * 2 * m * (size_t)r->metrics_slots;
        if (!(r->metrics_block = r->backend->alloc(r->backend->ctx, bytes, "the step's loss and accuracy sums")))
            return DP_ERR_NOMEM;
        r->backend->zero(r->backend->ctx, r->metrics_block, bytes);
    }
    for (int d = 0; d < k; d++) {
        dp_replica_t *r = &t->replicas[d];
        const dp_replica_t *o = &t->replicas[r->metrics_owner];
        r->train_sums = o->metrics_block + m * r->metrics_slot;
        r->eval_sums = o->metrics_block + m * o->metrics_slots + m * r->metrics_slot;
    }
    return DP_OK;
}

/* The training (eval = 0) or evaluation sums of every device into
 * t->host_metrics + mk (device d's at md, m = DP_METRICS_SUMS): one
 * download per block, unless `download` is 0; then, with `reset`, the
 * blocks' sums zeroed. Between waits, on the caller's thread. */
dp_status_t dp_trainer_metrics_move(dp_trainer_t *t, int eval, int download, int reset) {
    const int k = t->num_devices, m = DP_METRICS_SUMS;
    double *scratch = t->host_metrics, *per_device = t->host_metrics + m * k;
    for (int o = 0; o < k; o++) {
        const dp_replica_t *owner = &t->replicas[o];
        if (!owner->metrics_block) continue;
        const dp_backend_t *be = owner->backend;
        size_t bytes = sizeof(double) * m * (size_t)owner->metrics_slots;
        double *sums = owner->metrics_block + (eval ? m * owner->metrics_slots : 0);
        if (download) {
            be->download(be->ctx, scratch, sums, bytes);
            if (be->failure) DP_TRY(be->failure(be->ctx)); /* the failure, not the bytes it left */
            for (int d = o; d < k; d++)
                if (t->replicas[d].metrics_owner == o)
                    memcpy(per_device + m * d, scratch + m * t->replicas[d].metrics_slot, m * sizeof(double));
        }
        if (reset) be->zero(be->ctx, sums, bytes);
    }
    return DP_OK;
}

/* Device d's `what` count ("correct", "top-5") as read: a whole number
 * from 0 to INT_MAX, or the download failed (a GPU's failure leaves NaN
 * bytes). */
dp_status_t dp_trainer_metrics_count(const dp_trainer_t *t, int d, const char *what, double value, int *count) {
    if (!(value >= 0.0 && value <= (double)INT_MAX) || value != (double)(int)value)
        return dp_fail(DP_ERR_ARG, "%s: the %s count read from the device is %g, not a count (the device "
                       "failed?)", dp_device_name(t->devices[d]), what, value);
    *count = (int)value;
    return DP_OK;
}

dp_status_t dp_trainer_read_metrics(dp_trainer_t *t, double *loss_sum, int *correct, int reset) {
    int download = loss_sum || correct;
    if (!download && !reset) return DP_OK;
    DP_TRY(dp_trainer_metrics_move(t, 0, download, reset));
    if (!download) return DP_OK;
    const double *per_device = t->host_metrics + DP_METRICS_SUMS * t->num_devices;
    double total_loss = 0.0;
    int total_correct = 0;
    for (int d = 0; d < t->num_devices; d++) { /* in device order: the same sum every run */
        int count = 0;
        DP_TRY(dp_trainer_metrics_count(t, d, "correct", per_device[DP_METRICS_SUMS * d + 1], &count));
        total_loss += per_device[DP_METRICS_SUMS * d];
        total_correct += count;
    }
    if (loss_sum) *loss_sum += total_loss;
    if (correct) *correct += total_correct;
    return DP_OK;
}
