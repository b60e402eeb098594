/* test_finetune.c - fine-tuning from C: frozen layers (nn.h:
 * dp_model_freeze), a new run from a checkpoint's weights
 * (checkpoint.h: dp_checkpoint_load_init, fit.h: init_path).
 *
 * - freeze lists: a name matches a layer or a prefix of whole dotted
 *   components (layer1 matches layer1.0.conv1, not layer10.conv); a name
 *   matching nothing, an empty name, or a list freezing everything is
 *   refused naming it, the model unchanged; the layout becomes [trained |
 *   frozen | buffers], the fingerprint stays, freezing nothing restores the
 *   first layout; which outputs carry a gradient; the backbone's list (every
 *   layer but the last linear one) of LeNet, ResNet-18/-50 and MobileNetV2,
 *   refused for a model without a linear layer;
 * - the tape: with LeNet's convolutions frozen no op below fc1 gets a
 *   gradient or runs backward, the gradients of fc1 and fc2 are those of
 *   the model without freezing, bit for bit, and nothing is written past
 *   the trained floats;
 * - a frozen batch norm layer in a training pass normalises with its
 *   running statistics (its output is the inference pass's, bit for bit)
 *   and leaves them as they are; a trained one updates its own;
 * - the trainer (tiny_resnet.cfg, frozen stem and its batch norm, or only
 *   the stem conv): after 3 steps on 1 and 2 devices with every strategy
 *   (chunked, naive, overlap, parameter server, with synchronised batch
 *   norm; per-device batch norm; sync batch norm with an empty shard on 3
 *   devices) the frozen parameters and the frozen batch norm's statistics
 *   are bit-identical to the start, every other parameter changed, the
 *   replicas agree, and 2 devices agree with 1 within 1e-5 of each tensor's
 *   largest value (training.md's tolerance; 4.9e-7 measured, 3.4e-7 with
 *   nothing frozen; with per-device batch norm they differ: the check can
 *   fail); the optimizer holds the trained floats only;
 * - checkpoints: a frozen model's holds optimizer state for the trained
 *   tensors only and model.freeze; a resume frozen otherwise is refused
 *   naming a tensor, and with the same layers frozen (another spelling) it
 *   continues; dp_checkpoint_load_init loads everything by name, gives a
 *   last linear layer with another output count its own initialisation and
 *   names it, and refuses a missing tensor, an extra one and another shape
 *   (naming the tensor and both shapes) leaving the parameters as they were;
 * - dp_fit with init_path: at step 0 (on_begin) every replica holds the
 *   file's parameters; begin.init names the fresh head; with resume_path
 *   it is refused and nothing is written.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/checkpoint.h"
#include "dptrain/fit.h"
#include "dptrain/model_file.h"
#include "testing.h"

static dp_model_t *load_model(const char *name) {
    dp_model_t *m = NULL;
    if (dp_model_load(name, &m) != DP_OK) {
        fprintf(stderr, "%s: %s\n", name, dp_error_message());
        exit(2);
    }
    return m;
}

static int param_index(const dp_model_t *m, const char *name) {
    for (int i = 0; i < dp_model_num_param_tensors(m); i++)
        if (strcmp(dp_model_param(m, i)->name, name) == 0) return i;
    return -1;
}

/* A model with names that share prefixes: conv1, layer1.0.conv1, layer1.0.bn1,
 * layer10.conv, fc (1x8x8 inputs). */
static dp_model_t *names_model(void) {
    dp_model_t *m;
    dp_op_attr_t pad = dp_op_attr_default();
    pad.pad[0] = pad.pad[1] = 1;
    DP_ASSERT(dp_model_new("names", 1, 8, 8, DP_INIT_TORCH_DEFAULT, 0.0f, &m) == DP_OK);
    DP_ASSERT(dp_model_add_conv(m, "conv1", 4, 3, 3, &pad, 1) == DP_OK);
    DP_ASSERT(dp_model_add_conv(m, "layer1.0.conv1", 4, 3, 3, &pad, 0) == DP_OK);
    DP_ASSERT(dp_model_add_batch_norm(m, "layer1.0.bn1", NULL) == DP_OK);
    DP_ASSERT(dp_model_add_relu(m) == DP_OK);
    DP_ASSERT(dp_model_add_conv(m, "layer10.conv", 2, 3, 3, &pad, 1) == DP_OK);
    DP_ASSERT(dp_model_add_flatten(m) == DP_OK);
    DP_ASSERT(dp_model_add_linear(m, "fc", 3, 1) == DP_OK);
    return m;
}

/* "1100..." of the mask, for messages. */
static const char *mask_text(const unsigned char *mask, int n) {
    static char text[64];
    for (int i = 0; i < n && i < 63; i++) text[i] = mask[i] ? '1' : '0';
    text[n < 63 ? n : 63] = '\0';
    return text;
}

/* The backbone's freeze list (dp_model_backbone_list): every layer but the
 * last linear one (or the last conv without one), by first components unless the head shares it. */
