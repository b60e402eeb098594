/* emu_graph.c - stream capture and CUDA graphs in the CUDA emulator
 * (cuda_emulator.h): cudaStreamBeginCapture / cudaStreamEndCapture /
 * cudaStreamIsCapturing, cudaGraphInstantiate(WithFlags), cudaGraphLaunch,
 * cudaGraphExecDestroy, cudaGraphDestroy.
 *
 * While a stream captures, the work queued on it is recorded instead of
 * run: a kernel launch as its kernel and a copy of its argument closure
 * (emu_launch.c), a copy or a memset as the call, a cuBLAS or cuDNN call
 * as a replay function with a copy of its arguments (descriptors and
 * scalars by value; device pointers are kept, as a GPU's graph keeps
 * them). An event recorded on a capturing stream becomes part of the
 * capture: querying or synchronising it fails as on a GPU
 * (cudaErrorCapturedEvent), and another stream of the GPU that waits on it
 * joins the capture (a fork: its work from then on is recorded in the same
 * graph, NCCL's sums included, emu_nccl.c); the capture ends on the stream
 * it began on, and only once the origin waited on an event recorded on
 * each forked stream after its last work (else
 * cudaErrorStreamCaptureUnjoined, as on a GPU); a capturing stream may
 * not wait on an event recorded outside the capture
 * (cudaErrorStreamCaptureIsolation, the capture invalidated). An optimizer kernel
 * captured before the origin joined an NCCL sum captured on another stream
 * aborts with one line (in a GPU's graph the two would run side by side).
 * cudaGraphLaunch runs the recorded work in order, on the launching
 * thread, as if queued then.
 *
 * What a GPU refuses during a capture fails here as there, and the
 * capture is invalidated (cudaStreamEndCapture then fails with
 * cudaErrorStreamCaptureInvalidated and no graph): while a capture not
 * made in cudaStreamCaptureModeRelaxed is active on a GPU, a host
 * synchronisation with that GPU (cudaStreamSynchronize, cudaStreamQuery,
 * cudaEventSynchronize, cudaEventQuery, cudaDeviceSynchronize, a copy to
 * host memory that is not pinned, which waits), cudaMalloc, cudaFree,
 * cudaHostAlloc and cudaFreeHost return cudaErrorStreamCaptureUnsupported.
 * A captured copy from or to host memory must be pinned memory (on a GPU
 * a graph's copy reads the host memory when it runs, possibly long after
 * the caller's buffer is gone): anything else aborts with one line. Also
 * refused as on a GPU: a capture on the legacy (NULL) stream, a second
 * capture of a capturing stream, its end from another thread (not
 * relaxed), a graph launched on a capturing stream or on another GPU's
 * stream.
 *
 * Refusals on purpose, for the tests of what a caller does when a capture
 * fails (DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=WHAT[:N][@GPU], read once; N: only
 * the N-th capture begun on a GPU, from 1, else every one; @GPU: only on
 * that GPU, as the process numbers them, else on every GPU):
 *   end          cudaStreamEndCapture fails with
 *                cudaErrorStreamCaptureInvalidated (what was captured is
 *                dropped), as after a call refused in it;
 *   instantiate  cudaGraphInstantiate of that capture's graph fails with
 *                cudaErrorNotSupported;
 *   call         the capture's first captured call (a kernel, a copy, a
 *                cuBLAS, cuDNN or NCCL call) fails with
 *                cudaErrorStreamCaptureUnsupported and invalidates the
 *                capture, as a refused call in the middle of a step does:
 *                its later calls fail with cudaErrorStreamCaptureInvalidated;
 *   nccl         NCCL refuses the capture's first collective
 *                (ncclInvalidUsage, emu_nccl.c); the capture stays valid.
 * A value it does not take aborts with one line.
 *
 * DESIGN. A capture is a growing graph (nodes in order: the emulator runs
 * everything in stream order, so a list is the whole dependency graph)
 * hanging from its streams (the origin and the forked ones, each with the
 * count of work it queued: an event recorded in the capture keeps its
 * stream's count, the origin's wait on it joins that much); the captures active per GPU are counted under
 * a mutex for the refusals above. An executable graph owns a copy of the
 * nodes and their argument copies, so the graph may be destroyed first.
 * A capture and its graph belong to the one thread that captures; a
 * launched graph runs on the launching thread. Statistics (the STATS line,
 * emu_runtime.c): graph launches and the kernels they ran. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emulator.h"

#define EMU_MAX_GPUS 8

typedef struct {
    const char *kernel; /* a kernel's name; NULL: a replay function */
    unsigned grid, block;
    int cooperative;
    void (*kernel_fn)(void *);              /* a kernel: its body, once per CUDA thread */
    void (*call_fn)(void *, const void *);  /* a replay function: (arguments, stream) */
    void *arg;                              /* the copy of the closure or arguments */
    size_t arg_bytes;
} node_t;

