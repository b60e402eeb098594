/* test_predict.c - the predictor (predict.h): logits on k devices equal, bit
 * for bit, those of plain dp_model_forward calls in inference (batch norm
 * with running statistics, dropout off) on each device's shard
 * (dp_split_batch), and those of one forward over the whole batch to 1e-5
 * (a different batch size may round differently in the GEMMs), for k = 1, 2,
 * 3 and batches smaller than, equal to and larger than k; repeated runs
 * reuse the devices' memory; with a forward cap of 2, each shard as
 * forwards of at most 2 examples (bit for bit those forwards'); the
 * inference cap's bounds (nn.h); the softmax; an image file as a
 * checkpoint's input (dp_predict_image_input). Runs under ThreadSanitizer too
 * (label `threads`).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image.h"
#include "dptrain/image_folder.h"
#include "dptrain/model_file.h"
#include "dptrain/parallel.h"
#include "dptrain/predict.h"
#include "testing.h"

/* Logits of x (n examples) by one forward on this thread. */
static void reference_logits(const dp_model_t *m, float *params, const float *x, int n, float *out) {
    dp_arena_t *arena = dp_arena_new(1 << 20);
    dp_tape_t *tape = dp_tape_new(arena);
    int c, h, w;
    dp_model_input_shape(m, &c, &h, &w);
    int shape[4] = {n, c, h, w};
    dp_tensor_t *t = dp_tape_tensor(tape, 4, shape), *logits = NULL;
    t->data = dp_arena_floats(arena, dp_tensor_numel(t));
    memcpy(t->data, x, sizeof(float) * dp_tensor_numel(t));
    CHECK(dp_model_forward(m, tape, params, NULL, t, &logits) == DP_OK, "%s", dp_error_message());
    if (logits) memcpy(out, logits->data, sizeof(float) * dp_tensor_numel(logits));
    dp_tape_free(tape);
    dp_arena_free(arena);
}

static void check_model(const char *name_or_path) {
    dp_model_t *m = NULL;
    CHECK(dp_model_load(name_or_path, &m) == DP_OK, "%s: %s", name_or_path, dp_error_message());
    if (!m) return;
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 7);
    dp_model_init_params(m, params, &rng);
    /* non-trivial running statistics for batch norm: the buffers after the trainable part */
    for (size_t i = dp_model_num_trainable(m); i < np; i++) params[i] = 0.5f + 0.25f * (float)(i % 7);
    int c, h, w, classes = dp_model_num_outputs(m);
    dp_model_input_shape(m, &c, &h, &w);
    enum { MAX_N = 7 };
    size_t example = (size_t)c * h * w;
    float *x = malloc(sizeof(float) * example * MAX_N);
    for (size_t i = 0; i < example * MAX_N; i++) x[i] = dp_rng_uniform(&rng);
    float want[MAX_N * 10], whole[MAX_N * 10], got[MAX_N * 10];
    for (int k = 1; k <= 3; k++) {
        dp_predictor_t *p = NULL;
        CHECK(dp_predictor_new(m, params, k, &p) == DP_OK, "%s", dp_error_message());
        if (!p) continue;
        int sizes[3] = {1, 3, MAX_N};
        for (int r = 0; r < 2; r++) { /* twice: the devices' memory is reused */
            for (int s = 0; s < 3; s++) {
                int n = sizes[s];
                for (int d = 0; d < k; d++) {
                    int start, count;
                    dp_split_batch(n, k, d, &start, &count);
                    if (count > 0)
                        reference_logits(m, params, x + (size_t)start * example, count,
                                         want + (size_t)start * classes);
                }
                reference_logits(m, params, x, n, whole);
                memset(got, 0, sizeof got);
                CHECK(dp_predictor_run(p, x, n, got) == DP_OK, "%s", dp_error_message());
                CHECK(memcmp(got, want, sizeof(float) * (size_t)n * classes) == 0,
                      "%s: %d devices, batch %d: logits differ from the shards' forwards", name_or_path, k, n);
                CHECK(testing_max_violation(got, whole, (size_t)n * classes, 1e-5, 1e-6, NULL) <= 1,
                      "%s: %d devices, batch %d: logits differ from one forward over the batch", name_or_path, k, n);
            }
        }
        /* a shard larger than the forward cap: forwards of at most 2, in order */
        dp_predictor_set_forward_cap(p, 2);
        for (int d = 0; d < k; d++) {
            int start, count;
            dp_split_batch(MAX_N, k, d, &start, &count);
            for (int first = start; first < start + count; first += 2)
                reference_logits(m, params, x + (size_t)first * example, start + count - first < 2 ? 1 : 2,
                                 want + (size_t)first * classes);
        }
        memset(got, 0, sizeof got);
        CHECK(dp_predictor_run(p, x, MAX_N, got) == DP_OK, "%s", dp_error_message());
        CHECK(memcmp(got, want, sizeof(float) * (size_t)MAX_N * classes) == 0,
              "%s: %d devices, forward cap 2: logits differ from forwards of 2", name_or_path, k);
        int expect = 0; /* ceil(shard / 2) each */
        for (int d = 0; d < k; d++) {
            int start, count;
            dp_split_batch(MAX_N, k, d, &start, &count);
            expect += (count + 1) / 2;
        }
        CHECK(dp_predictor_last_forwards(p) == expect, "%s: %d devices, forward cap 2: %d forwards, expected %d",
              name_or_path, k, dp_predictor_last_forwards(p), expect);
        CHECK(testing_max_violation(got, whole, (size_t)MAX_N * classes, 1e-5, 1e-6, NULL) <= 1,
              "%s: %d devices, forward cap 2: logits differ from one forward over the batch", name_or_path, k);
        dp_predictor_set_forward_cap(p, 0);
        CHECK(dp_predictor_run(p, x, MAX_N, got) == DP_OK && dp_predictor_last_forwards(p) == (k < MAX_N ? k : MAX_N),
              "%s: %d devices, the default cap: %d forwards", name_or_path, k, dp_predictor_last_forwards(p));
        CHECK(dp_predictor_run(p, x, 0, got) == DP_ERR_ARG, "batch 0 refused");
        dp_predictor_free(p);
    }
    /* the inference cap: 2 x 4 bytes x every output's floats per example, the input's included */
    size_t floats = 0;
    for (int i = 0; i <= dp_model_num_layers(m); i++) {
        int shape[DP_MAX_DIMS], ndim = dp_model_output_shape(m, i, shape);
        size_t e = 1;
        for (int d = 0; d < ndim; d++) e *= (size_t)shape[d];
        floats += e;
    }
    const int cap = dp_model_inference_batch_cap(m, (size_t)1 << 30);
    CHECK(cap >= 1 && (size_t)cap * 8 * floats <= (size_t)1 << 30 && (size_t)(cap + 1) * 8 * floats > (size_t)1 << 30,
          "%s: inference cap %d for %zu floats an example", name_or_path, cap, floats);
    CHECK(dp_model_inference_batch_cap(m, 0) == 1, "a cap of no bytes is one example");
    dp_predictor_t *p = NULL;
    CHECK(dp_predictor_new(m, params, 0, &p) == DP_ERR_ARG && p == NULL, "0 devices refused");
    free(x);
    free(params);
    dp_model_free(m);
}

