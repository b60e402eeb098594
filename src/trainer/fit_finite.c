/* fit_finite.c - a run that diverged stops before it saves (fit_finite.h).
 *
 * A learning rate too large for the model makes the loss overflow and the
 * parameters NaN or infinite within a few steps; training on would only
 * spend hours, and a checkpoint of those floats would replace the last good
 * one. So at every epoch's end and before every checkpoint inside an epoch
 * dp_fit reads replica 0's floats (the parameters and the running
 * statistics: one download like a checkpoint's, and a scan on the host;
 * a save right after downloads them again, once an epoch, which was left
 * simple) and stops at the
 * first that is not finite, with the line a person needs: where it
 * happened, what the file still holds, what may help (Keras'
 * TerminateOnNaN stops the same way; nothing is saved from the broken
 * floats). Every rank holds the same floats, so every rank stops at the
 * same check with the same status (DP_ERR_DIVERGED, exit status 9).
 */
#include "fit_finite.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "dptrain/nn.h"
#include "dptrain/parallel.h"

dp_status_t dp_fit_check_finite(const dp_fit_config_t *config, const dp_fit_stop_t *stop, int epoch, int step,
                                int steps) {
    const dp_model_t *m = config->model;
    const float *params = dp_trainer_params(config->trainer, 0);
    DP_TRY(dp_trainer_check_devices(config->trainer)); /* never the bytes a failed download left */
    const size_t n = dp_model_num_params(m);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(params[i])) {
            bad++;
            if (first == n) first = i;
        }
    if (bad == 0) return DP_OK;
    const char *tensor = "?";
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        if (first >= p->offset && first < p->offset + p->numel) tensor = p->name;
    }
    char kept[600] = ""; /* what to go back to */
    if (config->save_path && stop->saved && stop->saved_step == 0)
        snprintf(kept, sizeof kept, "; %s holds epoch %d, the last checkpoint written before", config->save_path,
                 stop->saved_epochs);
    else if (config->save_path && stop->saved)
        snprintf(kept, sizeof kept, "; %s holds epoch %d at step %d, the last checkpoint written before",
                 config->save_path, stop->saved_epochs + 1, stop->saved_step);
    return dp_fail(DP_ERR_DIVERGED, "epoch %d, step %d of %d: the training diverged: %zu of the model's %zu floats "
                   "are NaN or infinite (the first in %s), and no checkpoint is written from them%s (a smaller --lr, "
                   "--warmup-epochs or --clip-grad-norm may help)", epoch, step, steps, bad, n, tensor, kept);
}
