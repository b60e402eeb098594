/* no_grad.h - the layers of a pass that no backward reads, run in memory
 * their outputs leave as they die (PyTorch's autograd saves nothing for
 * them either: torch.no_grad(), a frozen layer).
 *
 * Which layers: every layer of an inference pass (evaluation, predict),
 * and a training pass's frozen prefix (nn.h dp_model_frozen_prefix: the
 * layers before the first one that trains, --freeze-backbone's whole
 * backbone). On the step's tape every output stays in the arena until it
 * is reset: ResNet-50's frozen backbone at batch 32 kept about 3 GB, an
 * evaluation forward of it about 200 MB an image. A runner runs those
 * layers on a tape of its own, each op in an arena of one of two kinds:
 * - an output that a layer after them reads (a ResNet's pooled features;
 *   the logits of an inference pass) and its op's scratch go into the
 *   runner's kept arena, valid until the runner's next forward;
 * - any other output goes into a pool arena that is reset and used again
 *   once the output's last reader has run (an op that writes over its
 *   input, as a residual add, or returns a view of it, keeps that input's
 *   arena; one whose op only took scratch there is free at once).
 * The batch runs whole, each op as the step's tape would run it: the same
 * values bit for bit, the same kernels at the same batch. Pool arenas are
 * taken last-freed first, so every pass of a model takes the same memory
 * (what a captured CUDA graph replays); each grows to the largest output
 * and scratch it ever held, and stays so.
 */
#ifndef DPTRAIN_NO_GRAD_H
#define DPTRAIN_NO_GRAD_H

#include "dptrain/autograd.h"
#include "dptrain/profile.h"

typedef struct dp_no_grad dp_no_grad_t;

/* Whether runners are wanted: DPTRAIN_FORWARD_LIVENESS=on (or unset, the
 * default: *on = 1) or off (0: every output stays in the pass's arena, as
 * before; for A/B, the same bits); another value is DP_ERR_ARG in one line
 * naming it. The trainer and the predictor ask it. */
dp_status_t dp_no_grad_wanted(int *on);
/* A runner on `backend`'s memory and ops (NULL: the CPU backend's). NULL
 * with the error set when memory runs out. */
dp_no_grad_t *dp_no_grad_new(const dp_backend_t *backend);
void dp_no_grad_free(dp_no_grad_t *ng);
/* Its ops are timed by `profiler` (profile.h; NULL: not timed). */
void dp_no_grad_set_profiler(dp_no_grad_t *ng, dp_profiler_t *profiler);
/* What its forwards took: the pool arenas made (returned) and the most
 * bytes one forward held in all its arenas together, the kept one
 * included (*bytes; may be NULL). */
int dp_no_grad_memory(const dp_no_grad_t *ng, size_t *bytes);

#endif
