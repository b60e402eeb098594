/* test_confusion.c - confusion matrices (confusion.h): predictions of
 * known logits counted into the matrix they make (the first largest logit
 * on a tie, a label outside the classes refused with nothing added), a
 * class's figures (precision and recall NaN where nothing divides, the
 * class most often mistaken for), the mean recall; and an evaluation's
 * matrix on the trainer's devices (parallel.h dp_trainer_evaluate_confusion). */
#include <math.h>
#include <string.h>

#include "dptrain/batch_source.h"
#include "dptrain/confusion.h"
#include "dptrain/data.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/rng.h"
#include "testing.h"

/* 3 classes, 7 samples whose predictions are known: the matrix they make */
static void test_count(void) {
    enum { K = 3, N = 7 };
    const float logits[N * K] = {
        5, 1, 0,    /* label 0, predicted 0 */
        2, 7, 1,    /* label 0, predicted 1 */
        0, 3, 3,    /* label 1, a tie of 1 and 2: predicted 1 (the first) */
        -1, -2, -3, /* label 1, predicted 0 */
        4, 4, 4,    /* label 2, all equal: predicted 0 */
        0, 0, 9,    /* label 2, predicted 2 */
        1, 8, 2,    /* label 2, predicted 1 */
    };
    const int32_t labels[N] = {0, 0, 1, 1, 2, 2, 2};
    const int64_t want[K * K] = {1, 1, 0, /* true 0 */
                                 1, 1, 0, /* true 1 */
                                 1, 1, 1 /* true 2 */};
    int64_t matrix[K * K] = {0};
    CHECK(dp_confusion_count(matrix, K, logits, labels, N) == DP_OK, "%s", dp_error_message());
    CHECK(memcmp(matrix, want, sizeof want) == 0, "matrix %lld %lld %lld / %lld %lld %lld / %lld %lld %lld",
          (long long)matrix[0], (long long)matrix[1], (long long)matrix[2], (long long)matrix[3],
          (long long)matrix[4], (long long)matrix[5], (long long)matrix[6], (long long)matrix[7],
          (long long)matrix[8]);
    /* counted twice: the counts add up */
    CHECK(dp_confusion_count(matrix, K, logits, labels, N) == DP_OK && matrix[0] == 2 && matrix[8] == 2,
          "counted twice: [0][0] %lld, [2][2] %lld", (long long)matrix[0], (long long)matrix[8]);
    /* a label outside the classes: refused, naming it, nothing added */
    const int32_t bad[N] = {0, 0, 1, 1, 2, 2, 3};
    int64_t untouched[K * K] = {0};
    CHECK(dp_confusion_count(untouched, K, logits, bad, N) == DP_ERR_ARG &&
              strstr(dp_error_message(), "label 3 outside the model's 3 classes"),
          "label 3: %s", dp_error_message());
    int64_t sum = 0;
    for (int i = 0; i < K * K; i++) sum += untouched[i];
    CHECK(sum == 0, "a refused count added %lld", (long long)sum);
}

/* a class's figures: class 2 is never predicted (precision NaN), class 3
 * has no samples (recall NaN), class 0's mistakes tie (the lower class) */
static void test_class_figures(void) {
    enum { K = 4 };
    const int64_t m[K * K] = {6, 2, 0, 2,  /* true 0: 6 right, 2 taken for 1, 2 for 3 */
                              1, 4, 0, 0,  /* true 1 */
                              0, 3, 0, 1,  /* true 2: never right, never predicted */
                              0, 0, 0, 0}; /* true 3: no samples */
    dp_class_figures_t f;
    dp_confusion_class(m, K, 0, &f);
    CHECK(f.samples == 10 && f.correct == 6 && f.predicted == 7 && fabs(f.recall - 0.6) < 1e-12 &&
              fabs(f.precision - 6.0 / 7.0) < 1e-12 && f.mistaken_for == 1 && f.mistaken_count == 2,
          "class 0: %lld %lld %lld %g %g, mistaken for %d (%lld)", (long long)f.samples, (long long)f.correct,
          (long long)f.predicted, f.recall, f.precision, f.mistaken_for, (long long)f.mistaken_count);
    dp_confusion_class(m, K, 1, &f);
    CHECK(f.samples == 5 && f.predicted == 9 && fabs(f.precision - 4.0 / 9.0) < 1e-12 && f.mistaken_for == 0 &&
              f.mistaken_count == 1,
          "class 1: %lld %lld %g, mistaken for %d (%lld)", (long long)f.samples, (long long)f.predicted, f.precision,
          f.mistaken_for, (long long)f.mistaken_count);
    dp_confusion_class(m, K, 2, &f);
    CHECK(f.samples == 4 && f.correct == 0 && f.predicted == 0 && f.recall == 0.0 && isnan(f.precision) &&
              f.mistaken_for == 1 && f.mistaken_count == 3,
          "class 2 (never predicted): recall %g precision %g, mistaken for %d", f.recall, f.precision,
          f.mistaken_for);
    dp_confusion_class(m, K, 3, &f);
    CHECK(f.samples == 0 && f.predicted == 3 && isnan(f.recall) && f.precision == 0.0 && f.mistaken_for == -1 &&
              f.mistaken_count == 0,
          "class 3 (no samples): recall %g precision %g, mistaken for %d", f.recall, f.precision, f.mistaken_for);
    const int64_t perfect[2 * 2] = {3, 0, 0, 5};
    dp_confusion_class(perfect, 2, 1, &f);
    CHECK(f.mistaken_for == -1 && f.mistaken_count == 0 && f.recall == 1.0 && f.precision == 1.0,
          "no mistakes: mistaken for %d", f.mistaken_for);
    int with;
    const double mean = dp_confusion_mean_recall(m, K, &with);
    CHECK(with == 3 && fabs(mean - (0.6 + 0.8 + 0.0) / 3) < 1e-12, "mean recall %g over %d classes", mean, with);
    const int64_t empty[2 * 2] = {0};
    CHECK(isnan(dp_confusion_mean_recall(empty, 2, &with)) && with == 0, "an empty matrix: %d classes", with);
}

