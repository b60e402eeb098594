/* train.c - `dptrain train`: parse the options, load the data, build the
 * model and the trainer, run dp_fit (fit.h: the epochs, metrics, plot,
 * checkpoints, resume); its lines and the progress bar are
 * train_output.c's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "data_options.h"
#include "devices.h"
#include "dptrain/comm.h"
#include "dptrain/cpu.h"
#include "dptrain/data.h"
#include "dptrain/fit.h"
#include "dptrain/io.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/parallel.h"
#include "dptrain/schedule.h"
#include "image_size.h"
#include "options.h"
#include "train.h"
#include "world.h"


#define MAX_DEVICES CLI_MAX_DEVICES

/* --precision (or --tf32) and --winograd on each distinct table of the
 * devices (a setting is the table's: one GPU's, the CPU's). */
static dp_status_t device_settings(const dp_backend_t *const *backends, const int *ids, int count,
                                   const train_options_t *o, int winograd) {
    char option[64];
    if (o->precision_text) snprintf(option, sizeof option, "--precision %s", o->precision_text);
    else snprintf(option, sizeof option, "--tf32");
    DP_TRY(cli_set_precision("train", option, backends, ids, count, (dp_precision_t)o->precision));
    for (int d = 0; d < count; d++) {
        const dp_backend_t *be = backends[d];
        int seen = 0;
        for (int e = 0; e < d && !seen; e++) seen = backends[e] == be;
        if (seen) continue;
        if (winograd && !be->set_winograd)
            return dp_fail(DP_ERR_ARG, "train: --winograd: %s devices have no Winograd convolution (CPU devices do)",
                           be->name);
        if (winograd) DP_TRY(be->set_winograd(be->ctx, 1));
    }
    return DP_OK;
}

/* --model, or without it the --resume checkpoint's model (the model file
 * it carries: it resumes from any folder), or lenet; o->model names it. */
static dp_status_t train_load_model(train_options_t *o, dp_model_t **model) {
    if (o->model || !o->resume_path) {
        if (!o->model) o->model = "lenet";
        return dp_model_load(o->model, model);
    }
    dp_checkpoint_t *c;
    DP_TRY(dp_checkpoint_open(o->resume_path, &c));
    dp_status_t status = dp_checkpoint_load_model(c, NULL, model);
    static char saved_name[sizeof ((dp_checkpoint_info_t *)0)->model];
    snprintf(saved_name, sizeof saved_name, "%s", dp_checkpoint_info(c)->model);
    o->model = saved_name;
    dp_checkpoint_close(c);
    return status;
}

/* --image-size and --num-classes: the model rebuilt from its model file's
 * text with that input size and head (model_file.h). */
static dp_status_t edit_model(const train_options_t *o, dp_model_t **model) {
    if (!o->image_size && !o->num_classes) return DP_OK;
    const char *what = o->image_size ? "--image-size" : "--num-classes";
    int height = 0, width = 0;
    if (o->image_size) DP_TRY(cli_parse_image_size("train", o->image_size, &height, &width));
    size_t len;
    const char *source = dp_model_source(*model, &len);
    if (!source) { /* a built-in network: its model file, where one is shipped, is the same network */
        char file[128];
        dp_model_t *shipped = NULL;
        int found = snprintf(file, sizeof file, "%s.cfg", o->model) < (int)sizeof file &&
                    dp_model_load(file, &shipped) == DP_OK;
        dp_model_free(shipped);
        if (found)
            return dp_fail(DP_ERR_ARG, "train: %s: %s is a built-in network; give its model file, --model %s (the "
                           "same network, which %s edits)", what, o->model, file, what);
        return dp_fail(DP_ERR_ARG, "train: %s: %s is a built-in network; give a model file (--model FILE, "
                       "docs/model-format.md)", what, o->model);
    }
    char *text = NULL, *changed = NULL;
    size_t text_len = len;
    dp_status_t status = DP_OK;
    if (!(text = dp_alloc(len + 1, "model file text"))) return DP_ERR_NOMEM;
    memcpy(text, source, len);
    if (o->image_size &&
        (status = dp_model_file_set_input_size(text, text_len, o->model, height, width, &changed, &text_len)) == DP_OK) {
        free(text);
        text = changed;
    }
    if (status == DP_OK && o->num_classes &&
        (status = dp_model_file_set_outputs(text, text_len, o->model, o->num_classes, &changed, &text_len)) == DP_OK) {
        free(text);
        text = changed;
    }
    dp_model_t *rebuilt = NULL;
    if (status == DP_OK) status = dp_model_parse(text, text_len, o->model, &rebuilt);
    free(text);
    if (status == DP_OK && o->num_classes && dp_model_num_outputs(rebuilt) != o->num_classes)
        status = dp_fail(DP_ERR_ARG, "train: --num-classes %d: the last linear layer of %s is not its output (%d "
                         "outputs)", o->num_classes, o->model, dp_model_num_outputs(rebuilt));
    if (status != DP_OK) {
        dp_model_free(rebuilt);
        return status;
    }
    dp_model_free(*model);
    *model = rebuilt;
    return DP_OK;
}

