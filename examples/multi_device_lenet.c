/* multi_device_lenet.c - "Dive into Deep Learning" 12.5, Training on
 * Multiple GPUs, from scratch, in C: the book's functions one by one
 * (get_params, allreduce, split_batch, train_batch, train), written with
 * dptrain's low-level API: devices (device.h), the tape (autograd.h), the
 * model (nn.h), collectives (comm.h). `dptrain train` does the same, faster
 * and with more checks (src/trainer/); this is the page to read next to the
 * book.
 *
 * usage: multi_device_lenet [num_devices] [batch_size] [lr] [epochs] [limit]
 *        defaults: 2 256 0.2 10 60000 (the book's second run)
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L /* clock_gettime, CLOCK_MONOTONIC under -std=c11 */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/comm.h"
#include "dptrain/data.h"
#include "dptrain/device.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"

#define MAX_DEVICES 16

/* What one device owns: its copy of the parameters and their gradients
 * (the book's device_params[d]), and the memory of its computation. */
typedef struct {
    dp_device_t *device;
    float *params, *grads;
    dp_arena_t *arena;
    dp_tape_t *tape;
    /* this step's shard and result */
    const dp_dataset_t *data;
    const int *indices;
    int count, batch_size;
} device_params_t;

static const dp_model_t *lenet; /* the book's `lenet` function and its parameter shapes */
static size_t num_params;

/* get_params: copy the parameters to a device and give them gradients. */
static void get_params(const float *params, device_params_t *dp) {
    dp->params = malloc(sizeof(float) * num_params);
    dp->grads = calloc(num_params, sizeof(float));
    memcpy(dp->params, params, sizeof(float) * num_params);
    dp->arena = dp_arena_new((size_t)1 << 24);
    dp->tape = dp_tape_new(dp->arena);
}

/* allreduce: sum the gradients of every device and put the sum on all of
 * them. The book adds everything on device 0 and copies it back; here each
 * of the k devices sums its own 1/k of the vector (exercise 3), and all of
 * them do it at the same time (one allreduce_task per device). */
typedef struct {
    float **grads;
    int k, part;
} allreduce_job_t;

static dp_status_t allreduce_task(void *arg) {
    allreduce_job_t *job = arg;
    dp_allreduce_chunk(job->grads, job->k, num_params, job->part);
    return DP_OK;
}

/* split_batch: the minibatch's examples, shard d of k (sizes differ by at
 * most one, like split_and_load). */
static void split_batch(const int *indices, int n, int k, int d, const int **shard, int *count) {
    int start;
    dp_split_batch(n, k, d, &start, count);
    *shard = indices + start;
}

/* The loss and backward of one device's shard (inside the book's
 * `with autograd.record()` and `l.backward()`), run on that device. */
static dp_status_t forward_backward(void *arg) {
    device_params_t *dp = arg;
    dp_arena_reset(dp->arena);
    dp_tape_reset(dp->tape);
    memset(dp->grads, 0, sizeof(float) * num_params);
    int shape[4] = {dp->count, 1, 28, 28};
    dp_tensor_t *x = dp_tape_tensor(dp->tape, 4, shape), *logits;
    x->data = dp_arena_floats(dp->arena, (size_t)dp->count * 784);
    int32_t *y = dp_arena_alloc(dp->arena, sizeof(int32_t) * (size_t)dp->count);
    dp_dataset_fill(dp->data, dp->indices, dp->count, x->data, y);
    if (dp_model_forward(lenet, dp->tape, dp->params, dp->grads, x, &logits) != DP_OK) return DP_ERR_SHAPE;
    dp_op_attr_t attr = dp_op_attr_default();
    attr.loss_denominator = (float)dp->batch_size; /* d2l.sgd divides by the full batch size */
    dp_tensor_t *loss = dp_tape_op(dp->tape, DP_OP_SOFTMAX_XENT, &attr, logits, NULL, NULL, y);
    if (!loss) return DP_ERR_ARG;
    return dp_tape_backward(dp->tape, loss, NULL, NULL);
}

static float learning_rate;

/* d2l.sgd(param, lr, batch_size) on one device's parameters. */
static dp_status_t sgd(void *arg) {
    device_params_t *dp = arg;
    for (size_t i = 0; i < num_params; i++) dp->params[i] -= learning_rate * dp->grads[i];
    return DP_OK;
}

/* train_batch: split, forward/backward on every device at once, allreduce,
 * update every device's copy with the same summed gradient. */
static void train_batch(const dp_dataset_t *data, const int *indices, int n, device_params_t *devices, int k) {
    dp_device_t *queues[MAX_DEVICES];
    float *grads[MAX_DEVICES];
    for (int d = 0; d < k; d++) {
        queues[d] = devices[d].device;
        grads[d] = devices[d].grads;
        devices[d].data = data;
        devices[d].batch_size = n;
        split_batch(indices, n, k, d, &devices[d].indices, &devices[d].count);
        dp_device_submit(devices[d].device, forward_backward, &devices[d]); /* returns at once */
    }
    dp_waitall(queues, k); /* every device's gradients are ready */
    allreduce_job_t jobs[MAX_DEVICES];
    for (int d = 0; d < k; d++) {
        jobs[d] = (allreduce_job_t){grads, k, d};
        dp_device_submit(devices[d].device, allreduce_task, &jobs[d]);
    }
    dp_waitall(queues, k); /* the sum is on every device */
    for (int d = 0; d < k; d++) dp_device_submit(devices[d].device, sgd, &devices[d]);
    dp_waitall(queues, k);
}

