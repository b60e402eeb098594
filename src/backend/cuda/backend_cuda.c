/* backend_cuda.c - the CUDA backend (backend.h) of one GPU: device memory
 * (cudaMalloc), copies and zeroing on the GPU's stream, the optimizer update
 * and the device-order sum as own kernels (optimizers.cu, reductions.cu),
 * broadcasts as
 * device-to-device copies, and a batch's bytes turned into the model's
 * input on the GPU. The op table is ops_cuda.c's.
 *
 * DESIGN: cuda_context.h (one context per GPU, its lock and stream).
 * Optimizer state: the host dp_optimizer_t keeps the configuration and the
 * step count; its state buffers (momentum, sums, Adam's moments) live on
 * the GPU, one device copy per host optimizer, created at its first update
 * from the host buffers (so a restored optimizer continues from its
 * checkpointed state) and taken again from the host whenever the step count
 * jumps (set_steps after a restore) or when optimizer_upload says so; the
 * host buffers are updated from the GPU by optimizer_download (the trainer
 * calls it before a checkpoint reads them: dp_trainer_optimizer), and
 * optimizer_forget frees the slot with the host optimizer.
 * Batches: their bytes and labels go up through the pinned staging slots
 * without a wait (dp_cuda_upload_staged), as does the loss seed, and
 * become dp_pixels_to_input's values on the GPU (input_from_bytes: a
 * quarter of the floats' bytes cross the bus). A step's loss and correct
 * count are added up on the GPU (count_metrics), so a step has no host
 * synchronisation (but gradient clipping's norm: sum_squares downloads
 * it). Products and
 * convolutions: FP32 unless --precision says otherwise (cuda_set_precision). */
#include "backend_cuda.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_context.h"
#include "cuda_parts.h"
#include "kernels.h"

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER; /* opening a context */

int dp_cuda_gpu_count(const char **why) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        if (why)
            *why = err == cudaErrorNoDevice || (err == cudaSuccess && count <= 0) ? "no CUDA GPU found"
                   : err == cudaErrorInsufficientDriver                        ? "no NVIDIA driver (or one too old for this CUDA)"
                                                                               : "the CUDA runtime failed to start";
        return 0;
    }
    if (why) *why = NULL;
    return count;
}

/* --- Memory ----------------------------------------------------------------- */

static void *cuda_alloc(void *ctx, size_t bytes, const char *what) {
    dp_cuda_ctx_t *c = ctx;
    void *ptr = NULL;
    dp_cuda_enter(c);
    if (dp_cuda_malloc(c, &ptr, bytes) != cudaSuccess) dp_cuda_out_of_memory(c, what, bytes);
    dp_cuda_leave(c);
    return ptr;
}

/* The most device memory held through this backend at once, in bytes. */
static size_t cuda_memory_peak(void *ctx) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    size_t peak = c->mem_peak;
    dp_cuda_leave(c);
    return peak;
}

static void cuda_free(void *ctx, void *ptr) {
    dp_cuda_ctx_t *c = ctx;
    if (!ptr) return;
    dp_cuda_enter(c);
    dp_cuda_free_idle(c, ptr, "cudaFree"); /* after the work that may still use it */
    dp_cuda_leave(c);
}

static void cuda_zero(void *ctx, void *dst, size_t bytes) {
    dp_cuda_ctx_t *c = ctx;
    if (!bytes) return;
    dp_cuda_enter(c);
    dp_cuda_check(c, cudaMemsetAsync(dst, 0, bytes, c->stream), "zeroing memory");
    dp_cuda_leave(c);
}

/* Returns once the copy is done: backend.h's calls are synchronous for the
 * caller, who may reuse or free host_src at once (autograd seeds the loss
 * gradient from a stack variable, the trainer refills its staging buffers).
 * cudaMemcpyAsync alone does not promise that: cuda_runtime_api.h says it
 * "may return before the copy is complete", and the API's synchronisation
 * notes say from pageable memory it "might be synchronous". On the stream:
 * ordered after the work queued before it. */
