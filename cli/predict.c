/* predict.c - `dptrain predict`: classify images (JPEG, PNG, PGM/PPM, BMP) with a checkpoint.
 *
 * A folder among the arguments stands for the image files under it (its
 * subfolders too, in the order an image folder's class is read:
 * image_folder.h dp_image_list_files). Every file's header is read first,
 * so a file that is not an image stops the command before anything is
 * printed; then the images are decoded and converted (predict.h
 * dp_predict_image_input: channels, the training data's evaluation
 * transform or a PIL-style bilinear resize, / 255, its normalisation) a
 * batch at a time, so memory holds one batch whatever the number
 * of files, and each batch runs on all devices (predict.h), each image
 * getting one line (or one JSON object with --json) with its top classes
 * and their probabilities. A file whose header reads but whose data does
 * not decode stops the command at its batch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "class_names.h"
#include "commands.h"
#include "data_options.h"
#include "dptrain/checkpoint.h"
#include "dptrain/data.h"
#include "dptrain/image.h"
#include "dptrain/image_folder.h"
#include "dptrain/json.h"
#include "dptrain/model_file.h"
#include "dptrain/predict.h"
#include "image_size.h"
#include "options.h"

static const char predict_usage[] =
    "usage: dptrain predict --resume CK.safetensors [options] IMAGE|FOLDER...\n"
    "\n"
    "Classifies JPEG, PNG, PGM/PPM and BMP images (any size, bit depth, gray or\n"
    "colour; told by their bytes; EXIF orientation applied) with a checkpoint's\n"
    "model, on all devices. Each image is made into the\n"
    "model's input the way the training data was: converted to its channels\n"
    "(colour -> gray by the ITU-R 601-2 luma 0.299 R + 0.587 G + 0.114 B, as PIL's\n"
    "convert(\"L\"); gray -> RGB by copying; alpha dropped), resized with\n"
    "PIL's bilinear or bicubic filter, the checkpoint's (antialiased when shrinking,\n"
    "as torchvision's Resize): as\n"
    "the checkpoint's evaluation transform says (an image folder's Resize(S) +\n"
    "CenterCrop to the input, an image of the input's size as it is; squash),\n"
    "else the whole image to the input's size; scaled to [0, 1] as pixel / 255\n"
    "and normalised as the checkpoint's data was (--normalize). Fashion-MNIST is\n"
    "white clothes on black: invert photos of dark things on white first.\n"
    "\n"
    "A FOLDER stands for the image files under it (subfolders too, sorted, the\n"
    "file names torchvision's ImageFolder takes). Images are read a batch at a\n"
    "time: any number of files fits in memory.\n"
    "\n"
    "Prints one line per image: FILE: CLASS PROB, ... (the top classes, most\n"
    "probable first; probabilities from the softmax of the logits).\n"
    "\n"
    "options:\n"
    "  --resume FILE       the checkpoint (safetensors), required\n"
    "  --model NAME|FILE   the network (default: the checkpoint's)\n"
    "  --top K             classes shown per image (default 3, or all of a model with\n"
    "                      fewer classes)\n"
    "  --labels FILE       class names, one per line, as many as the model has\n"
    "                      classes (default: the checkpoint's, the class folders\n"
    "                      of the image folder it was trained on or CIFAR-10's;\n"
    "                      else Fashion-MNIST's ten names)\n"
    "  --json              one JSON object per line instead: {\"image\": FILE,\n"
    "                      \"top\": [{\"class\": I, \"label\": NAME, \"prob\": P}, ...]}\n"
    "  --logits            with --json, also \"logits\": [...] (every class, %.9g)\n"
    "  --image-size N|HxW  classify at another input height and width than the\n"
    "                      checkpoint's (eval --image-size): its model with that input,\n"
    "                      its parameters loaded (refused for a network whose\n"
    "                      parameters depend on the size); the checkpoint's\n"
    "                      Resize(S) + CenterCrop with S 256/224 of the size (one of\n"
    "                      IDX or CIFAR data: each image resized whole to it); a line\n"
    "                      on stderr says which. Default: the size its run tested\n"
    "                      every epoch at (train --val-image-size), else the model's\n"
    "  --interpolation bilinear|bicubic\n"
    "                      the resize's filter (default: the checkpoint's; only for a\n"
    "                      checkpoint of an image folder)\n"
    "  --devices N         devices to run on (default: one per core)\n"
    "  --batch-size N      images per batch (default 256)\n"
    "  --skip-bad-files    leave out files that cannot be read as images, each named\n"
    "                      in a warning line on stderr, instead of stopping\n"
    "  --help              show this help\n";

/* Splits argv[2..) into options (with their values) and images: an
 * argument not starting with "--" that is not an option's value is an
 * image; "--" ends the options. */
