/* test_grad_plan.c - activation gradients placed by liveness (grad_plan.h,
 * tensor.h's deferred gradient buffers) on host tapes.
 *
 * For models with every layer kind, residual joins (a tensor read by two
 * ops), views that share their input's gradient (flatten) and frozen
 * layers: a training step with deferral on gives the same parameter
 * gradients, bit for bit, as with every gradient its own memory; no
 * placeholder is left in any tensor; two gradients alive at once in
 * backward (their spans of nodes meet) never share a byte; the region is
 * smaller than all requests together; and later steps of one shape repeat
 * every address (what a captured CUDA graph relies on). Both ways: the
 * gradients apart from the activations, and over them (the arena records
 * its forward allocations): there no gradient shares a byte with a layer
 * output that backward still reads while the gradient is alive (the
 * output of node n is read until n's backward, or, where n is a
 * convolution or batch norm without a fused ReLU, until its last reader's
 * backward that is not an add: none for tiny_resnet's shortcut, which lies
 * under gradients throughout backward), some are placed over outputs, and
 * the region is no larger than apart. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/autograd.h"
#include "dptrain/model_file.h"
#include "dptrain/nn.h"
#include "dptrain/rng.h"
#include "testing.h"

#define BATCH 4

typedef struct {
    const float *grad;
    size_t bytes;
    int first, last; /* the nodes that name it (the producer, the last consumer) */
} buffer_t;

/* The node whose output t is, -1 if none (the input, a parameter). */
static int producer(dp_tape_t *tape, const dp_tensor_t *t) {
    for (int m = 0; m < dp_tape_size(tape); m++)
        if (&dp_tape_node(tape, m)->out == t) return m;
    return -1;
}

/* Every activation gradient on the tape, one per buffer: a node's output
 * gradient, or (a view, whose output shares its input's gradient) the
 * buffer of that input; with the span of nodes that name it. */
static int collect_buffers(dp_tape_t *tape, buffer_t *out, int capacity) {
    const int size = dp_tape_size(tape);
    if (size > capacity) return -1;
    int *id = malloc(sizeof(int) * (size_t)size), count = 0;
    for (int n = 0; n < size; n++) {
        const dp_node_t *node = dp_tape_node(tape, n);
        id[n] = -1;
        if (!node->out.grad) continue;
        for (int k = 0; k < 3 && id[n] < 0; k++) { /* a view of an input: its buffer */
            int m = node->in[k] && node->in[k]->grad == node->out.grad ? producer(tape, node->in[k]) : -1;
            if (m >= 0) id[n] = id[m];
        }
        if (id[n] < 0) {
            id[n] = count;
            out[count++] = (buffer_t){node->out.grad, dp_tensor_numel(&node->out) * sizeof(float), n, n};
        }
        if (n > out[id[n]].last) out[id[n]].last = n;
    }
    for (int n = 0; n < size; n++) { /* the consumers */
        const dp_node_t *node = dp_tape_node(tape, n);
        for (int k = 0; k < 3; k++) {
            int m = node->in[k] && node->in[k]->grad ? producer(tape, node->in[k]) : -1;
            if (m >= 0 && id[m] >= 0 && n > out[id[m]].last) out[id[m]].last = n;
        }
    }
    free(id);
    return count;
}

/* The first node (counting from 0) whose backward reads node n's output:
 * n itself, unless it is a convolution or batch norm without a fused ReLU;
 * then the first consumer that is not an add; INT_MAX for none. Conservative
 * for an output another output shares memory with (a view, or a sum written
 * over it): n. */
static int output_first_reader(dp_tape_t *tape, int n, int size) {
    const dp_node_t *node = dp_tape_node(tape, n);
    if ((node->kind != DP_OP_CONV && node->kind != DP_OP_BATCH_NORM) || node->attr.fuse_relu) return n;
    const float *d0 = node->out.data, *d1 = d0 + dp_tensor_numel(&node->out);
    for (int m = n + 1; m < size; m++) {
        const float *d = dp_tape_node(tape, m)->out.data;
        if (d && d >= d0 && d < d1) return n;
    }
    for (int m = n + 1; m < size; m++) {
        const dp_node_t *c = dp_tape_node(tape, m);
        for (int k = 0; k < 3; k++)
            if (c->in[k] == &node->out && c->kind != DP_OP_ADD) return m;
    }
    return INT_MAX;
}

