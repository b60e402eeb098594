/* algo_cache.c - the file of measured cuDNN algorithm choices (algo_cache.h):
 * read once, kept in memory under a mutex, rewritten through a temporary
 * file and rename() after each new choice. */
#define _GNU_SOURCE
#include "algo_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_HEADER "dptrain cuDNN algorithms 1"
#define CACHE_KEY_MAX 384

typedef struct {
    char key[CACHE_KEY_MAX];
    int algo;
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static entry_t *entries;
static int count, cap;
static char path[4096];

/* key -> algo in the table (replacing an entry of the same key); 0 when memory ran out. Under the lock. */
static int table_set(const char *key, int algo) {
    for (int i = 0; i < count; i++)
        if (strcmp(entries[i].key, key) == 0) {
            entries[i].algo = algo;
            return 1;
        }
    if (count == cap) {
        int grown_cap = cap ? 2 * cap : 64;
        entry_t *grown = realloc(entries, sizeof *grown * (size_t)grown_cap);
        if (!grown) return 0;
        entries = grown;
        cap = grown_cap;
    }
    snprintf(entries[count].key, sizeof entries[count].key, "%s", key);
    entries[count++].algo = algo;
    return 1;
}

/* The file's path from the environment; "" when none can be named. */
static void choose_path(void) {
    const char *env = getenv("DPTRAIN_CUDNN_ALGO_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else if (xdg && *xdg) snprintf(path, sizeof path, "%s/dptrain/cudnn-algos", xdg);
    else if (home && *home) snprintf(path, sizeof path, "%s/.cache/dptrain/cudnn-algos", home);
}

/* Reads the file; a line that is not KEY<tab>ALGO (or a wrong first line) makes it ignored, with one warning. */
static void load(void) {
    choose_path();
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (!f) return; /* none yet */
    char line[CACHE_KEY_MAX + 32];
    int number = 0, bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        number++;
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') { bad = number; break; }
        line[--len] = '\0';
        if (number == 1) {
            bad = strcmp(line, CACHE_HEADER) != 0 ? 1 : 0;
            continue;
        }
        char *tab = strchr(line, '\t'), *end = NULL;
        long algo = tab ? strtol(tab + 1, &end, 10) : -1;
        if (!tab || tab == line || strchr(tab + 1, '\t') || !end || end == tab + 1 || *end || algo < 0 || algo > 99) {
            bad = number;
            break;
        }
        *tab = '\0';
        if (!table_set(line, (int)algo)) bad = number;
    }
    if (!bad && number == 0) bad = 1; /* an empty file has no header */
    fclose(f);
    if (bad) {
        count = 0;
        fprintf(stderr, "dptrain: warning: %s: line %d is not a cuDNN algorithm choice (\"%s\" first, then KEY<tab>ALGO "
                "lines): the file is ignored, and the algorithms are measured again\n", path, bad, CACHE_HEADER);
    }
}

static void load_once(void) { load(); }

/* mkdir -p of path's folder (errors show when the file is written). */
static void make_folder(void) {
    char dir[sizeof path];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0777);
            *p = '/';
        }
    mkdir(dir, 0777);
}

/* The table into path, through path.tmp.PID and rename(); one warning line when that fails. Under the lock. */
static void save(void) {
    static int warned;
    if (!path[0]) return;
    make_folder();
    char tmp[sizeof path + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) {
        ok = fprintf(f, "%s\n", CACHE_HEADER) > 0;
        for (int i = 0; ok && i < count; i++) ok = fprintf(f, "%s\t%d\n", entries[i].key, entries[i].algo) > 0;
        ok = fclose(f) == 0 && ok;
    }
    int err = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
    if (!ok) {
        unlink(tmp);
        if (!warned++)
            fprintf(stderr, "dptrain: warning: %s: cannot write the measured cuDNN algorithms (%s): kept for this run "
                    "only\n", path, strerror(err));
    }
}

int dp_algo_cache_get(const char *key) {
    pthread_once(&once, load_once);
    int algo = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count && algo < 0; i++)
        if (strcmp(entries[i].key, key) == 0) algo = entries[i].algo;
    pthread_mutex_unlock(&lock);
    return algo;
}

void dp_algo_cache_put(const char *key, int algo) {
    pthread_once(&once, load_once);
    char clean[CACHE_KEY_MAX];
    snprintf(clean, sizeof clean, "%s", key);
    for (char *p = clean; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
    pthread_mutex_lock(&lock);
    if (table_set(clean, algo)) save();
    pthread_mutex_unlock(&lock);
}

const char *dp_algo_cache_path(void) {
    pthread_once(&once, load_once);
    return path;
}
