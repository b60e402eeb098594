/* test_cuda_graph.c - the CUDA backend's step graphs (backend.h: graph_*;
 * skipped without a GPU; on the CUDA emulator as emu_test_cuda_graph):
 *
 *   a captured zeroing, upload and Adam (then AdamW) update run nothing
 *     until launched;
 *     each launch then gives the bits of the same calls made uncaptured,
 *     also after the learning rate changed and the step count moved
 *     between launches (the update's scalars are read from device memory,
 *     written from the host optimizer before each launch, not frozen into
 *     the graph: AdamW's decay 1 - lr * weight_decay among them), and with
 *     the uploaded value the graph's constant (its
 *     host buffer overwritten after the capture changes nothing);
 *   a graph is stale once the backend freed device memory after its
 *     capture (graph_stale), not before;
 *   a host synchronisation inside a capture (a download) fails, with a
 *     line naming the capture, as CUDA refuses it: graph_end then gives no
 *     graph, says why, and leaves the device as before the capture (its
 *     failure forgotten: the caller runs the step as made, step_graph.c),
 *     and the same calls made uncaptured then work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/optim.h"
#include "test_cuda_common.h"
#include "testing.h"

enum { N = 1000 };

static const dp_backend_t *be;

/* One step as made: params and grads on the GPU, grads = host grads, the optimizer's update. */
static void step_as_made(dp_optimizer_t *opt, float *p, float *g, const float *host_grads) {
    be->upload(be->ctx, g, host_grads, sizeof(float) * N);
    be->optimizer_update(be->ctx, opt, p, g, 0, N);
}

/* groups: weight-decay groups (optim.h), so that an update is several launches, each reading its group's
 * scalars (adamw's decay factors follow the lr) */
static void check_replay(dp_optim_kind_t kind, int groups) {
    static float start[N], host_grads[N], captured_grads[N], made[N], replayed[N];
    for (int i = 0; i < N; i++) start[i] = 0.01f * (float)(i % 97) - 0.3f, host_grads[i] = 0.002f * (float)(i % 13);
    memcpy(captured_grads, host_grads, sizeof host_grads);
    dp_optim_config_t config = {.kind = kind, .lr = 1e-2f, .weight_decay = kind == DP_OPTIM_ADAMW ? 0.5f : 1e-3f};
    if (groups) config.has_norm_weight_decay = 1, config.has_bias_weight_decay = 1, config.bias_weight_decay = 0.05f;
    printf("  %s%s:\n", dp_optim_kind_name(kind), groups ? " with weight-decay groups" : "");
    dp_optimizer_t *a = NULL, *b = NULL;
    DP_ASSERT(dp_optimizer_new(&config, N, &a) == DP_OK && dp_optimizer_new(&config, N, &b) == DP_OK);
    const dp_decay_range_t ranges[] = {{100, 200, DP_DECAY_NORM}, {300, 50, DP_DECAY_BIAS}, {900, N - 900, DP_DECAY_BIAS}};
    if (groups)
        DP_ASSERT(dp_optimizer_set_decay_ranges(a, ranges, 3) == DP_OK &&
                  dp_optimizer_set_decay_ranges(b, ranges, 3) == DP_OK);
    float *pa = be->alloc(be->ctx, sizeof start, "params"), *ga = be->alloc(be->ctx, sizeof start, "grads");
    float *pb = be->alloc(be->ctx, sizeof start, "params"), *gb = be->alloc(be->ctx, sizeof start, "grads");
    DP_ASSERT(pa && ga && pb && gb);
    be->upload(be->ctx, pa, start, sizeof start);
    be->upload(be->ctx, pb, start, sizeof start);
    /* a first step of each, as made (the optimizer's device state is made here, never in a capture) */
    dp_optimizer_begin_step(a);
    dp_optimizer_begin_step(b);
    step_as_made(a, pa, ga, host_grads);
    step_as_made(b, pb, gb, host_grads);
    CHECK(be->graph_begin && be->graph_end && be->graph_launch && be->graph_stale && be->graph_free,
          "the CUDA backend has no step graphs");
    if (!be->graph_begin) return;
    dp_status_t st = be->graph_begin(be->ctx);
    CHECK(st == DP_OK, "graph_begin: %s", dp_error_message());
    be->zero(be->ctx, gb, sizeof host_grads);
    step_as_made(b, pb, gb, captured_grads); /* the upload: the graph's constant */
    void *graph = NULL;
    st = be->graph_end(be->ctx, &graph);
    CHECK(st == DP_OK && graph, "graph_end: %s", dp_error_message());
    if (!graph) return;
    for (int i = 0; i < N; i++) captured_grads[i] = 1e6f; /* the graph copied the bytes it uploads */
    be->download(be->ctx, replayed, pb, sizeof replayed);
    be->download(be->ctx, made, pa, sizeof made);
    CHECK(memcmp(made, replayed, sizeof made) == 0, "the captured update ran before its launch");
    for (int launch = 0; launch < 3; launch++) {
        if (launch == 2) { /* a schedule's new rate: both see it, the graph through its scalars */
            dp_optimizer_set_lr(a, 3e-2f);
            dp_optimizer_set_lr(b, 3e-2f);
        }
        dp_optimizer_begin_step(a);
        dp_optimizer_begin_step(b);
        be->zero(be->ctx, ga, sizeof host_grads);
        step_as_made(a, pa, ga, host_grads);
        CHECK(!be->graph_stale(be->ctx, graph), "launch %d: the graph is stale with nothing freed", launch);
        st = be->graph_launch(be->ctx, graph, NULL, 0);
        CHECK(st == DP_OK, "graph_launch %d: %s", launch, dp_error_message());
        be->download(be->ctx, made, pa, sizeof made);
        be->download(be->ctx, replayed, pb, sizeof replayed);
        size_t differ = 0;
        for (int i = 0; i < N; i++) differ += memcmp(&made[i], &replayed[i], sizeof made[i]) != 0;
        printf("  launch %d (step %llu, lr %g): %zu of %d parameters differ from the step as made\n", launch,
               (unsigned long long)dp_optimizer_steps(b), (double)dp_optimizer_config(b)->lr, differ, N);
        CHECK(differ == 0, "launch %d: the replayed step differs from the step as made", launch);
        CHECK(made[0] != start[0], "launch %d: the parameters did not move", launch);
    }
    float *scratch = be->alloc(be->ctx, 64, "scratch");
    CHECK(!be->graph_stale(be->ctx, graph), "an allocation made the graph stale");
    be->free(be->ctx, scratch);
    CHECK(be->graph_stale(be->ctx, graph), "a free after the capture left the graph fresh");
    be->graph_free(be->ctx, graph);
    if (be->optimizer_forget) be->optimizer_forget(be->ctx, a), be->optimizer_forget(be->ctx, b);
    dp_optimizer_free(a);
    dp_optimizer_free(b);
    be->free(be->ctx, pa);
    be->free(be->ctx, ga);
    be->free(be->ctx, pb);
    be->free(be->ctx, gb);
}

