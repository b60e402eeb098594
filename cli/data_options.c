/* data_options.c - the data options and the opening of a run's batch
 * sources (data_options.h). IDX and CIFAR files are read into memory
 * (in-memory sources, --augment applied to their training fills); an image
 * folder is indexed (every header read, a progress line on a terminal) and
 * streamed: each sample decoded and transformed when a batch needs it, by
 * the batch loader's threads. */
#include "data_options.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/auto_augment.h"
#include "dptrain/color_jitter.h"
#include "dptrain/data.h"
#include "dptrain/image_folder.h"
#include "dptrain/json.h"

const char cli_data_usage_train[] =
    "  --transform NAME          image folders: the training transform, center (default:\n"
    "                            Resize + CenterCrop to the model's input; an image of that\n"
    "                            size as it is), resized-crop (RandomResizedCrop + flip) or\n"
    "                            squash (the whole image to the input's size, its aspect not\n"
    "                            kept; evaluation too)\n"
    "  --resize N                image folders: the shorter side before the center crop\n"
    "                            (default 256/224 of the input's larger side)\n"
    "  --exif apply|ignore       image folders: apply the EXIF orientation (default apply)\n"
    "  --dct-scale on|off        image folders: JPEGs shrunk by 2, 4 or 8 decoded at that\n"
    "                            scale for resized-crop (default on; off: PIL's exact pixels)\n"
    "  --auto-augment NAME       image folders with --transform resized-crop: after the crop\n"
    "                            and flip, torchvision's TrivialAugmentWide (ta_wide),\n"
    "                            RandAugment (ra: 2 ops) or AutoAugment's policy imagenet,\n"
    "                            cifar10 or svhn, with PIL's pixels, per sample from the\n"
    "                            run's seed; none (default); saved, --resume keeps it\n"
    "  --ra-magnitude N          RandAugment's magnitude bin, 0 to 30 (default 9; with ra)\n"
    "  --interpolation bilinear|bicubic\n"
    "                            image folders: the filter of every resize (the crop's, the\n"
    "                            evaluation's Resize, squash), PIL's exact bytes: bilinear\n"
    "                            (default) or bicubic (timm's pretrained weights'); saved\n"
    "                            with the model (eval and predict use it), --resume keeps it\n"
    "  --auto-augment-interpolation bilinear|nearest|bicubic\n"
    "                            the auto-augmentation's shears, translations and rotations\n"
    "                            (PIL's pixels): default --interpolation's (torchvision's\n"
    "                            reference recipe passes it on), or nearest (the transforms'\n"
    "                            own default)\n"
    "  --color-jitter B[,C,S,H]  image folders with --transform resized-crop: after the crop\n"
    "                            and flip, torchvision's ColorJitter with PIL's pixels:\n"
    "                            brightness, contrast, saturation (one value: all three),\n"
    "                            hue (0 to 0.5; default 0); 0 turns one off; not with\n"
    "                            --auto-augment; saved, --resume keeps it\n"
    "  --skip-bad-files          image folders: leave out files that cannot be read (counted)\n"
    "                            instead of stopping\n"
    "  --cache-mb N              image folders: keep up to N MB of decoded samples in memory\n"
    "                            after their first use (default 0)\n"
    "  --loader-threads N        threads decoding image folders while the devices compute\n"
    "                            (default: the cores the devices leave free, at least 1)\n"
    "  --holdout F               image folders without a test folder (DIR/CLASS/... or\n"
    "                            DIR/train alone): the fraction of each class held out as\n"
    "                            the test split, the same files every run (default 0.1)\n";

const char cli_data_usage_eval[] =
    "  --resize N                image folders: the shorter side before the center crop\n"
    "                            (default: the checkpoint's)\n"
    "  --exif apply|ignore       image folders: apply the EXIF orientation (default apply)\n"
    "  --interpolation bilinear|bicubic\n"
    "                            image folders: the resize's filter (default: the\n"
    "                            checkpoint's)\n"
    "  --skip-bad-files          image folders: leave out files that cannot be read\n"
    "  --loader-threads N        threads reading the image headers (default: the cores)\n"
    "  --holdout F               image folders without a test folder: the fraction held out\n"
    "                            as the test split (default: the checkpoint's, else 0.1)\n";

