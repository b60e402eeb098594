/* comm_mpi.c - the process level of comm.h over Open MPI: start-up, sums
 * across ranks, the agreement check, the communication thread and its
 * watchdog. The only file with MPI in it; a build without MPI
 * (DPTRAIN_HAVE_MPI undefined) compiles the single-rank versions at the
 * end, which refuse to run under mpirun.
 *
 * DESIGN. MPI is initialised with MPI_THREAD_SERIALIZED by the thread that
 * calls dp_world_init, which then starts the communication thread (Redis
 * bio.c's shape: one mutex, two condition variables, one FIFO). From then on
 * that thread makes every MPI call: every dp_world_* collective, from any
 * thread (the trainer's caller, device 0's worker during a sync-batch-norm
 * forward, the CLI's metrics sums), is queued as a coll_t and run in queue
 * order; blocking calls wait for their own entry (waiter_t), queued sums
 * (dp_world_sum_floats_async: gradient buckets while backward runs) run a
 * callback on the communication thread and are waited for together with
 * dp_world_drain. Every rank must queue the same collectives in the same
 * order; callers that queue from several threads order their entries
 * themselves (parallel.c publishes buckets in bucket order). The thread
 * posts each collective nonblocking (MPI_Iallreduce, MPI_Ireduce,
 * MPI_Ibcast) and polls it with MPI_Test, so it is never stuck inside MPI:
 * between tests it checks the timeout (the watchdog, in the spirit of
 * PyTorch's NCCL watchdog and Horovod's stall inspector: one line naming
 * the silent ranks; comm_mpi_stall.c tells which ranks) and a pending
 * dp_world_abort or dp_world_leave. A collective that stalls or fails
 * breaks the world (comm.broken): the thread abandons the request (an MPI
 * collective cannot be cancelled), fails it and every collective queued
 * then or later with DP_ERR_COMM and that line, and makes no MPI call
 * again; dp_world_finalize then skips MPI_Finalize (which would wait for
 * the abandoned collective), and the caller exits non-zero, which makes
 * mpirun end the other ranks. The library never exits by itself. The
 * thread that called dp_world_init calls MPI again only in
 * dp_world_finalize (MPI_Finalize, after joining the communication thread)
 * and, when no communication thread runs, in dp_world_abort. A program may
 * call MPI itself while no collective is queued (the benchmark does). */
#include "dptrain/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dptrain/status.h"
#include "../core/hash.h"

/* Started by a launcher? Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI
 * launchers set PMI_SIZE. */
static int launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
}

/* FNV-1a, to compare options across ranks without sending them. */
static uint64_t fingerprint(const void *bytes, size_t n) { return dp_fnv1a(DP_FNV1A_SEED, bytes, n); }

static _Atomic double timeout_sec = 300.0;

void dp_world_set_timeout(double seconds) { atomic_store(&timeout_sec, seconds); }
double dp_world_timeout(void) { return atomic_load(&timeout_sec); }

#ifdef DPTRAIN_HAVE_MPI
#include <mpi.h>

#include "comm_mpi_internal.h"

static int mpi_started;
static int world_rank, world_size;

/* --- The communication thread ------------------------------------------------ */

typedef enum { COLL_ALLREDUCE, COLL_REDUCE_TO_ROOT, COLL_BCAST, COLL_ALLGATHER } coll_kind_t;

/* A caller blocked until its collective has run. */
typedef struct {
    int finished;
    dp_status_t status;
    char message[512];
} waiter_t;

typedef struct {
    coll_kind_t kind;
    void *buffer;
    size_t count; /* elements */
    MPI_Datatype type;
    MPI_Op op;
    const char *what;      /* for messages, "MPI_Allreduce of the gradients" */
    dp_world_done_fn done; /* queued: run on the communication thread after success */
    void *ctx;
    waiter_t *waiter;      /* blocking: the caller waits for this */
} coll_t;

#define QUEUE_CAPACITY 1024

static struct {
    pthread_t thread;
    int running;
    pthread_mutex_t lock;
    pthread_cond_t work;     /* signalled: a collective was queued, or stop / abort */
    pthread_cond_t finished; /* broadcast: a collective has finished */
    coll_t queue[QUEUE_CAPACITY];
    /* queue[head % CAPACITY] runs next, or is running; tail - head are queued
     * or running. Changed under lock; read without it only to spin. */
    _Atomic size_t head, tail;
    int stopping;
    /* DP_OK, or why the world broke (a collective stalled or failed, or this
     * rank leaves): no MPI call from then on, every collective fails with it.
     * Set under lock. */
    dp_status_t broken;
    char broken_message[512];
    dp_status_t failure; /* the first failure of a queued (non-blocking) collective since the last drain */
    char failure_message[512];
    double mpi_seconds; /* inside MPI collectives, all so far */
} comm = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static atomic_int abort_requested, abort_code, leaving;

