/* step_input.h - a training step's input as the devices see it: Mixup,
 * CutMix (batch_mix.h) and random erasing (random_erase.h); step_input.c's
 * entry points for trainer.c. Library internal.
 */
#ifndef DPTRAIN_STEP_INPUT_H
#define DPTRAIN_STEP_INPUT_H

#include "trainer_state.h"

/* 1 when the trainer's steps transform their input (mixing or erasing). */
int dp_step_input_on(const dp_trainer_t *t);

/* Before the step's input is staged: draws this step's mixing (t->mix)
 * and fills the host buffers at this rank's positions of the step's batch
 * of n: the partners' bytes and labels, the erasing and CutMix boxes.
 * *partners = the batch of the partners, or NULL when the step does not
 * mix. */
dp_status_t dp_step_input_prepare(dp_trainer_t *t, const dp_batch_t *batch, int micros, const dp_batch_t **partners);

/* On device r, its shard's input x (converted from its bytes): erased,
 * then blended with (Mixup) or boxed from (CutMix) its partners' input,
 * itself converted and erased as theirs; as torchvision's per-sample
 * RandomErasing and then its batch's RandomMixup or RandomCutmix. */
dp_status_t dp_step_input_transform(dp_replica_t *r, dp_tensor_t *x);

/* The shard's loss on r's tape: attr's cross-entropy against the mixed
 * targets, lam CE(y) + (1 - lam) CE(y_partner) (each term divided by
 * attr's denominator over its weight; a weight of 0 drops its term), and
 * in *accuracy_labels the labels its accuracy counts: the heavier ones
 * (lam >= 0.5: y), as torchvision's accuracy takes the mixed target's
 * largest entry. NULL on failure (dp_error_message). */
dp_tensor_t *dp_mix_loss(dp_replica_t *r, dp_tensor_t *logits, const int32_t *y, const dp_op_attr_t *attr,
                         const int32_t **accuracy_labels);

/* The host buffers. */
void dp_step_input_free(dp_trainer_t *t);

/* trainer.c: device d's shard of micro-batch `micro` of a step of n on
 * this rank: [*first, *first + *count). */
void dp_trainer_step_shard(const dp_trainer_t *t, int n, int micros, int micro, int d, int *first, int *count);

#endif
