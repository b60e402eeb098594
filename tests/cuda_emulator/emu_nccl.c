/* emu_nccl.c - the NCCL functions the CUDA backend calls (peer_nccl.c), for
 * the CUDA emulator (cuda_emulator.h): ncclGetUniqueId, ncclCommInitRank,
 * ncclGroupStart/End, ncclAllReduce (float, sum), ncclBroadcast (float),
 * ncclCommDestroy,
 * ncclCommAbort, ncclCommGetAsyncError,
 * ncclGetErrorString, ncclGetLastError. The CUDA events and stream calls
 * NCCL's ordering uses are emu_runtime.c's.
 *
 * The members of one unique id meet in POSIX shared memory named by it
 * (shm_open), in one process or in several (MPI ranks each loading the
 * emulator): a header (a process-shared mutex and condition variable
 * making a barrier; each member's physical GPU; the current collective's
 * count and buffer offset per member) and one slot of SLOT_FLOATS per
 * member. An all-reduce goes in pieces of SLOT_FLOATS: every member copies
 * its piece into its slot, all meet at the barrier, every member sums the
 * slots in member order (member 0 + 1 + 2 ...: so the result is the host
 * path's device-order bits; real NCCL's ring sums in another order for 3
 * members or more) into its buffer, and all meet again before the slots
 * are reused (a broadcast the same way, every member taking the root's
 * slot; members calling different collectives abort). It refuses, as NCCL
 * does, two members on one GPU (the
 * physical index after CUDA_VISIBLE_DEVICES: the UUID): every member's
 * ncclCommInitRank fails with "Duplicate GPU detected". Where NCCL would
 * hang or read another GPU's memory it aborts with one line: a buffer that
 * is not memory of the communicator's GPU, a stream of another GPU,
 * members whose counts differ, and members summing at different offsets
 * of their buffers (in dptrain's use every member's buffer is a replica of
 * one layout: different offsets mean the members' calls are out of order,
 * which on a GPU sums the wrong buckets or deadlocks); a member waiting
 * more than WAIT_SEC for the others aborts too, and so does, at once, a
 * thread that drives several members of one id and makes a call for one of
 * them outside ncclGroupStart/End (NCCL would wait in it for the others,
 * which that thread never gets to issue). An all-reduce with a member whose
 * GPU faulted (or whose earlier all-reduce hangs) hangs on the others'
 * GPUs: nothing is summed, and the other members' devices hold their
 * synchronising calls back (emu_runtime.c) until ncclCommAbort; their
 * ncclCommDestroy aborts with one line (NCCL would wait for the kernel).
 * DPTRAIN_CUDA_EMU_NCCL_HANG=N makes the N-th all-reduce hang so, with no
 * member failed (a remote member that stopped answering).
 *
 * An all-reduce queued on a capturing stream (a CUDA graph, emu_graph.c;
 * NCCL's stream joins the capture by waiting on an event of it) sums
 * nothing then: it becomes a node of that stream's graph, checked as a
 * call would be, and sums each time the graph is launched, that member
 * alone meeting the others at the barrier. So the members' graphs must be
 * launched from threads of their own (the emulator runs a launch to its
 * end; on a GPU a launch returns at once, and NCCL advises threads of
 * their own there too): a launch by the thread that made several members
 * of the communicator aborts with one line. One group's calls are all
 * captured or none (NCCL: capture is a collective property), and a call
 * met by members in a graph and members outside one aborts with one line
 * (ranks that disagree whether to launch their graphs).
 *
 * DESIGN. The calls of one group (ncclGroupStart/End, per thread as in
 * NCCL) are kept and run at ncclGroupEnd, all of them by the calling
 * thread: the barrier counts that thread's members at once (its weight),
 * so one thread drives every member of its process. In one process every
 * communicator of one id shares one mapping (a registry under a mutex), so
 * that the members' threads see one mutex at one address (ThreadSanitizer
 * keys on it). Member 0's process unlinks the name once all have joined.
 */
