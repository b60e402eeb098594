/* test_fit.c - dp_fit (fit.h), the epoch loop, used from C.
 *
 * LeNet on 300 synthetic 28x28 images (a bright column per class; 200 test
 * images), 2 devices, momentum + a cosine schedule with warm-up, batch 64
 * (5 steps per epoch, the last one short):
 * - 2 epochs straight with metrics, plot and a checkpoint: the epoch
 *   callback is called once per epoch, in order, with the numbers the
 *   metrics file holds (the file equals dp_metrics_append_run of the callback's
 *   stats, byte for byte); the step callback brackets every epoch (begin,
 *   one call per step with the step number, end); the result agrees with
 *   the last epoch; the model learned something (loss falls);
 * - 1 epoch (stop_after 1 of 2) then a resume to 2 epochs in a fresh
 *   trainer: the checkpoint equals the straight one to the byte, and the
 *   resumed epoch's callback numbers equal the straight run's epoch 2;
 * - resume from a finished checkpoint: nothing trained, no epoch callback,
 *   the saved model's test accuracy (= the straight run's last);
 * - resume with another lr warns once; with another seed or batch size it
 *   is refused (DP_ERR_ARG naming the field) and nothing is written;
 * - a callback that fails stops dp_fit with its status before that epoch's
 *   metrics and checkpoint are written;
 * - bad configs (batch larger than the data, no trainer, epochs 0) fail
 *   with DP_ERR_ARG;
 * - a stop request (stop_request, what SIGTERM sets in dptrain) during step
 *   4 of epoch 1: the epoch's last step (5) does not stop, its end saves as
 *   usual, the first step of epoch 2 (6) stops there, saving a checkpoint
 *   inside the epoch, and dp_fit returns DP_ERR_PREEMPTED saying where;
 *   step_reached follows every step; the resume ends with the straight
 *   run's bytes;
 * - DPTRAIN_FAULT: one that is not well formed is refused before anything
 *   runs (DP_ERR_ARG naming it); one for another rank changes nothing;
 * - top-5: the straight run's epochs have it (10 outputs), at least top-1,
 *   the last the trainer's own dp_trainer_evaluate_counts; a linear model
 *   of 5 outputs has none (not in the metrics), one of 6 has it.
 */
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/batch_source.h"
#include "dptrain/checkpoint.h"
#include "dptrain/cpu.h"
#include "dptrain/fit.h"
#include "dptrain/model_file.h"
#include "testing.h"

#define EPOCHS 2
#define BATCH 64

static int same_files(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *da = testing_read_file(a, &na), *db = testing_read_file(b, &nb);
    int same = da && db && na == nb && na > 0 && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

/* What the callbacks saw. */
typedef struct {
    dp_epoch_stats_t epochs[8];
    int num_epochs;
    int begins;
    dp_fit_begin_t begin;
    int step_events, step_errors; /* step callbacks; ones out of order */
    int expect_step;              /* next DP_FIT_STEP_END's step, -1: outside an epoch */
    int warnings;
    char warning[2048];
    int fail_at_epoch;            /* the epoch callback fails at this epoch (0: never) */
} seen_t;

static dp_status_t on_epoch(const dp_epoch_stats_t *s, void *ctx) {
    seen_t *seen = ctx;
    if (seen->num_epochs < 8) seen->epochs[seen->num_epochs++] = *s;
    if (s->epoch == seen->fail_at_epoch) return dp_fail(DP_ERR_ARG, "callback stops at epoch %d", s->epoch);
    return DP_OK;
}

static void on_begin(const dp_fit_begin_t *b, void *ctx) {
    seen_t *seen = ctx;
    seen->begins++;
    seen->begin = *b;
}

static void on_step(const dp_fit_step_t *s, void *ctx) {
    seen_t *seen = ctx;
    seen->step_events++;
    if (s->event == DP_FIT_EPOCH_BEGIN) {
        if (seen->expect_step != -1 || s->step != 0) seen->step_errors++;
        seen->expect_step = 1;
    } else if (s->event == DP_FIT_STEP_END) {
        if (s->step != seen->expect_step || !(s->mean_loss > 0.0) || s->epoch != seen->num_epochs + 1)
            seen->step_errors++;
        seen->expect_step++;
    } else {
        if (seen->expect_step != s->steps + 1 || s->step != s->steps) seen->step_errors++;
        seen->expect_step = -1;
    }
}

static void on_warning(const char *message, void *ctx) {
    seen_t *seen = ctx;
    seen->warnings++;
    snprintf(seen->warning, sizeof seen->warning, "%s", message);
}

typedef struct {
    dp_model_t *model;
    dp_dataset_t train, test;
} world_t;

/* A fresh trainer (the same initialisation every time: seed 0). */
static dp_trainer_t *new_trainer(const world_t *w, float lr) {
    dp_trainer_config_t tc = {.model = w->model, .num_devices = 2, .threads_per_device = 1,
                              .allreduce = DP_ALLREDUCE_RING,
                              .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = lr, .momentum = 0.9f}, .seed = 0};
    dp_trainer_t *t = NULL;
    if (dp_trainer_new(&tc, &t) != DP_OK) {
        fprintf(stderr, "dp_trainer_new: %s\n", dp_error_message());
        exit(2);
    }
    return t;
}

