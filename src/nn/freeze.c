/* freeze.c - which parameters a freeze list names (nn.h: dp_model_freeze,
 * dp_model_freeze_mask): the list "conv1,layer1" against the model's layer
 * names, a name matching a layer itself or a prefix of whole dotted
 * components ("layer1" matches "layer1.0.conv1", not "layer10"); and the
 * list that freezes a network's backbone, every layer but its head
 * (dp_model_backbone_list; the head: dp_model_head_layer). nn.c lays the frozen parameters out and runs
 * the frozen layers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/nn.h"

/* Whether `name` (len bytes, not terminated) names the layer `layer`: equal,
 * or a prefix of it ending at a dot. */
static int names_layer(const char *name, size_t len, const char *layer) {
    return strncmp(layer, name, len) == 0 && (layer[len] == '\0' || layer[len] == '.');
}

/* The layer of parameter p: its name without the last component
 * ("layer1.0.conv1" of "layer1.0.conv1.weight"), into buf. */
static const char *layer_of(const dp_param_info_t *p, char *buf, size_t size) {
    const char *dot = strrchr(p->name, '.');
    size_t len = dot ? (size_t)(dot - p->name) : strlen(p->name);
    snprintf(buf, size, "%.*s", (int)len, p->name);
    return buf;
}

dp_status_t dp_model_freeze_mask(const dp_model_t *m, const char *layers, unsigned char *frozen) {
    int count = dp_model_num_param_tensors(m);
    memset(frozen, 0, (size_t)count);
    if (!layers || !*layers) return DP_OK;
    const char *at = layers;
    for (;;) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (len == 0)
            return dp_fail(DP_ERR_ARG, "'%s' has an empty layer name (names are separated by single commas)",
                           layers);
        int matched = 0;
        for (int i = 0; i < count; i++) {
            const dp_param_info_t *p = dp_model_param(m, i);
            char layer[256];
            if (!p->trainable || !names_layer(at, len, layer_of(p, layer, sizeof layer))) continue;
            frozen[i] = 1;
            matched = 1;
        }
        if (!matched)
            return dp_fail(DP_ERR_ARG, "'%.*s' names no layer of model %s (a layer's name, as its "
                           "parameters' prefix: conv1 for conv1.weight, or a prefix of whole dotted components: "
                           "layer1 for layer1.0.conv1)", (int)len, at, dp_model_name(m));
        if (!end) break;
        at = end + 1;
    }
    int trains = 0;
    for (int i = 0; i < count && !trains; i++) trains = dp_model_param(m, i)->trainable && !frozen[i];
    if (!trains)
        return dp_fail(DP_ERR_ARG, "'%s' freezes every layer of model %s: nothing would train", layers,
                       dp_model_name(m));
    return DP_OK;
}

/* Whether the comma-separated `list` holds the entry name[0..len). */
static int listed(const char *list, const char *name, size_t len) {
    for (const char *at = list; *at;) {
        size_t n = strcspn(at, ",");
        if (n == len && strncmp(at, name, len) == 0) return 1;
        at += n + (at[n] == ',');
    }
    return 0;
}

int dp_model_head_layer(const dp_model_t *m) {
    int last_conv = 0;
    for (int i = dp_model_num_layers(m); i >= 1; i--) {
        dp_layer_info_t l;
        if (dp_model_layer(m, i, &l) != DP_OK || l.weight < 0) continue;
        if (l.kind == DP_LAYER_LINEAR) return i;
        if (l.kind == DP_LAYER_CONV && !last_conv) last_conv = i;
    }
    return last_conv;
}

dp_status_t dp_model_backbone_list(const dp_model_t *m, char **out) {
    *out = NULL;
    int head = dp_model_head_layer(m), layers = dp_model_num_layers(m);
    dp_layer_info_t l;
    if (head < 1)
        return dp_fail(DP_ERR_ARG, "model %s has no linear or conv layer: no head to keep training (name the layers "
                       "to freeze)", dp_model_name(m));
    dp_model_layer(m, head, &l);
    char head_layer[256];
    const char *head_name = dp_model_param(m, l.weight)->name;
    layer_of(dp_model_param(m, l.weight), head_layer, sizeof head_layer);
    size_t head_first = strcspn(head_name, "."), size = 2, used = 0;
    for (int i = 0; i < dp_model_num_param_tensors(m); i++) size += strlen(dp_model_param(m, i)->name) + 1;
    char *list = dp_alloc_zeroed(size, 1, "the backbone's layers");
    if (!list) return DP_ERR_NOMEM;
    for (int i = 1; i <= layers; i++) {
        if (i == head || dp_model_layer(m, i, &l) != DP_OK || l.weight < 0) continue;
        const char *name = dp_model_param(m, l.weight)->name;
        const char *dot = strrchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : strlen(name), first = strcspn(name, ".");
        /* a whole first component ("layer1" for layer1.0.conv1) unless the head shares it ("classifier.1") or
         * it is empty (a name starting with a dot) */
        if (first > 0 && first < len && !(first == head_first && strncmp(name, head_name, first) == 0)) len = first;
        if (names_layer(name, len, head_layer)) { /* a layer named "fc" below a head "fc.1": no list says it */
            free(list);
            return dp_fail(DP_ERR_ARG, "model %s: layer '%.*s' is a prefix of its head '%s': name the layers to "
                           "freeze (--freeze)", dp_model_name(m), (int)len, name, head_layer);
        }
        if (!listed(list, name, len))
            used += (size_t)snprintf(list + used, size - used, "%s%.*s", used ? "," : "", (int)len, name);
    }
    if (!used) {
        free(list);
        return dp_fail(DP_ERR_ARG, "model %s has no layer with parameters below its head: nothing to freeze",
                       dp_model_name(m));
    }
    *out = list;
    return DP_OK;
}