static int split_args(int argc, char **argv, char **opts, int *num_opts, char **images, int *num_images) {
    static const char *const flags[] = {"--json", "--logits", "--skip-bad-files", "--help", "-h", NULL};
    int only_images = 0;
    *num_opts = 2;
    opts[0] = argv[0];
    opts[1] = argv[1];
    *num_images = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (only_images || (a[0] != '-' || strcmp(a, "-") == 0)) {
            images[(*num_images)++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_images = 1;
            continue;
        }
        opts[(*num_opts)++] = argv[i];
        int is_flag = strchr(a, '=') != NULL;
        for (int f = 0; flags[f]; f++) is_flag |= strcmp(a, flags[f]) == 0;
        if (!is_flag && i + 1 < argc) opts[(*num_opts)++] = argv[++i];
    }
    return 0;
}

/* Reads `path`: exactly `count` non-empty lines (a final newline optional). */
static dp_status_t read_labels(const char *path, int count, char ***out) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return dp_fail(DP_ERR_IO, "--labels %s: cannot open (%s)", path, strerror(errno));
    char **names = dp_alloc_zeroed((size_t)count, sizeof *names, "labels");
    if (!names) {
        fclose(f);
        return DP_ERR_NOMEM;
    }
    char line[1024];
    int n = 0;
    dp_status_t status = DP_OK;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        else if (!feof(f)) {
            status = dp_fail(DP_ERR_FORMAT, "--labels %s: line %d is longer than %zu bytes", path, n + 1,
                             sizeof line - 2);
            break;
        }
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        if (len == 0) {
            status = dp_fail(DP_ERR_FORMAT, "--labels %s: line %d is empty (one class name per line)", path, n + 1);
            break;
        }
        if (n == count) {
            n++;
            break;
        }
        if (!(names[n] = strdup(line))) {
            status = dp_fail(DP_ERR_NOMEM, "out of memory reading --labels");
            break;
        }
        n++;
    }
    if (status == DP_OK && ferror(f)) /* a directory opens, then reads fail (EISDIR) */
        status = dp_fail(DP_ERR_IO, "--labels %s: cannot read (%s)", path, strerror(errno));
    fclose(f);
    if (status == DP_OK && n != count)
        status = dp_fail(DP_ERR_FORMAT, "--labels %s: %s%d names, the model has %d classes", path,
                         n > count ? "more than " : "", n > count ? count : n, count);
    if (status != DP_OK) {
        for (int i = 0; i < count; i++) free(names[i]);
        free(names);
        return status;
    }
    *out = names;
    return DP_OK;
}

/* A warning line for a file left out with --skip-bad-files. */
static void skipped(const char *why) { fprintf(stderr, "dptrain: warning: --skip-bad-files: left out: %s\n", why); }

/* The images the arguments name: a folder's image files in its place,
 * every entry its own copy; each file's header read: one line for the
 * first that is not an image, or with skip_bad a warning for each and the
 * file left out (none left is an error). */