static int upload_synced(dp_cuda_ctx_t *c, void *dst, const void *host_src, size_t bytes, const char *what) {
    return dp_cuda_check(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream), what) ||
           dp_cuda_check(c, dp_cuda_wait(c, NULL), what);
}

/* The ring of pinned staging slots (cuda_context.h), made at the first
 * small upload; refused for good (every upload then waits) when pinned
 * memory or an event cannot be had. Under the lock. */
static int stage_ready(dp_cuda_ctx_t *c) {
    if (c->stage) return 1;
    if (c->stage_refused) return 0;
    void *pinned = NULL;
    int made = 0;
    if (cudaHostAlloc(&pinned, DP_CUDA_STAGE_SLOTS * DP_CUDA_STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess) {
        while (made < DP_CUDA_STAGE_SLOTS &&
               cudaEventCreateWithFlags(&c->stage_done[made], cudaEventDisableTiming) == cudaSuccess)
            made++;
    }
    if (made < DP_CUDA_STAGE_SLOTS) {
        for (int s = 0; s < made; s++) cudaEventDestroy(c->stage_done[s]);
        if (pinned) cudaFreeHost(pinned);
        cudaGetLastError(); /* not sticky: the uploads wait instead */
        c->stage_refused = 1;
        return 0;
    }
    c->stage = pinned;
    return 1;
}

/* 0 once the copy last queued from a staging slot (its event) is done:
 * queried, and waited for only when not ready. Under the lock. */
static int slot_free(dp_cuda_ctx_t *c, cudaEvent_t event, int recorded, const char *what) {
    if (!recorded) return 0;
    cudaError_t done = cudaEventQuery(event);
    if (done == cudaErrorNotReady) {
        cudaGetLastError(); /* "not ready" is an answer, not an error */
        done = dp_cuda_wait(c, event);
    }
    return dp_cuda_check(c, done, what);
}

/* The next big staging slot, with room for `bytes` (grown: the old one
 * freed once its copy is done), its index in *s; NULL: no pinned memory or
 * no event (the caller waits instead). Under the lock. */
static uint8_t *big_slot(dp_cuda_ctx_t *c, size_t bytes, int *s, const char *what) {
    int i = c->big_next;
    if (!c->big_done[i] && cudaEventCreateWithFlags(&c->big_done[i], cudaEventDisableTiming) != cudaSuccess) {
        c->big_done[i] = NULL;
        cudaGetLastError(); /* not sticky: the upload waits instead */
        return NULL;
    }
    if (slot_free(c, c->big_done[i], c->big_recorded[i], what)) return NULL;
    if (c->big_stage_bytes[i] < bytes) {
        if (c->big_stage[i]) cudaFreeHost(c->big_stage[i]);
        c->big_stage[i] = NULL;
        c->big_stage_bytes[i] = 0;
        void *pinned = NULL;
        if (cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError(); /* not sticky: the upload waits instead */
            return NULL;
        }
        c->big_stage[i] = pinned;
        c->big_stage_bytes[i] = bytes;
    }
    c->big_next = (i + 1) % DP_CUDA_BIG_STAGE_SLOTS;
    *s = i;
    return c->big_stage[i];
}

/* An upload that does not wait: host_src copied into the next staging
 * slot (after that slot's previous copy is done), queued from there, the
 * slot's event recorded after it. Up to DP_CUDA_STAGE_BYTES the fixed
 * slots, larger ones (a batch's bytes) the big slots. The caller may reuse
 * host_src at once, as backend.h promises. Without pinned memory or events,
 * the upload waits (upload_synced). While a step graph is captured: the
 * graph's constant (graph_cuda.c). */
int dp_cuda_upload_staged(dp_cuda_ctx_t *c, void *dst, const void *host_src, size_t bytes, const char *what) {
    if (c->capture) return dp_cuda_graph_constant(c, dst, host_src, bytes, what); /* graph_cuda.c */
    uint8_t *slot;
    cudaEvent_t event;
    int *recorded;
    if (bytes > DP_CUDA_STAGE_BYTES) {
        int s;
        if (!(slot = big_slot(c, bytes, &s, what))) return c->failed || upload_synced(c, dst, host_src, bytes, what);
        event = c->big_done[s];
        recorded = &c->big_recorded[s];
    } else {
        if (!stage_ready(c)) return upload_synced(c, dst, host_src, bytes, what);
        int s = c->stage_next;
        c->stage_next = (s + 1) % DP_CUDA_STAGE_SLOTS;
        if (slot_free(c, c->stage_done[s], c->stage_recorded[s], what)) return 1;
        slot = c->stage + (size_t)s * DP_CUDA_STAGE_BYTES;
        event = c->stage_done[s];
        recorded = &c->stage_recorded[s];
    }
    memcpy(slot, host_src, bytes);
    if (dp_cuda_check(c, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, c->stream), what) ||
        dp_cuda_check(c, cudaEventRecord(event, c->stream), what))
        return 1;
    *recorded = 1;
    return 0;
}

