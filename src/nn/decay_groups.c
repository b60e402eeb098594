/* decay_groups.c - which floats of a model's flat buffer are in which
 * weight-decay group (optim.h: torch's param_groups as torchvision's
 * references build them with --norm-weight-decay and --bias-weight-decay):
 * a batch norm or layer norm layer's weight and bias are DP_DECAY_NORM, every other
 * layer's bias DP_DECAY_BIAS, and with a bias weight decay given a batch
 * norm's bias too (torchvision's set_weight_decay: the "bias" key wins over
 * the normalisation layers). Only trained tensors: the optimizer covers the
 * first dp_model_num_trainable() floats.
 */
#include "dptrain/nn.h"

#include <stdlib.h>

static int by_start(const void *a, const void *b) {
    const dp_decay_range_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* the range of parameter tensor `index` in `group`, if it is trained */
static void add(const dp_model_t *m, int index, dp_decay_group_t group, dp_decay_range_t *ranges, int *count) {
    if (index < 0) return;
    const dp_param_info_t *p = dp_model_param(m, index);
    if (!p->trainable || p->frozen) return;
    ranges[(*count)++] = (dp_decay_range_t){p->offset, p->numel, group};
}

dp_status_t dp_model_decay_ranges(const dp_model_t *m, const dp_optim_config_t *config, dp_decay_range_t **out,
                                  int *count) {
    *out = NULL;
    *count = 0;
    const int tensors = dp_model_num_param_tensors(m);
    dp_decay_range_t *ranges = malloc(sizeof *ranges * (size_t)(tensors > 0 ? tensors : 1));
    if (!ranges) return dp_fail(DP_ERR_NOMEM, "out of memory for %d weight-decay ranges", tensors);
    for (int layer = 1; layer <= dp_model_num_layers(m); layer++) {
        dp_layer_info_t l;
        dp_status_t status = dp_model_layer(m, layer, &l);
        if (status != DP_OK) {
            free(ranges);
            return status;
        }
        const int norm = l.kind == DP_LAYER_BATCH_NORM || l.kind == DP_LAYER_LAYER_NORM;
        if (norm) add(m, l.weight, DP_DECAY_NORM, ranges, count);
        add(m, l.bias, norm && !config->has_bias_weight_decay ? DP_DECAY_NORM : DP_DECAY_BIAS, ranges, count);
    }
    qsort(ranges, (size_t)*count, sizeof *ranges, by_start);
    *out = ranges;
    return DP_OK;
}