cli_data_options_t cli_data_defaults(void) {
    return (cli_data_options_t){.dir = DP_DEFAULT_DATA_DIR, .loader_threads = -1, .ra_magnitude = -1};
}

void cli_data_option_entries(cli_data_options_t *o, int training, option_t *table, int *used) {
    const option_t all[CLI_DATA_OPTIONS] = {
        {"transform", OPT_STRING, &o->transform, 0, 0},
        {"resize", OPT_INT, &o->resize, 1, 65535},
        {"exif", OPT_STRING, &o->exif, 0, 0},
        {"interpolation", OPT_STRING, &o->interpolation, 0, 0},
        {"dct-scale", OPT_STRING, &o->dct_scale, 0, 0},
        {"auto-augment", OPT_STRING, &o->auto_augment, 0, 0},
        {"ra-magnitude", OPT_INT, &o->ra_magnitude, 0, DP_AA_BINS - 1},
        {"auto-augment-interpolation", OPT_STRING, &o->aa_interpolation, 0, 0},
        {"color-jitter", OPT_STRING, &o->color_jitter, 0, 0},
        {"skip-bad-files", OPT_FLAG, &o->skip_bad, 0, 0},
        {"cache-mb", OPT_INT, &o->cache_mb, 0, 1 << 24},
        {"loader-threads", OPT_INT, &o->loader_threads, 0, 256},
        {"holdout", OPT_STRING, &o->holdout, 0, 0},
    };
    for (int i = 0; i < CLI_DATA_OPTIONS; i++) {
        const char *name = all[i].name;
        if (!training && (!strcmp(name, "transform") || !strcmp(name, "dct-scale") || !strcmp(name, "cache-mb") ||
                          !strcmp(name, "auto-augment") || !strcmp(name, "ra-magnitude") ||
                          !strcmp(name, "auto-augment-interpolation") || !strcmp(name, "color-jitter")))
            continue;
        table[(*used)++] = all[i];
    }
}

/* The "on"/"off"-style values: 1, 0, or one line naming the option. */
static dp_status_t two_way(const char *command, const char *option, const char *text, const char *yes,
                           const char *no, int fallback, int *out) {
    *out = fallback;
    if (!text) return DP_OK;
    if (!strcmp(text, yes)) *out = 1;
    else if (!strcmp(text, no)) *out = 0;
    else return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' is not %s or %s", command, option, text, yes, no);
    return DP_OK;
}

/* --holdout's fraction: above 0 and below 1, the whole text a number. */
static dp_status_t parse_holdout(const char *command, const char *text, double *out) {
    char *end;
    *out = text && *text ? strtod(text, &end) : 0.0;
    if (!text || !*text || *end || !(*out > 0.0 && *out < 1.0))
        return dp_fail(DP_ERR_ARG, "%s: --holdout: '%s' is not a fraction above 0 and below 1 (e.g. 0.1: a tenth of "
                       "each class for testing)", command, text ? text : "");
    return DP_OK;
}

dp_status_t cli_parse_interpolation(const char *command, const char *text, dp_interpolation_t *out) {
    *out = DP_INTERP_BILINEAR;
    if (!text || !strcmp(text, "bilinear")) return DP_OK;
    if (!strcmp(text, "bicubic")) {
        *out = DP_INTERP_BICUBIC;
        return DP_OK;
    }
    return dp_fail(DP_ERR_ARG, "%s: --interpolation: '%s' is not bilinear or bicubic", command, text);
}

dp_status_t cli_transform_interpolated(const char *command, const char *saved, const char *interpolation,
                                       int channels, int height, int width, char *out, size_t size) {
    snprintf(out, size, "%s", saved);
    if (!interpolation) return DP_OK;
    dp_interpolation_t chosen;
    DP_TRY(cli_parse_interpolation(command, interpolation, &chosen));
    if (!saved[0])
        return dp_fail(DP_ERR_ARG, "%s: --interpolation %s: only for a checkpoint of an image folder (this one "
                       "records no resize: its images are resized whole, bilinear)", command, interpolation);
    dp_sample_options_t eval;
    DP_TRY(dp_eval_transform_parse(saved, channels, height, width, &eval));
    eval.interpolation = chosen;
    dp_eval_transform_text(&eval, out, size);
    return DP_OK;
}

