/* test_no_grad.c - the layers no backward reads run in memory their
 * outputs leave as they die (no_grad.h; nn.h dp_model_frozen_prefix).
 *
 * - dp_model_frozen_prefix: 0 with nothing frozen or with the first layer
 *   training; the layers below LeNet's fc1 with its convolutions frozen;
 *   every layer but the head with a backbone frozen;
 * - one training pass (forward, loss, backward on a step arena placing
 *   gradients by liveness, as the trainer's) with the runner against the
 *   same pass without it, on: LeNet (convolutions frozen), tiny_resnet.cfg
 *   with the stem and the block's first conv frozen (an output that a
 *   route after the prefix reads, made before the prefix ends), the same
 *   with the whole backbone frozen (dropout and the residual in the
 *   prefix), a model whose residual add writes over a batch norm's output
 *   that a trained layer reads after three more frozen ops (a kept output
 *   in a pool arena: were it given back, those ops would write over it),
 *   and the CIFAR ResNet-18 with its backbone frozen: logits, every
 *   gradient and the parameters and running statistics after the pass the
 *   same bits;
 * - an inference pass (every layer; tiny_resnet's dropout an alias there)
 *   of tiny_resnet, the residual model and ResNet-18: the same logits;
 * - memory: the step arena's peak plus the runner's is under the step
 *   arena's peak without it (ResNet-18's training pass and every inference
 *   pass but the smallest: under half), and the runner holds few pool
 *   arenas (a ResNet: at most 4);
 * - a second pass on the same runner gives the same logits; two passes
 *   take the same memory: the first op after the prefix reads its input at
 *   the same address both times;
 * - with nothing frozen a training pass never uses the runner (no arena
 *   made) and is the same.
 * Mutations seen failing: giving a kept output's pool arena back (the
 * residual model's logits and gradients differ); not counting a residual's
 * second input as a read, so that its arena goes back before the add runs
 * (every model with a residual in its prefix differs).
 */
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/no_grad.h"
#include "dptrain/model_file.h"
#include "dptrain/rng.h"
#include "testing.h"

/* What one training pass gave. */
typedef struct {
    float *logits, *grads, *params; /* copies */
    size_t logit_count;
    size_t arena_peak; /* the step arena's */
    const float *first_input; /* the data the first op after the prefix read */
    int ok;
} pass_t;

static void pass_free(pass_t *p) {
    free(p->logits);
    free(p->grads);
    free(p->params);
}

/* One pass of m on n random examples from `params0`, with runner fp
 * (NULL: without): a training pass (forward, loss, backward) or an
 * inference one (forward). `passes` passes on the same arenas; the last
 * one's results. */
static pass_t run_pass(const dp_model_t *m, const float *params0, int n, dp_no_grad_t *fp, int passes,
                       int training) {
    pass_t r = {0};
    const dp_backend_t *be = dp_backend_cpu();
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    int c, h, w;
    dp_model_input_shape(m, &c, &h, &w);
    float *params = malloc(sizeof(float) * np), *grads = calloc(nt + 1, sizeof(float));
    float *xs = malloc(sizeof(float) * (size_t)n * c * h * w);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)n);
    dp_arena_t *arena = dp_arena_new_on(be, (size_t)1 << 20);
    dp_tape_t *tape = arena ? dp_tape_new_on(be, arena) : NULL;
    if (!params || !grads || !xs || !labels || !tape) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    dp_arena_defer_grads(arena, 1);
    dp_arena_record_forward(arena, 1);
    memcpy(params, params0, sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 77);
    for (size_t i = 0; i < (size_t)n * c * h * w; i++) xs[i] = (float)dp_rng_normal(&rng);
    for (int i = 0; i < n; i++) labels[i] = (int32_t)dp_rng_below(&rng, (uint64_t)dp_model_num_outputs(m));
    r.ok = 1;
    for (int pass = 0; pass < passes && r.ok; pass++) {
        dp_tape_reset(tape);
        dp_arena_reset(arena);
        memset(grads, 0, sizeof(float) * nt);
        int shape[4] = {n, c, h, w};
        dp_tensor_t *x = dp_tape_tensor(tape, 4, shape), *logits = NULL, *loss = NULL;
        x->data = xs;
        dp_forward_opts_t opts = {.training = training, .seed = 5, .no_grad = fp};
        r.ok = dp_model_forward_opts(m, tape, params, training ? grads : NULL, x, &opts, &logits) == DP_OK &&
               (!training || (loss = dp_tape_op(tape, DP_OP_SOFTMAX_XENT, NULL, logits, NULL, NULL, labels)));
        if (r.ok) { /* read before backward: its gradients may lie over the logits */
            free(r.logits);
            r.logit_count = dp_tensor_numel(logits);
            r.logits = malloc(sizeof(float) * r.logit_count);
            memcpy(r.logits, logits->data, sizeof(float) * r.logit_count);
            r.first_input = dp_tape_size(tape) > 0 ? dp_tape_node(tape, 0)->in[0]->data : NULL;
            r.ok = !training || dp_tape_backward(tape, loss, NULL, NULL) == DP_OK;
        }
        if (!r.ok) fprintf(stderr, "%s: %s\n", dp_model_name(m), dp_error_message());
    }
    r.arena_peak = dp_arena_peak(arena);
    r.grads = grads;
    r.params = params;
    dp_tape_free(tape);
    dp_arena_free(arena);
    free(xs);
    free(labels);
    return r;
}