static void test_backbone_lists(void) {
    static const struct { const char *model, *expected, *head; } cases[] = {
        {"lenet", "conv1,conv2,fc1", "fc2."},
        {"resnet18-imagenet", "conv1,bn1,layer1,layer2,layer3,layer4", "fc."},
        {"resnet50-imagenet", "conv1,bn1,layer1,layer2,layer3,layer4", "fc."},
        {"mobilenet_v2-imagenet", "features", "classifier.1."}, /* the head is classifier.1 */
        /* the head is classifier.3; classifier.0 (Linear + Hardswish) is the backbone's, named whole */
        {"mobilenet_v3_large-imagenet", "features,classifier.0", "classifier.3."},
        {"mobilenet_v3_small-imagenet", "features,classifier.0", "classifier.3."},
        /* the head is classifier.2; classifier.0 (LayerNorm2d after the pooling) is the backbone's */
        {"convnext_tiny-imagenet", "features,classifier.0", "classifier.2."},
        {"convnext_large-imagenet", "features,classifier.0", "classifier.2."},
        {"efficientnet_b0-imagenet", "features", "classifier.1."}, /* dropout, then the head classifier.1 */
        {"efficientnet_v2_s-imagenet", "features", "classifier.1."},
        /* RegNet: the stem and the four stages; the head is fc */
        {"regnet_y_400mf-imagenet", "stem,trunk_output", "fc."},
        {"regnet_x_400mf-imagenet", "stem,trunk_output", "fc."},
        /* DenseNet: features (norm5 among them); the head is classifier */
        {"densenet121-imagenet", "features", "classifier."},
        /* SqueezeNet: no linear layer; the head is the conv classifier.1 (dropout, conv, ReLU, pooling) */
        {"squeezenet1_0-imagenet", "features", "classifier.1."},
        {"squeezenet1_1-imagenet", "features", "classifier.1."},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        dp_model_t *m = NULL;
        char *list = NULL;
        CHECK(dp_model_load(cases[k].model, &m) == DP_OK && dp_model_backbone_list(m, &list) == DP_OK && list &&
                  strcmp(list, cases[k].expected) == 0,
              "%s: backbone '%s', expected '%s' (%s)", cases[k].model, list ? list : "-", cases[k].expected,
              dp_error_message());
        /* frozen, only the head trains: its weight and bias */
        if (m && list && dp_model_freeze(m, list) == DP_OK) {
            int training = 0, others = 0;
            for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
                const dp_param_info_t *p = dp_model_param(m, i);
                if (p->frozen || !p->trainable) continue;
                if (strncmp(p->name, cases[k].head, strlen(cases[k].head)) == 0) training++;
                else others++;
            }
            CHECK(training == 2 && others == 0, "%s: %d of the head's tensors train, %d others", cases[k].model,
                  training, others);
        }
        free(list);
        dp_model_free(m);
    }
    dp_model_t *m = NULL;
    char *list = NULL;
    const char *text = "[net]\nchannels = 1\nheight = 8\nwidth = 8\n[flatten]\n";
    DP_ASSERT(dp_model_parse(text, strlen(text), "nohead", &m) == DP_OK);
    CHECK(dp_model_backbone_list(m, &list) == DP_ERR_ARG && !list &&
              strstr(dp_error_message(), "no linear or conv layer"),
          "a model without a head: %s", dp_error_message());
    dp_model_free(m);
    /* a conv alone is the head: nothing below it to freeze */
    text = "[net]\nchannels = 1\nheight = 8\nwidth = 8\n[conv]\nname = c\nfilters = 2\nsize = 3\n[flatten]\n";
    m = NULL;
    DP_ASSERT(dp_model_parse(text, strlen(text), "convhead", &m) == DP_OK);
    CHECK(dp_model_head_layer(m) == 1 && dp_model_backbone_list(m, &list) == DP_ERR_ARG && !list &&
              strstr(dp_error_message(), "no layer with parameters below its head"),
          "a model whose head is its only conv: %s", dp_error_message());
    dp_model_free(m);
    /* a name starting with a dot is listed whole (its first component is empty; found by fuzzing) */
    const char *dotted = "[net]\nchannels = 1\nheight = 8\nwidth = 8\n[conv]\nname = c.x\nfilters = 2\nsize = 3\n"
                         "[batchnorm]\nname = .bn1\n[flatten]\n[linear]\nname = head\nout = 3\n";
    m = NULL;
    DP_ASSERT(dp_model_parse(dotted, strlen(dotted), "dotted", &m) == DP_OK);
    CHECK(dp_model_backbone_list(m, &list) == DP_OK && list && strcmp(list, "c,.bn1") == 0 &&
              dp_model_freeze(m, list) == DP_OK,
          "a dotted name: '%s' (%s)", list ? list : "-", dp_error_message());
    free(list);
    list = NULL;
    dp_model_free(m);
    /* a layer whose whole name is a prefix of the head's: no list freezes it without the head */
    const char *prefix = "[net]\nchannels = 1\nheight = 8\nwidth = 8\n[conv]\nname = fc\nfilters = 2\nsize = 3\n"
                         "[flatten]\n[linear]\nname = fc.1\nout = 3\n";
    m = NULL;
    DP_ASSERT(dp_model_parse(prefix, strlen(prefix), "prefix", &m) == DP_OK);
    CHECK(dp_model_backbone_list(m, &list) == DP_ERR_ARG && !list &&
              strstr(dp_error_message(), "layer 'fc' is a prefix of its head 'fc.1'"),
          "a layer named as the head's prefix: %s", dp_error_message());
    dp_model_free(m);
}

