/* step_graph.c - a training step on CUDA devices as one CUDA graph per
 * device (backend.h: graph_*): the step's device work captured once per
 * step shape and replayed with one launch per device and step, so that a
 * step of ~50 kernels costs one launch of the host's time.
 *
 * A shape (batch size, micro-batches, the examples' shape and
 * normalisation) runs STEP_GRAPH_WARMUP steps as made first: the arena
 * grows into one block, cuDNN's plans, algorithms and workspace, the input
 * buffers and the optimizer's device state are made; none of that may
 * happen inside a capture. The next step of the shape is captured
 * (dp_trainer_step_devices, exactly the step as made, its host part
 * included: the optimizers' step counts, the trainer's) and launched.
 * Before every step, graph or not, the trainer uploads each replica's
 * shards of the step's bytes and labels into its input buffers
 * (trainer.c's stage_input: what the captured conversion reads); a later
 * step of the shape then does the host part of a step (the strategy's
 * begin_step: the optimizers' step counts; the step count) and launches the
 * graph, which first takes the optimizers' scalars (learning rate, step
 * count) from the host optimizers (graph_cuda.c) and the dropout layers'
 * seeds of this step (dp_seed_mix(dp_seed_mix(seed, step count), layer),
 * nn.c's, handed to the launch beside their values at the capture). Up to
 * STEP_GRAPH_SHAPES shapes keep a graph (the epoch's batch and its last,
 * short one); others run as made. When the backend freed device memory a
 * graph may point into (an evaluation grew the arena or the workspace, a
 * larger step grew the input buffers), every graph is dropped and each
 * shape warms up again.
 *
 * Several devices of one process capture together when they sum with NCCL
 * (sync_peer.c's strategies): each device's context captures its share,
 * the sums included (the backend captures NCCL's calls; with --overlap
 * each bucket's sum where the backward pass issued it, so the graph keeps
 * the sums beside the backward pass), and
 * each device's graph is launched from its device's thread (NCCL's advice
 * for graphs on several GPUs of a process: a member's graph may wait in its
 * launch for the others'). A graph of any device gone stale drops
 * every device's: all capture and launch alike, as NCCL requires. So do
 * several ranks whose GPUs sum in one NCCL group: each rank captures and
 * launches its own, and before each step one byte per rank through MPI
 * says whether any rank's graphs went stale (an evaluation's frees need
 * not fall alike on every rank).
 *
 * Where a step cannot be captured, dp_step_graph_why says why in one line
 * and every step runs as made: what the step does on the host in its
 * middle (a barrier, a download, a per-step kernel argument) would not be
 * replayed.
 *
 * A capture that CUDA or NCCL refuses (a call refused inside it, its end,
 * cudaGraphInstantiate, a captured sum) does not fail the run: nothing of
 * the step ran on the GPUs, so the step is put back as it was before the
 * capture (capture_or_refuse: no graph of the shape left on any device of
 * any rank, the step count, the optimizers' step counts and the step's
 * timings restored, the devices' failure of the capture forgotten by
 * graph_end) and run as made, with the bits of a run without graphs; the
 * shape is marked refused, its later steps run as made too (no capture is
 * tried again), and one line on stderr says what was refused. Every
 * device of every rank drops the shape's graphs alike (the same byte per
 * rank through MPI), as NCCL needs. The step as made meets again whatever
 * failure was not the capture's and fails the run with it.
 *
 * DESIGN. Only the caller's thread, between steps, touches t->graphs; the
 * capture is begun and ended there too (one thread, as CUDA asks), while
 * the device thread's tasks queue the step's work into it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "dptrain/nn.h"

#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

#define STEP_GRAPH_WARMUP 2
#define STEP_GRAPH_SHAPES 4
#define STEP_GRAPH_SEEDS 64 /* dropout layers whose seeds a launch hands over */
#define STEP_GRAPH_DEVICES 16 /* sync_peer.c's most devices in a process */
#define STEP_GRAPH_RANKS_ON_STACK 256 /* ranks whose stale flags drop_if_stale gathers on the stack */

typedef struct dp_step_graph {
    int n, micros;          /* the shape (n 0: a free entry): the step's batch and micro-batches, ... */
    int channels, height, width; /* ... its examples' shape ... */
    dp_normalize_t normalize;    /* ... and their conversion (a constant of the graph) */
    int warm;    /* steps of this shape run as made since its graphs were last dropped */
    int refused; /* its capture was refused (on some device or rank): its steps run as made for good */
    uint64_t step_seed; /* the forward's seed at the capture (dp_seed_mix(seed, step count)) */
    int captured; /* graph[] holds every device's */
    void *graph[STEP_GRAPH_DEVICES]; /* per device, the backend's */
} dp_step_graph_t;

