/* launch_unreachable.c - a host mpirun could not reach, for `dptrain
 * launch` (launch.h): mpirun's own words about a daemon that could not
 * start, and the host they name.
 *
 * mpirun starts one daemon (orted) per host of an attempt through its
 * launch agent (ssh, or plm_rsh_agent), before any rank. When a host does
 * not resolve, does not answer, refuses the agent or cannot call back,
 * the agent says so on mpirun's stderr with the host's name (its domain
 * dropped, as Open MPI hands it to the agent: "ssh: Could not resolve
 * hostname h2: Name or service not known", "ssh: connect to host h2 port
 * 22: No route to host"), then Open MPI prints a paragraph that names no
 * host ("ORTE was unable to reliably start one or more daemons. This
 * usually is caused by: ...") and exits 255 with no rank started. The
 * output filter (launch_attempt.c) holds what comes before any rank has
 * started and hands it, with such a paragraph, here; the host is the one
 * it names as a word, among the attempt's hosts where no rank started
 * (rank records) that are not this machine, else the only such host of
 * the attempt, else unknown ("a host could not be reached").
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"
#include "report.h"

/* Open MPI's paragraphs (help-errmgr-base.txt, help-plm-base.txt; ORTE in
 * 4.x, PRRTE in 5.x) saying that a daemon could not start or connect. */
static const char *const daemon_failures[] = {
    "unable to reliably start one or more daemons", /* [failed-daemon-launch] */
    "daemon has unexpectedly failed after launch",  /* [failed-daemon] */
    "unable to establish a communication connection to the", /* [no-connect] */
    "A daemon died unexpectedly",                    /* [daemon-died-*] */
};

/* What follows when mpirun aborts while other daemons are still starting:
 * it names a host ("target node: h3") that may well be reachable. */
static const char daemon_aftermath[] = "does not know how to route a message to the specified daemon"; /* [no-path] */

static int contains(const char *text, size_t n, const char *needle) {
    size_t len = strlen(needle);
    for (size_t j = 0; j + len <= n; j++)
        if (memcmp(text + j, needle, len) == 0) return 1;
    return 0;
}

int launch_daemon_failure_block(const char *block, size_t n) {
    for (size_t i = 0; i < sizeof daemon_failures / sizeof daemon_failures[0]; i++)
        if (contains(block, n, daemon_failures[i])) return 1;
    return contains(block, n, daemon_aftermath) ? 2 : 0;
}

static int host_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

/* Whether `text` holds `name` as a word (not inside a longer host name;
 * a sentence's full stop after it is fine). */
static int names_host(const char *text, const char *name) {
    size_t len = strlen(name);
    if (len == 0) return 0;
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        const char *after = p + len;
        int end_ok = !host_char(*after) || (*after == '.' && !host_char(after[1]));
        if ((p == text || !host_char(p[-1])) && end_ok) return 1;
    }
    return 0;
}

/* Whether `text` names host `name`: as given, or without its domain (Open
 * MPI hands the agent and prints "h2" for "h2.example.org" unless
 * orte_keep_fqdn_hostnames is set), an IPv4 address only as given. */
static int mentions_host(const char *text, const char *name) {
    if (names_host(text, name)) return 1;
    size_t short_len = strcspn(name, ".");
    if (name[short_len] == '\0' || strspn(name, "0123456789.") == strlen(name)) return 0;
    char short_name[256];
    snprintf(short_name, sizeof short_name, "%.*s", (int)short_len, name);
    return names_host(text, short_name);
}

/* Whether `name` is an address of one of this machine's interfaces (no
 * name is resolved: that may take long). */
static int local_address(const char *name) {
    struct ifaddrs *list;
    if (getifaddrs(&list) != 0) return 0;
    int found = 0;
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next) {
        if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) continue;
        char text[INET6_ADDRSTRLEN] = "";
        const void *addr = a->ifa_addr->sa_family == AF_INET ? (const void *)&((struct sockaddr_in *)a->ifa_addr)->sin_addr
                                                             : (const void *)&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
        found = inet_ntop(a->ifa_addr->sa_family, addr, text, sizeof text) && strcmp(text, name) == 0;
    }
    freeifaddrs(list);
    return found;
}

/* This machine (by name, or an address of its own): mpirun runs its
 * daemon itself, it cannot fail to start. */
