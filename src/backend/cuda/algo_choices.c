/* algo_choices.c - the cuDNN convolution algorithms a checkpoint keeps
 * (algo_choices.h): two tables under one mutex, the choices that ran and
 * the choices installed from a checkpoint, and the backend table's
 * conv_algorithms / conv_algorithms_install over them. */
#include "algo_choices.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_parts.h"

typedef struct {
    char key[DP_CONV_ALGO_KEY_MAX];
    int algo;
    int refused; /* installed: cuDNN refused it (or knows no such number), not offered again */
} choice_t;

typedef struct {
    choice_t *entries;
    int count, cap;
} choice_table_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static choice_table_t ran, installed;

/* The part of a key after "GPU|cuDNN VERSION|": the convolution and the direction (the whole key without one). */
static const char *convolution_part(const char *key) {
    const char *library = strstr(key, "|cuDNN ");
    const char *bar = library ? strchr(library + 1, '|') : NULL;
    return bar ? bar + 1 : key;
}

/* key -> algo in t, replacing an entry of the same key; 0 when memory ran out. Under the lock. */
static int table_set(choice_table_t *t, const char *key, int algo) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->entries[i].key, key) == 0) {
            t->entries[i].algo = algo;
            t->entries[i].refused = 0;
            return 1;
        }
    if (t->count == t->cap) {
        int grown_cap = t->cap ? 2 * t->cap : 64;
        choice_t *grown = realloc(t->entries, sizeof *grown * (size_t)grown_cap);
        if (!grown) return 0;
        t->entries = grown;
        t->cap = grown_cap;
    }
    choice_t *e = &t->entries[t->count++];
    snprintf(e->key, sizeof e->key, "%s", key);
    for (char *p = e->key; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
    e->algo = algo;
    e->refused = 0;
    return 1;
}

/* The installed choice for key: the exact key, else the first of the same convolution and direction. Under the lock. */
static choice_t *installed_for(const char *key) {
    choice_t *same_convolution = NULL;
    for (int i = 0; i < installed.count; i++) {
        choice_t *e = &installed.entries[i];
        if (strcmp(e->key, key) == 0) return e;
        if (!same_convolution && strcmp(convolution_part(e->key), convolution_part(key)) == 0) same_convolution = e;
    }
    return same_convolution;
}

void dp_algo_choice_ran(const char *key, int algo) {
    pthread_mutex_lock(&lock);
    table_set(&ran, key, algo); /* out of memory: the checkpoint lacks it, and a resume chooses as usual */
    pthread_mutex_unlock(&lock);
}

int dp_algo_choice_installed(const char *key) {
    pthread_mutex_lock(&lock);
    const choice_t *e = installed_for(key);
    int algo = e && !e->refused ? e->algo : -1;
    pthread_mutex_unlock(&lock);
    return algo;
}

void dp_algo_choice_refused(const char *device, const char *key, int algo, const char *why) {
    pthread_mutex_lock(&lock);
    choice_t *e = installed_for(key);
    int first = e && !e->refused;
    if (e) e->refused = 1;
    pthread_mutex_unlock(&lock);
    if (first)
        fprintf(stderr, "dptrain: warning: %s: the checkpoint's cuDNN algorithm %d for %s: %s; choosing as "
                "DPTRAIN_CUDNN_ALGO says instead\n", device, algo, convolution_part(key), why);
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const dp_conv_algo_t *)a)->key, ((const dp_conv_algo_t *)b)->key);
}

/* Whether a choice that ran is of e's convolution and direction. Under the lock. */
static int ran_like(const choice_t *e) {
    for (int i = 0; i < ran.count; i++)
        if (strcmp(convolution_part(ran.entries[i].key), convolution_part(e->key)) == 0) return 1;
    return 0;
}

/* backend.h conv_algorithms: the choices that ran, then the installed ones not refused and not run, by key. */
static dp_status_t cuda_conv_algorithms(void *ctx, dp_conv_algo_t **out, int *count) {
    (void)ctx;
    *out = NULL;
    *count = 0;
    pthread_mutex_lock(&lock);
    dp_conv_algo_t *list = ran.count + installed.count > 0
                               ? malloc(sizeof *list * (size_t)(ran.count + installed.count))
                               : NULL;
    int n = 0;
    for (int i = 0; list && i < ran.count; i++) {
        memcpy(list[n].key, ran.entries[i].key, sizeof list[n].key);
        list[n++].algo = ran.entries[i].algo;
    }
    for (int i = 0; list && i < installed.count; i++)
        if (!installed.entries[i].refused && !ran_like(&installed.entries[i])) {
            memcpy(list[n].key, installed.entries[i].key, sizeof list[n].key);
            list[n++].algo = installed.entries[i].algo;
        }
    int wanted = ran.count + installed.count;
    pthread_mutex_unlock(&lock);
    if (wanted > 0 && !list)
        return dp_fail(DP_ERR_NOMEM, "out of memory listing %d cuDNN algorithm choices", wanted);
    if (n == 0) {
        free(list);
        return DP_OK;
    }
    qsort(list, (size_t)n, sizeof *list, by_key);
    *out = list;
    *count = n;
    return DP_OK;
}

/* backend.h conv_algorithms_install. */
static dp_status_t cuda_conv_algorithms_install(void *ctx, const dp_conv_algo_t *choices, int count) {
    (void)ctx;
    for (int i = 0; i < count; i++)
        if (!choices[i].key[0] || !memchr(choices[i].key, '\0', sizeof choices[i].key) || choices[i].algo < 0)
            return dp_fail(DP_ERR_ARG, "cuDNN algorithm choice %d: an empty or unterminated key, or a negative "
                           "algorithm (%d)", i, choices[i].algo);
    dp_status_t status = DP_OK;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count && status == DP_OK; i++)
        if (!table_set(&installed, choices[i].key, choices[i].algo))
            status = dp_fail(DP_ERR_NOMEM, "out of memory installing %d cuDNN algorithm choices", count);
    pthread_mutex_unlock(&lock);
    return status;
}

void dp_cuda_algo_register(dp_backend_t *table) {
    table->conv_algorithms = cuda_conv_algorithms;
    table->conv_algorithms_install = cuda_conv_algorithms_install;
}
