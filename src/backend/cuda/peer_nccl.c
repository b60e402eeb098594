/* peer_nccl.c - the CUDA backend's peer collectives (backend.h: peer_id,
 * peer_unique_id, peer_group_new, peer_allreduce, peer_join,
 * peer_group_free): devices
 * on distinct GPUs sum their gradients with NCCL, in one process and across
 * processes. Built with NCCL when CMake found it beside the toolkit
 * (DPTRAIN_HAVE_NCCL; the CUDA emulator's module has its own NCCL,
 * tests/cuda_emulator/emu_nccl.c); without it the members stay NULL and
 * the trainer sums through host memory.
 *
 * DESIGN. A group holds one NCCL communicator per member GPU of this
 * process (made in one ncclGroupStart/End, as NCCL asks of one thread
 * driving several GPUs), and per member a stream of its own with three
 * events. peer_allreduce runs under the group's mutex (calls from several
 * device threads are serialised: NCCL needs every member to issue the same
 * collectives in the same order, and the order within a process is the
 * caller's, not a race's) and, inside it, holds every member context's
 * lock (cuda_context.h: in index order, after the group's mutex; nothing
 * takes them the other way round) while it
 *   records `produced` on each context's stream (after the gradients'
 *   producers) and makes the NCCL stream wait for it;
 *   queues one ncclAllReduce per member between one ncclGroupStart/End
 *   (peer_broadcast: one ncclBroadcast from member 0, the same way);
 *   records `summed` on each NCCL stream.
 * The context's stream does not wait for the sum there: the backward pass
 * queued after it runs beside it (--overlap). peer_join (same locks) makes
 * each context's stream wait for the last `summed` (NCCL's stream is in
 * order: every sum queued before), so the optimizer update queued next runs
 * after all of them. Holding the contexts' locks keeps another thread from
 * queuing work on a member's stream in between. Nothing waits on the host. A failure is
 * returned, and kept in every member's context (the next op reports it).
 *
 * In a step graph (graph_cuda.c: every member's context capturing; a mix
 * fails) the same calls are captured: `produced` forks NCCL's stream into
 * its GPU's capture, each member's sum becomes a node of its GPU's graph
 * (NCCL: a captured collective is replayed by every member's graph
 * together), and the join uses `graph_summed`, an event only captures
 * record, so that `summed` keeps its last real record for the failure
 * polling below (an event last recorded in a capture cannot be queried).
 * Within a graph the failure polling sees the other GPUs' sticky errors
 * through those older records, and the timeout covers the rest.
 *
 * A member that fails after its sum was queued (its GPU faults: the
 * failure shows later, asynchronously) leaves the other members' NCCL
 * kernels waiting for it for ever, and every wait behind them with them.
 * So a member's waits poll (peer_wait: its stream or event, and
 * meanwhile the other members' GPUs through their `summed` events, and
 * NCCL's asynchronous error of every communicator, which tells of a
 * remote rank) and, once one has failed, abort every communicator of the
 * group (ncclCommAbort ends the kernels that wait); every member then
 * fails with that reason. The abort is under `abort_lock` (a leaf: taken
 * under one context's lock, it takes nothing), while no NCCL call can be
 * under way: peer_allreduce holds every member's lock, the waiter one.
 * peer_group_free takes the members out of the group first (under their
 * locks: after every wait in progress), then destroys the communicators
 * (local: NCCL since 2.18 frees a process's communicators of one clique
 * at the last one's ncclCommDestroy, which waits for no other rank), or
 * aborts them when a member failed (destroying, or waiting for NCCL's
 * streams, would wait for kernels that may never end).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_context.h"
#include "cuda_parts.h"

#ifdef DPTRAIN_HAVE_NCCL
#include <nccl.h>

struct dp_peer_group {
    int k;
    pthread_mutex_t lock;
    dp_cuda_ctx_t *ctx[DP_CUDA_MAX_GPUS];
    ncclComm_t comm[DP_CUDA_MAX_GPUS];
    cudaStream_t stream[DP_CUDA_MAX_GPUS]; /* NCCL's, one per member */
    cudaEvent_t produced[DP_CUDA_MAX_GPUS], summed[DP_CUDA_MAX_GPUS];
    cudaEvent_t graph_summed[DP_CUDA_MAX_GPUS]; /* `summed` inside a step graph's capture */
    int graph_sums;                             /* sums queued in the capture under way, not yet joined */
    double timeout_sec;         /* a wait that has not ended after it aborts the group (<= 0: never) */
    pthread_mutex_t abort_lock; /* guards what follows */
    int aborted;                /* the communicators were aborted (and are NULL) */
    char abort_message[200];    /* why */
    int abort_comm;             /* why is the communication's (a timeout, NCCL's error), not a member GPU's */
};

