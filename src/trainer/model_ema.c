/* model_ema.c - the model's exponential moving average on every replica
 * (parallel.h config.model_ema, dp_trainer_ema_*; optim.h dp_ema_*):
 * torchvision's --model-ema.
 *
 * DESIGN. Every replica keeps its own average beside its parameters, in
 * its device's memory, and updates it from its own model on its own thread
 * (the replicas' models are equal, so are their averages, as every rank's
 * copy is under torchvision's DDP): no transfer, one pass over the
 * parameters every few steps. To evaluate or save the average the
 * replicas' model and average pointers trade places (dp_trainer_ema_swap),
 * so that every evaluation and download path sees the average without a
 * copy; a step refuses to run while they are swapped.
 */
#include "replica.h"
#include "trainer_state.h"

dp_status_t dp_model_ema_init(dp_trainer_t *t) {
    const size_t bytes = sizeof(float) * t->num_params;
    for (int d = 0; d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        if (!r->backend->ema_update)
            return dp_fail(DP_ERR_ARG, "device %d: backend '%s' cannot keep a moving average of the model (no "
                           "ema_update, backend.h)", d, r->backend->name);
        if (!(r->ema = r->backend->alloc(r->backend->ctx, bytes, "the model's moving average"))) return DP_ERR_NOMEM;
        r->backend->copy(r->backend->ctx, r->ema, r->params, bytes);
    }
    return DP_OK;
}

int dp_trainer_model_ema(const dp_trainer_t *t) { return t->config.model_ema; }

static dp_status_t check_ema(const dp_trainer_t *t, const char *what) {
    if (!t->config.model_ema)
        return dp_fail(DP_ERR_ARG, "trainer: %s: the trainer keeps no moving average (config.model_ema is 0)", what);
    return DP_OK;
}

/* a replica's update on its device's thread */
static dp_status_t ema_task(void *arg) {
    dp_replica_t *r = arg;
    const dp_trainer_t *t = r->trainer;
    if (t->ema_updates == 0)
        r->backend->copy(r->backend->ctx, r->ema, r->params, sizeof(float) * t->num_params);
    else
        r->backend->ema_update(r->backend->ctx, r->ema, r->params, t->ema_decay, t->ema_one_minus_decay,
                               t->num_params);
    return DP_OK;
}

dp_status_t dp_trainer_ema_update(dp_trainer_t *t, double decay) {
    DP_TRY(check_ema(t, "ema update"));
    if (t->ema_swapped) return dp_fail(DP_ERR_ARG, "trainer: ema update while the average is swapped in");
    if (!(decay >= 0.0 && decay <= 1.0))
        return dp_fail(DP_ERR_ARG, "trainer: the moving average's decay must be in [0, 1], found %g", decay);
    t->ema_decay = (float)decay; /* torch: a Python float times a float32 tensor, in float */
    t->ema_one_minus_decay = (float)(1.0 - decay);
    DP_TRY(dp_trainer_run_on_all(t, ema_task));
    t->ema_updates++;
    return DP_OK;
}

void dp_trainer_ema_restart(dp_trainer_t *t) { t->ema_updates = 0; }

dp_status_t dp_trainer_ema_swap(dp_trainer_t *t) {
    DP_TRY(check_ema(t, "ema swap"));
    for (int d = 0; d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        float *model = r->params;
        r->params = r->ema;
        r->ema = model;
        t->param_buffers[d] = r->params;
    }
    t->ema_swapped = !t->ema_swapped;
    return DP_OK;
}

uint64_t dp_trainer_ema_updates(const dp_trainer_t *t) { return t->ema_updates; }
void dp_trainer_set_ema_updates(dp_trainer_t *t, uint64_t updates) { t->ema_updates = updates; }