static void cuda_upload(void *ctx, void *dst, const void *host_src, size_t bytes) {
    dp_cuda_ctx_t *c = ctx;
    if (!bytes) return;
    dp_cuda_enter(c);
    dp_cuda_upload_staged(c, dst, host_src, bytes, "an upload");
    dp_cuda_leave(c);
}

/* host_dst = device src (bytes), after everything queued before it; 1 on
 * a failure. In an NCCL group the stream is waited for first (dp_cuda_wait:
 * a copy to pageable memory blocks until done, and would hang with the
 * stream behind a sum that never ends). Under the lock. */
static int download_synced(dp_cuda_ctx_t *c, void *host_dst, const void *src, size_t bytes, const char *what) {
    return c->failed || (c->peer && dp_cuda_check(c, dp_cuda_wait(c, NULL), what)) ||
           dp_cuda_check(c, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), what) ||
           dp_cuda_check(c, cudaStreamSynchronize(c->stream), what);
}

/* Waits for everything queued before it: the host reads the result. On a
 * failure the host buffer is filled with NaN bytes, so that no stale value
 * passes for a result. */
static void cuda_download(void *ctx, void *host_dst, const void *src, size_t bytes) {
    dp_cuda_ctx_t *c = ctx;
    if (!bytes) return;
    dp_cuda_enter(c);
    if (download_synced(c, host_dst, src, bytes, "a download")) memset(host_dst, 0xff, bytes);
    dp_cuda_leave(c);
}

static dp_status_t cuda_failure(void *ctx) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    dp_status_t status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    dp_cuda_ctx_t *c = ctx;
    if (!bytes || dst == src) return;
    dp_cuda_enter(c);
    dp_cuda_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "a copy");
    dp_cuda_leave(c);
}

/* --- Optimizer ----------------------------------------------------------------- */

/* The slot of `opt`, NULL if this GPU never updated it. Under the lock. */
static dp_cuda_optim_state_t *find_optim_state(dp_cuda_ctx_t *c, const dp_optimizer_t *opt) {
    for (int i = 0; i < DP_CUDA_MAX_OPTIMIZERS; i++)
        if (c->optims[i].optimizer == opt) return &c->optims[i];
    return NULL;
}

/* The device state of `opt` (created, or refreshed from the host after a
 * restore); NULL with the context failed when GPU memory runs out. */