_Static_assert(NCCL_UNIQUE_ID_BYTES == 128, "backend.h's peer_unique_id is 128 bytes");

/* message = "NCCL: WHAT failed: NCCL's reason" */
static void nccl_message(char *message, size_t size, ncclResult_t r, const char *what) {
    const char *last = ncclGetLastError(NULL);
    snprintf(message, size, "NCCL: %s failed: %s%s%s", what, ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
}

static dp_status_t nccl_fail(ncclResult_t r, const char *what) {
    char message[256];
    nccl_message(message, sizeof message, r, what);
    return dp_fail(DP_ERR_DEVICE, "%s", message);
}

static dp_status_t cuda_peer_id(void *ctx, unsigned char id[16]) {
    dp_cuda_ctx_t *c = ctx;
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    dp_cuda_enter(c);
    cudaError_t err = cudaGetDeviceProperties(&prop, c->gpu);
    dp_cuda_leave(c);
    if (err != cudaSuccess) return dp_fail(DP_ERR_DEVICE, "%s: reading its UUID failed: %s", c->name, cudaGetErrorString(err));
    _Static_assert(sizeof prop.uuid == 16, "a GPU's UUID is 16 bytes");
    memcpy(id, &prop.uuid, 16);
    return DP_OK;
}

static dp_status_t cuda_peer_unique_id(void *ctx, unsigned char id[128]) {
    (void)ctx;
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId");
    memcpy(id, u.internal, sizeof u.internal);
    return DP_OK;
}

/* --- Failures: a member's waits watch the others ----------------------------- */

/* Why the group must be aborted ("" while nothing failed): a member's GPU
 * other than `self`'s failed (its sticky error, seen through its `summed`
 * event: a query may name another GPU's event), or NCCL reports an
 * asynchronous error (a remote rank). Under abort_lock. */
static int member_failure(dp_peer_group_t *g, int self, char *why, size_t size) {
    *why = 0;
    int comm = 0;
    for (int i = 0; i < g->k && !*why; i++) {
        cudaError_t err = i == self ? cudaSuccess : cudaEventQuery(g->summed[i]);
        if (err != cudaSuccess) (void)cudaGetLastError(); /* another GPU's error, or "not ready" */
        ncclResult_t async = ncclSuccess;
        if (err != cudaSuccess && err != cudaErrorNotReady)
            snprintf(why, size, "%s failed: %s", g->ctx[i]->name, cudaGetErrorString(err));
        else if (ncclCommGetAsyncError(g->comm[i], &async) == ncclSuccess && async != ncclSuccess &&
                 async != ncclInProgress)
            snprintf(why, size, "%s: NCCL: %s", g->ctx[i]->name, ncclGetErrorString(async)), comm = 1;
    }
    return comm;
}

/* Every communicator aborted, once (the kernels that wait end). Under abort_lock. */
static void abort_group(dp_peer_group_t *g, const char *why, int comm) {
    if (g->aborted) return;
    g->abort_comm = comm;
    for (int i = 0; i < g->k; i++)
        if (g->comm[i]) ncclCommAbort(g->comm[i]);
    memset(g->comm, 0, sizeof g->comm);
    snprintf(g->abort_message, sizeof g->abort_message, "NCCL: the sums were aborted: %s", why);
    g->aborted = 1;
}

static double monotonic_sec(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static cudaError_t peer_wait(dp_cuda_ctx_t *c, cudaEvent_t event) {
    dp_peer_group_t *g = c->peer;
    int self = 0;
    while (g->ctx[self] != c) self++;
    double start = monotonic_sec();
    for (long polls = 0;; polls++) {
        cudaError_t err = event ? cudaEventQuery(event) : cudaStreamQuery(c->stream);
        pthread_mutex_lock(&g->abort_lock);
        if (err != cudaErrorNotReady) {
            int aborted = g->aborted;
            if (aborted && !c->failed) c->failed_comm = g->abort_comm;
            if (aborted) dp_cuda_fail(c, "%s", g->abort_message); /* the first failure is kept */
            pthread_mutex_unlock(&g->abort_lock);
            return err == cudaSuccess && aborted ? cudaErrorUnknown : err; /* the failure is c's already */
        }
        (void)cudaGetLastError(); /* "not ready" is an answer, not an error */
        char why[168];
        if (!g->aborted) {
            int comm = member_failure(g, self, why, sizeof why);
            /* nothing failed, and yet no end: a remote member stopped (a rank that stopped answering is
             * in no MPI call here for the MPI watchdog to see), or a GPU is stuck */
            if (!*why && g->timeout_sec > 0 && (polls & 63) == 63 && monotonic_sec() - start > g->timeout_sec)
                snprintf(why, sizeof why, "%s waited %.0f s for its work and the group's sums (--comm-timeout %g): "
                         "a member (another rank?) stopped answering, or a GPU is stuck", c->name,
                         monotonic_sec() - start, g->timeout_sec), comm = 1;
            if (*why) abort_group(g, why, comm);
        }
        pthread_mutex_unlock(&g->abort_lock);
        if (polls < 64) {
            sched_yield();
        } else {
            struct timespec pause = {0, 100000}; /* 0.1 ms */
            nanosleep(&pause, NULL);
        }
    }
}

static void cuda_peer_group_free(dp_peer_group_t *g) {
    if (!g) return;
    int failed = 0;
    for (int i = 0; i < g->k; i++) { /* out of the group: after every wait in progress */
        dp_cuda_ctx_t *c = g->ctx[i];
        if (!c) continue;
        dp_cuda_enter(c);
        if (c->peer == g) c->peer = NULL;
        failed |= c->failed;
        dp_cuda_leave(c);
    }
    pthread_mutex_lock(&g->abort_lock);
    failed |= g->aborted;
    if (failed) abort_group(g, "a member failed", 0);
    pthread_mutex_unlock(&g->abort_lock);
    for (int i = 0; i < g->k; i++) {
        if (!g->comm[i]) continue; /* aborted, or never made */
        cudaSetDevice(g->ctx[i]->gpu);
        cudaStreamSynchronize(g->stream[i]);
        ncclCommDestroy(g->comm[i]);
    }
    for (int i = 0; i < g->k; i++) {
        dp_cuda_ctx_t *c = g->ctx[i];
        if (!c) continue;
        dp_cuda_enter(c);
        if (g->produced[i]) cudaEventDestroy(g->produced[i]);
        if (g->summed[i]) cudaEventDestroy(g->summed[i]);
        if (g->graph_summed[i]) cudaEventDestroy(g->graph_summed[i]);
        if (g->stream[i]) cudaStreamDestroy(g->stream[i]); /* work still queued ends before its resources go */
        dp_cuda_leave(c);
    }
    pthread_mutex_destroy(&g->abort_lock);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static dp_status_t cuda_peer_group_new(const dp_backend_t *const *tables, int k, const unsigned char unique_id[128],
                                       int world_members, int first_member, double timeout_sec,
                                       dp_peer_group_t **out);

/* The end of peer_allreduce and peer_join (which hold the group's mutex and
 * every member's lock): a failure made sticky in every member (its next op
 * fails with it), the locks let go. */
static dp_status_t group_leave(dp_peer_group_t *g, int failed, const char *message) {
    /* the communication's failure (an abort for a silent member), else the GPUs' */
    pthread_mutex_lock(&g->abort_lock);
    int comm = g->aborted && g->abort_comm;
    pthread_mutex_unlock(&g->abort_lock);
    for (int i = 0; i < g->k; i++) comm |= g->ctx[i]->failed && g->ctx[i]->failed_comm;
    for (int i = 0; failed && i < g->k; i++) {
        if (!g->ctx[i]->failed) g->ctx[i]->failed_comm = comm;
        dp_cuda_fail(g->ctx[i], "%s", message);
    }
    for (int i = g->k - 1; i >= 0; i--) dp_cuda_leave(g->ctx[i]);
    pthread_mutex_unlock(&g->lock);
    return failed ? dp_fail(comm ? DP_ERR_COMM : DP_ERR_DEVICE, "%s", message) : DP_OK;
}

/* 1 when every member's context is capturing a step graph (graph_cuda.c),
 * 0 when none is, -1 (with a message) for a mix: NCCL takes a collective
 * captured by all its members or by none. Under every member's lock. */
static int group_capturing(const dp_peer_group_t *g, char *message, size_t size) {
    int capturing = 0;
    for (int i = 0; i < g->k; i++) capturing += g->ctx[i]->capture != NULL;
    if (capturing == 0 || capturing == g->k) return capturing > 0;
    snprintf(message, size, "NCCL: %d of the group's %d GPUs are capturing a step graph (all or none may)", capturing,
             g->k);
    return -1;
}

/* An all-reduce (broadcast 0) or member 0's range to every member
 * (broadcast 1) of bufs[i][start, start + count), queued as the DESIGN says. */
static dp_status_t collective(dp_peer_group_t *g, float *const *bufs, size_t start, size_t count, int broadcast) {
    if (count == 0) return DP_OK;
    char message[256] = "";
    int failed = 0;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->k; i++) dp_cuda_enter(g->ctx[i]);
    pthread_mutex_lock(&g->abort_lock);
    if ((failed = g->aborted)) snprintf(message, sizeof message, "%s", g->abort_message);
    pthread_mutex_unlock(&g->abort_lock);
    int capturing = !failed ? group_capturing(g, message, sizeof message) : 0;
    failed |= capturing < 0;
    for (int i = 0; i < g->k && !failed; i++) {
        dp_cuda_ctx_t *c = g->ctx[i];
        cudaSetDevice(c->gpu);
        failed = c->failed ||
                 dp_cuda_check(c, cudaEventRecord(g->produced[i], c->stream), "NCCL: ordering after the gradients") ||
                 dp_cuda_check(c, cudaStreamWaitEvent(g->stream[i], g->produced[i], 0), "NCCL: ordering after the gradients");
        if (failed) snprintf(message, sizeof message, "%s", c->error);
    }
    if (!failed) {
        ncclResult_t r = ncclGroupStart(), queued = ncclSuccess;
        for (int i = 0; i < g->k && r == ncclSuccess && queued == ncclSuccess; i++) {
            cudaSetDevice(g->ctx[i]->gpu);
            float *range = bufs[i] + start;
            queued = broadcast ? ncclBroadcast(range, range, count, ncclFloat, 0, g->comm[i], g->stream[i])
                               : ncclAllReduce(range, range, count, ncclFloat, ncclSum, g->comm[i], g->stream[i]);
        }
        ncclResult_t ended = r == ncclSuccess ? ncclGroupEnd() : r;
        const char *call = broadcast ? "ncclBroadcast" : "ncclAllReduce";
        char what[64];
        snprintf(what, sizeof what, "%s (ncclGroupEnd)", call);
        if ((failed = queued != ncclSuccess))
            nccl_message(message, sizeof message, queued, call);
        else if ((failed = ended != ncclSuccess))
            nccl_message(message, sizeof message, ended, what);
    }
    for (int i = 0; i < g->k && !failed; i++) { /* the sums so far: what peer_join orders after */
        dp_cuda_ctx_t *c = g->ctx[i];
        cudaSetDevice(c->gpu);
        failed = dp_cuda_check(c, cudaEventRecord(capturing ? g->graph_summed[i] : g->summed[i], g->stream[i]),
                               "NCCL: ordering the update after the sum");
        if (failed) snprintf(message, sizeof message, "%s", c->error);
    }
    if (!failed && capturing) g->graph_sums++;
    return group_leave(g, failed, message);
}

static dp_status_t cuda_peer_allreduce(dp_peer_group_t *g, float *const *bufs, size_t start, size_t count) {
    return collective(g, bufs, start, count, 0);
}

static dp_status_t cuda_peer_broadcast(dp_peer_group_t *g, float *const *bufs, size_t start, size_t count) {
    return collective(g, bufs, start, count, 1);
}

/* Every member's stream waits (on the GPU) for the sums queued so far: the
 * `summed` event of NCCL's in-order stream, recorded after the last one. */
static dp_status_t cuda_peer_join(dp_peer_group_t *g) {
    char message[256] = "";
    int failed = 0;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->k; i++) dp_cuda_enter(g->ctx[i]);
    int capturing = group_capturing(g, message, sizeof message);
    failed = capturing < 0;
    /* in a capture, only its own sums (an event of before it may not be waited on there) */
    int joins = !capturing || g->graph_sums;
    for (int i = 0; i < g->k && !failed && joins; i++) {
        dp_cuda_ctx_t *c = g->ctx[i];
        cudaSetDevice(c->gpu);
        cudaEvent_t sums = capturing ? g->graph_summed[i] : g->summed[i];
        failed = c->failed ||
                 dp_cuda_check(c, cudaStreamWaitEvent(c->stream, sums, 0), "NCCL: ordering the update after the sum");
        if (failed) snprintf(message, sizeof message, "%s", c->error);
    }
    g->graph_sums = 0; /* also outside a capture: a capture that failed before its join left its count */
    return group_leave(g, failed, message);
}

static dp_status_t cuda_peer_group_new(const dp_backend_t *const *tables, int k, const unsigned char unique_id[128],
                                       int world_members, int first_member, double timeout_sec,
                                       dp_peer_group_t **out) {
    *out = NULL;
    if (k < 1 || k > DP_CUDA_MAX_GPUS)
        return dp_fail(DP_ERR_ARG, "NCCL: a group of %d GPUs in one process (1 to %d)", k, DP_CUDA_MAX_GPUS);
    if (first_member < 0 || first_member + k > world_members)
        return dp_fail(DP_ERR_ARG, "NCCL: members %d to %d of %d", first_member, first_member + k - 1, world_members);
    for (int i = 0; i < k; i++)
        if (!tables[i] || tables[i]->peer_group_new != cuda_peer_group_new)
            return dp_fail(DP_ERR_ARG, "NCCL: device %d is not a GPU of this CUDA backend", i);
    dp_peer_group_t *g = dp_alloc_zeroed(1, sizeof *g, "NCCL group");
    if (!g) return DP_ERR_NOMEM;
    pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_init(&g->abort_lock, NULL);
    g->k = k;
    g->timeout_sec = timeout_sec;
    dp_status_t status = DP_OK;
    for (int i = 0; i < k && status == DP_OK; i++) {
        dp_cuda_ctx_t *c = tables[i]->ctx;
        g->ctx[i] = c;
        dp_cuda_enter(c);
        cudaError_t err = cudaStreamCreateWithFlags(&g->stream[i], cudaStreamNonBlocking);
        if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g->produced[i], cudaEventDisableTiming);
        if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g->summed[i], cudaEventDisableTiming);
        if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g->graph_summed[i], cudaEventDisableTiming);
        dp_cuda_leave(c);
        if (err != cudaSuccess)
            status = dp_fail(DP_ERR_DEVICE, "%s: NCCL's stream: %s", c->name, cudaGetErrorString(err));
    }
    if (status == DP_OK) {
        ncclUniqueId id;
        memcpy(id.internal, unique_id, sizeof id.internal);
        ncclResult_t r = ncclGroupStart(), init = ncclSuccess;
        for (int i = 0; i < k && r == ncclSuccess && init == ncclSuccess; i++) {
            cudaSetDevice(g->ctx[i]->gpu);
            init = ncclCommInitRank(&g->comm[i], world_members, id, first_member + i);
        }
        ncclResult_t ended = r == ncclSuccess ? ncclGroupEnd() : r;
        if (init != ncclSuccess) status = nccl_fail(init, "ncclCommInitRank");
        else if (ended != ncclSuccess) status = nccl_fail(ended, "ncclCommInitRank (ncclGroupEnd)");
        if (status != DP_OK) memset(g->comm, 0, sizeof g->comm); /* none started */
    }
    if (status != DP_OK) {
        cuda_peer_group_free(g);
        return status;
    }
    for (int i = 0; i < k; i++) { /* its waits watch the other members from now on */
        dp_cuda_enter(g->ctx[i]);
        g->ctx[i]->peer = g;
        g->ctx[i]->peer_wait = peer_wait;
        dp_cuda_leave(g->ctx[i]);
    }
    *out = g;
    return DP_OK;
}

void dp_cuda_peer_register(dp_backend_t *table) {
    table->peer_id = cuda_peer_id;
    table->peer_unique_id = cuda_peer_unique_id;
    table->peer_group_new = cuda_peer_group_new;
    table->peer_allreduce = cuda_peer_allreduce;
    table->peer_broadcast = cuda_peer_broadcast;
    table->peer_join = cuda_peer_join;
    table->peer_group_free = cuda_peer_group_free;
}

#else /* built without NCCL: the members stay NULL (host sums) */

void dp_cuda_peer_register(dp_backend_t *table) { (void)table; }

#endif