const char *dp_step_graph_why(const dp_trainer_t *t) {
    if (t->config.cuda_graph_off) return "--cuda-graph off";
    for (int d = 0; d < t->num_devices; d++)
        if (!t->replicas[d].backend->graph_begin) return "not CUDA devices";
    if (t->config.sync == DP_SYNC_PS) return "--sync ps (the server's update runs on its own device)";
    if (t->config.clip_grad_norm > 0.0f) return "--clip-grad-norm (the gradients' norm is read on the host)";
    if (dp_mix_on(&t->config.mix)) return "--mixup-alpha or --cutmix-alpha (each step mixes with its own weight)";
    if (t->config.random_erase > 0.0f) return "--random-erase (each step erases its own boxes)";
    int nccl = t->sync == &dp_sync_peer || t->sync == &dp_sync_peer_overlap;
    if (t->ranks > 1 && !nccl) return "several MPI ranks summing through MPI (a graph needs NCCL)";
    if (t->num_devices > 1 && !nccl) return "several devices summing through host memory (a graph needs NCCL)";
    DP_ASSERT(t->num_devices <= STEP_GRAPH_DEVICES); /* several devices sum with NCCL: 16 at most (sync_peer.c) */
    if (t->config.profile_steps > 0) return "--profile (its timing marks are read on the host)";
    if (t->config.sync_batch_norm) return "--sync-batch-norm (its statistics meet at a host barrier)";
    if (!nccl && t->sync != &dp_sync_local_chunked && t->sync != &dp_sync_local_naive && t->sync != &dp_sync_overlap)
        return "a gradient strategy whose sums run on the host";
    return NULL;
}

static void free_shape(dp_trainer_t *t, dp_step_graph_t *g) {
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (g->graph[d]) be->graph_free(be->ctx, g->graph[d]);
        g->graph[d] = NULL;
    }
    g->captured = 0;
    g->warm = 0;
}

static void drop_graphs(dp_trainer_t *t) {
    for (int i = 0; t->graphs && i < STEP_GRAPH_SHAPES; i++) free_shape(t, &t->graphs[i]);
}

/* Any device's graph of the shape points into memory its backend freed. */
static int shape_stale(const dp_trainer_t *t, const dp_step_graph_t *g) {
    int stale = 0;
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        stale |= be->graph_stale(be->ctx, g->graph[d]);
    }
    return stale;
}

void dp_step_graph_release(dp_trainer_t *t) {
    drop_graphs(t);
    free(t->graphs);
    t->graphs = NULL;
}

static int same_shape(const dp_step_graph_t *g, const dp_batch_t *b, const dp_normalize_t *norm, int micros) {
    return g->n == b->n && g->micros == micros && g->channels == b->channels && g->height == b->height &&
           g->width == b->width && memcmp(&g->normalize, norm, sizeof *norm) == 0;
}

static dp_step_graph_t *find_shape(dp_trainer_t *t, const dp_batch_t *b, int micros) {
    dp_normalize_t norm = {0};
    if (b->normalize) norm = *b->normalize;
    for (int i = 0; i < STEP_GRAPH_SHAPES; i++)
        if (same_shape(&t->graphs[i], b, &norm, micros)) return &t->graphs[i];
    for (int i = 0; i < STEP_GRAPH_SHAPES; i++) {
        dp_step_graph_t *g = &t->graphs[i];
        if (!g->n) {
            *g = (dp_step_graph_t){.n = b->n, .micros = micros, .channels = b->channels, .height = b->height,
                                   .width = b->width, .normalize = norm};
            return g;
        }
    }
    return NULL;
}

/* A device's graph of the shape, from its device's thread. */
static dp_status_t launch_task(void *arg) {
    dp_replica_t *r = arg;
    const dp_trainer_t *t = r->trainer;
    const dp_backend_t *be = r->backend;
    return be->graph_launch(be->ctx, t->graph_launch->graph[r->index], t->graph_seeds, t->graph_seed_pairs);
}

/* The graphs, with their dropout and drop path layers' seeds for this step: layer i's
 * mask seed is dp_seed_mix(step seed, i) (nn.c), at the capture and now. */