/* --val-image-size (or a resume's): *val_model, the same network at that
 * input size for the per-epoch test (image_size.c: refused where a
 * parameter's shape would change), and the test data made that size; NULL
 * when the size is the model's own. */
static dp_status_t val_size_model(train_options_t *o, const dp_model_t *model, dp_model_t **val_model) {
    *val_model = NULL;
    o->data.val_image_size = NULL;
    if (!o->val_image_size) return DP_OK;
    int c, h, w, val_h, val_w;
    if (cli_parse_image_size("train", o->val_image_size, &val_h, &val_w) != DP_OK)
        return dp_fail(DP_ERR_ARG, "train: --val-image-size: '%s' is not N or HxW (pixels, 1 to 65536: 224, 64x96)",
                       o->val_image_size);
    dp_model_input_shape(model, &c, &h, &w);
    if (val_h == h && val_w == w) return DP_OK; /* the model's own size: its trainer tests */
    char option[96];
    snprintf(option, sizeof option, "--val-image-size %s", o->val_image_size);
    DP_TRY(cli_model_copy_at_size("train", option, model, val_h, val_w, val_model));
    o->data.val_image_size = o->val_image_size;
    o->data.val_height = val_h;
    o->data.val_width = val_w;
    return DP_OK;
}

/* The run's model (train_load_model: sets o->model when not given), its
 * name short enough for checkpoints, its layers frozen as --freeze or a
 * resume's checkpoint says (frozen_note: what to print), and its copy at
 * --val-image-size (val_size_model). */
static dp_status_t load_model(train_options_t *o, const train_saved_t *saved, dp_model_t **model,
                              dp_model_t **val_model, char *frozen_note, size_t note_size) {
    DP_TRY(train_load_model(o, model));
    DP_TRY(edit_model(o, model));
    if (strlen(o->model) >= sizeof ((dp_checkpoint_info_t *)0)->model)
        return dp_fail(DP_ERR_ARG, "train: --model: a path of %zu bytes, checkpoints hold up to %zu", strlen(o->model),
                       sizeof ((dp_checkpoint_info_t *)0)->model - 1);
    DP_TRY(train_freeze_model(o, saved, *model, frozen_note, note_size));
    return val_size_model(o, *model, val_model);
}

/* The run's data for the model's input (data_options.h), its loader threads
 * sharing the cores with the CPU devices' threads; without --normalize the
 * checkpoint's (saved); a --limit past the data warned about. */