static dp_model_t *parse(const char *text) {
    dp_model_t *m = NULL;
    if (dp_model_parse(text, strlen(text), "test.cfg", &m) != DP_OK) {
        fprintf(stderr, "test.cfg: %s\n", dp_error_message());
        exit(2);
    }
    return m;
}

static dp_model_t *load(const char *name) {
    dp_model_t *m = NULL;
    if (dp_model_load(name, &m) != DP_OK) {
        fprintf(stderr, "%s: %s\n", name, dp_error_message());
        exit(2);
    }
    return m;
}

/* The number of m's first linear layer (1-based). */
static int first_linear(const dp_model_t *m) {
    for (int i = 1; i <= dp_model_num_layers(m); i++) {
        dp_layer_info_t l;
        if (dp_model_layer(m, i, &l) == DP_OK && l.kind == DP_LAYER_LINEAR) return i;
    }
    return -1;
}

/* A pass with and without the runner: the same bits, less memory.
 * freeze: the list (NULL: none; "backbone": dp_model_backbone_list's);
 * prefix: the frozen prefix expected (-1: the layers below the first
 * linear one); max_arenas: the most pool arenas the runner may make; half:
 * whether the memory with the runner must be under half of it without.
 * Frees m. */
static void compare(const char *name, dp_model_t *m, const char *freeze, int prefix, int n, int max_arenas,
                    int half) {
    char *backbone = NULL;
    if (freeze && !strcmp(freeze, "backbone")) {
        CHECK(dp_model_backbone_list(m, &backbone) == DP_OK, "%s: %s", name, dp_error_message());
        freeze = backbone;
    }
    if (freeze) CHECK(dp_model_freeze(m, freeze) == DP_OK, "%s: freeze %s: %s", name, freeze, dp_error_message());
    free(backbone);
    if (prefix < 0) prefix = first_linear(m) - 1;
    CHECK(dp_model_frozen_prefix(m) == prefix, "%s: a frozen prefix of %d layers, expected %d", name,
          dp_model_frozen_prefix(m), prefix);
    size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *params0 = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 3);
    dp_model_init_params(m, params0, &rng);
    /* running statistics away from (0, 1): a frozen batch norm's normalisation shows */
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) {
        const dp_param_info_t *p = dp_model_param(m, i);
        if (p->trainable) continue;
        int var = strstr(p->name, "running_var") != NULL;
        for (size_t k = 0; k < p->numel; k++)
            params0[p->offset + k] = var ? 0.5f + (float)dp_rng_uniform(&rng) : 0.2f * (float)dp_rng_normal(&rng);
    }
    dp_no_grad_t *fp = dp_no_grad_new(dp_backend_cpu());
    CHECK(fp != NULL, "%s: no runner: %s", name, dp_error_message());
    pass_t a = run_pass(m, params0, n, NULL, 1, 1), b = run_pass(m, params0, n, fp, 1, 1);
    CHECK(a.ok && b.ok, "%s: a pass failed", name);
    if (a.ok && b.ok) {
        CHECK(a.logit_count == b.logit_count && memcmp(a.logits, b.logits, sizeof(float) * a.logit_count) == 0,
              "%s: the logits differ with the runner", name);
        CHECK(memcmp(a.grads, b.grads, sizeof(float) * nt) == 0, "%s: the gradients differ with the runner", name);
        CHECK(memcmp(a.params, b.params, sizeof(float) * np) == 0,
              "%s: the parameters or running statistics after the pass differ with the runner", name);
        size_t held;
        int arenas = dp_no_grad_memory(fp, &held);
        if (prefix > 0) {
            CHECK(arenas >= 1 && arenas <= max_arenas, "%s: %d pool arenas (at most %d)", name, arenas, max_arenas);
            size_t with = b.arena_peak + held, without = a.arena_peak;
            CHECK(with < without && (!half || 2 * with < without),
                  "%s: %zu bytes with the runner (step arena %zu + runner %zu), %zu without", name, with,
                  b.arena_peak, held, without);
            printf("%s: frozen prefix of %d layers: %zu KiB a pass (step arena %zu + runner %zu in %d pool arenas "
                   "and the kept one), %zu KiB without the runner\n",
                   name, prefix, with >> 10, b.arena_peak >> 10, held >> 10, arenas, without >> 10);
            /* a second pass on the same runner: the same memory */
            pass_t c = run_pass(m, params0, n, fp, 2, 1);
            CHECK(c.ok && c.logit_count == a.logit_count &&
                      memcmp(c.logits, a.logits, sizeof(float) * a.logit_count) == 0,
                  "%s: a second pass with the runner gives other logits", name);
            pass_free(&c);
        } else {
            CHECK(arenas == 0 && held == 0, "%s: nothing frozen below the first layer, yet %d arenas", name, arenas);
        }
    }
    pass_free(&a);
    pass_free(&b);
    dp_no_grad_free(fp);
    free(params0);
    dp_model_free(m);
}

