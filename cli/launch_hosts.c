/* launch_hosts.c - the hosts of each attempt of `dptrain launch` (launch.h).
 *
 * Where they come from: --hosts (fixed), --hostfile FILE (read again before
 * every attempt: take a host out of the file and the next attempt runs
 * without it), --host-discovery COMMAND (run before every attempt, printing
 * one `host:slots` line per host, Horovod's convention), or none (this
 * machine, as many ranks as asked). An attempt runs as many ranks as the
 * hosts have slots, at most --np's MAX; fewer than its MIN and it waits,
 * reading the hosts again every second, up to --min-wait seconds.
 *
 * With a host file or a discovery command (elastic mode), a host an attempt
 * failed on (launch_summary.c says which) is left out once it has failed
 * twice, for --cooling seconds, then for twice as long after each further
 * failure (Horovod's blacklist with a cooldown). A host mpirun could not
 * reach (launch_unreachable.c) is left out at once, also from a fixed
 * --hosts list (whose MIN is then not waited for). The hosts are few:
 * plain arrays.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dp_status_t launch_parse_host(const char *text, size_t len, const char *where, char *name, size_t size, int *slots) {
    while (len > 0 && isspace((unsigned char)*text)) text++, len--;
    while (len > 0 && isspace((unsigned char)text[len - 1])) len--;
    size_t name_len = 0;
    while (name_len < len && text[name_len] != ':' && !isspace((unsigned char)text[name_len])) name_len++;
    if (name_len == 0 || name_len >= size)
        return dp_fail(DP_ERR_ARG, "launch: %s: '%.*s' is not a host (HOST, HOST:SLOTS or HOST slots=SLOTS)", where,
                       (int)len, text);
    memcpy(name, text, name_len);
    name[name_len] = '\0';
    *slots = 1;
    const char *rest = text + name_len;
    size_t rest_len = len - name_len;
    if (rest_len == 0) return DP_OK;
    char number[32];
    if (rest[0] == ':') {
        rest++, rest_len--;
    } else {
        while (rest_len > 0 && isspace((unsigned char)*rest)) rest++, rest_len--;
        if (rest_len < 6 || strncmp(rest, "slots=", 6) != 0)
            return dp_fail(DP_ERR_ARG, "launch: %s: '%.*s' is not a host (HOST, HOST:SLOTS or HOST slots=SLOTS)",
                           where, (int)len, text);
        rest += 6, rest_len -= 6;
    }
    char *end;
    if (rest_len == 0 || rest_len >= sizeof number) end = number;
    else memcpy(number, rest, rest_len), number[rest_len] = '\0';
    long n = rest_len > 0 && rest_len < sizeof number ? strtol(number, &end, 10) : 0;
    if (rest_len == 0 || rest_len >= sizeof number || *end || n < 1 || n > 4096)
        return dp_fail(DP_ERR_ARG, "launch: %s: '%.*s': the slots must be a number from 1 to 4096", where, (int)len,
                       text);
    *slots = (int)n;
    return DP_OK;
}

/* The host named `name`, added when new (NULL when the table is full). */
static launch_host_t *host_entry(launch_hosts_t *h, const char *name) {
    for (int i = 0; i < h->count; i++)
        if (strcmp(h->host[i].name, name) == 0) return &h->host[i];
    if (h->count == LAUNCH_HOSTS_MAX) return NULL;
    launch_host_t *e = &h->host[h->count++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

/* Adds one host line to pick (a line or list entry; blank lines and
 * comments skipped). */
static dp_status_t add_line(launch_hosts_t *h, const char *text, size_t len, const char *where, launch_pick_t *pick) {
    const char *hash = memchr(text, '#', len);
    if (hash) len = (size_t)(hash - text);
    size_t blank = 0;
    while (blank < len && isspace((unsigned char)text[blank])) blank++;
    if (blank == len) return DP_OK;
    char name[256];
    int slots;
    DP_TRY(launch_parse_host(text, len, where, name, sizeof name, &slots));
    for (int i = 0; i < pick->count; i++)
        if (strcmp(pick->names[i], name) == 0) return dp_fail(DP_ERR_ARG, "launch: %s: host %s is listed twice", where, name);
    if (pick->count == LAUNCH_HOSTS_MAX || !host_entry(h, name))
        return dp_fail(DP_ERR_ARG, "launch: %s: more than %d hosts", where, LAUNCH_HOSTS_MAX);
    snprintf(pick->names[pick->count], sizeof pick->names[0], "%s", name);
    pick->slots[pick->count++] = slots;
    return DP_OK;
}

/* Every line of `text` (a file's or the command's output). */
static dp_status_t add_lines(launch_hosts_t *h, const char *text, const char *where, launch_pick_t *pick) {
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        DP_TRY(add_line(h, line, len, where, pick));
        line += len + (line[len] == '\n');
    }
    return DP_OK;
}

/* Reads all of f (up to 64 KB) into text. */
static void read_all(FILE *f, char *text, size_t size) {
    size_t n = fread(text, 1, size - 1, f);
    text[n] = '\0';
}

/* Every host the source offers now, into pick (before leaving any out).
 * A discovery command that fails gives none, with *why saying so. */
static dp_status_t offered_hosts(launch_hosts_t *h, launch_pick_t *pick, char *why, size_t why_size) {
    static char text[65536];
    pick->count = 0;
    why[0] = '\0';
    if (h->list) {
        char where[64] = "--hosts";
        for (const char *p = h->list; *p;) {
            size_t len = strcspn(p, ",");
            if (len == 0) return dp_fail(DP_ERR_ARG, "launch: --hosts: '%s' has an empty entry", h->list);
            DP_TRY(add_line(h, p, len, where, pick));
            p += len + (p[len] == ',');
        }
        return DP_OK;
    }
    if (h->file) {
        FILE *f = fopen(h->file, "r");
        if (!f) { /* perhaps being rewritten: no hosts this time */
            snprintf(why, why_size, "--hostfile %s: %s", h->file, strerror(errno));
            return DP_OK;
        }
        read_all(f, text, sizeof text);
        int failed = ferror(f), error = errno;
        fclose(f);
        if (failed) { /* a directory opens, then reads fail (EISDIR): no hosts, and why */
            snprintf(why, why_size, "--hostfile %s: %s", h->file, strerror(error));
            pick->count = 0;
            return DP_OK;
        }
        char where[4200];
        snprintf(where, sizeof where, "--hostfile %s", h->file);
        return add_lines(h, text, where, pick);
    }
    if (h->discovery) {
        fflush(stdout);
        fflush(stderr);
        FILE *f = popen(h->discovery, "r");
        if (!f) {
            snprintf(why, why_size, "--host-discovery: cannot run it (%s)", strerror(errno));
            return DP_OK;
        }
        read_all(f, text, sizeof text);
        int status = pclose(f);
        if (status != 0) {
            snprintf(why, why_size, "--host-discovery '%s' failed (%s %d)", h->discovery,
                     WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status)
                                                                                   : WTERMSIG(status));
            return DP_OK;
        }
        return add_lines(h, text, "--host-discovery's output", pick);
    }
    return DP_OK;
}