#define _GNU_SOURCE
#ifdef DPTRAIN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_emulator.h"

#define MAX_MEMBERS 64
#define SLOT_FLOATS ((size_t)1 << 18)
#define READY 0x6470656d75636c31ull /* the header is initialised */
#define WAIT_SEC 300
#define ID_MAGIC "dptrain-emu-nccl"

typedef struct {
    _Atomic uint64_t ready;
    int nranks;
    pthread_mutex_t lock; /* process-shared: guards what follows */
    pthread_cond_t cond;
    int arrived;
    uint64_t generation;
    int gpu[MAX_MEMBERS];        /* each member's physical GPU; -1 until it joins */
    size_t count[MAX_MEMBERS];   /* the current all-reduce's count per member */
    size_t offset[MAX_MEMBERS];  /* and its buffer's offset in its allocation */
    int stuck[MAX_MEMBERS];      /* its GPU faulted or its last all-reduce hangs */
    int root[MAX_MEMBERS];       /* the current call's root: -1 an all-reduce, else a broadcast's */
    int graph[MAX_MEMBERS];      /* the current call runs in a launched graph (captured) */
    float slots[];               /* (nranks, SLOT_FLOATS) */
} shared_t;

typedef struct mapping {
    char name[96]; /* id_name's */
    shared_t *s;
    size_t bytes;
    int refs;
    struct ncclComm *members[MAX_MEMBERS]; /* this process's, by rank; under registry_lock */
    struct mapping *next;
} mapping_t;

struct ncclComm {
    mapping_t *map;
    int rank, nranks, device, gpu;
    pthread_t maker;
    int hung; /* its last all-reduce cannot end (a member's GPU faulted) */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mapping_t *mappings;
static int hung_count[MAX_MEMBERS]; /* per device: its communicators that hang; under registry_lock */

static int device_hung(int device) {
    pthread_mutex_lock(&registry_lock);
    int hung = device >= 0 && device < MAX_MEMBERS && hung_count[device] > 0;
    pthread_mutex_unlock(&registry_lock);
    return hung;
}

static void set_hung(struct ncclComm *c, int hung) {
    pthread_mutex_lock(&registry_lock);
    if (c->hung != hung && c->device >= 0 && c->device < MAX_MEMBERS) hung_count[c->device] += hung ? 1 : -1;
    c->hung = hung;
    pthread_mutex_unlock(&registry_lock);
}

static void register_probe(void) { emu_set_nccl_hang_probe(device_hung); }

/* DPTRAIN_CUDA_EMU_NCCL_HANG=N: this process's N-th all-reduce (1-based,
 * counting each ncclGroupEnd that sums) hangs on every member with no
 * error anywhere, as the GPUs see a member in another process that stopped
 * answering; read once. */
static long hang_at(void) {
    static _Atomic long at = -1;
    long v = atomic_load(&at);
    if (v < 0) {
        const char *e = getenv("DPTRAIN_CUDA_EMU_NCCL_HANG");
        v = e && *e ? atol(e) : 0;
        atomic_store(&at, v);
    }
    return v;
}
static _Atomic long allreduce_runs;

static __thread char last_error[256];

static ncclResult_t set_error(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t set_error(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return r;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emulated NCCL: %s\n", line);
    fflush(stderr);
    abort();
}

/* --- ids and shared memory ------------------------------------------------------ */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static _Atomic unsigned counter;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC - 1);
    unsigned char noise[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, noise, sizeof noise) : -1;
    if (fd >= 0) close(fd);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (got != (ssize_t)sizeof noise) memcpy(noise, &now, sizeof noise < sizeof now ? sizeof noise : sizeof now);
    snprintf(id->internal + 16, 64, "%ld-%u-", (long)getpid(), atomic_fetch_add(&counter, 1));
    size_t used = strlen(id->internal + 16) + 16;
    for (int i = 0; i < 16 && used + 2 < 64; i++, used += 2) snprintf(id->internal + used, 3, "%02x", noise[i]);
    return ncclSuccess;
}