/* --auto-augment, --ra-magnitude and --auto-augment-interpolation: the policy, or one line. */
static dp_status_t parse_auto_augment(const char *command, const cli_data_options_t *o, dp_auto_augment_t *policy) {
    char who[64];
    snprintf(who, sizeof who, "%s: --auto-augment", command);
    policy->kind = DP_AUTO_AUGMENT_NONE;
    policy->magnitude = o->ra_magnitude >= 0 ? o->ra_magnitude : DP_RA_MAGNITUDE;
    if (o->auto_augment) DP_TRY(dp_auto_augment_parse(o->auto_augment, who, &policy->kind));
    if (o->ra_magnitude >= 0 && policy->kind != DP_AUTO_AUGMENT_RA)
        return dp_fail(DP_ERR_ARG, "%s: --ra-magnitude %d: only with --auto-augment ra", command, o->ra_magnitude);
    const char *text = o->aa_interpolation ? o->aa_interpolation : o->interpolation; /* the recipe's: the same */
    if (!text || !strcmp(text, "bilinear")) policy->interpolation = DP_AA_BILINEAR;
    else if (!strcmp(text, "nearest")) policy->interpolation = DP_AA_NEAREST;
    else if (!strcmp(text, "bicubic")) policy->interpolation = DP_AA_BICUBIC;
    else if (o->aa_interpolation)
        return dp_fail(DP_ERR_ARG, "%s: --auto-augment-interpolation: '%s' is not bilinear, nearest or bicubic",
                       command, text);
    else
        policy->interpolation = DP_AA_BILINEAR; /* a bad --interpolation: its own line, later */
    if (o->aa_interpolation && policy->kind == DP_AUTO_AUGMENT_NONE)
        return dp_fail(DP_ERR_ARG, "%s: --auto-augment-interpolation %s: only with --auto-augment", command,
                       o->aa_interpolation);
    return DP_OK;
}

/* --color-jitter: the values (all 0 without it), or one line. */
static dp_status_t parse_color_jitter(const char *command, const cli_data_options_t *o, dp_color_jitter_t *jitter) {
    char who[64];
    snprintf(who, sizeof who, "%s: --color-jitter", command);
    *jitter = (dp_color_jitter_t){{0}};
    return o->color_jitter ? dp_color_jitter_parse(o->color_jitter, who, jitter) : DP_OK;
}

/* --- the index's progress line --------------------------------------------------------- */
typedef struct {
    int shown, terminal;
    const char *dir;
} progress_t;

static void index_progress(void *ctx, const char *split, long done, long total) {
    progress_t *p = ctx;
    if (!p->terminal) return;
    const char *slash = *split ? "/" : "";
    if (total == 0) fprintf(stderr, "\rindexing %s%s%s ...", p->dir, slash, split);
    else fprintf(stderr, "\rindexing %s%s%s: %ld/%ld files read", p->dir, slash, split, done, total);
    if (total && done == total) fputc('\n', stderr);
    fflush(stderr);
    p->shown = 1;
}

/* --- image folders ----------------------------------------------------------------------- */
/* eval with a checkpoint's class names: the labels are positions among them (image_folder.h
 * dp_image_folder_match_classes); a folder of other names is labelled in its own sorted order, with a warning:
 * *by_name 0. */
static dp_status_t match_class_folders(const char *dir, const char *split, char *const *classes, int num_classes,
                                       int *by_name) {
    char warning[5000], why[5000];
    if (dp_image_folder_match_classes(dir, split, classes, num_classes, by_name, warning, sizeof warning) != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(DP_ERR_FORMAT, "eval: %s: eval counts a prediction right by the checkpoint's class names", why);
    }
    if (warning[0]) fprintf(stderr, "dptrain: warning: eval: %s\n", warning);
    return DP_OK;
}

/* The held-out split's labels as positions among the checkpoint's classes (image_folder.h dp_image_index_relabel). */
static dp_status_t relabel(dp_image_index_t *index, char *const *classes, int num_classes) {
    dp_status_t status = dp_image_index_relabel(index, classes, num_classes);
    if (status != DP_ERR_FORMAT) return status; /* out of memory: its own line */
    char why[1024];
    snprintf(why, sizeof why, "%s", dp_error_message());
    return dp_fail(status, "eval: %s", why);
}

