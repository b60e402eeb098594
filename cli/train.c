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
#include "options.h"
#include "train.h"


#define MAX_DEVICES CLI_MAX_DEVICES

/* --precision (or --tf32) and --winograd on each distinct table of the
 * devices (a setting is the table's: one GPU's, the CPU's). */
static dp_status_t device_settings(const dp_backend_t *const *backends, const int *ids, int count,
                                   const train_options_t *o, int winograd) {
    char option[64];
    if (o->precision_text) snprintf(option, sizeof option, "--precision %s", o->precision_text);
    else snprintf(option, sizeof option, "--tf32");
    DP_TRY(cli_set_precision("train", option, backends, ids, count, (dp_precision_t)o->precision));
    int channels_last = 0;
    DP_TRY(cli_set_channels_last("train", o->channels_last_text, backends, ids, count, &channels_last));
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

/* Reports the current error, naming the rank when there are several. */
static int report_error(const dp_world_t *world) {
    if (world->size > 1) {
        char message[1024];
        snprintf(message, sizeof message, "%s", dp_error_message());
        dp_fail(DP_ERR_ARG, "rank %d of %d: %s", world->rank, world->size, message);
    }
    return cli_report_error();
}

static int train_main(int argc, char **argv, const dp_world_t *world) {
    train_options_t o;
    train_settings_t set;
    int help = 0;
    if (train_options_parse(argc, argv, &o, &help) != DP_OK) return report_error(world);
    if (help) {
        if (world->rank == 0) printf("%s%s", train_usage, cli_data_usage_train);
        return 0;
    }
    /* Every rank must run the same command (mpirun gives each the same). */
    char joined[8192];
    size_t joined_len = 0;
    for (int i = 2; i < argc && joined_len < sizeof joined; i++)
        joined_len += (size_t)snprintf(joined + joined_len, sizeof joined - joined_len, "%s", argv[i]) + 1;
    if (joined_len > sizeof joined) joined_len = sizeof joined;
    if (o.comm_timeout < 0.0f) {
        dp_fail(DP_ERR_ARG, "train: --comm-timeout must be >= 0 seconds, found %g", o.comm_timeout);
        return report_error(world);
    }
    dp_world_set_timeout(o.comm_timeout);
    if (dp_world_check_same(world, "options", joined, joined_len) != DP_OK) return report_error(world);
    /* Rank 0 alone writes files and prints to the terminal; the others
     * print only into their own worklog (dptrain launch --log-dir). */
    const char *log_dir = getenv("DPTRAIN_LOG_DIR");
    int speaks = world->rank == 0 || (log_dir && *log_dir);
    if (train_options_check(&o, world->size, speaks, &set) != DP_OK) return report_error(world);
    if (world->rank != 0) {
        o.quiet = o.quiet || !speaks;
        o.metrics_path = o.plot_path = o.save_path = NULL;
    }
    const dp_precision_t precision = (dp_precision_t)o.precision;
    int device_ids[MAX_DEVICES], num_devices = 0;
    const dp_backend_t *backends[MAX_DEVICES];
    char devices_note[256];
    devices_note[0] = '\0';
    if (o.devices) {
        if (cli_parse_devices("train", o.devices, device_ids, &num_devices, backends) != DP_OK) return report_error(world);
    } else if (cli_default_devices(device_ids, &num_devices, backends, devices_note, sizeof devices_note) != DP_OK) {
        return report_error(world);
    }
    if (device_settings(backends, device_ids, num_devices, &o, o.winograd) != DP_OK) return report_error(world);
    int exit_code = 1;
    dp_model_t *model = NULL;
    cli_data_t data = {0};
    dp_trainer_t *trainer = NULL;

    if (train_load_model(&o, &model) != DP_OK) goto done;
    char frozen_note[sizeof ((train_printer_t *)0)->frozen];
    if (train_freeze_model(&o, model, frozen_note, sizeof frozen_note) != DP_OK) goto done;
    int c, h, w, cpu_threads = 0;
    dp_model_input_shape(model, &c, &h, &w);
    for (int d = 0; d < num_devices; d++)
        cpu_threads += strcmp(backends[d]->name, "cpu") == 0 ? o.threads_per_device : 0;
    o.data.dir = o.data_dir;
    o.data.limit = o.limit;
    o.data.normalize = o.normalize;
    o.data.augment = o.augment;
    o.data.model = o.model;
    if (cli_data_open(&o.data, 1, c, h, w, NULL, 0, cpu_threads, world, &data) != DP_OK) goto done;
    train_check_limit(&o, data.train_total, speaks);
    const int train_count = dp_batch_source_info(data.train)->count;
    const int test_count = dp_batch_source_info(data.test)->count;
    const int step_batch = o.batch_size * o.accumulate; /* the global batch of one optimizer step */
    if (o.batch_size < num_devices * world->size) {
        dp_fail(DP_ERR_ARG, "train: --batch-size %d is smaller than the number of devices (%d): every device "
                "needs at least one example", o.batch_size, num_devices * world->size);
        goto done;
    }
    if (step_batch > train_count) {
        if (o.accumulate > 1)
            dp_fail(DP_ERR_ARG, "train: --batch-size %d x --accumulate %d is larger than the training set (%d "
                    "images)", o.batch_size, o.accumulate, train_count);
        else
            dp_fail(DP_ERR_ARG, "train: --batch-size %d is larger than the training set (%d images)",
                    o.batch_size, train_count);
        goto done;
    }

    dp_trainer_config_t config = {
        .model = model,
        .num_devices = num_devices,
        .threads_per_device = o.threads_per_device,
        .device_ids = device_ids,
        .allreduce = set.allreduce,
        .overlap = set.overlap,
        .sync = set.sync,
        .world = *world,
        .optim = set.optim,
        .seed = o.seed,
        .sync_batch_norm = o.sync_batch_norm,
        .backend = backends[0],
        .backends = backends,
        .accumulate = o.accumulate,
        .profile_steps = set.profile_window,
        .profile_warmup = set.profile_warmup,
        .cuda_graph_off = o.cuda_graph && strcmp(o.cuda_graph, "off") == 0,
    };
    if (dp_trainer_new(&config, &trainer) != DP_OK) goto done;
    if (strlen(o.model) >= sizeof ((dp_checkpoint_info_t *)0)->model) {
        dp_fail(DP_ERR_ARG, "train: --model: a path of %zu bytes, checkpoints hold up to %zu", strlen(o.model),
                sizeof ((dp_checkpoint_info_t *)0)->model - 1);
        goto done;
    }
    train_printer_t printer = {.o = &o, .world = world, .speaks = speaks, .lr_default = set.lr_default,
                               .train_count = train_count, .test_count = test_count,
                               .devices_note = devices_note[0] ? devices_note : NULL};
    snprintf(printer.frozen, sizeof printer.frozen, "%s", frozen_note);
    int on_cuda = 0;
    for (int d = 0; d < num_devices; d++) on_cuda |= strcmp(backends[d]->name, "cuda") == 0;
    const char *graph_why = dp_trainer_cuda_graph(trainer, NULL);
    if (on_cuda || o.cuda_graph) /* CPU devices say nothing unless asked */
        snprintf(printer.cuda_graph, sizeof printer.cuda_graph, ", cuda graph: %s%s%s", graph_why ? "off (" : "on",
                 graph_why ? graph_why : "", graph_why ? ")" : "");
    dp_fit_config_t fit = {
        .trainer = trainer,
        .model = model,
        .model_name = o.model,
        .train_source = data.train,
        .test_source = data.test,
        .loader_threads = data.loader_threads,
        .world = *world,
        .batch_size = step_batch,
        .epochs = o.epochs,
        .stop_after = o.stop_after,
        .seed = o.seed,
        .schedule = set.schedule,
        .eval_batch_size = 1000,
        .metrics_path = o.metrics_path,
        .plot_path = o.plot_path,
        .save_path = o.save_path,
        .resume_path = o.resume_path,
        .init_path = o.init_path,
        .save_every_steps = o.save_every_steps,
        .augment_text = o.augment,
        .transform_text = data.transform[0] ? data.transform : NULL,
        .precision = dp_precision_name(precision),
        .layout = o.channels_last ? "nhwc" : "nchw",
        .on_begin = train_print_begin,
        /* only for a bar that is drawn: each of its reads of the loss waits for the devices */
        .on_step = world->rank == 0 && isatty(fileno(stderr)) ? train_draw_progress : NULL,
        .on_warning = train_print_warning,
    };
    dp_fit_result_t result;
    dp_status_t status = dp_fit(&fit, train_print_epoch, &printer, &result);
    if (printer.bar_open) dp_progress_finish(&printer.bar);
    if (status != DP_OK) goto done;
    train_print_result(&result, trainer, &printer);
    if (set.profile_window > 0 && speaks &&
        train_print_profile(trainer, dp_precision_name(precision), o.channels_last) != DP_OK)
        goto done;
    if (set.profile_window > 0 && o.metrics_path && train_append_profile(o.metrics_path, trainer) != DP_OK) goto done;
    exit_code = 0;

done:
    if (exit_code != 0) report_error(world);
    dp_trainer_free(trainer);
    cli_data_close(&data);
    dp_model_free(model);
    return exit_code;
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

int cmd_train(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK) return cli_report_error();
    if (open_worklog(&world, argc, argv) != DP_OK) {
        cli_report_error();
        dp_world_abort(1);
        dp_world_finalize();
        return 1;
    }
    int code = train_main(argc, argv, &world);
    /* A failed rank ends the whole job: the others may be waiting for it. */
    if (code != 0) dp_world_abort(code);
    dp_world_finalize();
    return code;
}
