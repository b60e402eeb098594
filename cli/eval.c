/* eval.c - checkpoints on the command line: `dptrain eval` (test accuracy,
 * top-1 and top-5, of a saved model) and `dptrain inspect` (a checkpoint's
 * metadata and tensors). `train --save` / `--resume` are dp_fit's
 * (src/trainer/fit.c, with the resume policy). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "class_names.h"
#include "commands.h"
#include "data_options.h"
#include "dptrain/image_folder.h"
#include "devices.h"
#include "eval_report.h"
#include "image_size.h"
#include "dptrain/data.h"
#include "dptrain/io.h"
#include "dptrain/model_file.h"
#include "options.h"
#include "world.h"

/* --- dptrain eval ------------------------------------------------------------------- */
static const char eval_usage[] =
    "usage: dptrain eval --resume FILE [options]\n"
    "\n"
    "Evaluates a checkpoint written by `dptrain train --save` on the test set,\n"
    "split across the devices (batch norm uses the saved running statistics,\n"
    "dropout is off), and prints\n"
    "  test acc: 0.8340 (8340/10000 correct) on 10000 images, model lenet, epoch 10, FILE\n"
    "  top-5 acc: 0.9950 (9950/10000 in the top 5)\n"
    "the second line for a model of more than 5 classes: the images whose label is\n"
    "among the model's 5 largest outputs (torchvision's Acc@5; ties go to the lower\n"
    "class index).\n"
    "\n"
    "Under mpirun (mpirun -np R dptrain eval ...) every rank evaluates its share on\n"
    "its devices, the counts are summed, and rank 0 alone prints and writes\n"
    "--confusion: the same lines and bytes as one process.\n"
    "\n"
    "options:\n"
    "  --resume FILE       the checkpoint (safetensors)\n"
    "  --model NAME|FILE   the network, a built-in name or a model file (default: the\n"
    "                      checkpoint's); another model's checkpoint is refused,\n"
    "                      naming the first mismatching tensor\n"
    "  --data DIR          the data whose test split is evaluated: IDX files\n"
    "                      (t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]),\n"
    "                      an image folder (DIR/test/CLASS/IMAGE, else DIR/val/...;\n"
    "                      without either the files the training run held out,\n"
    "                      --holdout; with a checkpoint of an image folder its\n"
    "                      classes matched to the checkpoint's by name, and\n"
    "                      DIR/test alone is enough), an image list's (DIR/val.txt\n"
    "                      or .csv, test.txt or .csv; a LIST.txt|.csv alone: its\n"
    "                      held-out files) or CIFAR-10\n"
    "                      (test_batch.bin); default: the data the checkpoint's run\n"
    "                      trained on (its data.dir), else " DP_DEFAULT_DATA_DIR "\n"
    "  --devices N|LIST    devices to evaluate on: a count (cpu:0 .. cpu:N-1) or a list\n"
    "                      cpu:0,cpu:1 or cuda:0,cuda:1 (default: every GPU, else one\n"
    "                      CPU device per core)\n"
    "  --batch-size N      examples per evaluation batch (default 1000)\n"
    "  --precision fp32|tf32|bf16  GPU devices: the arithmetic of matrix products and\n"
    "                      convolutions (train --precision; default fp32); tf32 and\n"
    "                      bf16 are refused on CPU devices\n"
    "  --channels-last on|off  GPU devices: NHWC activations inside the device (train\n"
    "                      --channels-last; default: on with --precision bf16 when\n"
    "                      every convolution's channels are multiples of 8, else off;\n"
    "                      refused on CPU devices)\n"
    "  --normalize MEAN,STD  per-channel normalisation of the images (default: the\n"
    "                      checkpoint's, which another value may not contradict)\n"
    "  --per-class         also a table of every class: its images, correct answers,\n"
    "                      recall, precision (\"-\" where nothing divides) and the\n"
    "                      class it is most often taken for, then the mean recall\n"
    "                      (balanced accuracy)\n"
    "  --image-size N|HxW  evaluate at another input height and width than the\n"
    "                      checkpoint's (FixRes: train at 176, test at 224): its model\n"
    "                      with that input (train --image-size), its parameters\n"
    "                      loaded; a network whose parameters depend on the size\n"
    "                      (LeNet's linear layer) is refused. An image folder's\n"
    "                      images are resized to 256/224 of it (--resize S: to S),\n"
    "                      then center-cropped to it; IDX and CIFAR data take only\n"
    "                      their own size. The first line ends with the size used.\n"
    "                      Default: the size its run tested every epoch at (train\n"
    "                      --val-image-size, with its --resize), else the model's\n"
    "  --ema               evaluate the checkpoint's moving average of the model (train\n"
    "                      --model-ema) instead of the model\n"
    "  --confusion FILE    write the confusion matrix as CSV (a row per true class, a\n"
    "                      column per predicted class, named), atomically; a path\n"
    "                      that cannot be written is refused before the evaluation\n"
    "  --help              show this help\n";

