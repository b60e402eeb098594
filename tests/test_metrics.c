/* test_metrics.c - a step's loss and accuracy summed on the devices
 * (backend.h count_metrics, parallel.h dp_trainer_read_metrics).
 *   - count_metrics of the CPU, staged and split backends
 *     (metrics_checks.h: ties, NaN, infinities, the loss's rounding, NULL
 *     loss, n = 0, many rows); the split backend refuses sums of another
 *     table (a child aborts with one line naming count_metrics);
 *   - the trainer (LeNet, CPU devices): steps with NULL pointers read
 *     nothing, and a read afterwards gives the figures the steps read one
 *     by one give: bit for bit on 1 device (the same additions), within
 *     1e-12 relative on 2 (another order), the correct count exactly; a
 *     peek (reset 0) twice gives the same, a read with reset then nothing;
 *     the sums dropped (NULL pointers, reset) read as zero; an evaluation
 *     between steps leaves the unread training sums as they were; devices
 *     on two split tables give the CPU's figures;
 *   - dp_trainer_evaluate_counts (check_evaluate_counts says what).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dptrain/backend.h"
#include "dptrain/batch_source.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "metrics_checks.h"
#include "testing.h"

enum { STEPS = 4, BATCH = 48 };

/* A split table handed another table's sums aborts with one line. */
static void check_split_refuses(void) {
    const char *log = testing_tmp_file("split_metrics.err");
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
        const dp_backend_t *a = dp_backend_cpu_split(0), *b = dp_backend_cpu_split(1);
        double *sums = a->alloc(a->ctx, DP_METRICS_SUMS * sizeof(double), "sums");
        float *logits = b->alloc(b->ctx, sizeof(float) * 10, "logits");
        int32_t *labels = b->alloc(b->ctx, sizeof(int32_t), "labels");
        b->count_metrics(b->ctx, sums, NULL, 1.0, logits, labels, 1, 10); /* must abort */
        _exit(0);
    }
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    char text[512] = {0};
    FILE *f = fopen(log, "r");
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[got] = '\0';
    CHECK(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGABRT, "split:1 with split:0's sums: status %d", wstatus);
    CHECK(strstr(text, "split:1: count_metrics (sums) was handed memory that is split:0's") != NULL,
          "split:1 with split:0's sums said '%s'", text);
}

static dp_trainer_t *make_trainer(const dp_model_t *m, int devices, const dp_backend_t *const *backends) {
    dp_trainer_config_t config = {.model = m, .num_devices = devices, .threads_per_device = 1,
                                  .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.1f, .momentum = 0.9f}, .seed = 5,
                                  .backends = backends};
    dp_trainer_t *t = NULL;
    CHECK(dp_trainer_new(&config, &t) == DP_OK, "trainer on %d devices: %s", devices, dp_error_message());
    return t;
}

/* Step s's batch: examples [s * BATCH, (s + 1) * BATCH). */
static int step(dp_trainer_t *t, const dp_dataset_t *ds, int *indices, int s, double *loss, int *correct) {
    for (int i = 0; i < BATCH; i++) indices[i] = (s * BATCH + i) % ds->count;
    dp_status_t st = testing_step(t, ds, indices, BATCH, loss, correct);
    CHECK(st == DP_OK, "step %d: %s", s, dp_error_message());
    return st == DP_OK;
}

