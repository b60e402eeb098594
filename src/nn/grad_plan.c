/* grad_plan.c - activation gradients placed by liveness (grad_plan.h). */
#include "grad_plan.h"

#include <stdlib.h>

/* A request's span: the first and last node that names it. */
typedef struct {
    int first, last;
    size_t offset; /* in the region, once placed */
} span_t;

static void touch(dp_arena_t *arena, dp_grad_request_t *requests, span_t *spans, const dp_tensor_t *t, int n) {
    size_t within;
    dp_grad_request_t *r = t ? dp_arena_deferred_find(arena, t->grad, &within) : NULL;
    if (!r) return;
    span_t *s = &spans[r - requests];
    if (n < s->first) s->first = n;
    if (n > s->last) s->last = n;
}

static void place(dp_arena_t *arena, dp_grad_request_t *requests, const span_t *spans, float *region, dp_tensor_t *t) {
    size_t within;
    dp_grad_request_t *r = t ? dp_arena_deferred_find(arena, t->grad, &within) : NULL;
    if (r) t->grad = (float *)((unsigned char *)region + spans[r - requests].offset + within);
}

/* Sort keys (no globals: device threads plan their tapes at once). */
typedef struct {
    size_t key, at; /* the request's bytes (larger first), its placeholder offset (earlier first among equals) */
    int index;
} sort_item_t;

static int larger_first(const void *a, const void *b) {
    const sort_item_t *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* A placed request alive beside the one being placed: [offset, end). */
typedef struct {
    size_t offset, end;
} placed_t;

static int lower_first(const void *a, const void *b) {
    const placed_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

dp_status_t dp_grad_plan_apply(dp_arena_t *arena, dp_node_t *const *nodes, dp_tensor_t *const (*inputs)[3], int size,
                               size_t *bytes) {
    if (bytes) *bytes = 0;
    int count;
    dp_grad_request_t *requests = dp_arena_deferred(arena, &count);
    if (count == 0) return DP_OK;
    span_t *spans = malloc(sizeof *spans * (size_t)count);
    sort_item_t *order = malloc(sizeof *order * (size_t)count);
    placed_t *beside = malloc(sizeof *beside * (size_t)count);
    if (!spans || !order || !beside) {
        free(spans);
        free(order);
        free(beside);
        return dp_fail(DP_ERR_NOMEM, "out of memory planning %d gradient buffers", count);
    }
    for (int i = 0; i < count; i++) { /* a request no node names (made outside an op): alive throughout */
        spans[i].first = requests[i].node >= 0 ? requests[i].node : 0;
        spans[i].last = requests[i].node >= 0 ? requests[i].node : size;
        order[i] = (sort_item_t){.key = requests[i].bytes, .at = requests[i].at, .index = i};
    }
    for (int n = 0; n < size; n++) {
        const dp_node_t *node = nodes[n];
        touch(arena, requests, spans, &node->out, n);
        for (int k = 0; k < 3; k++) {
            touch(arena, requests, spans, node->in[k], n);
            if (inputs) touch(arena, requests, spans, inputs[n][k], n);
        }
    }
    /* greedy by size: the lowest offset where the request fits between the placed ones it meets */
    qsort(order, (size_t)count, sizeof *order, larger_first);
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        const int a = order[i].index;
        const size_t need = requests[a].bytes;
        int m = 0;
        for (int j = 0; j < i; j++) {
            const int b = order[j].index;
            if (spans[b].first <= spans[a].last && spans[a].first <= spans[b].last)
                beside[m++] = (placed_t){spans[b].offset, spans[b].offset + requests[b].bytes};
        }
        qsort(beside, (size_t)m, sizeof *beside, lower_first);
        size_t at = 0;
        for (int j = 0; j < m; j++) {
            if (beside[j].offset >= at + need) break; /* fits in the gap before it */
            if (beside[j].end > at) at = beside[j].end;
        }
        spans[a].offset = at;
        if (at + need > total) total = at + need;
    }
    free(order);
    free(beside);
    float *region = dp_arena_alloc(arena, total);
    if (!region) {
        free(spans);
        return dp_error_status() != DP_OK ? dp_error_status() : DP_ERR_NOMEM;
    }
    /* every holder of a placeholder: views share theirs, so all are found among these */
    for (int n = 0; n < size; n++) {
        dp_node_t *node = nodes[n];
        place(arena, requests, spans, region, &node->out);
        for (int k = 0; k < 3; k++) {
            place(arena, requests, spans, region, node->in[k]);
            if (inputs) place(arena, requests, spans, region, inputs[n][k]);
        }
    }
    for (int i = 0; i < count; i++) place(arena, requests, spans, region, requests[i].t);
    free(spans);
    dp_arena_deferred_clear(arena);
    if (bytes) *bytes = total;
    return DP_OK;
}