/* A stream taking part in a capture: the origin (members[0], where it
 * began) or one forked from it by waiting on an event recorded in it. */
typedef struct {
    const void *stream;
    long work;     /* nodes it queued in this capture */
    long last_sum; /* the work count at its last NCCL sum (0: none) */
    long joined;   /* of its work, what the origin waited for (forked streams) */
} member_t;

#define MAX_MEMBER_STREAMS 8

struct CUgraph_st {
    node_t *nodes;
    int count, cap;
    int device;
    int invalid;     /* a refused call met the capture */
    int refuse;      /* DPTRAIN_CUDA_EMU_REFUSE_CAPTURE picked this capture: what it still refuses (REFUSE_*) */
    int mode;        /* enum cudaStreamCaptureMode */
    pthread_t owner; /* the thread that began the capture */
    long id;         /* unique while the process runs: what a captured event names */
    member_t members[MAX_MEMBER_STREAMS];
    int member_count;
};

/* DPTRAIN_CUDA_EMU_REFUSE_CAPTURE's WHAT */
enum { REFUSE_NONE, REFUSE_END, REFUSE_INSTANTIATE, REFUSE_CALL, REFUSE_NCCL };

struct CUgraphExec_st {
    node_t *nodes;
    int count;
    int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUgraph_st *active[EMU_MAX_GPUS][4]; /* the captures active per GPU (a few streams at most) */
static long stat_graph_launches, stat_graph_kernels;
static long last_capture_id; /* under lock */
static long captures_begun[EMU_MAX_GPUS]; /* under lock: each GPU's captures so far */
static struct {
    int what; /* REFUSE_* */
    long nth; /* 0: every capture */
    int device; /* -1: every GPU */
} refusal = {.device = -1};
static pthread_once_t refusal_once = PTHREAD_ONCE_INIT;

static void read_refusal(void) {
    static const char *const names[] = {[REFUSE_END] = "end", [REFUSE_INSTANTIATE] = "instantiate",
                                        [REFUSE_CALL] = "call", [REFUSE_NCCL] = "nccl"};
    const char *v = getenv("DPTRAIN_CUDA_EMU_REFUSE_CAPTURE");
    if (!v || !*v) return;
    size_t len = strcspn(v, ":@");
    for (int w = REFUSE_END; w <= REFUSE_NCCL; w++)
        if (strlen(names[w]) == len && strncmp(v, names[w], len) == 0) refusal.what = w;
    const char *rest = v + len;
    char *end = (char *)rest;
    if (refusal.what && *rest == ':') {
        refusal.nth = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || refusal.nth < 1) refusal.what = REFUSE_NONE;
        rest = end;
    }
    if (refusal.what && *rest == '@') {
        long device = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || device < 0 || device >= EMU_MAX_GPUS) refusal.what = REFUSE_NONE;
        refusal.device = (int)device;
        rest = end;
    }
    if (!refusal.what || *rest) {
        fprintf(stderr, "cuda emulator: DPTRAIN_CUDA_EMU_REFUSE_CAPTURE must be end, instantiate, call or nccl, "
                "then :N (the N-th capture of a GPU, from 1) and @GPU (that GPU only) if wanted, found '%s'\n", v);
        fflush(stderr);
        abort();
    }
}

/* What the capture numbered `nth` on `device` refuses (REFUSE_*). */
static int refusal_of(int device, long nth) {
    pthread_once(&refusal_once, read_refusal);
    if ((refusal.nth && refusal.nth != nth) || (refusal.device >= 0 && refusal.device != device)) return REFUSE_NONE;
    return refusal.what;
}

