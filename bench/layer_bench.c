/* layer_bench.c - forward and backward time of single layers through the op
 * table, for the per-layer comparison with PyTorch (bench/layers_vs_pytorch.sh).
 *
 * usage: layer_bench LAYERS_FILE [seconds_per_layer]
 * Reads the layer list (bench/layers.txt; its header documents the format),
 * and for each layer prints one line:
 *   name fwd_ms bwd_ms
 * the medians over repetitions (at least 5, about `seconds_per_layer` per
 * direction, default 0.5). Forward includes allocating the output from the
 * step arena, as in training; backward computes every input's and
 * parameter's gradient (the data input too, as inside a network). A layer
 * whose op is missing prints "n/a". Times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID; torch_layers.py uses time.thread_time), so a
 * busy machine that preempts the thread does not inflate them; both sides
 * run one thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/ops.h"
#include "dptrain/rng.h"

#include "bench_util.h"

#define MAX_REPS 1000

typedef struct {
    char name[64], op[32];
    int n, c, h, w;
    int out, k, s, p, bias, relu, g;
} layer_spec_t;

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parses "name op N C H W key=value..."; returns 0 for blank/comment lines. */
static int parse_layer(char *line, layer_spec_t *l, int line_no) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    memset(l, 0, sizeof *l);
    l->s = 1;
    l->bias = 1;
    l->g = 1;
    int used = 0;
    if (sscanf(line, "%63s %31s %d %d %d %d %n", l->name, l->op, &l->n, &l->c, &l->h, &l->w, &used) < 6) {
        for (char *q = line; *q; q++)
            if (*q != ' ' && *q != '\t' && *q != '\n') {
                fprintf(stderr, "layer_bench: line %d: expected 'name op N C H W [key=value...]'\n", line_no);
                exit(1);
            }
        return 0;
    }
    for (char *tok = strtok(line + used, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
        char key[16];
        int value;
        if (sscanf(tok, "%15[^=]=%d", key, &value) != 2) {
            fprintf(stderr, "layer_bench: line %d: bad option '%s'\n", line_no, tok);
            exit(1);
        }
        int *field = !strcmp(key, "out") ? &l->out : !strcmp(key, "k") ? &l->k : !strcmp(key, "s") ? &l->s
                   : !strcmp(key, "p") ? &l->p : !strcmp(key, "bias") ? &l->bias
                   : !strcmp(key, "relu") ? &l->relu : !strcmp(key, "g") ? &l->g : NULL;
        if (!field) {
            fprintf(stderr, "layer_bench: line %d: unknown option '%s'\n", line_no, key);
            exit(1);
        }
        *field = value;
    }
    return 1;
}

/* A tensor of random values in [-1, 1) with a gradient buffer when asked. */
static dp_tensor_t *make_tensor(int ndim, const int *shape, int with_grad, dp_rng_t *rng) {
    dp_tensor_t *t = calloc(1, sizeof *t);
    dp_tensor_set_shape(t, ndim, shape);
    size_t n = dp_tensor_numel(t);
    t->data = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) t->data[i] = 2.0f * dp_rng_uniform(rng) - 1.0f;
    if (with_grad) t->grad = calloc(n, sizeof(float));
    return t;
}

static void free_tensor(dp_tensor_t *t) {
    if (!t) return;
    free(t->data);
    free(t->grad);
    free(t);
}

