/* cuda_context.h - the CUDA backend's per-GPU context and what every file
 * of the backend does with it (cuda_context.c): the lock, the sticky
 * failure, waits, counted device memory. The bottom of the module
 * libdptrain_cuda.so: kernels.h (the launchers of the *.cu kernel files)
 * beside it, ops_cuda.c, peer_nccl.c and timer_cuda.c above it,
 * backend_cuda.c (the backend table, cuda_parts.h) on top.
 *
 * DESIGN. One context per GPU: one stream, one cuBLAS and one cuDNN handle,
 * a mutex. Every backend function and every op takes the mutex, selects the
 * GPU, and queues its work on the stream; several dptrain devices on one GPU
 * (several worker threads) therefore queue onto the same in-order stream,
 * so whatever a thread queued before a host-side synchronisation (a device
 * wait) runs before what any thread queues after it: the seam's ordering
 * rules carry over without events. Downloads wait for their copy (the host
 * reads the memory at once); so do uploads of more than DP_CUDA_STAGE_BYTES
 * (parameters, optimizer state, an augmented shard: not per step, except
 * the last). A small upload is copied into a pinned staging slot under the
 * lock and queued from there: the caller may reuse its memory at once, the
 * slot is not written again before its copy's event is done (the slots'
 * state is the context's, under the lock). Device memory is
 * freed only after the stream's queued work (dp_cuda_free_idle). An op
 * holds the lock from start to end, except around SyncBatchNorm's host
 * hook (ops_cuda.c bn_sync), which waits at a barrier for every device,
 * those on this GPU included. A failure (a launch, a copy, a fault of
 * asynchronous work seen at a download) is kept in the context (`failed`,
 * `error`, the first one) and every later op fails with it.
 */
#ifndef DPTRAIN_CUDA_CONTEXT_H
#define DPTRAIN_CUDA_CONTEXT_H


#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "dptrain/backend.h"

#define DP_CUDA_MAX_GPUS 8
#define DP_CUDA_MAX_OPTIMIZERS 64
#define DP_CUDA_STAGE_SLOTS 8
#define DP_CUDA_STAGE_BYTES ((size_t)65536)
#define DP_CUDA_BIG_STAGE_SLOTS 3

typedef struct {
    const dp_optimizer_t *optimizer; /* the host optimizer, as a key */
    size_t n;
    int kind;         /* dp_optim_kind_t */
    uint64_t steps;   /* its step count at the last update */
    float *state[2];  /* (n) device copies of its state buffers */
    /* the update's scalars (learning rate, Adam's corrections) in device memory, which its kernel reads
     * (a captured step graph's too: graph_cuda.c), and what was last written there */
    void *args;       /* (DP_DECAY_GROUPS dp_cuda_optim_args_t, kernels.h: one per weight-decay group, optim.h) */
    unsigned char args_written[DP_DECAY_GROUPS * 64];
    int args_known;
} dp_cuda_optim_state_t;

typedef struct dp_cuda_context {
    int gpu;
    char name[16]; /* "cuda:N" */
    pthread_mutex_t lock;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    void *workspace; /* cuDNN's, grown on demand */
    size_t workspace_bytes;
    void *bf16_scratch; /* --precision bf16: one op's bf16 scratch (ops_cuda_common.h), grown on demand */
    size_t bf16_scratch_bytes;
    double *squares; /* gradient clipping's sum of squares: DP_CUDA_SQUARES_BLOCKS + 1 doubles; NULL until the first */
    /* uploads are copied into a slot of pinned host memory and queued from
     * there, without a wait: the slots in turn, an event recorded after
     * each slot's copy and waited for (only when not done yet) before the
     * slot is written again. Small ones (<= DP_CUDA_STAGE_BYTES: a batch's
     * labels, the loss seed, the optimizer's scalars) take the fixed slots
     * of `stage`; larger ones (a batch's bytes) the big slots, each grown
     * to the largest upload it took */
    uint8_t *stage;  /* (DP_CUDA_STAGE_SLOTS x DP_CUDA_STAGE_BYTES) pinned; NULL until the first */
    cudaEvent_t stage_done[DP_CUDA_STAGE_SLOTS];
    int stage_recorded[DP_CUDA_STAGE_SLOTS];
    int stage_next;
    int stage_refused; /* no pinned memory or events: every upload waits */
    uint8_t *big_stage[DP_CUDA_BIG_STAGE_SLOTS]; /* pinned, big_stage_bytes[i] each; NULL until used */
    size_t big_stage_bytes[DP_CUDA_BIG_STAGE_SLOTS];
    cudaEvent_t big_done[DP_CUDA_BIG_STAGE_SLOTS];
    int big_recorded[DP_CUDA_BIG_STAGE_SLOTS];
    int big_next;
    dp_cuda_optim_state_t optims[DP_CUDA_MAX_OPTIMIZERS];
    dp_precision_t precision; /* of cuBLAS products and cuDNN convolutions: FP32 (default), TF32 or bf16
                               * (precision.h: bf16 operands, FP32 sums) */
    int channels_last; /* set_channels_last: 4-D activations of the ops that have NHWC kernels in NHWC
                        * (layout_cuda.h); 0: NCHW everywhere */
    struct dp_cuda_conv_plans *conv_plans; /* ops_cuda.c's cuDNN convolution plans per shape; NULL until the first */
    struct dp_cuda_graph *capture; /* graph_cuda.c: the step graph being captured (NULL: none) */
    uint64_t *graph_seeds; /* graph_cuda.c: (64) the per-step seeds step graphs read, written before each launch */
    uint64_t frees;  /* device blocks freed so far: a step graph captured before a free may point into it */
    dp_peer_group_t *peer; /* peer_nccl.c: the NCCL group this GPU sums in (NULL: none); its waits watch the other members */
    cudaError_t (*peer_wait)(struct dp_cuda_context *c, cudaEvent_t event); /* peer_nccl.c's, set with `peer` */
    /* device memory held through dp_cuda_malloc (every allocation of the backend): the blocks
     * and their sizes, the bytes held now and the most held at once */
    struct dp_cuda_block *blocks;
    int block_count, block_cap;
    size_t mem_in_use, mem_peak;
    int failed;
    int failed_comm; /* the failure is the communication's (NCCL: a remote member stopped answering), not the GPU's */
    char error[256];
    dp_backend_t table;
} dp_cuda_ctx_t;