static void test_freeze_lists(void) {
    dp_model_t *m = names_model();
    int n = dp_model_num_param_tensors(m); /* conv1 w b, layer1.0.conv1 w, bn1 w b rm rv, layer10 w b, fc w b */
    CHECK(n == 11, "names model: %d tensors", n);
    unsigned char mask[16];
    struct { const char *list, *expected; } cases[] = {
        {"layer1", "00111000000"},     /* layer1.0.conv1 and layer1.0.bn1, not layer10 nor the buffers */
        {"layer1.0", "00111000000"},
        {"layer1.0.bn1", "00011000000"},
        {"layer10", "00000001100"},
        {"conv1,fc", "11000000011"},   /* conv1 itself, not layer1.0.conv1 */
        {"", "00000000000"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dp_status_t st = dp_model_freeze_mask(m, cases[c].list, mask);
        CHECK(st == DP_OK && strcmp(mask_text(mask, n), cases[c].expected) == 0, "freeze '%s': %s, mask %s, "
              "expected %s", cases[c].list, st == DP_OK ? "ok" : dp_error_message(), mask_text(mask, n),
              cases[c].expected);
    }
    struct { const char *list, *named; } bad[] = {
        {"layer", "'layer' names no layer"},          /* a prefix, but not of whole components */
        {"conv1.weight", "'conv1.weight' names no layer"}, /* a parameter, not a layer */
        {"conv1,layer2", "'layer2' names no layer"},
        {"conv1,,fc", "empty layer name"},
        {"conv1,layer1,layer10,fc", "nothing would train"},
    };
    size_t layout[16];
    for (int i = 0; i < n; i++) layout[i] = dp_model_param(m, i)->offset;
    uint64_t fingerprint = dp_model_fingerprint(m);
    size_t trainable = dp_model_num_trainable(m);
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        dp_status_t st = dp_model_freeze(m, bad[c].list);
        CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), bad[c].named), "freeze '%s': %d, '%s' (expected '%s')",
              bad[c].list, (int)st, dp_error_message(), bad[c].named);
    }
    CHECK(dp_model_num_trainable(m) == trainable && dp_model_num_frozen(m) == 0 && !*dp_model_frozen(m),
          "a refused list changed the model");

    CHECK(dp_model_freeze(m, "conv1,layer1") == DP_OK, "%s", dp_error_message());
    CHECK(strcmp(dp_model_frozen(m), "conv1,layer1") == 0, "dp_model_frozen '%s'", dp_model_frozen(m));
    CHECK(dp_model_fingerprint(m) == fingerprint, "freezing changed the fingerprint");
    /* [layer10.conv w b, fc w b | conv1 w b, layer1.0.conv1 w, bn1 w b | bn1 rm rv] */
    const char *order[] = {"layer10.conv.weight", "layer10.conv.bias", "fc.weight", "fc.bias", "conv1.weight",
                           "conv1.bias", "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
                           "layer1.0.bn1.running_mean", "layer1.0.bn1.running_var"};
    size_t at = 0, trained = 0, frozen = 0;
    for (int k = 0; k < n; k++) {
        int i = param_index(m, order[k]);
        const dp_param_info_t *p = dp_model_param(m, i);
        CHECK(p->offset == at, "%s at %zu, expected %zu", p->name, p->offset, at);
        CHECK(p->frozen == (k >= 4 && k < 9), "%s: frozen %d", p->name, p->frozen);
        at += p->numel;
        if (k < 4) trained += p->numel;
        else if (k < 9) frozen += p->numel;
    }
    CHECK(dp_model_num_trainable(m) == trained && dp_model_num_frozen(m) == frozen && dp_model_num_params(m) == at,
          "%zu trained, %zu frozen, %zu in all; expected %zu, %zu, %zu", dp_model_num_trainable(m),
          dp_model_num_frozen(m), dp_model_num_params(m), trained, frozen, at);
    /* outputs: 1 conv1, 2 layer1.0.conv1, 3 bn1, 4 relu, 5 layer10.conv, 6 flatten, 7 fc */
    const int needs[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    for (int o = 0; o <= 7; o++)
        CHECK(dp_model_output_needs_grad(m, o) == needs[o], "output %d: needs grad %d", o,
              dp_model_output_needs_grad(m, o));
    CHECK(dp_model_freeze(m, "layer10") == DP_OK && dp_model_output_needs_grad(m, 1) &&
          dp_model_output_needs_grad(m, 5) && dp_model_output_needs_grad(m, 7), "freezing layer10 only");
    CHECK(dp_model_freeze(m, NULL) == DP_OK, "unfreeze: %s", dp_error_message());
    int same = dp_model_num_trainable(m) == trainable && dp_model_num_frozen(m) == 0 && !*dp_model_frozen(m);
    for (int i = 0; i < n; i++)
        same = same && dp_model_param(m, i)->offset == layout[i] && !dp_model_param(m, i)->frozen;
    CHECK(same, "freezing nothing does not restore the first layout");
    dp_model_free(m);
}

/* x (n, 1, 28, 28) and labels of a column dataset, on the tape. */
static dp_tensor_t *input_of(dp_tape_t *tape, const dp_dataset_t *ds, int n, int32_t *labels) {
    int shape[4] = {n, 1, 28, 28};
    dp_tensor_t *x = dp_tape_tensor(tape, 4, shape);
    float *data = malloc(sizeof(float) * (size_t)n * 784);
    dp_pixels_to_input(ds->pixels, n, 1, 784, NULL, data);
    x->data = data;
    for (int i = 0; i < n; i++) labels[i] = ds->labels[i];
    return x;
}

/* LeNet's forward and backward with params; grads has `floats` floats and
 * 16 guard floats after them. Returns the nodes that got a gradient, and
 * in *names the first op that did ("conv"...). */
