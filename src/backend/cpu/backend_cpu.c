/* backend_cpu.c - the CPU backend (backend.h): device memory is host memory
 * (64-byte aligned), copies are memcpy, the op table is dp_op_table
 * (ops_table.c: the SIMD kernels of ops_*.c), the optimizer update is
 * optim.c's dp_optimizer_step_range, and the collective primitives are
 * plain loops over shared memory (the sums: the kernel table's per-ISA
 * loop); a batch's loss, correct and top-5 counts are added up in place
 * (count_metrics); gradient clipping's sum of squares is optim.h's
 * dp_sum_squares. Stateless: one static table serves every
 * CPU device. */
#include "dptrain/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conv_winograd.h"
#include "kernels/kernels.h"

static void *cpu_alloc(void *ctx, size_t bytes, const char *what) {
    (void)ctx;
    return dp_alloc_aligned(bytes, what);
}

static void cpu_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}

/* The step arena's range: address space of the machine's memory size,
 * inaccessible; committing makes it readable and writable (pages become
 * resident as they are first written, as malloc's do). A system that
 * refuses the range (strict overcommit) gets NULL: the arena chains. */
#define COMMIT_GRANULE ((size_t)2 << 20)

static void *cpu_reserve(void *ctx, size_t *bytes) {
    (void)ctx;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return NULL;
    size_t size = ((size_t)pages * (size_t)page + COMMIT_GRANULE - 1) / COMMIT_GRANULE * COMMIT_GRANULE;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *bytes = size;
    return p;
}

static size_t cpu_commit(void *ctx, void *base, size_t committed, size_t bytes, const char *what) {
    (void)ctx;
    size_t to = (bytes + COMMIT_GRANULE - 1) / COMMIT_GRANULE * COMMIT_GRANULE;
    if (to <= committed) return committed;
    if (mprotect((unsigned char *)base + committed, to - committed, PROT_READ | PROT_WRITE) != 0) {
        dp_fail(DP_ERR_NOMEM, "out of memory for %s (%zu bytes)", what, to);
        return 0;
    }
    return to;
}

static void cpu_release(void *ctx, void *base, size_t bytes) {
    (void)ctx;
    if (base) munmap(base, bytes);
}

static void cpu_zero(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    memset(dst, 0, bytes);
}

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_optimizer_update(void *ctx, dp_optimizer_t *optimizer, float *params, const float *grads,
                                 size_t start, size_t count) {
    (void)ctx;
    dp_optimizer_step_range(optimizer, params, grads, start, count);
}

static dp_status_t cpu_sum_squares(void *ctx, const float *x, size_t count, double *out) {
    (void)ctx;
    *out = dp_sum_squares(x, count);
    return DP_OK;
}

static void cpu_ema_update(void *ctx, float *avg, const float *x, float decay, float one_minus_decay, size_t count) {
    (void)ctx;
    dp_ema_update(avg, x, decay, one_minus_decay, count);
}

static void cpu_scale_range(void *ctx, float *x, float factor, size_t count) {
    (void)ctx;
    for (size_t i = 0; i < count; i++) x[i] *= factor;
}

static void cpu_reduce_range(void *ctx, float *dst, const float *const *src, int k, size_t start,
                             size_t count) {
    (void)ctx;
    if (count == 0) return;
    float *sum = dst + start; /* (count) */
    if (dst != src[0]) memcpy(sum, src[0] + start, sizeof(float) * count);
    const dp_cpu_loops_t *loops = dp_cpu_kernels()->loops; /* vectorized for the ISA in use */
    for (int r = 1; r < k; r++) loops->add_inplace(sum, src[r] + start, count);
}

static void cpu_broadcast_range(void *ctx, float *const *dst, int k, const float *src, size_t start,
                                size_t count) {
    (void)ctx;
    if (count == 0) return;
    for (int e = 0; e < k; e++)
        if (dst[e] != src) memcpy(dst[e] + start, src + start, sizeof(float) * count);
}

static void cpu_input_from_bytes(void *ctx, float *x, const uint8_t *pixels, int n, int channels, size_t plane,
                                 const dp_normalize_t *norm) {
    (void)ctx;
    dp_pixels_to_input(pixels, n, channels, plane, norm, x);
}

static void cpu_paste_boxes(void *ctx, float *x, const float *src, int n, int channels, int height, int width,
                            const int32_t *boxes) {
    (void)ctx;
    const size_t plane = (size_t)height * width;
    for (int i = 0; i < n; i++) {
        const int32_t *b = boxes + 4 * (size_t)i; /* y1, y2, x1, x2 */
        if (b[0] >= b[1] || b[2] >= b[3]) continue;
        for (int c = 0; c < channels; c++)
            for (int y = b[0]; y < b[1]; y++) {
                const size_t at = ((size_t)i * channels + c) * plane + (size_t)y * width + b[2];
                if (src)
                    memcpy(x + at, src + at, sizeof(float) * (size_t)(b[3] - b[2]));
                else
                    memset(x + at, 0, sizeof(float) * (size_t)(b[3] - b[2]));
            }
    }
}

/* backend.h's top-5 rule: 1 when `label` is among the 5 largest entries
 * of row (k): fewer than 5 entries outrank it (larger, or equal at a lower
 * index); a NaN at the label is ranked last, a NaN elsewhere outranks
 * nothing (its comparisons are false). */
static int cpu_top5_hit(const float *row, int k, int32_t label) {
    if (label < 0 || label >= k) return 0;
    const float v = row[label];
    if (isnan(v)) return k <= 5;
    int rank = 0;
    for (int j = 0; j < k && rank < 5; j++)
        rank += row[j] > v || (row[j] == v && j < label);
    return rank < 5;
}

/* backend.h's count_metrics on host memory. The product and the sum are
 * separate statements with the product in a volatile: no fused
 * multiply-add whatever the compiler's contraction setting, the bits of
 * the trainer's former `loss_sum += (double)loss * denominator`. */
static void cpu_count_metrics(void *ctx, double *sums, const float *loss, double scale, const float *logits,
                              const int32_t *labels, int n, int k) {
    (void)ctx;
    if (loss) {
        volatile double product = (double)loss[0] * scale;
        sums[0] += product;
    }
    int correct = 0, top5 = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k; /* (k) */
        int best = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[best]) best = j;
        correct += best == labels[i];
        top5 += cpu_top5_hit(row, k, labels[i]);
    }
    sums[1] += correct;
    sums[2] += top5;
}

/* The process-wide convolution mode (conv_winograd.h). */
static dp_status_t cpu_set_winograd(void *ctx, int on) {
    (void)ctx;
    dp_conv_winograd_set_mode(on ? DP_WINO_ON : DP_WINO_OFF);
    return DP_OK;
}

static const dp_backend_t cpu_backend = {
    .name = "cpu",
    .ctx = NULL,
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .reserve = cpu_reserve,
    .commit = cpu_commit,
    .release = cpu_release,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .ops = dp_op_table,
    .optimizer_update = cpu_optimizer_update,
    .sum_squares = cpu_sum_squares,
    .scale_range = cpu_scale_range,
    .ema_update = cpu_ema_update,
    .reduce_range = cpu_reduce_range,
    .broadcast_range = cpu_broadcast_range,
    .input_from_bytes = cpu_input_from_bytes,
    .paste_boxes = cpu_paste_boxes,
    .count_metrics = cpu_count_metrics,
    .set_winograd = cpu_set_winograd,
};

const dp_backend_t *dp_backend_cpu(void) { return &cpu_backend; }
