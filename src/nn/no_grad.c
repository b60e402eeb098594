/* no_grad.c - the runner of the layers of a pass that no backward reads
 * (no_grad.h): their ops on a tape of its own, each op's output and
 * scratch in the kept arena or a pool arena, a pool arena reset and free
 * again once nothing it holds will be read.
 *
 * Per forward: a plan over the outputs of those layers (which output a
 * no-op layer's aliases, how many reads each has left among them, which
 * ones the layers after them read), then the layers through nn.c's
 * forward with a hook around each op that picks its arena before and
 * settles ownership and deaths after. */
#include "dptrain/no_grad.h"

#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"

#include "forward_internal.h"

#define OWNER_NONE (-2) /* not the runner's memory: the shard */
#define OWNER_KEPT (-1)

struct dp_no_grad {
    dp_layer_hook_t hook; /* first: the hook's functions get the runner back */
    const dp_backend_t *backend;
    dp_tape_t *tape;
    dp_arena_t *kept;
    dp_arena_t **pool; /* (count) */
    int *free_stack;   /* (count) indices of the free pool arenas, the last freed on top */
    int *live;         /* (count) outputs in each pool arena still to be read (or kept) */
    int count, capacity, free_count;
    size_t peak;
    /* this forward's plan, (plan_capacity) entries over outputs 0 .. prefix */
    const dp_model_t *model;
    int *alias, *reads, *owner;
    unsigned char *kept_out;
    int plan_capacity;
    int current; /* the arena of the op running: OWNER_KEPT or a pool index */
};

dp_status_t dp_no_grad_wanted(int *on) {
    const char *env = getenv("DPTRAIN_FORWARD_LIVENESS");
    *on = 1;
    if (!env || !*env || !strcmp(env, "on") || !strcmp(env, "1")) return DP_OK;
    if (!strcmp(env, "off") || !strcmp(env, "0")) {
        *on = 0;
        return DP_OK;
    }
    return dp_fail(DP_ERR_ARG, "DPTRAIN_FORWARD_LIVENESS=%s: expected on or off", env);
}

dp_no_grad_t *dp_no_grad_new(const dp_backend_t *backend) {
    dp_no_grad_t *ng = dp_alloc_zeroed(1, sizeof *ng, "no-grad runner");
    if (!ng) return NULL;
    ng->backend = backend ? backend : dp_backend_cpu();
    ng->kept = dp_arena_new_on(ng->backend, (size_t)1 << 20);
    ng->tape = ng->kept ? dp_tape_new_on(ng->backend, ng->kept) : NULL;
    if (!ng->kept || !ng->tape) {
        dp_no_grad_free(ng);
        return NULL;
    }
    return ng;
}

void dp_no_grad_free(dp_no_grad_t *ng) {
    if (!ng) return;
    dp_tape_free(ng->tape);
    for (int i = 0; i < ng->count; i++) dp_arena_free(ng->pool[i]);
    dp_arena_free(ng->kept);
    free(ng->pool);
    free(ng->free_stack);
    free(ng->live);
    free(ng->alias);
    free(ng->reads);
    free(ng->owner);
    free(ng->kept_out);
    free(ng);
}

void dp_no_grad_set_profiler(dp_no_grad_t *ng, dp_profiler_t *profiler) {
    dp_tape_set_profiler(ng->tape, profiler);
}

int dp_no_grad_memory(const dp_no_grad_t *ng, size_t *bytes) {
    if (bytes) *bytes = ng->peak;
    return ng->count;
}

/* A free pool arena's index, made when none is free. */
static dp_status_t take_pool(dp_no_grad_t *ng, int *index) {
    if (ng->free_count > 0) {
        *index = ng->free_stack[--ng->free_count];
        return DP_OK;
    }
    if (ng->count == ng->capacity) {
        int capacity = ng->capacity ? 2 * ng->capacity : 8;
        dp_arena_t **pool = realloc(ng->pool, sizeof *pool * (size_t)capacity);
        if (pool) ng->pool = pool;
        int *stack = pool ? realloc(ng->free_stack, sizeof *stack * (size_t)capacity) : NULL;
        if (stack) ng->free_stack = stack;
        int *live = stack ? realloc(ng->live, sizeof *live * (size_t)capacity) : NULL;
        if (live) ng->live = live;
        if (!live) return dp_fail(DP_ERR_NOMEM, "out of memory for the no-grad runner's %d arenas", capacity);
        ng->capacity = capacity;
    }
    dp_arena_t *arena = dp_arena_new_on(ng->backend, (size_t)1 << 20);
    if (!arena) return DP_ERR_NOMEM;
    ng->pool[ng->count] = arena;
    ng->live[ng->count] = 0;
    *index = ng->count++;
    return DP_OK;
}

static void give_back(dp_no_grad_t *ng, int index) {
    dp_arena_reset(ng->pool[index]);
    ng->free_stack[ng->free_count++] = index;
}

/* Output o is read no more by these layers: unless later layers read o,
 * its pool arena is free once nothing else in it will be read. (A kept
 * output in a pool arena, written over an input there, holds it to the
 * end.) */
static void output_dead(dp_no_grad_t *ng, int o) {
    int a = ng->owner[o];
    if (a < 0 || ng->kept_out[o]) return;
    if (--ng->live[a] == 0) give_back(ng, a);
}