static dp_fit_config_t fit_config(const world_t *w, dp_trainer_t *t, double lr) {
    return (dp_fit_config_t){
        .trainer = t, .model = w->model, .model_name = "lenet", .train_set = &w->train, .test_set = &w->test,
        .batch_size = BATCH, .epochs = EPOCHS, .seed = 0,
        .schedule = {.kind = DP_LR_COSINE, .lr = lr, .total_epochs = EPOCHS, .min_lr = 0.001, .warmup_steps = 2},
        .eval_batch_size = 100,
        .on_begin = on_begin, .on_step = on_step, .on_warning = on_warning,
    };
}

static seen_t fresh_seen(void) { return (seen_t){.expect_step = -1}; }

/* A stop asked for during step 4 of epoch 1, as a SIGTERM handler would. */
static volatile sig_atomic_t stop_request;
static uint64_t steps_seen[16];
static volatile uint64_t step_reached;
static void stop_at_step_4(const dp_fit_step_t *s, void *ctx) {
    (void)ctx;
    if (s->event != DP_FIT_STEP_END) return;
    int global = (s->epoch - 1) * s->steps + s->step;
    if (global < 16) steps_seen[global] = step_reached; /* what the watcher saw after that step */
    if (s->epoch == 1 && s->step == 4) stop_request = 1;
}

/* 2 epochs straight: the callbacks, the metrics file, the schedule, the
 * result and the plot; saves straight_ck. Returns what the callbacks saw. */