static dp_status_t open_data(train_options_t *o, const dp_model_t *model, const dp_backend_t *const *backends,
                             int num_devices, const train_saved_t *saved, const dp_world_t *world, int speaks,
                             cli_data_t *data) {
    int c, h, w, cpu_threads = 0;
    dp_model_input_shape(model, &c, &h, &w);
    for (int d = 0; d < num_devices; d++)
        cpu_threads += strcmp(backends[d]->name, "cpu") == 0 ? o->threads_per_device : 0;
    o->data.dir = o->data_dir;
    o->data.limit = o->limit;
    o->data.normalize = o->normalize ? o->normalize : saved->normalize[0] ? saved->normalize : NULL;
    o->data.augment = o->augment;
    o->data.model = o->model;
    DP_TRY(cli_data_open(&o->data, 1, c, h, w, NULL, 0, cpu_threads, world, data));
    /* A resume on data of the same classes and hold-out (another --holdout or other classes change the count
     * too: dp_fit names those) that has other training images than when its checkpoint was saved: files added
     * or removed since (its data.train_total, the size before --limit, against this data's); in a checkpoint
     * without that key, its training-set size taken as --limit above what the data holds (a run's --limit is
     * never above its data). Not as the --limit the run never had. */
    const dp_source_info_t *train = dp_batch_source_info(data->train);
    const train_resume_t *r = &saved->resume;
    const int same_split = r->taken && !train_option_given(o, &o->data.holdout) &&
        (!r->classes_hash || r->classes_hash == train_classes_hash(train->class_names, train->num_classes));
    if (same_split && r->data_train_total > 0 && r->data_train_total != data->train_total)
        return dp_fail(DP_ERR_ARG, "train --resume %s: its run trained on %s when it had %d training images, it has "
                       "%d now (files %s since the checkpoint): a resume continues on the images it trained on; to "
                       "train on the data as it is, start a new run with --init %s", o->resume_path, o->data_dir,
                       r->data_train_total, data->train_total,
                       r->data_train_total > data->train_total ? "removed or moved" : "added", o->resume_path);
    if (same_split && !r->data_train_total && !train_option_given(o, &o->limit) &&
        r->train_examples > data->train_total)
        return dp_fail(DP_ERR_ARG, "train --resume %s: its run trained on %d images of %s, which has %d training "
                       "images now (files removed or moved since the checkpoint): a resume continues on the images "
                       "it trained on; to train on the data as it is, start a new run with --init %s", o->resume_path,
                       r->train_examples, o->data_dir, data->train_total, o->resume_path);
    train_check_limit(o, data->train_total, speaks);
    return DP_OK;
}

/* ", cuda graph: on" or ", cuda graph: off (why)" for the first line, when
 * a device is a GPU or --cuda-graph was given (CPU devices say nothing
 * unless asked); else "". */
static void cuda_graph_note(dp_trainer_t *trainer, const dp_backend_t *const *backends, int num_devices, int asked,
                            char *note, size_t size) {
    int on_cuda = 0;
    for (int d = 0; d < num_devices; d++) on_cuda |= strcmp(backends[d]->name, "cuda") == 0;
    const char *graph_why = dp_trainer_cuda_graph(trainer, NULL);
    note[0] = '\0';
    if (on_cuda || asked)
        snprintf(note, size, ", cuda graph: %s%s%s", graph_why ? "off (" : "on", graph_why ? graph_why : "",
                 graph_why ? ")" : "");
}

/* What train_main tells cmd_train besides its status. */
typedef struct {
    rank_record_t *record;                      /* in: the launcher's record (NULL: none) */
    const volatile sig_atomic_t *stop_request;  /* in: set by SIGTERM (train_signals.c) */
    int alone;                                  /* out: the failure is this rank's alone */
} train_outcome_t;

/* The options, parsed on every rank: a mistake in them ends every rank
 * together, and every rank must run the same command (mpirun gives each
 * the same; dp_world_check_same is a collective: every rank knows). */
static dp_status_t agree_options(int argc, char **argv, const dp_world_t *world, train_options_t *o, int *help) {
    DP_TRY(dp_world_agree(train_options_parse(argc, argv, 2, o, help)));
    if (*help) return DP_OK;
    if (o->comm_timeout >= 0.0f) dp_world_set_timeout(o->comm_timeout);
    return cli_world_check_options(world, argc, argv);
}

/* Every device of every rank needs an example of each batch, and one
 * optimizer step's batch must fit in the training set. */
