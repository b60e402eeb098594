/* clip_grad.c - gradient clipping by the total norm in the strategies
 * (replica.h; the trainer's config.clip_grad_norm, optim.h dp_clip_*):
 * torch.nn.utils.clip_grad_norm_ between the gradient sum and the update.
 *
 * DESIGN. Every strategy has a point where one buffer holds the step's
 * whole summed gradient before any update: replica 0's after the local
 * and MPI sums (chunked, naive, overlap and MPI: the buckets are summed
 * during backward as before, the broadcast and the update wait for the
 * norm), the server's (ps, rank 0), every replica's after NCCL's in-place
 * sums (peer). There the norm is measured (the backend's sum_squares:
 * that buffer, whatever the device count, so the same coefficient for 1
 * or k devices and on every rank, which all hold the same sum), the
 * buffer is scaled, and the strategy goes on: copies of it are scaled
 * already; buffers summed in place elsewhere (peer) are scaled by the same
 * coefficient with dp_clip_scale. A coefficient of 1 (the norm within the
 * bound) scales nothing: torch multiplies by 1.0, which changes no float.
 */
#include <math.h>

#include "replica.h"
#include "trainer_state.h"

int dp_clipping(const dp_trainer_t *t) { return t->config.clip_grad_norm > 0.0f; }

dp_status_t dp_clip_gradients(dp_trainer_t *t, const dp_backend_t *be, float *grads) {
    if (!dp_clipping(t)) return DP_OK;
    double squares = 0.0;
    if (t->num_trainable > 0) DP_TRY(be->sum_squares(be->ctx, grads, t->num_trainable, &squares));
    t->last_grad_norm = dp_clip_total_norm(squares);
    t->clip_coef = dp_clip_coefficient(t->last_grad_norm, t->config.clip_grad_norm);
    dp_grad_norm_stats_t *s = &t->norm_stats;
    s->steps++;
    s->clipped += !(t->clip_coef == 1.0f);
    s->norm_sum += t->last_grad_norm;
    if (isnan(t->last_grad_norm) || isnan(s->norm_max) || t->last_grad_norm > s->norm_max)
        s->norm_max = isnan(s->norm_max) ? s->norm_max : t->last_grad_norm;
    dp_clip_scale(t, be, grads);
    return DP_OK;
}

void dp_trainer_grad_norms(dp_trainer_t *t, dp_grad_norm_stats_t *out, int reset) {
    *out = t->norm_stats;
    if (reset) t->norm_stats = (dp_grad_norm_stats_t){0};
}

void dp_clip_scale(const dp_trainer_t *t, const dp_backend_t *be, float *grads) {
    if (dp_clipping(t) && !(t->clip_coef == 1.0f) && t->num_trainable > 0)
        be->scale_range(be->ctx, grads, t->clip_coef, t->num_trainable);
}