static seen_t test_straight(const world_t *w, const char *straight_ck) {
    const char *metrics = testing_tmp_file("metrics.jsonl");
    const char *metrics_again = testing_tmp_file("metrics_again.jsonl");
    const char *plot = testing_tmp_file("plot.svg");
    unlink(straight_ck), unlink(metrics), unlink(metrics_again), unlink(plot);
    seen_t straight = fresh_seen();
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.metrics_path = metrics;
    fc.plot_path = plot;
    fc.save_path = straight_ck;
    dp_fit_result_t r;
    dp_status_t st = dp_fit(&fc, on_epoch, &straight, &r);
    CHECK(st == DP_OK, "dp_fit: %s", dp_error_message());
    CHECK(straight.num_epochs == EPOCHS, "the epoch callback ran %d times for %d epochs", straight.num_epochs, EPOCHS);
    for (int e = 0; e < straight.num_epochs; e++) {
        const dp_epoch_stats_t *s = &straight.epochs[e];
        CHECK(s->epoch == e + 1, "callback %d has epoch %d", e, s->epoch);
        CHECK(isfinite(s->train_loss) && s->train_acc >= 0 && s->train_acc <= 1 && s->test_acc >= 0 &&
              s->test_acc <= 1 && s->epoch_sec > 0 && s->images_per_sec > 0, "epoch %d: odd numbers", e + 1);
        CHECK(s->num_devices == 2 && strcmp(s->devices, "cpu:0,cpu:1") == 0, "epoch %d: devices %d %s", e + 1,
              s->num_devices, s->devices);
        const dp_run_info_t what_ran = {.isa = dp_isa_name(dp_cpu_isa()), .cpu = dp_cpu_model(),
                                        .blas = dp_cpu_blas(), .precision = "fp32", .layout = "nchw",
                                        .sync = "chunked"}; /* 2 devices, one process, no overlap */
        dp_metrics_append_run(metrics_again, s, &what_ran);
    }
    CHECK(same_files(metrics, metrics_again), "the metrics file holds other numbers than the callback's");
    /* top-5 (10 outputs): set, at least top-1, the trainer's own count of the last model */
    for (int e = 0; e < straight.num_epochs; e++) {
        const dp_epoch_stats_t *s = &straight.epochs[e];
        CHECK(s->has_acc5 && s->test_acc5 > s->test_acc && s->test_acc5 <= 1.0,
              "epoch %d: top-5 %s %g, top-1 %g", e + 1, s->has_acc5 ? "set" : "not set", s->test_acc5, s->test_acc);
    }
    dp_batch_source_t *test_source = NULL;
    dp_eval_counts_t counts = {-1, -1};
    CHECK(dp_memory_source_new((dp_dataset_t *)&w->test, NULL, 0, &test_source) == DP_OK &&
              dp_trainer_evaluate_counts(t, test_source, 100, 0, NULL, &counts) == DP_OK, "%s", dp_error_message());
    dp_batch_source_free(test_source);
    CHECK(straight.num_epochs == 2 && straight.epochs[1].test_acc5 == counts.top5 / 200.0 &&
              straight.epochs[1].test_acc == counts.correct / 200.0,
          "epoch 2: top-5 %g, top-1 %g; the trainer counts %d and %d of 200", straight.epochs[1].test_acc5,
          straight.epochs[1].test_acc, counts.top5, counts.correct);
    CHECK(straight.num_epochs == 2 && straight.epochs[1].train_loss < straight.epochs[0].train_loss,
          "no learning: loss %g then %g", straight.epochs[0].train_loss, straight.epochs[1].train_loss);
    /* the lr of epoch 2's last step: the cosine's end (step 9 of 10) */
    double last_lr = dp_lr_schedule_lr(&fc.schedule, 2 * 5 - 1, 5);
    CHECK(straight.num_epochs == 2 && straight.epochs[1].lr == last_lr, "epoch 2 lr %.17g, schedule %.17g",
          straight.epochs[1].lr, last_lr);
    CHECK(straight.begins == 1 && straight.begin.first_epoch == 0 && straight.begin.last_epoch == EPOCHS &&
          straight.begin.steps_per_epoch == 5, "on_begin: %d calls, epochs [%d, %d), %d steps", straight.begins,
          straight.begin.first_epoch, straight.begin.last_epoch, straight.begin.steps_per_epoch);
    CHECK(straight.step_errors == 0 && straight.step_events == EPOCHS * (5 + 2),
          "step callbacks: %d out of order, %d calls", straight.step_errors, straight.step_events);
    CHECK(r.first_epoch == 0 && r.last_epoch == EPOCHS && r.test_count == 200 && r.step_count == 10 &&
          r.test_acc == straight.epochs[1].test_acc && r.test_correct == (int)lround(r.test_acc * 200) &&
          fabs(r.mean_epoch_sec - (straight.epochs[0].epoch_sec + straight.epochs[1].epoch_sec) / 2) < 1e-12,
          "result: epochs [%d, %d), %d/%d, %d steps", r.first_epoch, r.last_epoch, r.test_correct, r.test_count,
          (int)r.step_count);
    size_t plot_size;
    unsigned char *svg = testing_read_file(plot, &plot_size);
    CHECK(svg && plot_size > 100 && strstr((const char *)svg, "<svg") && strstr((const char *)svg, "</svg>"),
          "no plot written");
    free(svg);
    dp_trainer_free(t);
    return straight;
}