static dp_status_t launch(dp_trainer_t *t, const dp_step_graph_t *g, uint64_t step_seed) {
    uint64_t seeds[2 * STEP_GRAPH_SEEDS];
    int pairs = 0;
    for (int i = 1; i <= dp_model_num_layers(t->model) && pairs < STEP_GRAPH_SEEDS; i++) {
        dp_layer_info_t layer;
        if (dp_model_layer(t->model, i, &layer) != DP_OK) continue;
        if (layer.kind != DP_LAYER_DROPOUT && layer.kind != DP_LAYER_DROP_PATH) continue;
        seeds[2 * pairs] = dp_seed_mix(g->step_seed, (uint64_t)(i - 1));
        seeds[2 * pairs + 1] = dp_seed_mix(step_seed, (uint64_t)(i - 1));
        pairs++;
    }
    if (t->num_devices == 1) {
        const dp_backend_t *be = t->replicas[0].backend;
        return be->graph_launch(be->ctx, g->graph[0], seeds, pairs);
    }
    t->graph_launch = g;
    t->graph_seeds = seeds;
    t->graph_seed_pairs = pairs;
    dp_status_t status = dp_trainer_run_on_all(t, launch_task);
    t->graph_launch = NULL;
    t->graph_seeds = NULL;
    return status;
}

/* Every device's context captures the step as made; on a failure every
 * capture begun is ended and its graph, if any, freed. */
static dp_status_t capture(dp_trainer_t *t, dp_step_graph_t *g, const dp_batch_t *batch, int micros) {
    int begun = 0;
    dp_status_t status = DP_OK;
    while (begun < t->num_devices && status == DP_OK) {
        dp_replica_t *r = &t->replicas[begun];
        dp_arena_reset(r->arena); /* merging the arena's blocks frees and allocates: not inside the capture */
        status = r->backend->graph_begin(r->backend->ctx);
        begun += status == DP_OK;
    }
    if (status == DP_OK) status = dp_trainer_step_devices(t, batch, micros);
    char message[1024] = "";
    if (status != DP_OK) snprintf(message, sizeof message, "%s", dp_error_message());
    for (int d = 0; d < begun; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        dp_status_t ended = be->graph_end(be->ctx, &g->graph[d]);
        if (status == DP_OK && ended != DP_OK) {
            status = ended;
            snprintf(message, sizeof message, "%s", dp_error_message());
        }
    }
    if (status != DP_OK) {
        free_shape(t, g);
        return dp_fail(status, "%s", message);
    }
    g->captured = 1;
    return DP_OK;
}

/* *first = the first rank whose `mine` is set (-1: none): this rank's
 * alone on one rank, else one byte per rank through MPI. A collective: every
 * rank asks at the same point of its steps. */
static dp_status_t first_rank_with(const dp_trainer_t *t, unsigned char mine, int *first) {
    *first = mine ? 0 : -1;
    if (t->ranks == 1) return DP_OK;
    unsigned char all[STEP_GRAPH_RANKS_ON_STACK];
    unsigned char *each = all;
    if (t->ranks > STEP_GRAPH_RANKS_ON_STACK) each = dp_alloc_zeroed((size_t)t->ranks, 1, "the ranks' graph states");
    if (!each) return DP_ERR_NOMEM;
    dp_status_t status = dp_world_allgather_bytes(&mine, each, 1);
    *first = -1;
    for (int r = t->ranks - 1; status == DP_OK && r >= 0; r--)
        if (each[r]) *first = r;
    if (each != all) free(each);
    return status;
}

/* Every graph dropped when any device's graph of the shape went stale; on
 * several ranks when any rank's did: NCCL takes a captured collective from
 * every member or none, so all ranks launch their graphs, or all run the
 * step as made, alike. */
static dp_status_t drop_if_stale(dp_trainer_t *t, const dp_step_graph_t *g) {
    int first;
    DP_TRY(first_rank_with(t, g && g->captured && shape_stale(t, g), &first));
    if (first >= 0) drop_graphs(t);
    return DP_OK;
}

/* What dp_trainer_step_devices advances on the host before or while it
 * queues the step's device work, and that a refused capture must give
 * back: the step count (the forward's per-step seeds derive from it), every
 * replica's optimizer step count (the strategy's begin_step: Adam's
 * corrections, the CUDA backend's note of the optimizer's state) and the
 * step's timings. The rest of a step's host state each step makes afresh:
 * the strategy's per-step state (begin_step: its bucket counters, its kept
 * failure), the shards and micro-batch counters, each replica's tape and
 * arena (reset by its task), the layers' seeds (from the step count). */
typedef struct {
    uint64_t step_count;
    uint64_t optimizer_steps[STEP_GRAPH_DEVICES];
    double sync_sec, mpi_sec;
} step_host_t;