static dp_status_t open_folder(const cli_data_options_t *o, int training, int channels, int height, int width,
                               char *const *classes, int num_classes, int threads, const dp_world_t *world,
                               cli_data_t *out) {
    const char *command = training ? "train" : "eval";
    int resized_crop = 0, squash = 0, exif = 1, dct = 1;
    if (o->transform && strcmp(o->transform, "center") != 0 && strcmp(o->transform, "resized-crop") != 0 &&
        strcmp(o->transform, "squash") != 0)
        return dp_fail(DP_ERR_ARG, "%s: --transform: '%s' is not center, resized-crop or squash", command,
                       o->transform);
    resized_crop = o->transform && !strcmp(o->transform, "resized-crop");
    squash = o->transform && !strcmp(o->transform, "squash");
    if (squash && o->resize)
        return dp_fail(DP_ERR_ARG, "%s: --resize %d: the squash transform resizes to the model's input, %d x %d",
                       command, o->resize, height, width);
    DP_TRY(two_way(command, "exif", o->exif, "apply", "ignore", 1, &exif));
    DP_TRY(two_way(command, "dct-scale", o->dct_scale, "on", "off", 1, &dct));
    dp_interpolation_t interpolation;
    DP_TRY(cli_parse_interpolation(command, o->interpolation, &interpolation));
    dp_auto_augment_t policy;
    DP_TRY(parse_auto_augment(command, o, &policy));
    if (policy.kind != DP_AUTO_AUGMENT_NONE && !resized_crop)
        return dp_fail(DP_ERR_ARG, "%s: --auto-augment %s: only with --transform resized-crop (torchvision's recipe: "
                       "RandomResizedCrop, flip, then the augmentation)", command, o->auto_augment);
    dp_color_jitter_t jitter;
    DP_TRY(parse_color_jitter(command, o, &jitter));
    if (dp_color_jitter_on(&jitter) && !resized_crop)
        return dp_fail(DP_ERR_ARG, "%s: --color-jitter %s: only with --transform resized-crop (timm's recipe: "
                       "RandomResizedCrop, flip, then ColorJitter)", command, o->color_jitter);
    if (dp_color_jitter_on(&jitter) && policy.kind != DP_AUTO_AUGMENT_NONE)
        return dp_fail(DP_ERR_ARG, "%s: --color-jitter %s with --auto-augment %s: one or the other (timm turns the "
                       "color jitter off under an auto-augmentation; torchvision's recipe has none)", command,
                       o->color_jitter, o->auto_augment);
    progress_t progress = {.terminal = world->rank == 0 && isatty(fileno(stderr)), .dir = o->dir};
    dp_index_options_t io = {.skip_bad = o->skip_bad, .ignore_exif = !exif, .threads = threads,
                             .progress = index_progress, .progress_ctx = &progress};
    dp_folder_options_t fo = {.skip_bad = o->skip_bad, .cache_bytes = (size_t)o->cache_mb << 20};
    dp_sample_mode_t eval_mode = squash ? DP_SAMPLE_SQUASH : DP_SAMPLE_FIXED;
    fo.train = dp_sample_options_default(resized_crop ? DP_SAMPLE_TRAIN : eval_mode, channels, height, width);
    fo.eval = dp_sample_options_default(eval_mode, channels, height, width);
    fo.train.dct_scale = resized_crop && dct;
    fo.train.auto_augment = policy;
    fo.train.color_jitter = jitter;
    fo.train.ignore_exif = fo.eval.ignore_exif = !exif;
    fo.train.resize_size = fo.eval.resize_size = o->resize;
    fo.train.interpolation = fo.eval.interpolation = interpolation;
    dp_sample_options_t test = fo.eval; /* the test split's: at train --val-image-size where given */
    if (o->val_image_size) test.height = o->val_height, test.width = o->val_width;
    dp_eval_transform_text(&test, out->transform, sizeof out->transform);
    char augmentation[96] = "";
    if (policy.kind == DP_AUTO_AUGMENT_RA)
        snprintf(augmentation, sizeof augmentation, ", auto-augment ra %d", policy.magnitude);
    else if (policy.kind != DP_AUTO_AUGMENT_NONE)
        snprintf(augmentation, sizeof augmentation, ", auto-augment %s", dp_auto_augment_kind_name(policy.kind));
    static const char *const aa_names[] = {[DP_AA_BILINEAR] = "bilinear", [DP_AA_NEAREST] = "nearest",
                                           [DP_AA_BICUBIC] = "bicubic"};
    const int aa_as_resize = (int)policy.interpolation == (interpolation == DP_INTERP_BICUBIC ? DP_AA_BICUBIC
                                                                                              : DP_AA_BILINEAR);
    if (policy.kind != DP_AUTO_AUGMENT_NONE && !aa_as_resize) /* the default: --interpolation's, not written */
        snprintf(augmentation + strlen(augmentation), sizeof augmentation - strlen(augmentation),
                 ", aa-interpolation %s", aa_names[policy.interpolation]);
    if (dp_color_jitter_on(&jitter)) {
        char values[64];
        if (dp_color_jitter_text(&jitter, values, sizeof values) >= 48)
            return dp_fail(DP_ERR_ARG, "%s: --color-jitter %s: too many digits (the checkpoint records the values in "
                           "47 characters; e.g. 0.4,0.4,0.4,0.1)", command, o->color_jitter);
        snprintf(augmentation, sizeof augmentation, ", color-jitter %s", values);
    }
    /* the filter before the augmentation: its parsers read to the text's end (", bicubic" only: older texts) */
    snprintf(out->train_transform, sizeof out->train_transform, "%s%s%s%s",
             resized_crop ? "resized-crop" : squash ? "squash" : "center",
             resized_crop && !dct ? ", dct-scale off" : "",
             interpolation == DP_INTERP_BICUBIC ? ", bicubic" : "", augmentation);
    /* the training folders: DIR/train, or DIR's own class folders; the test split DIR/test, else DIR/val, else
     * held out of them */
    const char *root = dp_image_folder_train_split(o->dir);
    const char *test_split = dp_image_folder_test_split(o->dir);
    const int held_out = !test_split;
    snprintf(out->test_split, sizeof out->test_split, "%s", test_split ? test_split : "");
    double fraction = DP_HOLDOUT_DEFAULT;
    if (o->holdout && !held_out)
        return dp_fail(DP_ERR_ARG, "%s: --holdout %s: %s/%s is the test split (a fraction is held out only of a "
                       "folder without one)", command, o->holdout, o->dir, test_split);
    const char *holdout = o->holdout ? o->holdout : o->holdout_default;
    if (holdout) DP_TRY(parse_holdout(command, holdout, &fraction));
    if (held_out && holdout) snprintf(out->holdout, sizeof out->holdout, "%s", holdout);
    else if (held_out) snprintf(out->holdout, sizeof out->holdout, "%g", fraction);
    dp_image_index_t train_index = {0}, test_index = {0};
    dp_status_t status = DP_OK;
    if (!training && classes) { /* eval: the checkpoint's classes name the labels */
        int by_name;
        status = match_class_folders(o->dir, held_out ? root : test_split, classes, num_classes, &by_name);
        if (!by_name) classes = NULL, num_classes = 0;
        if (!by_name && !held_out && !*root) /* a test folder alone: its own folders are the classes */
            status = dp_image_index_build(o->dir, test_split, NULL, 0, &io, &test_index);
    }
    if (status == DP_OK && (training || held_out)) {
        status = dp_image_index_build(o->dir, root, NULL, 0, &io, &train_index);
        if (status == DP_OK) status = dp_image_index_check_ranks(&train_index, world, "--data train");
        if (status == DP_OK && held_out)
            status = dp_image_index_hold_out(&train_index, fraction, o->dir, &test_index);
        if (status == DP_OK && held_out && !training && classes) status = relabel(&test_index, classes, num_classes);
        out->train_total = train_index.count;
        if (status == DP_OK && o->limit > 0 && o->limit < train_index.count) train_index.count = o->limit;
        if (training || !classes) {
            classes = train_index.class_names;
            num_classes = train_index.num_classes;
        }
    } else if (status == DP_OK && !classes && !test_index.paths) { /* eval, no checkpoint's classes: DIR/train's */
        dp_image_index_t names = {0};
        io.skip_bad = 1; /* only the classes are wanted */
        status = dp_image_index_build(o->dir, *root ? root : "train", NULL, 0, &io, &names);
        io.skip_bad = o->skip_bad;
        if (status == DP_OK) status = dp_image_index_build(o->dir, test_split, names.class_names, names.num_classes,
                                                           &io, &test_index);
        dp_image_index_free(&names);
    }
    if (status == DP_OK && !test_index.paths)
        status = dp_image_index_build(o->dir, test_split, classes, num_classes, &io, &test_index);
    if (status == DP_OK) status = dp_image_index_check_ranks(&test_index, world, "--data test");
    if (status == DP_OK && training && train_index.skipped + test_index.skipped > 0 && world->rank == 0)
        fprintf(stderr, "dptrain: --skip-bad-files: %d unreadable files left out (%d training, %d test)\n",
                train_index.skipped + test_index.skipped, train_index.skipped, test_index.skipped);
    if (status == DP_OK && training) status = dp_folder_source_new(&train_index, &fo, &out->train);
    if (status == DP_OK) {
        dp_folder_options_t eval = fo;
        eval.cache_bytes = training ? fo.cache_bytes : 0;
        if (o->val_image_size) eval.train = eval.eval = test; /* its samples are the test's size */
        status = dp_folder_source_new(&test_index, &eval, &out->test);
    }
    dp_image_index_free(&train_index);
    dp_image_index_free(&test_index);
    out->layout = "image folder";
    out->loader_threads = threads;
    return status;
}

