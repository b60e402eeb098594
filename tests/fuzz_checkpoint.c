/* fuzz_checkpoint.c - libFuzzer target for the checkpoint reader: any bytes,
 * read as a checkpoint file, must load or fail with one line (a status that
 * is not DP_OK, *out NULL, a message without a newline), never crash, hang,
 * leak or overrun. The bytes go through what a user's file reaches:
 *   - `dptrain inspect`: dp_safetensors_read, every entry copied out and
 *     its shape printed, every metadata entry read;
 *   - dp_checkpoint_open (eval, predict, export, train --resume/--init),
 *     then the metadata the commands use: the normalisation and the
 *     evaluation transform parsed, the freeze list matched against a model,
 *     the class names and convolution algorithm choices read;
 *   - against two models built here (a tiny one with batch norm, whose
 *     checkpoints are the seeds, and the built-in lenet): the parameters
 *     (dp_checkpoint_load_params), the --init path with head replacement
 *     (dp_checkpoint_load_init) and the optimizer's state of the file's
 *     kind (dp_checkpoint_load_optimizer);
 *   - the model the file carries (model_text, dp_checkpoint_load_model),
 *     frozen as the file says and loaded as a resume does.
 * A model_text whose model has more than 2^22 floats is built but not
 * loaded: a resume would legitimately allocate its parameters, which
 * libFuzzer counts as running out of memory. A checkpoint without
 * model_text names its model by `model`, which dp_model_load looks for on
 * disk: not followed here (a path, not the file's bytes). The CUDA
 * module's algorithm cache (algo_cache.c) is a file of its own, not read
 * from checkpoints: it is not fuzzed here.
 *
 * The input is written to a memfd per run (the reader takes a path) and
 * read through /proc/self/fd/N.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON -DDPTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
 *   cmake --build build-fuzz -j2 --target fuzz_checkpoint
 *   tests/fuzz_checkpoint_seeds.sh build/dptrain corpus/    # (a non-fuzz build's dptrain: seconds)
 *   build-fuzz/fuzz_checkpoint -max_total_time=1500 -max_len=16384 -rss_limit_mb=2048 -timeout=5 \
 *       -dict=tests/fuzz_checkpoint.dict corpus/
 * (docs/checkpoints.md, "Fuzzing"). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dptrain/checkpoint.h"
#include "dptrain/data.h"
#include "dptrain/image_folder.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/optim.h"

/* The seeds' model (tests/fuzz_checkpoint_seeds.sh writes the same text). */
static const char tiny_bn_text[] =
    "[net]\nname = tiny_bn\nchannels = 1\nheight = 28\nwidth = 28\n\n"
    "[conv]\nname = conv1\nfilters = 2\nsize = 7\nstride = 7\n\n"
    "[batchnorm]\nname = bn1\n\n[relu]\n\n[flatten]\n\n[linear]\nname = fc\nout = 10\n";

#define MAX_LOADED_FLOATS ((size_t)1 << 22)

typedef struct {
    dp_model_t *model;
    float *initial; /* dp_model_num_params floats: its initialisation */
    float *params;  /* the buffer the loads write */
} fixed_model_t;

static fixed_model_t fixed[2];
static int input_fd = -1;
static char input_path[64];
static volatile size_t sink; /* what the reads add up, so that they are not optimised away */

/* A failure: not DP_OK, with one line. */
static void check_failure(dp_status_t status) {
    const char *message = dp_error_message();
    if (status == DP_OK || !message[0] || strchr(message, '\n')) {
        fprintf(stderr, "fuzz_checkpoint: status %d, message '%s'\n", (int)status, message);
        abort();
    }
}

static void fixed_model(const char *builtin, fixed_model_t *out) {
    dp_status_t status = builtin ? dp_model_builtin(builtin, &out->model)
                                 : dp_model_parse(tiny_bn_text, strlen(tiny_bn_text), "tiny_bn.cfg", &out->model);
    if (status != DP_OK) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", dp_error_message());
        abort();
    }
    size_t n = dp_model_num_params(out->model);
    out->initial = calloc(n + 1, sizeof(float));
    out->params = calloc(n + 1, sizeof(float));
    if (!out->initial || !out->params) abort();
    for (size_t i = 0; i < n; i++) out->initial[i] = (float)(i % 7) * 0.125f;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    input_fd = memfd_create("fuzz_checkpoint", 0);
    if (input_fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(input_path, sizeof input_path, "/proc/self/fd/%d", input_fd);
    fixed_model(NULL, &fixed[0]);
    fixed_model("lenet", &fixed[1]);
    return 0;
}

