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
 * the silent ranks, then _exit(3)) and a pending dp_world_abort. The
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

/* Started by a launcher? Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI
 * launchers set PMI_SIZE. */
static int launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
}

/* FNV-1a, to compare options across ranks without sending them. */
static uint64_t fingerprint(const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static _Atomic double timeout_sec = 300.0;

void dp_world_set_timeout(double seconds) { atomic_store(&timeout_sec, seconds); }
double dp_world_timeout(void) { return atomic_load(&timeout_sec); }

#ifdef DPTRAIN_HAVE_MPI
#include <mpi.h>

static int mpi_started;
static int world_rank, world_size;

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- Notices: arrival and heartbeat (more than 2 ranks) ----------------------
 * Which ranks does a stalled collective wait for? With 2 ranks, the other
 * one. With more, every communication thread sends its count of collectives
 * joined to every peer on a side communicator (MPI_Isend of one int64, tag
 * 0): before joining each collective (an arrival notice), and every
 * HEARTBEAT_SEC while it waits or idles (a heartbeat). Each rank keeps one
 * MPI_Irecv posted per peer, takes what has arrived every few milliseconds,
 * and notes when it last heard from each peer. At a stall:
 *   - peers not heard from for SILENT_SEC are silent (stopped or dead: a
 *     stopped process answers nothing; a live one, even one stuck inside a
 *     collective, keeps sending heartbeats from its communication thread);
 *   - if none is, the peers whose count is below the stalled collective's
 *     number have not reached it (alive but stuck elsewhere).
 * (Counts alone are not enough: a rank stopped in the middle of a
 * collective has reached it, yet the others cannot finish it, and a live
 * rank waiting for it looks behind to a third rank.) Messages between two
 * ranks arrive in order, so the last one received is the newest. If the
 * previous notice to a peer is still in flight (that peer is not
 * receiving), the next one to it is skipped. */
#define HEARTBEAT_SEC 0.25
#define SILENT_SEC 1.0
static MPI_Comm notice_comm = MPI_COMM_NULL;
static int64_t my_collectives;                 /* collectives this rank has joined */
static int64_t *peer_collectives;              /* (world_size) the last count of each peer */
static double *peer_heard;                     /* (world_size) when it arrived (monotonic) */
static int64_t *notice_in, *notice_out;        /* (world_size) message buffers */
static MPI_Request *notice_recv, *notice_send; /* (world_size) */
static double last_sent, last_collected;

static int notices_on(void) { return notice_comm != MPI_COMM_NULL; }

static dp_status_t notices_start(void) {
    if (world_size <= 2) return DP_OK;
    size_t n = (size_t)world_size;
    peer_collectives = dp_alloc_zeroed(n, sizeof *peer_collectives, "notices");
    peer_heard = dp_alloc_zeroed(n, sizeof *peer_heard, "notices");
    notice_in = dp_alloc_zeroed(n, sizeof *notice_in, "notices");
    notice_out = dp_alloc_zeroed(n, sizeof *notice_out, "notices");
    notice_recv = dp_alloc_zeroed(n, sizeof *notice_recv, "notices");
    notice_send = dp_alloc_zeroed(n, sizeof *notice_send, "notices");
    if (!peer_collectives || !peer_heard || !notice_in || !notice_out || !notice_recv || !notice_send)
        return DP_ERR_NOMEM;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &notice_comm) != MPI_SUCCESS)
        return dp_fail(DP_ERR_IO, "MPI_Comm_dup of the notice communicator failed");
    double now = monotonic();
    for (int p = 0; p < world_size; p++) {
        notice_recv[p] = notice_send[p] = MPI_REQUEST_NULL;
        peer_heard[p] = now;
        if (p != world_rank) MPI_Irecv(&notice_in[p], 1, MPI_INT64_T, p, 0, notice_comm, &notice_recv[p]);
    }
    return DP_OK;
}