/* --- files in memory --------------------------------------------------------------------- */
static dp_status_t open_memory(const cli_data_options_t *o, int training, int channels, int height, int width,
                               const dp_augment_t *augment, cli_data_t *out) {
    dp_dataset_t train = {0}, test = {0};
    dp_status_t status = training ? dp_dataset_load(o->dir, "train", &train) : DP_OK;
    if (status == DP_OK) status = dp_dataset_load(o->dir, "t10k", &test);
    const dp_dataset_t *shape = training ? &train : &test;
    if (status == DP_OK && o->image_size && (shape->height != height || shape->width != width))
        status = dp_fail(DP_ERR_ARG, "%s: --image-size %s: the data in %s has images of %d x %d, one size for all; "
                         "only an image folder's are resized to another", training ? "train" : "eval", o->image_size,
                         o->dir, shape->height, shape->width);
    else if (status == DP_OK && o->val_image_size)
        status = dp_fail(DP_ERR_ARG, "train: --val-image-size %s: the data in %s has images of %d x %d, one size for "
                         "all; only an image folder's are resized to another", o->val_image_size, o->dir,
                         shape->height, shape->width);
    else if (status == DP_OK && (shape->channels != channels || shape->height != height || shape->width != width))
        status = dp_fail(DP_ERR_SHAPE, "model %s takes %dx%dx%d images, the data in %s has %dx%dx%d",
                         o->model ? o->model : "(unnamed)", channels, height, width, o->dir, shape->channels,
                         shape->height, shape->width);
    if (status == DP_OK && training) {
        out->train_total = train.count;
        dp_dataset_truncate(&train, o->limit);
        status = dp_memory_source_new(&train, augment, 1, &out->train);
    }
    if (status == DP_OK) status = dp_memory_source_new(&test, NULL, 1, &out->test);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    out->loader_threads = 0; /* a fill is a copy: on the caller's thread between steps */
    return status;
}