static dp_cuda_optim_state_t *optim_state(dp_cuda_ctx_t *c, dp_optimizer_t *opt) {
    dp_cuda_optim_state_t *slot = NULL, *free_slot = NULL;
    for (int i = 0; i < DP_CUDA_MAX_OPTIMIZERS; i++) {
        if (c->optims[i].optimizer == opt) slot = &c->optims[i];
        else if (!c->optims[i].optimizer && !free_slot) free_slot = &c->optims[i];
    }
    size_t n = dp_optimizer_num_params(opt);
    uint64_t steps = dp_optimizer_steps(opt);
    int fresh = 0;
    if (!slot || slot->n != n || slot->kind != (int)dp_optimizer_kind(opt)) {
        if (slot) {
            for (int s = 0; s < 2; s++) dp_cuda_free_idle(c, slot->state[s], "freeing optimizer state");
            dp_cuda_free_idle(c, slot->args, "freeing optimizer state");
            memset(slot, 0, sizeof *slot);
            free_slot = slot;
        }
        if (!free_slot) {
            dp_cuda_fail(c, "more than %d optimizers on one GPU", DP_CUDA_MAX_OPTIMIZERS);
            return NULL;
        }
        slot = free_slot;
        slot->optimizer = opt;
        slot->n = n;
        slot->kind = (int)dp_optimizer_kind(opt);
        for (int s = 0; s < dp_optimizer_num_states(opt); s++)
            if (dp_cuda_check(c, dp_cuda_malloc(c, (void **)&slot->state[s], sizeof(float) * n),
                              "allocating optimizer state"))
                return NULL;
        if (dp_cuda_check(c, dp_cuda_malloc(c, &slot->args, sizeof(dp_cuda_optim_args_t) * DP_DECAY_GROUPS),
                          "allocating optimizer state"))
            return NULL;
        fresh = 1;
    }
    /* a new optimizer, or one whose step count was set (a restore): its host state is the truth */
    if (fresh || (steps != slot->steps && steps != slot->steps + 1)) {
        for (int s = 0; s < dp_optimizer_num_states(opt); s++)
            if (upload_synced(c, slot->state[s], dp_optimizer_state(opt, s, NULL), sizeof(float) * n,
                              "uploading optimizer state"))
                return NULL;
    }
    slot->steps = steps;
    return slot;
}

/* optim.c's scalars for the floats of one weight-decay group, computed on
 * the host as there (Adam's and AdamW's corrections, AdamW's decay factor,
 * in double). */
static dp_cuda_optim_args_t optim_args(dp_optimizer_t *opt, dp_decay_group_t group) {
    const dp_optim_config_t *cf = dp_optimizer_config(opt);
    const float wd = dp_optim_group_weight_decay(cf, group);
    dp_cuda_optim_args_t a = {.kind = (int)cf->kind, .nesterov = cf->nesterov, .neg_lr = -cf->lr,
                              .wd = wd, .momentum = cf->momentum, .eps = cf->eps,
                              .b1 = cf->beta1, .b2 = cf->beta2};
    if (cf->kind == DP_OPTIM_ADAM || cf->kind == DP_OPTIM_ADAMW) {
        double lr = dp_float_decimal(cf->lr), beta1 = dp_float_decimal(cf->beta1), beta2 = dp_float_decimal(cf->beta2);
        double t = (double)dp_optimizer_steps(opt);
        double correction1 = 1.0 - pow(beta1, t), correction2 = 1.0 - pow(beta2, t);
        a.one_minus_b1 = (float)(1.0 - beta1);
        a.one_minus_b2 = (float)(1.0 - beta2);
        a.neg_step_size = (float)-(lr / correction1);
        a.correction2_sqrt = (float)sqrt(correction2);
        if (cf->kind == DP_OPTIM_ADAMW) a.decay = (float)(1.0 - lr * dp_float_decimal(wd));
    }
    return a;
}

_Static_assert(sizeof(dp_cuda_optim_args_t) * DP_DECAY_GROUPS <= sizeof(((dp_cuda_optim_state_t *)0)->args_written),
               "args_written holds a dp_cuda_optim_args_t per weight-decay group");

int dp_cuda_optim_args_upload(dp_cuda_ctx_t *c, dp_optimizer_t *opt) {
    dp_cuda_optim_state_t *st = find_optim_state(c, opt);
    if (!st) return 0; /* never updated here: its first update writes them */
    dp_cuda_optim_args_t a[DP_DECAY_GROUPS]; /* a block per group, the kernel of a run reads its group's */
    memset(a, 0, sizeof a);                  /* padding too: compared by memcmp */
    for (int g = 0; g < DP_DECAY_GROUPS; g++) a[g] = optim_args(opt, (dp_decay_group_t)g);
    st->steps = dp_optimizer_steps(opt);
    if (st->args_known && memcmp(st->args_written, a, sizeof a) == 0) return 0;
    if (dp_cuda_upload_staged(c, st->args, a, sizeof a, "uploading an optimizer's scalars")) return 1;
    memcpy(st->args_written, a, sizeof a);
    st->args_known = 1;
    return 0;
}

