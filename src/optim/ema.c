/* ema.c - the arithmetic of the model's exponential moving average (optim.h:
 * torchvision's --model-ema): the decay torchvision derives from its
 * options, and the update on host memory (the CPU backend's). Where the
 * average is kept and when it is updated is the trainer's and dp_fit's.
 *
 * The update is compiled without floating-point contraction (CMakeLists.txt):
 * torch rounds decay * avg and (1 - decay) * x before their sum, and a
 * fused multiply-add would round once less.
 */
#include "dptrain/optim.h"

double dp_ema_decay(double decay, int steps, int global_batch, int epochs) {
    /* torchvision's train.py: adjust = world_size * batch_size * model_ema_steps / epochs;
     * alpha = min(1.0, (1.0 - model_ema_decay) * adjust); decay = 1.0 - alpha */
    const double adjust = (double)global_batch * steps / epochs;
    double alpha = (1.0 - decay) * adjust;
    if (alpha > 1.0) alpha = 1.0;
    return 1.0 - alpha;
}

void dp_ema_update(float *avg, const float *x, float decay, float one_minus_decay, size_t n) {
    for (size_t i = 0; i < n; i++) avg[i] = decay * avg[i] + one_minus_decay * x[i];
}