/* The normalisation of the images: the checkpoint's ("" for none), or
 * --normalize when it has none; both given and different is refused (the
 * accuracy would be that of other inputs). */
static dp_status_t apply_normalize(dp_batch_source_t *src, const char *given, const char *saved) {
    const char *text = saved[0] ? saved : given;
    if (!text) return DP_OK;
    const int channels = dp_batch_source_info(src)->channels;
    int n;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
    char why[1024];
    if (dp_normalize_parse(text, &n, mean, std) != DP_OK || dp_batch_source_set_normalize(src, n, mean, std) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(DP_ERR_ARG, "eval: %s %s: %s", saved[0] ? "the checkpoint's normalisation" : "--normalize",
                       text, why);
    }
    if (given && saved[0]) {
        dp_normalize_t check;
        const dp_normalize_t *have = &dp_batch_source_info(src)->normalize;
        if (dp_normalize_parse(given, &n, mean, std) != DP_OK || dp_normalize_make(channels, n, mean, std, &check) != DP_OK) {
            snprintf(why, sizeof why, "%s", dp_error_message());
            return dp_fail(DP_ERR_ARG, "eval: --normalize %s: %s", given, why);
        }
        if (memcmp(check.mean, have->mean, sizeof check.mean) != 0 || memcmp(check.std, have->std, sizeof check.std) != 0)
            return dp_fail(DP_ERR_ARG, "eval: --normalize %s: the checkpoint was trained with --normalize %s", given,
                           saved);
    }
    return DP_OK;
}

/* The data's options from the checkpoint's evaluation transform (an image
 * folder's), where the command line does not give them. */
static dp_status_t transform_options(const char *transform, int channels, int height, int width,
                                     cli_data_options_t *o) {
    if (!transform[0]) return DP_OK;
    dp_sample_options_t eval;
    DP_TRY(dp_eval_transform_parse(transform, channels, height, width, &eval));
    if (eval.mode == DP_SAMPLE_SQUASH) o->transform = "squash"; /* not an eval option: the checkpoint's */
    else if (!o->resize) o->resize = eval.resize_size;
    if (!o->exif) o->exif = eval.ignore_exif ? "ignore" : "apply";
    if (!o->interpolation && eval.interpolation == DP_INTERP_BICUBIC) o->interpolation = "bicubic";
    return DP_OK;
}

/* --per-class's table and --confusion's file of an evaluation's counts
 * (outputs x outputs), the classes named by the checkpoint (an image
 * folder's run), else by the data (CIFAR-10's), else class_names.h's. */
static dp_status_t report_classes(const int64_t *counts, int outputs, const dp_checkpoint_info_t *info,
                                  const dp_source_info_t *test, int per_class, const char *confusion_path) {
    const int saved = info->num_class_names > 0;
    char **names;
    DP_TRY(cli_class_names(saved ? (const char *const *)info->class_names : test->class_names,
                           saved ? info->num_class_names : test->class_names ? test->num_classes : 0, outputs, &names));
    const eval_counts_t report = {counts, outputs, (const char *const *)names};
    if (per_class) eval_report_print(&report);
    dp_status_t status = confusion_path ? eval_report_write_csv(&report, confusion_path) : DP_OK;
    cli_class_names_free(names, outputs);
    return status;
}

/* eval's result: the main line (the top-1 accuracy and what was
 * evaluated), then for a model of more than 5 outputs (with 5 or fewer
 * every answer is in the top 5) the top-5 accuracy's. */