/* Takes every notice that has arrived. */
static void notices_collect(void) {
    double now = monotonic();
    last_collected = now;
    for (int p = 0; notices_on() && p < world_size; p++) {
        int arrived = 1;
        while (p != world_rank && arrived) {
            if (MPI_Test(&notice_recv[p], &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
            if (!arrived) break;
            peer_collectives[p] = notice_in[p];
            peer_heard[p] = now;
            MPI_Irecv(&notice_in[p], 1, MPI_INT64_T, p, 0, notice_comm, &notice_recv[p]);
        }
    }
}

/* Sends this rank's count to every peer. */
static void notices_send(void) {
    last_sent = monotonic();
    for (int p = 0; notices_on() && p < world_size; p++) {
        if (p == world_rank) continue;
        int sent = 1;
        if (notice_send[p] != MPI_REQUEST_NULL) MPI_Test(&notice_send[p], &sent, MPI_STATUS_IGNORE);
        if (!sent) continue;
        notice_out[p] = my_collectives;
        MPI_Isend(&notice_out[p], 1, MPI_INT64_T, p, 0, notice_comm, &notice_send[p]);
    }
}

/* This rank joins its next collective: tell the others. */
static void notices_announce(void) {
    my_collectives++;
    notices_send();
}

/* While waiting or idle: collect every few milliseconds, beat every
 * HEARTBEAT_SEC. */
static void notices_tick(void) {
    if (!notices_on()) return;
    double now = monotonic();
    if (now - last_collected >= 0.005) notices_collect();
    if (now - last_sent >= HEARTBEAT_SEC) notices_send();
}

static void notices_stop(void) {
    for (int p = 0; notices_on() && p < world_size; p++) {
        if (notice_recv[p] != MPI_REQUEST_NULL) {
            MPI_Cancel(&notice_recv[p]);
            MPI_Wait(&notice_recv[p], MPI_STATUS_IGNORE);
        }
        if (notice_send[p] != MPI_REQUEST_NULL) MPI_Request_free(&notice_send[p]);
    }
    if (notices_on()) MPI_Comm_free(&notice_comm);
    free(peer_collectives);
    free(peer_heard);
    free(notice_in);
    free(notice_out);
    free(notice_recv);
    free(notice_send);
    peer_collectives = notice_in = notice_out = NULL;
    peer_heard = NULL;
    notice_recv = notice_send = NULL;
}

/* Peer p is silent (the first kind), or has not reached this rank's
 * collective number `seq` (the second kind). */
static int peer_silent(int p, double now) { return now - peer_heard[p] >= SILENT_SEC; }
static int peer_behind(int p, int64_t seq) { return peer_collectives[p] < seq; }

/* Lists the peers for which is(p) holds into who ("rank 2", "ranks 1, 3");
 * returns how many. */
static int list_ranks(char *who, size_t size, int kind, int64_t seq, double now) {
    int count = 0;
    size_t used = 0;
    who[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        for (int p = 0, listed = 0; p < world_size; p++) {
            if (p == world_rank || !(kind == 0 ? peer_silent(p, now) : peer_behind(p, seq))) continue;
            if (pass == 0) count++;
            else if (used < size) used += (size_t)snprintf(who + used, size - used, "%s%d", listed++ ? ", " : "", p);
        }
        if (pass == 0 && count > 0 && size > 0) used = (size_t)snprintf(who, size, count > 1 ? "ranks " : "rank ");
    }
    return count;
}

/* Fills who with the ranks collective `seq` waits for and returns 1 if
 * they are silent, 0 if they are alive but have not reached it, -1 if
 * neither (then who is ""). */
static int waited_for_ranks(int64_t seq, char *who, size_t size) {
    if (world_size == 2) {
        snprintf(who, size, "rank %d", 1 - world_rank);
        return 1;
    }
    if (!notices_on()) {
        snprintf(who, size, "one of the other %d ranks", world_size - 1);
        return 1;
    }
    /* notices already sent may still be on their way: listen for a while */
    for (int i = 0; i < 20; i++) {
        notices_collect();
        notices_send();
        struct timespec pause = {0, 10000000L};
        nanosleep(&pause, NULL);
    }
    double now = monotonic();
    if (list_ranks(who, size, 0, seq, now) > 0) return 1;
    if (list_ranks(who, size, 1, seq, now) > 0) return 0;
    return -1;
}

/* --- The watchdog (on the communication thread) ------------------------------
 * A collective that has run longer than the timeout: one line to stderr
 * naming the silent ranks, then _exit(3); mpirun ends the job. */
static void report_stall(int64_t seq, const char *what, double waited, double limit) {
    char who[256], line[768];
    int kind = waited_for_ranks(seq, who, sizeof who), n;
    if (kind == 1)
        n = snprintf(line, sizeof line,
                     "dptrain: rank %d of %d: no answer from %s for %.0f s in %s (--comm-timeout %g): "
                     "stopped or dead; ending the job\n",
                     world_rank, world_size, who, waited, what, limit);
    else if (kind == 0)
        n = snprintf(line, sizeof line,
                     "dptrain: rank %d of %d: %s still answer%s but %s not reached %s after %.0f s "
                     "(--comm-timeout %g): stuck elsewhere; ending the job\n",
                     world_rank, world_size, who, strchr(who, ',') ? "" : "s", strchr(who, ',') ? "have" : "has",
                     what, waited, limit);
    else
        n = snprintf(line, sizeof line,
                     "dptrain: rank %d of %d: %s has not completed after %.0f s although every rank has "
                     "reached it and answers (--comm-timeout %g): MPI or the network is stuck; ending the job\n",
                     world_rank, world_size, what, waited, limit);
    if (write(STDERR_FILENO, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) < 0) {
        /* nothing more to do: exiting is what matters */
    }
    _exit(3);
}

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
    dp_status_t failure; /* the first failure of a queued (non-blocking) collective since the last drain */
    char failure_message[512];
    double mpi_seconds; /* inside MPI collectives, all so far */
} comm = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static atomic_int abort_requested, abort_code;

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
    double start = monotonic();
    while (atomic_load(counter) == value && monotonic() - start < LINGER_SEC) {
    }
}