/* The kernel reads its scalars from the slot's device block, written
 * before it from the host optimizer (or, in a captured step graph, before
 * each launch: graph_cuda.c). */
static void cuda_optimizer_update(void *ctx, dp_optimizer_t *optimizer, float *params, const float *grads,
                                  size_t start, size_t count) {
    dp_cuda_ctx_t *c = ctx;
    DP_ASSERT(start <= dp_optimizer_num_params(optimizer) && count <= dp_optimizer_num_params(optimizer) - start);
    DP_ASSERT((dp_optimizer_kind(optimizer) != DP_OPTIM_ADAM && dp_optimizer_kind(optimizer) != DP_OPTIM_ADAMW) ||
              dp_optimizer_steps(optimizer) >= 1);
    dp_cuda_enter(c);
    dp_cuda_optim_state_t *st = optim_state(c, optimizer);
    int failed = !st || (c->capture ? dp_cuda_graph_note_optimizer(c, optimizer) : dp_cuda_optim_args_upload(c, optimizer));
    while (!failed && count > 0) { /* run by run of one weight-decay group (one run without groups) */
        dp_decay_group_t group;
        const size_t run = dp_optimizer_decay_run(optimizer, start, count, &group);
        float *s0 = st->state[0] ? st->state[0] + start : NULL, *s1 = st->state[1] ? st->state[1] + start : NULL;
        const dp_cuda_optim_args_t *args = (const dp_cuda_optim_args_t *)st->args + group;
        failed = dp_cuda_check(c, dp_cuda_optim(c->stream, args, params + start, grads + start, s0, s1, run),
                               "an optimizer update");
        start += run, count -= run;
    }
    dp_cuda_leave(c);
}

/* The host buffers = the device state (a checkpoint is about to read them).
 * Waits for the updates queued before it. On a failure the host buffers
 * are filled with NaN bytes, as cuda_download does, and the failure is the
 * context's (the next op reports it). */
static void cuda_optimizer_download(void *ctx, dp_optimizer_t *optimizer) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    dp_cuda_optim_state_t *st = find_optim_state(c, optimizer);
    size_t bytes = st ? sizeof(float) * st->n : 0;
    for (int s = 0; st && bytes && s < dp_optimizer_num_states(optimizer); s++) {
        float *host = dp_optimizer_state(optimizer, s, NULL);
        if (download_synced(c, host, st->state[s], bytes, "downloading optimizer state")) memset(host, 0xff, bytes);
    }
    dp_cuda_leave(c);
}

/* The device state = the host buffers (a restore wrote them); done when it
 * returns (cuda_upload). */
static void cuda_optimizer_upload(void *ctx, dp_optimizer_t *optimizer) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    dp_cuda_optim_state_t *st = find_optim_state(c, optimizer);
    size_t bytes = st ? sizeof(float) * st->n : 0;
    for (int s = 0; st && bytes && s < dp_optimizer_num_states(optimizer); s++)
        if (upload_synced(c, st->state[s], dp_optimizer_state(optimizer, s, NULL), bytes, "uploading optimizer state"))
            break;
    if (st) st->steps = dp_optimizer_steps(optimizer);
    dp_cuda_leave(c);
}

/* Frees the slot of an optimizer about to be freed (after the work that
 * may still use it). */
static void cuda_optimizer_forget(void *ctx, const dp_optimizer_t *optimizer) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    dp_cuda_optim_state_t *st = find_optim_state(c, optimizer);
    if (st) {
        for (int s = 0; s < 2; s++)
            dp_cuda_free_idle(c, st->state[s], "freeing optimizer state");
        dp_cuda_free_idle(c, st->args, "freeing optimizer state");
        memset(st, 0, sizeof *st);
    }
    dp_cuda_leave(c);
}