static dp_status_t check_batch(const train_options_t *o, int devices_in_world, int train_count) {
    if (o->batch_size < devices_in_world)
        return dp_fail(DP_ERR_ARG, "train: --batch-size %d is smaller than the number of devices (%d): every device "
                       "needs at least one example", o->batch_size, devices_in_world);
    if (o->batch_size * o->accumulate <= train_count) return DP_OK;
    if (o->accumulate > 1)
        return dp_fail(DP_ERR_ARG, "train: --batch-size %d x --accumulate %d is larger than the training set "
                       "(%d images)", o->batch_size, o->accumulate, train_count);
    if (!o->batch_size_given) /* the default or a resume's: say so, and what to give (a small folder of photos) */
        return dp_fail(DP_ERR_ARG, "train: --batch-size %d (%s) is larger than the training set (%d images):"
                       " give --batch-size %d or less%s", o->batch_size, o->resume_path ? "the checkpoint's" :
                       "the default", train_count, train_count,
                       o->resume_path ? " (a resume: the run's own --batch-size)" : "");
    return dp_fail(DP_ERR_ARG, "train: --batch-size %d is larger than the training set (%d images)", o->batch_size,
                   train_count);
}

/* The run's devices: --devices, or the default (every GPU, else a CPU
 * device per core: *note says which and why), with their settings. */
static dp_status_t train_devices(train_options_t *o, int *device_ids, int *num_devices,
                                 const dp_backend_t **backends, char *note, size_t note_size) {
    note[0] = '\0';
    if (o->devices) DP_TRY(cli_parse_devices("train", o->devices, device_ids, num_devices, backends));
    else DP_TRY(cli_default_devices(device_ids, num_devices, backends, note, note_size));
    return device_settings(backends, device_ids, *num_devices, o, o->winograd);
}

/* The trainer of these options on these devices (its set-up makes
 * collectives: every rank calls it). */
static dp_status_t make_trainer(const train_options_t *o, const train_settings_t *set, dp_model_t *model,
                                const dp_world_t *world, int *device_ids, int num_devices,
                                const dp_backend_t **backends, dp_trainer_t **trainer) {
    dp_trainer_config_t config = {
        .model = model,
        .num_devices = num_devices,
        .threads_per_device = o->threads_per_device,
        .device_ids = device_ids,
        .allreduce = set->allreduce,
        .overlap = set->overlap,
        .sync = set->sync,
        .world = *world,
        .optim = set->optim,
        .seed = o->seed,
        .sync_batch_norm = o->sync_batch_norm,
        .label_smoothing = o->label_smoothing,
        .clip_grad_norm = o->clip_grad_norm,
        .mix = {.mixup_alpha = o->mixup_alpha, .cutmix_alpha = o->cutmix_alpha},
        .random_erase = o->random_erase,
        .model_ema = o->model_ema,
        .backend = backends[0],
        .backends = backends,
        .accumulate = o->accumulate,
        .profile_steps = set->profile_window,
        .profile_warmup = set->profile_warmup,
        .cuda_graph_off = o->cuda_graph && strcmp(o->cuda_graph, "off") == 0,
    };
    return dp_trainer_new(&config, trainer);
}

/* The evaluation-only trainer of --val-image-size's model on the same
 * devices and ranks (never steps: fit.c gives it the trainer's parameters
 * before every test), NULL without one. */
static dp_status_t make_val_trainer(const train_options_t *o, dp_model_t *val_model, const dp_world_t *world,
                                    int *device_ids, int num_devices, const dp_backend_t **backends,
                                    dp_trainer_t **val_trainer) {
    *val_trainer = NULL;
    if (!val_model) return DP_OK;
    dp_trainer_config_t config = {
        .model = val_model,
        .num_devices = num_devices,
        .threads_per_device = o->threads_per_device,
        .device_ids = device_ids,
        .world = *world,
        .optim = {.kind = DP_OPTIM_SGD, .lr = 1.0f}, /* never steps */
        .backend = backends[0],
        .backends = backends,
    };
    return dp_trainer_new(&config, val_trainer);
}

