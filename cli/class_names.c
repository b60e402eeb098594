/* class_names.c - the names of a model's outputs on the command line
 * (class_names.h). */
#include "class_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fashion_mnist_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

dp_status_t cli_class_names(const char *const *names, int num_names, int outputs, char ***out) {
    *out = NULL;
    char **copies = dp_alloc_zeroed((size_t)outputs, sizeof *copies, "class names");
    if (!copies) return DP_ERR_NOMEM;
    for (int i = 0; i < outputs; i++) {
        char fallback[32];
        if (num_names > 0) snprintf(fallback, sizeof fallback, "(output %d)", i); /* beyond the data's classes */
        else if (outputs == 10) snprintf(fallback, sizeof fallback, "%s", fashion_mnist_names[i]);
        else snprintf(fallback, sizeof fallback, "class %d", i);
        if (!(copies[i] = strdup(i < num_names ? names[i] : fallback))) {
            cli_class_names_free(copies, i);
            return dp_fail(DP_ERR_NOMEM, "out of memory copying the class names");
        }
    }
    *out = copies;
    return DP_OK;
}

void cli_class_names_free(char **names, int outputs) {
    for (int i = 0; names && i < outputs; i++) free(names[i]);
    free(names);
}