/* A program's mistakes: one line each, no crash. */
static void check_refusals(void) {
    dp_model_t *m = NULL;
    dp_model_builtin("lenet", &m);
    float *params = calloc(dp_model_num_params(m), sizeof(float));
    dp_predictor_t *p = (dp_predictor_t *)&p;
    CHECK(dp_predictor_new(m, NULL, 1, &p) == DP_ERR_ARG && p == NULL &&
          strcmp(dp_error_message(), "predict: no parameters given (NULL)") == 0, "NULL params: '%s'",
          dp_error_message());
    CHECK(dp_predictor_new(NULL, params, 1, &p) == DP_ERR_ARG && strcmp(dp_error_message(), "predict: no model given "
          "(NULL)") == 0, "NULL model: '%s'", dp_error_message());
    CHECK(dp_predictor_new(m, params, 0, &p) == DP_ERR_ARG, "0 devices accepted");
    CHECK(dp_predictor_new(m, params, 1, &p) == DP_OK, "predictor: %s", dp_error_message());
    float x[784] = {0}, logits[10];
    CHECK(dp_predictor_run(p, NULL, 1, logits) == DP_ERR_ARG && strcmp(dp_error_message(), "predict: no inputs given "
          "(NULL)") == 0, "NULL inputs: '%s'", dp_error_message());
    CHECK(dp_predictor_run(p, x, 1, NULL) == DP_ERR_ARG && strcmp(dp_error_message(), "predict: no logits buffer "
          "given (NULL)") == 0, "NULL logits: '%s'", dp_error_message());
    CHECK(dp_predictor_run(p, x, 0, logits) == DP_ERR_ARG, "0 inputs accepted");
    dp_predictor_free(p);
    free(params);
    dp_model_free(m);
}

/* dp_predict_image_input: without a checkpoint dp_image_to_input's floats; with a checkpoint's normalisation
 * (x - mean) / std of them; with its transform the evaluation sample's bytes / 255 (a 6x4 gray PGM as 3
 * channels through Resize(2) + CenterCrop(2); at 4x6 through 'resize 9' as it is, as the run's evaluation
 * took an image of its size); a missing file and a bad input shape are refused. */