static void print_result(const dp_eval_counts_t *got, int count, int outputs, const char *model_name, int ema,
                         int epochs, const char *resume, dp_precision_t precision, int channels_last,
                         const char *size_note) {
    printf("test acc: %.4f (%d/%d correct) on %d image%s, model %s%s, epoch %d, %s%s%s%s%s\n",
           (double)got->correct / count, got->correct, count, count, count == 1 ? "" : "s", model_name,
           ema ? " (its moving average)" : "", epochs, resume, precision != DP_PRECISION_FP32 ? ", precision " : "",
           precision != DP_PRECISION_FP32 ? dp_precision_name(precision) : "", channels_last ? ", channels-last" : "",
           size_note);
    if (outputs > 5) printf("top-5 acc: %.4f (%d/%d in the top 5)\n", (double)got->top5 / count, got->top5, count);
}

/* An image folder's checkpoint (or imported weights) without --data and
 * without a data.dir: which folder to give, naming its classes while they
 * fit. */
static dp_status_t no_folder(const char *resume, const dp_checkpoint_info_t *info) {
    char classes[200] = "";
    size_t at = 0;
    for (int i = 0; i < info->num_class_names; i++) { /* the names while they fit, then ", ..." */
        const char *name = info->class_names[i];
        if (at + strlen(name) + 8 >= sizeof classes) {
            snprintf(classes + at, sizeof classes - at, ", ...");
            break;
        }
        at += (size_t)snprintf(classes + at, sizeof classes - at, "%s%s", i ? ", " : ": ", name);
    }
    if (info->weights_only) /* imported weights: no run, no folder of its own */
        return dp_fail(DP_ERR_ARG, "eval: %s holds imported weights, with no data of its own: give a folder of test "
                       "images with --data DIR (DIR/test/CLASS/...%s%s)", resume, classes[0] ? "; classes" : "",
                       classes);
    return dp_fail(DP_ERR_ARG, "eval: %s was trained on an image folder (%d classes%s): give that folder, or one "
                   "with the same class folders, with --data DIR", resume, info->num_class_names, classes);
}

/* The evaluation on this rank (every rank of an mpirun job runs it; one
 * process is rank 0 of 1). A mistake found before the evaluation (options,
 * checkpoint, data, devices) is agreed among the ranks, so that every rank
 * ends with the first failing rank's status and rank 0 says it; rank 0's
 * failure to write its output is agreed likewise. A failure during the
 * trainer's set-up or the evaluation (which make collectives) is this
 * rank's *alone. */
/* Without --data: the run's data (its data.dir), or one line asking for the folder of an image folder's run. */
static dp_status_t choose_data_dir(const char *resume, const dp_checkpoint_info_t *info, cli_data_options_t *o) {
    if (o->dir == cli_data_defaults().dir && info->data_dir[0]) {
        DP_TRY(cli_check_saved_data_dir("eval", resume, info->data_dir));
        o->dir = info->data_dir;
    }
    if (info->transform[0] && o->dir == cli_data_defaults().dir) return no_folder(resume, info);
    return DP_OK;
}

/* --devices (default: cli_default_devices'), --precision and --channels-last set on them. */
static dp_status_t choose_devices(const char *devices, dp_precision_t precision, const char *channels_last_text,
                                  const dp_model_t *model, int *device_ids, int *num_devices,
                                  const dp_backend_t **backends, int *channels_last) {
    char devices_note[256], option[64];
    DP_TRY(devices ? cli_parse_devices("eval", devices, device_ids, num_devices, backends)
                   : cli_default_devices(device_ids, num_devices, backends, devices_note, sizeof devices_note));
    snprintf(option, sizeof option, "--precision %s", dp_precision_name(precision));
    DP_TRY(cli_set_precision("eval", option, backends, device_ids, *num_devices, precision));
    return cli_set_channels_last("eval", channels_last_text, cli_channels_last_default(precision, model), backends,
                                 device_ids, *num_devices, channels_last);
}