static step_host_t host_before_step(const dp_trainer_t *t) {
    step_host_t h = {.step_count = t->step_count, .sync_sec = t->sync_sec, .mpi_sec = t->mpi_sec};
    for (int d = 0; d < t->num_devices; d++) h.optimizer_steps[d] = dp_optimizer_steps(t->replicas[d].optimizer);
    return h;
}

static void host_restore(dp_trainer_t *t, const step_host_t *h) {
    t->step_count = h->step_count;
    t->sync_sec = h->sync_sec;
    t->mpi_sec = h->mpi_sec;
    for (int d = 0; d < t->num_devices; d++) dp_optimizer_set_steps(t->replicas[d].optimizer, h->optimizer_steps[d]);
}

/* The shape's first capture, or its refusal: *refused = 0 and the graphs
 * captured (the step's host part done, its device work not run yet), or
 * *refused = 1 and the step as if no capture had been tried: no graph of
 * the shape on any device of any rank (a rank whose devices captured drops
 * them when another's capture was refused: NCCL's sums need every member's
 * graph), the host state of before (host_before_step), every device's
 * context without the capture's failure (graph_end forgets it,
 * backend.h), and the shape marked: its steps run as made from now on,
 * told in one line.
 * Any failure of the capture counts as a refusal (CUDA refusing a call in
 * it or its end, cudaGraphInstantiate failing, NCCL refusing a captured
 * sum, the step failing inside the capture because of one): the step is
 * then run as made right after, which meets again every failure that is
 * not the capture's (a GPU's sticky fault, an NCCL group's abort, an
 * allocation that does not fit, a bad kernel) and fails the run with it as
 * without graphs. Telling refusals from the rest by their error codes
 * instead would miss the step's calls that fail only because a refused
 * call invalidated the capture before them. A device that failed before
 * the capture fails the step: that failure is the run's. */
static dp_status_t capture_or_refuse(dp_trainer_t *t, dp_step_graph_t *g, const dp_batch_t *batch, int micros,
                                     int *refused) {
    *refused = 0;
    for (int d = 0; d < t->num_devices; d++) {
        const dp_backend_t *be = t->replicas[d].backend;
        if (be->failure) DP_TRY(be->failure(be->ctx));
    }
    const step_host_t before = host_before_step(t);
    dp_status_t status = capture(t, g, batch, micros);
    char why[1024] = "";
    if (status != DP_OK && t->ranks > 1)
        snprintf(why, sizeof why, "rank %d: %s", t->config.world.rank, dp_error_message());
    else if (status != DP_OK)
        snprintf(why, sizeof why, "%s", dp_error_message());
    int first;
    DP_TRY(first_rank_with(t, status != DP_OK, &first));
    if (first < 0) return DP_OK;
    free_shape(t, g); /* this rank's graphs, when only another rank's capture was refused */
    g->refused = 1;
    host_restore(t, &before);
    if (status == DP_OK) snprintf(why, sizeof why, "rank %d's capture was refused", first);
    fprintf(stderr, "dptrain: warning: cuda graph: the step of batch %d could not be captured (%s): steps of batch %d "
            "run as made\n", batch->n, why, batch->n);
    *refused = 1;
    return DP_OK;
}

dp_status_t dp_step_graph_step(dp_trainer_t *t, const dp_batch_t *batch, int micros, int *done) {
    *done = 0;
    if (!t->graphs && !(t->graphs = dp_alloc_zeroed(STEP_GRAPH_SHAPES, sizeof *t->graphs, "step graphs")))
        return DP_ERR_NOMEM;
    dp_step_graph_t *g = find_shape(t, batch, micros);
    DP_TRY(drop_if_stale(t, g));
    /* more shapes than graphs, a warm-up, or a shape whose capture was refused: as made */
    if (!g || g->refused || (!g->captured && g->warm < STEP_GRAPH_WARMUP)) {
        if (g) g->warm++;
        t->graph_counts.as_made++;
        return DP_OK;
    }
    uint64_t step_seed = dp_seed_mix(t->config.seed, t->step_count); /* this step's forward's (shard_task) */
    if (!g->captured) {
        g->step_seed = step_seed;
        int refused;
        DP_TRY(capture_or_refuse(t, g, batch, micros, &refused));
        if (refused) { /* nothing of the step ran: the caller runs it as made */
            t->graph_counts.as_made++;
            return DP_OK;
        }
        t->graph_counts.captures++;
    } else { /* the host's part of the step, as dp_trainer_step_devices does it */
        if (t->sync->begin_step) t->sync->begin_step(t);
        t->step_count++;
    }
    DP_TRY(launch(t, g, step_seed));
    t->graph_counts.launches++;
    *done = 1;
    return DP_OK;
}