static void check_trainer(const dp_model_t *m, const dp_dataset_t *ds, int devices) {
    int indices[BATCH];
    /* the reference: every step read as it ends */
    dp_trainer_t *each = make_trainer(m, devices, NULL), *later = make_trainer(m, devices, NULL);
    if (!each || !later) goto done;
    double each_loss = 0.0;
    int each_correct = 0;
    for (int s = 0; s < STEPS; s++)
        if (!step(each, ds, indices, s, &each_loss, &each_correct)) goto done;
    /* the same steps, nothing read until the end */
    for (int s = 0; s < STEPS; s++)
        if (!step(later, ds, indices, s, NULL, NULL)) goto done;
    double peek1 = 0.0, peek2 = 0.0, taken = 0.0, after = 0.0;
    int peek1_correct = 0, peek2_correct = 0, taken_correct = 0, after_correct = 0;
    CHECK(dp_trainer_read_metrics(later, &peek1, &peek1_correct, 0) == DP_OK, "peek: %s", dp_error_message());
    CHECK(dp_trainer_read_metrics(later, &peek2, &peek2_correct, 0) == DP_OK, "peek: %s", dp_error_message());
    CHECK(memcmp(&peek1, &peek2, sizeof peek1) == 0 && peek1_correct == peek2_correct,
          "%d devices: two peeks differ: %.17g %d, %.17g %d", devices, peek1, peek1_correct, peek2, peek2_correct);
    /* an evaluation between steps does not touch the unread training sums */
    int eval_each = -1, eval_later = -2;
    CHECK(testing_evaluate(each, ds, 100, &eval_each) == DP_OK, "evaluate: %s", dp_error_message());
    CHECK(testing_evaluate(later, ds, 100, &eval_later) == DP_OK, "evaluate: %s", dp_error_message());
    CHECK(eval_each == eval_later && eval_each > 0, "%d devices: evaluations %d and %d", devices, eval_each,
          eval_later);
    CHECK(dp_trainer_read_metrics(later, &taken, &taken_correct, 1) == DP_OK, "read: %s", dp_error_message());
    CHECK(memcmp(&peek1, &taken, sizeof taken) == 0 && peek1_correct == taken_correct,
          "%d devices: the read after an evaluation %.17g %d, the peek before %.17g %d", devices, taken,
          taken_correct, peek1, peek1_correct);
    CHECK(taken_correct == each_correct && each_correct > 0, "%d devices: %d correct read at the end, %d step by step",
          devices, taken_correct, each_correct);
    if (devices == 1)
        CHECK(memcmp(&taken, &each_loss, sizeof taken) == 0, "1 device: loss %.17g read at the end, %.17g step by "
              "step (the same additions: the same bits)", taken, each_loss);
    else
        CHECK(fabs(taken - each_loss) <= 1e-12 * fabs(each_loss) && each_loss > 0.0,
              "%d devices: loss %.17g read at the end, %.17g step by step", devices, taken, each_loss);
    CHECK(dp_trainer_read_metrics(later, &after, &after_correct, 1) == DP_OK && after == 0.0 && after_correct == 0,
          "%d devices: after a read with reset: %g, %d", devices, after, after_correct);
    /* dropped: NULL pointers with reset */
    if (!step(later, ds, indices, 0, NULL, NULL)) goto done;
    CHECK(dp_trainer_read_metrics(later, NULL, NULL, 1) == DP_OK, "drop: %s", dp_error_message());
    after = 0.0;
    after_correct = 0;
    CHECK(dp_trainer_read_metrics(later, &after, &after_correct, 0) == DP_OK && after == 0.0 && after_correct == 0,
          "%d devices: after a drop: %g, %d", devices, after, after_correct);
done:
    dp_trainer_free(each);
    dp_trainer_free(later);
}

/* Devices on two split tables (as on two GPUs) give the CPU's figures. */
static void check_split_trainer(const dp_model_t *m, const dp_dataset_t *ds) {
    int indices[BATCH];
    const dp_backend_t *tables[2] = {dp_backend_cpu_split(0), dp_backend_cpu_split(1)};
    dp_trainer_t *cpu = make_trainer(m, 2, NULL), *split = make_trainer(m, 2, tables);
    if (!cpu || !split) goto done;
    double cpu_loss = 0.0, split_loss = 0.0;
    int cpu_correct = 0, split_correct = 0;
    for (int s = 0; s < STEPS; s++) {
        if (!step(cpu, ds, indices, s, NULL, NULL) || !step(split, ds, indices, s, NULL, NULL)) goto done;
    }
    CHECK(dp_trainer_read_metrics(cpu, &cpu_loss, &cpu_correct, 1) == DP_OK, "%s", dp_error_message());
    CHECK(dp_trainer_read_metrics(split, &split_loss, &split_correct, 1) == DP_OK, "%s", dp_error_message());
    CHECK(memcmp(&cpu_loss, &split_loss, sizeof cpu_loss) == 0 && cpu_correct == split_correct,
          "split:0,split:1 %.17g %d, cpu:0,cpu:1 %.17g %d", split_loss, split_correct, cpu_loss, cpu_correct);
done:
    dp_trainer_free(cpu);
    dp_trainer_free(split);
}