/* The capture refuses its first captured call (REFUSE_CALL): invalidated. */
static int refuses_call(struct CUgraph_st *g) {
    if (g->refuse != REFUSE_CALL) return 0;
    g->refuse = REFUSE_NONE;
    g->invalid = 1;
    return 1;
}


long emu_stat_graph_launches(void) { return __atomic_load_n(&stat_graph_launches, __ATOMIC_RELAXED); }
long emu_stat_graph_kernels(void) { return __atomic_load_n(&stat_graph_kernels, __ATOMIC_RELAXED); }

void emu_set_last_error(int error); /* emu_runtime.c */
void **emu_stream_capture_slot(const void *stream); /* emu_runtime.c: the stream's capture, NULL for the legacy stream */
int emu_run_kernel(const char *kernel, unsigned grid, unsigned block, const void *stream, int cooperative,
                   void (*fn)(void *), void *arg); /* emu_launch.c */

static cudaError_t fail(cudaError_t err) {
    emu_set_last_error(err);
    return err;
}

static struct CUgraph_st *capture_of(const void *stream) {
    void **slot = stream ? emu_stream_capture_slot(stream) : NULL;
    return slot ? *slot : NULL;
}

/* emu_nccl.c: NCCL refuses this collective, the first of a capture picked for it (REFUSE_NCCL). */
int emu_capture_refuses_nccl(const void *stream) {
    struct CUgraph_st *g = capture_of(stream);
    if (!g || g->refuse != REFUSE_NCCL) return 0;
    g->refuse = REFUSE_NONE;
    return 1;
}

int emu_capture_status(const void *stream) {
    struct CUgraph_st *g = capture_of(stream);
    return !g ? 0 : g->invalid ? 2 : 1;
}