static int backward_nodes(const dp_model_t *m, const float *params, float *grads, const dp_dataset_t *ds,
                          int *first_grad_node) {
    dp_arena_t *arena = dp_arena_new((size_t)1 << 24);
    dp_tape_t *tape = dp_tape_new(arena);
    int32_t labels[8];
    dp_tensor_t *x = input_of(tape, ds, 8, labels), *logits, *loss;
    float *p = malloc(sizeof(float) * dp_model_num_params(m));
    memcpy(p, params, sizeof(float) * dp_model_num_params(m));
    int with_grad = -1;
    *first_grad_node = -1;
    if (dp_model_forward(m, tape, p, grads, x, &logits) == DP_OK &&
        (loss = dp_tape_op(tape, DP_OP_SOFTMAX_XENT, NULL, logits, NULL, NULL, labels)) &&
        dp_tape_backward(tape, loss, NULL, NULL) == DP_OK) {
        with_grad = 0;
        for (int i = 0; i < dp_tape_size(tape); i++)
            if (dp_tape_node(tape, i)->out.grad) {
                with_grad++;
                if (*first_grad_node < 0) *first_grad_node = i;
            }
    }
    free(x->data);
    free(p);
    dp_tape_free(tape);
    dp_arena_free(arena);
    return with_grad;
}

static void test_tape(const dp_dataset_t *ds) {
    dp_model_t *full = load_model("lenet"), *frozen = load_model("lenet");
    CHECK(dp_model_freeze(frozen, "conv1,conv2") == DP_OK, "%s", dp_error_message());
    size_t np = dp_model_num_params(full);
    float *params = malloc(sizeof(float) * np), *frozen_params = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 5);
    dp_model_init_params(full, params, &rng);
    for (int i = 0; i < dp_model_num_param_tensors(full); i++) { /* the same values in the other layout */
        const dp_param_info_t *a = dp_model_param(full, i), *b = dp_model_param(frozen, i);
        memcpy(frozen_params + b->offset, params + a->offset, sizeof(float) * a->numel);
    }
    size_t nt = dp_model_num_trainable(frozen);
    float *grads = calloc(np, sizeof(float)), *frozen_grads = malloc(sizeof(float) * (nt + 16));
    for (size_t i = 0; i < nt + 16; i++) frozen_grads[i] = i < nt ? 0.0f : 1234.5f;
    int first_full, first_frozen;
    int nodes_full = backward_nodes(full, params, grads, ds, &first_full);
    int nodes_frozen = backward_nodes(frozen, frozen_params, frozen_grads, ds, &first_frozen);
    /* lenet: conv1+relu, pool, conv2+relu, pool, flatten, fc1, relu, fc2, loss: 9 nodes; frozen: from fc1 on */
    CHECK(nodes_full == 9 && nodes_frozen == 4 && first_full == 0 && first_frozen == 5,
          "nodes with a gradient: %d (first %d) without freezing, %d (first %d) with conv1,conv2 frozen",
          nodes_full, first_full, nodes_frozen, first_frozen);
    int same = 1, guard = 1;
    for (int i = 0; i < dp_model_num_param_tensors(full); i++) {
        const dp_param_info_t *a = dp_model_param(full, i), *b = dp_model_param(frozen, i);
        if (!b->trainable || b->frozen) continue;
        same = same && memcmp(grads + a->offset, frozen_grads + b->offset, sizeof(float) * a->numel) == 0;
    }
    for (int i = 0; i < 16; i++) guard = guard && frozen_grads[nt + i] == 1234.5f;
    CHECK(same, "fc1's and fc2's gradients differ with the convolutions frozen");
    CHECK(guard, "something was written past the %zu trained floats' gradients", nt);
    free(params), free(frozen_params), free(grads), free(frozen_grads);
    dp_model_free(full);
    dp_model_free(frozen);
}

/* The first batch norm node's output after a forward (training or not) of
 * tiny_resnet with params (a copy: the forward may update the statistics). */
static float *first_bn_output(const dp_model_t *m, float *params, float *grads, int training, const dp_dataset_t *ds,
                              size_t *numel) {
    dp_arena_t *arena = dp_arena_new((size_t)1 << 24);
    dp_tape_t *tape = dp_tape_new(arena);
    int32_t labels[8];
    dp_tensor_t *x = input_of(tape, ds, 8, labels), *logits;
    dp_forward_opts_t opts = {.training = training};
    float *out = NULL;
    *numel = 0;
    if (dp_model_forward_opts(m, tape, params, training ? grads : NULL, x, &opts, &logits) == DP_OK)
        for (int i = 0; i < dp_tape_size(tape) && !out; i++) {
            const dp_node_t *node = dp_tape_node(tape, i);
            if (node->kind != DP_OP_BATCH_NORM) continue;
            *numel = dp_tensor_numel(&node->out);
            out = malloc(sizeof(float) * *numel);
            memcpy(out, node->out.data, sizeof(float) * *numel);
        }
    free(x->data);
    dp_tape_free(tape);
    dp_arena_free(arena);
    return out;
}

static void test_frozen_batch_norm(const dp_dataset_t *ds) {
    dp_model_t *m = load_model(testing_path("models/tiny_resnet.cfg"));
    CHECK(dp_model_freeze(m, "stem,stem_bn") == DP_OK, "%s", dp_error_message());
    size_t np = dp_model_num_params(m);
    float *params = malloc(sizeof(float) * np), *before = malloc(sizeof(float) * np);
    float *grads = calloc(np, sizeof(float));
    dp_rng_t rng;
    dp_rng_seed(&rng, 1);
    dp_model_init_params(m, params, &rng);
    /* running statistics that are not the initial 0 and 1 */
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        for (size_t k = 0; !p->trainable && k < p->numel; k++)
            params[p->offset + k] = strstr(p->name, "mean") ? 0.01f * (float)k : 1.0f + 0.1f * (float)k;
    }
    memcpy(before, params, sizeof(float) * np);
    size_t n_train, n_eval;
    float *eval_copy = malloc(sizeof(float) * np);
    memcpy(eval_copy, params, sizeof(float) * np);
    float *in_eval = first_bn_output(m, eval_copy, NULL, 0, ds, &n_eval);
    float *in_train = first_bn_output(m, params, grads, 1, ds, &n_train);
    CHECK(in_eval && in_train && n_eval == n_train && n_eval > 0 &&
          memcmp(in_eval, in_train, sizeof(float) * n_eval) == 0,
          "frozen stem_bn in a training pass: not the inference pass's output");
    const char *frozen_stats[] = {"stem_bn.running_mean", "stem_bn.running_var"};
    const char *trained_stats[] = {"block.bn1.running_mean", "block.bn2.running_var"};
    for (int k = 0; k < 2; k++) {
        const dp_param_info_t *f = dp_model_param(m, param_index(m, frozen_stats[k]));
        const dp_param_info_t *t = dp_model_param(m, param_index(m, trained_stats[k]));
        CHECK(memcmp(params + f->offset, before + f->offset, sizeof(float) * f->numel) == 0,
              "%s changed in a training pass", f->name);
        CHECK(memcmp(params + t->offset, before + t->offset, sizeof(float) * t->numel) != 0,
              "%s did not change in a training pass", t->name);
    }
    free(in_eval), free(in_train), free(eval_copy), free(params), free(before), free(grads);
    dp_model_free(m);
}

