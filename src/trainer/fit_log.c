/* fit_log.c - dp_fit's lines inside an epoch (fit_log.h): torchvision's
 * --print-freq, timm's --log-interval. The figures are the epoch's so
 * far, as its closing line counts them: the trainer's sums peeked at
 * (read, not folded, so the epoch's own sums round as without the lines)
 * at fixed steps, then each rank's pair put in its own slot of a buffer
 * of zeros and summed across ranks, so the totals do not depend on timing
 * or on how the sum of zeros was ordered.
 */
#include <stdlib.h>

#include "dptrain/comm.h"
#include "dptrain/parallel.h"
#include "fit_log.h"

void dp_fit_log_start(dp_fit_log_clock_t *clock, int step, int seen, double now) {
    clock->epoch_start = clock->last_at = now;
    clock->first_step = step;
    clock->last_seen = seen;
}

/* This rank's loss and correct count summed with every other rank's. */
static dp_status_t sum_over_ranks(const dp_fit_config_t *config, double *loss, double *correct) {
    const int ranks = config->world.size > 1 ? config->world.size : 1;
    if (ranks == 1) return DP_OK;
    double *sums = calloc((size_t)ranks * 2, sizeof *sums);
    if (!sums) return dp_fail(DP_ERR_NOMEM, "fit: out of memory for the step line's sums");
    sums[2 * config->world.rank] = *loss;
    sums[2 * config->world.rank + 1] = *correct;
    dp_status_t status = dp_world_sum_doubles(sums, 2 * ranks);
    if (status == DP_OK) {
        *loss = *correct = 0.0;
        for (int r = 0; r < ranks; r++) *loss += sums[2 * r], *correct += sums[2 * r + 1];
    }
    free(sums);
    return status;
}

dp_status_t dp_fit_log_step(const dp_fit_config_t *config, void *ctx, dp_fit_log_clock_t *clock, int epoch, int step,
                            int steps, double loss_sum, int correct, int seen, double lr, double now) {
    const int every = config->log_every_steps;
    if (every <= 0 || step % every != 0 || step >= steps) return DP_OK;
    double loss = loss_sum;
    int rank_correct = correct;
    DP_TRY(dp_trainer_read_metrics(config->trainer, &loss, &rank_correct, 0)); /* a peek */
    double total_correct = rank_correct;
    DP_TRY(sum_over_ranks(config, &loss, &total_correct));
    const double since = now - clock->last_at;
    const int done = step - clock->first_step;
    dp_fit_log_t line = {
        .epoch = epoch,
        .step = step,
        .steps = steps,
        .mean_loss = seen > 0 ? loss / seen : 0.0,
        .train_acc = seen > 0 ? total_correct / seen : 0.0,
        .lr = lr,
        .images_per_sec = since > 0.0 ? (seen - clock->last_seen) / since : 0.0,
        .eta_sec = done > 0 ? (now - clock->epoch_start) / done * (steps - step) : 0.0,
    };
    clock->last_at = now;
    clock->last_seen = seen;
    if (config->on_log) config->on_log(&line, ctx);
    return DP_OK;
}