/* How the communication thread waits for a collective: while a thread
 * waits for a result (a blocking call, dp_world_drain: `waiting` > 0), or
 * for the first SPIN_SEC, MPI_Test in a tight loop; otherwise (gradient
 * buckets while the devices are still in backward, and the peer is not
 * there yet) it sleeps POLL_SLEEP_NS between tests, leaving the core to the
 * devices. Also only while someone waits, the communication thread spins
 * for up to LINGER_SEC for its next collective before sleeping on its
 * condition variable: a wake-up on a loaded machine costs tens of
 * microseconds. (The waiting callers themselves do not spin: on 2 cores
 * that took the CPU from the communication threads and measured slower.) */
#define SPIN_SEC 50e-6
#define POLL_SLEEP_NS 20000L
#define LINGER_SEC 100e-6
static atomic_int waiting; /* threads waiting for a collective's result */

/* Spins until *counter != value or LINGER_SEC have passed. */
static void linger_while_equal(_Atomic size_t *counter, size_t value) {
    double start = dp_comm_monotonic();
    while (atomic_load(counter) == value && dp_comm_monotonic() - start < LINGER_SEC) {
    }
}

/* An MPI error code in words: "WHAT failed: MPI's reason". */
static void mpi_error(const char *what, int code, char *message, size_t size) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    snprintf(message, size, "%s failed: %.*s", what, len, text);
}

/* wait_request's result for a collective given up (stalled, or this rank
 * leaves); MPI's own codes are >= 0. */
#define ABANDONED (-1)

/* Waits for this rank's collective number `seq`: MPI's code, or ABANDONED
 * with the reason in why[0..size). */
static int wait_request(MPI_Request *request, int64_t seq, const char *what, char *why, size_t size) {
    double start = dp_comm_monotonic(), limit = atomic_load(&timeout_sec);
    for (;;) {
        int done = 0, rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (atomic_load(&abort_requested)) MPI_Abort(MPI_COMM_WORLD, atomic_load(&abort_code));
        double waited = dp_comm_monotonic() - start;
        if (limit > 0.0 && waited >= limit) {
            dp_describe_stall(seq, what, waited, limit, why, size);
            return ABANDONED;
        }
        if (atomic_load(&leaving)) {
            snprintf(why, size, "this rank left the job during %s", what);
            return ABANDONED;
        }
        dp_notices_tick();
        if (waited >= SPIN_SEC && atomic_load(&waiting) == 0) {
            struct timespec pause = {0, POLL_SLEEP_NS};
            nanosleep(&pause, NULL);
        }
    }
}

/* MPI counts are ints: larger collectives go in pieces of at most 2^30
 * elements, one after the other. */
#define PIECE ((size_t)1 << 30)

/* Posts elements [done, done + count) of collective c. */
static int post_piece(const coll_t *c, size_t done, int count, MPI_Request *request) {
    int size;
    MPI_Type_size(c->type, &size);
    char *at = (char *)c->buffer + done * (size_t)size;
    dp_notices_announce();
    if (c->kind == COLL_ALLREDUCE)
        return MPI_Iallreduce(MPI_IN_PLACE, at, count, c->type, c->op, MPI_COMM_WORLD, request);
    if (c->kind == COLL_REDUCE_TO_ROOT)
        return MPI_Ireduce(world_rank == 0 ? MPI_IN_PLACE : at, at, count, c->type, c->op, 0, MPI_COMM_WORLD,
                           request);
    if (c->kind == COLL_ALLGATHER) /* count: each rank's part; buffer: all of them */
        return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->buffer, count, c->type, MPI_COMM_WORLD,
                              request);
    return MPI_Ibcast(at, count, c->type, 0, MPI_COMM_WORLD, request);
}

/* Breaks the world (the first reason stays); with comm.lock held. */
static void break_locked(dp_status_t status, const char *message) {
    if (comm.broken != DP_OK) return;
    comm.broken = status;
    snprintf(comm.broken_message, sizeof comm.broken_message, "%s", message);
}

