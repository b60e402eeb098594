/* graph_cuda.c - the CUDA backend's step graphs (backend.h: graph_begin,
 * graph_end, graph_launch, graph_free): a step's work on the GPU's stream
 * captured once as a CUDA graph (stream capture) and replayed with one
 * cudaGraphLaunch.
 *
 * DESIGN. A capture belongs to the context (c->capture, under the lock)
 * from graph_begin to graph_end, both on the caller's thread; the ops that
 * run meanwhile on device threads queue onto the capturing stream as
 * always, and the calls that would wait for the GPU or allocate fail there
 * (CUDA refuses them during a global capture, and the context keeps the
 * failure). While capturing:
 *   - an upload (upload_staged, backend_cuda.c) copies its bytes into the
 *     graph's own pinned memory and captures the copy from there: a
 *     constant of the graph (autograd's seed of the loss gradient, 1);
 *   - an optimizer update captures its kernel, which reads its scalars
 *     (learning rate, Adam's corrections) from the optimizer's device
 *     argument block, and notes the host optimizer in the graph: each
 *     launch first writes that block from the host optimizer as it is
 *     then (dp_cuda_optim_args_upload: a staged upload, no wait), so a
 *     schedule or a new step count needs no new capture;
 *   - an op whose kernel takes a per-step seed (dropout) reads it from a
 *     slot of the context's graph_seeds, and the graph notes the seed's
 *     value at the capture in that slot; each launch is handed the pairs
 *     (value at the capture, value now) and writes the slots' values now
 *     (a staged upload) before the graph. The slots are the context's, not
 *     the graph's: launches are in stream order, each writes before its
 *     graph reads.
 * On a GPU that sums with NCCL (c->peer: several GPUs of the process, or
 * of several ranks) the sums are captured too (peer_nccl.c), and every
 * member's graph must be launched for any to end: the trainer launches
 * each from its device's thread (step_graph.c).
 * The per-step batch (its bytes and labels) reaches the graph through
 * device memory the caller uploads before each launch (input_from_bytes
 * reads it there). A graph is stale once the context freed device memory
 * after its capture (c->frees moved: an arena block merged, a workspace
 * grown, the input buffers grown): graph_launch says so and queues
 * nothing.
 * A capture that fails (CUDA refuses a call in it, which invalidates it and
 * fails the capture's later calls too; NCCL refuses a captured sum;
 * cudaStreamEndCapture or cudaGraphInstantiate fails) leaves no graph and
 * no failure: graph_end frees what was recorded and forgets the context's
 * failure met since graph_begin (which found none: it fails on a context
 * that failed before), and so does a graph_begin that fails on its own.
 * Nothing of the capture ran on the GPU, so the context is as before it;
 * the caller runs the step as made (step_graph.c), where a failure that
 * was not the capture's (a GPU's sticky fault, an NCCL group's abort) shows
 * again. */
#include <stdlib.h>
#include <string.h>

#include "cuda_context.h"
#include "cuda_parts.h"

#define GRAPH_CONSTANT_BYTES ((size_t)4096)
#define GRAPH_MAX_OPTIMIZERS 8
#define GRAPH_MAX_SEEDS 64

typedef struct dp_cuda_graph {
    cudaGraphExec_t exec;
    uint8_t *constants; /* (GRAPH_CONSTANT_BYTES) pinned: the captured uploads' bytes */
    size_t constants_used;
    dp_optimizer_t *optimizers[GRAPH_MAX_OPTIMIZERS]; /* whose updates were captured */
    int optimizer_count;
    uint64_t seeds[GRAPH_MAX_SEEDS]; /* the per-step seeds captured, their values at the capture */
    int seed_count;
    uint64_t frees; /* c->frees at the end of the capture */
    cudaEvent_t launched; /* recorded after each launch (made with the graph) */
    int launches;
} cuda_graph_t;

static void graph_release(cuda_graph_t *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->launched) cudaEventDestroy(g->launched);
    if (g->constants) cudaFreeHost(g->constants);
    free(g);
}

