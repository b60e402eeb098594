/* test_cuda_peer.c - the CUDA backend's peer collectives (backend.h peer_*:
 * NCCL between distinct GPUs, src/backend/cuda/peer_nccl.c), on the GPUs
 * there are (a lent GPU machine: test_cuda_peer) and on the CUDA emulator
 * with its emulated NCCL (emu_test_cuda_peer; 3 GPUs unless
 * DPTRAIN_CUDA_EMU_GPUS says otherwise):
 * - peer_id: the GPUs' UUIDs, distinct per GPU, the same for one GPU twice;
 * - a group of every GPU (1 on a one-GPU machine): peer_allreduce (then peer_join) sums a
 *   range that crosses the emulator's 256 Ki-float pieces in every buffer,
 *   in member order (the emulator: bits; a GPU with 3 or more: within a
 *   float's rounding per addition), and leaves the rest of the buffers;
 * - peer_broadcast copies member 0's range into every buffer, the rest
 *   left;
 * - the same sum captured in every member's step graph (graph_begin /
 *   graph_end around peer_allreduce and peer_join): nothing summed by the
 *   capture; the graphs launched from a thread per GPU (as the trainer
 *   does) sum alike, twice for two launches;
 * - two members on one GPU: peer_group_new fails with NCCL's "Duplicate
 *   GPU" (one process with cuda:0 twice);
 * - last (the failure is sticky in every member): a sum while one member
 *   captures and another does not fails with one line (NCCL takes a
 *   captured collective from all members or none);
 * and on the emulator only (it forks: a real CUDA context does not survive
 * fork), one group across two processes (as two MPI ranks):
 * - two processes on GPUs 0 and 1 sum right;
 * - two processes both on GPU 0 are refused in both (ranks sharing a GPU);
 * - members whose counts differ abort, one line in each process, and so do
 *   members summing the same count at different offsets (calls out of order);
 * - a member handed another GPU's memory aborts with one line.
 * Skipped (77) without a GPU and without the emulator. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_cuda_common.h"

#define N 300000 /* floats per buffer: more than one piece of 262,144 */
#define START 1000
#define COUNT 290000

static float value(int member, size_t i) { return member == 0 ? (float)i * 0.5f : 1.0f / (float)(i + member); }

static const dp_backend_t *gpu(int g) {
    const dp_backend_t *be = NULL;
    if (dp_backend_by_name("cuda", g, &be) != DP_OK) return NULL;
    return be;
}

/* buffers[i] on tables[i] = value(first + i, .) */
static float *upload_member(const dp_backend_t *be, int member, float *host) {
    for (size_t i = 0; i < N; i++) host[i] = value(member, i);
    float *buf = be->alloc(be->ctx, sizeof(float) * N, "peer test buffer");
    if (buf) be->upload(be->ctx, buf, host, sizeof(float) * N);
    return buf;
}

/* Whether the downloaded buffer of a member holds the sum over `members`
 * (in member order) inside the range and its own values outside. */