/* --- the trainer ---------------------------------------------------------------- */

/* One of the trainer's setups. */
typedef struct {
    const char *name;
    int devices;
    dp_allreduce_kind_t allreduce;
    int overlap, sync_bn;
    dp_sync_kind_t sync;
} setup_t;

/* 3 steps of 64 (2 with a short last batch of 2 on 3 devices: an empty
 * shard) on a fresh trainer of m; *out = replica 0's parameters (the
 * caller's to free); the frozen parameters and buffers checked against the
 * start. */
static float *train_frozen(const dp_model_t *m, const setup_t *s, const dp_dataset_t *ds, const char *frozen_bn) {
    dp_trainer_config_t tc = {.model = m, .num_devices = s->devices, .threads_per_device = 1,
                              .allreduce = s->allreduce, .overlap = s->overlap, .sync = s->sync,
                              .sync_batch_norm = s->sync_bn, .seed = 3,
                              .optim = {.kind = DP_OPTIM_MOMENTUM, .lr = 0.05f, .momentum = 0.9f,
                                        .weight_decay = 0.01f}};
    dp_trainer_t *t;
    if (dp_trainer_new(&tc, &t) != DP_OK) {
        CHECK(0, "%s: %s", s->name, dp_error_message());
        return NULL;
    }
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *start = malloc(sizeof(float) * np);
    memcpy(start, dp_trainer_params(t, 0), sizeof(float) * np);
    CHECK(dp_optimizer_num_params(dp_trainer_optimizer(t, 0)) == nt, "%s: the optimizer holds %zu floats, %zu train",
          s->name, dp_optimizer_num_params(dp_trainer_optimizer(t, 0)), nt);
    double losses[3];
    int ok = testing_train_steps(t, ds, 3, 64, 1, losses, s->name);
    if (ok && s->devices == 3) { /* a short batch of 2: device 2 has no example */
        int idx[2] = {5, 9};
        CHECK(testing_step(t, ds, idx, 2, NULL, NULL) == DP_OK, "%s: short batch: %s", s->name, dp_error_message());
    }
    CHECK(dp_trainer_check_replicas(t) == DP_OK, "%s: %s", s->name, dp_error_message());
    float *end = malloc(sizeof(float) * np);
    memcpy(end, dp_trainer_params(t, 0), sizeof(float) * np);
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        int unchanged = memcmp(start + p->offset, end + p->offset, sizeof(float) * p->numel) == 0;
        int bn_stat = !p->trainable && frozen_bn && strncmp(p->name, frozen_bn, strlen(frozen_bn)) == 0 &&
                      p->name[strlen(frozen_bn)] == '.';
        if (p->frozen || bn_stat) CHECK(unchanged, "%s: frozen %s changed", s->name, p->name);
        else if (p->trainable) CHECK(!unchanged, "%s: %s did not train", s->name, p->name);
    }
    free(start);
    dp_trainer_free(t);
    return end;
}

/* The largest |a - b| / max |b| over m's tensors (the cli tests' close_checkpoints). */
static double worst_ratio(const dp_model_t *m, const float *a, const float *b, const char **where) {
    double worst = 0.0;
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        double diff = 0.0, scale = 1e-30;
        for (size_t k = 0; k < p->numel; k++) {
            diff = fmax(diff, fabs((double)a[p->offset + k] - (double)b[p->offset + k]));
            scale = fmax(scale, fabs((double)b[p->offset + k]));
        }
        if (diff / scale > worst) worst = diff / scale, *where = p->name;
    }
    return worst;
}