/* The same address for the first op after the prefix in two passes of two
 * steps on one arena pair (what a captured CUDA graph replays). */
static void test_same_memory(void) {
    dp_model_t *m = load(testing_path("models/tiny_resnet.cfg"));
    CHECK(dp_model_freeze(m, "stem,stem_bn,block.conv1,block.bn1") == DP_OK, "%s", dp_error_message());
    size_t np = dp_model_num_params(m);
    float *params0 = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 4);
    dp_model_init_params(m, params0, &rng);
    dp_no_grad_t *fp = dp_no_grad_new(dp_backend_cpu());
    pass_t one = run_pass(m, params0, 6, fp, 1, 1);
    size_t held1;
    int arenas1 = dp_no_grad_memory(fp, &held1);
    pass_t two = run_pass(m, params0, 6, fp, 3, 1);
    size_t held2;
    int arenas2 = dp_no_grad_memory(fp, &held2);
    CHECK(one.ok && two.ok && one.first_input && one.first_input == two.first_input,
          "the first op after the prefix read %p, then %p", (const void *)one.first_input,
          (const void *)two.first_input);
    CHECK(arenas1 == arenas2 && held1 == held2, "later passes took more: %d arenas %zu bytes, then %d, %zu", arenas1,
          held1, arenas2, held2);
    pass_free(&one);
    pass_free(&two);
    dp_no_grad_free(fp);
    free(params0);
    dp_model_free(m);
}

/* An inference pass with and without a runner: the same logits, less
 * memory (under half: half). Frees m. */