/* One collective's end: its callback, then the queue's bookkeeping. A
 * failure (MPI's error or an abandoned wait, described in `why`) breaks the
 * world; so does every collective after it, with the same reason. */
static void finish(const coll_t *c, int rc, const char *why, double spent) {
    char message[512] = "";
    if (rc == ABANDONED) snprintf(message, sizeof message, "%s", why);
    else if (rc != MPI_SUCCESS) mpi_error(c->what, rc, message, sizeof message);
    if (rc == MPI_SUCCESS && c->done) c->done(c->ctx);
    pthread_mutex_lock(&comm.lock);
    comm.mpi_seconds += spent;
    comm.head++;
    if (rc != MPI_SUCCESS) break_locked(DP_ERR_COMM, message);
    dp_status_t status = rc == MPI_SUCCESS ? DP_OK : comm.broken;
    if (c->waiter) {
        c->waiter->status = status;
        snprintf(c->waiter->message, sizeof c->waiter->message, "%s", status ? comm.broken_message : "");
        c->waiter->finished = 1;
    } else if (status != DP_OK && comm.failure == DP_OK) {
        comm.failure = status;
        snprintf(comm.failure_message, sizeof comm.failure_message, "%s", comm.broken_message);
    }
    pthread_cond_broadcast(&comm.finished);
    pthread_mutex_unlock(&comm.lock);
}

/* Runs the collectives batch[0..n) on this, the communication, thread:
 * all posted at once (MPI matches nonblocking collectives in the order they
 * are posted, the same on every rank), then finished in order. A collective
 * over more than PIECE elements comes alone and goes piece after piece. */
#define BATCH_MAX 64
static void run_batch(const coll_t *batch, int n) {
    MPI_Request requests[BATCH_MAX];
    int rcs[BATCH_MAX];
    char why[512] = "";
    double last = dp_comm_monotonic();
    if (n == 1 && batch[0].count > PIECE) {
        int rc = MPI_SUCCESS;
        for (size_t done = 0; done < batch[0].count && rc == MPI_SUCCESS; done += PIECE) {
            size_t count = batch[0].count - done < PIECE ? batch[0].count - done : PIECE;
            rc = post_piece(&batch[0], done, (int)count, &requests[0]);
            if (rc == MPI_SUCCESS) rc = wait_request(&requests[0], dp_notices_joined(), batch[0].what, why, sizeof why);
            if (rc != ABANDONED) dp_notices_collect();
        }
        finish(&batch[0], rc, why, dp_comm_monotonic() - last);
        return;
    }
    int64_t first = dp_notices_joined() + 1; /* the number of batch[0] */
    for (int i = 0; i < n; i++) rcs[i] = post_piece(&batch[i], 0, (int)batch[i].count, &requests[i]);
    for (int i = 0; i < n; i++) {
        if (rcs[i] == MPI_SUCCESS && !why[0]) rcs[i] = wait_request(&requests[i], first + i, batch[i].what, why, sizeof why);
        else if (rcs[i] == MPI_SUCCESS) rcs[i] = ABANDONED; /* after an abandoned one: no more MPI */
        if (!why[0]) dp_notices_collect();
        double now = dp_comm_monotonic();
        finish(&batch[i], rcs[i], why, now - last);
        last = now;
    }
}

/* The world is broken: batch[0..n) fail without MPI. */
static void fail_batch(const coll_t *batch, int n) {
    for (int i = 0; i < n; i++) finish(&batch[i], ABANDONED, comm.broken_message, 0.0);
}

static void *comm_main(void *arg) {
    (void)arg;
    coll_t batch[BATCH_MAX];
    pthread_mutex_lock(&comm.lock);
    for (;;) {
        if (comm.head == comm.tail && !comm.stopping && atomic_load(&waiting) > 0) {
            pthread_mutex_unlock(&comm.lock);
            linger_while_equal(&comm.tail, comm.head);
            pthread_mutex_lock(&comm.lock);
        }
        while (comm.head == comm.tail && !comm.stopping && !atomic_load(&abort_requested)) {
            if (!dp_notices_on() || comm.broken) {
                pthread_cond_wait(&comm.work, &comm.lock);
                continue;
            }
            /* idle: keep beating (see notices) */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)(HEARTBEAT_SEC * 1e9);
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&comm.work, &comm.lock, &until);
            pthread_mutex_unlock(&comm.lock);
            dp_notices_tick();
            pthread_mutex_lock(&comm.lock);
        }
        if (atomic_load(&abort_requested)) {
            pthread_mutex_unlock(&comm.lock);
            MPI_Abort(MPI_COMM_WORLD, atomic_load(&abort_code));
        }
        if (comm.head == comm.tail) break; /* stopping, and nothing left to run */
        int n = 0;
        for (size_t i = comm.head; i != comm.tail && n < BATCH_MAX; i++) {
            const coll_t *c = &comm.queue[i % QUEUE_CAPACITY];
            if (n > 0 && c->count > PIECE) break;
            batch[n++] = *c;
            if (c->count > PIECE) break;
        }
        int broken = comm.broken != DP_OK;
        pthread_mutex_unlock(&comm.lock);
        if (broken) fail_batch(batch, n);
        else run_batch(batch, n);
        pthread_mutex_lock(&comm.lock);
    }
    int mpi_usable = comm.broken == DP_OK;
    pthread_mutex_unlock(&comm.lock);
    dp_notices_stop(mpi_usable);
    return NULL;
}

