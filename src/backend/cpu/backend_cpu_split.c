/* backend_cpu_split.c - the split CPU backend ("split", backend.h): a test
 * double of devices on distinct GPUs. split:N is a table of its own for
 * each N (as cuda:0 and cuda:1 are), with the staged backend's behaviour
 * (backend_cpu_staged.c: host_memory = 0, the optimizer state in a device
 * copy, batches uploaded), and it refuses memory that is not its own: every
 * function that is handed a pointer checks that the pointer lies in an
 * allocation of this table, and aborts with one line naming the function
 * and the tables otherwise. A GPU's table handed another GPU's pointer
 * would read the wrong memory or fault; here it fails at once, in every
 * build. The trainer on split:0,split:1,... must give the CPU backend's
 * bits (tests/cli_split.sh).
 *
 * DESIGN. Each table keeps the list of its live allocations (pointer,
 * size) under its own mutex; alloc adds, free removes, the checks look a
 * pointer range up (linear: a trainer has a few dozen allocations per
 * device). Functions may run on several threads at once (device tasks, the
 * communication thread), as on the other backends. The op table is the
 * CPU's: ops see the tensors' pointers only, which come from this table's
 * arena (dp_arena_new_on), so they are not checked one by one.
 */
#include "dptrain/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SPLIT_MAX 64

typedef struct {
    const char *base;
    size_t bytes;
} span_t;

typedef struct {
    int index;
    char name[16]; /* "split:N" */
    pthread_mutex_t lock;
    span_t *spans;
    int count, cap;
    dp_backend_t table;
} split_t;

static split_t splits[SPLIT_MAX];
static pthread_once_t split_once = PTHREAD_ONCE_INIT;

static const dp_backend_t *staged(void) { return dp_backend_cpu_staged(); }

/* The table, if any, whose allocations hold [p, p + bytes). */
static int owner_of(const void *p, size_t bytes) {
    const char *c = p;
    for (int s = 0; s < SPLIT_MAX; s++) {
        split_t *sp = &splits[s];
        int found = 0;
        pthread_mutex_lock(&sp->lock);
        for (int i = 0; i < sp->count && !found; i++)
            found = c >= sp->spans[i].base && c + bytes <= sp->spans[i].base + sp->spans[i].bytes;
        pthread_mutex_unlock(&sp->lock);
        if (found) return s;
    }
    return -1;
}

/* Aborts unless [p, p + bytes) is memory of `sp`. */
static void check_own(split_t *sp, const char *function, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    int owner = owner_of(p, bytes);
    if (owner == sp->index) return;
    char other[32];
    if (owner < 0) snprintf(other, sizeof other, "no device's");
    else snprintf(other, sizeof other, "split:%d's", owner);
    fprintf(stderr, "split backend: %s: %s was handed memory that is %s, not its own\n", sp->name, function, other);
    fflush(stderr);
    abort();
}

static void *split_alloc(void *ctx, size_t bytes, const char *what) {
    split_t *sp = ctx;
    void *p = staged()->alloc(staged()->ctx, bytes, what);
    if (!p) return NULL;
    pthread_mutex_lock(&sp->lock);
    if (sp->count == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 64;
        span_t *grown = realloc(sp->spans, sizeof *grown * (size_t)cap);
        DP_ASSERT(grown && "split backend: out of memory for its allocation list");
        sp->spans = grown;
        sp->cap = cap;
    }
    sp->spans[sp->count++] = (span_t){p, bytes ? bytes : 1};
    pthread_mutex_unlock(&sp->lock);
    return p;
}

static void split_free(void *ctx, void *ptr) {
    split_t *sp = ctx;
    if (!ptr) return;
    int found = 0;
    pthread_mutex_lock(&sp->lock);
    for (int i = 0; i < sp->count; i++)
        if (sp->spans[i].base == ptr) {
            sp->spans[i] = sp->spans[--sp->count];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&sp->lock);
    if (!found) check_own(sp, "free", ptr, 1); /* aborts: not an allocation of this table */
    staged()->free(staged()->ctx, ptr);
}

static void split_zero(void *ctx, void *dst, size_t bytes) {
    check_own(ctx, "zero", dst, bytes);
    staged()->zero(staged()->ctx, dst, bytes);
}

static void split_upload(void *ctx, void *dst, const void *host_src, size_t bytes) {
    check_own(ctx, "upload", dst, bytes);
    staged()->upload(staged()->ctx, dst, host_src, bytes);
}

static void split_download(void *ctx, void *host_dst, const void *src, size_t bytes) {
    check_own(ctx, "download", src, bytes);
    staged()->download(staged()->ctx, host_dst, src, bytes);
}

static void split_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    check_own(ctx, "copy (destination)", dst, bytes);
    check_own(ctx, "copy (source)", src, bytes);
    staged()->copy(staged()->ctx, dst, src, bytes);
}

