/* torchvision_step.c - a helper of tests/cli_torchvision.sh (not a test by
 * itself): runs a model file's network with a checkpoint's weights on given
 * inputs and writes what tests/torchvision_check.py compares with
 * torchvision.
 *
 * usage: torchvision_step MODEL.cfg CHECKPOINT.safetensors INPUT.safetensors OUT.safetensors
 *
 * INPUT holds "x" (N, C, H, W) and "labels" (N, class indices as floats).
 * OUT gets, all float32, on the CPU backend (one thread):
 *   eval.logits           inference: batch norm's running statistics
 *   eval.loss             softmax cross-entropy, mean over the batch (1)
 *   eval.grad.NAME        the loss's gradient of every trainable parameter,
 *                         batch norm in inference mode (a frozen backbone's)
 *   train.logits, train.loss, train.grad.NAME
 *                         the same in training mode: batch statistics
 *                         (dropout as the model file says: the check gives
 *                         p = 0)
 *   train.running.NAME    every buffer (running_mean, running_var) after the
 *                         training forward updated it
 * Exits 1 with one line on stderr on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/autograd.h"
#include "dptrain/checkpoint.h"
#include "dptrain/model_file.h"

#define MAX_OUT 2048

typedef struct {
    dp_st_tensor_t tensors[MAX_OUT];
    char *names[MAX_OUT];
    float *data[MAX_OUT];
    int count;
} out_t;

/* Appends a copy of n floats under "PREFIX" or "PREFIX.NAME" with the given shape. */
static int add_out(out_t *o, const char *prefix, const char *name, int ndim, const int64_t *shape, const float *v,
                   size_t n) {
    if (o->count == MAX_OUT) return dp_fail(DP_ERR_ARG, "torchvision_step: more than %d outputs", MAX_OUT);
    size_t len = strlen(prefix) + (name ? strlen(name) + 1 : 0) + 1;
    char *full = malloc(len);
    float *copy = malloc(sizeof(float) * (n ? n : 1));
    if (!full || !copy) {
        free(full);
        free(copy);
        return dp_fail(DP_ERR_NOMEM, "torchvision_step: out of memory");
    }
    snprintf(full, len, name ? "%s.%s" : "%s", prefix, name);
    memcpy(copy, v, sizeof(float) * n);
    dp_st_tensor_t *t = &o->tensors[o->count];
    t->name = full;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = copy;
    o->names[o->count] = full;
    o->data[o->count++] = copy;
    return DP_OK;
}

static int add_param_out(out_t *o, const char *prefix, const dp_param_info_t *p, const float *v) {
    int64_t shape[DP_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    return add_out(o, prefix, p->name, p->ndim, shape, v, p->numel);
}

/* One pass: forward (training or inference behaviour), the loss, backward;
 * writes MODE.logits, MODE.loss, MODE.grad.* and (training) MODE.running.*. */
static dp_status_t pass(const dp_model_t *m, const float *params0, float *x, int n, const int *xshape,
                        const int32_t *labels, int training, out_t *o) {
    const char *mode = training ? "train" : "eval";
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np), *grads = calloc(np, sizeof(float));
    dp_arena_t *arena = dp_arena_new(1 << 24);
    dp_tape_t *tape = arena ? dp_tape_new(arena) : NULL;
    dp_status_t status = params && grads && tape ? DP_OK : dp_fail(DP_ERR_NOMEM, "torchvision_step: out of memory");
    dp_tensor_t *input = status == DP_OK ? dp_tape_tensor(tape, 4, xshape) : NULL, *logits = NULL, *loss = NULL;
    if (status == DP_OK) {
        memcpy(params, params0, sizeof(float) * np);
        input->data = x;
        dp_forward_opts_t opts = {.training = training};
        status = dp_model_forward_opts(m, tape, params, grads, input, &opts, &logits);
    }
    if (status == DP_OK) {
        dp_op_attr_t attr = dp_op_attr_default(); /* loss_denominator 0: the mean over the batch */
        loss = dp_tape_op(tape, DP_OP_SOFTMAX_XENT, &attr, logits, NULL, NULL, labels);
        if (!loss) status = dp_error_status() != DP_OK ? dp_error_status() : DP_ERR_ARG;
    }
    if (status == DP_OK) status = dp_tape_backward(tape, loss, NULL, NULL);
    char prefix[64];
    if (status == DP_OK) {
        int64_t lshape[2] = {n, dp_model_num_outputs(m)}, one = 1;
        snprintf(prefix, sizeof prefix, "%s.logits", mode);
        status = add_out(o, prefix, NULL, 2, lshape, logits->data, (size_t)lshape[0] * lshape[1]);
        snprintf(prefix, sizeof prefix, "%s.loss", mode);
        if (status == DP_OK) status = add_out(o, prefix, NULL, 1, &one, loss->data, 1);
    }
    for (int i = 0; status == DP_OK && i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        if (p->trainable) {
            snprintf(prefix, sizeof prefix, "%s.grad", mode);
            status = add_param_out(o, prefix, p, grads + p->offset);
        } else if (training) {
            snprintf(prefix, sizeof prefix, "%s.running", mode);
            status = add_param_out(o, prefix, p, params + p->offset);
        }
    }
    dp_tape_free(tape);
    dp_arena_free(arena);
    free(params);
    free(grads);
    return status;
}

