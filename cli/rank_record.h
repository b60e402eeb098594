/* rank_record.h - what each rank of a `dptrain launch` job leaves behind for
 * the launcher's summary (rank_record.c): one small file per rank,
 * DIR/rank.R (DIR: DPTRAIN_RECORD_DIR, which launch sets to its --log-dir
 * or to a directory of its own), mapped into the rank's memory. The rank
 * (train.c) fills in who it is when it starts; the trainer stores the step
 * it has reached after every step (fit.h's step_reached: one store, no
 * system call); its signal handlers note the signals it receives; it notes
 * its exit status and its one-line message when it ends by itself. A rank
 * that dies leaves what it had written: the page cache keeps a shared
 * mapping's stores after the process is gone. The launcher reads the
 * records after each attempt (launch_summary.c) to name the first rank to
 * fail, its host, status or signal, step and log.
 *
 * The file is the struct below, native byte order: written and read by the
 * same dptrain executable (launch runs itself under mpirun).
 */
#ifndef DPTRAIN_CLI_RANK_RECORD_H
#define DPTRAIN_CLI_RANK_RECORD_H

#include <stdint.h>

#define RANK_RECORD_MAGIC "DPTREC1"

typedef struct {
    char magic[8]; /* RANK_RECORD_MAGIC */
    int32_t rank, size, attempt, pid;
    char host[64];
    double started;                    /* wall clock (CLOCK_REALTIME seconds) */
    volatile uint64_t step;            /* the trainer's step count reached */
    volatile uint64_t first_step;      /* the step count it started from (a resume's) */
    volatile int32_t steps_per_epoch;  /* 0 until training starts */
    volatile int32_t training;         /* 1 once every rank has agreed to train */
    volatile int32_t ended;            /* 1 when it ended by itself, with exit_code */
    volatile int32_t exit_code;
    volatile int32_t agreed;           /* every rank ended with it (a mistake before training, a preemption) */
    volatile double ended_at;
    volatile int32_t signal;           /* the last signal it received (0: none) */
    volatile int32_t signals;          /* how many */
    volatile double signal_at;         /* when the first arrived */
    int32_t num_suspects;              /* a stalled collective: the ranks it waited for */
    int32_t suspects[8];
    char message[512];                 /* its one-line error ("" when none) */
} rank_record_t;

/* Creates DIR/rank.R and maps it (NULL when dir is NULL or empty, or it
 * cannot: the record is a convenience, never a reason to fail). */
rank_record_t *rank_record_open(const char *dir, int rank, int size, int attempt);
/* Async-signal-safe: notes signal `sig` (from a signal handler). */
void rank_record_signal(rank_record_t *record, int sig);
/* The rank ends by itself with `code` and, when failing, `message`;
 * `agreed`: every rank ends so (not this rank's failure alone). */
void rank_record_end(rank_record_t *record, int code, int agreed, const char *message);

/* Reads DIR/rank.R into *out: 1 when it holds a record of `attempt`, else 0. */
int rank_record_read(const char *dir, int rank, int attempt, rank_record_t *out);

#endif