/* dp_trainer_evaluate_counts: the examples labelled c, for each class c
 * in turn. A row's 10 labels have distinct ranks (ties go to the lower
 * index), so exactly 1 is its top-1 answer and exactly 5 are among its top
 * 5: over the 10 labellings the correct counts add up to the examples and
 * the top-5 counts to 5 times them, on 1 and 3 devices (uneven shards)
 * alike, each labelling's counts the same on both; the correct count is
 * dp_trainer_evaluate's, and top-5 >= top-1. */
static void check_evaluate_counts(const dp_model_t *m, dp_dataset_t *ds) {
    enum { CLASSES = 10 };
    const int devices[2] = {1, 3};
    dp_eval_counts_t got[2][CLASSES];
    uint8_t *labels = malloc((size_t)ds->count);
    DP_ASSERT(labels && ds->num_classes == CLASSES);
    memcpy(labels, ds->labels, (size_t)ds->count);
    for (int c = 0; c < 2; c++) {
        dp_trainer_t *t = make_trainer(m, devices[c], NULL);
        long correct_sum = 0, top5_sum = 0;
        for (int label = 0; label < CLASSES && t; label++) {
            memset(ds->labels, label, (size_t)ds->count);
            dp_batch_source_t *src = NULL;
            dp_eval_counts_t *counts = &got[c][label];
            *counts = (dp_eval_counts_t){-1, -1};
            int plain = -2;
            CHECK(dp_memory_source_new(ds, NULL, 0, &src) == DP_OK &&
                      dp_trainer_evaluate_counts(t, src, 50, 0, NULL, counts) == DP_OK &&
                      dp_trainer_evaluate(t, src, 50, &plain) == DP_OK,
                  "%d devices, label %d: %s", devices[c], label, dp_error_message());
            dp_batch_source_free(src);
            CHECK(plain == counts->correct && counts->top5 >= counts->correct && counts->top5 <= ds->count,
                  "%d devices, label %d: %d correct (dp_trainer_evaluate: %d), %d top-5", devices[c], label,
                  counts->correct, plain, counts->top5);
            correct_sum += counts->correct, top5_sum += counts->top5;
        }
        CHECK(t && correct_sum == ds->count && top5_sum == 5L * ds->count, "%d devices: over the %d labellings %ld "
              "correct (want %d), %ld top-5 (want %d)", devices[c], CLASSES, correct_sum, ds->count, top5_sum,
              5 * ds->count);
        dp_trainer_free(t);
    }
    CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0, "1 and 3 devices count otherwise");
    memcpy(ds->labels, labels, (size_t)ds->count);
    free(labels);
}

int main(void) {
    check_count_metrics(dp_backend_cpu(), "cpu");
    check_count_metrics(dp_backend_cpu_staged(), "staged");
    check_count_metrics(dp_backend_cpu_split(3), "split:3");
    check_split_refuses();
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet", &m) == DP_OK);
    dp_dataset_t ds = testing_column_dataset(240, 28, 10, 2, 3, 64, 3);
    check_trainer(m, &ds, 1);
    check_trainer(m, &ds, 2);
    check_split_trainer(m, &ds);
    check_evaluate_counts(m, &ds);
    dp_model_free(m);
    dp_dataset_free(&ds);
    return testing_finish("test_metrics");
}