static dp_status_t expand_images(char *const *args, int num_args, int skip_bad, char ***out, int *count) {
    char **paths = NULL;
    int n = 0, capacity = 0;
    dp_status_t status = DP_OK;
    for (int a = 0; status == DP_OK && a < num_args; a++) {
        struct stat st;
        char **found = NULL;
        int nfound = 1;
        if (stat(args[a], &st) == 0 && S_ISDIR(st.st_mode)) {
            char dir[4096]; /* without trailing slashes: DIR/NAME, not DIR//NAME */
            size_t len = strlen(args[a]);
            while (len > 1 && args[a][len - 1] == '/') len--;
            if (len >= sizeof dir) {
                status = dp_fail(DP_ERR_ARG, "predict: %.64s...: the path is too long", args[a]);
                break;
            }
            memcpy(dir, args[a], len);
            dir[len] = '\0';
            status = dp_image_list_files(dir, &found, &nfound);
            if (status == DP_OK && nfound == 0)
                status = dp_fail(DP_ERR_ARG, "predict: %s: no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                                 ".webp) in the folder or below it", args[a]);
        }
        if (status == DP_OK && n + nfound > capacity) {
            capacity = 2 * (n + nfound);
            char **grown = realloc(paths, sizeof *paths * (size_t)capacity);
            if (!grown) status = dp_fail(DP_ERR_NOMEM, "out of memory listing the images");
            else paths = grown;
        }
        for (int i = 0; status == DP_OK && i < nfound; i++) {
            if (!(paths[n] = strdup(found ? found[i] : args[a])))
                status = dp_fail(DP_ERR_NOMEM, "out of memory listing the images");
            else n++;
        }
        if (found) dp_image_list_free(found, nfound);
    }
    int kept = 0;
    for (int i = 0; status == DP_OK && i < n; i++) {
        dp_image_info_t info;
        status = dp_image_probe_file(paths[i], 0, &info);
        if (status != DP_OK && skip_bad) {
            skipped(dp_error_message());
            free(paths[i]);
            status = DP_OK;
            continue;
        }
        paths[kept++] = paths[i];
    }
    n = status == DP_OK ? kept : n;
    if (status == DP_OK && n == 0)
        status = dp_fail(DP_ERR_FORMAT, "predict: --skip-bad-files: none of the files can be read as an image");
    if (status != DP_OK) {
        dp_image_list_free(paths, n);
        return status;
    }
    *out = paths;
    *count = n;
    return DP_OK;
}

/* The checkpoint's preprocessing (data.transform, data.normalize) is one
 * the model's input can take: checked once, so that a checkpoint's fault
 * is not taken for every image's (--skip-bad-files). */
static dp_status_t check_preprocessing(const dp_checkpoint_info_t *info, int ch, int h, int w) {
    dp_sample_options_t eval;
    if (info->transform[0]) DP_TRY(dp_eval_transform_parse(info->transform, ch, h, w, &eval));
    if (!info->normalize[0]) return DP_OK;
    int n;
    float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
    DP_TRY(dp_normalize_parse(info->normalize, &n, mean, std));
    if (n != 1 && n != ch)
        return dp_fail(DP_ERR_FORMAT, "predict: the checkpoint's normalisation '%s' has %d channels, the model %d",
                       info->normalize, n, ch);
    return DP_OK;
}

/* The checkpoint's evaluation transform in *info made for an input of height x width (the saved one's at
 * --image-size: image_size.h) with --interpolation's filter where given (NULL: the saved one). */
static dp_status_t transform_for_input(dp_checkpoint_info_t *info, const char *interpolation, int ch, int saved_h,
                                       int saved_w, int h, int w) {
    char transform[sizeof info->transform];
    DP_TRY(cli_transform_at_size(info->transform, ch, saved_h, saved_w, h, w, transform, sizeof transform));
    return cli_transform_interpolated("predict", transform, interpolation, ch, h, w, info->transform,
                                      sizeof info->transform);
}

static void stdout_put(void *ctx, const char *bytes, size_t len) {
    (void)ctx;
    fwrite(bytes, 1, len, stdout);
}

/* A JSON string (json.h's writer: a byte that is not part of well-formed UTF-8, a file name in another
 * encoding, is written \udcXX, as Python's surrogateescape decodes it). */
static void print_json_string(const char *s) { dp_json_write_string(s, strlen(s), stdout_put, NULL); }

/* One image's line: its `top` most probable classes (ties: the lower
 * class), as text or as a JSON object (with the logits when asked).
 * probs and order: scratch of `classes` entries. */
static void print_prediction(const char *image, const float *row, int classes, int top, char *const *names, int json,
                             int logits_out, float *probs, int *order) {
    dp_softmax(row, classes, probs);
    for (int k = 0; k < classes; k++) order[k] = k;
    for (int k = 0; k < top; k++) {
        int best = k;
        for (int j = k + 1; j < classes; j++)
            if (probs[order[j]] > probs[order[best]]) best = j;
        int t = order[k];
        order[k] = order[best];
        order[best] = t;
    }
    if (!json) {
        printf("%s:", image);
        for (int k = 0; k < top; k++) {
            int cls = order[k];
            printf("%s %s %.4f", k ? "," : "", names[cls], probs[cls]);
        }
        printf("\n");
        return;
    }
    printf("{\"image\": ");
    print_json_string(image);
    printf(", \"top\": [");
    for (int k = 0; k < top; k++) {
        int cls = order[k];
        printf("%s{\"class\": %d, \"label\": ", k ? ", " : "", cls);
        print_json_string(names[cls]);
        printf(", \"prob\": %.6g}", probs[cls]);
    }
    printf("]");
    if (logits_out) {
        printf(", \"logits\": [");
        for (int k = 0; k < classes; k++) printf(k ? ", %.9g" : "%.9g", row[k]);
        printf("]");
    }
    printf("}\n");
}

