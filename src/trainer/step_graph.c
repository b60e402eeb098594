/* step_graph.c - a training step on one CUDA device as one CUDA graph
 * (backend.h: graph_*): the step's device work captured once per step
 * shape and replayed with one launch per step, so that a step of ~50
 * kernels costs one launch of the host's time.
 *
 * A shape (dataset, batch size, micro-batches) runs STEP_GRAPH_WARMUP steps
 * as made first: the arena grows into one block, cuDNN's plans, algorithms
 * and workspace, the dataset's device copy and the optimizer's device state
 * are made; none of that may happen inside a capture. The next step of the
 * shape is captured (dp_trainer_step_devices, exactly the step as made,
 * its host part included: the optimizers' step counts, the trainer's) and
 * launched; every later step of the shape uploads its indices into the
 * replica's step_indices (what the captured gather reads: the step's
 * indices, in micro-batch order, are the shards' in turn), does the host
 * part of a step (the strategy's begin_step: the optimizers' step counts;
 * the step count) and launches the graph, which first takes the
 * optimizers' scalars (learning rate, step count) from the host
 * optimizers (graph_cuda.c) and the dropout layers' seeds of this step
 * (dp_seed_mix(dp_seed_mix(seed, step count), layer), nn.c's, handed to
 * the launch beside their values at the capture). Up to STEP_GRAPH_SHAPES shapes keep a graph
 * (the epoch's batch and its last, short one); others run as made. When
 * the backend freed device memory a graph may point into (an evaluation
 * grew the arena or the workspace), every graph is dropped and each shape
 * warms up again.
 *
 * Where a step cannot be captured, dp_step_graph_why says why in one line
 * and every step runs as made: what the step does on the host in its
 * middle (a barrier, a download, a per-step kernel argument) would not be
 * replayed.
 *
 * DESIGN. Only the caller's thread, between steps, touches t->graphs; the
 * capture is begun and ended there too (one thread, as CUDA asks), while
 * the device thread's tasks queue the step's work into it.
 */
#include <stdlib.h>
#include <string.h>

#include "dptrain/nn.h"

#include "replica.h"
#include "sync_strategy.h"
#include "trainer_state.h"

#define STEP_GRAPH_WARMUP 2
#define STEP_GRAPH_SHAPES 4
#define STEP_GRAPH_SEEDS 64 /* dropout layers whose seeds a launch hands over */

typedef struct dp_step_graph {
    const dp_dataset_t *ds; /* the shape: NULL for a free entry */
    int n, micros;
    int warm;    /* steps of this shape run as made since its graph was last dropped */
    uint64_t step_seed; /* the forward's seed at the capture (dp_seed_mix(seed, step count)) */
    void *graph; /* the backend's, NULL until captured */
} dp_step_graph_t;

const char *dp_step_graph_why(const dp_trainer_t *t) {
    if (t->config.cuda_graph_off) return "--cuda-graph off";
    for (int d = 0; d < t->num_devices; d++)
        if (!t->replicas[d].backend->graph_begin) return "not CUDA devices";
    if (t->ranks > 1) return "several MPI ranks (a graph covers one process's step)";
    if (t->num_devices > 1) return "several devices (a graph covers one device's step)";
    if (t->config.profile_steps > 0) return "--profile (its timing marks are read on the host)";
    if (t->config.sync_batch_norm) return "--sync-batch-norm (its statistics meet at a host barrier)";
    if (t->augment) return "--augment (each step's crops and flips are drawn on the host)";
    if (t->config.sync == DP_SYNC_PS) return "--sync ps (the server's update runs on its own device)";
    if (t->sync != &dp_sync_local_chunked && t->sync != &dp_sync_local_naive)
        return "--overlap on (its buckets are counted on the host during backward)";
    if (!t->replicas[0].backend->load_batch_indexed) return "the backend gathers no batch from device indices";
    return NULL;
}

static void drop_graphs(dp_trainer_t *t) {
    const dp_backend_t *be = t->replicas[0].backend;
    for (int i = 0; t->graphs && i < STEP_GRAPH_SHAPES; i++) {
        if (t->graphs[i].graph) be->graph_free(be->ctx, t->graphs[i].graph);
        t->graphs[i].graph = NULL;
        t->graphs[i].warm = 0;
    }
}