int emu_capture_refuses(const char *call, int device) {
    (void)call;
    int refused = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; device >= 0 && device < EMU_MAX_GPUS && i < 4; i++) {
        struct CUgraph_st *g = active[device][i];
        if (g && g->mode != cudaStreamCaptureModeRelaxed) {
            g->invalid = 1;
            refused = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    if (refused) emu_set_last_error(cudaErrorStreamCaptureUnsupported);
    return refused ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

static int append(struct CUgraph_st *g, node_t node, const void *arg, size_t arg_bytes) {
    if (g->count == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        node_t *grown = realloc(g->nodes, sizeof *grown * (size_t)cap);
        if (!grown) return cudaErrorMemoryAllocation;
        g->nodes = grown;
        g->cap = cap;
    }
    node.arg = malloc(arg_bytes ? arg_bytes : 1);
    if (!node.arg) return cudaErrorMemoryAllocation;
    memcpy(node.arg, arg, arg_bytes);
    node.arg_bytes = arg_bytes;
    g->nodes[g->count++] = node;
    return cudaSuccess;
}

static member_t *member_of(struct CUgraph_st *g, const void *stream) {
    for (int i = 0; i < g->member_count; i++)
        if (g->members[i].stream == stream) return &g->members[i];
    return NULL; /* not reached: a stream's capture lists it */
}

/* The optimizer's kernel captured on `stream` reads the summed gradients:
 * every NCCL sum captured on another stream of the capture must have been
 * joined into it (on a GPU, nodes without that edge run side by side). */
static void check_after_captured_sums(struct CUgraph_st *g, const void *stream, const char *kernel) {
    for (int i = 0; i < g->member_count; i++) {
        const member_t *m = &g->members[i];
        if (m->stream == stream || m->last_sum == 0 || m->joined >= m->last_sum) continue;
        fprintf(stderr, "cuda emulator: %s captured on GPU %d is not ordered after an NCCL sum captured on another "
                "stream (no cudaStreamWaitEvent of the capturing stream on an event recorded after it): in the "
                "graph it may run before the sum\n", kernel, g->device);
        fflush(stderr);
        abort();
    }
}

int emu_capture_kernel(const void *stream, const char *kernel, unsigned grid, unsigned block, int cooperative,
                       void (*fn)(void *), const void *arg, size_t arg_bytes) {
    struct CUgraph_st *g = capture_of(stream);
    if (g->invalid) return fail(cudaErrorStreamCaptureInvalidated);
    if (refuses_call(g)) return fail(cudaErrorStreamCaptureUnsupported);
    if (strcmp(kernel, "optim_kernel") == 0) check_after_captured_sums(g, stream, "the optimizer's kernel");
    node_t n = {.kernel = kernel, .grid = grid, .block = block, .cooperative = cooperative, .kernel_fn = fn};
    int err = append(g, n, arg, arg_bytes);
    if (!err) member_of(g, stream)->work++;
    return err ? fail((cudaError_t)err) : cudaSuccess;
}

int emu_capture_call(const void *stream, void (*fn)(void *, const void *), const void *arg, size_t arg_bytes) {
    struct CUgraph_st *g = capture_of(stream);
    if (g->invalid) return fail(cudaErrorStreamCaptureInvalidated);
    if (refuses_call(g)) return fail(cudaErrorStreamCaptureUnsupported);
    node_t n = {.call_fn = fn};
    int err = append(g, n, arg, arg_bytes);
    if (!err) member_of(g, stream)->work++;
    return err ? fail((cudaError_t)err) : cudaSuccess;
}

void emu_capture_isolate(const void *stream) { capture_of(stream)->invalid = 1; }

void emu_capture_summed(const void *stream) {
    member_t *m = member_of(capture_of(stream), stream);
    m->last_sum = m->work;
}

void emu_capture_mark(const void *stream, long *id, long *work) {
    struct CUgraph_st *g = capture_of(stream);
    *id = g->id;
    *work = member_of(g, stream)->work;
}

/* The active capture of that id, NULL once it ended. Under lock. */
static struct CUgraph_st *active_capture(long id) {
    for (int d = 0; d < EMU_MAX_GPUS; d++)
        for (int i = 0; i < 4; i++)
            if (active[d][i] && active[d][i]->id == id) return active[d][i];
    return NULL;
}

int emu_capture_wait(const void *stream, long id, long work, const void *event_stream) {
    void **slot = stream ? emu_stream_capture_slot(stream) : NULL;
    if (!slot) return fail(cudaErrorStreamCaptureImplicit); /* the legacy stream joins no capture */
    pthread_mutex_lock(&lock);
    struct CUgraph_st *g = active_capture(id), *own = *slot;
    cudaError_t err = cudaSuccess;
    if (!g) {
        err = cudaErrorStreamCaptureIsolation; /* an event of a capture that ended: nothing a stream can wait for */
    } else if (!own) { /* a fork: the stream's work from now on is the capture's */
        if (g->member_count == MAX_MEMBER_STREAMS) {
            err = cudaErrorNotSupported;
        } else if (emu_stream_device(stream) != g->device) {
            err = cudaErrorStreamCaptureIsolation; /* the emulator keeps a capture on one GPU */
        } else {
            g->members[g->member_count++] = (member_t){.stream = stream};
            *slot = g;
        }
    } else if (own != g) {
        own->invalid = 1;
        err = cudaErrorStreamCaptureIsolation; /* two captures may not depend on each other */
    } else if (stream == g->members[0].stream) { /* a join into the origin */
        for (int i = 1; i < g->member_count; i++)
            if (g->members[i].stream == event_stream && g->members[i].joined < work) g->members[i].joined = work;
    }
    pthread_mutex_unlock(&lock);
    return err ? fail(err) : cudaSuccess;
}

void emu_capture_check_host(const char *call, const char *what, const void *p, size_t bytes) {
    if (emu_pinned_contains(p, bytes)) return;
    fprintf(stderr, "cuda emulator: %s captured on a stream: %s [%p, +%zu bytes) is host memory that is not pinned "
            "(cudaHostAlloc): a graph reads it when it runs, not when captured\n", call, what, p, bytes);
    fflush(stderr);
    abort();
}

static void free_nodes(node_t *nodes, int count) {
    for (int i = 0; i < count; i++) free(nodes[i].arg);
    free(nodes);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    void **slot = stream ? emu_stream_capture_slot(stream) : NULL;
    if (!slot) return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
    if (*slot) return fail(cudaErrorIllegalState);
    int device = emu_stream_device(stream);
    if (emu_device_fault(device)) return fail((cudaError_t)emu_device_fault(device));
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return fail(cudaErrorMemoryAllocation);
    g->device = device;
    g->mode = (int)mode;
    g->owner = pthread_self();
    g->members[0] = (member_t){.stream = stream};
    g->member_count = 1;
    pthread_mutex_lock(&lock);
    g->id = ++last_capture_id;
    long nth = ++captures_begun[device];
    int placed = 0;
    for (int i = 0; i < 4 && !placed; i++)
        if (!active[device][i]) active[device][i] = g, placed = 1;
    pthread_mutex_unlock(&lock);
    if (!placed) {
        free(g);
        return fail(cudaErrorNotSupported);
    }
    g->refuse = refusal_of(device, nth);
    *slot = g;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    *graph = NULL;
    void **slot = stream ? emu_stream_capture_slot(stream) : NULL;
    struct CUgraph_st *g = slot ? *slot : NULL;
    if (!g) return fail(cudaErrorIllegalState);
    if (g->members[0].stream != stream) return fail(cudaErrorStreamCaptureUnmatched); /* a forked stream */
    if (g->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(g->owner, pthread_self()))
        return fail(cudaErrorStreamCaptureWrongThread);
    pthread_mutex_lock(&lock);
    int unjoined = 0;
    for (int i = 1; i < g->member_count; i++) { /* the forked streams leave the capture */
        unjoined |= g->members[i].joined < g->members[i].work;
        *emu_stream_capture_slot(g->members[i].stream) = NULL;
    }
    *slot = NULL;
    for (int i = 0; i < 4; i++)
        if (active[g->device][i] == g) active[g->device][i] = NULL;
    pthread_mutex_unlock(&lock);
    if (g->refuse == REFUSE_END) g->invalid = 1;
    if (g->invalid || unjoined) {
        cudaError_t err = g->invalid ? cudaErrorStreamCaptureInvalidated : cudaErrorStreamCaptureUnjoined;
        free_nodes(g->nodes, g->count);
        free(g);
        return fail(err);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
    int s = emu_capture_status(stream);
    *status = s == 0 ? cudaStreamCaptureStatusNone : s == 1 ? cudaStreamCaptureStatusActive
                                                            : cudaStreamCaptureStatusInvalidated;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    *exec = NULL;
    if (!graph) return fail(cudaErrorInvalidValue);
    if (graph->refuse == REFUSE_INSTANTIATE) return fail(cudaErrorNotSupported);
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    node_t *nodes = calloc((size_t)graph->count + 1, sizeof *nodes);
    if (!e || !nodes) {
        free(e);
        free(nodes);
        return fail(cudaErrorMemoryAllocation);
    }
    for (int i = 0; i < graph->count; i++) {
        nodes[i] = graph->nodes[i];
        nodes[i].arg = malloc(graph->nodes[i].arg_bytes ? graph->nodes[i].arg_bytes : 1);
        if (!nodes[i].arg) {
            free_nodes(nodes, i);
            free(e);
            return fail(cudaErrorMemoryAllocation);
        }
        memcpy(nodes[i].arg, graph->nodes[i].arg, graph->nodes[i].arg_bytes);
    }
    e->nodes = nodes;
    e->count = graph->count;
    e->device = graph->device;
    *exec = e;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}

/* The recorded work, in order, as if queued now on `stream`. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return fail(cudaErrorInvalidValue);
    if (emu_capture_status(stream)) return fail(cudaErrorStreamCaptureUnsupported); /* not emulated: a graph node */
    int device = emu_stream_device(stream);
    if (device != exec->device || device != emu_current_device()) return fail(cudaErrorInvalidResourceHandle);
    if (emu_device_fault(device)) return fail((cudaError_t)emu_device_fault(device));
    __atomic_add_fetch(&stat_graph_launches, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < exec->count; i++) {
        node_t *n = &exec->nodes[i];
        if (n->kernel) {
            __atomic_add_fetch(&stat_graph_kernels, 1, __ATOMIC_RELAXED);
            emu_run_kernel(n->kernel, n->grid, n->block, stream, n->cooperative, n->kernel_fn, n->arg);
        } else {
            n->call_fn(n->arg, stream);
        }
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (exec) free_nodes(exec->nodes, exec->count);
    free(exec);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (graph) free_nodes(graph->nodes, graph->count);
    free(graph);
    return cudaSuccess;
}