static void test_trainer(const dp_dataset_t *ds) {
    const setup_t setups[] = {
        /* with synchronised batch norm (the trained batch norm layers' statistics are the whole batch's) */
        {"1 device", 1, DP_ALLREDUCE_CHUNKED, 0, 1, DP_SYNC_ALLREDUCE},
        {"2 devices chunked", 2, DP_ALLREDUCE_CHUNKED, 0, 1, DP_SYNC_ALLREDUCE},
        {"2 devices naive", 2, DP_ALLREDUCE_NAIVE, 0, 1, DP_SYNC_ALLREDUCE},
        {"2 devices overlap", 2, DP_ALLREDUCE_CHUNKED, 1, 1, DP_SYNC_ALLREDUCE},
        {"2 devices ps", 2, DP_ALLREDUCE_CHUNKED, 0, 1, DP_SYNC_PS},
        {"2 devices, batch norm per device", 2, DP_ALLREDUCE_CHUNKED, 0, 0, DP_SYNC_ALLREDUCE},
    };
    /* frozen: the stem conv and its batch norm, or the stem conv only (its
     * batch norm trains but sums no gradient for its input); and, as the
     * reference the tolerance comes from, nothing */
    const char *lists[] = {"stem,stem_bn", "stem", ""};
    for (int l = 0; l < 3; l++) {
        dp_model_t *m = load_model(testing_path("models/tiny_resnet.cfg"));
        CHECK(dp_model_freeze(m, lists[l]) == DP_OK, "%s", dp_error_message());
        const char *frozen_bn = l == 0 ? "stem_bn" : NULL;
        float *one = train_frozen(m, &setups[0], ds, frozen_bn);
        for (size_t s = 1; s < sizeof setups / sizeof setups[0]; s++) {
            float *other = train_frozen(m, &setups[s], ds, frozen_bn);
            const char *where = "";
            double worst = one && other ? worst_ratio(m, other, one, &where) : 1.0;
            if (setups[s].sync_bn)
                CHECK(worst <= 1e-5, "--freeze %s: %s vs 1 device: %.3g at %s", lists[l], setups[s].name, worst,
                      where);
            else /* the comparison can fail: each device's own statistics differ from the batch's */
                CHECK(worst > 1e-3, "--freeze %s: %s vs 1 device: only %.3g apart", lists[l], setups[s].name, worst);
            free(other);
        }
        setup_t sync_bn = {"3 devices, sync batch norm, an empty shard", 3, DP_ALLREDUCE_CHUNKED, 0, 1,
                           DP_SYNC_ALLREDUCE};
        free(train_frozen(m, &sync_bn, ds, frozen_bn));
        free(one);
        dp_model_free(m);
    }
}

/* --- checkpoints and dp_fit ------------------------------------------------------- */

typedef struct {
    const dp_model_t *model;
    dp_trainer_t *trainer;
    const float *expected; /* the file's parameters in the model's layout */
    int begins, at_start, init_named;
} begin_seen_t;

static void on_begin(const dp_fit_begin_t *b, void *ctx) {
    begin_seen_t *seen = ctx;
    seen->begins++;
    seen->init_named = b->init && strstr(b->init, "fc2 initialised afresh: 5 outputs, the checkpoint's 10") != NULL;
    seen->at_start = 1;
    for (int d = 0; d < dp_trainer_num_devices(seen->trainer); d++) {
        const float *p = dp_trainer_params(seen->trainer, d);
        for (int i = 0; i < dp_model_num_param_tensors(seen->model); i++) {
            const dp_param_info_t *info = dp_model_param(seen->model, i);
            if (strncmp(info->name, "fc2.", 4) == 0) continue; /* the fresh head */
            if (memcmp(p + info->offset, seen->expected + info->offset, sizeof(float) * info->numel) != 0)
                seen->at_start = 0;
        }
    }
}

static dp_trainer_t *fit_trainer(const dp_model_t *m, uint64_t seed) {
    dp_trainer_config_t tc = {.model = m, .num_devices = 2, .threads_per_device = 1, .allreduce = DP_ALLREDUCE_RING,
                              .optim = {.kind = DP_OPTIM_ADAM, .lr = 0.002f}, .seed = seed};
    dp_trainer_t *t = NULL;
    DP_ASSERT(dp_trainer_new(&tc, &t) == DP_OK);
    return t;
}

static dp_fit_config_t fit_config(const dp_model_t *m, dp_trainer_t *t, const dp_dataset_t *train,
                                  const dp_dataset_t *test) {
    return (dp_fit_config_t){.trainer = t, .model = m, .train_set = train, .test_set = test, .batch_size = 50,
                             .epochs = 1, .seed = 0, .schedule = {.kind = DP_LR_CONSTANT, .lr = 0.002},
                             .eval_batch_size = 100};
}

static int count_optimizer_tensors(const dp_checkpoint_t *c) {
    const dp_safetensors_t *st = dp_checkpoint_tensors(c);
    int n = 0;
    for (int i = 0; i < dp_safetensors_count(st); i++)
        n += strncmp(dp_safetensors_entry(st, i)->name, "optimizer.", 10) == 0;
    return n;
}

/* lenet with `outputs` outputs and conv1 of `filters` filters, from models/lenet.cfg. */
static dp_model_t *lenet_variant(int outputs, int filters, const char *name) {
    size_t size;
    char *text = (char *)testing_read_file(testing_path("../models/lenet.cfg"), &size);
    DP_ASSERT(text);
    char *out = strstr(text, "out = 10"), *filt = strstr(text, "filters = 20");
    DP_ASSERT(out && filt);
    char *copy = malloc(size + 64);
    snprintf(copy, size + 64, "%.*sfilters = %d%.*sout = %d%s", (int)(filt - text), text, filters,
             (int)(out - filt - strlen("filters = 20")), filt + strlen("filters = 20"), outputs,
             out + strlen("out = 10"));
    const char *path = testing_tmp_file(name);
    FILE *f = fopen(path, "w");
    DP_ASSERT(f);
    fputs(copy, f);
    fclose(f);
    free(text), free(copy);
    return load_model(path);
}

/* *init: model m's initialisation with seed, *params a copy of it (both malloc'd). */
static void initialised(const dp_model_t *m, uint64_t seed, float **params, float **init) {
    size_t n = dp_model_num_params(m);
    *params = malloc(sizeof(float) * n), *init = malloc(sizeof(float) * n);
    DP_ASSERT(*params && *init);
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    dp_model_init_params(m, *init, &rng);
    memcpy(*params, *init, sizeof(float) * n);
}

/* Every tensor of model m in params is the file's, but fc2's (the head)
 * the model's own initialisation (init) where head_fresh. */