static void write_input(const uint8_t *data, size_t size) {
    if (ftruncate(input_fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(input_fd, data + done, size - done, (off_t)done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
}

/* `dptrain inspect`: every entry's values and shape, every metadata entry. */
static void inspect(void) {
    dp_safetensors_t *st = (dp_safetensors_t *)&st;
    dp_status_t status = dp_safetensors_read(input_path, &st);
    if (status != DP_OK) {
        if (st) abort();
        check_failure(status);
        return;
    }
    for (int i = 0; i < dp_safetensors_meta_count(st); i++) {
        dp_st_meta_t m = dp_safetensors_meta_at(st, i);
        sink += strlen(m.key) + strlen(m.value);
    }
    for (int i = 0; i < dp_safetensors_count(st); i++) {
        const dp_st_entry_t *e = dp_safetensors_entry(st, i);
        float *values = malloc(sizeof(float) * (e->numel ? e->numel : 1));
        if (!values) abort();
        dp_safetensors_copy(e, values);
        free(values);
        char shape[200];
        sink += strlen(dp_st_shape_str(shape, sizeof shape, e->ndim, e->shape)) + strlen(e->name);
        if (dp_safetensors_find(st, e->name) != e) abort(); /* names are unique */
    }
    dp_safetensors_free(st);
}

/* The optimizer state of the file's kind for `model` (not for a weights-only file). */
static void load_optimizer(const dp_checkpoint_t *c, const dp_model_t *model) {
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    dp_optimizer_t *opt = NULL;
    dp_optim_config_t config = info->optim;
    if (info->weights_only) config.lr = 0.1f; /* info holds zeros there; the load must refuse the file */
    size_t trainable = dp_model_num_trainable(model);
    if (dp_optimizer_new(&config, trainable ? trainable : 1, &opt) != DP_OK) abort(); /* the reader checked it */
    dp_status_t status = dp_checkpoint_load_optimizer(c, model, opt);
    if (status != DP_OK) check_failure(status);
    else if (info->weights_only) abort();
    dp_optimizer_free(opt);
}

/* Parameters, --init and the optimizer's state into one of the fixed models. */
static void load_into(const dp_checkpoint_t *c, fixed_model_t *f) {
    size_t n = dp_model_num_params(f->model);
    memcpy(f->params, f->initial, sizeof(float) * n);
    dp_status_t status = dp_checkpoint_load_params(c, f->model, f->params);
    if (status != DP_OK) check_failure(status);
    memcpy(f->params, f->initial, sizeof(float) * n);
    dp_checkpoint_init_t init;
    status = dp_checkpoint_load_init(c, f->model, f->params, 0, &init);
    if (status != DP_OK) {
        check_failure(status);
        if (memcmp(f->params, f->initial, sizeof(float) * n) != 0) abort(); /* a refused file changes nothing */
    } else if (init.fresh_head[0] && (init.model_outputs < 1 || init.file_outputs < 1)) {
        abort();
    }
    load_optimizer(c, f->model);
    const char *freeze = dp_checkpoint_info(c)->freeze;
    if (freeze[0]) {
        unsigned char mask[256];
        if (dp_model_num_param_tensors(f->model) > (int)sizeof mask) abort();
        status = dp_model_freeze_mask(f->model, freeze, mask);
        if (status != DP_OK) check_failure(status);
    }
}

/* The model the checkpoint carries, frozen as it says, loaded as a resume does. */
static void load_own_model(const dp_checkpoint_t *c) {
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    if (!info->model_text) return;
    dp_model_t *model = (dp_model_t *)&model;
    dp_status_t status = dp_checkpoint_load_model(c, NULL, &model);
    if (status != DP_OK) {
        if (model) abort();
        check_failure(status);
        return;
    }
    if (info->freeze[0] && (status = dp_model_freeze(model, info->freeze)) != DP_OK) check_failure(status);
    size_t n = dp_model_num_params(model);
    if (n <= MAX_LOADED_FLOATS) {
        float *params = calloc(n + 1, sizeof(float));
        if (!params) abort();
        if ((status = dp_checkpoint_load_params(c, model, params)) != DP_OK) check_failure(status);
        dp_checkpoint_init_t init;
        if ((status = dp_checkpoint_load_init(c, model, params, 1, &init)) != DP_OK) check_failure(status);
        free(params);
        load_optimizer(c, model);
    }
    dp_model_free(model);
}

/* What eval, predict and train do with the metadata. */
static void use_metadata(const dp_checkpoint_t *c) {
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    for (int i = 0; i < info->num_class_names; i++) {
        size_t n = strlen(info->class_names[i]);
        if (n < 1 || n > DP_CHECKPOINT_MAX_CLASS_NAME) abort();
        sink += n;
    }
    for (int i = 0; i < info->num_conv_algorithms; i++) {
        const dp_conv_algo_t *a = &info->conv_algorithms[i];
        if (a->algo < 0 || a->algo > DP_CHECKPOINT_MAX_CONV_ALGO || !memchr(a->key, 0, sizeof a->key)) abort();
        sink += strlen(a->key);
    }
    if (info->epoch_ranks < 0 || info->epoch_ranks > DP_CHECKPOINT_RANK_SUMS) abort();
    dp_status_t status;
    if (info->normalize[0]) {
        int n;
        float mean[DP_DATA_MAX_CHANNELS], std[DP_DATA_MAX_CHANNELS];
        if ((status = dp_normalize_parse(info->normalize, &n, mean, std)) != DP_OK) check_failure(status);
    }
    if (info->transform[0]) {
        dp_sample_options_t eval;
        if ((status = dp_eval_transform_parse(info->transform, 3, 32, 32, &eval)) != DP_OK) check_failure(status);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    inspect();
    dp_checkpoint_t *c = (dp_checkpoint_t *)&c;
    dp_status_t status = dp_checkpoint_open(input_path, &c);
    if (status != DP_OK) {
        if (c) abort();
        check_failure(status);
        return 0;
    }
    use_metadata(c);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) load_into(c, &fixed[i]);
    load_own_model(c);
    dp_checkpoint_close(c);
    return 0;
}
