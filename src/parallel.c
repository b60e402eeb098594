/* parallel.c - the data-parallel trainer. Replicas (params, grads, arena,
 * tape, optimizer) are kept per device; a step splits the batch, runs
 * forward/backward per replica, sums the gradients and updates every
 * replica with the same reduced gradient. */
#include "dptrain/parallel.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *params; /* (num_params) this replica's copy of the parameters */
    float *grads;  /* (num_params) gradient of the global mean loss, this shard's part */
    dp_arena_t *arena;
    dp_tape_t *tape;
    dp_optimizer_t *optimizer;
} replica_t;

struct dp_trainer {
    dp_trainer_config_t config;
    const dp_model_t *model;
    size_t num_params;
    int num_devices;
    replica_t *replicas;
    char device_names[256];
};

void dp_blas_set_threads(int threads) { openblas_set_num_threads(threads); }

void dp_split_batch(int n, int k, int d, int *start, int *count) {
    int base = n / k, extra = n % k;
    *count = base + (d < extra ? 1 : 0);
    *start = d * base + (d < extra ? d : extra);
}

static void replica_free(replica_t *r) {
    free(r->params);
    free(r->grads);
    dp_tape_free(r->tape);
    dp_arena_free(r->arena);
    dp_optimizer_free(r->optimizer);
}

void dp_trainer_free(dp_trainer_t *t) {
    if (!t) return;
    for (int d = 0; t->replicas && d < t->num_devices; d++) replica_free(&t->replicas[d]);
    free(t->replicas);
    free(t);
}

dp_status_t dp_trainer_new(const dp_trainer_config_t *config, dp_trainer_t **out) {
    *out = NULL;
    if (config->num_devices < 1)
        return dp_fail(DP_ERR_ARG, "number of devices must be >= 1, found %d", config->num_devices);
    if (config->threads_per_device < 1)
        return dp_fail(DP_ERR_ARG, "threads per device must be >= 1, found %d",
                       config->threads_per_device);
    dp_status_t status = DP_ERR_NOMEM;
    dp_trainer_t *t = dp_alloc_zeroed(1, sizeof *t, "trainer");
    if (!t) return DP_ERR_NOMEM;
    t->config = *config;
    t->model = config->model;
    t->num_params = dp_model_num_params(config->model);
    t->num_devices = config->num_devices;
    t->replicas = dp_alloc_zeroed((size_t)t->num_devices, sizeof *t->replicas, "replicas");
    if (!t->replicas) goto fail;

    size_t used = 0;
    for (int d = 0; d < t->num_devices && used < sizeof t->device_names; d++)
        used += (size_t)snprintf(t->device_names + used, sizeof t->device_names - used,
                                 d ? ",cpu:%d" : "cpu:%d", d);

    /* get_params: initialise once, copy onto every device. */
    for (int d = 0; d < t->num_devices; d++) {
        replica_t *r = &t->replicas[d];
        r->params = dp_alloc_aligned(sizeof(float) * t->num_params, "parameters");
        r->grads = dp_alloc_aligned(sizeof(float) * t->num_params, "gradients");
        r->arena = dp_arena_new((size_t)1 << 24);
        r->tape = r->arena ? dp_tape_new(r->arena) : NULL;
        if (!r->params || !r->grads || !r->tape) goto fail;
        status = dp_optimizer_new(&config->optim, t->num_params, &r->optimizer);
        if (status != DP_OK) goto fail;
        status = DP_ERR_NOMEM;
        if (d == 0) {
            dp_rng_t rng;
            dp_rng_seed(&rng, config->seed);
            dp_model_init_params(t->model, r->params, &rng);
        } else {
            memcpy(r->params, t->replicas[0].params, sizeof(float) * t->num_params);
        }
    }
    dp_blas_set_threads(config->threads_per_device);
    *out = t;
    return DP_OK;
fail:
    dp_trainer_free(t);
    return status;
}

float *dp_trainer_params(dp_trainer_t *t, int device) {
    DP_ASSERT(device >= 0 && device < t->num_devices);
    return t->replicas[device].params;
}

int dp_trainer_num_devices(const dp_trainer_t *t) { return t->num_devices; }
const char *dp_trainer_device_names(const dp_trainer_t *t) { return t->device_names; }

/* Rows of logits (n, k) whose largest entry is at the label. */
static int count_correct(const float *logits, const int32_t *labels, int n, int k) {
    int correct = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        correct += best == labels[i];
    }
    return correct;
}

