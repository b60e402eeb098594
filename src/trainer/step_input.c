/* step_input.c - a training step's input as the devices see it: random
 * erasing (random_erase.h), Mixup and CutMix (batch_mix.h).
 *
 * Every draw depends on (seed, step) and the position in the step's whole
 * batch alone, so every rank and device draws the same. Each example's
 * partner is the previous example of the whole batch: this rank's loader
 * also filled the partners of its positions (dp_trainer_batch_share), and
 * the host buffers here hold, at this rank's positions, what its devices
 * read: the partners' bytes and labels, each example's erasing box and its
 * partner's, CutMix's box. On the device (dp_step_input_transform) the
 * order is torchvision's: every example erased first (its own box), then
 * the batch mixed: Mixup blends through the backend's ema_update (torch's
 * mul_ and add_ roundings), CutMix pastes with paste_boxes (copies). The
 * loss is two cross-entropy terms on the same logits, each divided by the
 * batch's denominator over its weight, added: backward adds their
 * gradients into the logits' gradient.
 */
#include "step_input.h"

#include <stdlib.h>
#include <string.h>

#include "dptrain/ops.h"
#include "dptrain/random_erase.h"

void dp_step_input_free(dp_trainer_t *t) {
    free(t->mix_partner);
    free(t->mix_labels);
    free(t->input_boxes);
    t->mix_partner = NULL;
    t->mix_labels = NULL;
    t->input_boxes = NULL;
    t->mix_cap = 0;
}

int dp_step_input_on(const dp_trainer_t *t) { return dp_mix_on(&t->config.mix) || t->config.random_erase > 0.0f; }

/* Host room for a batch of n examples of `example` bytes: the partners'
 * bytes and labels only when the run mixes (erasing alone needs boxes). */
static dp_status_t reserve(dp_trainer_t *t, int n, size_t example) {
    if ((size_t)n <= t->mix_cap && example == t->mix_example_bytes) return DP_OK;
    dp_step_input_free(t);
    const size_t mixed = dp_mix_on(&t->config.mix) ? (size_t)n : 0;
    t->mix_partner = dp_alloc(mixed * example + 1, "the partners' bytes of a batch");
    t->mix_labels = t->mix_partner ? dp_alloc(sizeof(int32_t) * mixed + 1, "the partners' labels") : NULL;
    t->input_boxes = t->mix_labels ? dp_alloc(sizeof(int32_t) * 12 * (size_t)n, "a batch's erasing and CutMix boxes")
                                   : NULL;
    if (!t->input_boxes) {
        dp_step_input_free(t);
        return DP_ERR_NOMEM;
    }
    t->mix_cap = (size_t)n;
    t->mix_example_bytes = example;
    return DP_OK;
}

/* Example i (a position of this rank): its boxes (its erasing, its
 * partner's, CutMix's) and, when mixing, its partner j's bytes and label. */
static void prepare_example(dp_trainer_t *t, const dp_batch_t *batch, int i, size_t example) {
    const int j = dp_mix_partner(i, batch->n);
    const size_t plane = 4 * t->mix_cap; /* one kind of box for the whole batch */
    int32_t *boxes = t->input_boxes + 4 * (size_t)i;
    const float p = t->config.random_erase;
    dp_random_erase_box(p, t->config.seed, t->step_count, i, batch->height, batch->width, boxes);
    dp_random_erase_box(p, t->config.seed, t->step_count, j, batch->height, batch->width, boxes + plane);
    const int cut = t->mix.kind == DP_MIX_CUTMIX;
    const int32_t cutmix[4] = {cut ? t->mix.y1 : 0, cut ? t->mix.y2 : 0, cut ? t->mix.x1 : 0, cut ? t->mix.x2 : 0};
    memcpy(boxes + 2 * plane, cutmix, sizeof cutmix);
    if (t->mix.kind == DP_MIX_NONE) return;
    t->mix_labels[i] = batch->labels[j];
    memcpy(t->mix_partner + (size_t)i * example, batch->pixels + (size_t)j * example, example);
}

