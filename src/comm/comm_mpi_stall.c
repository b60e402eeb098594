/* comm_mpi_stall.c - stall detection for the communication thread
 * (comm_mpi.c): which ranks a collective that does not finish waits for,
 * told apart by arrival notices and heartbeats, and the watchdog's one line
 * naming them (a status for the callers, never an exit). Runs on the
 * communication thread
 * only; MPI builds only (DPTRAIN_HAVE_MPI).
 */
#ifdef DPTRAIN_HAVE_MPI
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm_mpi_internal.h"

static int world_rank, world_size;

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
#define SILENT_SEC 1.0
static MPI_Comm notice_comm = MPI_COMM_NULL;
static int64_t my_collectives;                 /* collectives this rank has joined */
static int64_t *peer_collectives;              /* (world_size) the last count of each peer */
static double *peer_heard;                     /* (world_size) when it arrived (monotonic) */
static int64_t *notice_in, *notice_out;        /* (world_size) message buffers */
static MPI_Request *notice_recv, *notice_send; /* (world_size) */
static double last_sent, last_collected;

int dp_notices_on(void) { return notice_comm != MPI_COMM_NULL; }
int64_t dp_notices_joined(void) { return my_collectives; }

dp_status_t dp_notices_start(int rank, int size) {
    world_rank = rank;
    world_size = size;
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
        return dp_fail(DP_ERR_COMM, "MPI_Comm_dup of the notice communicator failed");
    double now = dp_comm_monotonic();
    for (int p = 0; p < world_size; p++) {
        notice_recv[p] = notice_send[p] = MPI_REQUEST_NULL;
        peer_heard[p] = now;
        if (p != world_rank) MPI_Irecv(&notice_in[p], 1, MPI_INT64_T, p, 0, notice_comm, &notice_recv[p]);
    }
    return DP_OK;
}

/* Takes every notice that has arrived. */
void dp_notices_collect(void) {
    double now = dp_comm_monotonic();
    last_collected = now;
    for (int p = 0; dp_notices_on() && p < world_size; p++) {
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
    last_sent = dp_comm_monotonic();
    for (int p = 0; dp_notices_on() && p < world_size; p++) {
        if (p == world_rank) continue;
        int sent = 1;
        if (notice_send[p] != MPI_REQUEST_NULL) MPI_Test(&notice_send[p], &sent, MPI_STATUS_IGNORE);
        if (!sent) continue;
        notice_out[p] = my_collectives;
        MPI_Isend(&notice_out[p], 1, MPI_INT64_T, p, 0, notice_comm, &notice_send[p]);
    }
}

/* This rank joins its next collective: tell the others. */
void dp_notices_announce(void) {
    my_collectives++;
    notices_send();
}

/* While waiting or idle: collect every few milliseconds, beat every
 * HEARTBEAT_SEC. */
void dp_notices_tick(void) {
    if (!dp_notices_on()) return;
    double now = dp_comm_monotonic();
    if (now - last_collected >= 0.005) dp_notices_collect();
    if (now - last_sent >= HEARTBEAT_SEC) notices_send();
}

void dp_notices_stop(int mpi_usable) {
    for (int p = 0; mpi_usable && dp_notices_on() && p < world_size; p++) {
        if (notice_recv[p] != MPI_REQUEST_NULL) {
            MPI_Cancel(&notice_recv[p]);
            MPI_Wait(&notice_recv[p], MPI_STATUS_IGNORE);
        }
        if (notice_send[p] != MPI_REQUEST_NULL) MPI_Request_free(&notice_send[p]);
    }
    if (mpi_usable && dp_notices_on()) MPI_Comm_free(&notice_comm);
    notice_comm = MPI_COMM_NULL;
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

/* The ranks the last stalled collective waited for (dp_world_stalled_ranks). */
#define SUSPECTS_MAX 64
static int suspects[SUSPECTS_MAX], num_suspects;

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
            else if (num_suspects < SUSPECTS_MAX) suspects[num_suspects++] = p;
            if (pass == 0) continue;
            if (used < size) used += (size_t)snprintf(who + used, size - used, "%s%d", listed++ ? ", " : "", p);
        }
        if (pass == 0 && count > 0 && size > 0) used = (size_t)snprintf(who, size, count > 1 ? "ranks " : "rank ");
    }
    return count;
}

/* Fills who with the ranks collective `seq` waits for and returns 1 if
 * they are silent, 0 if they are alive but have not reached it, -1 if
 * neither (then who is ""). */
static int waited_for_ranks(int64_t seq, char *who, size_t size) {
    num_suspects = 0;
    if (world_size == 2) {
        snprintf(who, size, "rank %d", 1 - world_rank);
        suspects[num_suspects++] = 1 - world_rank;
        return 1;
    }
    if (!dp_notices_on()) {
        snprintf(who, size, "one of the other %d ranks", world_size - 1);
        return 1;
    }
    /* notices already sent may still be on their way: listen for a while */
    for (int i = 0; i < 20; i++) {
        dp_notices_collect();
        notices_send();
        struct timespec pause = {0, 10000000L};
        nanosleep(&pause, NULL);
    }
    double now = dp_comm_monotonic();
    if (list_ranks(who, size, 0, seq, now) > 0) return 1;
    num_suspects = 0;
    if (list_ranks(who, size, 1, seq, now) > 0) return 0;
    num_suspects = 0;
    return -1;
}

/* --- The watchdog (on the communication thread) ------------------------------
 * A collective that has run longer than the timeout: the line naming the
 * silent ranks, which the communication thread hands to every caller
 * waiting for it (DP_ERR_COMM); the caller's main() ends the job. */
void dp_describe_stall(int64_t seq, const char *what, double waited, double limit, char *line, size_t size) {
    char who[256];
    int kind = waited_for_ranks(seq, who, sizeof who);
    if (kind == 1)
        snprintf(line, size, "no answer from %s for %.0f s in %s (--comm-timeout %g): stopped or dead; ending the job",
                 who, waited, what, limit);
    else if (kind == 0)
        snprintf(line, size, "%s still answer%s but %s not reached %s after %.0f s (--comm-timeout %g): stuck "
                 "elsewhere; ending the job", who, strchr(who, ',') ? "" : "s", strchr(who, ',') ? "have" : "has",
                 what, waited, limit);
    else
        snprintf(line, size, "%s has not completed after %.0f s although every rank has reached it and answers "
                 "(--comm-timeout %g): MPI or the network is stuck; ending the job", what, waited, limit);
}

int dp_stall_suspects(int *ranks, int max) {
    int n = num_suspects < max ? num_suspects : max;
    for (int i = 0; i < n; i++) ranks[i] = suspects[i];
    return n;
}

#endif /* DPTRAIN_HAVE_MPI */
