/* checkpoint_conv_algos.c - a checkpoint's cuda.conv_algorithms key
 * (checkpoint.h): the GPU convolution algorithm choices written as a JSON
 * array of {"key": KEY, "algo": N}, and read back with every entry checked
 * (a key of printable ASCII, an algorithm number in range). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "dptrain/json.h"

/* Why `key` cannot be a choice's key, NULL when it can: 1 to
 * DP_CONV_ALGO_KEY_MAX - 1 bytes of printable ASCII (what a GPU's name,
 * a version and a geometry print as). */
static const char *key_problem(const char *key, size_t size) {
    size_t n = strnlen(key, size);
    if (n == 0) return "is empty";
    if (n >= DP_CONV_ALGO_KEY_MAX || n == size) return "is too long";
    for (size_t i = 0; i < n; i++)
        if (key[i] < 0x20 || key[i] > 0x7e) return "holds a byte that is not printable ASCII";
    return NULL;
}

dp_status_t dp_checkpoint_check_conv_algos(const dp_conv_algo_t *list, int count) {
    if (count < 0 || (count > 0 && !list))
        return dp_fail(DP_ERR_ARG, "%d convolution algorithm choices given without choices", count);
    for (int i = 0; i < count; i++) {
        const char *problem = key_problem(list[i].key, sizeof list[i].key);
        if (problem)
            return dp_fail(DP_ERR_ARG, "convolution algorithm choice %d: its key %s (1 to %d bytes of printable "
                           "ASCII)", i, problem, DP_CONV_ALGO_KEY_MAX - 1);
        if (list[i].algo < 0 || list[i].algo > DP_CHECKPOINT_MAX_CONV_ALGO)
            return dp_fail(DP_ERR_ARG, "convolution algorithm choice %d (%s): algorithm %d, expected 0 to %d", i,
                           list[i].key, list[i].algo, DP_CHECKPOINT_MAX_CONV_ALGO);
    }
    return DP_OK;
}

dp_status_t dp_checkpoint_conv_algos_json(const dp_conv_algo_t *list, int count, char **out) {
    size_t size = 3;
    for (int i = 0; i < count; i++) size += 2 * strlen(list[i].key) + 32;
    char *text = dp_alloc(size, "convolution algorithm choices");
    if (!text) return DP_ERR_NOMEM;
    size_t used = 0;
    text[used++] = '[';
    for (int i = 0; i < count; i++) {
        used += (size_t)snprintf(text + used, size - used, "%s{\"key\":\"", i ? "," : "");
        for (const char *c = list[i].key; *c; c++) {
            if (*c == '"' || *c == '\\') text[used++] = '\\';
            text[used++] = *c;
        }
        used += (size_t)snprintf(text + used, size - used, "\",\"algo\":%d}", list[i].algo);
    }
    text[used++] = ']';
    text[used] = '\0';
    *out = text;
    return DP_OK;
}

/* Entry i of the array: {"key": a key, "algo": 0 to DP_CHECKPOINT_MAX_CONV_ALGO}, nothing else. */
static dp_status_t parse_choice(const char *source, int i, const dp_json_t *v, dp_conv_algo_t *out) {
    const dp_json_t *key = v->kind == DP_JSON_OBJECT ? dp_json_get(v, "key") : NULL;
    const dp_json_t *algo = v->kind == DP_JSON_OBJECT ? dp_json_get(v, "algo") : NULL;
    if (!key || !algo || v->count != 2 || key->kind != DP_JSON_STRING || algo->kind != DP_JSON_INTEGER)
        return dp_fail(DP_ERR_FORMAT, "%s: entry %d is not {\"key\": STRING, \"algo\": INTEGER}", source, i);
    const char *problem = key_problem(key->string, strlen(key->string) + 1);
    if (problem)
        return dp_fail(DP_ERR_FORMAT, "%s: entry %d: the key %s (1 to %d bytes of printable ASCII)", source, i,
                       problem, DP_CONV_ALGO_KEY_MAX - 1);
    if (algo->integer < 0 || algo->integer > DP_CHECKPOINT_MAX_CONV_ALGO)
        return dp_fail(DP_ERR_FORMAT, "%s: entry %d: algorithm %lld, expected 0 to %d", source, i,
                       (long long)algo->integer, DP_CHECKPOINT_MAX_CONV_ALGO);
    memset(out, 0, sizeof *out);
    memcpy(out->key, key->string, strlen(key->string) + 1);
    out->algo = (int)algo->integer;
    return DP_OK;
}

dp_status_t dp_checkpoint_parse_conv_algos(dp_checkpoint_info_t *info, const char *path, const char *text) {
    char source[4200];
    dp_json_t *v;
    DP_TRY(dp_checkpoint_meta_array(path, DP_CHECKPOINT_CONV_ALGOS_KEY, text, "{\"key\": STRING, \"algo\": INTEGER}",
                                    source, sizeof source, &v));
    info->conv_algorithms = dp_alloc_zeroed((size_t)v->count, sizeof *info->conv_algorithms, "algorithm choices");
    dp_status_t status = info->conv_algorithms ? DP_OK : DP_ERR_NOMEM;
    for (int i = 0; status == DP_OK && i < v->count; i++)
        status = parse_choice(source, i, &v->items[i], &info->conv_algorithms[i]);
    if (status == DP_OK) info->num_conv_algorithms = v->count;
    else dp_checkpoint_free_conv_algos(info);
    dp_json_free(v);
    return status;
}

void dp_checkpoint_free_conv_algos(dp_checkpoint_info_t *info) {
    free(info->conv_algorithms);
    info->conv_algorithms = NULL;
    info->num_conv_algorithms = 0;
}
