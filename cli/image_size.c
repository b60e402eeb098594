/* image_size.c - --image-size for train, eval and predict (image_size.h):
 * the option's value, a model's text at another input size, a
 * checkpoint's network rebuilt at that size with its parameter table
 * checked unchanged, and the evaluation transform for the new size. */
#include "image_size.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image_folder.h"
#include "dptrain/model_file.h"

dp_status_t cli_parse_image_size(const char *command, const char *text, int *height, int *width) {
    char *end;
    long h = strtol(text, &end, 10), w = h;
    if (end != text && (*end == 'x' || *end == 'X')) {
        const char *second = end + 1;
        w = strtol(second, &end, 10);
        if (end == second) w = 0;
    }
    if (end == text || *end || h < 1 || w < 1 || h > 65536 || w > 65536)
        return dp_fail(DP_ERR_ARG, "%s: --image-size: '%s' is not N or HxW (pixels, 1 to 65536: 224, 64x96)", command,
                       text);
    *height = (int)h;
    *width = (int)w;
    return DP_OK;
}

/* Whether a and b have the same parameter table; else *differ names a's
 * first tensor that b has otherwise (-1: the tables' lengths differ). */
static int same_params(const dp_model_t *a, const dp_model_t *b, int *differ) {
    const int n = dp_model_num_param_tensors(a);
    *differ = -1;
    if (n != dp_model_num_param_tensors(b)) return 0;
    for (int i = 0; i < n; i++) {
        const dp_param_info_t *p = dp_model_param(a, i), *q = dp_model_param(b, i);
        int same = strcmp(p->name, q->name) == 0 && p->ndim == q->ndim && p->trainable == q->trainable &&
                   p->offset == q->offset;
        for (int d = 0; same && d < p->ndim; d++) same = p->shape[d] == q->shape[d];
        if (!same) {
            *differ = i;
            return 0;
        }
    }
    return 1;
}

dp_status_t cli_model_text_at_size(const char *command, const char *option, const dp_model_t *model, int height,
                                   int width, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    const char *name = dp_model_name(model);
    size_t source_len;
    const char *source = dp_model_source(model, &source_len);
    dp_model_t *shipped = NULL;
    if (!source) { /* a built-in network: its shipped model file, where that is the same network */
        char file[160];
        int differ;
        if (snprintf(file, sizeof file, "%s.cfg", name) < (int)sizeof file && dp_model_load(file, &shipped) == DP_OK &&
            same_params(model, shipped, &differ)) {
            source = dp_model_source(shipped, &source_len);
        } else {
            dp_model_free(shipped);
            dp_error_clear();
            return dp_fail(DP_ERR_ARG, "%s: %s: %s is a built-in network without a model file of the same parameters "
                           "(give one with --model FILE, docs/model-format.md)", command, option, name);
        }
    }
    char why[1024];
    dp_status_t status = dp_model_file_set_input_size(source, source_len, name, height, width, text, len);
    dp_model_free(shipped);
    if (status != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(status, "%s: %s: %s", command, option, why);
    }
    return DP_OK;
}

dp_status_t cli_model_copy_at_size(const char *command, const char *option, const dp_model_t *model, int height,
                                   int width, dp_model_t **out) {
    *out = NULL;
    char *text;
    size_t len;
    DP_TRY(cli_model_text_at_size(command, option, model, height, width, &text, &len));
    const char *name = dp_model_name(model);
    dp_model_t *resized = NULL;
    char why[1024];
    dp_status_t status = dp_model_parse(text, len, name, &resized);
    free(text);
    if (status == DP_OK && dp_model_frozen(model)[0]) status = dp_model_freeze(resized, dp_model_frozen(model));
    if (status != DP_OK) {
        snprintf(why, sizeof why, "%s", dp_error_message());
        return dp_fail(status, "%s: %s: model %s does not take %d x %d inputs: %s", command, option, name, height,
                       width, why);
    }
    int differ;
    if (!same_params(model, resized, &differ)) {
        if (differ < 0) {
            status = dp_fail(DP_ERR_ARG, "%s: %s: model %s has %d parameter tensors at %d x %d, %d at its own size",
                             command, option, name, dp_model_num_param_tensors(resized), height, width,
                             dp_model_num_param_tensors(model));
        } else {
            const dp_param_info_t *p = dp_model_param(model, differ), *q = dp_model_param(resized, differ);
            char own[96] = "", other[96] = "";
            size_t at = 0;
            for (int d = 0; d < p->ndim && at < sizeof own; d++)
                at += (size_t)snprintf(own + at, sizeof own - at, d ? ", %d" : "%d", p->shape[d]);
            at = 0;
            for (int d = 0; d < q->ndim && at < sizeof other; d++)
                at += (size_t)snprintf(other + at, sizeof other - at, d ? ", %d" : "%d", q->shape[d]);
            const char *dot = strrchr(p->name, '.');
            const int layer = dot ? (int)(dot - p->name) : (int)strlen(p->name);
            status = dp_fail(DP_ERR_ARG, "%s: %s: model %s's layer %.*s depends on the input size: %s would be [%s] at "
                             "%d x %d, the checkpoint's is [%s] (only a network whose parameters do not, with global "
                             "average pooling before its head, takes another size)", command, option, name, layer,
                             p->name, p->name, other, height, width, own);
        }
        dp_model_free(resized);
        return status;
    }
    *out = resized;
    return DP_OK;
}

dp_status_t cli_model_at_size(const char *command, const char *option, int height, int width, dp_model_t **model) {
    dp_model_t *resized;
    DP_TRY(cli_model_copy_at_size(command, option, *model, height, width, &resized));
    dp_model_free(*model);
    *model = resized;
    return DP_OK;
}

dp_status_t cli_transform_at_size(const char *saved, int channels, int saved_height, int saved_width, int height,
                                  int width, char *out, size_t size) {
    if (!saved[0] || (height == saved_height && width == saved_width)) {
        snprintf(out, size, "%s", saved);
        return DP_OK;
    }
    dp_sample_options_t eval;
    DP_TRY(dp_eval_transform_parse(saved, channels, height, width, &eval));
    if (eval.mode != DP_SAMPLE_SQUASH) eval.resize_size = 0; /* the size's own default */
    dp_eval_transform_text(&eval, out, size);
    return DP_OK;
}

dp_status_t cli_checkpoint_model_at_size(const char *command, const dp_checkpoint_info_t *info,
                                         const char **image_size, int height, int width, const char *option,
                                         dp_model_t **model, int *saved_height, int *saved_width) {
    static char saved[32];
    char saved_option[96];
    int channels;
    dp_model_input_shape(*model, &channels, saved_height, saved_width);
    if (info->val_height > 0) {
        *saved_height = info->val_height;
        *saved_width = info->val_width;
    }
    if (!*image_size && info->val_height > 0) {
        snprintf(saved, sizeof saved, "%dx%d", info->val_height, info->val_width);
        snprintf(saved_option, sizeof saved_option, "the checkpoint's data.val_image_size %s", saved);
        *image_size = saved;
        height = info->val_height;
        width = info->val_width;
        option = saved_option;
    }
    return *image_size ? cli_model_at_size(command, option, height, width, model) : DP_OK;
}
