/* test_emu_graph_streams.c - captures that span streams, and NCCL's sums in
 * graphs, in the CUDA emulator (emu_graph.c, emu_runtime.c, emu_nccl.c),
 * called directly (this program links the emulator's sources, not the
 * backend):
 * - a fork and a join: a stream that waits on an event recorded in a
 *   capture joins it, its work is recorded (nothing runs until the launch,
 *   then all of it), and it leaves the capture with its end;
 * - the end refused as a GPU refuses it: a forked stream not joined back
 *   (cudaErrorStreamCaptureUnjoined, no graph), the end asked on a forked
 *   stream (cudaErrorStreamCaptureUnmatched); a wait on an event of a
 *   capture that ended, between two captures, and of a capture on an event
 *   recorded outside any (cudaErrorStreamCaptureIsolation, the capture
 *   invalidated);
 * with NCCL (a build that found nccl.h), two GPUs:
 * - each GPU's capture holds its member's all-reduce (NCCL's stream forked
 *   in and joined back): nothing summed at the capture; the two graphs
 *   launched from two threads sum in member order, each launch again;
 * - one group with a capturing and a non-capturing stream: ncclInvalidUsage;
 * - in a child process each: both graphs launched from the thread that
 *   made both members aborts with one line (the emulator runs a launch to
 *   its end: the first would wait for ever); one member's graph meeting
 *   the other's sum made outside a graph (ranks that disagree whether to
 *   launch) aborts with one line; and the optimizer's kernel captured
 *   before the origin joined the sum aborts with one line. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_emulator.h"
#include "emu_test_memory.h"
#include "testing.h"

#ifdef DPTRAIN_HAVE_NCCL
#include <nccl.h>
#endif

enum { N = 1000 };

static cudaStream_t new_stream(void) {
    cudaStream_t s = NULL;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
    return s;
}

static cudaEvent_t new_event(void) {
    cudaEvent_t e = NULL;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");
    return e;
}

static int bytes_are(const void *d, unsigned char value, size_t bytes) {
    static unsigned char host[N];
    to_host(host, d, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (host[i] != value) return 0;
    return 1;
}

static int capturing(cudaStream_t s) {
    enum cudaStreamCaptureStatus status;
    cudaStreamIsCapturing(s, &status);
    return status != cudaStreamCaptureStatusNone;
}

static void check_fork_join(void) {
    cudaSetDevice(0);
    cudaStream_t a = new_stream(), b = new_stream();
    cudaEvent_t forked = new_event(), joined = new_event();
    unsigned char *x = device_copy(NULL, N), *y = device_copy(NULL, N);
    cudaMemsetAsync(x, 0, N, a), cudaMemsetAsync(y, 0, N, a), cudaStreamSynchronize(a);
    CHECK(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    cudaMemsetAsync(x, 1, N, a);
    cudaEventRecord(forked, a);
    CHECK(cudaStreamWaitEvent(b, forked, 0) == cudaSuccess && capturing(b), "the fork: b did not join the capture");
    cudaMemsetAsync(y, 2, N, b);
    cudaEventRecord(joined, b);
    CHECK(cudaStreamWaitEvent(a, joined, 0) == cudaSuccess, "the join");
    cudaGraph_t graph = NULL;
    CHECK(cudaStreamEndCapture(a, &graph) == cudaSuccess && graph, "the end after a join: %s",
          cudaGetErrorString(cudaGetLastError()));
    CHECK(!capturing(a) && !capturing(b), "a forked stream still capturing after the end");
    CHECK(bytes_are(x, 0, N) && bytes_are(y, 0, N), "captured work ran before the launch");
    cudaGraphExec_t exec = NULL;
    CHECK(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    CHECK(exec && cudaGraphLaunch(exec, a) == cudaSuccess, "launch");
    CHECK(bytes_are(x, 1, N) && bytes_are(y, 2, N), "the launch ran the origin's and the forked stream's work");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    /* not joined back: no graph, and b is free again */
    cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal);
    cudaEventRecord(forked, a);
    cudaStreamWaitEvent(b, forked, 0);
    cudaMemsetAsync(y, 3, N, b);
    graph = NULL;
    cudaError_t err = cudaStreamEndCapture(a, &graph);
    CHECK(err == cudaErrorStreamCaptureUnjoined && !graph, "an unjoined fork ended with %d (%s)", (int)err,
          cudaGetErrorString(err));
    cudaGetLastError();
    CHECK(!capturing(b) && bytes_are(y, 2, N), "after a refused end: b capturing %d", capturing(b));

    /* the end asked on the forked stream */
    cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal);
    cudaEventRecord(forked, a);
    cudaStreamWaitEvent(b, forked, 0);
    err = cudaStreamEndCapture(b, &graph);
    CHECK(err == cudaErrorStreamCaptureUnmatched && capturing(a) && capturing(b), "an end on the forked stream: %d",
          (int)err);
    cudaGetLastError();
    cudaEventRecord(joined, b);
    cudaStreamWaitEvent(a, joined, 0);
    CHECK(cudaStreamEndCapture(a, &graph) == cudaSuccess && graph, "the end on the origin after that");
    cudaGraphDestroy(graph);

    /* an event of a capture that ended: nothing to wait for */
    err = cudaStreamWaitEvent(b, forked, 0);
    CHECK(err == cudaErrorStreamCaptureIsolation && !capturing(b), "a wait on an ended capture's event: %d", (int)err);
    cudaGetLastError();

    /* a capture may not depend on work outside it: an event recorded outside any capture */
    cudaEvent_t outside = new_event();
    cudaEventRecord(outside, b);
    cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal);
    err = cudaStreamWaitEvent(a, outside, 0);
    CHECK(err == cudaErrorStreamCaptureIsolation, "a capture waiting on an event recorded outside it: %d", (int)err);
    cudaGetLastError();
    err = cudaStreamEndCapture(a, &graph);
    CHECK(err == cudaErrorStreamCaptureInvalidated && !graph, "that capture's end: %d", (int)err);
    cudaGetLastError();

    /* two captures may not depend on each other: the waiting one is invalidated */
    cudaStream_t c = new_stream();
    cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed);
    cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed);
    cudaEventRecord(forked, a);
    err = cudaStreamWaitEvent(c, forked, 0);
    CHECK(err == cudaErrorStreamCaptureIsolation, "a wait across two captures: %d", (int)err);
    cudaGetLastError();
    err = cudaStreamEndCapture(c, &graph);
    CHECK(err == cudaErrorStreamCaptureInvalidated && !graph, "the waiting capture's end: %d", (int)err);
    cudaGetLastError();
    CHECK(cudaStreamEndCapture(a, &graph) == cudaSuccess, "the other capture's end");
    cudaGraphDestroy(graph);
    cudaFree(x), cudaFree(y);
}