/* --- Settings ------------------------------------------------------------------- */

/* The precision of products and convolutions (ops_cuda.c and conv_cuda.c
 * read c->precision for the convolutions described and the products run
 * from now on). cuBLAS's math mode: TF32 tensor-op math for tf32; pedantic
 * FP32 for fp32 (the same bits every run); the default math for bf16,
 * whose products (cublasGemmEx, bf16 operands, FP32 compute) may then take
 * the tensor cores. */
static dp_status_t cuda_set_precision(void *ctx, dp_precision_t precision) {
    dp_cuda_ctx_t *c = ctx;
    if ((unsigned)precision >= DP_PRECISION_COUNT)
        return dp_fail(DP_ERR_ARG, "%s: precision %d is not fp32, tf32 or bf16", c->name, (int)precision);
    static const cublasMath_t math[DP_PRECISION_COUNT] = {CUBLAS_PEDANTIC_MATH, CUBLAS_TF32_TENSOR_OP_MATH,
                                                          CUBLAS_DEFAULT_MATH};
    dp_cuda_enter(c);
    cublasStatus_t bs = cublasSetMathMode(c->cublas, math[precision]);
    if (bs == CUBLAS_STATUS_SUCCESS) c->precision = precision;
    dp_cuda_leave(c);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return dp_fail(DP_ERR_ARG, "%s: --precision %s: cuBLAS refused the math mode (status %d)", c->name,
                       dp_precision_name(precision), (int)bs);
    return DP_OK;
}

/* Channels-last activations (layout_cuda.h): the ops read c->channels_last
 * from now on. */
static dp_status_t cuda_set_channels_last(void *ctx, int on) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    c->channels_last = on != 0;
    dp_cuda_leave(c);
    return DP_OK;
}

/* --- Collectives ----------------------------------------------------------------- */

static void cuda_reduce_range(void *ctx, float *dst, const float *const *src, int k, size_t start, size_t count) {
    dp_cuda_ctx_t *c = ctx;
    if (count == 0) return;
    const float *shifted[256];
    DP_ASSERT(k >= 1 && k <= 256);
    for (int r = 0; r < k; r++) shifted[r] = src[r] + start;
    dp_cuda_enter(c);
    dp_cuda_check(c, dp_cuda_reduce(c->stream, dst + start, shifted, k, count), "a reduce");
    dp_cuda_leave(c);
}

static void cuda_broadcast_range(void *ctx, float *const *dst, int k, const float *src, size_t start, size_t count) {
    dp_cuda_ctx_t *c = ctx;
    if (count == 0) return;
    dp_cuda_enter(c);
    for (int e = 0; e < k; e++)
        if (dst[e] != src &&
            dp_cuda_check(c, cudaMemcpyAsync(dst[e] + start, src + start, sizeof(float) * count,
                                             cudaMemcpyDeviceToDevice, c->stream),
                          "a broadcast"))
            break;
    dp_cuda_leave(c);
}

/* --- Input ------------------------------------------------------------------------- */

static void cuda_input_from_bytes(void *ctx, float *x, const uint8_t *pixels, int n, int channels, size_t plane,
                                  const dp_normalize_t *norm) {
    dp_cuda_ctx_t *c = ctx;
    if (n <= 0) return;
    dp_cuda_pixel_map_t map = {.normalize = norm && norm->enabled, .channels = channels, .plane = plane};
    _Static_assert(sizeof map.mean == sizeof norm->mean && sizeof map.std == sizeof norm->std,
                   "dp_cuda_pixel_map_t holds DP_DATA_MAX_CHANNELS means and stds");
    if (map.normalize) {
        memcpy(map.mean, norm->mean, sizeof map.mean);
        memcpy(map.std, norm->std, sizeof map.std);
    }
    dp_cuda_enter(c);
    dp_cuda_check(c, dp_cuda_input_from_bytes(c->stream, pixels, (size_t)n * (size_t)channels * plane, &map, x),
                  "converting a batch's bytes");
    dp_cuda_leave(c);
}

