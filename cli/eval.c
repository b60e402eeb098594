/* eval.c - checkpoints on the command line: `dptrain eval` (test accuracy
 * of a saved model), `dptrain inspect` (a checkpoint's metadata and
 * tensors), and the --resume / --save steps of `dptrain train`.
 *
 * Resume policy (what `train --resume` accepts):
 * - refused: another model (the first mismatching tensor is named), another
 *   optimizer kind, a batch size, seed or training-set size (--limit) other
 *   than the checkpoint's (the loader's order and position would not mean
 *   the same batches), a checkpoint that stops inside an epoch (train only
 *   writes at epoch ends), another learning-rate schedule: kind, step length,
 *   gamma, minimum, warm-up, and for cosine its length (--epochs; a cosine
 *   run is interrupted on purpose with --stop-after, not with a smaller
 *   --epochs), since the lr of every later step would differ;
 * - warned about, then used: another learning rate (the schedule's base
 *   lr), weight decay or optimizer hyper-parameter (momentum, nesterov,
 *   betas, eps): a deliberate change, the run is then no longer the
 *   uninterrupted one; another device or rank count (the gradient sums are
 *   added in another order: the same up to float rounding, not bit for
 *   bit). Extending a constant or step schedule with a larger --epochs is
 *   not a change: those schedules do not depend on the length.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dptrain/data.h"
#include "dptrain/model_file.h"
#include "options.h"

/* --- train --resume / --save -------------------------------------------------------- */
static void warn(int speaks, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(int speaks, const char *fmt, ...) {
    if (!speaks) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("dptrain: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* "lr 0.1, weight decay 0" and the kind's own hyper-parameters (%.9g: exact). */
static void describe_optim(const dp_optim_config_t *o, char *text, size_t size) {
    int used = snprintf(text, size, "lr %.9g, weight decay %.9g", o->lr, o->weight_decay);
    if (used < 0 || (size_t)used >= size) return;
    if (o->kind == DP_OPTIM_MOMENTUM)
        snprintf(text + used, size - (size_t)used, ", momentum %.9g%s", o->momentum, o->nesterov ? ", nesterov" : "");
    else if (o->kind == DP_OPTIM_ADAM)
        snprintf(text + used, size - (size_t)used, ", beta1 %.9g, beta2 %.9g, eps %.9g", o->beta1, o->beta2, o->eps);
    else if (o->kind == DP_OPTIM_ADAGRAD)
        snprintf(text + used, size - (size_t)used, ", eps %.9g", o->eps);
}

/* The schedule's shape must be the saved one (its base lr is --lr, which may
 * change with a warning): another shape would not continue the same run. */
static dp_status_t check_schedule(const char *path, const dp_lr_schedule_t *saved, const dp_lr_schedule_t *now) {
    if (saved->kind != now->kind)
        return dp_fail(DP_ERR_ARG, "--resume %s: saved with --lr-schedule %s, this run has %s (resuming would not "
                       "continue the same run; use the saved schedule)", path, dp_lr_schedule_kind_name(saved->kind),
                       dp_lr_schedule_kind_name(now->kind));
    struct { const char *what; double saved, now; } must_match[] = {
        {"--lr-step-epochs", saved->step_epochs, now->step_epochs},
        {"--lr-gamma", saved->gamma, now->gamma},
        {"--epochs (the length of the cosine schedule)", saved->total_epochs, now->total_epochs},
        {"--lr-min", saved->min_lr, now->min_lr},
        {"--warmup-epochs", saved->warmup_epochs, now->warmup_epochs},
        {"--warmup-steps", (double)saved->warmup_steps, (double)now->warmup_steps},
    };
    for (size_t i = 0; i < sizeof must_match / sizeof must_match[0]; i++)
        if (must_match[i].saved != must_match[i].now)
            return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s %.9g, this run has %.9g (another lr schedule "
                           "would not continue the same run; use the saved value)", path, must_match[i].what,
                           must_match[i].saved, must_match[i].now);
    return DP_OK;
}

/* What must be as saved for the loader to mean the same batches. */
static dp_status_t check_position(const char *path, const dp_checkpoint_info_t *saved,
                                  const dp_checkpoint_info_t *run) {
    struct { const char *what; uint64_t saved, now; } must_match[] = {
        {"--batch-size", (uint64_t)saved->batch_size, (uint64_t)run->batch_size},
        {"--seed", saved->seed, run->seed},
        {"training-set size (--limit)", (uint64_t)saved->train_examples, (uint64_t)run->train_examples},
    };
    for (size_t i = 0; i < sizeof must_match / sizeof must_match[0]; i++)
        if (must_match[i].saved != must_match[i].now)
            return dp_fail(DP_ERR_ARG, "--resume %s: saved with %s %" PRIu64 ", this run has %" PRIu64
                           " (resuming would not continue the same run; use the saved value)", path,
                           must_match[i].what, must_match[i].saved, must_match[i].now);
    if (saved->loader_batch != 0)
        return dp_fail(DP_ERR_ARG, "--resume %s: the checkpoint stops inside epoch %d (batch %d); dptrain "
                       "train resumes only at the start of an epoch", path, saved->loader_epoch + 1,
                       saved->loader_batch);
    return DP_OK;
}

dp_status_t cli_resume(const char *path, const dp_model_t *model, dp_trainer_t *trainer,
                       dp_checkpoint_info_t *run, int speaks) {
    dp_checkpoint_t *c;
    DP_TRY(dp_checkpoint_open(path, &c));
    const dp_checkpoint_info_t *saved = dp_checkpoint_info(c);
    float *params = dp_alloc(sizeof(float) * dp_model_num_params(model), "resumed parameters");
    dp_status_t status = params ? dp_checkpoint_load_params(c, model, params) : DP_ERR_NOMEM;
    /* every replica's optimizer (with --sync ps: the server's, on every rank) */
    for (int d = 0; d < dp_trainer_num_devices(trainer) && status == DP_OK; d++)
        status = dp_checkpoint_load_optimizer(c, model, dp_trainer_optimizer(trainer, d));
    if (status == DP_OK) status = check_position(path, saved, run);
    if (status == DP_OK) status = check_schedule(path, &saved->schedule, &run->schedule);
    if (status != DP_OK) goto done;
    char saved_optim[256], run_optim[256];
    describe_optim(&saved->optim, saved_optim, sizeof saved_optim);
    describe_optim(&run->optim, run_optim, sizeof run_optim);
    if (strcmp(saved_optim, run_optim) != 0)
        warn(speaks, "--resume %s: saved with %s; continuing with %s (not what an uninterrupted run would do)",
             path, saved_optim, run_optim);
    if (saved->num_devices * saved->num_ranks != run->num_devices * run->num_ranks)
        warn(speaks, "--resume %s: saved by %d device(s) x %d rank(s), resuming on %d x %d: equal up to float "
             "rounding, not bit for bit", path, saved->num_devices, saved->num_ranks, run->num_devices,
             run->num_ranks);
    dp_trainer_set_params(trainer, params);
    dp_trainer_set_step_count(trainer, saved->step_count);
    run->step_count = saved->step_count;
    run->optimizer_steps = saved->optimizer_steps;
    run->epochs_completed = saved->epochs_completed;
    run->loader_epoch = saved->loader_epoch;
    run->loader_batch = saved->loader_batch;
done:
    free(params);
    dp_checkpoint_close(c);
    return status;
}

dp_status_t cli_save(const char *path, const dp_model_t *model, dp_trainer_t *trainer, dp_checkpoint_info_t *run) {
    run->step_count = dp_trainer_step_count(trainer);
    return dp_checkpoint_save(path, model, dp_trainer_params(trainer, 0), dp_trainer_optimizer(trainer, 0), run);
}

/* --- dptrain eval ------------------------------------------------------------------- */
static const char eval_usage[] =
    "usage: dptrain eval --resume FILE [options]\n"
    "\n"
    "Evaluates a checkpoint written by `dptrain train --save` on the test set,\n"
    "split across the devices (batch norm uses the saved running statistics,\n"
    "dropout is off), and prints\n"
    "  test acc: 0.8340 (8340/10000 correct) on 10000 images, model lenet, epoch 10, FILE\n"
    "\n"
    "options:\n"
    "  --resume FILE       the checkpoint (safetensors)\n"
    "  --model NAME|FILE   the network, a built-in name or a model file (default: the\n"
    "                      checkpoint's); another model's checkpoint is refused,\n"
    "                      naming the first mismatching tensor\n"
    "  --data DIR          directory with t10k-images-idx3-ubyte[.gz] and\n"
    "                      t10k-labels-idx1-ubyte[.gz]; default " DP_DEFAULT_DATA_DIR "\n"
    "  --devices N         devices to evaluate on (default: one per core)\n"
    "  --batch-size N      examples per evaluation batch (default 1000)\n"
    "  --help              show this help\n";

int cmd_eval(int argc, char **argv) {
    const char *resume = NULL, *model_name = NULL, *data_dir = DP_DEFAULT_DATA_DIR;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int devices = cores < 1 ? 1 : cores > 256 ? 256 : (int)cores, batch_size = 1000, help = 0;
    const option_t options[] = {
        {"resume", OPT_STRING, &resume, 0, 0},
        {"model", OPT_STRING, &model_name, 0, 0},
        {"data", OPT_STRING, &data_dir, 0, 0},
        {"devices", OPT_INT, &devices, 1, 256},
        {"batch-size", OPT_INT, &batch_size, 1, 1 << 24},
        {NULL, 0, NULL, 0, 0},
    };
    if (options_parse("eval", options, argc, argv, 2, &help) != DP_OK) return cli_report_error();
    if (help) {
        fputs(eval_usage, stdout);
        return 0;
    }
    if (!resume) {
        dp_fail(DP_ERR_ARG, "eval: --resume FILE is required (the checkpoint to evaluate)");
        return cli_report_error();
    }
    int exit_code = 1;
    dp_checkpoint_t *c = NULL;
    dp_model_t *model = NULL;
    dp_dataset_t test_set = {0};
    dp_trainer_t *trainer = NULL;
    float *params = NULL;
    if (dp_checkpoint_open(resume, &c) != DP_OK) goto done;
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    if (dp_model_load(model_name ? model_name : info->model, &model) != DP_OK) goto done;
    params = dp_alloc(sizeof(float) * dp_model_num_params(model), "parameters");
    if (!params || dp_checkpoint_load_params(c, model, params) != DP_OK) goto done;
    if (dp_dataset_load(data_dir, "t10k", &test_set) != DP_OK) goto done;
    int ch, h, w;
    dp_model_input_shape(model, &ch, &h, &w);
    if (test_set.channels != ch || test_set.height != h || test_set.width != w) {
        dp_fail(DP_ERR_SHAPE, "model %s takes %dx%dx%d images, the data in %s has %dx%dx%d",
                dp_model_name(model), ch, h, w, data_dir, test_set.channels, test_set.height, test_set.width);
        goto done;
    }
    dp_trainer_config_t config = {
        .model = model,
        .num_devices = devices,
        .threads_per_device = 1,
        .optim = {.kind = DP_OPTIM_SGD, .lr = 1.0f}, /* never steps */
    };
    if (dp_trainer_new(&config, &trainer) != DP_OK) goto done;
    dp_trainer_set_params(trainer, params);
    int correct;
    if (dp_trainer_evaluate(trainer, &test_set, batch_size, &correct) != DP_OK) goto done;
    printf("test acc: %.4f (%d/%d correct) on %d images, model %s, epoch %d, %s\n",
           (double)correct / test_set.count, correct, test_set.count, test_set.count, dp_model_name(model),
           info->epochs_completed, resume);
    exit_code = 0;
done:
    if (exit_code != 0) cli_report_error();
    dp_trainer_free(trainer);
    free(params);
    dp_dataset_free(&test_set);
    dp_model_free(model);
    dp_checkpoint_close(c);
    return exit_code;
}

/* --- dptrain inspect ----------------------------------------------------------------- */
static const char inspect_usage[] =
    "usage: dptrain inspect FILE\n"
    "\n"
    "Checks a safetensors file (a dptrain checkpoint or any F32 safetensors file)\n"
    "and prints its metadata, one `key = value` line each, then one line per\n"
    "tensor: name, shape and the sum of its values (float64, in order, %.17g).\n"
    "tools/read_checkpoint.py prints the same lines with numpy alone.\n";

int cmd_inspect(int argc, char **argv) {
    if (argc != 3 || argv[2][0] == '-') {
        int help = argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0);
        fputs(inspect_usage, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    dp_safetensors_t *st;
    if (dp_safetensors_read(argv[2], &st) != DP_OK) return cli_report_error();
    printf("metadata:\n");
    for (int i = 0; i < dp_safetensors_meta_count(st); i++)
        printf("  %s = %s\n", dp_safetensors_meta_at(st, i).key, dp_safetensors_meta_at(st, i).value);
    printf("tensors:\n");
    int exit_code = 0;
    for (int i = 0; i < dp_safetensors_count(st) && exit_code == 0; i++) {
        const dp_st_entry_t *e = dp_safetensors_entry(st, i);
        float *values = dp_alloc(sizeof(float) * (e->numel ? e->numel : 1), "tensor values");
        if (!values) {
            exit_code = cli_report_error();
            break;
        }
        dp_safetensors_copy(e, values);
        double sum = 0.0;
        for (size_t j = 0; j < e->numel; j++) sum += values[j];
        free(values);
        printf("  %s [", e->name);
        for (int d = 0; d < e->ndim; d++) printf(d ? ", %" PRId64 : "%" PRId64, e->shape[d]);
        printf("] sum %.17g\n", sum);
    }
    dp_safetensors_free(st);
    return exit_code;
}