static void check_refused_sync(void) {
    float *d = be->alloc(be->ctx, 256, "a buffer");
    DP_ASSERT(d);
    float host[64];
    DP_ASSERT(be->graph_begin(be->ctx) == DP_OK);
    be->zero(be->ctx, d, 256);
    be->download(be->ctx, host, d, sizeof host); /* waits for the stream: refused in a capture */
    void *graph = NULL;
    dp_status_t st = be->graph_end(be->ctx, &graph);
    const char *message = dp_error_message();
    printf("  a download inside a capture: %s\n", message);
    CHECK(st != DP_OK && !graph, "graph_end gave a graph after a download inside the capture");
    CHECK(strstr(message, "capturing") != NULL || strstr(message, "capture") != NULL,
          "the failure does not name the capture: %s", message);
    CHECK(isnan(host[0]), "the refused download left %g, not NaN bytes", (double)host[0]);
    CHECK(be->failure(be->ctx) == DP_OK, "the device kept the refused capture's failure: %s", dp_error_message());
    /* as made now: the calls run */
    const float ones[64] = {[0] = 1.0f, [63] = 1.0f};
    be->upload(be->ctx, d, ones, sizeof ones);
    be->download(be->ctx, host, d, sizeof host);
    CHECK(be->failure(be->ctx) == DP_OK, "the calls as made after a refused capture failed: %s", dp_error_message());
    CHECK(memcmp(host, ones, sizeof host) == 0, "as made after a refused capture: %g, %g, expected 1, 1",
          (double)host[0], (double)host[63]);
    be->free(be->ctx, d);
}

int main(void) {
    be = cuda_backend_or_skip("test_cuda_graph");
    check_replay(DP_OPTIM_ADAM, 0);
    check_replay(DP_OPTIM_ADAMW, 0);
    check_replay(DP_OPTIM_ADAMW, 1);
    check_replay(DP_OPTIM_MOMENTUM, 1);
    check_refused_sync();
    return testing_finish("test_cuda_graph");
}