static void cuda_paste_boxes(void *ctx, float *x, const float *src, int n, int channels, int height, int width,
                             const int32_t *boxes) {
    dp_cuda_ctx_t *c = ctx;
    if (n <= 0) return;
    dp_cuda_enter(c);
    if (!c->failed)
        dp_cuda_check(c, dp_cuda_paste_boxes(c->stream, x, src, n, channels, height, width, boxes),
                      src ? "CutMix's boxes" : "random erasing's boxes");
    dp_cuda_leave(c);
}

/* --- Metrics ---------------------------------------------------------------------- */

static void cuda_count_metrics(void *ctx, double *sums, const float *loss, double scale, const float *logits,
                               const int32_t *labels, int n, int k) {
    dp_cuda_ctx_t *c = ctx;
    DP_ASSERT(n >= 0 && k >= 1);
    dp_cuda_enter(c);
    if (!c->failed)
        dp_cuda_check(c, dp_cuda_count_metrics(c->stream, sums, loss, scale, logits, labels, n, k),
                      "counting a batch's loss and accuracy");
    dp_cuda_leave(c);
}

/* --- Gradient clipping ------------------------------------------------------------ */

/* The sum in the context's scratch (made at the first call), downloaded:
 * a host synchronisation. */
static dp_status_t cuda_sum_squares(void *ctx, const float *x, size_t count, double *out) {
    dp_cuda_ctx_t *c = ctx;
    *out = NAN;
    dp_cuda_enter(c);
    const char *what = "gradient clipping's sum of squares";
    if (!c->failed && !c->squares &&
        dp_cuda_check(c, dp_cuda_malloc(c, (void **)&c->squares, sizeof(double) * (DP_CUDA_SQUARES_BLOCKS + 1)),
                      what))
        c->squares = NULL;
    if (!c->failed) dp_cuda_check(c, dp_cuda_sum_squares(c->stream, x, count, c->squares), what);
    if (!c->failed) download_synced(c, out, c->squares + DP_CUDA_SQUARES_BLOCKS, sizeof *out, what);
    dp_status_t status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

static void cuda_ema_update(void *ctx, float *avg, const float *x, float decay, float one_minus_decay, size_t count) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    if (!c->failed)
        dp_cuda_check(c, dp_cuda_ema(c->stream, avg, x, decay, one_minus_decay, count), "the model's moving average");
    dp_cuda_leave(c);
}

static void cuda_scale_range(void *ctx, float *x, float factor, size_t count) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    if (!c->failed) dp_cuda_check(c, dp_cuda_scale(c->stream, x, factor, count), "scaling clipped gradients");
    dp_cuda_leave(c);
}

/* --- Opening ----------------------------------------------------------------------- */

