/* train_output.c - what `dptrain train` prints (train.h), from dp_fit's
 * callbacks: the first lines (what trains on what), the progress bar on a
 * terminal, the warnings and one line per epoch.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "dptrain/backend.h"
#include "dptrain/cpu.h"
#include "dptrain/parallel.h"
#include "train.h"

#define PLURAL(n) ((n) == 1 ? "" : "s")

/* "resuming from FILE: epoch 3, step 50 of 235 (step 520 of the run)", or
 * at an epoch's start "resuming from FILE: epoch 3 (2 epochs done, step
 * 470 of the run)". */
static void print_resume(const char *path, const dp_fit_begin_t *b) {
    if (b->first_step > 0)
        printf("resuming from %s: epoch %d, step %d of %d (step %llu of the run)\n", path, b->first_epoch + 1,
               b->first_step, b->steps_per_epoch, (unsigned long long)b->step_count);
    else
        printf("resuming from %s: epoch %d (%d epoch%s done, step %llu of the run)\n", path, b->first_epoch + 1,
               b->first_epoch, PLURAL(b->first_epoch), (unsigned long long)b->step_count);
}

/* "cosine", or with a warm-up not at its defaults "cosine; warm-up linear
 * from 0.01, sequential" (the method, --warmup-start, --warmup-sequential). */
static void describe_schedule(const train_options_t *o, char *text, size_t size) {
    const int shaped = strcmp(o->warmup_method, "linear") != 0 || !isnan(o->warmup_start) || o->warmup_sequential;
    int at = snprintf(text, size, "%s", o->lr_schedule);
    if (!shaped) return;
    at += snprintf(text + at, size - (size_t)at, "; warm-up %s", o->warmup_method);
    if (!isnan(o->warmup_start))
        at += snprintf(text + at, size - (size_t)at, " from %.9g", dp_float_decimal(o->warmup_start));
    if (o->warmup_sequential) snprintf(text + at, size - (size_t)at, ", sequential");
}