static int check_sum(const float *got, int member, int members, int exact, size_t *bad) {
    for (size_t i = 0; i < N; i++) {
        float want = value(member, i);
        if (i >= START && i < START + COUNT) {
            want = value(0, i);
            for (int m = 1; m < members; m++) want += value(m, i);
        }
        float tolerance = exact ? 0.0f : 1e-6f * (float)members * (want < 0 ? -want : want);
        float d = got[i] - want;
        if (d < 0) d = -d;
        if (d > tolerance || got[i] != got[i]) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

typedef struct {
    const dp_backend_t *be;
    void *graph;
    dp_status_t status;
} launch_t;

static void *launch_thread(void *arg) {
    launch_t *l = arg;
    l->status = l->be->graph_launch(l->be->ctx, l->graph, NULL, 0);
    return NULL;
}

/* The group's sum captured in every member's graph, then launched `times`
 * times from a thread per GPU; the buffers then hold the sum doubled
 * times-1 times. */
static void captured_sum(const dp_backend_t *const *tables, int k, dp_peer_group_t *group, int emulated) {
    static float host[N], first[N];
    float *bufs[8];
    void *graphs[8] = {0};
    for (int g = 0; g < k; g++) bufs[g] = upload_member(tables[g], g, host);
    dp_status_t st = DP_OK;
    for (int g = 0; g < k && st == DP_OK; g++) st = tables[g]->graph_begin(tables[g]->ctx);
    CHECK(st == DP_OK, "graph_begin: %s", dp_error_message());
    if (st != DP_OK) return;
    CHECK(tables[0]->peer_allreduce(group, bufs, START, COUNT) == DP_OK, "captured peer_allreduce: %s",
          dp_error_message());
    CHECK(tables[0]->peer_join(group) == DP_OK, "captured peer_join: %s", dp_error_message());
    for (int g = 0; g < k; g++)
        CHECK(tables[g]->graph_end(tables[g]->ctx, &graphs[g]) == DP_OK && graphs[g], "graph_end on cuda:%d: %s", g,
              dp_error_message());
    for (int g = 0; g < k; g++) {
        tables[g]->download(tables[g]->ctx, host, bufs[g], sizeof host);
        int unchanged = 1;
        for (size_t i = 0; i < N; i++) unchanged &= host[i] == value(g, i);
        CHECK(unchanged, "cuda:%d: the capture changed the buffer", g);
    }
    for (int times = 1; times <= 2; times++) {
        launch_t launches[8];
        pthread_t threads[8];
        for (int g = 0; g < k; g++) {
            launches[g] = (launch_t){tables[g], graphs[g], DP_ERR_ARG};
            if (graphs[g]) pthread_create(&threads[g], NULL, launch_thread, &launches[g]);
        }
        for (int g = 0; g < k; g++) {
            if (graphs[g]) pthread_join(threads[g], NULL);
            CHECK(launches[g].status == DP_OK, "graph_launch on cuda:%d: %s", g, dp_error_message());
        }
        for (int g = 0; g < k; g++) {
            tables[g]->download(tables[g]->ctx, host, bufs[g], sizeof host);
            size_t bad = 0;
            int ok = 1;
            if (times == 1) {
                ok = check_sum(host, g, k, emulated || k <= 2, &bad);
                if (g == 0) memcpy(first, host, sizeof host);
            }
            /* the second launch summed k copies of the first's sum */
            for (size_t i = 0; times == 2 && i < N && ok; i++) {
                float want = first[i];
                for (int m = 1; m < k; m++) want += first[i];
                if (i < START || i >= START + COUNT) want = value(g, i);
                float d = host[i] - want, tolerance = emulated || k <= 2 ? 0.0f : 1e-6f * (float)k * fabsf(want);
                if (!(fabsf(d) <= tolerance)) ok = 0, bad = i;
            }
            CHECK(ok, "cuda:%d, launch %d of the captured sum: element %zu is %.9g", g, times, bad, (double)host[bad]);
        }
    }
    for (int g = 0; g < k; g++) {
        if (graphs[g]) tables[g]->graph_free(tables[g]->ctx, graphs[g]);
        tables[g]->free(tables[g]->ctx, bufs[g]);
    }
    printf("test_cuda_peer: the sum captured in %d GPUs' graphs, launched twice\n", k);
}

/* A sum while cuda:0 captures and cuda:1 does not: refused with one line. */
static void mixed_capture(void) {
    const dp_backend_t *tables[2] = {gpu(0), gpu(1)};
    unsigned char uid[128];
    dp_peer_group_t *group = NULL;
    tables[0]->peer_unique_id(tables[0]->ctx, uid);
    CHECK(tables[0]->peer_group_new(tables, 2, uid, 2, 0, 0.0, &group) == DP_OK, "a group of 2: %s",
          dp_error_message());
    if (!group) return;
    static float host[N];
    float *bufs[2] = {upload_member(tables[0], 0, host), upload_member(tables[1], 1, host)};
    CHECK(tables[0]->graph_begin(tables[0]->ctx) == DP_OK, "graph_begin: %s", dp_error_message());
    dp_status_t st = tables[0]->peer_allreduce(group, bufs, START, COUNT);
    CHECK(st != DP_OK && strstr(dp_error_message(), "1 of the group's 2 GPUs are capturing a step graph"),
          "a sum with one member capturing: status %d, '%s'", (int)st, dp_error_message());
    void *graph = NULL;
    tables[0]->graph_end(tables[0]->ctx, &graph);
    CHECK(!graph, "a graph from a capture whose sum failed");
    tables[0]->peer_group_free(group);
}

/* One process, every GPU in one group. */
static void group_in_process(int gpus, int emulated) {
    const dp_backend_t *tables[8];
    float *bufs[8];
    static float host[N];
    int k = gpus > 8 ? 8 : gpus;
    for (int g = 0; g < k; g++) {
        tables[g] = gpu(g);
        CHECK(tables[g] && tables[g]->peer_group_new, "cuda:%d: no peer collectives (a build without NCCL?)", g);
        if (!tables[g] || !tables[g]->peer_group_new) return;
    }
    unsigned char ids[8][16];
    for (int g = 0; g < k; g++) CHECK(tables[g]->peer_id(tables[g]->ctx, ids[g]) == DP_OK, "peer_id: %s", dp_error_message());
    for (int g = 1; g < k; g++) CHECK(memcmp(ids[0], ids[g], 16) != 0, "cuda:0 and cuda:%d have one UUID", g);
    unsigned char again[16];
    tables[0]->peer_id(tables[0]->ctx, again);
    CHECK(memcmp(again, ids[0], 16) == 0, "cuda:0's UUID changed");
    unsigned char uid[128];
    CHECK(tables[0]->peer_unique_id(tables[0]->ctx, uid) == DP_OK, "peer_unique_id: %s", dp_error_message());
    dp_peer_group_t *group = NULL;
    dp_status_t st = tables[0]->peer_group_new(tables, k, uid, k, 0, 0.0, &group);
    CHECK(st == DP_OK && group, "a group of %d GPUs: %s", k, dp_error_message());
    if (!group) return;
    for (int g = 0; g < k; g++) bufs[g] = upload_member(tables[g], g, host);
    CHECK(tables[0]->peer_allreduce(group, bufs, START, COUNT) == DP_OK, "peer_allreduce: %s", dp_error_message());
    CHECK(tables[0]->peer_join(group) == DP_OK, "peer_join: %s", dp_error_message()); /* the download after the sum */
    for (int g = 0; g < k; g++) {
        tables[g]->download(tables[g]->ctx, host, bufs[g], sizeof host);
        size_t bad = 0;
        int ok = check_sum(host, g, k, emulated || k <= 2, &bad);
        CHECK(ok, "cuda:%d of %d: element %zu is %.9g", g, k, bad, (double)host[bad]);
        tables[g]->free(tables[g]->ctx, bufs[g]);
    }
    printf("test_cuda_peer: a group of %d GPUs in one process summed %d floats\n", k, COUNT);
    /* peer_broadcast: member 0's range in every buffer, the rest left */
    for (int g = 0; g < k; g++) bufs[g] = upload_member(tables[g], g, host);
    CHECK(tables[0]->peer_broadcast(group, bufs, START, COUNT) == DP_OK, "peer_broadcast: %s", dp_error_message());
    CHECK(tables[0]->peer_join(group) == DP_OK, "peer_join: %s", dp_error_message());
    for (int g = 0; g < k; g++) {
        tables[g]->download(tables[g]->ctx, host, bufs[g], sizeof host);
        size_t bad = N;
        for (size_t i = 0; i < N && bad == N; i++)
            if (host[i] != value(i >= START && i < START + COUNT ? 0 : g, i)) bad = i;
        CHECK(bad == N, "cuda:%d after the broadcast: element %zu is %.9g", g, bad, (double)host[bad % N]);
        tables[g]->free(tables[g]->ctx, bufs[g]);
    }
    captured_sum(tables, k, group, emulated);
    tables[0]->peer_group_free(group);

    /* NCCL refuses two members on one GPU */
    const dp_backend_t *twice[2] = {tables[0], tables[0]};
    tables[0]->peer_unique_id(tables[0]->ctx, uid);
    group = NULL;
    st = tables[0]->peer_group_new(twice, 2, uid, 2, 0, 0.0, &group);
    CHECK(st != DP_OK && !group && strstr(dp_error_message(), "Duplicate GPU"),
          "cuda:0 twice in one group: status %d, '%s'", (int)st, dp_error_message());
    if (group) tables[0]->peer_group_free(group);
}

/* --- Two processes (the emulator only) ------------------------------------------------ */

typedef enum { CHILD_SUM, CHILD_COUNT_DIFFERS, CHILD_OFFSET_DIFFERS } child_job_t;

/* A forked member: GPU `g` of this process, member `member` of 2, stderr to
 * err_path; exits 0 when its sum is right, 2 when the group was refused
 * (the message in err_path), 1 otherwise. */
static pid_t child(int g, int member, const unsigned char uid[128], child_job_t job, const char *err_path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (!freopen(err_path, "w", stderr)) _exit(3);
    static float host[N];
    const dp_backend_t *be = gpu(g);
    if (!be) _exit(3);
    dp_peer_group_t *group = NULL;
    if (be->peer_group_new(&be, 1, uid, 2, member, 0.0, &group) != DP_OK) {
        fprintf(stderr, "%s\n", dp_error_message());
        fflush(stderr);
        _exit(2);
    }
    float *buf = upload_member(be, member, host);
    size_t count = job == CHILD_COUNT_DIFFERS && member == 1 ? COUNT - 10 : COUNT;
    size_t start = job == CHILD_OFFSET_DIFFERS && member == 1 ? START + 16 : START; /* another bucket */
    if (be->peer_allreduce(group, &buf, start, count) != DP_OK || be->peer_join(group) != DP_OK) _exit(1);
    be->download(be->ctx, host, buf, sizeof host);
    size_t bad = 0;
    _exit(check_sum(host, member, 2, 1, &bad) ? 0 : 1);
}

static int wait_status(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

/* The lines of a file (qemu-user's own line about a signal not counted); the first in `first`. */
static int lines_of(const char *path, char *first, size_t size) {
    FILE *f = fopen(path, "r");
    int lines = 0;
    char line[1024];
    *first = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "qemu: ", 6) == 0) continue;
        if (!lines++) snprintf(first, size, "%s", line);
    }
    if (f) fclose(f);
    return lines;
}