#ifdef DPTRAIN_HAVE_NCCL
/* Per GPU: the compute stream (capturing), NCCL's stream, a buffer. */
typedef struct {
    int gpu;
    ncclComm_t comm;
    cudaStream_t stream, nccl_stream;
    cudaEvent_t produced, summed;
    float *buf;
    cudaGraphExec_t exec;
    cudaError_t launched;
} member_t;

static float value(int gpu, int i) { return gpu == 0 ? 0.25f * (float)i : 1.0f / (float)(i + 3); }

static void make_members(member_t m[2]) {
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    ncclGroupStart();
    for (int g = 0; g < 2; g++) {
        m[g].gpu = g;
        cudaSetDevice(g);
        ncclCommInitRank(&m[g].comm, 2, id, g);
    }
    CHECK(ncclGroupEnd() == ncclSuccess, "two communicators");
    static float host[N];
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        m[g].stream = new_stream(), m[g].nccl_stream = new_stream();
        m[g].produced = new_event(), m[g].summed = new_event();
        for (int i = 0; i < N; i++) host[i] = value(g, i);
        m[g].buf = device_copy(host, sizeof host);
    }
}

/* Both members' sums captured; `skip_join`: the origin never waits for the
 * sum, and the optimizer's kernel is captured (the mutation the emulator
 * must refuse). */
static void noop_kernel(void *arg) { (void)arg; }
static void capture_sums(member_t m[2], int skip_join) {
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        CHECK(cudaStreamBeginCapture(m[g].stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin %d", g);
        cudaEventRecord(m[g].produced, m[g].stream);
        cudaStreamWaitEvent(m[g].nccl_stream, m[g].produced, 0);
    }
    ncclGroupStart();
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        ncclAllReduce(m[g].buf, m[g].buf, N, ncclFloat, ncclSum, m[g].comm, m[g].nccl_stream);
    }
    CHECK(ncclGroupEnd() == ncclSuccess, "the captured sums: %s", ncclGetLastError(NULL));
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        cudaEventRecord(m[g].summed, m[g].nccl_stream);
        if (!skip_join) cudaStreamWaitEvent(m[g].stream, m[g].summed, 0);
        int token = 0;
        emu_launch("optim_kernel", 1, 1, m[g].stream, 0, noop_kernel, &token, sizeof token);
        cudaGraph_t graph = NULL;
        CHECK(cudaStreamEndCapture(m[g].stream, &graph) == cudaSuccess && graph, "end %d", g);
        CHECK(graph && cudaGraphInstantiate(&m[g].exec, graph, 0) == cudaSuccess, "instantiate %d", g);
        cudaGraphDestroy(graph);
    }
}

static void *launch_thread(void *arg) {
    member_t *m = arg;
    cudaSetDevice(m->gpu);
    m->launched = cudaGraphLaunch(m->exec, m->stream);
    return NULL;
}