static dp_status_t run(char **argv, out_t *o) {
    dp_model_t *m = NULL;
    dp_checkpoint_t *c = NULL;
    dp_safetensors_t *in = NULL;
    float *params = NULL, *x = NULL, *label_values = NULL;
    int32_t *labels = NULL;
    dp_status_t status = dp_model_load_file(argv[1], &m);
    if (status == DP_OK) status = dp_checkpoint_open(argv[2], &c);
    if (status == DP_OK && !(params = malloc(sizeof(float) * dp_model_num_params(m))))
        status = dp_fail(DP_ERR_NOMEM, "torchvision_step: out of memory");
    if (status == DP_OK) status = dp_checkpoint_load_params(c, m, params);
    if (status == DP_OK) status = dp_safetensors_read(argv[3], &in);
    const dp_st_entry_t *ex = in ? dp_safetensors_find(in, "x") : NULL;
    const dp_st_entry_t *el = in ? dp_safetensors_find(in, "labels") : NULL;
    int ch = 0, h = 0, w = 0;
    if (status == DP_OK) dp_model_input_shape(m, &ch, &h, &w);
    if (status == DP_OK && (!ex || !el || ex->ndim != 4 || el->ndim != 1 || el->shape[0] != ex->shape[0] ||
                            ex->shape[1] != ch || ex->shape[2] != h || ex->shape[3] != w))
        status = dp_fail(DP_ERR_FORMAT, "%s: needs x (N, %d, %d, %d) and labels (N)", argv[3], ch, h, w);
    int n = status == DP_OK ? (int)ex->shape[0] : 0;
    if (status == DP_OK && (!(x = malloc(sizeof(float) * ex->numel)) || !(label_values = malloc(sizeof(float) * n)) ||
                            !(labels = malloc(sizeof(int32_t) * n))))
        status = dp_fail(DP_ERR_NOMEM, "torchvision_step: out of memory");
    if (status == DP_OK) {
        dp_safetensors_copy(ex, x);
        dp_safetensors_copy(el, label_values);
        for (int i = 0; i < n; i++) labels[i] = (int32_t)label_values[i];
        int xshape[4] = {n, ch, h, w};
        status = pass(m, params, x, n, xshape, labels, 0, o);
        if (status == DP_OK) status = pass(m, params, x, n, xshape, labels, 1, o);
    }
    if (status == DP_OK) status = dp_safetensors_write(argv[4], o->tensors, o->count, NULL, 0);
    free(labels);
    free(label_values);
    free(x);
    free(params);
    dp_safetensors_free(in);
    dp_checkpoint_close(c);
    dp_model_free(m);
    return status;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: torchvision_step MODEL.cfg CHECKPOINT.safetensors INPUT.safetensors OUT.safetensors\n");
        return 2;
    }
    static out_t o;
    dp_status_t status = run(argv, &o);
    for (int i = 0; i < o.count; i++) {
        free(o.names[i]);
        free(o.data[i]);
    }
    if (status != DP_OK) {
        fprintf(stderr, "torchvision_step: %s\n", dp_error_message());
        return 1;
    }
    return 0;
}