static void check_image_input(void) {
    const char *path = testing_tmp_file("in.pgm");
    FILE *f = fopen(path, "wb");
    fprintf(f, "P5\n6 4\n255\n");
    for (int i = 0; i < 24; i++) fputc(10 * i, f);
    fclose(f);
    dp_image_t image;
    float want[2 * 5 * 5], got[2 * 5 * 5];
    CHECK(dp_image_read(path, &image) == DP_OK && dp_image_to_input(&image, 1, 5, 5, want) == DP_OK, "%s",
          dp_error_message());
    dp_image_free(&image);
    CHECK(dp_predict_image_input(NULL, path, 1, 5, 5, got) == DP_OK && memcmp(got, want, sizeof(float) * 25) == 0,
          "no checkpoint: not dp_image_to_input's input (%s)", dp_error_message());
    dp_checkpoint_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.normalize, sizeof info.normalize, "0.5,0.25");
    CHECK(dp_predict_image_input(&info, path, 1, 5, 5, got) == DP_OK, "%s", dp_error_message());
    int same = 1;
    for (int i = 0; i < 25; i++) same &= got[i] == (want[i] - 0.5f) / 0.25f;
    CHECK(same, "normalised input: %g, expected %g", got[0], (want[0] - 0.5f) / 0.25f);
    snprintf(info.normalize, sizeof info.normalize, "0.5,0.4,0.3,0.2,0.2,0.2");
    CHECK(dp_predict_image_input(&info, path, 1, 5, 5, got) != DP_OK, "3 channels' normalisation for 1 accepted");
    snprintf(info.normalize, sizeof info.normalize, "0,0,0,1,1,1");
    snprintf(info.transform, sizeof info.transform, "resize 2");
    dp_sample_options_t eval;
    unsigned char bytes[3 * 2 * 2];
    unsigned char *file = NULL;
    size_t size = 0;
    CHECK(dp_eval_transform_parse("resize 2", 3, 2, 2, &eval) == DP_OK && dp_image_file_bytes(path, &file, &size) ==
          DP_OK && dp_image_sample(file, size, path, &eval, NULL, bytes, NULL) == DP_OK, "%s", dp_error_message());
    free(file);
    CHECK(dp_predict_image_input(&info, path, 3, 2, 2, got) == DP_OK, "%s", dp_error_message());
    same = 1;
    for (int i = 0; i < 12; i++) same &= got[i] == bytes[i] * (1.0f / 255.0f);
    CHECK(same, "transformed input: %g, expected %g", got[0], bytes[0] / 255.0);
    /* an image of exactly the input's size is taken as it is, as the run's evaluation took it (not resized to
     * S and cropped) */
    snprintf(info.transform, sizeof info.transform, "resize 9");
    info.normalize[0] = '\0';
    CHECK(dp_predict_image_input(&info, path, 1, 4, 6, got) == DP_OK, "%s", dp_error_message());
    same = 1;
    for (int i = 0; i < 24; i++) same &= got[i] == (float)(10 * i) * (1.0f / 255.0f);
    CHECK(same, "an image of the input's size through 'resize 9': %g %g, expected %g %g", got[0], got[1], 0.0,
          10 / 255.0);
    CHECK(dp_predict_image_input(&info, testing_tmp_file("none.png"), 3, 2, 2, got) == DP_ERR_IO &&
          strstr(dp_error_message(), "none.png: cannot open image") != NULL, "missing file: '%s'", dp_error_message());
    CHECK(dp_predict_image_input(&info, path, 2, 2, 2, got) == DP_ERR_ARG, "2 channels accepted");
}

int main(void) {
    check_refusals();
    check_image_input();
    check_model("lenet");
    check_model(testing_path("models/tiny_resnet.cfg")); /* batch norm, dropout, residual */
    float logits[4] = {1.0f, 2.0f, 3.0f, 1000.0f}, probs[4];
    dp_softmax(logits, 3, probs);
    double e1 = exp(-2.0), e2 = exp(-1.0), total = e1 + e2 + 1.0;
    CHECK(fabs(probs[0] - e1 / total) < 1e-6 && fabs(probs[2] - 1.0 / total) < 1e-6, "softmax %g %g %g", probs[0],
          probs[1], probs[2]);
    dp_softmax(logits, 4, probs);
    CHECK(probs[3] == 1.0f && probs[0] == 0.0f, "softmax of a large logit is stable: %g %g", probs[3], probs[0]);
    return testing_finish("test_predict");
}
