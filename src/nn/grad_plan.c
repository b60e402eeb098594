/* grad_plan.c - activation gradients placed by liveness (grad_plan.h). */
#include "grad_plan.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

/* A request's span: the first and last node that names it. */
typedef struct {
    int first, last;
    size_t offset;       /* in the region, once placed there */
    unsigned char *over; /* or its address over dead activations (NULL: in the region) */
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
    if (!r) return;
    const span_t *s = &spans[r - requests];
    t->grad = (float *)((s->over ? s->over : (unsigned char *)region + s->offset) + within);
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

/* A placed request alive beside the one being placed: [offset, end), in the
 * region or as addresses over dead activations. */
typedef struct {
    uintptr_t offset, end;
} placed_t;

static int lower_first(const void *a, const void *b) {
    const placed_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The lowest start from `at` on where `need` bytes fit between the sorted
 * intervals busy[from..m) (those starting before `limit` matter), or
 * UINTPTR_MAX when the first gap that fits would end past `limit`. */
static uintptr_t first_fit(const placed_t *busy, int from, int m, uintptr_t at, uintptr_t limit, size_t need) {
    for (int j = from; j < m && busy[j].offset < limit; j++) {
        if (busy[j].offset >= at + need) break; /* fits in the gap before it */
        if (busy[j].end > at) at = busy[j].end;
    }
    return at + need <= limit ? at : UINTPTR_MAX;
}

/* Memory of forward allocations dead while a request is alive: runs of
 * adjacent records all made by nodes after the request's last node
 * (backward has run those nodes before the request's first use). Records
 * merge only within a segment (records made one after another in one
 * block); the segments, sorted by address once, give the runs sorted. */
typedef struct {
    uintptr_t start, end;
} run_t;

typedef struct {
    int from, to; /* records [from, to) */
    uintptr_t start;
} segment_t;

static int segment_lower_first(const void *a, const void *b) {
    const segment_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int segments_of(const dp_arena_record_t *records, int n, segment_t *segments) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && records[i - 1].block == records[i].block &&
            (uintptr_t)records[i - 1].p + records[i - 1].bytes == (uintptr_t)records[i].p)
            segments[m - 1].to = i + 1;
        else segments[m++] = (segment_t){i, i + 1, (uintptr_t)records[i].p};
    }
    qsort(segments, (size_t)m, sizeof *segments, segment_lower_first); /* a chain's blocks lie in any order */
    return m;
}

/* Backward reads a node's output after its forward: its own backward, or a
 * consumer's. Known not to: a convolution's or a batch norm's backward
 * reads its input, not its output, unless a ReLU or ReLU6 is fused into
 * it (the mask); an add's backward reads neither input (the residual written in
 * place relies on the batch norm's alike). So the output of such a
 * convolution or batch norm whose only readers are adds, and which no other
 * tensor shares (no view, no output written over it), is dead for all of
 * backward: ResNet's downsampling batch norm beside the one the residual
 * is written over (PyTorch frees it once the sum is made). */
static int output_unread_in_backward(dp_node_t *const *nodes, dp_tensor_t *const (*inputs)[3], int size, int p,
                                     const dp_arena_record_t *r) {
    const dp_node_t *node = nodes[p];
    if ((node->kind != DP_OP_CONV && node->kind != DP_OP_BATCH_NORM) || node->attr.fuse_relu) return 0;
    if ((unsigned char *)node->out.data != r->p) return 0;
    const dp_tensor_t *out = &node->out;
    int readers = 0;
    for (int n = p + 1; n < size; n++) {
        const dp_node_t *m = nodes[n];
        const unsigned char *d = (const unsigned char *)m->out.data;
        if (d && d >= r->p && d < r->p + r->bytes) return 0; /* a view of it, or an output written over it */
        for (int k = 0; k < 3; k++) {
            const int reads = m->in[k] == out || (inputs && inputs[n][k] == out);
            if (reads && m->kind != DP_OP_ADD) return 0;
            readers += reads;
        }
    }
    return readers > 0;
}

static int dead_runs(const dp_arena_record_t *records, const segment_t *segments, int nsegments, const int *dies,
                     int last, run_t *runs) {
    int m = 0;
    for (int g = 0; g < nsegments; g++) {
        int open = 0; /* runs[m - 1] may grow */
        for (int i = segments[g].from; i < segments[g].to; i++) {
            if (dies[i] <= last) {
                open = 0;
                continue;
            }
            const uintptr_t p = (uintptr_t)records[i].p;
            if (open) runs[m - 1].end = p + records[i].bytes;
            else runs[m++] = (run_t){p, p + records[i].bytes};
            open = 1;
        }
    }
    return m;
}

/* The lowest address in the runs where `need` bytes meet none of the busy
 * intervals (sorted by start); 0 when none. maxend[j]: the largest end
 * among busy[0..j]. */
