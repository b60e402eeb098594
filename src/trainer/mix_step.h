/* mix_step.h - Mixup and CutMix inside a training step (batch_mix.h):
 * mix_step.c's entry points for trainer.c. Library internal.
 */
#ifndef DPTRAIN_MIX_STEP_H
#define DPTRAIN_MIX_STEP_H

#include "trainer_state.h"

/* Before the step's input is staged: draws this step's mixing (t->mix)
 * and, when it mixes, fills the host buffers at this rank's positions of
 * the step's batch of n: the partners' labels, Mixup's partner bytes,
 * CutMix's boxed bytes. *own = the batch whose bytes the devices read as
 * their examples (the batch itself, or CutMix's), *partners = the batch
 * of the partners (NULL: no mixing; its pixels NULL: CutMix, labels
 * only). */
dp_status_t dp_mix_step_prepare(dp_trainer_t *t, const dp_batch_t *batch, int micros, const dp_batch_t **own,
                                const dp_batch_t **partners);

/* Mixup on device r: its shard's input x = lam x + (1 - lam) x_partner,
 * the partners' bytes converted as x's were (no-op without Mixup). */
dp_status_t dp_mix_blend_input(dp_replica_t *r, dp_tensor_t *x);

/* The shard's loss on r's tape: attr's cross-entropy against the mixed
 * targets, lam CE(y) + (1 - lam) CE(y_partner) (each term divided by
 * attr's denominator over its weight; a weight of 0 drops its term), and
 * in *accuracy_labels the labels its accuracy counts (batch_mix.h
 * dp_mix_accuracy_label). NULL on failure (dp_error_message). */
dp_tensor_t *dp_mix_loss(dp_replica_t *r, dp_tensor_t *logits, const int32_t *y, const dp_op_attr_t *attr,
                         const int32_t **accuracy_labels);

/* The host buffers. */
void dp_mix_step_free(dp_trainer_t *t);

/* trainer.c: device d's shard of micro-batch `micro` of a step of n on
 * this rank: [*first, *first + *count). */
void dp_trainer_step_shard(const dp_trainer_t *t, int n, int micros, int micro, int d, int *first, int *count);

#endif
