/* backend.h - what a device owns: its memory, the op table its tasks run,
 * the optimizer update over a range of a flat buffer, the local collective
 * primitives, and a batch's conversion to the model's input. A backend is
 * a table of functions (ggml's ggml_backend_i is the model); a device
 * (device.h) is a backend plus an in-order task queue. Data sets stay with
 * their batch source on the host (batch_source.h): a device receives each
 * batch's bytes and labels through upload.
 *
 * Code above the device never dereferences device memory: it allocates,
 * fills and copies through this table, and reads the scalars it needs by a
 * download into host memory (a step's loss and accuracy are summed on the
 * device by count_metrics and downloaded when asked for). The
 * CPU backend (dp_backend_cpu, src/backend/cpu/) is host memory and the
 * kernels of src/backend/cpu/ops_*.c; a CUDA backend is one more table in
 * src/backend/cuda/ (device pointers, a stream per device, cuBLAS/cuDNN or
 * own kernels), with no change to the code above it.
 *
 * Every function receives the table's ctx first. Pointers are device
 * pointers unless named host_*. The functions are synchronous with respect
 * to the calling thread: call them from the device's own tasks, or from the
 * caller's thread between waits (dp_device_wait), never while a task of the
 * device may be using the same memory.
 */
#ifndef DPTRAIN_BACKEND_H
#define DPTRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dptrain/data.h"
#include "dptrain/ops.h"
#include "dptrain/optim.h"

/* The doubles count_metrics adds a batch's figures to: the loss sum, the
 * correct (top-1) count, the top-5 count. */
#define DP_METRICS_SUMS 3

/* What matrix products and convolutions compute in (set_precision). */
typedef enum { DP_PRECISION_FP32, DP_PRECISION_TF32, DP_PRECISION_BF16, DP_PRECISION_COUNT } dp_precision_t;
/* "fp32", "tf32", "bf16"; and back (-1: none of them). Inline: the CUDA
 * module, which links nothing of the library, names them too. */
static inline const char *dp_precision_name(dp_precision_t precision) {
    static const char *const names[DP_PRECISION_COUNT] = {"fp32", "tf32", "bf16"};
    return (unsigned)precision < DP_PRECISION_COUNT ? names[precision] : "?";
}
static inline int dp_precision_from_name(const char *name) {
    for (int p = 0; name && p < DP_PRECISION_COUNT; p++)
        if (strcmp(name, dp_precision_name((dp_precision_t)p)) == 0) return p;
    return -1;
}

/* A group of devices that sum buffers among themselves (NCCL's
 * communicators), made by peer_group_new. */
/* The longest key of a convolution algorithm choice, with its NUL. */
#define DP_CONV_ALGO_KEY_MAX 384
/* One convolution algorithm choice of a GPU backend (cuDNN's): key names
 * the GPU, the library's version, the convolution (op, geometry, math)
 * and the direction, "GPU|cuDNN VERSION|conv x ... fp32|forward" (no
 * tab, no newline); algo is the library's number of the algorithm. */
typedef struct {
    char key[DP_CONV_ALGO_KEY_MAX];
    int algo;
} dp_conv_algo_t;
typedef struct dp_peer_group dp_peer_group_t;

struct dp_backend {
    const char *name; /* "cpu": device d of this backend is named "NAME:d" */
    void *ctx;        /* handed to every function below */
    int host_memory;  /* 1 when device pointers are host pointers (MPI may then send
                         from them directly); 0: the caller stages through host memory */