static uintptr_t fit_over(const run_t *runs, int nruns, const placed_t *busy, const uintptr_t *maxend, int m,
                          size_t need) {
    int j = 0; /* busy[0..j) start before the run */
    for (int k = 0; k < nruns; k++) {
        if (runs[k].end - runs[k].start < need) continue;
        while (j < m && busy[j].offset < runs[k].start) j++;
        uintptr_t at = runs[k].start;
        if (j > 0 && maxend[j - 1] > at) at = maxend[j - 1]; /* one starting before reaches into the run */
        uintptr_t found = first_fit(busy, j, m, at, runs[k].end, need);
        if (found != UINTPTR_MAX) return found;
    }
    return 0;
}

dp_status_t dp_grad_plan_apply(dp_arena_t *arena, dp_node_t *const *nodes, dp_tensor_t *const (*inputs)[3], int size,
                               size_t *bytes, size_t *reused) {
    if (bytes) *bytes = 0;
    if (reused) *reused = 0;
    int count, nrecords;
    dp_grad_request_t *requests = dp_arena_deferred(arena, &count);
    if (count == 0) return DP_OK;
    const dp_arena_record_t *records = dp_arena_forward_records(arena, &nrecords);
    span_t *spans = malloc(sizeof *spans * (size_t)count);
    sort_item_t *order = malloc(sizeof *order * (size_t)count);
    placed_t *beside = malloc(sizeof *beside * (size_t)count);
    placed_t *busy = malloc(sizeof *busy * (size_t)count);
    uintptr_t *maxend = malloc(sizeof *maxend * (size_t)count);
    run_t *runs = malloc(sizeof *runs * (size_t)(nrecords ? nrecords : 1));
    segment_t *segments = malloc(sizeof *segments * (size_t)(nrecords ? nrecords : 1));
    int *dies = malloc(sizeof *dies * (size_t)(nrecords ? nrecords : 1));
    if (!spans || !order || !beside || !busy || !maxend || !runs || !segments || !dies) {
        free(dies);
        free(segments);
        free(spans);
        free(order);
        free(beside);
        free(busy);
        free(maxend);
        free(runs);
        return dp_fail(DP_ERR_NOMEM, "out of memory planning %d gradient buffers", count);
    }
    const int nsegments = segments_of(records, nrecords, segments);
    /* each record dead once backward has run past this node (dead_runs: a request may lie over it when its
     * last node is below): the node whose forward made it, or none for an output no backward reads */
    for (int i = 0; i < nrecords; i++)
        dies[i] = records[i].node < size && output_unread_in_backward(nodes, inputs, size, records[i].node, &records[i])
                      ? INT_MAX
                      : records[i].node;
    for (int i = 0; i < count; i++) { /* a request no node names (made outside an op): alive throughout */
        spans[i].first = requests[i].node >= 0 ? requests[i].node : 0;
        spans[i].last = requests[i].node >= 0 ? requests[i].node : size;
        spans[i].over = NULL;
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
    /* greedy by size: each over the dead activations where it fits (the lowest address), else in the region at
     * the lowest offset where it fits between the placed ones it meets */
    qsort(order, (size_t)count, sizeof *order, larger_first);
    size_t total = 0, over = 0;
    for (int i = 0; i < count; i++) {
        const int a = order[i].index;
        const size_t need = requests[a].bytes;
        int m = 0, nb = 0;
        for (int j = 0; j < i; j++) {
            const int b = order[j].index;
            if (spans[b].first > spans[a].last || spans[a].first > spans[b].last) continue;
            if (spans[b].over)
                busy[nb++] = (placed_t){(uintptr_t)spans[b].over, (uintptr_t)spans[b].over + requests[b].bytes};
            else
                beside[m++] = (placed_t){spans[b].offset, spans[b].offset + requests[b].bytes};
        }
        if (nrecords > 0) {
            const int nruns = dead_runs(records, segments, nsegments, dies, spans[a].last, runs);
            qsort(busy, (size_t)nb, sizeof *busy, lower_first);
            for (int j = 0; j < nb; j++) maxend[j] = j && maxend[j - 1] > busy[j].end ? maxend[j - 1] : busy[j].end;
            uintptr_t at = fit_over(runs, nruns, busy, maxend, nb, need);
            if (at) {
                spans[a].over = (unsigned char *)at;
                over += need;
                continue;
            }
        }
        qsort(beside, (size_t)m, sizeof *beside, lower_first);
        spans[a].offset = first_fit(beside, 0, m, 0, UINTPTR_MAX, need);
        if (spans[a].offset + need > total) total = spans[a].offset + need;
    }
    free(order);
    free(beside);
    free(busy);
    free(maxend);
    free(runs);
    free(segments);
    free(dies);
    float *region = NULL;
    if (total > 0 && !(region = dp_arena_alloc(arena, total))) {
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
    if (reused) *reused = over;
    return DP_OK;
}
