/* freeze_bench.c - what freezing a backbone saves (nn.h: dp_model_freeze,
 * `dptrain train --freeze`): one training step of a model with every layer
 * trained against the same step with the backbone frozen (by default every
 * layer but the last linear one: a new head on a pretrained network), in
 * the same run on the same devices, alternating rounds of steps so that
 * both see the same machine load. Prints the backward ops a step runs
 * (a tape's nodes with a gradient, counted on one host pass), the median
 * milliseconds per step of each and their ratio.
 *
 * usage: freeze_bench [MODEL [DEVICES [BATCH [STEPS [LAYERS]]]]]
 *   MODEL    a built-in name or a model file (default resnet18: d2l's, 1x28x28)
 *   DEVICES  CPU devices (default 1); BATCH per step (default 64)
 *   STEPS    timed steps per model per round, 3 rounds (default 5)
 *   LAYERS   the freeze list (default: every layer with parameters but the last linear one)
 * Synthetic images of the model's input shape; SGD.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/model_file.h"
#include "dptrain/parallel.h"

#include "bench_util.h"

#define ROUNDS 3

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "freeze_bench: %s: %s\n", what, dp_error_message());
    exit(1);
}

/* The nodes of one host forward + backward of `batch` that run backward
 * (their output has a gradient), and all the nodes. */
static void count_backward_ops(const dp_model_t *m, const dp_batch_t *b, int *with_grad, int *nodes) {
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np), *grads = calloc(dp_model_num_trainable(m) + 1, sizeof(float));
    dp_rng_t rng;
    dp_rng_seed(&rng, 0);
    dp_model_init_params(m, params, &rng);
    dp_arena_t *arena = dp_arena_new((size_t)1 << 28);
    dp_tape_t *tape = dp_tape_new(arena);
    int shape[4] = {b->n, b->channels, b->height, b->width};
    dp_tensor_t *x = dp_tape_tensor(tape, 4, shape), *logits, *loss;
    x->data = malloc(sizeof(float) * dp_tensor_numel(x));
    dp_pixels_to_input(b->pixels, b->n, b->channels, (size_t)b->height * b->width, NULL, x->data);
    if (dp_model_forward(m, tape, params, grads, x, &logits) != DP_OK ||
        !(loss = dp_tape_op(tape, DP_OP_SOFTMAX_XENT, NULL, logits, NULL, NULL, b->labels)) ||
        dp_tape_backward(tape, loss, NULL, NULL) != DP_OK)
        die("a host pass");
    *with_grad = 0;
    *nodes = dp_tape_size(tape);
    for (int i = 0; i < *nodes; i++) *with_grad += dp_tape_node(tape, i)->out.grad != NULL;
    free(x->data);
    dp_tape_free(tape);
    dp_arena_free(arena);
    free(params);
    free(grads);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "resnet18";
    int devices = 1, batch = 64, steps = 5;
    if (argc > 6) {
        fprintf(stderr, "usage: freeze_bench [MODEL [DEVICES [BATCH [STEPS [LAYERS]]]]]\n");
        return 2;
    }
    if ((argc > 2 && !bench_int_arg("freeze_bench", "DEVICES", argv[2], 1, 64, &devices)) ||
        (argc > 3 && !bench_int_arg("freeze_bench", "BATCH", argv[3], 1, 1 << 20, &batch)) ||
        (argc > 4 && !bench_int_arg("freeze_bench", "STEPS", argv[4], 1, 1000000, &steps))) {
        return 2;
    }
    if (!bench_cpu_line("freeze_bench", 1)) return 1;
    dp_model_t *full, *frozen;
    if (dp_model_load(name, &full) != DP_OK || dp_model_load(name, &frozen) != DP_OK) die(name);
    char *list = NULL;
    if (argc > 5) list = strdup(argv[5]);
    else if (dp_model_backbone_list(full, &list) != DP_OK) die("the backbone");
    if (!list || dp_model_freeze(frozen, list) != DP_OK) die("--freeze");
    int c, h, w;
    dp_model_input_shape(full, &c, &h, &w);
    int classes = dp_model_num_outputs(full);
    size_t example = (size_t)c * h * w;
    uint8_t *pixels = malloc(example * (size_t)batch);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    for (size_t i = 0; i < example * (size_t)batch; i++) pixels[i] = (uint8_t)(i * 7 + i / 13);
    for (int i = 0; i < batch; i++) labels[i] = i % (classes > 0 ? classes : 1);
    dp_batch_t b = {.n = batch, .channels = c, .height = h, .width = w, .pixels = pixels, .labels = labels};

    int ops_full, ops_frozen, nodes;
    count_backward_ops(full, &b, &ops_full, &nodes);
    count_backward_ops(frozen, &b, &ops_frozen, &nodes);
    dp_trainer_t *trainers[2];
    const dp_model_t *models[2] = {full, frozen};
    for (int k = 0; k < 2; k++) {
        dp_trainer_config_t config = {.model = models[k], .num_devices = devices, .threads_per_device = 1,
                                      .allreduce = DP_ALLREDUCE_CHUNKED, .optim = {.kind = DP_OPTIM_SGD, .lr = 0.01f}};
        if (dp_trainer_new(&config, &trainers[k]) != DP_OK) die("trainer");
        for (int s = 0; s < 2; s++) /* warm-up: arenas grown, kernels chosen */
            if (dp_trainer_step(trainers[k], &b, NULL, NULL) != DP_OK) die("step");
    }
    double *times[2] = {malloc(sizeof(double) * ROUNDS * steps), malloc(sizeof(double) * ROUNDS * steps)};
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < steps; s++) {
                double start = now_sec();
                if (dp_trainer_step(trainers[k], &b, NULL, NULL) != DP_OK) die("step");
                times[k][r * steps + s] = now_sec() - start;
            }
    double full_ms = 1e3 * bench_median(times[0], ROUNDS * steps);
    double frozen_ms = 1e3 * bench_median(times[1], ROUNDS * steps);
    printf("%s, batch %d on %d CPU device(s), %d x %d steps each (median):\n", name, batch, devices, ROUNDS, steps);
    printf("  frozen: %s\n", list);
    printf("  parameters trained: %zu of %zu\n", dp_model_num_trainable(frozen), dp_model_num_trainable(full));
    printf("  backward ops per step (one device's tape, %d nodes): %d all trained, %d frozen\n", nodes, ops_full,
           ops_frozen);
    printf("  full step %.1f ms, frozen step %.1f ms: %.2fx faster (%.0f vs %.0f images/s)\n", full_ms,
           frozen_ms, full_ms / frozen_ms, batch / (full_ms / 1e3), batch / (frozen_ms / 1e3));
    for (int k = 0; k < 2; k++) {
        dp_trainer_free(trainers[k]);
        free(times[k]);
    }
    dp_model_free(full);
    dp_model_free(frozen);
    free(list);
    free(pixels);
    free(labels);
    return 0;
}
