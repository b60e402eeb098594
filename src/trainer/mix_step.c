/* mix_step.c - Mixup and CutMix inside a training step (batch_mix.h).
 *
 * The step's draw depends on (seed, step) alone, so every rank draws the
 * same. Each example's partner is the previous example of the step's
 * whole batch: this rank's loader also filled the partners of its
 * positions (dp_trainer_batch_share), so the host buffers here hold, at
 * this rank's positions, what its devices read: the partners' labels,
 * Mixup's partner bytes (the devices convert them to input and blend,
 * through the backend's ema_update: torch's mul_ and add_ roundings), and
 * CutMix's boxed bytes (whole bytes: the box is a copy). The loss is two
 * cross-entropy terms on the same logits, each divided by the batch's
 * denominator over its weight, added: backward adds their gradients into
 * the logits' gradient.
 */
#include "mix_step.h"

#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"

void dp_mix_step_free(dp_trainer_t *t) {
    free(t->mix_own);
    free(t->mix_partner);
    free(t->mix_labels);
    t->mix_own = t->mix_partner = NULL;
    t->mix_labels = NULL;
    t->mix_cap = 0;
}

/* Host room for a batch of n examples of `example` bytes. */
static dp_status_t reserve(dp_trainer_t *t, int n, size_t example) {
    if ((size_t)n <= t->mix_cap && example == t->mix_example_bytes) return DP_OK;
    dp_mix_step_free(t);
    t->mix_own = dp_alloc((size_t)n * example + 1, "CutMix's bytes of a batch");
    t->mix_partner = t->mix_own ? dp_alloc((size_t)n * example + 1, "Mixup's partner bytes of a batch") : NULL;
    t->mix_labels = t->mix_partner ? dp_alloc(sizeof(int32_t) * (size_t)n + 1, "the partners' labels") : NULL;
    if (!t->mix_labels) {
        dp_mix_step_free(t);
        return DP_ERR_NOMEM;
    }
    t->mix_cap = (size_t)n;
    t->mix_example_bytes = example;
    return DP_OK;
}

/* Example i (a position of this rank) with its partner j. */
static void mix_example(dp_trainer_t *t, const dp_batch_t *batch, int i, size_t example) {
    const int j = dp_mix_partner(i, batch->n);
    t->mix_labels[i] = batch->labels[j];
    const uint8_t *own = batch->pixels + (size_t)i * example, *partner = batch->pixels + (size_t)j * example;
    if (t->mix.kind == DP_MIX_MIXUP)
        memcpy(t->mix_partner + (size_t)i * example, partner, example);
    else
        dp_mix_cutmix_bytes(&t->mix, t->mix_own + (size_t)i * example, own, partner, batch->channels, batch->height,
                            batch->width);
}

dp_status_t dp_mix_step_prepare(dp_trainer_t *t, const dp_batch_t *batch, int micros, const dp_batch_t **own,
                                const dp_batch_t **partners) {
    *own = batch;
    *partners = NULL;
    t->mix = dp_mix_draw(&t->config.mix, t->config.seed, t->step_count, batch->height, batch->width);
    if (t->mix.kind == DP_MIX_NONE) return DP_OK;
    const size_t example = (size_t)batch->channels * batch->height * batch->width;
    DP_TRY(reserve(t, batch->n, example));
    for (int m = 0; m < micros; m++)
        for (int d = 0; d < t->num_devices; d++) {
            int first, count;
            dp_trainer_step_shard(t, batch->n, micros, m, d, &first, &count);
            for (int i = first; i < first + count; i++) mix_example(t, batch, i, example);
        }
    t->mix_partner_batch = *batch;
    t->mix_partner_batch.pixels = t->mix.kind == DP_MIX_MIXUP ? t->mix_partner : NULL;
    t->mix_partner_batch.labels = t->mix_labels;
    *partners = &t->mix_partner_batch;
    if (t->mix.kind == DP_MIX_CUTMIX) {
        t->mix_own_batch = *batch;
        t->mix_own_batch.pixels = t->mix_own;
        *own = &t->mix_own_batch;
    }
    return DP_OK;
}

dp_status_t dp_mix_blend_input(dp_replica_t *r, dp_tensor_t *x) {
    const dp_trainer_t *t = r->trainer;
    if (t->mix.kind != DP_MIX_MIXUP) return DP_OK;
    const size_t numel = dp_tensor_numel(x);
    float *partner = dp_arena_floats(r->arena, numel); /* (n, C, H, W) the partners' input */
    if (!partner) return DP_ERR_NOMEM;
    const dp_backend_t *be = r->backend;
    be->input_from_bytes(be->ctx, partner, r->partner_pixels, x->shape[0], x->shape[1],
                         (size_t)x->shape[2] * x->shape[3], r->batch->normalize);
    /* torchvision: batch.mul_(lam).add_(batch_rolled.mul_(1.0 - lam)), each factor a float */
    be->ema_update(be->ctx, x->data, partner, (float)t->mix.lam, (float)(1.0 - t->mix.lam), numel);
    return be->failure ? be->failure(be->ctx) : DP_OK;
}

/* One weighted cross-entropy term: attr's, its denominator over `weight`. */
static dp_tensor_t *loss_term(dp_replica_t *r, dp_tensor_t *logits, const int32_t *labels, const dp_op_attr_t *attr,
                              double weight, const char *label) {
    dp_op_attr_t term = *attr;
    term.loss_denominator = (float)((double)attr->loss_denominator / weight);
    dp_tape_set_label(r->tape, label, NULL);
    return dp_tape_op(r->tape, DP_OP_SOFTMAX_XENT, &term, logits, NULL, NULL, labels);
}

dp_tensor_t *dp_mix_loss(dp_replica_t *r, dp_tensor_t *logits, const int32_t *y, const dp_op_attr_t *attr,
                         const int32_t **accuracy_labels) {
    const dp_mix_t *mix = &r->trainer->mix;
    *accuracy_labels = y;
    if (mix->kind == DP_MIX_NONE) {
        dp_tape_set_label(r->tape, "loss", NULL);
        return dp_tape_op(r->tape, DP_OP_SOFTMAX_XENT, attr, logits, NULL, NULL, y);
    }
    if (mix->lam < 0.5) *accuracy_labels = r->partner_labels;
    if (mix->lam >= 1.0) return loss_term(r, logits, y, attr, 1.0, "loss");
    if (mix->lam <= 0.0) return loss_term(r, logits, r->partner_labels, attr, 1.0, "loss");
    dp_tensor_t *own = loss_term(r, logits, y, attr, mix->lam, "loss (own labels)");
    dp_tensor_t *partner = own ? loss_term(r, logits, r->partner_labels, attr, 1.0 - mix->lam, "loss (partners')")
                               : NULL;
    if (!partner) return NULL;
    dp_op_attr_t add = dp_op_attr_default();
    dp_tape_set_label(r->tape, "loss", NULL);
    return dp_tape_op(r->tape, DP_OP_ADD, &add, own, partner, NULL, NULL);
}