/* One training step of m on x; the parameter gradients into grads (zeroed
 * first). Returns the tape's node count, -1 on failure. */
static int step(const dp_model_t *m, dp_tape_t *tape, dp_arena_t *arena, float *params, float *grads,
                const float *pixels, const int32_t *labels) {
    dp_arena_reset(arena);
    dp_tape_reset(tape);
    memset(grads, 0, sizeof(float) * dp_model_num_trainable(m));
    int shape[4] = {BATCH, 1, 28, 28};
    dp_tensor_t *x = dp_tape_tensor(tape, 4, shape), *logits;
    x->data = (float *)pixels;
    dp_forward_opts_t opts = {.training = 1, .seed = 7};
    if (dp_model_forward_opts(m, tape, params, grads, x, &opts, &logits) != DP_OK) return -1;
    dp_tensor_t *loss = dp_tape_op(tape, DP_OP_SOFTMAX_XENT, NULL, logits, NULL, NULL, labels);
    if (!loss || dp_tape_backward(tape, loss, NULL, NULL) != DP_OK) return -1;
    return dp_tape_size(tape);
}

static void check_model(const char *file, const char *freeze) {
    char what[160];
    snprintf(what, sizeof what, "%s%s%s", file, freeze ? " frozen " : "", freeze ? freeze : "");
    dp_model_t *m = NULL;
    if (dp_model_load(testing_path(file), &m) != DP_OK) {
        CHECK(0, "%s: %s", file, dp_error_message());
        return;
    }
    if (freeze) CHECK(dp_model_freeze(m, freeze) == DP_OK, "%s: freeze: %s", what, dp_error_message());
    const size_t np = dp_model_num_params(m), nt = dp_model_num_trainable(m);
    float *init = malloc(sizeof(float) * np), *params = malloc(sizeof(float) * np);
    float *plain = malloc(sizeof(float) * (nt + 1)), *planned = malloc(sizeof(float) * (nt + 1));
    float *pixels = malloc(sizeof(float) * BATCH * 784);
    int32_t labels[BATCH];
    dp_rng_t rng;
    dp_rng_seed(&rng, 11);
    dp_model_init_params(m, init, &rng);
    for (int i = 0; i < BATCH * 784; i++) pixels[i] = (float)dp_rng_normal(&rng);
    for (int i = 0; i < BATCH; i++) labels[i] = (int32_t)dp_rng_below(&rng, (uint64_t)dp_model_num_outputs(m));

    /* every gradient its own memory */
    dp_arena_t *arena = dp_arena_new((size_t)1 << 16);
    dp_tape_t *tape = dp_tape_new(arena);
    memcpy(params, init, sizeof(float) * np);
    CHECK(step(m, tape, arena, params, plain, pixels, labels) > 0, "%s: plain step: %s", what, dp_error_message());
    CHECK(dp_tape_grad_bytes(tape) == 0, "%s: a plain step planned %zu bytes", what, dp_tape_grad_bytes(tape));
    buffer_t all[512];
    const int plain_count = collect_buffers(tape, all, 512);
    size_t plain_bytes = 0;
    for (int i = 0; i < plain_count; i++) plain_bytes += all[i].bytes;
    dp_tape_free(tape);
    dp_arena_free(arena);

    /* placed by liveness, apart from the activations and over them: three steps on one arena each (the first
     * grows it, the next two repeat) */
    size_t apart_region = 0;
    for (int over = 0; over < 2; over++) {
    arena = dp_arena_new((size_t)1 << 16);
    dp_arena_defer_grads(arena, 1);
    dp_arena_record_forward(arena, over);
    tape = dp_tape_new(arena);
    const float *addresses[2][512];
    snprintf(what, sizeof what, "%s%s%s, %s", file, freeze ? " frozen " : "", freeze ? freeze : "",
             over ? "over the activations" : "apart");
    for (int s = 0; s < 3; s++) {
        memcpy(params, init, sizeof(float) * np);
        const int nodes = step(m, tape, arena, params, planned, pixels, labels);
        CHECK(nodes > 0, "%s: planned step %d: %s", what, s + 1, dp_error_message());
        if (nodes <= 0) break;
        CHECK(memcmp(plain, planned, sizeof(float) * nt) == 0, "%s: step %d: the parameter gradients differ from "
              "the plain step's", what, s + 1);
        buffer_t b[512];
        const int count = collect_buffers(tape, b, 512);
        CHECK(count == plain_count, "%s: %d gradient buffers, the plain step had %d", what, count, plain_count);
        size_t region = dp_tape_grad_bytes(tape);
        CHECK((over || region > 0) && region < plain_bytes, "%s: the region is %zu bytes, all gradients together %zu", what,
              region, plain_bytes);
        int placeholders = 0, shared = 0;
        for (int i = 0; i < count; i++) {
            if ((uintptr_t)b[i].grad >= ((uintptr_t)1 << 52)) placeholders++;
            for (int j = i + 1; j < count; j++) {
                const int meet = b[i].first <= b[j].last && b[j].first <= b[i].last;
                const uintptr_t a0 = (uintptr_t)b[i].grad, a1 = a0 + b[i].bytes;
                const uintptr_t c0 = (uintptr_t)b[j].grad, c1 = c0 + b[j].bytes;
                const int overlap = a0 < c1 && c0 < a1;
                CHECK(!(meet && overlap), "%s: gradients of nodes %d-%d and %d-%d are alive together and overlap",
                      what, b[i].first, b[i].last, b[j].first, b[j].last);
                shared += overlap;
            }
        }
        CHECK(placeholders == 0, "%s: %d placeholders left after backward", what, placeholders);
        int over_outputs = 0, over_unread = 0;
        for (int i = 0; i < count; i++)
            for (int n = 0; n < nodes; n++) {
                const dp_tensor_t *o = &dp_tape_node(tape, n)->out;
                const uintptr_t a0 = (uintptr_t)b[i].grad, a1 = a0 + b[i].bytes;
                const uintptr_t c0 = (uintptr_t)o->data, c1 = c0 + dp_tensor_numel(o) * sizeof(float);
                if (!o->data || !(a0 < c1 && c0 < a1)) continue;
                over_outputs++;
                const int first_reader = output_first_reader(tape, n, nodes);
                over_unread += first_reader == INT_MAX;
                CHECK(b[i].last < first_reader, "%s: step %d: the gradient of nodes %d-%d lies over node %d's output, "
                      "which node %d's backward still reads", what, s + 1, b[i].first, b[i].last, n, first_reader);
            }
        if (over && s > 0 && !strcmp(file, "models/tiny_resnet.cfg") && !freeze)
            CHECK(over_unread > 0, "%s: step %d: no gradient over the shortcut's output, which no backward reads",
                  what, s + 1);
        const size_t reused = dp_tape_grad_reused_bytes(tape);
        if (!over) CHECK(over_outputs == 0 && reused == 0, "%s: %d gradients over outputs, %zu bytes", what,
                         over_outputs, reused);
        else if (s > 0) CHECK(over_outputs > 0 && reused > 0, "%s: step %d placed nothing over the outputs", what,
                              s + 1);
        if (over && s > 0) CHECK(region <= apart_region, "%s: step %d: a region of %zu bytes, %zu apart", what, s + 1,
                                 region, apart_region);
        if (!over && s == 2) apart_region = region;
        CHECK(shared > 0, "%s: no two gradients share memory", what);
        if (s > 0)
            for (int i = 0; i < count && i < 512; i++) addresses[s - 1][i] = b[i].grad;
        if (s == 2)
            CHECK(memcmp(addresses[0], addresses[1], sizeof(float *) * (size_t)count) == 0,
                  "%s: steps 2 and 3 placed the gradients at different addresses", what);
        if (s == 2) printf("%s: %d gradient buffers, %zu bytes each their own, a region of %zu (%.2fx), %zu placed "
                           "over activations\n", what, count, plain_bytes, region, (double)region / (double)plain_bytes,
                           dp_tape_grad_reused_bytes(tape));
    }
    dp_tape_free(tape);
    dp_arena_free(arena);
    }
    free(init);
    free(params);
    free(plain);
    free(planned);
    free(pixels);
    dp_model_free(m);
}

int main(void) {
    check_model("models/every_layer.cfg", NULL);
    check_model("models/tiny_resnet.cfg", NULL);
    check_model("models/tiny_resnet.cfg", "stem,stem_bn");
    check_model("models/tiny_mobilenet.cfg", NULL);
    return testing_finish("test_grad_plan");
}