/* Queues c (waiting for room if the queue is full); with comm.lock held. */
static void enqueue_locked(const coll_t *c) {
    DP_ASSERT(!pthread_equal(pthread_self(), comm.thread)); /* the thread would wait for itself */
    while (comm.tail - comm.head == QUEUE_CAPACITY) pthread_cond_wait(&comm.finished, &comm.lock);
    comm.queue[comm.tail % QUEUE_CAPACITY] = *c;
    comm.tail++;
    pthread_cond_signal(&comm.work);
}

/* Runs c on the communication thread and waits for it. */
static dp_status_t run_blocking(coll_t c) {
    if (comm.broken && !comm.running) return dp_fail(comm.broken, "%s", comm.broken_message); /* after a leave */
    if (!comm.running) return DP_OK; /* no MPI: one rank, nothing to sum */
    waiter_t waiter = {0};
    c.waiter = &waiter;
    atomic_fetch_add(&waiting, 1);
    pthread_mutex_lock(&comm.lock);
    enqueue_locked(&c);
    while (!waiter.finished) pthread_cond_wait(&comm.finished, &comm.lock);
    pthread_mutex_unlock(&comm.lock);
    atomic_fetch_sub(&waiting, 1);
    return waiter.status == DP_OK ? DP_OK : dp_fail(waiter.status, "%s", waiter.message);
}

int dp_world_has_mpi(void) { return 1; }

dp_status_t dp_world_init(int *argc, char ***argv, dp_world_t *world) {
    world->rank = 0;
    world->size = 1;
    if (!launched_by_mpirun()) return DP_OK;
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return dp_fail(DP_ERR_COMM, "MPI_Init_thread failed");
    mpi_started = 1;
    if (provided < MPI_THREAD_SERIALIZED)
        return dp_fail(DP_ERR_COMM, "MPI_Init_thread: this MPI provides thread level %d, dptrain needs "
                       "MPI_THREAD_SERIALIZED (%d)", provided, MPI_THREAD_SERIALIZED);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);
    world_rank = world->rank;
    world_size = world->size;
    DP_TRY(dp_notices_start(world_rank, world_size));
    if (pthread_create(&comm.thread, NULL, comm_main, NULL) != 0)
        return dp_fail(DP_ERR_NOMEM, "cannot start the communication thread");
    comm.running = 1;
    return DP_OK;
}

void dp_world_finalize(void) {
    if (comm.running) {
        pthread_mutex_lock(&comm.lock);
        comm.stopping = 1;
        pthread_cond_signal(&comm.work);
        pthread_mutex_unlock(&comm.lock);
        pthread_join(comm.thread, NULL);
        comm.running = 0;
    }
    /* after an abandoned collective MPI_Finalize would wait for it */
    if (mpi_started && comm.broken == DP_OK) MPI_Finalize();
    mpi_started = 0;
}

void dp_world_leave(void) {
    if (!mpi_started) return;
    atomic_store(&leaving, 1);
    pthread_mutex_lock(&comm.lock);
    break_locked(DP_ERR_COMM, "this rank left the job");
    comm.stopping = 1;
    pthread_cond_signal(&comm.work);
    pthread_mutex_unlock(&comm.lock);
    if (comm.running) pthread_join(comm.thread, NULL);
    comm.running = 0;
    mpi_started = 0; /* never finalized: mpirun ends the others when this process exits non-zero */
}