dp_status_t dp_cuda_backend_open(int gpu, const dp_backend_t **out) {
    *out = NULL;
    const char *why = NULL;
    int count = dp_cuda_gpu_count(&why);
    if (count == 0) return dp_fail(DP_ERR_ARG, "cuda:%d: %s", gpu, why);
    if (gpu < 0 || gpu >= count)
        return dp_fail(DP_ERR_ARG, "cuda:%d: no such GPU (this machine has %d: cuda:0 to cuda:%d)", gpu, count,
                       count - 1);
    if (gpu >= DP_CUDA_MAX_GPUS)
        return dp_fail(DP_ERR_ARG, "cuda:%d: dptrain drives at most %d GPUs", gpu, DP_CUDA_MAX_GPUS);
    int algo_mode, epilogue, direct; /* the convolutions' settings, checked before anything runs */
    DP_TRY(dp_cuda_conv_settings(&algo_mode, &epilogue, &direct));
    int vmm;
    DP_TRY(dp_cuda_range_setting(&vmm));
    pthread_mutex_lock(&open_lock);
    dp_status_t status = DP_OK;
    dp_cuda_ctx_t *c = dp_cuda_ctx(gpu);
    if (!c) {
        c = dp_alloc_zeroed(1, sizeof *c, "CUDA context");
        if (!c) {
            pthread_mutex_unlock(&open_lock);
            return DP_ERR_NOMEM;
        }
        c->gpu = gpu;
        snprintf(c->name, sizeof c->name, "cuda:%d", gpu);
        /* recursive: an op holds it while its arena allocates through cuda_alloc */
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&c->lock, &attr);
        pthread_mutexattr_destroy(&attr);
        cudaError_t err = cudaSetDevice(gpu);
        if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
        cudnnStatus_t ds = CUDNN_STATUS_SUCCESS;
        if (err == cudaSuccess && (bs = cublasCreate(&c->cublas)) == CUBLAS_STATUS_SUCCESS) {
            cublasSetStream(c->cublas, c->stream);
            /* FP32 without TF32 or reduced-precision reductions: the same bits every run */
            cublasSetMathMode(c->cublas, CUBLAS_PEDANTIC_MATH);
            cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_HOST);
            if ((ds = cudnnCreate(&c->cudnn)) == CUDNN_STATUS_SUCCESS) cudnnSetStream(c->cudnn, c->stream);
        }
        if (err != cudaSuccess)
            status = dp_fail(DP_ERR_DEVICE, "cuda:%d: cannot start the GPU: %s", gpu, cudaGetErrorString(err));
        else if (bs != CUBLAS_STATUS_SUCCESS)
            status = dp_fail(DP_ERR_DEVICE, "cuda:%d: cuBLAS failed to start (status %d)", gpu, (int)bs);
        else if (ds != CUDNN_STATUS_SUCCESS)
            status = dp_fail(DP_ERR_DEVICE, "cuda:%d: cuDNN failed to start: %s", gpu, cudnnGetErrorString(ds));
        if (status != DP_OK) {
            free(c); /* the handles that did start are left to exit: the GPU is unusable anyway */
            pthread_mutex_unlock(&open_lock);
            return status;
        }
        c->table = (dp_backend_t){
            .name = "cuda",
            .ctx = c,
            .host_memory = 0,
            .alloc = cuda_alloc,
            .free = cuda_free,
            .zero = cuda_zero,
            .upload = cuda_upload,
            .download = cuda_download,
            .copy = cuda_copy,
            .failure = cuda_failure,
            .ops = dp_cuda_op_table(gpu),
            .optimizer_update = cuda_optimizer_update,
            .optimizer_download = cuda_optimizer_download,
            .optimizer_upload = cuda_optimizer_upload,
            .optimizer_forget = cuda_optimizer_forget,
            .sum_squares = cuda_sum_squares,
            .scale_range = cuda_scale_range,
            .ema_update = cuda_ema_update,
            .set_precision = cuda_set_precision,
            .set_channels_last = cuda_set_channels_last,
            .reduce_range = cuda_reduce_range,
            .broadcast_range = cuda_broadcast_range,
            .input_from_bytes = cuda_input_from_bytes,
            .paste_boxes = cuda_paste_boxes,
            .count_metrics = cuda_count_metrics,
            .memory_peak = cuda_memory_peak,
        };
        dp_cuda_peer_register(&c->table); /* peer_nccl.c: NCCL's members, when built with it */
        dp_cuda_timer_register(&c->table); /* timer_cuda.c: the profiler's events */
        dp_cuda_algo_register(&c->table);  /* algo_choices.c: the convolution algorithms a checkpoint keeps */
        dp_cuda_graph_register(&c->table); /* graph_cuda.c: steps captured as CUDA graphs */
        dp_cuda_range_register(&c->table, vmm); /* range_cuda.c: the step arena's range, CUDA's virtual memory */
        dp_cuda_ctx_publish(gpu, c);
    }
    pthread_mutex_unlock(&open_lock);
    *out = &c->table;
    return DP_OK;
}