static dp_status_t mpi_error(const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return dp_fail(DP_ERR_IO, "%s failed: %.*s", what, len, text);
}

/* Waits for this rank's collective number `seq`. */
static int wait_request(MPI_Request *request, int64_t seq, const char *what) {
    double start = monotonic(), limit = atomic_load(&timeout_sec);
    for (;;) {
        int done = 0, rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (atomic_load(&abort_requested)) MPI_Abort(MPI_COMM_WORLD, atomic_load(&abort_code));
        double waited = monotonic() - start;
        if (limit > 0.0 && waited >= limit) report_stall(seq, what, waited, limit);
        notices_tick();
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
    notices_announce();
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

/* One collective's end: its callback, then the queue's bookkeeping. */
static void finish(const coll_t *c, int rc, double spent) {
    dp_status_t status = rc == MPI_SUCCESS ? DP_OK : mpi_error(c->what, rc);
    if (status == DP_OK && c->done) c->done(c->ctx);
    pthread_mutex_lock(&comm.lock);
    comm.mpi_seconds += spent;
    comm.head++;
    if (c->waiter) {
        c->waiter->status = status;
        snprintf(c->waiter->message, sizeof c->waiter->message, "%s", status ? dp_error_message() : "");
        c->waiter->finished = 1;
    } else if (status != DP_OK && comm.failure == DP_OK) {
        comm.failure = status;
        snprintf(comm.failure_message, sizeof comm.failure_message, "%s", dp_error_message());
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
    double last = monotonic();
    if (n == 1 && batch[0].count > PIECE) {
        int rc = MPI_SUCCESS;
        for (size_t done = 0; done < batch[0].count && rc == MPI_SUCCESS; done += PIECE) {
            size_t count = batch[0].count - done < PIECE ? batch[0].count - done : PIECE;
            rc = post_piece(&batch[0], done, (int)count, &requests[0]);
            if (rc == MPI_SUCCESS) rc = wait_request(&requests[0], my_collectives, batch[0].what);
            notices_collect();
        }
        finish(&batch[0], rc, monotonic() - last);
        return;
    }
    int64_t first = my_collectives + 1; /* the number of batch[0] */
    for (int i = 0; i < n; i++) rcs[i] = post_piece(&batch[i], 0, (int)batch[i].count, &requests[i]);
    for (int i = 0; i < n; i++) {
        if (rcs[i] == MPI_SUCCESS) rcs[i] = wait_request(&requests[i], first + i, batch[i].what);
        notices_collect();
        double now = monotonic();
        finish(&batch[i], rcs[i], now - last);
        last = now;
    }
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
            if (!notices_on()) {
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
            notices_tick();
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
        pthread_mutex_unlock(&comm.lock);
        run_batch(batch, n);
        pthread_mutex_lock(&comm.lock);
    }
    pthread_mutex_unlock(&comm.lock);
    notices_stop();
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
        return dp_fail(DP_ERR_IO, "MPI_Init_thread failed");
    mpi_started = 1;
    if (provided < MPI_THREAD_SERIALIZED)
        return dp_fail(DP_ERR_IO, "MPI_Init_thread: this MPI provides thread level %d, dptrain needs "
                       "MPI_THREAD_SERIALIZED (%d)", provided, MPI_THREAD_SERIALIZED);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);
    world_rank = world->rank;
    world_size = world->size;
    DP_TRY(notices_start());
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
    if (mpi_started) MPI_Finalize();
    mpi_started = 0;
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

dp_status_t dp_world_allgather_bytes(const void *mine, void *all, size_t n) {
    if (!comm.running) {
        memcpy(all, mine, n);
        return DP_OK;
    }
    DP_ASSERT(n <= PIECE);
    memcpy((char *)all + (size_t)world_rank * n, mine, n);
    return run_blocking((coll_t){COLL_ALLGATHER, all, n, MPI_BYTE, MPI_SUM, "MPI_Allgather of the devices' identities",
                                 NULL, NULL, NULL});
}

dp_status_t dp_world_broadcast_bytes(void *buffer, size_t n) {
    return run_blocking((coll_t){COLL_BCAST, buffer, n, MPI_BYTE, MPI_SUM, "MPI_Bcast of a unique id from rank 0",
                                 NULL, NULL, NULL});
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