/* 1 epoch, then resumed in a fresh trainer: the same bytes as straight. */
static void test_resume(const world_t *w, const seen_t *straight, const char *straight_ck) {
    const char *resumed_ck = testing_tmp_file("resumed.safetensors");
    unlink(resumed_ck);
    dp_fit_result_t r;
    dp_status_t st;
    seen_t first = fresh_seen(), second = fresh_seen();
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.stop_after = 1;
    fc.save_path = resumed_ck;
    st = dp_fit(&fc, on_epoch, &first, &r);
    CHECK(st == DP_OK && first.num_epochs == 1 && r.last_epoch == 1, "stop_after 1: %s, %d epochs",
          dp_error_message(), first.num_epochs);
    dp_trainer_free(t);
    t = new_trainer(w, 0.05f);
    fc = fit_config(w, t, 0.05);
    fc.resume_path = fc.save_path = resumed_ck;
    st = dp_fit(&fc, on_epoch, &second, &r);
    CHECK(st == DP_OK, "resume: %s", dp_error_message());
    CHECK(second.begin.first_epoch == 1 && second.num_epochs == 1 && second.epochs[0].epoch == 2,
          "resume trained from epoch %d, %d epochs", second.begin.first_epoch, second.num_epochs);
    CHECK(second.warnings == 0, "resume warned: %s", second.warning);
    CHECK(same_files(straight_ck, resumed_ck), "1 epoch + resume is not byte-identical to 2 epochs straight");
    const dp_epoch_stats_t *a = &straight->epochs[1], *b = &second.epochs[0];
    CHECK(a->train_loss == b->train_loss && a->train_acc == b->train_acc && a->test_acc == b->test_acc &&
          a->lr == b->lr, "resumed epoch 2: loss %.17g acc %g test %g lr %g, straight %.17g %g %g %g",
          b->train_loss, b->train_acc, b->test_acc, b->lr, a->train_loss, a->train_acc, a->test_acc, a->lr);
    CHECK(r.step_count == 10, "resumed step count %d", (int)r.step_count);
    dp_trainer_free(t);
}

/* Resuming a finished checkpoint: nothing to train, the saved model's accuracy. */
static void test_finished(const world_t *w, const seen_t *straight, const char *straight_ck) {
    dp_fit_result_t r;
    seen_t none = fresh_seen();
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.resume_path = straight_ck;
    dp_status_t st = dp_fit(&fc, on_epoch, &none, &r);
    CHECK(st == DP_OK && none.num_epochs == 0 && none.step_events == 0 && none.begin.first_epoch == EPOCHS &&
          none.begin.last_epoch == EPOCHS, "finished checkpoint: %s, %d epochs trained", dp_error_message(),
          none.num_epochs);
    CHECK(r.test_acc == straight->epochs[1].test_acc && r.mean_epoch_sec == 0.0,
          "finished checkpoint: test acc %g, saved model's %g", r.test_acc, straight->epochs[1].test_acc);
    dp_trainer_free(t);
}