static dp_status_t before_op(dp_layer_hook_t *hook, int first, int last) {
    dp_no_grad_t *ng = (dp_no_grad_t *)hook;
    (void)first;
    if (ng->kept_out[last + 1]) {
        ng->current = OWNER_KEPT;
        dp_tape_set_arena(ng->tape, ng->kept);
        return DP_OK;
    }
    DP_TRY(take_pool(ng, &ng->current));
    dp_tape_set_arena(ng->tape, ng->pool[ng->current]);
    return DP_OK;
}

static dp_status_t after_op(dp_layer_hook_t *hook, int first, int last, dp_tensor_t *const *outs) {
    dp_no_grad_t *ng = (dp_no_grad_t *)hook;
    dp_layer_info_t l;
    DP_TRY(dp_model_layer(ng->model, first + 1, &l));
    const int o = last + 1, in[2] = {ng->alias[l.input], l.other >= 0 ? ng->alias[l.other] : -1};
    ng->owner[o] = ng->current;
    for (int k = 0; k < 2; k++) /* written over an input, or a view of it: that input's memory */
        if (in[k] >= 0 && outs[in[k]] && outs[in[k]]->data == outs[o]->data) ng->owner[o] = ng->owner[in[k]];
    if (ng->current >= 0 && ng->owner[o] != ng->current) give_back(ng, ng->current); /* held only scratch */
    if (ng->owner[o] >= 0) ng->live[ng->owner[o]]++;
    for (int k = 0; k < 2; k++)
        if (in[k] >= 0 && --ng->reads[in[k]] == 0) output_dead(ng, in[k]);
    if (ng->reads[o] == 0) output_dead(ng, o); /* read by none of these layers */
    return DP_OK;
}

/* The plan of outputs 0 .. prefix: aliases (a route's, an inference
 * pass's dropout's), reads by layers 1 .. prefix, the outputs that later
 * layers read. */
static dp_status_t plan(dp_no_grad_t *ng, const dp_model_t *m, int prefix, int training) {
    const int layers = dp_model_num_layers(m), n = prefix + 1;
    if (n > ng->plan_capacity) {
        free(ng->alias);
        free(ng->reads);
        free(ng->owner);
        free(ng->kept_out);
        ng->alias = dp_alloc(sizeof(int) * (size_t)n, "no-grad plan");
        ng->reads = dp_alloc(sizeof(int) * (size_t)n, "no-grad plan");
        ng->owner = dp_alloc(sizeof(int) * (size_t)n, "no-grad plan");
        ng->kept_out = dp_alloc((size_t)n, "no-grad plan");
        ng->plan_capacity = ng->alias && ng->reads && ng->owner && ng->kept_out ? n : 0;
        if (!ng->plan_capacity) return DP_ERR_NOMEM;
    }
    ng->model = m;
    memset(ng->reads, 0, sizeof(int) * (size_t)n);
    memset(ng->kept_out, 0, (size_t)n);
    ng->alias[0] = 0;
    ng->owner[0] = OWNER_NONE;
    for (int i = 1; i <= layers; i++) {
        dp_layer_info_t l;
        DP_TRY(dp_model_layer(m, i, &l));
        const int reads[2] = {l.input, l.other};
        const int no_op = l.kind == DP_LAYER_ROUTE ||
                          ((l.kind == DP_LAYER_DROPOUT || l.kind == DP_LAYER_DROP_PATH) && !training); /* nn.c's aliases */
        for (int k = 0; k < 2; k++) {
            if (reads[k] < 0 || reads[k] > prefix) continue;
            if (i > prefix) ng->kept_out[ng->alias[reads[k]]] = 1;
            else if (!no_op) ng->reads[ng->alias[reads[k]]]++;
        }
        if (i <= prefix) {
            ng->alias[i] = no_op ? ng->alias[l.input] : i;
            ng->owner[i] = OWNER_NONE;
        }
    }
    if (prefix == layers) ng->kept_out[ng->alias[prefix]] = 1; /* the logits */
    return DP_OK;
}

dp_status_t dp_no_grad_forward(dp_no_grad_t *ng, const dp_model_t *m, int prefix, dp_tape_t *tape, float *params,
                               const dp_forward_opts_t *opts, dp_tensor_t **outs) {
    DP_ASSERT((dp_tape_backend(tape) ? dp_tape_backend(tape) : dp_backend_cpu()) == ng->backend);
    DP_TRY(plan(ng, m, prefix, opts->training));
    dp_tape_reset(ng->tape);
    dp_arena_reset(ng->kept);
    ng->free_count = 0;
    for (int i = ng->count - 1; i >= 0; i--) { /* pool[0] on top: every forward takes them in the same order */
        dp_arena_reset(ng->pool[i]);
        ng->live[i] = 0;
        ng->free_stack[ng->free_count++] = i;
    }
    ng->hook.before = before_op;
    ng->hook.after = after_op;
    dp_forward_opts_t own = *opts;
    own.no_grad = NULL;
    DP_TRY(dp_model_forward_layers(m, ng->tape, params, NULL, &own, outs, 0, prefix, &ng->hook));
    size_t held = dp_arena_peak(ng->kept);
    for (int i = 0; i < ng->count; i++) held += dp_arena_peak(ng->pool[i]);
    if (held > ng->peak) ng->peak = held;
    for (int j = 1; j <= prefix; j++)
        if (!ng->kept_out[ng->alias[j]]) outs[j] = NULL; /* dead: no later layer reads them */
    return DP_OK;
}