void dp_world_abort(int code) {
    if (!mpi_started || world_size <= 1) return;
    if (!comm.running || pthread_equal(pthread_self(), comm.thread)) MPI_Abort(MPI_COMM_WORLD, code);
    /* the communication thread owns MPI: it aborts between two tests */
    atomic_store(&abort_code, code);
    atomic_store(&abort_requested, 1);
    pthread_mutex_lock(&comm.lock);
    pthread_cond_signal(&comm.work);
    pthread_mutex_unlock(&comm.lock);
    struct timespec pause = {30, 0};
    nanosleep(&pause, NULL);
    _exit(code); /* MPI_Abort should have ended this process long before */
}

dp_status_t dp_world_sum_floats(float *buffer, size_t n) {
    return run_blocking((coll_t){COLL_ALLREDUCE, buffer, n, MPI_FLOAT, MPI_SUM, "MPI_Allreduce of the gradients",
                                 NULL, NULL, NULL});
}

void dp_world_sum_floats_async(float *buffer, size_t n, dp_world_done_fn done, void *ctx) {
    if (!comm.running && comm.broken) return; /* after a leave: dp_world_drain reports it */
    if (!comm.running) {
        if (done) done(ctx);
        return;
    }
    coll_t c = {COLL_ALLREDUCE, buffer, n, MPI_FLOAT, MPI_SUM, "MPI_Allreduce of a gradient bucket", done, ctx, NULL};
    pthread_mutex_lock(&comm.lock);
    enqueue_locked(&c);
    pthread_mutex_unlock(&comm.lock);
}

dp_status_t dp_world_drain(void) {
    if (!comm.running && comm.broken) return dp_fail(comm.broken, "%s", comm.broken_message);
    if (!comm.running) return DP_OK;
    atomic_fetch_add(&waiting, 1);
    pthread_mutex_lock(&comm.lock);
    while (comm.head != comm.tail) pthread_cond_wait(&comm.finished, &comm.lock);
    dp_status_t status = comm.failure;
    char message[sizeof comm.failure_message];
    snprintf(message, sizeof message, "%s", comm.failure_message);
    comm.failure = DP_OK;
    pthread_mutex_unlock(&comm.lock);
    atomic_fetch_sub(&waiting, 1);
    return status == DP_OK ? DP_OK : dp_fail(status, "%s", message);
}

double dp_world_mpi_seconds(void) {
    pthread_mutex_lock(&comm.lock);
    double seconds = comm.mpi_seconds;
    pthread_mutex_unlock(&comm.lock);
    return seconds;
}

dp_status_t dp_world_reduce_to_root(float *buffer, size_t n) {
    return run_blocking((coll_t){COLL_REDUCE_TO_ROOT, buffer, n, MPI_FLOAT, MPI_SUM,
                                 "MPI_Reduce of the gradients to the server", NULL, NULL, NULL});
}

dp_status_t dp_world_broadcast(float *buffer, size_t n) {
    return run_blocking((coll_t){COLL_BCAST, buffer, n, MPI_FLOAT, MPI_SUM,
                                 "MPI_Bcast from rank 0 (parameters or buffers)", NULL, NULL, NULL});
}

dp_status_t dp_world_sum_doubles(double *buffer, int n) {
    return run_blocking((coll_t){COLL_ALLREDUCE, buffer, (size_t)n, MPI_DOUBLE, MPI_SUM,
                                 "MPI_Allreduce of the statistics", NULL, NULL, NULL});
}

static dp_status_t allgather(const void *mine, void *all, size_t n, const char *what) {
    if (!comm.running) {
        if (comm.broken) return dp_fail(comm.broken, "%s", comm.broken_message);
        memcpy(all, mine, n);
        return DP_OK;
    }
    DP_ASSERT(n <= PIECE);
    memcpy((char *)all + (size_t)world_rank * n, mine, n);
    return run_blocking((coll_t){COLL_ALLGATHER, all, n, MPI_BYTE, MPI_SUM, what, NULL, NULL, NULL});
}

dp_status_t dp_world_allgather_bytes(const void *mine, void *all, size_t n) {
    return allgather(mine, all, n, "MPI_Allgather of the devices' identities");
}

/* One rank's part of dp_world_agree. */
typedef struct {
    int32_t status;
    char message[508];
} agree_entry_t;