static void compare_inference(const char *name, dp_model_t *m, int n, int half) {
    size_t np = dp_model_num_params(m);
    float *params0 = malloc(sizeof(float) * np);
    dp_rng_t rng;
    dp_rng_seed(&rng, 8);
    dp_model_init_params(m, params0, &rng);
    dp_no_grad_t *ng = dp_no_grad_new(NULL);
    pass_t a = run_pass(m, params0, n, NULL, 1, 0), b = run_pass(m, params0, n, ng, 2, 0);
    size_t held;
    int arenas = dp_no_grad_memory(ng, &held);
    CHECK(a.ok && b.ok && a.logit_count == b.logit_count &&
              memcmp(a.logits, b.logits, sizeof(float) * a.logit_count) == 0,
          "%s, inference: the logits differ with the runner", name);
    size_t with = b.arena_peak + held;
    CHECK(arenas >= 1 && arenas <= 4 && with < a.arena_peak && (!half || 2 * with < a.arena_peak),
          "%s, inference: %zu bytes in %d pool arenas and the step arena, %zu without the runner", name, with,
          arenas, a.arena_peak);
    printf("%s, inference: %zu KiB a pass (%d pool arenas), %zu KiB without the runner\n", name, with >> 10, arenas,
           a.arena_peak >> 10);
    pass_free(&a);
    pass_free(&b);
    dp_no_grad_free(ng);
    free(params0);
    dp_model_free(m);
}

/* A residual add over a batch norm's output (in place) whose sum a trained
 * layer reads through a route, after three more frozen ops. */
static const char *const inplace_cfg =
    "[net]\nname = inplace\nchannels = 2\nheight = 10\nwidth = 10\ninit = torch\n"
    "[conv]\nname = a\nfilters = 4\nsize = 3\npad = 1\n"
    "[batchnorm]\nname = a_bn\nlabel = x\n"
    "[conv]\nname = b\nfilters = 4\nsize = 3\npad = 1\n"
    "[batchnorm]\nname = b_bn\n"
    "[residual]\nfrom = x\nlabel = r\n"
    "[conv]\nname = c\nfilters = 4\nsize = 3\npad = 1\n"
    "[batchnorm]\nname = c_bn\n"
    "[relu]\n"
    "[conv]\nname = d\nfilters = 4\nsize = 3\npad = 1\n"
    "[relu]\nlabel = z\n"
    "[route]\nfrom = r\n"
    "[conv]\nname = e\nfilters = 4\nsize = 3\npad = 1\n"
    "[residual]\nfrom = z\n"
    "[global_avgpool]\n[flatten]\n"
    "[linear]\nname = fc\nout = 3\n";

int main(void) {
    const char *tiny = testing_path("models/tiny_resnet.cfg");
    dp_model_t *m = load(tiny);
    CHECK(dp_model_freeze(m, "block.conv1,block.bn1") == DP_OK, "%s", dp_error_message());
    CHECK(dp_model_frozen_prefix(m) == 0, "the first layer trains: a prefix of %d", dp_model_frozen_prefix(m));
    dp_model_free(m);
    dp_model_t *lenet = NULL;
    CHECK(dp_model_builtin("lenet", &lenet) == DP_OK, "%s", dp_error_message());
    compare("lenet, its convolutions frozen", lenet, "conv1,conv2", -1, 8, 3, 0);
    /* the block's conv2 trains: layers 1 to 6 (stem, stem_bn, ReLU, block.conv1, block.bn1, ReLU) */
    compare("tiny_resnet, stem and block.conv1 frozen", load(tiny), "stem,stem_bn,block.conv1,block.bn1", 6, 6, 4, 0);
    compare("tiny_resnet, backbone frozen", load(tiny), "backbone", -1, 6, 4, 1);
    compare("residual in place, kept", parse(inplace_cfg), "a,a_bn,b,b_bn,c,c_bn,d", 11, 4, 4, 0);
    compare("resnet18-cifar, backbone frozen", load("resnet18-cifar"), "backbone", -1, 4, 4, 1);
    compare("tiny_resnet, nothing frozen", load(tiny), NULL, 0, 4, 0, 0);
    compare_inference("tiny_resnet", load(tiny), 6, 1);
    compare_inference("residual in place", parse(inplace_cfg), 4, 0);
    compare_inference("resnet18-cifar", load("resnet18-cifar"), 4, 1);
    test_same_memory();
    return testing_finish("test_no_grad");
}
