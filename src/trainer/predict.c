/* predict.c - inference on k devices (predict.h).
 *
 * DESIGN. Every device holds its own copy of the parameters in its
 * backend's memory (uploaded once; inference never updates batch norm's
 * statistics), and an arena (device memory), a tape and a no-grad runner
 * (no_grad.h: a layer's output is given back once its last reader has run)
 * that only tasks on that device touch. Inputs go to the device and logits come back through
 * the device API (dp_device_upload/download), as in the trainer. A
 * call fills one task per device (its shard of x and of logits, disjoint),
 * submits them and waits for all (dp_waitall); the caller's buffers are not
 * touched by anyone once it returns. A shard larger than the model's
 * inference cap (nn.h dp_model_inference_batch_cap) runs as several
 * forwards, so that memory does not grow with the batch.
 */
#include "dptrain/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/device.h"
#include "dptrain/no_grad.h"
#include "dptrain/parallel.h"

typedef struct {
    dp_predictor_t *owner;
    dp_device_t *device;
    dp_arena_t *arena;
    dp_tape_t *tape;
    dp_no_grad_t *no_grad; /* the forward's layers, in memory their outputs leave as they die (no_grad.h);
                              NULL with DPTRAIN_FORWARD_LIVENESS=off */
    float *params;  /* (num_params) device memory */
    const float *x; /* (count, C, H, W): this shard */
    float *logits;  /* (count, classes) */
    int count;
    int forwards;   /* made by the last run */
} shard_t;

struct dp_predictor {
    const dp_model_t *model;
    int num_devices;
    shard_t *shards;
    dp_device_t **devices;
    int forward_cap; /* 0: the model's inference cap */
};

void dp_predictor_free(dp_predictor_t *p) {
    if (!p) return;
    for (int d = 0; d < p->num_devices; d++) {
        shard_t *s = &p->shards[d];
        if (s->device) dp_device_wait(s->device);
        dp_tape_free(s->tape);
        dp_no_grad_free(s->no_grad);
        dp_arena_free(s->arena);
        if (s->device) dp_device_free_memory(s->device, s->params);
        dp_device_free(s->device);
    }
    free(p->shards);
    free(p->devices);
    free(p);
}

dp_status_t dp_predictor_new(const dp_model_t *model, const float *params, int num_devices,
                             dp_predictor_t **out) {
    *out = NULL;
    if (!model || !params)
        return dp_fail(DP_ERR_ARG, "predict: no %s given (NULL)", !model ? "model" : "parameters");
    if (num_devices < 1) return dp_fail(DP_ERR_ARG, "predict: %d devices (at least 1)", num_devices);
    int forward_live;
    DP_TRY(dp_no_grad_wanted(&forward_live));
    dp_predictor_t *p = dp_alloc_zeroed(1, sizeof *p, "predictor");
    if (!p) return DP_ERR_NOMEM;
    p->model = model;
    size_t n = dp_model_num_params(model);
    p->shards = dp_alloc_zeroed((size_t)num_devices, sizeof *p->shards, "predictor shards");
    p->devices = dp_alloc_zeroed((size_t)num_devices, sizeof *p->devices, "predictor devices");
    if (!p->shards || !p->devices) {
        dp_predictor_free(p);
        return DP_ERR_NOMEM;
    }
    for (int d = 0; d < num_devices; d++) {
        shard_t *s = &p->shards[d];
        p->num_devices = d + 1; /* what free must release */
        s->owner = p;
        dp_status_t st = dp_device_new(d, -1, &s->device);
        if (st != DP_OK) {
            dp_predictor_free(p);
            return st;
        }
        p->devices[d] = s->device;
        const dp_backend_t *backend = dp_device_backend(s->device);
        s->params = dp_device_alloc(s->device, sizeof(float) * (n ? n : 1), "predictor parameters");
        if (s->params) dp_device_upload(s->device, s->params, params, sizeof(float) * n);
        s->arena = s->params ? dp_arena_new_on(backend, (size_t)1 << 22) : NULL;
        s->tape = s->arena ? dp_tape_new_on(backend, s->arena) : NULL;
        s->no_grad = s->tape && forward_live ? dp_no_grad_new(backend) : NULL;
        if (!s->tape || (forward_live && !s->no_grad)) {
            dp_predictor_free(p);
            return dp_fail(DP_ERR_NOMEM, "predict: out of memory for device %d's scratch memory", d);
        }
    }
    *out = p;
    return DP_OK;
}