static int summed(const member_t m[2], int times) {
    static float host[N];
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        to_host(host, m[g].buf, sizeof host);
        for (int i = 0; i < N; i++) {
            float want = value(0, i) + value(1, i);
            for (int t = 1; t < times; t++) want = want + want;
            if (host[i] != want) return 0;
        }
    }
    return 1;
}

/* Runs fn in a child process, stderr to a file: 1 when it aborted with a
 * line containing `expect`. */
static int child_aborts(void (*fn)(void), const char *expect) {
    char path[] = "/tmp/dptrain-emu-graph-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char text[2048] = "";
    ssize_t got = pread(fd, text, sizeof text - 1, 0);
    text[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(path);
    int ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(text, expect);
    if (!ok) fprintf(stderr, "child: status %d, stderr '%s'\n", status, text);
    return ok;
}

static void launch_from_one_thread(void) {
    member_t m[2];
    make_members(m);
    capture_sums(m, 0);
    for (int g = 0; g < 2; g++) cudaSetDevice(g), cudaGraphLaunch(m[g].exec, m[g].stream);
}

/* Member 0's graph (its sum captured) launched while member 1 sums
 * outside a graph: ranks that disagree whether to launch their graphs. */
static void *uncaptured_sum(void *arg) {
    member_t *m = arg;
    cudaSetDevice(m->gpu);
    ncclAllReduce(m->buf, m->buf, N, ncclFloat, ncclSum, m->comm, m->nccl_stream);
    return NULL;
}

static void graph_meets_uncaptured(void) {
    member_t m[2];
    make_members(m);
    capture_sums(m, 0);
    pthread_t threads[2];
    pthread_create(&threads[0], NULL, launch_thread, &m[0]);
    pthread_create(&threads[1], NULL, uncaptured_sum, &m[1]);
    pthread_join(threads[0], NULL);
    pthread_join(threads[1], NULL);
}

static void update_before_join(void) {
    member_t m[2];
    make_members(m);
    capture_sums(m, 1);
}

static void check_nccl_in_graphs(void) {
    member_t m[2];
    make_members(m);
    capture_sums(m, 0);
    CHECK(!summed(m, 1), "the capture summed");
    for (int times = 1; times <= 2; times++) {
        pthread_t threads[2];
        for (int g = 0; g < 2; g++) pthread_create(&threads[g], NULL, launch_thread, &m[g]);
        for (int g = 0; g < 2; g++) pthread_join(threads[g], NULL);
        CHECK(m[0].launched == cudaSuccess && m[1].launched == cudaSuccess, "launches: %d %d", (int)m[0].launched,
              (int)m[1].launched);
        CHECK(summed(m, times), "after %d launches of both graphs, not the member-order sum", times);
    }
    /* capture is a collective property: a group with one stream capturing and one not is refused */
    cudaSetDevice(0);
    cudaStreamBeginCapture(m[0].stream, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(m[0].produced, m[0].stream);
    cudaStreamWaitEvent(m[0].nccl_stream, m[0].produced, 0);
    ncclGroupStart();
    for (int g = 0; g < 2; g++) {
        cudaSetDevice(g);
        ncclAllReduce(m[g].buf, m[g].buf, N, ncclFloat, ncclSum, m[g].comm, m[g].nccl_stream);
    }
    ncclResult_t r = ncclGroupEnd();
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "collective property"), "a mixed group: %d, '%s'",
          (int)r, ncclGetLastError(NULL));
    CHECK(summed(m, 2), "a refused mixed group changed the buffers");
    cudaSetDevice(0);
    cudaEventRecord(m[0].summed, m[0].nccl_stream);
    cudaStreamWaitEvent(m[0].stream, m[0].summed, 0);
    cudaGraph_t graph = NULL;
    cudaStreamEndCapture(m[0].stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    for (int g = 0; g < 2; g++) cudaGraphExecDestroy(m[g].exec), ncclCommDestroy(m[g].comm);

    CHECK(child_aborts(launch_from_one_thread, "must be launched from threads of their own"),
          "two members' graphs launched from one thread did not abort with its line");
    CHECK(child_aborts(graph_meets_uncaptured, "takes a captured collective from every member or none"),
          "a graph's sum met by a sum outside a graph did not abort with its line");
    CHECK(child_aborts(update_before_join, "not ordered after an NCCL sum captured"),
          "an update captured before the join did not abort with its line");
}
#endif

int main(void) {
    setenv("DPTRAIN_CUDA_EMU_GPUS", "2", 1);
    check_fork_join();
#ifdef DPTRAIN_HAVE_NCCL
    check_nccl_in_graphs();
#else
    printf("test_emu_graph_streams: NCCL's part skipped (built without nccl.h)\n");
#endif
    return testing_finish("test_emu_graph_streams");
}