/* Resuming with another lr: one warning; another seed or batch size: refused, nothing written. */
static void test_resume_refusals(const world_t *w, const char *straight_ck) {
    const char *metrics_again = testing_tmp_file("metrics_again.jsonl");
    seen_t warned = fresh_seen();
    dp_trainer_t *t = new_trainer(w, 0.02f);
    dp_fit_config_t fc = fit_config(w, t, 0.02);
    fc.resume_path = straight_ck;
    dp_status_t st = dp_fit(&fc, NULL, &warned, NULL);
    CHECK(st == DP_OK && warned.warnings == 1 && strstr(warned.warning, "saved with lr 0.0500000007"),
          "another lr: %d warnings '%s'", warned.warnings, warned.warning);
    fc.seed = 7;
    fc.metrics_path = metrics_again;
    unlink(metrics_again);
    seen_t refused = fresh_seen();
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "saved with --seed 0, this run has 7") &&
          refused.begins == 0 && access(metrics_again, F_OK) != 0, "another seed: status %d '%s'", st,
          dp_error_message());
    fc.seed = 0;
    fc.batch_size = 50;
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "--batch-size 64, this run has 50") &&
              refused.begins == 0 && access(metrics_again, F_OK) != 0,
          "another batch size: status %d '%s'", st, dp_error_message());
    dp_trainer_free(t);
    /* another loss: a trainer with label smoothing on a checkpoint saved without */
    dp_trainer_config_t tc = {.model = w->model, .num_devices = 2, .threads_per_device = 1,
                              .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f},
                              .label_smoothing = 0.1f};
    t = NULL;
    CHECK(dp_trainer_new(&tc, &t) == DP_OK, "%s", dp_error_message());
    if (!t) return;
    fc = fit_config(w, t, 0.05);
    fc.resume_path = straight_ck;
    fc.metrics_path = metrics_again;
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "saved with --label-smoothing 0, this run has 0.1 (") &&
              refused.begins == 0 && access(metrics_again, F_OK) != 0,
          "another label smoothing: status %d '%s'", st, dp_error_message());
    dp_trainer_free(t);
}

/* A failing epoch callback stops before that epoch's files; bad configurations are refused. */
static void test_stops_and_refusals(const world_t *w) {
    const char *metrics_again = testing_tmp_file("metrics_again.jsonl");
    seen_t stopping = fresh_seen();
    stopping.fail_at_epoch = 1;
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    const char *stopped_ck = testing_tmp_file("stopped.safetensors");
    unlink(stopped_ck);
    unlink(metrics_again);
    fc.save_path = stopped_ck;
    fc.metrics_path = metrics_again;
    dp_status_t st = dp_fit(&fc, on_epoch, &stopping, NULL);
    CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "callback stops at epoch 1") && stopping.num_epochs == 1 &&
          access(stopped_ck, F_OK) != 0 && access(metrics_again, F_OK) != 0,
          "failing callback: status %d '%s', %d epochs", st, dp_error_message(), stopping.num_epochs);

    /* --- bad configs ------------------------------------------------------------------ */
    fc = fit_config(w, t, 0.05);
    fc.batch_size = 301;
    CHECK(dp_fit(&fc, NULL, NULL, NULL) == DP_ERR_ARG && strstr(dp_error_message(), "larger than the training set"),
          "batch 301 of 300: '%s'", dp_error_message());
    fc = fit_config(w, t, 0.05);
    fc.epochs = 0;
    CHECK(dp_fit(&fc, NULL, NULL, NULL) == DP_ERR_ARG && strstr(dp_error_message(), "epochs must be >= 1"),
          "epochs 0: '%s'", dp_error_message());
    fc = fit_config(w, NULL, 0.05);
    CHECK(dp_fit(&fc, NULL, NULL, NULL) == DP_ERR_ARG, "no trainer accepted");
    CHECK(dp_fit(NULL, NULL, NULL, NULL) == DP_ERR_ARG && strcmp(dp_error_message(), "fit: no configuration given "
          "(NULL)") == 0, "dp_fit(NULL): '%s'", dp_error_message());
    dp_trainer_free(t);
}

/* What a program may get wrong, refused before a step is taken or a file
 * written: another model than the trainer's, data of another shape, an
 * output path that cannot be written; and a second dp_fit on a trainer
 * that has trained (it would train epochs 0.. again at later steps' lr). */