/* One forward of `count` inputs of the shard from `first` on. */
static dp_status_t run_chunk(shard_t *s, int first, int count) {
    const dp_model_t *m = s->owner->model;
    dp_arena_reset(s->arena);
    dp_tape_reset(s->tape);
    int c, h, w;
    dp_model_input_shape(m, &c, &h, &w);
    int shape[4] = {count, c, h, w};
    dp_tensor_t *x = dp_tape_tensor(s->tape, 4, shape);
    if (!x) return DP_ERR_NOMEM;
    size_t numel = dp_tensor_numel(x);
    x->data = dp_arena_floats(s->arena, numel);
    if (!x->data) return dp_fail(DP_ERR_NOMEM, "predict: out of memory for a batch of %d inputs", count);
    dp_device_upload(s->device, x->data, s->x + (size_t)first * (numel / (size_t)count), sizeof(float) * numel);
    dp_tensor_t *logits;
    dp_forward_opts_t opts = {.no_grad = s->no_grad};
    DP_TRY(dp_model_forward_opts(m, s->tape, s->params, NULL, x, &opts, &logits));
    size_t classes = (size_t)dp_model_num_outputs(m);
    if (dp_tensor_numel(logits) != (size_t)count * classes)
        return dp_fail(DP_ERR_SHAPE, "predict: model %s gives %zu outputs for %d inputs, expected %zu each",
                       dp_model_name(m), dp_tensor_numel(logits), count, classes);
    dp_device_download(s->device, s->logits + (size_t)first * classes, logits->data,
                       sizeof(float) * (size_t)count * classes);
    return DP_OK;
}

/* The shard in forwards of at most the model's inference cap (nn.h),
 * counted as if one forward held every layer's output (ResNet-18 at 224 x
 * 224: 32 MB an image from their shapes, so 16 images a forward); the
 * runner holds a few of them at a time, so memory stays well under it,
 * whatever the batch. */
static dp_status_t run_shard(void *arg) {
    shard_t *s = arg;
    const int cap = s->owner->forward_cap > 0 ? s->owner->forward_cap
                                              : dp_model_inference_batch_cap(s->owner->model, DP_INFERENCE_ARENA_BYTES);
    for (int first = 0; first < s->count; first += cap, s->forwards++)
        DP_TRY(run_chunk(s, first, s->count - first < cap ? s->count - first : cap));
    return DP_OK;
}

void dp_predictor_set_forward_cap(dp_predictor_t *p, int examples) { p->forward_cap = examples > 0 ? examples : 0; }

int dp_predictor_last_forwards(const dp_predictor_t *p) {
    int n = 0;
    for (int d = 0; d < p->num_devices; d++) n += p->shards[d].forwards;
    return n;
}

dp_status_t dp_predictor_run(dp_predictor_t *p, const float *x, int n, float *logits) {
    if (n < 1) return dp_fail(DP_ERR_ARG, "predict: %d inputs (at least 1)", n);
    if (!x || !logits) return dp_fail(DP_ERR_ARG, "predict: no %s given (NULL)", !x ? "inputs" : "logits buffer");
    int c, h, w;
    dp_model_input_shape(p->model, &c, &h, &w);
    size_t example = (size_t)c * h * w, classes = (size_t)dp_model_num_outputs(p->model);
    int used = 0;
    for (int d = 0; d < p->num_devices; d++) p->shards[d].forwards = 0;
    for (int d = 0; d < p->num_devices; d++) {
        int start, count;
        dp_split_batch(n, p->num_devices, d, &start, &count);
        if (count == 0) continue;
        shard_t *s = &p->shards[d];
        s->x = x + (size_t)start * example;
        s->logits = logits + (size_t)start * classes;
        s->count = count;
        if (dp_device_submit(s->device, run_shard, s) != DP_OK) {
            /* let the shards already queued finish before the caller's buffers go */
            char message[1024];
            snprintf(message, sizeof message, "%s", dp_error_message());
            dp_waitall(p->devices, used);
            return dp_fail(DP_ERR_NOMEM, "%s", message);
        }
        used = d + 1;
    }
    return dp_waitall(p->devices, used);
}

void dp_softmax(const float *logits, int count, float *probs) {
    float max = logits[0];
    for (int i = 1; i < count; i++)
        if (logits[i] > max) max = logits[i];
    double total = 0;
    for (int i = 0; i < count; i++) total += exp((double)logits[i] - max);
    for (int i = 0; i < count; i++) probs[i] = (float)(exp((double)logits[i] - max) / total);
}
