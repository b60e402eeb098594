/* train_init.c - `dptrain train`'s fine-tuning options before the trainer
 * is made: --freeze (or, resuming without it, the checkpoint's freeze
 * list) applied to the model, and the line saying what is frozen. --init
 * itself is dp_fit's (fit.h: init_path), which refuses a resume frozen
 * otherwise than its checkpoint; --init with --resume is refused here,
 * before either file is read (dp_fit refuses it too, for library callers:
 * here the resume's model and data would fail first). Without
 * --normalize, the normalisation of the --init or --resume checkpoint's
 * data (pretrained weights expect their inputs scaled as they were
 * trained: fastai's vision_learner and timm's data config do the same).
 * With --resume, the run's options from the same read (train_resume.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/checkpoint.h"
#include "train.h"

/* "frozen: conv1,conv2 (2 layers; 25,330 of 44,426 parameters train)". */
static void describe_frozen(const dp_model_t *model, char *note, size_t size) {
    int layers = 0;
    for (int i = 1; i <= dp_model_num_layers(model); i++) {
        dp_layer_info_t l;
        if (dp_model_layer(model, i, &l) == DP_OK && l.weight >= 0 && dp_model_param(model, l.weight)->frozen)
            layers++;
    }
    size_t trains = dp_model_num_trainable(model), all = trains + dp_model_num_frozen(model);
    snprintf(note, size, "frozen: %s (%d layer%s; %zu of %zu parameters train)", dp_model_frozen(model), layers,
             layers == 1 ? "" : "s", trains, all);
}

dp_status_t train_check_init_resume(const train_options_t *o, const char *who) {
    if (o->init_path && o->resume_path)
        return dp_fail(DP_ERR_ARG, "%s--init %s with --resume %s: --init starts a new run from a checkpoint's weights, "
                       "--resume continues the run that saved one; give one of them", who, o->init_path, o->resume_path);
    return DP_OK;
}

dp_status_t train_read_saved(train_options_t *o, train_saved_t *saved) {
    memset(saved, 0, sizeof *saved);
    DP_TRY(train_check_init_resume(o, "")); /* before anything of either is read (dp_fit refuses it too) */
    const char *path = o->init_path ? o->init_path : o->resume_path;
    const int resume = o->resume_path != NULL;
    const int freeze = resume && !o->freeze && !o->freeze_backbone;
    if (!path || (!resume && o->normalize)) return DP_OK; /* nothing to read: the file is read whole */
    dp_checkpoint_t *c;
    DP_TRY(dp_checkpoint_open(path, &c));
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    dp_status_t status = resume ? train_resume_take(o, info, &saved->resume) : DP_OK;
    if (status != DP_OK) {
        dp_checkpoint_close(c);
        return status;
    }
    if (freeze) snprintf(saved->freeze, sizeof saved->freeze, "%s", info->freeze);
    if (!o->normalize && info->normalize[0]) {
        snprintf(saved->normalize, sizeof saved->normalize, "%s", info->normalize);
        snprintf(saved->normalize_note, sizeof saved->normalize_note, "inputs normalised as %s's were: --normalize %s",
                 path, info->normalize);
    }
    dp_checkpoint_close(c);
    return DP_OK;
}

dp_status_t train_freeze_model(const train_options_t *o, const train_saved_t *saved, dp_model_t *model, char *note,
                               size_t note_size) {
    note[0] = '\0';
    const char *list = o->freeze, *source = "--freeze";
    char *backbone = NULL;
    if (o->freeze_backbone) { /* every layer but the head */
        if (o->freeze)
            return dp_fail(DP_ERR_ARG, "train: --freeze %s and --freeze-backbone: give one of them", o->freeze);
        DP_TRY(dp_model_backbone_list(model, &backbone));
        list = backbone;
        source = "--freeze-backbone";
    }
    if (!list && saved->freeze[0]) { /* the checkpoint's: a resume keeps the freeze */
        list = saved->freeze;
        source = "--resume's model.freeze";
    }
    if (!list || !*list) return DP_OK;
    dp_status_t status = DP_OK;
    if (dp_model_freeze(model, list) != DP_OK) {
        char message[1024];
        snprintf(message, sizeof message, "%s", dp_error_message());
        status = dp_fail(DP_ERR_ARG, "train: %s %s: %s", source, list, message);
    }
    free(backbone);
    if (status == DP_OK) describe_frozen(model, note, note_size);
    return status;
}