dp_status_t dp_world_agree(dp_status_t mine) {
    if (!comm.running && !comm.broken) return mine;
    agree_entry_t me = {.status = (int32_t)mine};
    if (mine != DP_OK) snprintf(me.message, sizeof me.message, "%s", dp_error_message());
    agree_entry_t *all = dp_alloc_zeroed((size_t)world_size, sizeof *all, "the ranks' statuses");
    if (!all) return DP_ERR_NOMEM;
    dp_status_t status = allgather(&me, all, sizeof me, "MPI_Allgather of the ranks' set-up statuses");
    int first = -1;
    for (int r = 0; status == DP_OK && r < world_size && first < 0; r++)
        if (all[r].status != DP_OK) first = r;
    if (status == DP_OK && first == world_rank)
        status = dp_fail(mine, "%s", me.message);
    else if (status == DP_OK && first >= 0)
        status = dp_fail((dp_status_t)all[first].status, "rank %d of %d: %.*s", first, world_size,
                         (int)sizeof all[first].message, all[first].message);
    free(all);
    return status;
}

dp_status_t dp_world_broadcast_bytes(void *buffer, size_t n) {
    return run_blocking((coll_t){COLL_BCAST, buffer, n, MPI_BYTE, MPI_SUM, "MPI_Bcast of a unique id from rank 0",
                                 NULL, NULL, NULL});
}

int dp_world_stalled_ranks(int *ranks, int max) {
    pthread_mutex_lock(&comm.lock);
    int n = comm.broken != DP_OK ? dp_stall_suspects(ranks, max) : 0;
    pthread_mutex_unlock(&comm.lock);
    return n;
}

dp_status_t dp_world_check_same(const dp_world_t *world, const char *what, const void *bytes, size_t n) {
    if (!comm.running || world->size == 1) return DP_OK;
    uint64_t mine = fingerprint(bytes, n), root = mine;
    DP_TRY(run_blocking((coll_t){COLL_BCAST, &root, 1, MPI_UINT64_T, MPI_SUM, "the start-up agreement check",
                                 NULL, NULL, NULL}));
    int differs = mine != root ? world->rank : world->size;
    DP_TRY(run_blocking((coll_t){COLL_ALLREDUCE, &differs, 1, MPI_INT, MPI_MIN, "the start-up agreement check",
                                 NULL, NULL, NULL}));
    if (differs < world->size)
        return dp_fail(DP_ERR_ARG, "rank %d's %s differ from rank 0's: every rank must run the same command",
                       differs, what);
    return DP_OK;
}

#else /* no MPI in this build: one rank */

int dp_world_has_mpi(void) { return 0; }

dp_status_t dp_world_init(int *argc, char ***argv, dp_world_t *world) {
    (void)argc;
    (void)argv;
    world->rank = 0;
    world->size = 1;
    if (launched_by_mpirun())
        return dp_fail(DP_ERR_ARG, "started by mpirun, but this dptrain was built without MPI: multi-process "
                                   "training needs an MPI build (install libopenmpi-dev and rebuild)");
    return DP_OK;
}

void dp_world_finalize(void) {}

void dp_world_leave(void) {}

int dp_world_stalled_ranks(int *ranks, int max) {
    (void)ranks;
    (void)max;
    return 0;
}

dp_status_t dp_world_agree(dp_status_t mine) { return mine; }

void dp_world_abort(int code) { (void)code; }

dp_status_t dp_world_sum_floats(float *buffer, size_t n) {
    (void)buffer;
    (void)n;
    return DP_OK;
}

dp_status_t dp_world_sum_doubles(double *buffer, int n) {
    (void)buffer;
    (void)n;
    return DP_OK;
}

void dp_world_sum_floats_async(float *buffer, size_t n, dp_world_done_fn done, void *ctx) {
    (void)buffer;
    (void)n;
    if (done) done(ctx);
}

dp_status_t dp_world_drain(void) { return DP_OK; }

double dp_world_mpi_seconds(void) { return 0.0; }

dp_status_t dp_world_reduce_to_root(float *buffer, size_t n) {
    (void)buffer;
    (void)n;
    return DP_OK;
}

dp_status_t dp_world_broadcast(float *buffer, size_t n) {
    (void)buffer;
    (void)n;
    return DP_OK;
}

dp_status_t dp_world_allgather_bytes(const void *mine, void *all, size_t n) {
    memcpy(all, mine, n);
    return DP_OK;
}

dp_status_t dp_world_broadcast_bytes(void *buffer, size_t n) {
    (void)buffer;
    (void)n;
    return DP_OK;
}

dp_status_t dp_world_check_same(const dp_world_t *world, const char *what, const void *bytes, size_t n) {
    (void)world;
    (void)what;
    (void)fingerprint(bytes, n);
    return DP_OK;
}
#endif