/* Loads the examples indices[0..n) into the replica's arena as a batch. */
static dp_status_t load_shard(replica_t *r, const dp_dataset_t *ds, const int *indices, int n,
                              dp_tensor_t **x, int32_t **y) {
    int shape[4] = {n, ds->channels, ds->height, ds->width};
    *x = dp_tape_tensor(r->tape, 4, shape);
    if (!*x) return DP_ERR_NOMEM;
    (*x)->data = dp_arena_floats(r->arena, dp_tensor_numel(*x));
    *y = dp_arena_alloc(r->arena, sizeof(int32_t) * (size_t)n);
    if (!(*x)->data || !*y) return DP_ERR_NOMEM;
    dp_dataset_fill(ds, indices, n, (*x)->data, *y);
    return DP_OK;
}

/* Forward and backward of one shard on one replica (d2l's per-GPU part of
 * train_batch). `denominator` is the global batch size. */
static dp_status_t shard_forward_backward(dp_trainer_t *t, replica_t *r, const dp_dataset_t *ds,
                                          const int *indices, int n, int denominator,
                                          double *loss_sum, int *correct) {
    dp_arena_reset(r->arena);
    dp_tape_reset(r->tape);
    memset(r->grads, 0, sizeof(float) * t->num_params);
    dp_tensor_t *x, *logits, *loss;
    int32_t *y;
    DP_TRY(load_shard(r, ds, indices, n, &x, &y));
    DP_TRY(dp_model_forward(t->model, r->tape, r->params, r->grads, x, &logits));
    dp_op_attr_t attr = dp_op_attr_default();
    attr.loss_denominator = (float)denominator;
    loss = dp_tape_op(r->tape, DP_OP_SOFTMAX_XENT, &attr, logits, NULL, NULL, y);
    if (!loss) return DP_ERR_ARG;
    *loss_sum = (double)loss->data[0] * denominator;
    *correct = count_correct(logits->data, y, n, logits->shape[1]);
    return dp_tape_backward(r->tape, loss, NULL, NULL);
}

/* The seeds' allreduce: sum onto replica 0, copy back to all. */
static void allreduce_naive(dp_trainer_t *t) {
    float *sum = t->replicas[0].grads;
    for (int d = 1; d < t->num_devices; d++) {
        const float *g = t->replicas[d].grads;
        for (size_t i = 0; i < t->num_params; i++) sum[i] += g[i];
    }
    for (int d = 1; d < t->num_devices; d++)
        memcpy(t->replicas[d].grads, sum, sizeof(float) * t->num_params);
}

dp_status_t dp_trainer_step(dp_trainer_t *t, const dp_dataset_t *ds, const int *indices, int n,
                            double *loss_sum, int *correct) {
    int k = t->num_devices;
    if (n < k)
        return dp_fail(DP_ERR_ARG, "a batch of %d examples cannot be split across %d devices "
                       "(the batch size must be at least the number of devices)", n, k);
    double total_loss = 0.0;
    int total_correct = 0;
    for (int d = 0; d < k; d++) {
        int start, count;
        dp_split_batch(n, k, d, &start, &count);
        double shard_loss;
        int shard_correct;
        DP_TRY(shard_forward_backward(t, &t->replicas[d], ds, indices + start, count, n,
                                      &shard_loss, &shard_correct));
        total_loss += shard_loss;
        total_correct += shard_correct;
    }
    if (k > 1) allreduce_naive(t);
    for (int d = 0; d < k; d++)
        dp_optimizer_step(t->replicas[d].optimizer, t->replicas[d].params, t->replicas[d].grads);
    if (loss_sum) *loss_sum += total_loss;
    if (correct) *correct += total_correct;
    return DP_OK;
}

dp_status_t dp_trainer_evaluate(dp_trainer_t *t, const dp_dataset_t *ds, int batch_size,
                                int *correct) {
    if (batch_size < 1) return dp_fail(DP_ERR_ARG, "evaluation batch size must be >= 1");
    replica_t *r = &t->replicas[0];
    int *indices = dp_alloc(sizeof(int) * (size_t)batch_size, "evaluation indices");
    if (!indices) return DP_ERR_NOMEM;
    int total = 0;
    dp_status_t status = DP_OK;
    for (int start = 0; start < ds->count && status == DP_OK; start += batch_size) {
        int n = ds->count - start < batch_size ? ds->count - start : batch_size;
        for (int i = 0; i < n; i++) indices[i] = start + i;
        dp_arena_reset(r->arena);
        dp_tape_reset(r->tape);
        dp_tensor_t *x, *logits;
        int32_t *y;
        status = load_shard(r, ds, indices, n, &x, &y);
        if (status == DP_OK) status = dp_model_forward(t->model, r->tape, r->params, NULL, x, &logits);
        if (status == DP_OK) total += count_correct(logits->data, y, n, logits->shape[1]);
    }
    free(indices);
    *correct = total;
    return status;
}