/* The shared memory's name of an id ("" when the id is none of ours). */
static void id_name(const ncclUniqueId *id, char *name, size_t size) {
    char text[49];
    memcpy(text, id->internal + 16, 48);
    text[48] = 0;
    if (memcmp(id->internal, ID_MAGIC, sizeof ID_MAGIC - 1) != 0 || !*text) *name = 0;
    else snprintf(name, size, "/dptrain-emu-nccl-%s", text);
}

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void init_header(shared_t *s, int nranks) {
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&s->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    s->nranks = nranks;
    for (int i = 0; i < MAX_MEMBERS; i++) s->gpu[i] = -1;
    atomic_store(&s->ready, READY);
}

static void detach(mapping_t *m);

/* This process's mapping of `name` for nranks members (made by the first
 * member to come, in any process); NULL with last_error. */
static mapping_t *attach(const char *name, int nranks) {
    size_t bytes = sizeof(shared_t) + sizeof(float) * SLOT_FLOATS * (size_t)nranks;
    pthread_mutex_lock(&registry_lock);
    for (mapping_t *m = mappings; m; m = m->next)
        if (strcmp(m->name, name) == 0) {
            m->refs++;
            pthread_mutex_unlock(&registry_lock);
            if (m->s->nranks != nranks) {
                set_error(ncclInvalidUsage, "members of one unique id disagree on the number of ranks (%d, %d)",
                          m->s->nranks, nranks);
                detach(m);
                return NULL;
            }
            return m;
        }
    int made = 1, fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
        made = 0;
        fd = shm_open(name, O_RDWR, 0600);
    }
    shared_t *s = NULL;
    if (fd >= 0 && made && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        fd = -1;
    }
    double start = monotonic();
    struct stat st;
    while (fd >= 0 && !made && (fstat(fd, &st) != 0 || (size_t)st.st_size < bytes) && monotonic() - start < WAIT_SEC)
        usleep(1000); /* the maker is still sizing it */
    if (fd >= 0) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        s = p == MAP_FAILED ? NULL : p;
    }
    mapping_t *m = s ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        if (s) munmap(s, bytes);
        pthread_mutex_unlock(&registry_lock);
        set_error(ncclSystemError, "shared memory %s: %s", name, strerror(errno));
        return NULL;
    }
    if (made) init_header(s, nranks);
    while (atomic_load(&s->ready) != READY && monotonic() - start < WAIT_SEC) usleep(1000);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->s = s;
    m->bytes = bytes;
    m->refs = 1;
    m->next = mappings;
    mappings = m;
    pthread_mutex_unlock(&registry_lock);
    if (atomic_load(&s->ready) != READY || s->nranks != nranks) {
        set_error(ncclInvalidUsage, "members of one unique id disagree on the number of ranks (%d, %d)", s->nranks,
                  nranks);
        detach(m);
        return NULL;
    }
    return m;
}