static void test_library_refusals(const world_t *w) {
    const char *metrics = testing_tmp_file("refused.jsonl");
    unlink(metrics);
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_model_t *other = NULL;
    dp_model_load("lenet", &other);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.model = other;
    fc.metrics_path = metrics;
    seen_t refused = fresh_seen();
    dp_status_t st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "fit: config.model (lenet) is not the trainer's model "
          "(lenet): give the model the trainer was made with") == 0, "another model: %d '%s'", st, dp_error_message());
    dp_model_free(other);

    dp_dataset_t rgb = testing_column_dataset(100, 32, 10, 2, 4, 96, 13);
    dp_dataset_t rgb3 = {0};
    uint8_t *px = malloc((size_t)rgb.count * 3 * 32 * 32);
    for (int i = 0; px && i < rgb.count; i++)
        for (int c = 0; c < 3; c++) memcpy(px + ((size_t)i * 3 + c) * 1024, rgb.pixels + (size_t)i * 1024, 1024);
    CHECK(px && dp_dataset_from_memory(&rgb3, rgb.count, 3, 32, 32, 10, px, rgb.labels) == DP_OK, "rgb data: %s",
          dp_error_message());
    free(px);
    fc = fit_config(w, t, 0.05);
    fc.test_set = &rgb3;
    fc.metrics_path = metrics;
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "fit: the test data's samples are 3 x 32 x 32 (C x H x W), "
          "model lenet takes 1 x 28 x 28") == 0, "3x32x32 test data: %d '%s'", st, dp_error_message());
    dp_dataset_free(&rgb);
    dp_dataset_free(&rgb3);

    fc = fit_config(w, t, 0.05);
    fc.metrics_path = metrics;
    fc.save_path = testing_tmpdir();
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_IO && strstr(dp_error_message(), "fit: save_path ") &&
          strstr(dp_error_message(), " is a directory (the name of a file to write is expected)"),
          "save_path a directory: %d '%s'", st, dp_error_message());
    fc.save_path = "";
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "fit: save_path is \"\" (no file named)") == 0,
          "save_path \"\": %d '%s'", st, dp_error_message());
    fc.save_path = "/nonexistent-dptrain-dir/ck.safetensors";
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_IO && strcmp(dp_error_message(), "fit: save_path /nonexistent-dptrain-dir/ck.safetensors: "
          "directory '/nonexistent-dptrain-dir' is not writable (No such file or directory)") == 0,
          "save_path in a missing directory: %d '%s'", st, dp_error_message());
    fc.save_path = NULL;
    fc.plot_path = "/nonexistent-dptrain-dir/p.svg";
    st = dp_fit(&fc, on_epoch, &refused, NULL);
    CHECK(st == DP_ERR_IO && strstr(dp_error_message(), "fit: plot_path /nonexistent-dptrain-dir/p.svg: directory"),
          "plot_path in a missing directory: %d '%s'", st, dp_error_message());
    CHECK(refused.begins == 0 && refused.num_epochs == 0 && dp_trainer_step_count(t) == 0 &&
          access(metrics, F_OK) != 0, "a refused dp_fit ran: %d begins, %d epochs, %d steps, metrics written: %d",
          refused.begins, refused.num_epochs, (int)dp_trainer_step_count(t), access(metrics, F_OK) == 0);

    /* one trainer, one run: the second call is refused, changing nothing */
    fc = fit_config(w, t, 0.05);
    fc.epochs = 1;
    fc.schedule.total_epochs = 1;
    seen_t once = fresh_seen();
    CHECK(dp_fit(&fc, on_epoch, &once, NULL) == DP_OK && dp_trainer_step_count(t) == 5, "1 epoch: %s",
          dp_error_message());
    fc.metrics_path = metrics;
    seen_t twice = fresh_seen();
    st = dp_fit(&fc, on_epoch, &twice, NULL);
    CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "fit: the trainer has taken 5 steps already (an earlier "
          "dp_fit or dp_trainer_step): a new run needs a new trainer; to continue, resume from a checkpoint "
          "(resume_path)") == 0 && twice.begins == 0 && dp_trainer_step_count(t) == 5 && access(metrics, F_OK) != 0,
          "a second dp_fit: %d '%s', %d steps", st, dp_error_message(), (int)dp_trainer_step_count(t));
    dp_trainer_free(t);
}

/* A stop request (a SIGTERM handler's): the next step inside an epoch saves
 * and stops; resuming from it gives the straight run's bytes. */