int cmd_predict(int argc, char **argv) {
    char **opts = malloc(sizeof(char *) * ((size_t)argc + 1));
    char **images = malloc(sizeof(char *) * ((size_t)argc + 1));
    if (!opts || !images) {
        free(opts);
        free(images);
        dp_fail(DP_ERR_NOMEM, "out of memory");
        return cli_report_error();
    }
    int num_opts, num_images;
    split_args(argc, argv, opts, &num_opts, images, &num_images);
    const char *resume = NULL, *model_name = NULL, *labels_path = NULL, *image_size = NULL, *interpolation = NULL;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int devices = cores < 1 ? 1 : cores > 256 ? 256 : (int)cores, batch_size = 256, top = 0, json = 0,
        logits_out = 0, help = 0, skip_bad = 0;
    const option_t options[] = {
        {"resume", OPT_STRING, &resume, 0, 0},
        {"model", OPT_STRING, &model_name, 0, 0},
        {"top", OPT_INT, &top, 1, 1 << 20},
        {"labels", OPT_STRING, &labels_path, 0, 0},
        {"json", OPT_FLAG, &json, 0, 0},
        {"logits", OPT_FLAG, &logits_out, 0, 0},
        {"devices", OPT_INT, &devices, 1, 256},
        {"batch-size", OPT_INT, &batch_size, 1, 1 << 20},
        {"skip-bad-files", OPT_FLAG, &skip_bad, 0, 0},
        {"image-size", OPT_STRING, &image_size, 0, 0},
        {"interpolation", OPT_STRING, &interpolation, 0, 0},
        {NULL, 0, NULL, 0, 0},
    };
    int exit_code = 1;
    dp_checkpoint_t *c = NULL;
    dp_checkpoint_info_t *info_copy = NULL; /* the checkpoint's, its transform at --image-size */
    dp_model_t *model = NULL;
    dp_predictor_t *predictor = NULL;
    float *params = NULL, *x = NULL, *logits = NULL, *probs = NULL;
    int *order = NULL, *slot = NULL, num_paths = 0;
    char **names = NULL, **paths = NULL;
    if (options_parse("predict", options, num_opts, opts, 2, &help) != DP_OK) goto done;
    if (help) {
        fputs(predict_usage, stdout);
        exit_code = 0;
        goto done;
    }
    if (!resume) {
        dp_fail(DP_ERR_ARG, "predict: --resume FILE is required (the checkpoint to classify with)");
        goto done;
    }
    if (num_images == 0) {
        dp_fail(DP_ERR_ARG, "predict: no images given (usage: dptrain predict --resume CK IMAGE...)");
        goto done;
    }
    if (logits_out && !json) {
        dp_fail(DP_ERR_ARG, "predict: --logits needs --json");
        goto done;
    }
    int size_height = 0, size_width = 0;
    char size_option[96] = "";
    if (image_size) {
        if (cli_parse_image_size("predict", image_size, &size_height, &size_width) != DP_OK) goto done;
        snprintf(size_option, sizeof size_option, "--image-size %s", image_size);
    }
    if (dp_checkpoint_open(resume, &c) != DP_OK) goto done;
    if (dp_checkpoint_load_model(c, model_name, &model) != DP_OK) goto done;
    params = dp_alloc(sizeof(float) * dp_model_num_params(model), "parameters");
    if (!params || dp_checkpoint_load_params(c, model, params) != DP_OK) goto done;
    int ch, h, w, saved_h, saved_w;
    /* --image-size, else its run's test size (train --val-image-size): the same network at that input */
    if (cli_checkpoint_model_at_size("predict", dp_checkpoint_info(c), &image_size, size_height, size_width,
                                     size_option, &model, &saved_h, &saved_w) != DP_OK) goto done;
    dp_model_input_shape(model, &ch, &h, &w);
    /* the checkpoint's preprocessing, its evaluation transform at this size */
    dp_checkpoint_info_t *sized = dp_alloc(sizeof *sized, "checkpoint information");
    if (!sized) goto done;
    *sized = *dp_checkpoint_info(c); /* a shallow copy: its pointers stay the checkpoint's */
    info_copy = sized;
    if (transform_for_input(sized, interpolation, ch, saved_h, saved_w, h, w) != DP_OK) goto done;
    int classes = dp_model_num_outputs(model);
    if (top > classes) {
        dp_fail(DP_ERR_ARG, "predict: --top %d is more than the model's %d classes", top, classes);
        goto done;
    }
    if (top == 0) top = classes < 3 ? classes : 3; /* the default: 3, or every class of a 2-class model */
    const dp_checkpoint_info_t *info = sized;
    if (labels_path) {
        if (read_labels(labels_path, classes, &names) != DP_OK) goto done;
    } else if (info->num_class_names == 0 && classes != 10) {
        dp_fail(DP_ERR_ARG, "predict: the model has %d classes, not Fashion-MNIST's 10: give --labels FILE",
                classes);
        goto done;
    } else { /* the training data's (an image folder's classes), else Fashion-MNIST's */
        if (cli_class_names((const char *const *)info->class_names, info->num_class_names, classes, &names) != DP_OK)
            goto done;
    }
    if (ch != 1 && ch != 3) {
        dp_fail(DP_ERR_ARG, "predict: the model takes %d-channel inputs; images give 1 (gray) or 3 (RGB)", ch);
        goto done;
    }
    if (check_preprocessing(info, ch, h, w) != DP_OK) goto done;
    if (expand_images(images, num_images, skip_bad, &paths, &num_paths) != DP_OK) goto done;
    if (image_size) /* the size used, and how the images are made that size */
        fprintf(stderr, "dptrain: predict: input %dx%d (%s)\n", h, w,
                info->transform[0] ? info->transform : "each image resized whole");
    const int batch = num_paths < batch_size ? num_paths : batch_size;
    size_t example = (size_t)ch * h * w;
    x = dp_alloc(sizeof(float) * example * (size_t)batch, "images");
    logits = dp_alloc(sizeof(float) * (size_t)classes * (size_t)batch, "logits");
    probs = dp_alloc(sizeof(float) * (size_t)classes, "probabilities");
    order = dp_alloc(sizeof(int) * (size_t)classes, "class order");
    slot = dp_alloc(sizeof(int) * (size_t)batch, "the batch's images");
    if (!x || !logits || !probs || !order || !slot) goto done;
    if (devices > num_paths) devices = num_paths;
    if (dp_predictor_new(model, params, devices, &predictor) != DP_OK) goto done;
    for (int start = 0; start < num_paths; start += batch) {
        int n = 0; /* the batch's images that decoded: paths[slot[0..n)] */
        for (int i = start; i < num_paths && i < start + batch; i++) {
            if (dp_predict_image_input(info, paths[i], ch, h, w, x + (size_t)n * example) == DP_OK) slot[n++] = i;
            else if (skip_bad) skipped(dp_error_message()); /* its header read, its data does not decode */
            else goto done;
        }
        if (n == 0) continue;
        if (dp_predictor_run(predictor, x, n, logits) != DP_OK) goto done;
        for (int i = 0; i < n; i++)
            print_prediction(paths[slot[i]], logits + (size_t)i * classes, classes, top, names, json, logits_out,
                             probs, order);
    }
    if (fflush(stdout) != 0) {
        dp_fail(DP_ERR_IO, "predict: cannot write to standard output");
        goto done;
    }
    exit_code = 0;
done:
    if (exit_code != 0) cli_report_error();
    cli_class_names_free(names, names ? dp_model_num_outputs(model) : 0); /* --labels' or cli_class_names' */
    free(slot);
    free(order);
    free(probs);
    free(logits);
    free(x);
    dp_predictor_free(predictor);
    free(params);
    dp_model_free(model);
    free(info_copy);
    dp_checkpoint_close(c);
    dp_image_list_free(paths, num_paths);
    free(opts);
    free(images);
    return exit_code;
}