int launch_hosts_elastic(const launch_hosts_t *h) { return h->file || h->discovery; }

/* The offered hosts minus those cooling off; the ranks for np_max. */
static void choose(launch_hosts_t *h, int np_max, launch_pick_t *pick, int *cooling) {
    double now = monotonic_now();
    int kept = 0, ranks = 0;
    size_t used = 0;
    *cooling = 0;
    pick->mpirun_hosts[0] = '\0';
    for (int i = 0; i < pick->count; i++) {
        launch_host_t *e = host_entry(h, pick->names[i]);
        if (e && e->cool_until > now) {
            (*cooling)++;
            continue;
        }
        if (ranks >= np_max) continue;
        int slots = pick->slots[i] < np_max - ranks ? pick->slots[i] : np_max - ranks;
        memmove(pick->names[kept], pick->names[i], sizeof pick->names[0]);
        pick->slots[kept++] = slots;
        ranks += slots;
        if (used < sizeof pick->mpirun_hosts)
            used += (size_t)snprintf(pick->mpirun_hosts + used, sizeof pick->mpirun_hosts - used, "%s%s:%d",
                                     used ? "," : "", pick->names[kept - 1], slots);
    }
    pick->count = kept;
    pick->ranks = ranks;
}

dp_status_t launch_hosts_pick(launch_hosts_t *h, int np_min, int np_max, double min_wait, const char *log_dir,
                              launch_pick_t *pick) {
    if (!h->list && !h->file && !h->discovery) { /* this machine */
        *pick = (launch_pick_t){.count = 0, .ranks = np_max};
        return DP_OK;
    }
    double start = monotonic_now();
    int said = 0;
    for (;;) {
        char why[4400];
        int cooling;
        DP_TRY(offered_hosts(h, pick, why, sizeof why));
        choose(h, np_max, pick, &cooling);
        if (pick->ranks >= np_min) return DP_OK;
        if (h->list && !cooling) /* a fixed list: waiting cannot bring more */
            return dp_fail(DP_ERR_ARG, "launch: --hosts %s has %d slot%s, --np needs at least %d (give more hosts or "
                           "slots, or a smaller --np)", h->list, pick->ranks, pick->ranks == 1 ? "" : "s", np_min);
        if (h->list) /* hosts of a fixed list left out after failing: not waited for either */
            return dp_fail(DP_ERR_COMM, "--hosts %s has %d slot%s left without the host%s left out, --np needs at "
                           "least %d", h->list, pick->ranks, pick->ranks == 1 ? "" : "s", cooling == 1 ? "" : "s",
                           np_min);
        double waited = monotonic_now() - start;
        char what[4600];
        snprintf(what, sizeof what, "%d rank%s available (%d host%s%s%s%s), --np needs at least %d", pick->ranks,
                 pick->ranks == 1 ? "" : "s", pick->count, pick->count == 1 ? "" : "s",
                 cooling ? ", others cooling off after failing" : "", why[0] ? "; " : "", why, np_min);
        if (waited >= min_wait || launch_signals.interrupt || launch_signals.preempt)
            return dp_fail(DP_ERR_COMM, "%s; gave up after %.0f s (--min-wait %g)", what, waited, min_wait);
        if (!said) launch_log(log_dir, "waiting up to %g s for more ranks: %s", min_wait, what);
        said = 1;
        struct timespec pause = {1, 0};
        nanosleep(&pause, NULL);
    }
}

/* Leaves host e out after its failures: --cooling seconds, doubled for
 * each failure beyond the second. */
static double cool_off(launch_hosts_t *h, launch_host_t *e) {
    double seconds = h->cooling * ldexp(1.0, e->failures - 2);
    e->cool_until = monotonic_now() + seconds;
    return seconds;
}

double launch_hosts_unreachable(launch_hosts_t *h, const char *host) {
    launch_host_t *e = host_entry(h, host);
    if (!e) return 0.0;
    e->failures = e->failures < 2 ? 2 : e->failures + 1; /* left out at once: it cannot run a rank */
    return cool_off(h, e);
}

double launch_hosts_failed(launch_hosts_t *h, const char *host) {
    if (!launch_hosts_elastic(h) || !host || !*host) return 0.0;
    launch_host_t *e = host_entry(h, host);
    if (!e) return 0.0;
    e->failures++;
    if (e->failures < 2) return 0.0;
    return cool_off(h, e);
}