static int local_host(const char *name) {
    char self[256] = "";
    gethostname(self, sizeof self - 1);
    return strcmp(name, "localhost") == 0 || strncmp(name, "127.", 4) == 0 || strcmp(name, "::1") == 0 ||
           strcmp(name, self) == 0 || local_address(name);
}

/* Whether a rank of attempt `attempt` started on the pick's host i (its
 * record is there: a log directory every host shares, or this machine). */
static int rank_started_on(const launch_pick_t *pick, int i, const char *record_dir, int attempt) {
    int first = 0;
    for (int k = 0; k < i; k++) first += pick->slots[k];
    static rank_record_t record;
    for (int r = first; record_dir && r < first + pick->slots[i]; r++)
        if (rank_record_read(record_dir, r, attempt, &record)) return 1;
    return 0;
}

/* The first line of `text` that names `name` ("" for none), newline dropped. */
static void line_naming(const char *text, const char *name, char *out, size_t size) {
    out[0] = '\0';
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)len, line);
        if (mentions_host(one, name)) {
            snprintf(out, size, "%s", one);
            return;
        }
        line += len + (line[len] == '\n');
    }
}

/* The first sentence of Open MPI's paragraph on the failed daemon (the
 * first line after the dashes of a block launch_daemon_failure_block
 * takes; a failing daemon's own warnings may come before it). */
static void paragraph_start(const char *text, char *out, size_t size) {
    out[0] = '\0';
    const char *opened = NULL; /* the line after a block's opening dashes */
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n"), dash = strspn(line, "-");
        const char *next = line + len + (line[len] == '\n');
        if (dash >= 20 && dash == len) {
            if (!opened) {
                opened = next;
            } else {
                if (launch_daemon_failure_block(opened, (size_t)(line - opened)) == 1) {
                    snprintf(out, size, "Open MPI: %.*s", (int)strcspn(opened, "\n"), opened);
                    return;
                }
                opened = NULL;
            }
        }
        line = next;
    }
}

void launch_name_unreachable(const launch_pick_t *pick, const char *record_dir, const char *log_dir, int attempt,
                             const char *said, launch_failure_t *out) {
    int named[LAUNCH_UNREACHABLE_MAX], count = 0, remote = 0, only_remote = -1;
    for (int i = 0; i < pick->count; i++) {
        if (local_host(pick->names[i]) || rank_started_on(pick, i, record_dir, attempt)) continue;
        remote++, only_remote = i;
        if (mentions_host(said, pick->names[i]) && count < LAUNCH_UNREACHABLE_MAX) named[count++] = i;
    }
    if (count == 0 && remote == 1) named[count++] = only_remote; /* mpirun names none: the one it had to reach */
    memset(out, 0, sizeof *out);
    out->rank = -1;
    out->code = CLI_EXIT_UNREACHABLE;
    char detail[1024] = "", hosts[1024] = "";
    for (int k = 0; k < count; k++) {
        const char *name = pick->names[named[k]];
        snprintf(out->unreachable[k], sizeof out->unreachable[k], "%s", name);
        size_t used = strlen(hosts);
        snprintf(hosts + used, sizeof hosts - used, "%s%s", k == 0 ? "" : k + 1 < count ? ", " : " and ", name);
        if (!detail[0]) line_naming(said, name, detail, sizeof detail);
    }
    out->unreachable_count = count;
    if (count > 0) snprintf(out->blamed_host, sizeof out->blamed_host, "%.*s", (int)sizeof out->blamed_host - 1,
                            out->unreachable[0]);
    if (!detail[0]) paragraph_start(said, detail, sizeof detail);
    if (count == 0) snprintf(out->line, sizeof out->line, "a host could not be reached (mpirun could not start a daemon)");
    else snprintf(out->line, sizeof out->line, "host%s %s could not be reached (mpirun could not start %s daemon%s)",
                  count > 1 ? "s" : "", hosts, count > 1 ? "their" : "its", count > 1 ? "s" : "");
    snprintf(out->message, sizeof out->message, "%s", detail);
    if (log_dir) snprintf(out->log, sizeof out->log, "mpirun's message in %s/launch.log", log_dir);
    else snprintf(out->log, sizeof out->log, "no log file (no --log-dir)");
}