static dp_status_t eval_main(int argc, char **argv, const dp_world_t *world, int *alone) {
    const char *resume = NULL, *model_name = NULL, *normalize = NULL;
    const char *devices = NULL, *precision_text = NULL, *channels_last_text = NULL, *confusion_path = NULL;
    const char *image_size = NULL;
    int batch_size = 1000, help = 0, per_class = 0, ema = 0;
    cli_data_options_t data_options = cli_data_defaults();
    option_t options[16 + CLI_DATA_OPTIONS] = {
        {"resume", OPT_STRING, &resume, 0, 0},
        {"model", OPT_STRING, &model_name, 0, 0},
        {"data", OPT_STRING, &data_options.dir, 0, 0},
        {"devices", OPT_STRING, &devices, 0, 0},
        {"batch-size", OPT_INT, &batch_size, 1, 1 << 24},
        {"normalize", OPT_STRING, &normalize, 0, 0},
        {"precision", OPT_STRING, &precision_text, 0, 0},
        {"channels-last", OPT_STRING, &channels_last_text, 0, 0},
        {"per-class", OPT_FLAG, &per_class, 0, 0},
        {"confusion", OPT_STRING, &confusion_path, 0, 0},
        {"ema", OPT_FLAG, &ema, 0, 0},
        {"image-size", OPT_STRING, &image_size, 0, 0},
    };
    int used = 0;
    while (options[used].name) used++;
    cli_data_option_entries(&data_options, 0, options, &used); /* data_options.c's */
    options[used] = (option_t){0};
    DP_TRY(dp_world_agree(options_parse("eval", options, argc, argv, 2, &help)));
    if (help) {
        if (world->rank == 0) printf("%s%s", eval_usage, cli_data_usage_eval);
        return DP_OK;
    }
    DP_TRY(cli_world_check_options(world, argc, argv)); /* the same evaluation on every rank */
    /* From here to the agreement before the trainer, a failure goes to
     * failed, then done, where every rank learns the first failing rank's. */
    const int speaks = world->rank == 0; /* prints and writes: rank 0 alone */
    dp_status_t status = DP_OK;
    int agreed = 0;
    dp_checkpoint_t *c = NULL;
    dp_model_t *model = NULL;
    cli_data_t data = {0};
    dp_trainer_t *trainer = NULL;
    float *params = NULL;
    int64_t *counts = NULL; /* --per-class, --confusion: (classes x classes) [true][predicted] */
    int outputs = 0;        /* the model's: the classes of the matrix */
    char size_option[96] = "", size_note[192] = ""; /* --image-size: "--image-size 48"; ", input 48x48 (...)" */
    int size_height = 0, size_width = 0;
    if (!resume) {
        dp_fail(DP_ERR_ARG, "eval: --resume FILE is required (the checkpoint to evaluate)");
        goto failed;
    }
    dp_precision_t precision = DP_PRECISION_FP32;
    if (precision_text && cli_parse_precision("eval", precision_text, &precision) != DP_OK) goto failed;
    /* before the evaluation's work; rank 0 alone writes it */
    if (confusion_path && speaks && dp_file_check_writable("eval: --confusion", confusion_path) != DP_OK) goto failed;
    if (image_size) {
        if (cli_parse_image_size("eval", image_size, &size_height, &size_width) != DP_OK) goto failed;
        snprintf(size_option, sizeof size_option, "--image-size %s", image_size);
    }
    if (dp_checkpoint_open(resume, &c) != DP_OK) goto failed;
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    if (dp_checkpoint_load_model(c, model_name, &model) != DP_OK) goto failed;
    params = dp_alloc(sizeof(float) * dp_model_num_params(model), "parameters");
    if (!params || dp_checkpoint_load_params(c, model, params) != DP_OK) goto failed;
    if (ema && dp_checkpoint_load_ema(c, model, params) != DP_OK) goto failed; /* the moving average instead */
    int ch, h, w, saved_h, saved_w;
    /* --image-size, else its run's test size (train --val-image-size): the same network at that input */
    if (cli_checkpoint_model_at_size("eval", info, &image_size, size_height, size_width,
                                     size_option, &model, &saved_h, &saved_w) != DP_OK) goto failed;
    dp_model_input_shape(model, &ch, &h, &w);
    char transform[sizeof info->transform]; /* the checkpoint's evaluation transform, at this size */
    if (cli_transform_at_size(info->transform, ch, saved_h, saved_w, h, w, transform, sizeof transform) != DP_OK)
        goto failed;
    if (choose_data_dir(resume, info, &data_options) != DP_OK) goto failed;
    if (transform_options(transform, ch, h, w, &data_options) != DP_OK) goto failed;
    data_options.holdout_default = info->holdout[0] ? info->holdout : NULL; /* the same test files */
    data_options.model = dp_model_name(model);
    data_options.image_size = image_size;
    /* the labels: positions among the checkpoint's class names (an image folder's run), else the data's own */
    if (cli_data_open(&data_options, 0, ch, h, w, info->num_class_names ? info->class_names : NULL,
                      info->num_class_names, 0, world, &data) != DP_OK)
        goto failed;
    char warning[512]; /* fewer outputs than classes: a label could never be predicted */
    if (dp_model_check_classes(model, dp_model_name(model), dp_batch_source_info(data.test)->num_classes,
                               "test data", warning, sizeof warning) != DP_OK)
        goto failed;
    if (warning[0] && speaks) fprintf(stderr, "dptrain: warning: %s\n", warning);
    if (apply_normalize(data.test, normalize, info->normalize) != DP_OK) goto failed;
    if (image_size) /* the size used, and how an image folder's images were made that size */
        snprintf(size_note, sizeof size_note, ", input %dx%d%s%s%s", h, w, data.transform[0] ? " (" : "",
                 data.transform, data.transform[0] ? ")" : "");
    const int count = dp_batch_source_info(data.test)->count;
    int device_ids[CLI_MAX_DEVICES], num_devices = 0, channels_last = 0;
    const dp_backend_t *backends[CLI_MAX_DEVICES];
    if (choose_devices(devices, precision, channels_last_text, model, device_ids, &num_devices, backends,
                       &channels_last) != DP_OK)
        goto failed;
    outputs = dp_model_num_outputs(model);
    if ((per_class || confusion_path) &&
        !(counts = dp_alloc_zeroed((size_t)outputs * outputs, sizeof *counts, "confusion matrix")))
        goto failed;
    /* every rank is ready, or every rank ends here (the trainer's set-up
     * makes collectives: no rank may be missing) */
    status = dp_world_agree(DP_OK);
    agreed = 1;
    if (status != DP_OK) goto done;
    *alone = 1; /* the trainer's set-up and the evaluation: the others may be waiting in a collective */
    dp_trainer_config_t config = {
        .model = model,
        .num_devices = num_devices,
        .threads_per_device = 1,
        .device_ids = device_ids,
        .world = *world,
        .optim = {.kind = DP_OPTIM_SGD, .lr = 1.0f}, /* never steps */
        .backend = backends[0],
        .backends = backends,
    };
    if ((status = dp_trainer_new(&config, &trainer)) != DP_OK) goto done;
    /* the training run's GPU convolution algorithms: its bits */
    if ((status = dp_trainer_install_conv_algorithms(trainer, info->conv_algorithms, info->num_conv_algorithms)) !=
        DP_OK)
        goto done;
    dp_trainer_set_params(trainer, params);
    /* this rank's share of each batch on its devices; the counts (and the matrix) summed over the ranks */
    dp_eval_counts_t got; /* top-1 and top-5 */
    if ((status = dp_trainer_evaluate_counts(trainer, data.test, batch_size, data.loader_threads, counts, &got)) !=
        DP_OK)
        goto done;
    *alone = 0;
    if (speaks) {
        print_result(&got, count, outputs, dp_model_name(model), ema, info->epochs_completed, resume, precision,
                     channels_last, size_note);
        if (per_class || confusion_path)
            status = report_classes(counts, outputs, info, dp_batch_source_info(data.test), per_class, confusion_path);
    }
    status = dp_world_agree(status); /* rank 0's output written, or every rank ends with its failure */
    goto done;
failed: /* a call above failed: its status (one that said none: a mistake still) */
    status = dp_error_status();
    if (status == DP_OK) status = DP_ERR_ARG;
done:
    if (!agreed) status = dp_world_agree(status); /* the first failing rank's mistake, on every rank */
    dp_trainer_free(trainer);
    free(params);
    free(counts);
    cli_data_close(&data);
    dp_model_free(model);
    dp_checkpoint_close(c);
    return status;
}