void train_print_begin(const dp_fit_begin_t *begin, void *ctx) {
    train_printer_t *p = ctx;
    const train_options_t *o = p->o;
    p->started = 1;
    train_signals_training(1);
    if (p->record) { /* for the launcher's summary: where training starts */
        p->record->first_step = p->record->step = dp_trainer_step_count(p->trainer);
        p->record->steps_per_epoch = begin->steps_per_epoch;
        p->record->training = 1;
    }
    /* "[cpu:0, cpu:1]", as the book prints its device lists */
    char *devices = p->devices;
    size_t size = sizeof p->devices;
    size_t used = p->world->size > 1 ? (size_t)snprintf(devices, size, "%d ranks x [", p->world->size)
                                     : (size_t)snprintf(devices, size, "[");
    for (const char *c = begin->devices; *c && used + 3 < size; c++) {
        if (*c == ',') devices[used++] = ',', devices[used++] = ' ';
        else devices[used++] = *c;
    }
    snprintf(devices + used, size - used, "]");
    if (begin->allreduce && *begin->allreduce) /* GPUs: NCCL or the host path */
        snprintf(p->allreduce, sizeof p->allreduce, ", allreduce: %s", begin->allreduce);
    char decay[160] = ""; /* adamw's decay is on by default: the first line says how strong; the groups' */
    if (dp_optim_kind_from_name(o->optimizer) == DP_OPTIM_ADAMW || !isnan(o->norm_weight_decay) ||
        !isnan(o->bias_weight_decay)) {
        int at = snprintf(decay, sizeof decay, ", weight decay %g%s", o->weight_decay,
                            p->weight_decay_default ? " (the default of adamw)" : "");
        if (!isnan(o->norm_weight_decay))
            at += snprintf(decay + at, sizeof decay - (size_t)at, ", norm layers %g", o->norm_weight_decay);
        if (!isnan(o->bias_weight_decay))
            snprintf(decay + at, sizeof decay - (size_t)at, ", biases %g", o->bias_weight_decay);
    }
    char smoothing[256] = ""; /* the loss, when it is not plain cross-entropy; clipping; mixing; the EMA */
    int at = 0;
    if (o->label_smoothing != 0.0f)
        at = snprintf(smoothing, sizeof smoothing, ", label smoothing %.9g", dp_float_decimal(o->label_smoothing));
    if (o->clip_grad_norm > 0.0f)
        at += snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", gradient norm clipped at %.9g",
                       dp_float_decimal(o->clip_grad_norm));
    if (o->mixup_alpha > 0.0f)
        at += snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", mixup %.9g",
                       dp_float_decimal(o->mixup_alpha));
    if (o->cutmix_alpha > 0.0f)
        at += snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", cutmix %.9g",
                       dp_float_decimal(o->cutmix_alpha));
    if (o->random_erase > 0.0f)
        at += snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", random erasing %.9g",
                       dp_float_decimal(o->random_erase));
    if (o->ra_sampler)
        at += snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", repeated augmentation x%d", o->ra_reps);
    if (o->model_ema)
        snprintf(smoothing + at, sizeof smoothing - (size_t)at, ", model EMA every %d steps", o->model_ema_steps);
    char schedule[128], test_size[48] = ""; /* --val-image-size: the test's input */
    describe_schedule(o, schedule, sizeof schedule);
    if (o->data.val_image_size)
        snprintf(test_size, sizeof test_size, " at %dx%d", o->data.val_height, o->data.val_width);
    if (!o->quiet)
        printf("training %s on %d image%s (test %d%s%s%s%s), batch %d, %s%s, lr %g (%s%s%s), %d epoch%s, seed %llu%s, "
               "precision %s%s, on %s%s%s%s%s%s\n",
               o->model, p->train_count, PLURAL(p->train_count), p->test_count, p->holdout ? " held out, --holdout " : "",
               p->holdout ? p->holdout : "", p->test_folder ? ": the val folder" : "", test_size, o->batch_size, o->optimizer, decay,
               o->lr,
               schedule, p->lr_default ? "; the default of " : "", p->lr_default ? o->optimizer : "",
               o->epochs, PLURAL(o->epochs), (unsigned long long)o->seed, smoothing,
               dp_precision_name((dp_precision_t)o->precision),
               o->channels_last ? ", channels-last" : "", devices,
               p->devices_note ? " (" : "", p->devices_note ? p->devices_note : "", p->devices_note ? ")" : "",
               p->cuda_graph, p->allreduce);
    if (!o->quiet) printf("%s%s\n", dp_cpu_summary(), /* kernels ISA, CPU model, BLAS */
                          o->winograd ? "; 5x5 convolutions by Winograd F(3x3, 5x5)" : "");
    if (!o->quiet && begin->init) printf("%s\n", begin->init);
    if (!o->quiet && p->normalized[0] && begin->init) printf("%s\n", p->normalized);
    if (!o->quiet && p->frozen[0]) printf("%s\n", p->frozen);
    if (!o->quiet && p->resumed[0]) printf("%s\n", p->resumed);
    if (begin->resumed && !o->quiet && begin->first_epoch < begin->last_epoch)
        print_resume(o->resume_path, begin);
    if (begin->resumed && !o->save_path && begin->first_epoch < begin->last_epoch) /* not taken: never FILE unasked */
        train_warn(p->speaks, "--resume %s without --save: this run saves no checkpoint (give --save %s to go on "
                   "saving there, or --save ANOTHER)", o->resume_path, o->resume_path);
    if (begin->stopped_early && p->speaks)
        printf("checkpoint %s stopped early after epoch %d (--early-stop %d: no better test accuracy since epoch "
               "%d): nothing to train\n", o->resume_path, begin->first_epoch, o->early_stop, begin->best_epoch);
    else if (begin->first_epoch >= begin->last_epoch && p->speaks)
        printf("checkpoint %s has %d epoch%s, --%s %d: nothing to train\n", o->resume_path, begin->first_epoch,
               PLURAL(begin->first_epoch), begin->last_epoch < o->epochs ? "stop-after" : "epochs",
               begin->last_epoch);
}

/* The progress bar, on rank 0's stderr when it is a terminal. */
void train_draw_progress(const dp_fit_step_t *step, void *ctx) {
    train_printer_t *p = ctx;
    if (step->event == DP_FIT_EPOCH_BEGIN) {
        dp_progress_init(&p->bar, p->world->rank == 0 ? stderr : NULL, step->steps);
        p->bar_open = 1;
    } else if (step->event == DP_FIT_STEP_END) {
        dp_progress_update(&p->bar, step->step, step->mean_loss);
    } else if (p->bar_open) {
        dp_progress_finish(&p->bar);
        p->bar_open = 0;
    }
}

/* --log-every-steps' line: "epoch 2/10 step 100/235: loss 0.6213, train acc
 * 0.772, lr 0.2, 10211 images/sec, 0:00:12 left" (the epoch's figures so
 * far; the pace since the last line). */
void train_print_log(const dp_fit_log_t *log, void *ctx) {
    const train_printer_t *p = ctx;
    if (p->o->quiet) return; /* rank 0's, or each rank's in a worklog (train.c) */
    long left = lround(log->eta_sec);
    printf("epoch %d/%d step %d/%d: loss %.4f, train acc %.3f, lr %.4g, %.0f images/sec, %ld:%02ld:%02ld left\n",
           log->epoch, p->o->epochs, log->step, log->steps, log->mean_loss, log->train_acc, log->lr,
           log->images_per_sec, left / 3600, left / 60 % 60, left % 60);
    fflush(stdout);
}