    /* --- Memory --- */
    /* bytes of device memory, 64-byte aligned; NULL with the error set
     * (DP_ERR_NOMEM) naming `what` when it runs out. */
    void *(*alloc)(void *ctx, size_t bytes, const char *what);
    void (*free)(void *ctx, void *ptr); /* NULL is a no-op */
    /* Optional, all three or none (NULL: a step arena chains blocks from
     * alloc): one address range that grows in place, so that a step arena
     * is one block however far a step goes, with no block's unused end and
     * every allocation adjacent to the next (tensor.h).
     * reserve: an address range of *bytes (the backend's size: as much as a
     *   step could use), none of it usable yet; NULL when none can be had
     *   (no error set: the arena chains blocks instead).
     * commit: makes the range's first `bytes` usable, of which the first
     *   `committed` already were (and keep their contents); returns the
     *   bytes usable now (`bytes` rounded up to the backend's granule), 0
     *   with the error set (DP_ERR_NOMEM) naming `what` when memory runs out.
     * release: gives back the range and everything committed in it. */
    void *(*reserve)(void *ctx, size_t *bytes);
    size_t (*commit)(void *ctx, void *base, size_t committed, size_t bytes, const char *what);
    void (*release)(void *ctx, void *base, size_t bytes);
    void (*zero)(void *ctx, void *dst, size_t bytes);
    void (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes);   /* host -> device */
    void (*download)(void *ctx, void *host_dst, const void *src, size_t bytes); /* device -> host */
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);         /* device -> device */
    /* The first failure this device met in work it ran out of sight of the
     * caller (a GPU's queued kernels, or an upload, download or copy, which
     * return nothing), with the error message naming the device and what
     * failed; DP_OK when none. Once failed, always failed (but for a
     * failure met while a step graph was captured: graph_end, below,
     * forgets it). dp_device_wait
     * and the trainer's reads ask it, so that a download's failure is
     * reported as itself, never as the bytes it left. NULL: nothing fails
     * out of sight (host memory; a kernel's failure fails its task). */
    dp_status_t (*failure)(void *ctx);

    /* --- Compute --- */
    /* (DP_OP_COUNT) the op table the device's tapes run (dp_tape_new_on);
     * ops see device pointers in their tensors and allocate from an arena
     * of this backend (dp_arena_new_on). */
    const dp_op_def_t *ops;
    /* params[start, start + count) -= the optimizer's step from grads (the
     * optimizer's state for that range included); dp_optimizer_step_range. */
    void (*optimizer_update)(void *ctx, dp_optimizer_t *optimizer, float *params, const float *grads,
                             size_t start, size_t count);
    /* Optimizer state kept in device memory (momentum, sums, Adam's
     * moments): NULL in a backend whose optimizer_update works on the host
     * optimizer's own buffers (the CPU's). Otherwise optimizer_update keeps
     * a device copy per host optimizer, made from the host buffers at its
     * first update; then
     *   optimizer_download: host buffers (dp_optimizer_state) = the device
     *     copy (what a checkpoint saves); no-op if never updated here;
     *   optimizer_upload: device copy = the host buffers (after a restore
     *     wrote them); no-op if never updated here (the first update takes
     *     them anyway);
     *   optimizer_forget: frees the device copy; call before
     *     dp_optimizer_free (a new optimizer may get the same address). */
    void (*optimizer_download)(void *ctx, dp_optimizer_t *optimizer);
    void (*optimizer_upload)(void *ctx, dp_optimizer_t *optimizer);
    void (*optimizer_forget)(void *ctx, const dp_optimizer_t *optimizer);

    /* Gradient clipping (optim.h dp_clip_*; the trainer's clip_grad_norm):
     *   sum_squares: *out = the sum of x[i] * x[i] over [0, count) (x in
     *     this backend's memory), each square and sum in double, in the
     *     backend's fixed order (the same bits every call on the same
     *     floats; another backend's order may differ in the last bits of
     *     the double, which the float norm made from it all but never
     *     shows); waits for the device (a host synchronisation on a GPU);
     *     a device failure is its status;
     *   scale_range: x[0, count) *= factor, one float multiply each
     *     (torch's Tensor.mul_). */
    dp_status_t (*sum_squares)(void *ctx, const float *x, size_t count, double *out);
    void (*scale_range)(void *ctx, float *x, float factor, size_t count);
    /* The model's moving average (optim.h dp_ema_update; the trainer's
     * model_ema): avg[0, count) = decay * avg + one_minus_decay * x, each
     * product and the sum rounded to float (no fused multiply-add). */
    void (*ema_update)(void *ctx, float *avg, const float *x, float decay, float one_minus_decay, size_t count);

    /* --- Local collectives (replicas of one process, possibly on several
     * devices of this backend) --- */
    /* dst[i] = src[0][i] + src[1][i] + ... + src[k-1][i] for i in [start,
     * start + count), summed in that order (device order: the same bits
     * whoever calls it); dst may be src[0]. The one place of "sum k replicas
     * in device order". */
    void (*reduce_range)(void *ctx, float *dst, const float *const *src, int k, size_t start,
                         size_t count);
    /* dst[e][start, start + count) = src[start, start + count) for every e
     * in [0, k) with dst[e] != src: "copy a range from one replica to the
     * others". */
    void (*broadcast_range)(void *ctx, float *const *dst, int k, const float *src, size_t start,
                            size_t count);

    /* --- Input --- */
    /* x (n, C, H, W) floats = the batch's bytes `pixels` (n, C, H, W, in
     * this backend's memory; plane = H x W) as the model's input:
     * dp_pixels_to_input's values (data.h: byte * (1/255), then normalised
     * when norm says so; norm NULL: not normalised), on the device. The
     * bytes and the labels reach the device through upload (from the
     * caller's host batch: a quarter of the floats' bytes); a step captured
     * as a graph converts from the same device buffer each time. */
    void (*input_from_bytes)(void *ctx, float *x, const uint8_t *pixels, int n, int channels, size_t plane,
                             const dp_normalize_t *norm);
    /* Boxes of a batch's input x (n, C, H, W), NCHW: for each example i
     * whose box boxes[4i .. 4i + 3] = {y1, y2, x1, x2} (int32, device
     * memory) is not empty (0 <= y1 < y2 <= H, 0 <= x1 < x2 <= W),
     * x[i, c, y1:y2, x1:x2] = src ? src[i, c, y1:y2, x1:x2] : 0 for every
     * channel c (src: (n, C, H, W) too); other values unchanged. CutMix's
     * paste (src: the partners' input) and random erasing (src NULL).
     * NULL: the backend has none (both are refused on its devices). */
    void (*paste_boxes)(void *ctx, float *x, const float *src, int n, int channels, int height, int width,
                        const int32_t *boxes);

    /* --- Metrics --- */
    /* A batch's figures added to sums (DP_METRICS_SUMS doubles of device
     * memory), on the device, with no host wait: sums[0] += (double)loss[0]
     * * scale (loss: 1 device float; NULL: sums[0] unchanged), rounded as
     * the host's `sum += (double)loss * scale` (a multiply, then an add: no
     * fused multiply-add); sums[1] += the number of rows i of logits (n, k)
     * whose first largest entry (best = 0, then best = j where row[j] >
     * row[best] for j = 1..k-1: a tie goes to the lower j; any comparison
     * with a NaN is false) is labels[i] (n int32, device memory);
     * sums[2] += the number of rows whose label is among its 5 largest
     * entries (top-5, torchvision's Acc@5): with v = row[label], the label's
     * rank is the number of j != label with row[j] > v, or row[j] == v and
     * j < label (ties go to the lower index, as for sums[1]), a hit when the
     * rank is below 5. Comparisons with a NaN are false: a NaN elsewhere in
     * the row never outranks the label; a NaN at the label is ranked last
     * (rank k - 1: a hit only when k <= 5), so a row the model cannot score
     * is not counted right. With k <= 5 every row is a hit. A label outside
     * 0..k-1 counts in neither sum. Top-5 is at least top-1 on every row but
     * one with a NaN first entry and label 0 (sums[1]'s scan keeps a NaN
     * first entry; sums[2] ranks it last). So the trainer reads a step's
     * loss and accuracy only when it wants them. */
    void (*count_metrics)(void *ctx, double *sums, const float *loss, double scale, const float *logits,
                          const int32_t *labels, int n, int k);
    /* The most memory held through alloc at once so far, in bytes (a GPU's
     * figure: devices sharing the GPU share it). NULL: not counted (host
     * memory: the CPU's backends). */
    size_t (*memory_peak)(void *ctx);

    /* --- Settings --- */
    /* The arithmetic of matrix products and convolutions (dp_precision_t):
     * FP32 (the default), TF32 (tensor-core math on FP32 operands, about
     * 10 mantissa bits in products) or bf16 (operands rounded to bf16, the
     * products summed in FP32, everything else FP32). NULL: the backend
     * has only FP32 (the CPU's): anything else is refused on its devices;
     * a backend may refuse a mode it lacks. Call before any work is
     * queued. */
    dp_status_t (*set_precision)(void *ctx, dp_precision_t precision);
    /* Winograd convolution F(3x3, 5x5) for 5x5, stride-1 convolutions with
     * at least 8 input and output channels (LeNet's conv2), forward and
     * backward (on: fewer multiplications, rounding errors about 5 times
     * those of im2col, still FP32; off: the default). For the whole
     * process. NULL: the backend has none (--winograd is refused). Call
     * before any work is queued. */
    dp_status_t (*set_winograd)(void *ctx, int on);
    /* Channels-last activations (on: 1): the backend may keep 4-D
     * activations (N, C, H, W) and their gradients in (N, H, W, C) order
     * inside its ops (a GPU's convolutions prefer it), marking them in
     * dp_tensor_t.layout; every op it cannot run so converts its input to
     * NCHW first, and what leaves the ops' table for the code above (a
     * flattened or pooled feature, the logits, the loss) is NCHW, as are
     * parameters, gradients and checkpoints. Off (0): the default. NULL:
     * the backend has only NCHW (the CPU's): on is refused on its devices.
     * Call before any work is queued. */
    dp_status_t (*set_channels_last)(void *ctx, int on);

    /* --- Peer collectives: devices on distinct GPUs sum among themselves
     * (NCCL), within a process and across processes. Optional: NULL in the
     * CPU tables and in a CUDA module built without NCCL. The backend knows
     * nothing of MPI: the caller moves the ids between processes. --- */
    /* id = this table's device identity (16 bytes, a GPU's UUID): two tables
     * with one id are on one device, which NCCL refuses in one group. */
    dp_status_t (*peer_id)(void *ctx, unsigned char id[16]);
    /* id = the unique id of a new group (128 bytes), made by one member of
     * the whole group and handed to every other (in every process). */
    dp_status_t (*peer_unique_id)(void *ctx, unsigned char id[128]);
    /* A group over tables[0..k) of this process (tables of this backend,
     * each on a device of its own), its members first_member, ...,
     * first_member + k - 1 of world_members in all; the other processes
     * join with the same unique id and their own members. Returns when every
     * member has joined; fails with one line (NCCL's own reason: two
     * members on one device, a failed start). A wait on a member's device
     * that has not ended after timeout_sec seconds (<= 0: no limit; the
     * communication timeout, comm.h) means a member (another process's)
     * stopped answering or a device is stuck: the group is aborted and
     * every member fails, naming the timeout. */
    dp_status_t (*peer_group_new)(const dp_backend_t *const *tables, int k, const unsigned char unique_id[128],
                                  int world_members, int first_member, double timeout_sec, dp_peer_group_t **out);
    /* bufs[i][start, start + count) (memory of tables[i]) = the sum of that
     * range over every member of the group, in place, in every buffer.
     * Ordered after the work queued so far on each member's device; the
     * work queued there after it returns may run beside it (the rest of
     * the backward pass): only peer_join orders work after the sums. The
     * host does not wait for the sum. Calls are serialised within the
     * group; every process must make the same calls in the same order
     * (NCCL deadlocks otherwise). */
    dp_status_t (*peer_allreduce)(dp_peer_group_t *group, float *const *bufs, size_t start, size_t count);
    /* bufs[i][start, start + count) = that range of the group's member 0
     * (the first member of the first process), in every buffer: a copy,
     * ordered and serialised as peer_allreduce (peer_join orders after it). */
    dp_status_t (*peer_broadcast)(dp_peer_group_t *group, float *const *bufs, size_t start, size_t count);
    /* The work queued on each member's device after it returns runs after
     * every peer_allreduce and peer_broadcast made before it (the host does
     * not wait). */
    dp_status_t (*peer_join)(dp_peer_group_t *group);
    /* After the work queued on the members; NULL is a no-op. */
    void (*peer_group_free)(dp_peer_group_t *group);

    /* --- Timing marks on the device's queue (profile.h: a GPU's events).
     * Optional: NULL where the device's work is done when its calls return
     * (the CPU's), so that the host clock times it. --- */
    /* A pool of `count` marks, made once; NULL with the error set. */
    void *(*timer_new)(void *ctx, int count);
    /* Mark i is reached when the work queued before it is done; no host
     * wait. A failure is the device's (failure). */
    void (*timer_mark)(void *ctx, void *timer, int i);
    /* Waits until marks [0, count) are reached (one wait), then ms[i] =
     * milliseconds from mark 0 to mark i. */
    dp_status_t (*timer_read)(void *ctx, void *timer, int count, double *ms);
    void (*timer_free)(void *ctx, void *timer); /* NULL is a no-op */

    /* --- Convolution algorithm choices, so that a resumed run computes
     * with the algorithms of the run it continues (checkpoint.h:
     * cuda.conv_algorithms). Optional: NULL where convolutions have no
     * such choice (the CPU's). The choices are the process's: every GPU of
     * the backend's module. --- */
    /* *out = the algorithm each convolution and direction ran with so far,
     * and the installed choices not run (yet), sorted by key; *count
     * entries (0 and NULL: none). *out is the caller's, to free(). */
    dp_status_t (*conv_algorithms)(void *ctx, dp_conv_algo_t **out, int *count);
    /* Installs choices[0..count): a later convolution whose op, geometry,
     * math and direction a choice names runs its algorithm, on any GPU and
     * library version, ahead of every other way of choosing (the
     * DPTRAIN_CUDNN_ALGO modes, the cache file). A choice the library does
     * not know or refuses for the convolution: one warning line on stderr
     * naming it, then the usual choice. Call before the first convolution:
     * one already planned keeps its algorithm. */
    dp_status_t (*conv_algorithms_install)(void *ctx, const dp_conv_algo_t *choices, int count);
    /* --- Step graphs: a step's device work recorded once and replayed
     * with one launch (a GPU's CUDA graphs). Optional: NULL where every
     * call runs as made (the CPU's). ---
     * graph_begin: from now on the work queued on the device is recorded,
     *   not run, until graph_end; call both from one thread, between waits.
     *   Meanwhile a call that would make the host wait for the device (a
     *   download, a wait, an allocation or a free) fails, and the device
     *   with it (the step would not be what was recorded). An upload made
     *   meanwhile is recorded with the value it has now (a constant of the
     *   graph); the values that change from step to step reach the graph
     *   through device memory written before each launch: the batch's
     *   bytes and labels (input_from_bytes), the optimizer's scalars (learning rate,
     *   step count: graph_launch writes them from the host optimizers whose
     *   updates were recorded), and the per-step seeds of the ops recorded
     *   (dropout's attr.dropout_seed).
     * graph_end: *graph = the recorded work, ready to launch, not run.
     *   On a failure (what the GPU's runtime or NCCL refused while
     *   recording, or at the end, and every later call of the capture that
     *   failed with it; or graph_begin's own), *graph is NULL, the status
     *   says why, and the device is left as before graph_begin: the
     *   failure is not kept (failure says DP_OK), so that the caller may
     *   run the step as made, where a failure that is not the capture's
     *   shows again. graph_begin on a device that failed before it fails
     *   with that failure, which stays.
     * graph_stale: 1 when device memory of this backend was freed since
     *   graph_end (the graph may point into it): free it, record anew.
     * graph_launch: queues the recorded work, no host wait; seeds: `pairs`
     *   pairs (a per-step seed's value at the capture, its value for this
     *   step): every seed a recorded op took is replaced by its value now
     *   (a seed without a pair fails, naming it).
     * graph_free: after the work queued; NULL is a no-op. */
    dp_status_t (*graph_begin)(void *ctx);
    dp_status_t (*graph_end)(void *ctx, void **graph);
    int (*graph_stale)(void *ctx, void *graph);
    dp_status_t (*graph_launch)(void *ctx, void *graph, const uint64_t *seeds, int pairs);
    void (*graph_free)(void *ctx, void *graph);
};