/* `dptrain eval`, in one process or as one rank of an mpirun job (every
 * rank evaluating its share of the test set): ends as `dptrain train`
 * does (world.c). */
int cmd_eval(int argc, char **argv) {
    dp_world_t world;
    if (dp_world_init(&argc, &argv, &world) != DP_OK) return cli_report_error();
    int alone = 0;
    const dp_status_t status = eval_main(argc, argv, &world, &alone);
    return cli_world_end(&world, cli_world_report(&world, status, alone, world.rank == 0), alone);
}

/* --- dptrain inspect ----------------------------------------------------------------- */
static const char inspect_usage[] =
    "usage: dptrain inspect FILE\n"
    "       dptrain inspect --model NAME|FILE\n"
    "\n"
    "Checks a safetensors file (a dptrain checkpoint or any F32 safetensors file)\n"
    "and prints its metadata, one `key = value` line each, a checkpoint's class\n"
    "names (of an image folder) one `LABEL NAME` line each, after a run on CUDA\n"
    "devices the number of GPU convolution algorithms it stores (`cuda conv\n"
    "algorithms: N stored`), then one line per tensor: name, shape and the sum\n"
    "of its values (float64, in order, %.17g). A model file's text (model_text)\n"
    "is shown by its size.\n"
    "tools/read_checkpoint.py prints the same lines with numpy alone.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE   instead of a file: a network's parameter table, the\n"
    "                      tensors its checkpoints hold (one `NAME [SHAPE] trainable`\n"
    "                      or `... buffer` line each, in order), after a line with\n"
    "                      its input, outputs, counts and fingerprint\n";