static void check_loaded(const char *what, const dp_checkpoint_t *c, const dp_model_t *m, const float *params,
                         const float *init, int head_fresh) {
    const dp_safetensors_t *st = dp_checkpoint_tensors(c);
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        float *from_file = malloc(sizeof(float) * p->numel);
        int head = head_fresh && strncmp(p->name, "fc2.", 4) == 0;
        if (!head) dp_safetensors_copy(dp_safetensors_find(st, p->name), from_file);
        CHECK(memcmp(params + p->offset, head ? init + p->offset : from_file, sizeof(float) * p->numel) == 0,
              "%s: %s is not %s", what, p->name, head ? "the model's initialisation" : "the file's");
        free(from_file);
    }
}

/* fresh_head: a 10-output lenet (the file's shapes) keeps its own fc2 and
 * takes every other tensor; without it, fc2 is the file's too. */
static void test_fresh_head(const dp_checkpoint_t *c) {
    dp_model_t *ten = lenet_variant(10, 20, "lenet10.cfg");
    float *p10, *init10;
    initialised(ten, 8, &p10, &init10);
    dp_checkpoint_init_t what;
    CHECK(dp_checkpoint_load_init(c, ten, p10, 1, &what) == DP_OK, "load_init fresh_head: %s", dp_error_message());
    CHECK(strcmp(what.fresh_head, "fc2") == 0 && what.asked && what.model_outputs == 10 && what.file_outputs == 10,
          "fresh_head: '%s', asked %d, %d outputs, the file's %d", what.fresh_head, what.asked, what.model_outputs,
          what.file_outputs);
    check_loaded("fresh_head", c, ten, p10, init10, 1);
    CHECK(dp_checkpoint_load_init(c, ten, p10, 0, &what) == DP_OK && !what.fresh_head[0] && !what.asked,
          "without fresh_head: '%s'", what.fresh_head);
    check_loaded("without fresh_head", c, ten, p10, init10, 0);
    free(p10), free(init10);
    dp_model_free(ten);
}

