/* devices.c - the --devices and --precision options of `dptrain train`
 * and `dptrain eval` (devices.h): a count or a list of devices, each with
 * its backend table, and the default when it is not given; the precision
 * of their products and convolutions. */
#include "devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

dp_status_t cli_parse_devices(const char *command, const char *text, int *ids, int *count,
                              const dp_backend_t **backends) {
    char *end;
    long n = strtol(text, &end, 10);
    if (*text != '\0' && *end == '\0') {
        if (n < 1 || n > CLI_MAX_DEVICES)
            return dp_fail(DP_ERR_ARG, "%s: --devices: %ld is out of range (expected 1 to %d)", command, n, CLI_MAX_DEVICES);
        for (int i = 0; i < n; i++) {
            ids[i] = i;
            backends[i] = dp_backend_cpu();
        }
        *count = (int)n;
        return DP_OK;
    }
    *count = 0;
    const char *p = text;
    int cuda = strncmp(text, "cuda:", 5) == 0, staged = strncmp(text, "staged:", 7) == 0,
        split = strncmp(text, "split:", 6) == 0;
    const char *kind = cuda ? "cuda:" : staged ? "staged:" : split ? "split:" : "cpu:";
    int may_repeat = cuda || split; /* devices sharing one GPU */
    size_t prefix = strlen(kind);
    while (*p) {
        if (strncmp(p, kind, prefix) != 0)
            return dp_fail(DP_ERR_ARG, "%s: --devices: '%s' is not a count or a list like cpu:0,cpu:1 or cuda:0", command, text);
        long id = strtol(p + prefix, &end, 10);
        if (end == p + prefix || (*end != ',' && *end != '\0') || id < 0 || id >= 4096)
            return dp_fail(DP_ERR_ARG, "%s: --devices: bad device in '%s' (expected %sN, N from 0 to 4095)", command, text, kind);
        for (int i = 0; i < *count && !may_repeat; i++)
            if (ids[i] == id) return dp_fail(DP_ERR_ARG, "%s: --devices: %s%ld is listed twice", command, kind, id);
        if (*count == CLI_MAX_DEVICES) return dp_fail(DP_ERR_ARG, "%s: --devices: more than %d devices", command, CLI_MAX_DEVICES);
        ids[(*count)++] = (int)id;
        p = *end == ',' ? end + 1 : end;
        if (*end == ',' && *p == '\0') return dp_fail(DP_ERR_ARG, "%s: --devices: '%s' ends with a comma", command, text);
    }
    for (int d = 0; d < *count; d++) /* the whole list is well formed: open the tables */
        if (cuda) DP_TRY(dp_backend_by_name("cuda", ids[d], &backends[d])); /* one table per GPU, opened once */
        else if (split) DP_TRY(dp_backend_by_name("split", ids[d], &backends[d]));
        else backends[d] = staged ? dp_backend_cpu_staged() : dp_backend_cpu();
    return DP_OK;
}

dp_status_t cli_default_devices(int *ids, int *count, const dp_backend_t **backends, char *note, size_t size) {
    const char *why = NULL;
    int gpus = dp_backend_cuda_count(&why);
    if (gpus > 0) {
        *count = gpus > CLI_MAX_DEVICES ? CLI_MAX_DEVICES : gpus;
        for (int i = 0; i < *count; i++) {
            ids[i] = i;
            DP_TRY(dp_backend_by_name("cuda", i, &backends[i]));
        }
        if (gpus == 1) snprintf(note, size, "default: the GPU");
        else snprintf(note, size, "default: every GPU (%d)", gpus);
        return DP_OK;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *count = cores < 1 ? 1 : cores > CLI_MAX_DEVICES ? CLI_MAX_DEVICES : (int)cores;
    for (int i = 0; i < *count; i++) {
        ids[i] = i;
        backends[i] = dp_backend_cpu();
    }
    snprintf(note, size, "default: one CPU device per core; no GPU: %s", why ? why : "none found");
    return DP_OK;
}

dp_status_t cli_parse_precision(const char *command, const char *text, dp_precision_t *precision) {
    int p = dp_precision_from_name(text);
    if (p < 0) return dp_fail(DP_ERR_ARG, "%s: --precision: '%s' is not fp32, tf32 or bf16", command, text);
    *precision = (dp_precision_t)p;
    return DP_OK;
}

int cli_channels_last_default(dp_precision_t precision, const dp_model_t *model) {
    if (precision != DP_PRECISION_BF16) return 0;
    int convs = 0;
    for (int l = 1; l <= dp_model_num_layers(model); l++) {
        dp_layer_info_t layer, in;
        if (dp_model_layer(model, l, &layer) != DP_OK || layer.kind != DP_LAYER_CONV || layer.out_ndim != 3) continue;
        convs++;
        if (layer.out_shape[0] % 8 != 0) return 0;
        if (layer.input > 0 && dp_model_layer(model, layer.input, &in) == DP_OK && in.out_shape[0] % 8 != 0) return 0;
    }
    return convs > 0;
}

dp_status_t cli_set_channels_last(const char *command, const char *text, int default_on,
                                  const dp_backend_t *const *backends, const int *ids, int count, int *on) {
    *on = 0;
    if (!text) text = default_on ? "on" : "off";
    if (strcmp(text, "off") == 0) return DP_OK;
    if (strcmp(text, "on") != 0) return dp_fail(DP_ERR_ARG, "%s: --channels-last: '%s' is not on or off", command, text);
    *on = 1;
    for (int d = 0; d < count; d++) {
        const dp_backend_t *be = backends[d];
        int seen = 0;
        for (int e = 0; e < d && !seen; e++) seen = backends[e] == be;
        if (seen) continue;
        if (!be->set_channels_last)
            return dp_fail(DP_ERR_ARG, "%s: --channels-last on: %s:%d has no channels-last layout (a GPU's NHWC "
                           "activations): use --channels-last off (the default) on %s devices, or a cuda device",
                           command, be->name, ids[d], be->name);
        DP_TRY(be->set_channels_last(be->ctx, 1));
    }
    return DP_OK;
}

dp_status_t cli_set_precision(const char *command, const char *option, const dp_backend_t *const *backends,
                              const int *ids, int count, dp_precision_t precision) {
    if (precision == DP_PRECISION_FP32) return DP_OK;
    for (int d = 0; d < count; d++) {
        const dp_backend_t *be = backends[d];
        int seen = 0;
        for (int e = 0; e < d && !seen; e++) seen = backends[e] == be;
        if (seen) continue;
        if (!be->set_precision && precision == DP_PRECISION_TF32)
            return dp_fail(DP_ERR_ARG, "%s: %s: %s:%d has no TF32 mode (a GPU's tensor-core math): use --precision "
                           "fp32 (the default) on %s devices, or a cuda device", command, option, be->name, ids[d],
                           be->name);
        if (!be->set_precision)
            return dp_fail(DP_ERR_ARG, "%s: %s: %s:%d has no bf16 mode (bf16 operands on a GPU's tensor cores): "
                           "use --precision fp32 (the default) on %s devices, or a cuda device", command, option,
                           be->name, ids[d], be->name);
        DP_TRY(be->set_precision(be->ctx, precision));
    }
    return DP_OK;
}
