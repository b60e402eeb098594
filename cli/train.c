/* train.c - `dptrain train`: parse the options, load the data, build the
 * model and the trainer, run dp_fit (fit.h: the epochs, metrics, plot,
 * checkpoints, resume); its lines and the progress bar are
 * train_output.c's. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
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


static const char train_usage[] =
    "usage: dptrain train [options]\n"
    "\n"
    "Trains a network with minibatch SGD (or momentum, Adagrad, Adam), printing\n"
    "one line per epoch: mean training loss, training accuracy, test accuracy,\n"
    "the learning rate of the epoch's last step, seconds per epoch (the training\n"
    "steps, without evaluation), images per second and the devices.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE         lenet (d2l 12.5, default), lenet-paddle, resnet18, alexnet,\n"
    "                            or a model file (models/*.cfg; docs/model-format.md)\n"
    "  --data DIR                directory with the four IDX files\n"
    "                            (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],\n"
    "                            t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]);\n"
    "                            default " DP_DEFAULT_DATA_DIR "\n"
    "  --batch-size N            examples per minibatch (default 256); with --accumulate,\n"
    "                            per micro-batch\n"
    "  --accumulate N            gradient accumulation: N micro-batches of --batch-size per\n"
    "                            optimizer step, synchronised once (a step of N x B; same\n"
    "                            update as --batch-size N x B up to float rounding)\n"
    "  --normalize MEAN,STD      per-channel normalisation (x/255 - mean) / std: one pair\n"
    "                            for every channel or M0,M1,M2,S0,S1,S2 (saved; resume\n"
    "                            and eval use the checkpoint's)\n"
    "  --augment crop:P,flip     training only: random crop with P pixels of zero padding\n"
    "                            and/or horizontal flip, seeded by (seed, epoch, position):\n"
    "                            the same for any number of devices and ranks\n"
    "  --lr X                    learning rate (default 0.2)\n"
    "  --weight-decay X          L2 penalty added to the gradient (default 0)\n"
    "  --optimizer NAME          sgd (default), momentum, adagrad or adam: torch.optim's\n"
    "                            SGD, SGD with momentum, Adagrad, Adam, step for step\n"
    "  --momentum X              momentum: the factor, in (0, 1) (default 0.9)\n"
    "  --nesterov                momentum: Nesterov's variant\n"
    "  --beta1 X, --beta2 X      adam: the moment decays, in (0, 1) (default 0.9, 0.999)\n"
    "  --eps X                   adam, adagrad: added to the denominator (default 1e-8,\n"
    "                            1e-10)\n"
    "  --lr-schedule NAME        constant (default), step (lr x gamma every\n"
    "                            --lr-step-epochs) or cosine (from lr down to --lr-min\n"
    "                            over all the epochs); updated every step\n"
    "  --lr-step-epochs N        step: epochs between decays (required)\n"
    "  --lr-gamma X              step: the decay factor, in (0, 1] (default 0.1)\n"
    "  --lr-min X                cosine: the final learning rate (default 0)\n"
    "  --warmup-epochs X         linear warm-up over X epochs (rounded to steps): step t\n"
    "                            of the first W uses (t + 1) / W of the scheduled lr\n"
    "  --warmup-steps N          the same, over N steps\n"
    "  --epochs N                passes over the training set (default 10)\n"
    "  --stop-after N            stop after epoch N of --epochs (a planned interruption:\n"
    "                            the schedule and checkpoint are those of the full run;\n"
    "                            continue later with --resume and the same options)\n"
    "  --seed N                  seed of the initialisation and the shuffle (default 0)\n"
    "  --limit N                 train on the first N training images only (default: all)\n"
    "  --devices N|LIST          devices to train on: a count (cpu:0 .. cpu:N-1) or a list\n"
    "                            like cpu:0,cpu:1, cuda:0,cuda:1 or cuda:0,cuda:0 (default:\n"
    "                            every GPU CUDA sees, else one CPU device per core)\n"
    "  --precision fp32|tf32|bf16  GPU devices: the arithmetic of matrix products and\n"
    "                            convolutions: fp32 (the default), tf32 (tensor-core math,\n"
    "                            products rounded to 10 mantissa bits) or bf16 (operands\n"
    "                            rounded to bf16 on tensor cores, sums in FP32; weights,\n"
    "                            optimizer, loss, batch norm and checkpoints stay FP32);\n"
    "                            tf32 and bf16 are refused on CPU devices\n"
    "  --tf32                    the same as --precision tf32\n"
    "  --channels-last on|off    GPU devices: keep 4-D activations channels-last (NHWC)\n"
    "                            inside the device (convolutions, bias, ReLU, batch norm,\n"
    "                            add, pooling, dropout); parameters, checkpoints and the\n"
    "                            CPU see NCHW as ever (default off; refused on CPU devices)\n"
    "  --winograd                CPU devices: 5x5 convolutions with 8 or more channels in\n"
    "                            and out (LeNet's conv2) by Winograd F(3x3, 5x5): fewer\n"
    "                            multiplications, rounding errors about 5x im2col's (still\n"
    "                            FP32; default off: im2col); resume with it again\n"
    "  --allreduce chunked|naive gradient sum: chunked (default; every device sums 1/k of\n"
    "                            the gradient over shared memory and writes it to all\n"
    "                            replicas: a reduce-scatter + all-gather) or naive (device 0\n"
    "                            sums all, the book's code); ring is an alias of chunked\n"
    "  --sync allreduce|ps       how replicas agree: allreduce (default) or a parameter\n"
    "                            server (pushes gradients, pulls parameters; rank 0's)\n"
    "  --overlap on|off          chunked only: reduce gradient buckets (and across ranks, sum\n"
    "                            them with MPI) while backward is still running (default:\n"
    "                            on across ranks, where it hides the sync; off in one\n"
    "                            process, where for LeNet it measured no gain)\n"
    "  --cuda-graph on|off       one CUDA device: capture a training step once per batch\n"
    "                            shape as a CUDA graph and replay it, one launch a step\n"
    "                            (default on; the first line says when a run cannot be\n"
    "                            captured, and why); off: every kernel launched as made\n"
    "  --sync-batch-norm         batch norm uses the whole minibatch's statistics (all devices,\n"
    "                            all ranks) instead of each device's shard (default off)\n"
    "  --comm-timeout SECONDS    under mpirun: end the job when another rank has not\n"
    "                            answered for this long (default 300; 0 = never); GPUs\n"
    "                            summing with NCCL: when a wait for the sums has not ended\n"
    "                            after this long (a stopped rank, a stuck GPU)\n"
    "  --threads-per-device N    BLAS threads of each device (default 1); dptrain's own\n"
    "                            kernels run on the device's thread\n"
    "  --metrics FILE            append one JSON object per epoch to FILE\n"
    "  --profile                 per-layer times: after 5 warm-up steps, time every layer's\n"
    "                            forward and backward on every device over 20 steps (CPU\n"
    "                            devices: the clock around each op; GPUs: CUDA events, read\n"
    "                            once after the window), and at the end print a table (mean\n"
    "                            ms per step, share of the step, and the share outside the\n"
    "                            layers: upload, sums, optimizer), even with --quiet; with\n"
    "                            --metrics also one line {\"profile\": ...} after the epochs'\n"
    "                            (off by default, and then one pointer test per op)\n"
    "  --profile-steps W,N       --profile after W warm-up steps over N steps (default 5,20)\n"
    "  --plot FILE.svg           write an SVG of loss and accuracy per epoch\n"
    "  --save FILE               write a checkpoint (safetensors: parameters, optimizer state,\n"
    "                            position) after every epoch, atomically\n"
    "  --save-every-steps N      also save --save every N steps inside an epoch (with the\n"
    "                            loader position: --resume continues exactly)\n"
    "  --resume FILE             continue from a checkpoint; --epochs counts from the start,\n"
    "                            so a 1-epoch checkpoint with --epochs 2 trains one more and\n"
    "                            ends bit for bit where 2 epochs straight would (same devices);\n"
    "                            --batch-size, --seed, --limit and the lr schedule (with\n"
    "                            cosine, --epochs too) must be the saved ones\n"
    "  --init FILE               a new run from a checkpoint's parameters and batch norm\n"
    "                            statistics (not its optimizer, step or schedule); a last\n"
    "                            linear layer with another output count than the file's\n"
    "                            starts afresh (a new head); refused with --resume\n"
    "  --freeze LAYERS           layers that do not train, comma-separated names or\n"
    "                            prefixes (conv1,layer1: also layer1.0.conv1): no gradient,\n"
    "                            no update, batch norm on its running statistics; saved,\n"
    "                            and --resume keeps it\n"
    "  --quiet                   print only the final line\n"
    "  --help                    show this help\n";

/* Fails unless the directory that will hold `path` exists and is writable,
 * so a bad --metrics or --plot is reported before training, not after. */