/* The CPU backend: host memory, the SIMD kernels, memcpy/memset. Static:
 * never freed. */
const dp_backend_t *dp_backend_cpu(void);

/* A backend by name (backend_registry.c): "cpu" or "staged" (index
 * ignored), "split" (table `index`, 0 to 63) or "cuda"
 * (GPU `index`: its memory, one stream, cuBLAS/cuDNN handles; opened on
 * first use and kept until exit, like the CPU table; the first "cuda"
 * loads the CUDA backend module, libdptrain_cuda.so, or $DPTRAIN_CUDA_MODULE).
 * Fails with one line: "this dptrain was built without CUDA" in a build
 * without the CUDA backend; "cuda:N: ..." naming what failed (no such GPU,
 * no driver, the module not found or not loadable: the paths tried or the
 * loader's reason) in one with it; "unknown backend" for any other name. */
dp_status_t dp_backend_by_name(const char *name, int index, const dp_backend_t **out);

/* The staged CPU backend ("staged", backend_cpu_staged.c), a test double
 * of a GPU: the CPU's kernels, but host_memory = 0 and its optimizer state
 * in memory of its own, so every layer above the seam must stage through
 * upload/download as it would for a GPU; it must give the CPU backend's
 * bits. For tests (--devices staged:0,...), not documented for users.
 * Static: never freed. */
