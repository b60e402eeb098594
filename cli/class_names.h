/* class_names.h - the names the CLI shows for a model's outputs (predict.c,
 * eval.c): the checkpoint's or the data's class names where there are
 * some, an output beyond them "(output K)"; without any, Fashion-MNIST's
 * ten (the default data's) for a model of 10 outputs, else "class K". */
#ifndef DPTRAIN_CLI_CLASS_NAMES_H
#define DPTRAIN_CLI_CLASS_NAMES_H

#include "dptrain/status.h"

/* *out gets `outputs` names, each its own copy (cli_class_names_free):
 * names[i] (names may be NULL with num_names 0) for i < num_names, else the
 * fallbacks above. */
dp_status_t cli_class_names(const char *const *names, int num_names, int outputs, char ***out);
void cli_class_names_free(char **names, int outputs);

#endif
