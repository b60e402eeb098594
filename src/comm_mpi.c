/* comm_mpi.c - the process level of comm.h over Open MPI: start-up, sums
 * across ranks, and the agreement check. The only file with MPI in it; a
 * build without MPI (DPTRAIN_HAVE_MPI undefined) compiles the single-rank
 * versions below, which refuse to run under mpirun.
 *
 * DESIGN. MPI is initialised with MPI_THREAD_SERIALIZED: the thread that
 * called dp_world_init (the one driving the trainer) calls MPI between
 * phases, and device 0's worker calls MPI_Allreduce inside the forward task
 * for sync batch norm (parallel.c) while that thread is blocked waiting for
 * the devices; never two at once. A watchdog thread (in the spirit of PyTorch's NCCL
 * watchdog) reads two atomics the MPI thread sets around every collective:
 * when one has run longer than the timeout, it writes one line to stderr and
 * _exits; it never calls MPI itself. */
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

#ifdef DPTRAIN_HAVE_MPI
#include <mpi.h>

static int mpi_started;
static int world_rank, world_size;

/* --- The watchdog --------------------------------------------------------- */
static _Atomic double collective_since; /* monotonic start of the running collective, 0 if none */
static const char *_Atomic collective_what;

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void watch_begin(const char *what) {
    atomic_store(&collective_what, what);
    atomic_store(&collective_since, monotonic());
}

static void watch_end(void) { atomic_store(&collective_since, 0.0); }

static void *watchdog_main(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec pause = {0, 500000000L};
        nanosleep(&pause, NULL);
        double since = atomic_load(&collective_since), limit = atomic_load(&timeout_sec);
        if (since <= 0.0 || limit <= 0.0 || monotonic() - since < limit) continue;
        char who[64];
        if (world_size == 2) snprintf(who, sizeof who, "rank %d", 1 - world_rank);
        else snprintf(who, sizeof who, "one of the other %d ranks", world_size - 1);
        char line[512];
        int n = snprintf(line, sizeof line,
                         "dptrain: rank %d of %d: no answer from %s for %.0f s in %s (--comm-timeout %g): "
                         "it has stopped or died; ending the job\n",
                         world_rank, world_size, who, monotonic() - since, atomic_load(&collective_what), limit);
        if (write(STDERR_FILENO, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) < 0) {
            /* nothing more to do: exiting is what matters */
        }
        _exit(3);
    }
    return NULL;
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
    if (world->size > 1) {
        pthread_t watchdog;
        if (pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0) pthread_detach(watchdog);
    }
    return DP_OK;
}

void dp_world_finalize(void) {
    if (mpi_started) MPI_Finalize();
    mpi_started = 0;
}

void dp_world_abort(int code) {
    int size = 1;
    if (mpi_started) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

static dp_status_t mpi_error(const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return dp_fail(DP_ERR_IO, "%s failed: %.*s", what, len, text);
}

/* MPI counts are ints: large buffers go in pieces of at most 2^30. */
static int piece(size_t n, size_t done) { return n - done > (size_t)1 << 30 ? 1 << 30 : (int)(n - done); }

dp_status_t dp_world_sum_floats(float *buffer, size_t n) {
    if (!mpi_started) return DP_OK;
    for (size_t done = 0; done < n;) {
        int count = piece(n, done);
        watch_begin("MPI_Allreduce of the gradients");
        int rc = MPI_Allreduce(MPI_IN_PLACE, buffer + done, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        watch_end();
        if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce of the gradients", rc);
        done += (size_t)count;
    }
    return DP_OK;
}

dp_status_t dp_world_reduce_to_root(float *buffer, size_t n) {
    if (!mpi_started) return DP_OK;
    for (size_t done = 0; done < n;) {
        int count = piece(n, done);
        watch_begin("MPI_Reduce of the gradients to the server");
        int rc = MPI_Reduce(world_rank == 0 ? MPI_IN_PLACE : buffer + done, buffer + done, count, MPI_FLOAT,
                            MPI_SUM, 0, MPI_COMM_WORLD);
        watch_end();
        if (rc != MPI_SUCCESS) return mpi_error("MPI_Reduce of the gradients", rc);
        done += (size_t)count;
    }
    return DP_OK;
}

dp_status_t dp_world_broadcast(float *buffer, size_t n) {
    if (!mpi_started) return DP_OK;
    for (size_t done = 0; done < n;) {
        int count = piece(n, done);
        watch_begin("MPI_Bcast from rank 0 (parameters or buffers)");
        int rc = MPI_Bcast(buffer + done, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        watch_end();
        if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast from rank 0", rc);
        done += (size_t)count;
    }
    return DP_OK;
}

dp_status_t dp_world_sum_doubles(double *buffer, int n) {
    if (!mpi_started) return DP_OK;
    watch_begin("MPI_Allreduce of the statistics");
    int rc = MPI_Allreduce(MPI_IN_PLACE, buffer, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    watch_end();
    return rc == MPI_SUCCESS ? DP_OK : mpi_error("MPI_Allreduce of the statistics", rc);
}

dp_status_t dp_world_check_same(const dp_world_t *world, const char *what, const void *bytes, size_t n) {
    if (!mpi_started || world->size == 1) return DP_OK;
    uint64_t mine = fingerprint(bytes, n), root = mine;
    watch_begin("the start-up agreement check");
    int rc = MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    watch_end();
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
    int differs = mine != root ? world->rank : world->size, first = world->size;
    watch_begin("the start-up agreement check");
    rc = MPI_Allreduce(&differs, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    watch_end();
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce", rc);
    if (first < world->size)
        return dp_fail(DP_ERR_ARG, "rank %d's %s differ from rank 0's: every rank must run the same command",
                       first, what);
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

dp_status_t dp_world_check_same(const dp_world_t *world, const char *what, const void *bytes, size_t n) {
    (void)world;
    (void)what;
    (void)fingerprint(bytes, n);
    return DP_OK;
}
#endif