const dp_backend_t *dp_backend_cpu_staged(void);

/* The split CPU backend ("split", backend_cpu_split.c), a test double of
 * devices on distinct GPUs: table `index` (0 to 63; NULL otherwise) is the
 * staged backend's with memory of its own: a function handed a pointer
 * that is not an allocation of its table aborts with one line (as a GPU's
 * table may not be handed another GPU's memory). A trainer on split:0,
 * split:1 (config.backends) must give the CPU backend's bits. For tests,
 * not documented for users. Static: never freed. */
const dp_backend_t *dp_backend_cpu_split(int index);

/* Whether this build has the CUDA backend (1) or not (0): built as its
 * module, which may still be missing at run time (dp_backend_by_name says). */
int dp_backend_cuda_built(void);

/* The number of GPUs the CUDA backend can use: 0 without a driver, without
 * a GPU, or in a build without CUDA; *why (when not NULL) then says which,
 * in a static string. Cheap where there is no GPU: the CUDA module is loaded
 * only when the machine shows an NVIDIA device (/dev/nvidia*, /dev/nvidiactl,
 * /proc/driver/nvidia/gpus/, /dev/dxg) and CUDA_VISIBLE_DEVICES does not hide
 * every GPU (empty, or a negative first index such as -1). */
int dp_backend_cuda_count(const char **why);

#endif