void dp_step_graph_release(dp_trainer_t *t) {
    drop_graphs(t);
    free(t->graphs);
    t->graphs = NULL;
    for (int d = 0; t->replicas && d < t->num_devices; d++) {
        dp_replica_t *r = &t->replicas[d];
        if (r->step_indices) r->backend->free(r->backend->ctx, r->step_indices);
        r->step_indices = NULL;
        r->step_indices_cap = 0;
    }
}

static dp_step_graph_t *find_shape(dp_trainer_t *t, const dp_dataset_t *ds, int n, int micros) {
    for (int i = 0; i < STEP_GRAPH_SHAPES; i++) {
        dp_step_graph_t *g = &t->graphs[i];
        if (g->ds == ds && g->n == n && g->micros == micros) return g;
    }
    for (int i = 0; i < STEP_GRAPH_SHAPES; i++) {
        dp_step_graph_t *g = &t->graphs[i];
        if (!g->ds) {
            *g = (dp_step_graph_t){.ds = ds, .n = n, .micros = micros};
            return g;
        }
    }
    return NULL;
}

/* The step's indices into replica 0's step_indices (one device, one rank:
 * its shards of the micro-batches are indices[0..n) in order). */
static dp_status_t upload_indices(dp_replica_t *r, const int *indices, int n) {
    const dp_backend_t *be = r->backend;
    if (n > r->step_indices_cap) {
        if (r->step_indices) be->free(be->ctx, r->step_indices);
        r->step_indices_cap = 0;
        if (!(r->step_indices = be->alloc(be->ctx, sizeof(int) * (size_t)n, "a step's indices"))) return DP_ERR_NOMEM;
        r->step_indices_cap = n;
    }
    be->upload(be->ctx, r->step_indices, indices, sizeof(int) * (size_t)n);
    return DP_OK;
}

/* The graph, with its dropout layers' seeds for this step: layer i's mask
 * seed is dp_seed_mix(step seed, i) (nn.c), at the capture and now. */
static dp_status_t launch(dp_trainer_t *t, const dp_step_graph_t *g, uint64_t step_seed) {
    const dp_backend_t *be = t->replicas[0].backend;
    uint64_t seeds[2 * STEP_GRAPH_SEEDS];
    int pairs = 0;
    for (int i = 1; i <= dp_model_num_layers(t->model) && pairs < STEP_GRAPH_SEEDS; i++) {
        dp_layer_info_t layer;
        if (dp_model_layer(t->model, i, &layer) != DP_OK || layer.kind != DP_LAYER_DROPOUT) continue;
        seeds[2 * pairs] = dp_seed_mix(g->step_seed, (uint64_t)(i - 1));
        seeds[2 * pairs + 1] = dp_seed_mix(step_seed, (uint64_t)(i - 1));
        pairs++;
    }
    return be->graph_launch(be->ctx, g->graph, seeds, pairs);
}

dp_status_t dp_step_graph_step(dp_trainer_t *t, const dp_dataset_t *ds, const int *indices, int n, int micros,
                               int *done) {
    *done = 0;
    dp_replica_t *r = &t->replicas[0];
    const dp_backend_t *be = r->backend;
    if (!t->graphs && !(t->graphs = dp_alloc_zeroed(STEP_GRAPH_SHAPES, sizeof *t->graphs, "step graphs")))
        return DP_ERR_NOMEM;
    dp_step_graph_t *g = find_shape(t, ds, n, micros);
    if (g && g->graph && be->graph_stale(be->ctx, g->graph)) drop_graphs(t);
    if (!g || (!g->graph && g->warm < STEP_GRAPH_WARMUP)) { /* more shapes than graphs, or a warm-up: as made */
        if (g) g->warm++;
        t->graph_counts.as_made++;
        return DP_OK;
    }
    DP_TRY(upload_indices(r, indices, n));
    uint64_t step_seed = dp_seed_mix(t->config.seed, t->step_count); /* this step's forward's (shard_task) */
    if (!g->graph) {
        g->step_seed = step_seed;
        dp_arena_reset(r->arena); /* merging the arena's blocks frees and allocates: not inside the capture */
        DP_TRY(be->graph_begin(be->ctx));
        t->graph_capturing = 1;
        dp_status_t status = dp_trainer_step_devices(t, ds, indices, n, micros);
        t->graph_capturing = 0;
        void *graph = NULL;
        dp_status_t ended = be->graph_end(be->ctx, &graph);
        DP_TRY(status);
        DP_TRY(ended);
        g->graph = graph;
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