dp_status_t dp_step_input_prepare(dp_trainer_t *t, const dp_batch_t *batch, int micros, const dp_batch_t **partners) {
    *partners = NULL;
    t->mix = dp_mix_draw(&t->config.mix, t->config.seed, t->step_count, batch->height, batch->width);
    if (!dp_step_input_on(t)) return DP_OK;
    const size_t example = (size_t)batch->channels * batch->height * batch->width;
    DP_TRY(reserve(t, batch->n, example));
    for (int m = 0; m < micros; m++)
        for (int d = 0; d < t->num_devices; d++) {
            int first, count;
            dp_trainer_step_shard(t, batch->n, micros, m, d, &first, &count);
            for (int i = first; i < first + count; i++) prepare_example(t, batch, i, example);
        }
    if (t->mix.kind == DP_MIX_NONE) return DP_OK;
    t->mix_partner_batch = *batch;
    t->mix_partner_batch.pixels = t->mix_partner;
    t->mix_partner_batch.labels = t->mix_labels;
    *partners = &t->mix_partner_batch;
    return DP_OK;
}

/* The shard's boxes `which` (0: its erasing, 1: its partners' erasing, 2:
 * CutMix's; (count, 4) int32) in the backend's memory: the host buffer
 * itself, or uploaded into the step's arena. NULL: out of memory. */
static const int32_t *shard_boxes(dp_replica_t *r, int which) {
    const dp_trainer_t *t = r->trainer;
    const int32_t *host = t->input_boxes + 4 * (which * t->mix_cap + (size_t)r->example_offset);
    if (r->backend->host_memory) return host;
    const size_t bytes = sizeof(int32_t) * 4 * (size_t)r->count;
    int32_t *boxes = (int32_t *)dp_arena_floats(r->arena, 4 * (size_t)r->count); /* int32: a float's size */
    if (boxes) r->backend->upload(r->backend->ctx, boxes, host, bytes);
    return boxes;
}

/* Erasing (src NULL) or CutMix's paste of the shard's boxes `which` in x. */
static dp_status_t paste(dp_replica_t *r, dp_tensor_t *x, const float *src, int which) {
    const int32_t *boxes = shard_boxes(r, which);
    if (!boxes) return DP_ERR_NOMEM;
    const dp_backend_t *be = r->backend;
    be->paste_boxes(be->ctx, x->data, src, x->shape[0], x->shape[1], x->shape[2], x->shape[3], boxes);
    return DP_OK;
}

dp_status_t dp_step_input_transform(dp_replica_t *r, dp_tensor_t *x) {
    const dp_trainer_t *t = r->trainer;
    if (!dp_step_input_on(t)) return DP_OK;
    const dp_backend_t *be = r->backend;
    const int erase = t->config.random_erase > 0.0f;
    if (erase) DP_TRY(paste(r, x, NULL, 0));
    if (t->mix.kind != DP_MIX_NONE) {
        const size_t numel = dp_tensor_numel(x);
        dp_tensor_t partner = *x; /* (n, C, H, W) the partners' input */
        partner.data = dp_arena_floats(r->arena, numel);
        if (!partner.data) return DP_ERR_NOMEM;
        be->input_from_bytes(be->ctx, partner.data, r->partner_pixels, x->shape[0], x->shape[1],
                             (size_t)x->shape[2] * x->shape[3], r->batch->normalize);
        if (erase) DP_TRY(paste(r, &partner, NULL, 1));
        if (t->mix.kind == DP_MIX_MIXUP) /* torchvision: batch.mul_(lam).add_(batch_rolled.mul_(1.0 - lam)) */
            be->ema_update(be->ctx, x->data, partner.data, (float)t->mix.lam, (float)(1.0 - t->mix.lam), numel);
        else
            DP_TRY(paste(r, x, partner.data, 2));
    }
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