int dp_cuda_graph_constant(dp_cuda_ctx_t *c, void *dst, const void *host_src, size_t bytes, const char *what) {
    cuda_graph_t *g = c->capture;
    size_t rounded = (bytes + 15) & ~(size_t)15;
    if (rounded > GRAPH_CONSTANT_BYTES - g->constants_used) {
        dp_cuda_fail(c, "%s while capturing a step: more than %zu bytes of uploads in one step graph", what,
                     GRAPH_CONSTANT_BYTES);
        return 1;
    }
    uint8_t *slot = g->constants + g->constants_used;
    g->constants_used += rounded;
    memcpy(slot, host_src, bytes);
    return dp_cuda_check(c, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, c->stream), what);
}

int dp_cuda_graph_note_optimizer(dp_cuda_ctx_t *c, dp_optimizer_t *opt) {
    cuda_graph_t *g = c->capture;
    for (int i = 0; i < g->optimizer_count; i++)
        if (g->optimizers[i] == opt) return 0;
    if (g->optimizer_count == GRAPH_MAX_OPTIMIZERS) {
        dp_cuda_fail(c, "capturing a step: more than %d optimizers update in one step graph", GRAPH_MAX_OPTIMIZERS);
        return 1;
    }
    g->optimizers[g->optimizer_count++] = opt;
    return 0;
}

const uint64_t *dp_cuda_graph_seed(dp_cuda_ctx_t *c, uint64_t seed) {
    cuda_graph_t *g = c->capture;
    for (int i = 0; i < g->seed_count; i++)
        if (g->seeds[i] == seed) return c->graph_seeds + i;
    if (g->seed_count == GRAPH_MAX_SEEDS) {
        dp_cuda_fail(c, "capturing a step: more than %d per-step seeds in one step graph", GRAPH_MAX_SEEDS);
        return NULL;
    }
    g->seeds[g->seed_count] = seed;
    return c->graph_seeds + g->seed_count++;
}

static dp_status_t cuda_graph_begin(void *ctx) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    dp_status_t status = dp_cuda_status(c);
    int failed_before = c->failed;
    cuda_graph_t *g = NULL;
    if (status == DP_OK && c->capture) status = dp_fail(DP_ERR_ARG, "%s: a step graph is being captured already", c->name);
    if (status == DP_OK && !(g = dp_alloc_zeroed(1, sizeof *g, "a step graph"))) status = DP_ERR_NOMEM;
    if (status == DP_OK && !c->graph_seeds &&
        dp_cuda_malloc(c, (void **)&c->graph_seeds, sizeof(uint64_t) * GRAPH_MAX_SEEDS) != cudaSuccess)
        status = dp_cuda_out_of_memory(c, "a step graph's seeds", sizeof(uint64_t) * GRAPH_MAX_SEEDS);
    if (status == DP_OK &&
        (dp_cuda_check(c, cudaHostAlloc((void **)&g->constants, GRAPH_CONSTANT_BYTES, cudaHostAllocDefault),
                       "pinned memory for a step graph") ||
         dp_cuda_check(c, cudaEventCreateWithFlags(&g->launched, cudaEventDisableTiming), "an event for a step graph")))
        status = dp_cuda_status(c);
    /* a GPU summing with NCCL beside others of the process: thread-local, as NCCL asks where each GPU has a
     * thread of its own (another thread's calls, NCCL's own among them, do not invalidate this capture) */
    enum cudaStreamCaptureMode mode = c->peer ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal;
    if (status == DP_OK && dp_cuda_check(c, cudaStreamBeginCapture(c->stream, mode), "beginning a step capture"))
        status = dp_cuda_status(c);
    if (status == DP_OK) c->capture = g;
    else graph_release(g);
    if (status != DP_OK && !failed_before) dp_cuda_forget_failure(c); /* the status says it */
    dp_cuda_leave(c);
    return status;
}