/* The context of GPU g (NULL until opened); dp_cuda_ctx_publish makes c
 * GPU g's (backend_cuda.c, once c is ready, under its open lock). */
dp_cuda_ctx_t *dp_cuda_ctx(int gpu);
void dp_cuda_ctx_publish(int gpu, dp_cuda_ctx_t *c);

/* Takes the lock and selects the GPU / releases the lock. */
void dp_cuda_enter(dp_cuda_ctx_t *c);
void dp_cuda_leave(dp_cuda_ctx_t *c);

/* Records a CUDA runtime failure (the first is kept); returns 0 on success. */
int dp_cuda_check(dp_cuda_ctx_t *c, cudaError_t err, const char *what);
/* The context failed: "NAME: " + the formatted message becomes its sticky
 * error, unless it failed already (the first failure is kept). Under the
 * lock. */
void dp_cuda_fail(dp_cuda_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sticky failure forgotten, and the runtime's last error of this
 * thread: only for a failure met while capturing a step graph, which the
 * capture alone made (graph_cuda.c). Under the lock. */
void dp_cuda_forget_failure(dp_cuda_ctx_t *c);
/* The sticky failure as a status (DP_OK when none), with its message. */
dp_status_t dp_cuda_status(dp_cuda_ctx_t *c);

/* Waits for `event` (NULL: everything queued on the context's stream).
 * In an NCCL group it polls instead (the group's peer_wait, peer_nccl.c): a
 * sum that waits for a member whose GPU failed never ends, and the wait
 * then aborts the group's communicators. Under the lock. */
cudaError_t dp_cuda_wait(dp_cuda_ctx_t *c, cudaEvent_t event);

/* cudaMalloc of `bytes` (at least 1), counted in the context's memory
 * figures; cudaErrorMemoryAllocation also when the count cannot grow.
 * Under the lock. */
cudaError_t dp_cuda_malloc(dp_cuda_ctx_t *c, void **ptr, size_t bytes);
/* "cuda:N: out of GPU memory: WHAT needs B bytes (... held, peak ...): use a
 * smaller --batch-size, or more devices" as the failure (dp_fail), after
 * clearing the runtime's last error; returns DP_ERR_NOMEM. Under the lock. */
dp_status_t dp_cuda_out_of_memory(dp_cuda_ctx_t *c, const char *what, size_t bytes);

/* cudaFree(ptr) once the stream's queued work is done (cudaFree itself only
 * "may" synchronise: cuda_runtime_api.h); NULL is a no-op. Under the lock. */
void dp_cuda_free_idle(dp_cuda_ctx_t *c, void *ptr, const char *what);

/* backend_cuda.c: an upload without a host wait (a pinned staging slot;
 * while a step graph is captured, the graph's constant: graph_cuda.c); 1 on
 * a failure (the context's). Under the lock. */
int dp_cuda_upload_staged(dp_cuda_ctx_t *c, void *dst, const void *host_src, size_t bytes, const char *what);
/* backend_cuda.c: the device argument block of `opt`'s update = its
 * scalars now (written only when they changed); its slot's step count =
 * the optimizer's. Under the lock; 1 on a failure. */
int dp_cuda_optim_args_upload(dp_cuda_ctx_t *c, dp_optimizer_t *opt);

#endif