static void test_checkpoints(const dp_dataset_t *train, const dp_dataset_t *test) {
    const char *pre = testing_tmp_file("pre.safetensors"), *tuned = testing_tmp_file("tuned.safetensors");
    const char *again = testing_tmp_file("again.safetensors"), *never = testing_tmp_file("never.safetensors");
    unlink(pre), unlink(tuned), unlink(again), unlink(never);
    /* a pretrained lenet: 1 epoch, no freezing */
    dp_model_t *lenet = load_model("lenet");
    dp_trainer_t *t = fit_trainer(lenet, 0);
    dp_fit_config_t fc = fit_config(lenet, t, train, test);
    fc.save_path = pre;
    CHECK(dp_fit(&fc, NULL, NULL, NULL) == DP_OK, "pretraining: %s", dp_error_message());
    dp_trainer_free(t);
    dp_checkpoint_t *c = NULL;
    CHECK(dp_checkpoint_open(pre, &c) == DP_OK, "%s", dp_error_message());
    if (!c) return;
    CHECK(count_optimizer_tensors(c) == 2 * 8 && !dp_checkpoint_info(c)->freeze[0], "pretrained: %d state tensors, "
          "freeze '%s'", count_optimizer_tensors(c), dp_checkpoint_info(c)->freeze);

    /* dp_checkpoint_load_init: a 5-output lenet with its convolutions frozen */
    dp_model_t *five = lenet_variant(5, 20, "lenet5.cfg");
    CHECK(dp_model_freeze(five, "conv1,conv2") == DP_OK, "%s", dp_error_message());
    float *params, *init;
    initialised(five, 7, &params, &init);
    dp_checkpoint_init_t what;
    CHECK(dp_checkpoint_load_init(c, five, params, 0, &what) == DP_OK, "load_init: %s", dp_error_message());
    CHECK(strcmp(what.fresh_head, "fc2") == 0 && what.model_outputs == 5 && what.file_outputs == 10,
          "the fresh head: '%s', %d outputs, the file's %d", what.fresh_head, what.model_outputs, what.file_outputs);
    check_loaded("load_init", c, five, params, init, 1);
    test_fresh_head(c);
    const dp_safetensors_t *st = dp_checkpoint_tensors(c);
    /* refusals: another shape (conv1 of 16 filters), a tensor the file lacks, one the model lacks */
    dp_model_t *narrow = lenet_variant(10, 16, "narrow.cfg");
    dp_model_t *more, *less;
    DP_ASSERT(dp_model_new("more", 1, 28, 28, DP_INIT_NORMAL, 0.01f, &more) == DP_OK);
    DP_ASSERT(dp_model_add_conv(more, "conv1", 20, 3, 3, NULL, 1) == DP_OK);
    DP_ASSERT(dp_model_add_batch_norm(more, "bn1", NULL) == DP_OK);
    DP_ASSERT(dp_model_new("less", 1, 28, 28, DP_INIT_NORMAL, 0.01f, &less) == DP_OK);
    DP_ASSERT(dp_model_add_conv(less, "conv1", 20, 3, 3, NULL, 1) == DP_OK);
    struct { dp_model_t *m; const char *named; } refused[] = {
        {narrow, "tensor 'conv1.weight' has shape [20, 1, 3, 3], model lenet's has shape [16, 1, 3, 3]"},
        {more, "has no tensor 'bn1.weight', which model more needs"},
        {less, "tensor 'conv2.weight' is not a parameter of model less"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        size_t n = dp_model_num_params(refused[k].m);
        float *p = malloc(sizeof(float) * n), *copy = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) p[i] = copy[i] = (float)i;
        dp_status_t status = dp_checkpoint_load_init(c, refused[k].m, p, 0, &what);
        CHECK(status == DP_ERR_FORMAT && strstr(dp_error_message(), refused[k].named) &&
              memcmp(p, copy, sizeof(float) * n) == 0, "refused %zu: %d '%s' (expected '%s', nothing changed)", k,
              (int)status, dp_error_message(), refused[k].named);
        free(p), free(copy);
    }
    dp_model_free(narrow), dp_model_free(more), dp_model_free(less);

    /* dp_fit from the file: its parameters in every replica at step 0; the
     * checkpoint saved holds the trained tensors' state and model.freeze */
    float *expected = malloc(sizeof(float) * dp_model_num_params(five));
    memcpy(expected, params, sizeof(float) * dp_model_num_params(five));
    t = fit_trainer(five, 9);
    fc = fit_config(five, t, train, test);
    fc.init_path = pre;
    fc.save_path = tuned;
    fc.epochs = 2;
    fc.stop_after = 1;
    fc.on_begin = on_begin;
    begin_seen_t seen = {.model = five, .trainer = t, .expected = expected};
    CHECK(dp_fit(&fc, NULL, &seen, NULL) == DP_OK, "fit from init: %s", dp_error_message());
    CHECK(seen.begins == 1 && seen.at_start && seen.init_named, "at step 0: %d begins, the file's parameters %d, "
          "the fresh head named %d", seen.begins, seen.at_start, seen.init_named);
    dp_trainer_free(t);
    dp_checkpoint_t *ct = NULL;
    CHECK(dp_checkpoint_open(tuned, &ct) == DP_OK, "%s", dp_error_message());
    if (ct) {
        CHECK(count_optimizer_tensors(ct) == 2 * 4 && strcmp(dp_checkpoint_info(ct)->freeze, "conv1,conv2") == 0,
              "fine-tuned: %d state tensors (adam, fc1 and fc2: 8), freeze '%s'", count_optimizer_tensors(ct),
              dp_checkpoint_info(ct)->freeze);
        const dp_safetensors_t *tst = dp_checkpoint_tensors(ct);
        const char *frozen[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"};
        for (int k = 0; k < 4; k++) {
            const dp_st_entry_t *a = dp_safetensors_find(st, frozen[k]), *b = dp_safetensors_find(tst, frozen[k]);
            CHECK(a && b && a->numel == b->numel && memcmp(a->bytes, b->bytes, 4 * a->numel) == 0,
                  "%s changed in the fine-tuning", frozen[k]);
        }
        dp_checkpoint_close(ct);
    }

    /* resume: frozen otherwise is refused naming a tensor; the same layers in another spelling continue */
    dp_model_t *other = lenet_variant(5, 20, "lenet5b.cfg");
    CHECK(dp_model_freeze(other, "conv1") == DP_OK, "%s", dp_error_message());
    t = fit_trainer(other, 9);
    fc = fit_config(other, t, train, test);
    fc.resume_path = tuned;
    fc.save_path = never;
    fc.epochs = 2;
    dp_status_t status = dp_fit(&fc, NULL, NULL, NULL);
    CHECK(status == DP_ERR_ARG && strstr(dp_error_message(), "saved with --freeze conv1,conv2, this run has conv1") &&
          strstr(dp_error_message(), "conv2.weight frozen then, not now") && access(never, F_OK) != 0,
          "resume frozen otherwise: %d '%s'", (int)status, dp_error_message());
    dp_trainer_free(t);
    CHECK(dp_model_freeze(other, "conv2,conv1") == DP_OK, "%s", dp_error_message());
    t = fit_trainer(other, 9);
    fc.trainer = t;
    fc.save_path = again;
    CHECK(dp_fit(&fc, NULL, NULL, NULL) == DP_OK, "resume with conv2,conv1: %s", dp_error_message());
    dp_trainer_free(t);
    dp_checkpoint_t *ca = NULL;
    CHECK(dp_checkpoint_open(again, &ca) == DP_OK, "%s", dp_error_message());
    if (ca) {
        const dp_safetensors_t *ast = dp_checkpoint_tensors(ca);
        const dp_st_entry_t *a = dp_safetensors_find(st, "conv2.weight"), *b = dp_safetensors_find(ast, "conv2.weight");
        CHECK(a && b && memcmp(a->bytes, b->bytes, 4 * a->numel) == 0 && dp_checkpoint_info(ca)->epochs_completed == 2,
              "resumed: conv2.weight changed or %d epochs", dp_checkpoint_info(ca)->epochs_completed);
        dp_checkpoint_close(ca);
    }
    /* init with resume: refused, nothing written */
    t = fit_trainer(other, 9);
    fc.trainer = t;
    fc.init_path = pre;
    fc.save_path = never;
    status = dp_fit(&fc, NULL, NULL, NULL);
    CHECK(status == DP_ERR_ARG && strstr(dp_error_message(), "with --resume") && access(never, F_OK) != 0,
          "init with resume: %d '%s'", (int)status, dp_error_message());
    dp_trainer_free(t);
    dp_model_free(other);
    free(params), free(init), free(expected);
    dp_model_free(five);
    dp_model_free(lenet);
    dp_checkpoint_close(c);
}

int main(void) {
    dp_dataset_t train = testing_column_dataset(300, 28, 5, 4, 4, 96, 21);
    dp_dataset_t test = testing_column_dataset(100, 28, 5, 4, 4, 96, 22);
    test_freeze_lists();
    test_backbone_lists();
    test_tape(&train);
    test_frozen_batch_norm(&train);
    test_trainer(&train);
    test_checkpoints(&train, &test);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    return testing_finish("test_finetune");
}