static dp_status_t check_output_path(const char *option, const char *path) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    if (access(dir, W_OK) != 0)
        return dp_fail(DP_ERR_IO, "--%s %s: directory '%s' is not writable (%s)", option, path, dir,
                       strerror(errno));
    return DP_OK;
}

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

/* An optional positive option: NAN (not given) -> 0, the library's default;
 * an explicit 0 would silently mean the default too, so it is an error. */
static dp_status_t optional_positive(const char *name, float value, float *out) {
    if (value == 0.0f) return dp_fail(DP_ERR_ARG, "train: --%s must be > 0, found 0", name);
    *out = isnan(value) ? 0.0f : value;
    return DP_OK;
}

/* --optimizer and its options -> config->optim; --lr-schedule and its
 * options -> *schedule. */
static dp_status_t optimizer_options(const train_options_t *o, dp_optim_config_t *optim,
                                     dp_lr_schedule_t *schedule) {
    int kind = dp_optim_kind_from_name(o->optimizer);
    if (kind < 0)
        return dp_fail(DP_ERR_ARG, "train: --optimizer: '%s' is not sgd, momentum, adagrad or adam", o->optimizer);
    *optim = (dp_optim_config_t){.kind = (dp_optim_kind_t)kind, .lr = o->lr, .weight_decay = o->weight_decay,
                                 .nesterov = o->nesterov};
    DP_TRY(optional_positive("momentum", o->momentum, &optim->momentum));
    DP_TRY(optional_positive("beta1", o->beta1, &optim->beta1));
    DP_TRY(optional_positive("beta2", o->beta2, &optim->beta2));
    DP_TRY(optional_positive("eps", o->eps, &optim->eps));
    DP_TRY(dp_optim_config_check(optim));
    kind = dp_lr_schedule_kind_from_name(o->lr_schedule);
    if (kind < 0)
        return dp_fail(DP_ERR_ARG, "train: --lr-schedule: '%s' is not constant, step or cosine", o->lr_schedule);
    if (kind == DP_LR_STEP && o->lr_step_epochs == 0)
        return dp_fail(DP_ERR_ARG, "train: --lr-schedule step needs --lr-step-epochs N");
    float gamma = 0.0f;
    DP_TRY(optional_positive("lr-gamma", o->lr_gamma, &gamma));
    *schedule = (dp_lr_schedule_t){.kind = (dp_lr_schedule_kind_t)kind, .lr = dp_float_decimal(o->lr),
                                   .step_epochs = o->lr_step_epochs, .gamma = dp_float_decimal(gamma),
                                   .total_epochs = kind == DP_LR_COSINE ? o->epochs : 0,
                                   .min_lr = dp_float_decimal(o->lr_min),
                                   .warmup_epochs = dp_float_decimal(o->warmup_epochs),
                                   .warmup_steps = (uint64_t)o->warmup_steps};
    return dp_lr_schedule_check(schedule);
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
    train_options_t o = {
        .model = "lenet",
        .data_dir = DP_DEFAULT_DATA_DIR,
        .batch_size = 256,
        .lr = 0.2f,
        .epochs = 10,
        .seed = 0,
        .threads_per_device = 1,
        .comm_timeout = 300.0f,
        .optimizer = "sgd",
        .lr_schedule = "constant",
        .momentum = NAN, .beta1 = NAN, .beta2 = NAN, .eps = NAN, .lr_gamma = NAN,
    };
    const option_t options[] = {
        {"model", OPT_STRING, &o.model, 0, 0},
        {"data", OPT_STRING, &o.data_dir, 0, 0},
        {"batch-size", OPT_INT, &o.batch_size, 1, 1 << 24},
        {"lr", OPT_FLOAT, &o.lr, 0, 0},
        {"weight-decay", OPT_FLOAT, &o.weight_decay, 0, 0},
        {"optimizer", OPT_STRING, &o.optimizer, 0, 0},
        {"momentum", OPT_FLOAT, &o.momentum, 0, 0},
        {"nesterov", OPT_FLAG, &o.nesterov, 0, 0},
        {"beta1", OPT_FLOAT, &o.beta1, 0, 0},
        {"beta2", OPT_FLOAT, &o.beta2, 0, 0},
        {"eps", OPT_FLOAT, &o.eps, 0, 0},
        {"lr-schedule", OPT_STRING, &o.lr_schedule, 0, 0},
        {"lr-step-epochs", OPT_INT, &o.lr_step_epochs, 1, 1000000},
        {"lr-gamma", OPT_FLOAT, &o.lr_gamma, 0, 0},
        {"lr-min", OPT_FLOAT, &o.lr_min, 0, 0},
        {"warmup-epochs", OPT_FLOAT, &o.warmup_epochs, 0, 0},
        {"warmup-steps", OPT_INT, &o.warmup_steps, 1, 1 << 30},
        {"epochs", OPT_INT, &o.epochs, 1, 1000000},
        {"stop-after", OPT_INT, &o.stop_after, 1, 1000000},
        {"seed", OPT_UINT64, &o.seed, 0, 0},
        {"limit", OPT_INT, &o.limit, 1, 1 << 30},
        {"threads-per-device", OPT_INT, &o.threads_per_device, 1, 1024},
        {"devices", OPT_STRING, &o.devices, 0, 0},
        {"allreduce", OPT_STRING, &o.allreduce, 0, 0},
        {"overlap", OPT_STRING, &o.overlap, 0, 0},
        {"cuda-graph", OPT_STRING, &o.cuda_graph, 0, 0},
        {"sync", OPT_STRING, &o.sync, 0, 0},
        {"comm-timeout", OPT_FLOAT, &o.comm_timeout, 0, 0},
        {"sync-batch-norm", OPT_FLAG, &o.sync_batch_norm, 0, 0},
        {"metrics", OPT_STRING, &o.metrics_path, 0, 0},
        {"plot", OPT_STRING, &o.plot_path, 0, 0},
        {"save", OPT_STRING, &o.save_path, 0, 0},
        {"resume", OPT_STRING, &o.resume_path, 0, 0},
        {"quiet", OPT_FLAG, &o.quiet, 0, 0},
        {"normalize", OPT_STRING, &o.normalize, 0, 0},
        {"augment", OPT_STRING, &o.augment, 0, 0},
        {"accumulate", OPT_INT, &o.accumulate, 1, 1 << 20},
        {"save-every-steps", OPT_INT, &o.save_every_steps, 1, 1 << 30},
        {"tf32", OPT_FLAG, &o.tf32, 0, 0},
        {"precision", OPT_STRING, &o.precision_text, 0, 0},
        {"channels-last", OPT_STRING, &o.channels_last_text, 0, 0},
        {"winograd", OPT_FLAG, &o.winograd, 0, 0},
        {"profile", OPT_FLAG, &o.profile, 0, 0},
        {"profile-steps", OPT_STRING, &o.profile_steps, 0, 0},
        {"init", OPT_STRING, &o.init_path, 0, 0},
        {"freeze", OPT_STRING, &o.freeze, 0, 0},
        {NULL, 0, NULL, 0, 0},
    };
    int help = 0;
    if (options_parse("train", options, argc, argv, 2, &help) != DP_OK) return report_error(world);
    if (help) {
        if (world->rank == 0) fputs(train_usage, stdout);
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
    if (o.save_every_steps && !o.save_path) {
        dp_fail(DP_ERR_ARG, "train: --save-every-steps needs --save FILE (where to write the checkpoints)");
        return report_error(world);
    }
    if (world->rank != 0) {
        o.quiet = o.quiet || !speaks;
        o.metrics_path = o.plot_path = o.save_path = NULL;
    }
    dp_precision_t precision = o.tf32 ? DP_PRECISION_TF32 : DP_PRECISION_FP32;
    if (o.precision_text && cli_parse_precision("train", o.precision_text, &precision) != DP_OK)
        return report_error(world);
    if (o.tf32 && precision != DP_PRECISION_TF32) {
        dp_fail(DP_ERR_ARG, "train: --tf32 is --precision tf32, and --precision says %s: give one", o.precision_text);
        return report_error(world);
    }
    o.precision = (int)precision;
    if (o.channels_last_text && strcmp(o.channels_last_text, "on") != 0 && strcmp(o.channels_last_text, "off") != 0) {
        dp_fail(DP_ERR_ARG, "train: --channels-last: '%s' is not on or off", o.channels_last_text);
        return report_error(world);
    }
    o.channels_last = o.channels_last_text && strcmp(o.channels_last_text, "on") == 0;
    if (!(o.lr > 0.0f)) {
        dp_fail(DP_ERR_ARG, "train: --lr must be positive, found %g", o.lr);
        return report_error(world);
    }
    if (o.weight_decay < 0.0f) {
        dp_fail(DP_ERR_ARG, "train: --weight-decay must be >= 0, found %g", o.weight_decay);
        return report_error(world);
    }
    int profile_warmup = DP_PROFILE_DEFAULT_WARMUP, profile_window = DP_PROFILE_DEFAULT_WINDOW;
    if (o.profile_steps && train_profile_parse(o.profile_steps, &profile_warmup, &profile_window) != DP_OK)
        return report_error(world);
    if (!o.profile && !o.profile_steps) profile_window = 0; /* off */
    dp_optim_config_t optim;
    dp_lr_schedule_t schedule;
    if (optimizer_options(&o, &optim, &schedule) != DP_OK) return report_error(world);
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
    dp_allreduce_kind_t allreduce = DP_ALLREDUCE_RING; /* chunked; "ring" is its old name, kept as an alias */
    if (o.allreduce && strcmp(o.allreduce, "naive") == 0) {
        allreduce = DP_ALLREDUCE_NAIVE;
    } else if (o.allreduce && strcmp(o.allreduce, "chunked") != 0 && strcmp(o.allreduce, "ring") != 0) {
        dp_fail(DP_ERR_ARG, "train: --allreduce: '%s' is not ring or naive (or chunked, of which ring is an alias)",
                o.allreduce);
        return report_error(world);
    }
    dp_sync_kind_t sync = DP_SYNC_ALLREDUCE;
    if (o.sync && strcmp(o.sync, "ps") == 0) {
        sync = DP_SYNC_PS;
    } else if (o.sync && strcmp(o.sync, "allreduce") != 0) {
        dp_fail(DP_ERR_ARG, "train: --sync: '%s' is not allreduce or ps", o.sync);
        return report_error(world);
    }
    int overlap = world->size > 1;
    if (o.overlap && strcmp(o.overlap, "on") == 0) {
        overlap = 1;
    } else if (o.overlap && strcmp(o.overlap, "off") != 0) {
        dp_fail(DP_ERR_ARG, "train: --overlap: '%s' is not on or off", o.overlap);
        return report_error(world);
    }
    if (o.cuda_graph && strcmp(o.cuda_graph, "on") != 0 && strcmp(o.cuda_graph, "off") != 0) {
        dp_fail(DP_ERR_ARG, "train: --cuda-graph: '%s' is not on or off", o.cuda_graph);
        return report_error(world);
    }
    if (o.metrics_path && check_output_path("metrics", o.metrics_path) != DP_OK) return report_error(world);
    if (o.plot_path && check_output_path("plot", o.plot_path) != DP_OK) return report_error(world);
    if (o.save_path && check_output_path("save", o.save_path) != DP_OK) return report_error(world);
    if (o.accumulate < 1) o.accumulate = 1;
    if ((int64_t)o.batch_size * o.accumulate > (1 << 24)) {
        dp_fail(DP_ERR_ARG, "train: --batch-size %d x --accumulate %d is more than %d examples per step",
                o.batch_size, o.accumulate, 1 << 24);
        return report_error(world);
    }
    dp_augment_t augment = {0};
    char why[1024];
    if (o.augment && dp_augment_parse(o.augment, &augment) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        dp_fail(DP_ERR_ARG, "train: --%s", why);
        return report_error(world);
    }
    int norm_n = 0;
    float norm_mean[DP_DATA_MAX_CHANNELS], norm_std[DP_DATA_MAX_CHANNELS];
    if (o.normalize && dp_normalize_parse(o.normalize, &norm_n, norm_mean, norm_std) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        dp_fail(DP_ERR_ARG, "train: --normalize: %s", why);
        return report_error(world);
    }

    int exit_code = 1;
    dp_model_t *model = NULL;
    dp_dataset_t train_set = {0}, test_set = {0};
    dp_batch_source_t *train_source = NULL, *test_source = NULL;
    dp_trainer_t *trainer = NULL;

    if (dp_model_load(o.model, &model) != DP_OK) goto done;
    char frozen_note[sizeof ((train_printer_t *)0)->frozen];
    if (train_freeze_model(&o, model, frozen_note, sizeof frozen_note) != DP_OK) goto done;
    if (dp_dataset_load(o.data_dir, "train", &train_set) != DP_OK) goto done;
    if (dp_dataset_load(o.data_dir, "t10k", &test_set) != DP_OK) goto done;
    int c, h, w;
    dp_model_input_shape(model, &c, &h, &w);
    if (train_set.channels != c || train_set.height != h || train_set.width != w) {
        dp_fail(DP_ERR_SHAPE, "model %s takes %dx%dx%d images, the data in %s has %dx%dx%d", o.model,
                c, h, w, o.data_dir, train_set.channels, train_set.height, train_set.width);
        goto done;
    }
    if (o.normalize && (dp_dataset_set_normalize(&train_set, norm_n, norm_mean, norm_std) != DP_OK ||
                        dp_dataset_set_normalize(&test_set, norm_n, norm_mean, norm_std) != DP_OK)) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        dp_fail(DP_ERR_ARG, "train: --normalize %s: %s", o.normalize, why);
        goto done;
    }
    dp_dataset_truncate(&train_set, o.limit);
    const int step_batch = o.batch_size * o.accumulate; /* the global batch of one optimizer step */
    if (o.batch_size < num_devices * world->size) {
        dp_fail(DP_ERR_ARG, "train: --batch-size %d is smaller than the number of devices (%d): every device "
                "needs at least one example", o.batch_size, num_devices * world->size);
        goto done;
    }
    if (step_batch > train_set.count) {
        if (o.accumulate > 1)
            dp_fail(DP_ERR_ARG, "train: --batch-size %d x --accumulate %d is larger than the training set (%d "
                    "images)", o.batch_size, o.accumulate, train_set.count);
        else
            dp_fail(DP_ERR_ARG, "train: --batch-size %d is larger than the training set (%d images)",
                    o.batch_size, train_set.count);
        goto done;
    }

    dp_trainer_config_t config = {
        .model = model,
        .num_devices = num_devices,
        .threads_per_device = o.threads_per_device,
        .device_ids = device_ids,
        .allreduce = allreduce,
        .overlap = overlap,
        .sync = sync,
        .world = *world,
        .optim = optim,
        .seed = o.seed,
        .sync_batch_norm = o.sync_batch_norm,
        .backend = backends[0],
        .backends = backends,
        .accumulate = o.accumulate,
        .profile_steps = profile_window,
        .profile_warmup = profile_warmup,
        .cuda_graph_off = o.cuda_graph && strcmp(o.cuda_graph, "off") == 0,
    };
    if (dp_trainer_new(&config, &trainer) != DP_OK) goto done;
    const int train_count = train_set.count, test_count = test_set.count;
    /* the data as batch sources (batch_source.h): they take the datasets */
    if (dp_memory_source_new(&train_set, &augment, 1, &train_source) != DP_OK ||
        dp_memory_source_new(&test_set, NULL, 1, &test_source) != DP_OK)
        goto done;
    if (strlen(o.model) >= sizeof ((dp_checkpoint_info_t *)0)->model) {
        dp_fail(DP_ERR_ARG, "train: --model: a path of %zu bytes, checkpoints hold up to %zu", strlen(o.model),
                sizeof ((dp_checkpoint_info_t *)0)->model - 1);
        goto done;
    }
    train_printer_t printer = {.o = &o, .world = world, .speaks = speaks, .train_count = train_count,
                               .test_count = test_count, .devices_note = devices_note[0] ? devices_note : NULL};
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
        .train_source = train_source,
        .test_source = test_source,
        .world = *world,
        .batch_size = step_batch,
        .epochs = o.epochs,
        .stop_after = o.stop_after,
        .seed = o.seed,
        .schedule = schedule,
        .eval_batch_size = 1000,
        .metrics_path = o.metrics_path,
        .plot_path = o.plot_path,
        .save_path = o.save_path,
        .resume_path = o.resume_path,
        .init_path = o.init_path,
        .save_every_steps = o.save_every_steps,
        .augment_text = o.augment,
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
    if (result.first_epoch >= result.last_epoch) { /* the saved model's accuracy instead */
        if (speaks) printf("test acc: %.4f on %d images\n", result.test_acc, result.test_count);
    } else if (speaks) { /* the book's summary line */
        printf("test acc: %.2f, %.1f sec/epoch on %s\n", result.test_acc, result.mean_epoch_sec, printer.devices);
    }
    dp_cuda_graph_counts_t graphs;
    if (!dp_trainer_cuda_graph(trainer, &graphs) && speaks && !o.quiet)
        printf("cuda graph: %llu steps launched as graphs (%llu captures), %llu steps as made (warm-up or a shape without a graph)\n",
               (unsigned long long)graphs.launches, (unsigned long long)graphs.captures,
               (unsigned long long)graphs.as_made);
    if (profile_window > 0 && speaks &&
        train_print_profile(trainer, dp_precision_name(precision), o.channels_last) != DP_OK)
        goto done;
    if (profile_window > 0 && o.metrics_path && train_append_profile(o.metrics_path, trainer) != DP_OK) goto done;
    exit_code = 0;

done:
    if (exit_code != 0) report_error(world);
    dp_trainer_free(trainer);
    dp_batch_source_free(test_source);
    dp_batch_source_free(train_source);
    dp_dataset_free(&test_set);
    dp_dataset_free(&train_set);
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