/* --profile's table (where this rank speaks) and its line in --metrics, after the run. */
static dp_status_t report_profile(const train_options_t *o, dp_trainer_t *trainer, dp_precision_t precision,
                                  int speaks) {
    if (speaks) DP_TRY(train_print_profile(trainer, dp_precision_name(precision), o->channels_last));
    if (o->metrics_path) DP_TRY(train_append_profile(o->metrics_path, trainer));
    return DP_OK;
}

static dp_status_t train_main(int argc, char **argv, const dp_world_t *world, train_outcome_t *outcome) {
    train_options_t o;
    train_settings_t set;
    int help = 0;
    dp_status_t status = agree_options(argc, argv, world, &o, &help);
    if (status != DP_OK) return status;
    if (help) {
        if (world->rank == 0) printf("%s%s", train_usage, cli_data_usage_train);
        return DP_OK;
    }
    /* From here to the agreement before the trainer, a failure goes to done,
     * where every rank learns the first rank's (dp_world_agree). */
    dp_model_t *model = NULL, *val_model = NULL; /* val_model: at --val-image-size */
    cli_data_t data = {0};
    dp_trainer_t *trainer = NULL, *val_trainer = NULL;
    train_printer_t printer = {0};
    int agreed = 0; /* past the agreement: a failure is this rank's alone */
    if (o.comm_timeout < 0.0f) {
        status = dp_fail(DP_ERR_ARG, "train: --comm-timeout must be >= 0 seconds, found %g", o.comm_timeout);
        goto done;
    }
    /* Rank 0 alone writes files and prints to the terminal; the others
     * print only into their own worklog (dptrain launch --log-dir). */
    const char *log_dir = getenv("DPTRAIN_LOG_DIR");
    int speaks = world->rank == 0 || (log_dir && *log_dir);
    /* the --init or --resume checkpoint's freeze list and normalisation, and a resume's options (train_resume.c) */
    train_saved_t saved;
    if ((status = train_read_saved(&o, &saved)) != DP_OK) goto done;
    if ((status = train_options_check(&o, world->size, speaks, &set)) != DP_OK) goto done;
    if (world->rank != 0) {
        o.quiet = o.quiet || !speaks;
        o.metrics_path = o.plot_path = o.save_path = o.save_best_path = NULL;
    }
    const dp_precision_t precision = (dp_precision_t)o.precision;
    int device_ids[MAX_DEVICES], num_devices = 0;
    const dp_backend_t *backends[MAX_DEVICES];
    char devices_note[256];
    if ((status = train_devices(&o, device_ids, &num_devices, backends, devices_note, sizeof devices_note)) != DP_OK)
        goto done;
    char frozen_note[sizeof printer.frozen]; /* --freeze, or a resume's model.freeze (train_init.c) */
    if ((status = load_model(&o, &saved, &model, &val_model, frozen_note, sizeof frozen_note)) != DP_OK) goto done;
    /* --channels-last, or its default for this model and precision, before the data and the trainer */
    if ((status = cli_set_channels_last("train", o.channels_last_text, cli_channels_last_default(precision, model),
                                        backends, device_ids, num_devices, &o.channels_last)) != DP_OK)
        goto done;
    if ((status = open_data(&o, model, backends, num_devices, &saved, world, speaks, &data)) != DP_OK) goto done;
    char resumed_note[sizeof printer.resumed]; /* the options a resume took from its checkpoint */
    train_resume_note(&o, &saved.resume, data.train_total, resumed_note, sizeof resumed_note);
    const int train_count = dp_batch_source_info(data.train)->count;
    const int test_count = dp_batch_source_info(data.test)->count;
    const int step_batch = o.batch_size * o.accumulate; /* the global batch of one optimizer step */
    if ((status = check_batch(&o, num_devices * world->size, train_count)) != DP_OK) goto done;
    train_check_warmup(&o, &set.schedule, train_count, step_batch, speaks);
    /* every rank is ready, or every rank ends here (the trainer's set-up
     * makes collectives: no rank may be missing) */
    status = dp_world_agree(DP_OK);
    agreed = 1;
    if (status != DP_OK) goto done;

    if ((status = make_trainer(&o, &set, model, world, device_ids, num_devices, backends, &trainer)) != DP_OK ||
        (status = make_val_trainer(&o, val_model, world, device_ids, num_devices, backends, &val_trainer)) != DP_OK) {
        outcome->alone = 1; /* its collectives: the others may be waiting in one */
        goto done;
    }
    printer = (train_printer_t){.o = &o, .world = world, .speaks = speaks, .lr_default = set.lr_default,
                                .weight_decay_default = set.weight_decay_default,
                                .train_count = train_count, .test_count = test_count,
                                .holdout = data.holdout[0] ? data.holdout : NULL,
                                .test_folder = strcmp(data.test_split, "val") == 0 ? "val" : NULL,
                                .devices_note = devices_note[0] ? devices_note : NULL, .trainer = trainer,
                                .record = outcome->record};
    snprintf(printer.frozen, sizeof printer.frozen, "%s", frozen_note);
    snprintf(printer.normalized, sizeof printer.normalized, "%s", saved.normalize_note);
    snprintf(printer.resumed, sizeof printer.resumed, "%s", resumed_note);
    cuda_graph_note(trainer, backends, num_devices, o.cuda_graph != NULL, printer.cuda_graph,
                    sizeof printer.cuda_graph);
    dp_fit_config_t fit = {
        .trainer = trainer,
        .model = model,
        .model_name = o.model,
        .train_source = data.train,
        .test_source = data.test,
        .val_trainer = val_trainer,
        .val_height = o.data.val_height,
        .val_width = o.data.val_width,
        .loader_threads = data.loader_threads,
        .world = *world,
        .batch_size = step_batch,
        .epochs = o.epochs,
        .stop_after = o.stop_after,
        .seed = o.seed,
        .schedule = set.schedule,
        .eval_batch_size = 1000,
        .model_ema_steps = o.model_ema ? o.model_ema_steps : 0,
        .model_ema_decay = !o.model_ema ? 0.0 : saved.resume.ema_taken ? saved.resume.ema_decay
                           : dp_ema_decay(o.model_ema_decay, o.model_ema_steps, step_batch, o.epochs),
        .metrics_path = o.metrics_path,
        .plot_path = o.plot_path,
        .save_path = o.save_path,
        .save_best_path = o.save_best_path,
        .early_stop = o.early_stop,
        .ra_reps = o.ra_sampler ? o.ra_reps : 0,
        .resume_path = o.resume_path,
        .init_path = o.init_path,
        .init_fresh_head = o.fresh_head,
        .save_every_steps = o.save_every_steps,
        .log_every_steps = o.log_every_steps,
        .augment_text = o.augment,
        .transform_text = data.transform[0] ? data.transform : NULL,
        .train_transform_text = data.train_transform[0] ? data.train_transform : NULL,
        .holdout_text = data.holdout[0] ? data.holdout : NULL,
        .train_total = data.train_total,
        .data_dir_text = data.dir[0] ? data.dir : NULL,
        .precision = dp_precision_name(precision),
        .layout = o.channels_last ? "nhwc" : "nchw",
        .on_begin = train_print_begin,
        /* only for a bar that is drawn: each of its reads of the loss waits for the devices */
        .on_step = world->rank == 0 && isatty(fileno(stderr)) && !o.log_every_steps ? train_draw_progress : NULL,
        .on_log = train_print_log,
        .on_warning = train_print_warning,
        .stop_request = outcome->stop_request,
        .step_reached = outcome->record ? &outcome->record->step : NULL,
    };
    dp_fit_result_t result;
    status = dp_fit(&fit, train_print_epoch, &printer, &result);
    train_signals_training(0);
    if (printer.bar_open) dp_progress_finish(&printer.bar);
    if (status != DP_OK) goto done;
    train_print_result(&result, trainer, &printer);
    if (set.profile_window > 0) status = report_profile(&o, trainer, precision, speaks);

done:
    if (!agreed) status = dp_world_agree(status); /* the first rank's mistake, on every rank */
    /* Known to this rank alone: a failure of the trainer's set-up, or during
     * training (dp_fit agrees on failures before its first step, and on a
     * preemption; a divergence every rank finds in the same floats), or
     * after it; and a broken communication. */
    outcome->alone |= status != DP_OK && status != DP_ERR_PREEMPTED && status != DP_ERR_DIVERGED &&
                      (printer.started || status == DP_ERR_COMM);
    dp_trainer_free(val_trainer);
    dp_trainer_free(trainer);
    cli_data_close(&data);
    dp_model_free(val_model);
    dp_model_free(model);
    return status;
}