/* `dptrain inspect --model NAME|FILE`: the model's parameter table. */
static int inspect_model(const char *name) {
    dp_model_t *model;
    if (dp_model_load(name, &model) != DP_OK) return cli_report_error();
    int c, h, w;
    dp_model_input_shape(model, &c, &h, &w);
    size_t trainable = dp_model_num_trainable(model);
    printf("model %s: input %dx%dx%d, %d outputs, %zu trainable parameters, %zu buffer values, %d tensors, "
           "fingerprint %016" PRIx64 "\n", dp_model_name(model), c, h, w, dp_model_num_outputs(model), trainable,
           dp_model_num_params(model) - trainable, dp_model_num_param_tensors(model), dp_model_fingerprint(model));
    for (int i = 0; i < dp_model_num_param_tensors(model); i++) {
        const dp_param_info_t *p = dp_model_param(model, i);
        printf("  %s [", p->name);
        for (int d = 0; d < p->ndim; d++) printf(d ? ", %d" : "%d", p->shape[d]);
        printf("] %s\n", p->trainable ? "trainable" : "buffer");
    }
    dp_model_free(model);
    if (fflush(stdout) != 0) {
        dp_fail(DP_ERR_IO, "inspect: cannot write to standard output");
        return cli_report_error();
    }
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
        fputs(inspect_usage, stdout);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[2], "--model") == 0) {
        if (argc == 4) return inspect_model(argv[3]);
        if (argc > 4) dp_fail(DP_ERR_ARG, "inspect: --model %s takes nothing after it, found '%s' (dptrain inspect "
                              "--model NAME|FILE; --num-classes and --image-size are train's)", argv[3], argv[4]);
        else dp_fail(DP_ERR_ARG, "inspect: --model takes one network (dptrain inspect --model NAME|FILE)");
        return cli_report_error();
    }
    if (argc != 3 || argv[2][0] == '-') {
        if (argc < 3) dp_fail(DP_ERR_ARG, "inspect: which file? (dptrain inspect FILE; see --help)");
        else if (argv[2][0] == '-') dp_fail(DP_ERR_ARG, "inspect: unknown option '%s' (dptrain inspect FILE, or "
                                            "--model NAME|FILE)", argv[2]);
        else dp_fail(DP_ERR_ARG, "inspect: one file at a time: '%s' after %s (dptrain inspect FILE)", argv[3], argv[2]);
        return cli_report_error();
    }
    dp_safetensors_t *st;
    if (dp_safetensors_read(argv[2], &st) != DP_OK) return cli_report_error();
    printf("metadata:\n");
    for (int i = 0; i < dp_safetensors_meta_count(st); i++) {
        dp_st_meta_t m = dp_safetensors_meta_at(st, i);
        if (strcmp(m.key, "model_text") == 0) /* a whole model file: its size, on one line */
            printf("  %s = (%zu bytes of model file text)\n", m.key, strlen(m.value));
        else
            printf("  %s = %s\n", m.key, m.value);
    }
    const char *format = dp_safetensors_meta(st, "format");
    if (format && strcmp(format, "dptrain-checkpoint") == 0 &&
        (dp_safetensors_meta(st, "data.classes") || dp_safetensors_meta(st, "cuda.conv_algorithms"))) {
        /* a checkpoint's class names and GPU convolution algorithms, parsed and checked */
        dp_checkpoint_t *c;
        if (dp_checkpoint_open(argv[2], &c) != DP_OK) {
            dp_safetensors_free(st);
            return cli_report_error();
        }
        const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
        if (info->num_class_names > 0) printf("classes:\n");
        for (int i = 0; i < info->num_class_names; i++) printf("  %d %s\n", i, info->class_names[i]);
        if (info->num_conv_algorithms > 0) printf("cuda conv algorithms: %d stored\n", info->num_conv_algorithms);
        dp_checkpoint_close(c);
    }
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