/* The confusion matrix of an evaluation: its rows are the labels' counts,
 * its diagonal the correct count, and it is the same on 1 and 3 devices
 * (uneven shards, batches of 20 over 137 images, the last one short), and
 * one example alone on 2 devices (one of them empty) adds one entry, in its
 * label's row, on the diagonal exactly when it is counted correct. */
static void test_evaluation_matrix(void) {
    enum { N = 137, K = 10 };
    dp_model_t *m;
    DP_ASSERT(dp_model_builtin("lenet-paddle", &m) == DP_OK);
    static uint8_t pixels[N * 28 * 28];
    uint8_t labels[N];
    dp_rng_t rng;
    dp_rng_seed(&rng, 7);
    for (int i = 0; i < N * 28 * 28; i++) pixels[i] = (uint8_t)dp_rng_below(&rng, 256);
    for (int i = 0; i < N; i++) labels[i] = (uint8_t)dp_rng_below(&rng, K);
    dp_dataset_t ds = {0};
    dp_batch_source_t *source = NULL;
    DP_ASSERT(dp_dataset_from_memory(&ds, N, 1, 28, 28, K, pixels, labels) == DP_OK &&
              dp_memory_source_new(&ds, NULL, 0, &source) == DP_OK);
    int64_t matrix[2][K * K];
    int correct[2];
    const int devices[2] = {1, 3};
    for (int c = 0; c < 2; c++) {
        dp_trainer_config_t config = {.model = m, .num_devices = devices[c], .threads_per_device = 1,
                                      .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 3};
        dp_trainer_t *t;
        DP_ASSERT(dp_trainer_new(&config, &t) == DP_OK);
        CHECK(dp_trainer_evaluate_confusion(t, source, 20, 0, matrix[c], &correct[c]) == DP_OK, "%d devices: %s",
              devices[c], dp_error_message());
        int plain = -1;
        CHECK(dp_trainer_evaluate(t, source, 20, &plain) == DP_OK && plain == correct[c],
              "%d devices: the count %d, with the matrix %d", devices[c], plain, correct[c]);
        dp_trainer_free(t);
    }
    CHECK(memcmp(matrix[0], matrix[1], sizeof matrix[0]) == 0 && correct[0] == correct[1],
          "1 and 3 devices: other matrices");
    int64_t total = 0, diagonal = 0;
    int rows_ok = 1, spread = 0;
    for (int i = 0; i < K; i++) {
        int64_t row = 0, want = 0;
        for (int j = 0; j < K; j++) row += matrix[0][i * K + j], spread += j != i && matrix[0][i * K + j] > 0;
        for (int n = 0; n < N; n++) want += labels[n] == i;
        rows_ok &= row == want;
        total += row, diagonal += matrix[0][i * K + i];
    }
    CHECK(total == N && rows_ok && diagonal == correct[0], "matrix: %lld entries, rows %s, diagonal %lld of %d correct",
          (long long)total, rows_ok ? "= the labels' counts" : "wrong", (long long)diagonal, correct[0]);
    CHECK(spread > 0, "no example is misclassified: the test shows nothing");
    /* example 5 alone: the one cell it adds */
    dp_dataset_t one = {0};
    dp_batch_source_t *alone = NULL;
    DP_ASSERT(dp_dataset_from_memory(&one, 1, 1, 28, 28, K, pixels + 5 * 28 * 28, labels + 5) == DP_OK &&
              dp_memory_source_new(&one, NULL, 0, &alone) == DP_OK);
    dp_trainer_config_t two = {.model = m, .num_devices = 2, .threads_per_device = 1,
                               .optim = {.kind = DP_OPTIM_SGD, .lr = 0.1f}, .seed = 3};
    dp_trainer_t *t;
    DP_ASSERT(dp_trainer_new(&two, &t) == DP_OK);
    int64_t cell[K * K];
    int right;
    CHECK(dp_trainer_evaluate_confusion(t, alone, 20, 0, cell, &right) == DP_OK, "one example: %s", dp_error_message());
    int64_t ones = 0;
    int at = -1;
    for (int i = 0; i < K * K; i++) ones += cell[i], at = cell[i] ? i : at;
    CHECK(ones == 1 && at / K == labels[5] && (at % K == labels[5]) == right, "one example: %lld entries, at %d",
          (long long)ones, at);
    dp_trainer_free(t);
    dp_batch_source_free(alone);
    dp_dataset_free(&one);
    dp_batch_source_free(source);
    dp_dataset_free(&ds);
    dp_model_free(m);
}

int main(void) {
    test_count();
    test_class_figures();
    test_evaluation_matrix();
    return testing_finish("test_confusion");
}