static void split_optimizer_update(void *ctx, dp_optimizer_t *optimizer, float *params, const float *grads,
                                   size_t start, size_t count) {
    check_own(ctx, "optimizer_update (parameters)", params + start, sizeof(float) * count);
    check_own(ctx, "optimizer_update (gradients)", grads + start, sizeof(float) * count);
    staged()->optimizer_update(staged()->ctx, optimizer, params, grads, start, count);
}

static dp_status_t split_sum_squares(void *ctx, const float *x, size_t count, double *out) {
    check_own(ctx, "sum_squares", x, sizeof(float) * count);
    return staged()->sum_squares(staged()->ctx, x, count, out);
}

static void split_ema_update(void *ctx, float *avg, const float *x, float decay, float one_minus_decay,
                             size_t count) {
    check_own(ctx, "ema_update (average)", avg, sizeof(float) * count);
    check_own(ctx, "ema_update (model)", x, sizeof(float) * count);
    staged()->ema_update(staged()->ctx, avg, x, decay, one_minus_decay, count);
}

static void split_scale_range(void *ctx, float *x, float factor, size_t count) {
    check_own(ctx, "scale_range", x, sizeof(float) * count);
    staged()->scale_range(staged()->ctx, x, factor, count);
}

static void split_reduce_range(void *ctx, float *dst, const float *const *src, int k, size_t start,
                               size_t count) {
    check_own(ctx, "reduce_range (destination)", dst + start, sizeof(float) * count);
    for (int r = 0; r < k; r++) check_own(ctx, "reduce_range (a source)", src[r] + start, sizeof(float) * count);
    staged()->reduce_range(staged()->ctx, dst, src, k, start, count);
}

static void split_broadcast_range(void *ctx, float *const *dst, int k, const float *src, size_t start,
                                  size_t count) {
    check_own(ctx, "broadcast_range (source)", src + start, sizeof(float) * count);
    for (int e = 0; e < k; e++)
        check_own(ctx, "broadcast_range (a destination)", dst[e] + start, sizeof(float) * count);
    staged()->broadcast_range(staged()->ctx, dst, k, src, start, count);
}

static void split_input_from_bytes(void *ctx, float *x, const uint8_t *pixels, int n, int channels, size_t plane,
                                   const dp_normalize_t *norm) {
    check_own(ctx, "input_from_bytes (x)", x, sizeof(float) * (size_t)n * (size_t)channels * plane);
    check_own(ctx, "input_from_bytes (pixels)", pixels, (size_t)n * (size_t)channels * plane);
    staged()->input_from_bytes(staged()->ctx, x, pixels, n, channels, plane, norm);
}

static void split_paste_boxes(void *ctx, float *x, const float *src, int n, int channels, int height, int width,
                              const int32_t *boxes) {
    const size_t values = (size_t)n * (size_t)channels * (size_t)height * (size_t)width;
    check_own(ctx, "paste_boxes (x)", x, sizeof(float) * values);
    if (src) check_own(ctx, "paste_boxes (src)", src, sizeof(float) * values);
    check_own(ctx, "paste_boxes (boxes)", boxes, 4 * sizeof(int32_t) * (size_t)n);
    staged()->paste_boxes(staged()->ctx, x, src, n, channels, height, width, boxes);
}

static void split_count_metrics(void *ctx, double *sums, const float *loss, double scale, const float *logits,
                                const int32_t *labels, int n, int k) {
    check_own(ctx, "count_metrics (sums)", sums, DP_METRICS_SUMS * sizeof(double));
    if (loss) check_own(ctx, "count_metrics (loss)", loss, sizeof(float));
    check_own(ctx, "count_metrics (logits)", logits, sizeof(float) * (size_t)n * (size_t)k);
    check_own(ctx, "count_metrics (labels)", labels, sizeof(int32_t) * (size_t)n);
    staged()->count_metrics(staged()->ctx, sums, loss, scale, logits, labels, n, k);
}

static void split_init(void) {
    for (int s = 0; s < SPLIT_MAX; s++) {
        split_t *sp = &splits[s];
        sp->index = s;
        snprintf(sp->name, sizeof sp->name, "split:%d", s);
        pthread_mutex_init(&sp->lock, NULL);
        sp->table = *staged();
        sp->table.name = "split";
        sp->table.ctx = sp;
        sp->table.alloc = split_alloc;
        sp->table.free = split_free;
        sp->table.zero = split_zero;
        sp->table.upload = split_upload;
        sp->table.download = split_download;
        sp->table.copy = split_copy;
        sp->table.optimizer_update = split_optimizer_update;
        sp->table.sum_squares = split_sum_squares;
        sp->table.scale_range = split_scale_range;
        sp->table.ema_update = split_ema_update;
        sp->table.reduce_range = split_reduce_range;
        sp->table.broadcast_range = split_broadcast_range;
        sp->table.input_from_bytes = split_input_from_bytes;
        sp->table.paste_boxes = split_paste_boxes;
        sp->table.count_metrics = split_count_metrics;
    }
}

const dp_backend_t *dp_backend_cpu_split(int index) {
    if (index < 0 || index >= SPLIT_MAX) return NULL;
    pthread_once(&split_once, split_init);
    return &splits[index].table;
}
