/* fit_stop.c - dp_fit's step boundaries (fit_stop.h): the agreed stop, the
 * step reached, the injected faults.
 *
 * The stop. A SIGTERM reaches one rank or all of them, at any moment; the
 * ranks must still stop after the same step, or the ones that go on would
 * wait for the others in the next step's sums. So each rank's request is a
 * vote (1 or 0), summed across ranks by the communication thread: queued at
 * boundary t (dp_world_sum_floats_async, before step t+1's gradient sums,
 * in the same order on every rank) and read at boundary t+1, by which time
 * it has long completed (step t+1's own sums came after it). Every rank
 * reads the same sum, so every rank stops at the same boundary: the first
 * one inside an epoch once the sum is non-zero. With one rank the request
 * is read directly. Runs on dp_fit's thread; the communication thread
 * writes the sum into `vote`, and dp_world_drain (its queue's lock) orders
 * that write before the read here.
 */
#include "fit_stop.h"

#include <stdio.h>

#include "dptrain/comm.h"

dp_status_t dp_fit_stop_begin(dp_fit_stop_t *s, const dp_fit_config_t *config) {
    *s = (dp_fit_stop_t){.config = config, .ranks = config->world.size > 1 ? config->world.size : 1};
    return dp_faults_from_env(config->world.rank, &s->faults);
}

dp_status_t dp_fit_stop_vote(dp_fit_stop_t *s, int inside, int *stop) {
    *stop = 0;
    if (s->config->step_reached) *s->config->step_reached = dp_trainer_step_count(s->config->trainer);
    if (!s->config->stop_request) return DP_OK;
    if (s->ranks == 1) {
        s->agreed = s->agreed || *s->config->stop_request != 0;
    } else {
        if (s->pending) {
            s->pending = 0;
            DP_TRY(dp_world_drain());
            s->agreed = s->agreed || s->vote > 0.0f;
        }
        if (!s->agreed) {
            s->vote = *s->config->stop_request != 0 ? 1.0f : 0.0f;
            s->pending = 1;
            dp_world_sum_floats_async(&s->vote, 1, NULL, NULL);
        }
    }
    *stop = s->agreed && inside;
    return DP_OK;
}

dp_status_t dp_fit_stop_saved(dp_fit_stop_t *s, dp_status_t saved, int epoch, int step, int steps) {
    const dp_fit_config_t *c = s->config;
    uint64_t count = dp_trainer_step_count(c->trainer);
    if (saved == DP_OK) {
        if (c->save_path)
            dp_fail(DP_ERR_PREEMPTED, "preempted: stopped after step %llu (epoch %d, step %d of %d) and saved it "
                    "to %s: continue with --resume %s", (unsigned long long)count, epoch + 1, step, steps,
                    c->save_path, c->save_path);
        else
            dp_fail(DP_ERR_PREEMPTED, "preempted: stopped after step %llu (epoch %d, step %d of %d); nothing saved "
                    "(no --save)", (unsigned long long)count, epoch + 1, step, steps);
        saved = DP_ERR_PREEMPTED;
    }
    return dp_world_agree(saved); /* rank 0's line (it saved) on every rank */
}

void dp_fit_stop_after(const dp_fit_stop_t *s, uint64_t step_count) { dp_faults_at_step(&s->faults, step_count); }

void dp_fit_stop_end(dp_fit_stop_t *s) {
    if (!s->pending) return;
    s->pending = 0;
    (void)dp_world_drain(); /* dp_fit returns its own status; a failure here shows at the next collective */
}