/* Test accuracy with device 0's copy (the book's evaluate_accuracy_gpu). */
static double evaluate_accuracy(const dp_dataset_t *test, device_params_t *dp) {
    int correct = 0, indices[1000];
    int32_t labels[1000];
    for (int start = 0; start < test->count; start += 1000) {
        int n = test->count - start < 1000 ? test->count - start : 1000;
        for (int i = 0; i < n; i++) indices[i] = start + i;
        dp_arena_reset(dp->arena);
        dp_tape_reset(dp->tape);
        int shape[4] = {n, 1, 28, 28};
        dp_tensor_t *x = dp_tape_tensor(dp->tape, 4, shape), *logits;
        x->data = dp_arena_floats(dp->arena, (size_t)n * 784);
        dp_dataset_fill(test, indices, n, x->data, labels);
        dp_model_forward(lenet, dp->tape, dp->params, NULL, x, &logits);
        for (int i = 0; i < n; i++) {
            const float *row = logits->data + (size_t)i * 10;
            int best = 0;
            for (int j = 1; j < 10; j++)
                if (row[j] > row[best]) best = j;
            correct += best == labels[i];
        }
    }
    return (double)correct / test->count;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* train(num_gpus, batch_size, lr), as in the book. */
static int train(int num_devices, int batch_size, float lr, int epochs, int limit) {
    dp_dataset_t train_set, test_set;
    if (dp_dataset_load(DP_DEFAULT_DATA_DIR, "train", &train_set) != DP_OK ||
        dp_dataset_load(DP_DEFAULT_DATA_DIR, "t10k", &test_set) != DP_OK) {
        fprintf(stderr, "multi_device_lenet: %s\n", dp_error_message());
        return 1;
    }
    dp_dataset_truncate(&train_set, limit);
    learning_rate = lr;
    /* The parameters, drawn once (scale = 0.01), then copied to every device. */
    float *params = malloc(sizeof(float) * num_params);
    dp_rng_t rng;
    dp_rng_seed(&rng, 0);
    dp_model_init_params(lenet, params, &rng);
    device_params_t devices[MAX_DEVICES] = {0};
    for (int d = 0; d < num_devices; d++) {
        dp_device_new(d, d, &devices[d].device);
        get_params(params, &devices[d]);
    }
    dp_loader_t *train_iter;
    if (dp_loader_new(train_set.count, batch_size, 1, 0, &train_iter) != DP_OK) {
        fprintf(stderr, "multi_device_lenet: %s\n", dp_error_message());
        return 1;
    }
    double total = 0.0, acc = 0.0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        dp_loader_start_epoch(train_iter, epoch);
        double start = now();
        const int *indices;
        int n;
        while ((n = dp_loader_next(train_iter, &indices)) > 0) train_batch(&train_set, indices, n, devices, num_devices);
        total += now() - start;
        acc = evaluate_accuracy(&test_set, &devices[0]);
    }
    printf("test acc: %.2f, %.1f sec/epoch on [", acc, total / epochs);
    for (int d = 0; d < num_devices; d++) printf(d ? ", %s" : "%s", dp_device_name(devices[d].device));
    printf("]\n");
    for (int d = 0; d < num_devices; d++) {
        dp_device_free(devices[d].device);
        free(devices[d].params);
        free(devices[d].grads);
        dp_tape_free(devices[d].tape);
        dp_arena_free(devices[d].arena);
    }
    free(params);
    dp_loader_free(train_iter);
    dp_dataset_free(&train_set);
    dp_dataset_free(&test_set);
    return 0;
}

int main(int argc, char **argv) {
    int num_devices = argc > 1 ? atoi(argv[1]) : 2, batch_size = argc > 2 ? atoi(argv[2]) : 256;
    float lr = argc > 3 ? (float)atof(argv[3]) : 0.2f;
    int epochs = argc > 4 ? atoi(argv[4]) : 10, limit = argc > 5 ? atoi(argv[5]) : 60000;
    if (num_devices < 1 || num_devices > MAX_DEVICES || batch_size < num_devices || lr <= 0 || epochs < 1) {
        fprintf(stderr, "usage: multi_device_lenet [num_devices 1-%d] [batch_size >= num_devices] [lr > 0] "
                        "[epochs >= 1] [limit]\n", MAX_DEVICES);
        return 2;
    }
    dp_model_t *model;
    dp_model_builtin("lenet", &model);
    lenet = model;
    num_params = dp_model_num_params(model);
    int status = train(num_devices, batch_size, lr, epochs, limit);
    dp_model_free(model);
    return status;
}