/* Builds the node of a layer; returns 0 when the op name is unknown. */
static int build_node(const layer_spec_t *l, dp_node_t *node, dp_rng_t *rng) {
    memset(node, 0, sizeof *node);
    node->attr = dp_op_attr_default();
    int x_shape[4] = {l->n, l->c, l->h, l->w};
    if (!strcmp(l->op, "conv")) {
        node->kind = DP_OP_CONV;
        int w_shape[4] = {l->out, l->c / l->g, l->k, l->k};
        node->in[1] = make_tensor(4, w_shape, 1, rng);
        if (l->bias) node->in[2] = make_tensor(1, &l->out, 1, rng);
        for (int d = 0; d < 2; d++) node->attr.stride[d] = l->s, node->attr.pad[d] = l->p;
        node->attr.fuse_relu = l->relu;
        node->attr.groups = l->g;
    } else if (!strcmp(l->op, "avg_pool") || !strcmp(l->op, "max_pool")) {
        node->kind = l->op[0] == 'a' ? DP_OP_AVG_POOL : DP_OP_MAX_POOL;
        for (int d = 0; d < 2; d++) node->attr.kernel[d] = l->k, node->attr.stride[d] = l->s;
    } else if (!strcmp(l->op, "linear")) {
        node->kind = DP_OP_LINEAR;
        int features = l->c * l->h * l->w, w_shape[2] = {l->out, features}, flat[2] = {l->n, features};
        node->in[0] = make_tensor(2, flat, 1, rng);
        node->in[1] = make_tensor(2, w_shape, 1, rng);
        node->in[2] = make_tensor(1, &l->out, 1, rng);
    } else if (!strcmp(l->op, "relu")) {
        node->kind = DP_OP_RELU;
    } else if (!strcmp(l->op, "relu6")) {
        node->kind = DP_OP_RELU6;
    } else if (!strcmp(l->op, "batch_norm") || !strcmp(l->op, "batch_norm_relu6")) {
        node->kind = DP_OP_BATCH_NORM;
        node->attr.fuse_relu = strcmp(l->op, "batch_norm_relu6") ? 0 : DP_FUSE_RELU6;
        node->in[1] = make_tensor(1, &l->c, 1, rng);
        node->in[2] = make_tensor(1, &l->c, 1, rng);
        node->attr.running_mean = calloc((size_t)l->c, sizeof(float));
        node->attr.running_var = calloc((size_t)l->c, sizeof(float));
        for (int i = 0; i < l->c; i++) node->attr.running_var[i] = 1.0f;
    } else if (!strcmp(l->op, "add_relu")) {
        node->kind = DP_OP_ADD;
        node->in[1] = make_tensor(4, x_shape, 1, rng);
        node->attr.fuse_relu = 1;
    } else if (!strcmp(l->op, "global_avg_pool")) {
        node->kind = DP_OP_GLOBAL_AVG_POOL;
    } else {
        return 0;
    }
    if (!node->in[0]) node->in[0] = make_tensor(4, x_shape, 1, rng);
    return 1;
}

static void free_node(dp_node_t *node) {
    for (int i = 0; i < 3; i++) free_tensor(node->in[i]);
    free(node->attr.running_mean);
    free(node->attr.running_var);
}

/* Times one layer; returns 0 when its op fails (not implemented). */
static int time_layer(dp_node_t *node, double budget, double *fwd_ms, double *bwd_ms, dp_rng_t *rng) {
    static double fwd[MAX_REPS], bwd[MAX_REPS];
    dp_arena_t *arena = dp_arena_new(1 << 20);
    float *dy = NULL;
    int reps = 0;
    double spent = 0.0;
    while (reps < MAX_REPS && (reps < 5 || spent < budget)) {
        dp_arena_reset(arena);
        double t0 = now_sec();
        if (dp_op_forward(node, arena) != DP_OK) {
            dp_arena_free(arena);
            free(dy);
            return 0;
        }
        double t1 = now_sec();
        size_t n = dp_tensor_numel(&node->out);
        if (!dy) {
            dy = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) dy[i] = 2.0f * dp_rng_uniform(rng) - 1.0f;
        }
        dp_grad_prepare(&node->out);
        memcpy(node->out.grad, dy, n * sizeof(float));
        double t2 = now_sec();
        if (dp_op_backward(node, arena) != DP_OK) {
            dp_arena_free(arena);
            free(dy);
            return 0;
        }
        double t3 = now_sec();
        fwd[reps] = 1e3 * (t1 - t0);
        bwd[reps] = 1e3 * (t3 - t2);
        spent += t3 - t0;
        reps++;
    }
    *fwd_ms = bench_median(fwd, reps);
    *bwd_ms = bench_median(bwd, reps);
    dp_arena_free(arena);
    free(dy);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: layer_bench LAYERS_FILE [seconds_per_layer]\n");
        return 2;
    }
    double budget = argc == 3 ? atof(argv[2]) : 0.5;
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "layer_bench: cannot open %s\n", argv[1]);
        return 1;
    }
    dp_rng_t rng;
    dp_rng_seed(&rng, 1);
    char line[512];
    int line_no = 0;
    while (fgets(line, sizeof line, f)) {
        layer_spec_t l;
        if (!parse_layer(line, &l, ++line_no)) continue;
        dp_node_t node;
        double fwd_ms, bwd_ms;
        if (build_node(&l, &node, &rng) && time_layer(&node, budget, &fwd_ms, &bwd_ms, &rng))
            printf("%s %.4f %.4f\n", l.name, fwd_ms, bwd_ms);
        else
            printf("%s n/a n/a\n", l.name);
        fflush(stdout);
        free_node(&node);
    }
    fclose(f);
    return 0;
}
