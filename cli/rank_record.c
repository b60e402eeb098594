/* rank_record.c - the ranks' records for the launcher's summary
 * (rank_record.h). */
#include "rank_record.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* async-signal-safe */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

rank_record_t *rank_record_open(const char *dir, int rank, int size, int attempt) {
    if (!dir || !*dir) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    rank_record_t *r = NULL;
    if (ftruncate(fd, sizeof *r) == 0) {
        void *map = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED) r = map;
    }
    close(fd);
    if (!r) return NULL;
    r->rank = rank;
    r->size = size;
    r->attempt = attempt;
    r->pid = (int32_t)getpid();
    gethostname(r->host, sizeof r->host - 1);
    r->started = wall_now();
    memcpy(r->magic, RANK_RECORD_MAGIC, sizeof r->magic); /* last: the record is whole */
    return r;
}

void rank_record_signal(rank_record_t *record, int sig) {
    if (!record) return;
    if (record->signals++ == 0) record->signal_at = wall_now();
    record->signal = sig;
}

void rank_record_end(rank_record_t *record, int code, int agreed, const char *message) {
    if (!record) return;
    record->agreed = agreed;
    snprintf(record->message, sizeof record->message, "%s", message ? message : "");
    record->exit_code = code;
    record->ended_at = wall_now();
    record->ended = 1;
    msync(record, sizeof *record, MS_ASYNC); /* a shared log directory: on its way */
}

int rank_record_read(const char *dir, int rank, int attempt, rank_record_t *out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(out, 1, sizeof *out, f);
    fclose(f);
    out->message[sizeof out->message - 1] = '\0';
    out->host[sizeof out->host - 1] = '\0';
    return got == sizeof *out && memcmp(out->magic, RANK_RECORD_MAGIC, sizeof out->magic) == 0 &&
           out->rank == rank && out->attempt == attempt;
}