/* Whether text can be a checkpoint's data.dir (dp_checkpoint_save refuses others): one line, no control
 * character, and UTF-8 (a folder named in Latin-1 is not; the run then records none, as for a newline). */
static int checkpoint_text(const char *text) {
    for (const unsigned char *b = (const unsigned char *)text; *b; b++)
        if (*b < 0x20 || *b == 0x7f) return 0;
    return dp_utf8_valid(text, strlen(text));
}

dp_status_t cli_data_open(const cli_data_options_t *o, int training, int channels, int height, int width,
                          char *const *classes, int num_classes, int cpu_threads, const dp_world_t *world,
                          cli_data_t *out) {
    memset(out, 0, sizeof *out);
    const char *command = training ? "train" : "eval";
    dp_augment_t augment = {0};
    if (o->augment && dp_augment_parse(o->augment, &augment) != DP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(DP_ERR_ARG, "%s: --%s", command, why);
    }
    dp_auto_augment_t policy;
    DP_TRY(parse_auto_augment(command, o, &policy));
    dp_color_jitter_t jitter;
    DP_TRY(parse_color_jitter(command, o, &jitter));
    dp_data_layout_t layout;
    dp_status_t detected = dp_data_detect_layout(o->dir, &layout);
    if (detected != DP_OK) {
        /* eval with the checkpoint's classes reads a test folder alone: DIR/test/CLASS/... without DIR/train */
        if (training || !classes || !dp_image_folder_test_split(o->dir)) return detected;
        dp_error_clear();
        layout = DP_DATA_IMAGE_FOLDER;
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o->loader_threads >= 0 ? o->loader_threads : cores - cpu_threads;
    if (threads < 1) threads = 1;
    dp_status_t status;
    if (layout == DP_DATA_IMAGE_FOLDER) {
        status = open_folder(o, training, channels, height, width, classes, num_classes, threads, world, out);
        if (status == DP_OK && augment.crop_padding + augment.flip > 0)
            status = dp_folder_source_set_augment(out->train, &augment);
    } else if (policy.kind != DP_AUTO_AUGMENT_NONE) {
        status = dp_fail(DP_ERR_ARG, "%s: --auto-augment %s: only for image folders (it works on each decoded image; "
                         "%s is %s data)", command, o->auto_augment, o->dir, dp_data_layout_name(layout));
    } else if (o->interpolation) {
        status = dp_fail(DP_ERR_ARG, "%s: --interpolation %s: only for image folders (IDX and CIFAR images are not "
                         "resized; %s is %s data)", command, o->interpolation, o->dir, dp_data_layout_name(layout));
    } else if (dp_color_jitter_on(&jitter)) {
        status = dp_fail(DP_ERR_ARG, "%s: --color-jitter %s: only for image folders (it works on each decoded image; "
                         "%s is %s data)", command, o->color_jitter, o->dir, dp_data_layout_name(layout));
    } else if (o->holdout) {
        status = dp_fail(DP_ERR_ARG, "%s: --holdout %s: %s is %s data with a test split of its own (a fraction is held "
                         "out only of an image folder without a test folder)", command, o->holdout, o->dir,
                         dp_data_layout_name(layout));
    } else {
        status = open_memory(o, training, channels, height, width, &augment, out);
        out->layout = dp_data_layout_name(layout);
    }
    if (status == DP_OK && o->normalize) {
        int n = 0;
        float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
        char why[1024];
        status = dp_normalize_parse(o->normalize, &n, mean, std);
        if (status == DP_OK && out->train) status = dp_batch_source_set_normalize(out->train, n, mean, std);
        if (status == DP_OK) status = dp_batch_source_set_normalize(out->test, n, mean, std);
        if (status != DP_OK) {
            snprintf(why, sizeof why, "%s", dp_error_message());
            status = dp_fail(DP_ERR_ARG, "%s: --normalize %s: %s", command, o->normalize, why);
        }
    }
    if (status != DP_OK) cli_data_close(out);
    char absolute[PATH_MAX];
    if (status == DP_OK && realpath(o->dir, absolute) && strlen(absolute) < sizeof out->dir && checkpoint_text(absolute))
        memcpy(out->dir, absolute, strlen(absolute) + 1); /* checkpoints keep their text values on one line */
    return status;
}

dp_status_t cli_check_saved_data_dir(const char *command, const char *checkpoint, const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && (S_ISDIR(st.st_mode) || dp_image_folder_is_list(dir))) return DP_OK;
    return dp_fail(DP_ERR_ARG, "%s: %s was trained on the data in %s (its data.dir), which is not %s here: give "
                   "that data's folder with --data DIR", command, checkpoint, dir,
                   stat(dir, &st) == 0 ? "a directory or an image list" : "found");
}

void cli_data_close(cli_data_t *d) {
    dp_batch_source_free(d->train);
    dp_batch_source_free(d->test);
    d->train = d->test = NULL;
}