void train_warn(int speaks, const char *fmt, ...) {
    if (!speaks) return;
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dptrain: warning: train: %s\n", message);
}

void train_print_warning(const char *message, void *ctx) {
    const train_printer_t *p = ctx;
    if (p->speaks) fprintf(stderr, "dptrain: warning: %s\n", message);
}

/* What follows the test accuracy on the epoch line: "" or, in one
 * parenthesis, the top-5 accuracy (a model of more than 10 classes: with
 * fewer, as for MNIST and CIFAR-10, top-5 says little) and the moving
 * average's accuracy: " (top-5 0.929)", " (ema 0.861)", " (top-5 0.929,
 * ema 0.861)" (the ema figure is the average's top-1, as without top-5). */
static void test_acc_notes(const dp_epoch_stats_t *s, const train_printer_t *p, char *out, size_t size) {
    const int top5 = s->has_acc5 && dp_model_num_outputs(dp_trainer_model(p->trainer)) > 10;
    out[0] = '\0';
    if (top5 && s->has_ema) snprintf(out, size, " (top-5 %.3f, ema %.3f)", s->test_acc5, s->test_acc_ema);
    else if (top5) snprintf(out, size, " (top-5 %.3f)", s->test_acc5);
    else if (s->has_ema) snprintf(out, size, " (ema %.3f)", s->test_acc_ema); /* the moving average's */
}

/* "epoch 3/10: loss 0.4123, train acc ...": the mean training loss, "loss
 * 0.6123 (label smoothing 0.1)" when it is the smoothed one; no test loss
 * (the test set's figure is its accuracy). */
dp_status_t train_print_epoch(const dp_epoch_stats_t *s, void *ctx) {
    const train_printer_t *p = ctx;
    char smoothing[64] = "", norms[96] = "", notes[64];
    if (s->label_smoothing != 0.0) snprintf(smoothing, sizeof smoothing, " (label smoothing %.9g)", s->label_smoothing);
    if (s->grad_norm_steps > 0) /* gradient clipping: how large the norms were, how often they were cut */
        snprintf(norms, sizeof norms, ", grad norm %.4g (max %.4g, %.0f%% of steps clipped)", s->grad_norm_mean,
                 s->grad_norm_max, 100.0 * s->clipped_fraction);
    test_acc_notes(s, p, notes, sizeof notes);
    if (!p->o->quiet)
        printf("epoch %d/%d: loss %.4f%s, train acc %.3f, test acc %.3f%s%s, lr %.4g, %.1f sec/epoch, "
               "%.0f images/sec on %s\n",
               s->epoch, p->o->epochs, s->train_loss, smoothing, s->train_acc, s->test_acc, notes, norms, s->lr,
               s->epoch_sec, s->images_per_sec, p->devices);
    if (!p->o->quiet && p->o->save_best_path && s->best_epoch == s->epoch)
        printf("epoch %d: the best test accuracy so far, saving %s\n", s->epoch, p->o->save_best_path);
    fflush(stdout);
    return DP_OK;
}

void train_print_result(const dp_fit_result_t *result, dp_trainer_t *trainer, const train_printer_t *p) {
    if (!p->speaks) return;
    if (result->first_epoch >= result->last_epoch) /* the saved model's accuracy instead */
        printf("test acc: %.4f on %d image%s\n", result->test_acc, result->test_count, PLURAL(result->test_count));
    else /* the book's summary line */
        printf("test acc: %.2f, %.1f sec/epoch on %s\n", result->test_acc, result->mean_epoch_sec, p->devices);
    if (result->stopped_early && !p->o->quiet)
        printf("stopped early after epoch %d of %d: no better test accuracy than epoch %d's for %d epoch%s "
               "(--early-stop %d)\n", result->stopped_early, p->o->epochs, result->best_epoch,
               result->stopped_early - result->best_epoch, PLURAL(result->stopped_early - result->best_epoch),
               p->o->early_stop);
    if (p->o->save_best_path && result->best_epoch > 0 && !p->o->quiet)
        printf("best: epoch %d, test acc %.4f (%d/%d correct), %s%s%s\n", result->best_epoch,
               (double)result->best_correct / result->best_count, result->best_correct, result->best_count,
               result->best_epoch > result->first_epoch ? "saved in " : "before the resumed checkpoint (no later "
               "epoch beat it: this run did not write ", p->o->save_best_path,
               result->best_epoch > result->first_epoch ? "" : ")");
    dp_cuda_graph_counts_t graphs;
    if (!dp_trainer_cuda_graph(trainer, &graphs) && !p->o->quiet)
        printf("cuda graph: %llu steps launched as graphs (%llu captures), %llu steps as made (warm-up or a shape "
               "without a graph)\n", (unsigned long long)graphs.launches, (unsigned long long)graphs.captures,
               (unsigned long long)graphs.as_made);
}