static void test_stop_request(const world_t *w, const char *straight_ck) {
    const char *stop_ck = testing_tmp_file("stop.safetensors");
    unlink(stop_ck);
    dp_trainer_t *t = new_trainer(w, 0.05f);
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.save_path = stop_ck;
    fc.on_step = stop_at_step_4;
    fc.stop_request = &stop_request;
    fc.step_reached = &step_reached;
    seen_t stopped = fresh_seen();
    dp_status_t st = dp_fit(&fc, NULL, &stopped, NULL);
    CHECK(st == DP_ERR_PREEMPTED && strstr(dp_error_message(), "preempted: stopped after step 6 (epoch 2, step 1 of 5) "
          "and saved it to ") && dp_trainer_step_count(t) == 6 && step_reached == 6,
          "stop: status %d '%s', step count %d, reached %d", st, dp_error_message(), (int)dp_trainer_step_count(t),
          (int)step_reached);
    int followed = 1;
    for (int s = 1; s <= 5; s++) followed &= steps_seen[s] == (uint64_t)s;
    CHECK(followed, "step_reached did not follow the steps: %d %d %d %d %d", (int)steps_seen[1], (int)steps_seen[2],
          (int)steps_seen[3], (int)steps_seen[4], (int)steps_seen[5]);
    dp_checkpoint_t *saved = NULL; /* the stop's own checkpoint: inside epoch 2, after its first step */
    CHECK(dp_checkpoint_open(stop_ck, &saved) == DP_OK && dp_checkpoint_info(saved)->step_count == 6 &&
          dp_checkpoint_info(saved)->loader_epoch == 1 && dp_checkpoint_info(saved)->loader_batch == 1,
          "the stop's checkpoint: step %d, loader at epoch %d batch %d", saved ? (int)dp_checkpoint_info(saved)->step_count : -1,
          saved ? dp_checkpoint_info(saved)->loader_epoch : -1, saved ? dp_checkpoint_info(saved)->loader_batch : -1);
    dp_checkpoint_close(saved);
    dp_trainer_free(t);
    stop_request = 0;
    t = new_trainer(w, 0.05f);
    fc = fit_config(w, t, 0.05);
    fc.resume_path = fc.save_path = stop_ck;
    fc.stop_request = &stop_request;
    seen_t resumed = fresh_seen();
    st = dp_fit(&fc, NULL, &resumed, NULL);
    CHECK(st == DP_OK && same_files(straight_ck, stop_ck), "the stop's resume: %s; the same bytes as straight: %d",
          dp_error_message(), same_files(straight_ck, stop_ck));
    dp_trainer_free(t);
}

/* DPTRAIN_FAULT: malformed values refused before anything runs; faults for
 * another rank, another attempt or a step past the end harm nothing. */
static void test_fault_variable(const world_t *w) {
    const char *bad_faults[] = {"kill", "kill:1", "boom:0:3", "kill:0:3:x", "exit0:0:3", "exit256:0:3", "kill:-1:3",
                                "kill:0:3,", "kill:0:3x"};
    dp_trainer_t *t = new_trainer(w, 0.05f);
    for (size_t i = 0; i < sizeof bad_faults / sizeof bad_faults[0]; i++) {
        setenv("DPTRAIN_FAULT", bad_faults[i], 1);
        seen_t nothing = fresh_seen();
        dp_fit_config_t fc = fit_config(w, t, 0.05);
        dp_status_t st = dp_fit(&fc, on_epoch, &nothing, NULL);
        CHECK(st == DP_ERR_ARG && strncmp(dp_error_message(), "DPTRAIN_FAULT: ", 15) == 0 && nothing.begins == 0,
              "DPTRAIN_FAULT=%s: status %d '%s'", bad_faults[i], st, dp_error_message());
    }
    setenv("DPTRAIN_FAULT", "kill:1:3,exit4:0:3:1,hang:0:9:*", 1); /* another rank's, another attempt's, a step past the end */
    dp_fit_config_t fc = fit_config(w, t, 0.05);
    fc.epochs = 1;
    fc.schedule.total_epochs = 1;
    seen_t unharmed = fresh_seen();
    dp_status_t st = dp_fit(&fc, NULL, &unharmed, NULL);
    unsetenv("DPTRAIN_FAULT");
    CHECK(st == DP_OK, "faults for another rank or attempt: %s", dp_error_message());
    dp_trainer_free(t);
}