/* Under `dptrain launch --log-dir DIR`: this rank's output goes to
 * DIR/worklog.RANK, which starts with who wrote it. */
static dp_status_t open_worklog(const dp_world_t *world, int argc, char **argv) {
    const char *dir = getenv("DPTRAIN_LOG_DIR");
    if (!dir || !*dir) return DP_OK;
    char path[4200], host[256] = "?";
    snprintf(path, sizeof path, "%s/worklog.%d", dir, world->rank);
    if (!freopen(path, "w", stdout)) return dp_fail(DP_ERR_IO, "cannot write the log %s: %s", path, strerror(errno));
    if (dup2(fileno(stdout), fileno(stderr)) < 0)
        return dp_fail(DP_ERR_IO, "cannot send stderr to %s: %s", path, strerror(errno));
    setvbuf(stdout, NULL, _IOLBF, 0);
    gethostname(host, sizeof host - 1);
    const char *devices = "one per core";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) devices = argv[i + 1];
        if (strncmp(argv[i], "--devices=", 10) == 0) devices = argv[i] + 10;
    }
    printf("rank %d of %d, devices %s, host %s, pid %ld\n", world->rank, world->size, devices, host,
           (long)getpid());
    return DP_OK;
}

/* The launcher's attempt (DPTRAIN_ATTEMPT), 0 without one. */
static int launch_attempt(void) {
    const char *text = getenv("DPTRAIN_ATTEMPT");
    return text ? atoi(text) : 0;
}