static void two_processes(const dp_backend_t *be0) {
    unsigned char uid[128];
    char err0[4096], err1[4096], line[1024];
    snprintf(err0, sizeof err0, "%s", testing_tmp_file("member0.err"));
    snprintf(err1, sizeof err1, "%s", testing_tmp_file("member1.err"));

    be0->peer_unique_id(be0->ctx, uid);
    pid_t a = child(0, 0, uid, CHILD_SUM, err0), b = child(1, 1, uid, CHILD_SUM, err1);
    int sa = wait_status(a), sb = wait_status(b);
    CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0,
          "two processes on GPUs 0 and 1: statuses %d, %d", sa, sb);

    be0->peer_unique_id(be0->ctx, uid);
    a = child(0, 0, uid, CHILD_SUM, err0);
    b = child(0, 1, uid, CHILD_SUM, err1);
    sa = wait_status(a);
    sb = wait_status(b);
    CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 2 && WIFEXITED(sb) && WEXITSTATUS(sb) == 2,
          "two processes both on GPU 0: not refused in both (statuses %d, %d)", sa, sb);
    lines_of(err0, line, sizeof line);
    CHECK(strstr(line, "Duplicate GPU") != NULL, "two processes on GPU 0: member 0 says '%s'", line);
    lines_of(err1, line, sizeof line);
    CHECK(strstr(line, "Duplicate GPU") != NULL, "two processes on GPU 0: member 1 says '%s'", line);

    be0->peer_unique_id(be0->ctx, uid);
    a = child(0, 0, uid, CHILD_COUNT_DIFFERS, err0);
    b = child(1, 1, uid, CHILD_COUNT_DIFFERS, err1);
    sa = wait_status(a);
    sb = wait_status(b);
    CHECK(WIFSIGNALED(sa) && WTERMSIG(sa) == SIGABRT && WIFSIGNALED(sb) && WTERMSIG(sb) == SIGABRT,
          "members whose counts differ: not aborted (statuses %d, %d)", sa, sb);
    for (int m = 0; m < 2; m++) {
        int lines = lines_of(m ? err1 : err0, line, sizeof line);
        CHECK(lines == 1 && strstr(line, "member 1 sums 289990 floats") && strstr(line, "member 0 sums 290000"),
              "counts differ: member %d's stderr (%d lines) '%s'", m, lines, line);
    }

    /* the same count at another offset: calls out of order (buckets issued in another order) */
    be0->peer_unique_id(be0->ctx, uid);
    a = child(0, 0, uid, CHILD_OFFSET_DIFFERS, err0);
    b = child(1, 1, uid, CHILD_OFFSET_DIFFERS, err1);
    sa = wait_status(a);
    sb = wait_status(b);
    CHECK(WIFSIGNALED(sa) && WTERMSIG(sa) == SIGABRT && WIFSIGNALED(sb) && WTERMSIG(sb) == SIGABRT,
          "members at different offsets: not aborted (statuses %d, %d)", sa, sb);
    for (int m = 0; m < 2; m++) {
        int lines = lines_of(m ? err1 : err0, line, sizeof line);
        CHECK(lines == 1 && strstr(line, "at offset 4064 of its buffer") && strstr(line, "not made in the same order"),
              "offsets differ: member %d's stderr (%d lines) '%s'", m, lines, line);
    }

    /* a member handed another GPU's memory */
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
        if (!freopen(err0, "w", stderr)) _exit(3);
        const dp_backend_t *tables[2] = {gpu(0), gpu(1)};
        dp_peer_group_t *group = NULL;
        unsigned char id[128];
        tables[0]->peer_unique_id(tables[0]->ctx, id);
        if (tables[0]->peer_group_new(tables, 2, id, 2, 0, 0.0, &group) != DP_OK) _exit(3);
        float *other = tables[1]->alloc(tables[1]->ctx, 4096, "GPU 1's");
        float *bufs[2] = {other, other};
        tables[0]->peer_allreduce(group, bufs, 0, 16);
        _exit(0);
    }
    int sc = wait_status(c);
    int lines = lines_of(err0, line, sizeof line);
    CHECK(WIFSIGNALED(sc) && WTERMSIG(sc) == SIGABRT, "another GPU's memory: not aborted (status %d)", sc);
    CHECK(lines == 1 && strstr(line, "ncclAllReduce") && strstr(line, "memory of another GPU"),
          "another GPU's memory: stderr (%d lines) '%s'", lines, line);
}

int main(void) {
    const char *module = getenv("DPTRAIN_CUDA_MODULE");
    int emulated = module && strstr(module, "emu") != NULL;
    if (emulated) setenv("DPTRAIN_CUDA_EMU_GPUS", "3", 0); /* before the first CUDA call */
    const dp_backend_t *be0 = cuda_backend_or_skip("test_cuda_peer");
    if (!be0->peer_group_new) {
        printf("test_cuda_peer: SKIPPED: the CUDA module was built without NCCL (nothing was checked)\n");
        return TEST_SKIPPED;
    }
    int gpus = dp_backend_cuda_count(NULL);
    group_in_process(gpus, emulated);
    if (emulated && gpus >= 2) two_processes(be0);
    if (gpus >= 2) mixed_capture(); /* last: it leaves every member failed */
    return testing_finish("test_cuda_peer");
}