/* has_acc5 and test_acc5 by the model's outputs: 1 epoch of a linear
 * model on 5 classes with 5 outputs (every answer is in the top 5: not
 * set, no "test_acc5" in the metrics) and with 6 (set, and in them). */
static void test_top5_outputs(void) {
    dp_dataset_t train = testing_column_dataset(100, 28, 5, 2, 4, 96, 21);
    dp_dataset_t test = testing_column_dataset(50, 28, 5, 2, 4, 96, 22);
    for (int outputs = 5; outputs <= 6; outputs++) {
        char text[256];
        snprintf(text, sizeof text, "[net]\nname = linear%d\nchannels = 1\nheight = 28\nwidth = 28\n\n[flatten]\n\n"
                 "[linear]\nname = fc\nout = %d\n", outputs, outputs);
        dp_model_t *m = NULL;
        CHECK(dp_model_parse(text, strlen(text), "linear.cfg", &m) == DP_OK, "%s", dp_error_message());
        if (!m) continue;
        world_t w = {.model = m, .train = train, .test = test};
        dp_trainer_t *t = new_trainer(&w, 0.05f);
        dp_fit_config_t fc = fit_config(&w, t, 0.05);
        fc.epochs = fc.schedule.total_epochs = 1;
        fc.batch_size = 50;
        fc.metrics_path = testing_tmp_file("metrics_top5.jsonl");
        unlink(fc.metrics_path);
        seen_t seen = fresh_seen();
        CHECK(dp_fit(&fc, on_epoch, &seen, NULL) == DP_OK && seen.num_epochs == 1, "%d outputs: %s", outputs,
              dp_error_message());
        size_t size = 0;
        char *line = (char *)testing_read_file(fc.metrics_path, &size);
        const int has = seen.num_epochs == 1 && seen.epochs[0].has_acc5;
        CHECK(has == (outputs > 5) && (line && strstr(line, "\"test_acc5\": ")) == (outputs > 5),
              "%d outputs: top-5 %s, metrics %s", outputs, has ? "set" : "not set", line ? line : "(none)");
        if (has)
            CHECK(seen.epochs[0].test_acc5 >= seen.epochs[0].test_acc, "%d outputs: top-5 %g below top-1 %g",
                  outputs, seen.epochs[0].test_acc5, seen.epochs[0].test_acc);
        free(line);
        dp_trainer_free(t);
        dp_model_free(m);
    }
    dp_dataset_free(&train);
    dp_dataset_free(&test);
}

int main(void) {
    world_t w = {0};
    if (dp_model_load("lenet", &w.model) != DP_OK) {
        fprintf(stderr, "%s\n", dp_error_message());
        return 2;
    }
    w.train = testing_column_dataset(300, 28, 10, 2, 4, 96, 11);
    w.test = testing_column_dataset(200, 28, 10, 2, 4, 96, 12);
    char straight_ck[512]; /* testing_tmp_file's slots are reused */
    snprintf(straight_ck, sizeof straight_ck, "%s", testing_tmp_file("straight.safetensors"));
    seen_t straight = test_straight(&w, straight_ck);
    test_resume(&w, &straight, straight_ck);
    test_finished(&w, &straight, straight_ck);
    test_resume_refusals(&w, straight_ck);
    test_stops_and_refusals(&w);
    test_library_refusals(&w);
    test_stop_request(&w, straight_ck);
    test_fault_variable(&w);
    test_top5_outputs();
    dp_dataset_free(&w.train);
    dp_dataset_free(&w.test);
    dp_model_free(w.model);
    return testing_finish("test_fit");
}