/* How a rank ends. A mistake every rank knows of (agreed before anything
 * ran) or a preemption: rank 0 says it in one line (each rank into its own
 * worklog under launch --log-dir), every rank finalizes MPI and exits with
 * the same status, so mpirun has nothing to abort. A failure of this rank
 * alone (the others may be waiting for it in a collective): it says so,
 * naming itself, leaves without finalizing (dp_world_leave) and exits
 * non-zero, and mpirun ends the others; no MPI_Abort and its banner. */
int cmd_train(int argc, char **argv) {
    /* before MPI starts: a stop asked for meanwhile (mpirun forwards SIGUSR1 at once) must not end the rank */
    train_signals_install(NULL, 0, getenv("OMPI_COMM_WORLD_SIZE") != NULL);
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK) return cli_report_error();
    const char *log_dir = getenv("DPTRAIN_LOG_DIR");
    int speaks = world.rank == 0 || (log_dir && *log_dir);
    train_outcome_t outcome = {.record = rank_record_open(getenv("DPTRAIN_RECORD_DIR"), world.rank, world.size,
                                                          launch_attempt())};
    outcome.stop_request = train_signals_install(outcome.record, world.rank == 0, world.size > 1);
    dp_status_t status = dp_world_agree(open_worklog(&world, argc, argv));
    if (status == DP_OK) status = train_main(argc, argv, &world, &outcome);
    int code = cli_world_report(&world, status, outcome.alone, speaks);
    if (outcome.record && status == DP_ERR_COMM) /* the ranks a stalled collective waited for */
        outcome.record->num_suspects = dp_world_stalled_ranks(outcome.record->suspects, 8);
    rank_record_end(outcome.record, code, !outcome.alone, status != DP_OK ? dp_error_message() : "");
    return cli_world_end(&world, code, outcome.alone); /* finalized, or left (world.c) */
}