static dp_status_t cuda_graph_end(void *ctx, void **graph) {
    dp_cuda_ctx_t *c = ctx;
    *graph = NULL;
    dp_cuda_enter(c);
    cuda_graph_t *g = c->capture;
    c->capture = NULL;
    if (!g) {
        dp_cuda_leave(c);
        return dp_fail(DP_ERR_ARG, "%s: no step graph is being captured", c->name);
    }
    cudaGraph_t captured = NULL;
    cudaError_t err = cudaStreamEndCapture(c->stream, &captured);
    if (!dp_cuda_check(c, err, "capturing a step as a CUDA graph") &&
        !dp_cuda_check(c, cudaGraphInstantiate(&g->exec, captured, 0), "instantiating a step's CUDA graph")) {
        g->frees = c->frees;
        *graph = g;
    }
    if (captured) cudaGraphDestroy(captured);
    dp_status_t status = dp_cuda_status(c);
    if (status != DP_OK) { /* the capture's own failure (graph_begin found none): forgotten, the status says it */
        graph_release(g);
        *graph = NULL;
        dp_cuda_forget_failure(c);
    }
    dp_cuda_leave(c);
    return status;
}

static int cuda_graph_stale(void *ctx, void *graph) {
    dp_cuda_ctx_t *c = ctx;
    cuda_graph_t *g = graph;
    dp_cuda_enter(c);
    int stale = g->frees != c->frees;
    dp_cuda_leave(c);
    return stale;
}

static dp_status_t cuda_graph_launch(void *ctx, void *graph, const uint64_t *seeds, int pairs) {
    dp_cuda_ctx_t *c = ctx;
    cuda_graph_t *g = graph;
    uint64_t now[GRAPH_MAX_SEEDS];
    for (int i = 0; i < g->seed_count; i++) {
        int k = 0;
        while (k < pairs && seeds[2 * k] != g->seeds[i]) k++;
        if (k == pairs)
            return dp_fail(DP_ERR_ARG, "%s: a step graph's per-step seed %d has no value for this step", c->name, i);
        now[i] = seeds[2 * k + 1];
    }
    dp_cuda_enter(c);
    DP_ASSERT(g->frees == c->frees); /* graph_stale said no */
    if (g->seed_count) dp_cuda_upload_staged(c, c->graph_seeds, now, sizeof(uint64_t) * (size_t)g->seed_count,
                                             "uploading a step graph's seeds");
    for (int i = 0; !c->failed && i < g->optimizer_count; i++) dp_cuda_optim_args_upload(c, g->optimizers[i]);
    if (!c->failed && !dp_cuda_check(c, cudaGraphLaunch(g->exec, c->stream), "launching a step's CUDA graph") &&
        !dp_cuda_check(c, cudaEventRecord(g->launched, c->stream), "launching a step's CUDA graph"))
        g->launches++;
    dp_status_t status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

/* After its last launch is done (its copies read the pinned memory): asked
 * first, waited for only when not done yet (a drop after an evaluation's
 * downloads, or at exit, finds it done). */
static void cuda_graph_free(void *ctx, void *graph) {
    dp_cuda_ctx_t *c = ctx;
    cuda_graph_t *g = graph;
    if (!g) return;
    dp_cuda_enter(c);
    cudaError_t done = g->launches ? cudaEventQuery(g->launched) : cudaSuccess;
    if (done == cudaErrorNotReady) {
        cudaGetLastError(); /* "not ready" is an answer, not an error */
        done = dp_cuda_wait(c, g->launched);
    }
    dp_cuda_check(c, done, "freeing a step's CUDA graph");
    graph_release(g);
    dp_cuda_leave(c);
}

void dp_cuda_graph_register(dp_backend_t *table) {
    table->graph_begin = cuda_graph_begin;
    table->graph_end = cuda_graph_end;
    table->graph_stale = cuda_graph_stale;
    table->graph_launch = cuda_graph_launch;
    table->graph_free = cuda_graph_free;
}