static void detach(mapping_t *m) {
    pthread_mutex_lock(&registry_lock);
    if (--m->refs == 0) {
        for (mapping_t **p = &mappings; *p; p = &(*p)->next)
            if (*p == m) {
                *p = m->next;
                break;
            }
        munmap(m->s, m->bytes);
        free(m);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* Every member of s arrives (this thread brings `weight` of them); the last
 * one releases all. */
static void barrier(shared_t *s, int weight, const char *what) {
    pthread_mutex_lock(&s->lock);
    uint64_t generation = s->generation;
    s->arrived += weight;
    if (s->arrived == s->nranks) {
        s->arrived = 0;
        s->generation++;
        pthread_cond_broadcast(&s->cond);
    }
    double start = monotonic();
    while (s->generation == generation) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&s->cond, &s->lock, &until);
        if (s->generation == generation && monotonic() - start > WAIT_SEC) {
            int arrived = s->arrived;
            pthread_mutex_unlock(&s->lock);
            die("%s: waited %d s for the other members (%d of %d here): a member never made this call", what,
                WAIT_SEC, arrived, s->nranks);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* --- groups --------------------------------------------------------------------- */

typedef struct {
    int init; /* 1: ncclCommInitRank, 0: ncclAllReduce */
    ncclComm_t *out;
    ncclUniqueId id;
    int nranks, rank, device;
    ncclComm_t comm;
    const float *send;
    float *recv;
    size_t count;
    cudaStream_t stream;
    int captured; /* queued on a capturing stream: a node of its graph */
    int root;     /* ncclBroadcast's root; -1: ncclAllReduce */
} op_t;

static const char *collective_name(int root) { return root < 0 ? "ncclAllReduce" : "ncclBroadcast"; }

static __thread int group_depth;
static __thread op_t *pending;
static __thread int pending_count, pending_cap;

static ncclResult_t keep(const op_t *op) {
    if (pending_count == pending_cap) {
        int cap = pending_cap ? 2 * pending_cap : 16;
        op_t *grown = realloc(pending, sizeof *grown * (size_t)cap);
        if (!grown) return set_error(ncclSystemError, "out of memory");
        pending = grown;
        pending_cap = cap;
    }
    pending[pending_count++] = *op;
    return ncclSuccess;
}

/* ops[0..n): ncclCommInitRank of one id, this thread's members. */
static ncclResult_t run_inits(op_t *ops, int n) {
    char name[96];
    id_name(&ops[0].id, name, sizeof name);
    if (!*name) return set_error(ncclInvalidArgument, "ncclCommInitRank: a unique id not made by ncclGetUniqueId");
    for (int i = 1; i < n; i++)
        if (memcmp(&ops[i].id, &ops[0].id, sizeof ops[0].id) != 0 || ops[i].nranks != ops[0].nranks)
            return set_error(ncclInvalidUsage, "ncclCommInitRank: one group of one thread makes communicators of "
                                               "one unique id (the emulator's limit)");
    mapping_t *m = attach(name, ops[0].nranks);
    if (!m) return ncclInvalidUsage;
    shared_t *s = m->s;
    int twice = -1;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < n; i++) {
        if (s->gpu[ops[i].rank] >= 0) twice = ops[i].rank;
        s->gpu[ops[i].rank] = emu_physical_gpu(ops[i].device);
    }
    pthread_mutex_unlock(&s->lock);
    if (twice >= 0) die("ncclCommInitRank: rank %d of one unique id joined twice", twice);
    barrier(s, n, "ncclCommInitRank");
    for (int i = 0; i < n; i++)
        if (ops[i].rank == 0) shm_unlink(name); /* every member has it mapped */
    /* NCCL's refusal: two members on one GPU (every member fails alike) */
    int first = -1, second = -1;
    for (int a = 0; a < s->nranks && first < 0; a++)
        for (int b = a + 1; b < s->nranks && first < 0; b++)
            if (s->gpu[a] == s->gpu[b]) first = a, second = b;
    if (first >= 0) {
        int gpu = s->gpu[first];
        barrier(s, n, "ncclCommInitRank"); /* every member has read the table */
        detach(m); /* attach's one reference */
        return set_error(ncclInvalidUsage, "Duplicate GPU detected: rank %d and rank %d both on GPU %d", second,
                         first, gpu);
    }
    static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
    pthread_once(&probe_once, register_probe);
    for (int i = 0; i < n; i++) {
        struct ncclComm *c = calloc(1, sizeof *c);
        if (!c) die("out of memory");
        *c = (struct ncclComm){m, ops[i].rank, ops[i].nranks, ops[i].device, emu_physical_gpu(ops[i].device),
                               pthread_self(), 0};
        *ops[i].out = c;
        pthread_mutex_lock(&registry_lock);
        if (i > 0) m->refs++; /* one reference per communicator */
        m->members[c->rank] = c;
        pthread_mutex_unlock(&registry_lock);
    }
    return ncclSuccess;
}

/* ops[0..n): one collective of this thread's members of one id. */
static ncclResult_t run_collectives(op_t *ops, int n) {
    shared_t *s = ops[0].comm->map->s;
    const char *call = collective_name(ops[0].root);
    for (int i = 1; i < n; i++)
        if (ops[i].comm->map != ops[0].comm->map)
            return set_error(ncclInvalidUsage, "%s: one group of one thread calls over one unique id's "
                                               "communicators (the emulator's limit)", call);
    int injected = hang_at() > 0 && atomic_fetch_add(&allreduce_runs, 1) + 1 == hang_at();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < n; i++) {
        s->count[ops[i].comm->rank] = ops[i].count;
        s->root[ops[i].comm->rank] = ops[i].root;
        s->graph[ops[i].comm->rank] = ops[i].captured;
        s->offset[ops[i].comm->rank] = emu_allocation_offset(ops[i].send);
        s->stuck[ops[i].comm->rank] = ops[i].comm->hung || emu_device_faulting(ops[i].comm->device) || injected;
    }
    pthread_mutex_unlock(&s->lock);
    size_t count = ops[0].count;
    for (size_t done = 0;; done += SLOT_FLOATS) {
        for (int i = 0; i < n; i++) {
            size_t piece = ops[i].count - done < SLOT_FLOATS ? ops[i].count - done : SLOT_FLOATS;
            if (done < ops[i].count)
                memcpy(s->slots + SLOT_FLOATS * (size_t)ops[i].comm->rank, ops[i].send + done, sizeof(float) * piece);
        }
        barrier(s, n, call);
        if (done == 0)
            for (int r = 1; r < s->nranks; r++)
                if (s->count[r] != s->count[0] || s->offset[r] != s->offset[0])
                    die("%s: member %d sums %zu floats at offset %zu of its buffer, member 0 sums %zu "
                        "at offset %zu: the members' calls differ (not made in the same order)",
                        call, r, s->count[r], s->offset[r], s->count[0], s->offset[0]);
        for (int r = 1; done == 0 && r < s->nranks; r++)
            if (s->graph[r] != s->graph[0])
                die("member %d's call runs %s a CUDA graph, member 0's %s: NCCL takes a captured collective from "
                    "every member or none (capture is a collective property)", r, s->graph[r] ? "in" : "outside",
                    s->graph[0] ? "in one" : "outside one");
        for (int r = 1; done == 0 && r < s->nranks; r++)
            if (s->root[r] != s->root[0])
                die("member %d calls %s, member 0 %s: the members' calls differ (not made in the same order)", r,
                    collective_name(s->root[r]), collective_name(s->root[0]));
        int stuck = 0;
        for (int r = 0; done == 0 && r < s->nranks; r++) stuck |= s->stuck[r];
        if (stuck) { /* every member sees it alike: all leave after the next barrier, nothing summed */
            for (int i = 0; i < n; i++)
                if (!emu_device_faulting(ops[i].comm->device)) set_hung(ops[i].comm, 1);
            barrier(s, n, call);
            return ncclSuccess;
        }
        size_t piece = count - done < SLOT_FLOATS ? count - done : SLOT_FLOATS;
        for (int i = 0; i < n; i++) {
            float *out = ops[i].recv + done;
            if (ops[i].root >= 0) { /* a broadcast: the root's piece */
                memcpy(out, s->slots + SLOT_FLOATS * (size_t)ops[i].root, sizeof(float) * piece);
                continue;
            }
            for (size_t j = 0; j < piece; j++) { /* member order: ((m0 + m1) + m2) + ... */
                float sum = s->slots[j];
                for (int r = 1; r < s->nranks; r++) sum += s->slots[SLOT_FLOATS * (size_t)r + j];
                out[j] = sum;
            }
        }
        barrier(s, n, call); /* the slots are free again */
        if (done + piece >= count) break;
    }
    return ncclSuccess;
}

/* A captured collective, run where its graph is launched: this member
 * alone (the others' graphs run on their own threads, as NCCL asks of
 * several GPUs in one process with graphs; each member meets them at the
 * barrier as a GPU's kernel would). */
static int made_here(const mapping_t *m, const char *name);

static void replay_collective(void *arg, const void *stream) {
    op_t *op = arg;
    if (made_here(op->comm->map, NULL) > 1)
        die("a graph with a captured %s launched by the thread that drives %d members of its communicator: the "
            "emulator runs a launch to its end, so the members' graphs must be launched from threads of their own "
            "(NCCL advises the same for graphs on several GPUs of a process)",
            collective_name(op->root), made_here(op->comm->map, NULL));
    if (emu_stream_device(stream) != op->comm->device)
        die("%s: a graph launched on a stream of GPU %d, the communicator's GPU is %d", collective_name(op->root),
            emu_stream_device(stream), op->comm->device);
    ncclResult_t r = run_collectives(op, 1);
    if (r != ncclSuccess) die("%s in a graph: %s", collective_name(op->root), ncclGetErrorString(r));
}

/* The captured collectives ops[0..n): a node each in its stream's graph. */
static ncclResult_t capture_collectives(const op_t *ops, int n) {
    for (int i = 0; i < n; i++)
        if (!ops[i].captured)
            return set_error(ncclInvalidUsage, "%s: of one group's streams some capture a CUDA graph and some do "
                                               "not (capture is a collective property)", collective_name(ops[i].root));
    for (int i = 0; i < n; i++) /* DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=nccl (emu_graph.c): the group's call, all of it */
        if (emu_capture_refuses_nccl(ops[i].stream))
            return set_error(ncclInvalidUsage, "%s: refused in a CUDA graph's capture "
                             "(DPTRAIN_CUDA_EMU_REFUSE_CAPTURE)", collective_name(ops[i].root));
    for (int i = 0; i < n; i++) {
        if (emu_capture_call(ops[i].stream, replay_collective, &ops[i], sizeof ops[i]) != cudaSuccess)
            return set_error(ncclInvalidUsage, "%s: its stream's capture was invalidated", collective_name(ops[i].root));
        emu_capture_summed(ops[i].stream);
    }
    return ncclSuccess;
}

/* Runs and forgets the thread's kept calls: the communicators first. */
static ncclResult_t run_pending(void) {
    op_t *ops = pending;
    int n = pending_count, inits = 0;
    pending = NULL;
    pending_count = pending_cap = 0;
    if (n == 0) return ncclSuccess;
    op_t *sorted = malloc(sizeof *sorted * (size_t)n); /* the inits, then the sums */
    if (!sorted) {
        free(ops);
        return set_error(ncclSystemError, "out of memory");
    }
    for (int i = 0; i < n; i++)
        if (ops[i].init) sorted[inits++] = ops[i];
    for (int i = 0, k = inits; i < n; i++)
        if (!ops[i].init) sorted[k++] = ops[i];
    ncclResult_t r = inits ? run_inits(sorted, inits) : ncclSuccess;
    int captured = 0;
    for (int i = inits; i < n; i++) captured |= sorted[i].captured;
    if (r == ncclSuccess && n > inits)
        r = captured ? capture_collectives(sorted + inits, n - inits) : run_collectives(sorted + inits, n - inits);
    free(sorted);
    free(ops);
    return r;
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return set_error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    return run_pending();
}

/* The communicators of mapping `m` (or of the id named `name`) that this
 * thread made and has not destroyed. */
static int made_here(const mapping_t *m, const char *name) {
    int count = 0;
    pthread_mutex_lock(&registry_lock);
    for (const mapping_t *p = mappings; p; p = p->next)
        if (p == m || (name && strcmp(p->name, name) == 0))
            for (int r = 0; r < MAX_MEMBERS; r++)
                count += p->members[r] && pthread_equal(p->members[r]->maker, pthread_self());
    pthread_mutex_unlock(&registry_lock);
    return count;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    *comm = NULL;
    if (nranks < 1 || nranks > MAX_MEMBERS)
        return set_error(ncclInvalidArgument, "nranks %d (the emulator's range: 1 to %d)", nranks, MAX_MEMBERS);
    if (rank < 0 || rank >= nranks) return set_error(ncclInvalidArgument, "rank %d of %d", rank, nranks);
    op_t op = {.init = 1, .out = comm, .id = commId, .nranks = nranks, .rank = rank, .device = emu_current_device()};
    if (group_depth > 0) return keep(&op);
    char name[96];
    id_name(&commId, name, sizeof name);
    if (*name && made_here(NULL, name) > 0)
        die("ncclCommInitRank outside ncclGroupStart/End by a thread that already made a member of this id: NCCL "
            "waits in it for every member, and this thread never gets to make the others");
    return run_inits(&op, 1);
}

/* ncclAllReduce (root -1) and ncclBroadcast: checked, then kept in the
 * thread's group, captured, or run. */
static ncclResult_t collective(const char *call, const void *sendbuff, void *recvbuff, size_t count, int root,
                               ncclComm_t comm, cudaStream_t stream) {
    if (!comm) return set_error(ncclInvalidArgument, "%s: no communicator", call);
    if (root >= comm->nranks) return set_error(ncclInvalidArgument, "%s: root %d of %d", call, root, comm->nranks);
    int capturing = emu_capture_status(stream);
    if (capturing == 2) return set_error(ncclInvalidUsage, "%s: its stream's capture was invalidated", call);
    emu_check_device_memory(call, "the send buffer", sendbuff, sizeof(float) * count, comm->device);
    emu_check_device_memory(call, "the receive buffer", recvbuff, sizeof(float) * count, comm->device);
    if (emu_stream_device(stream) != comm->device)
        die("%s: the stream is of GPU %d, the communicator's GPU is %d", call, emu_stream_device(stream), comm->device);
    if (!capturing) emu_stream_summed(stream); /* in stream order (emu_runtime.c) */
    op_t o = {.comm = comm, .send = sendbuff, .recv = recvbuff, .count = count, .stream = stream,
              .captured = capturing, .root = root};
    if (group_depth > 0) return keep(&o);
    int members = made_here(comm->map, NULL);
    if (members > 1)
        die("%s outside ncclGroupStart/End by a thread that drives %d members of one communicator: NCCL may wait in "
            "it for the others, which this thread never gets to issue", call, members);
    return capturing ? capture_collectives(&o, 1) : run_collectives(&o, 1);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    if (datatype != ncclFloat || op != ncclSum)
        return set_error(ncclInvalidArgument, "ncclAllReduce: the emulator sums floats only");
    return collective("ncclAllReduce", sendbuff, recvbuff, count, -1, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (datatype != ncclFloat) return set_error(ncclInvalidArgument, "ncclBroadcast: the emulator copies floats only");
    if (root < 0) return set_error(ncclInvalidArgument, "ncclBroadcast: root %d", root);
    return collective("ncclBroadcast", sendbuff, recvbuff, count, root, comm, stream);
}

static void forget(ncclComm_t comm) {
    pthread_mutex_lock(&registry_lock);
    if (comm->map->members[comm->rank] == comm) comm->map->members[comm->rank] = NULL;
    pthread_mutex_unlock(&registry_lock);
    detach(comm->map);
    free(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (comm->hung)
        die("ncclCommDestroy: member %d's all-reduce cannot end (a member's GPU faulted): NCCL would wait for it "
            "for ever; ncclCommAbort is the way out", comm->rank);
    forget(comm);
    return ncclSuccess;
}

/* Ends what hangs (NCCL's kernels see the abort flag) and frees. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    set_hung(comm, 0);
    forget(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm || !asyncError) return set_error(ncclInvalidArgument, "ncclCommGetAsyncError: no communicator");
    *asyncError = ncclSuccess; /* a member's fault shows in its GPU's calls (emu_runtime.c), not here */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return last_error;
}

#endif
