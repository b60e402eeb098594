/* fuzz_model_file.c - libFuzzer target for the model-file parser: any bytes
 * must parse into a model or fail with one line "<fuzz>:LINE: ..." (or the
 * whole-file "empty"/"larger than" errors), never crash, leak or overrun.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON && cmake --build build-fuzz -j2 --target fuzz_model_file
 *   build-fuzz/fuzz_model_file -max_total_time=300 -dict=tests/fuzz_model_file.dict models/
 * (docs/model-format.md, "Fuzzing"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dp_model_t *model = NULL;
    dp_status_t status = dp_model_parse((const char *)data, size, "<fuzz>", &model);
    if (status == DP_OK) {
        /* A model that parsed answers every query about its layers. */
        int shape[DP_MAX_DIMS];
        for (int i = 0; i <= dp_model_num_layers(model); i++) dp_model_output_shape(model, i, shape);
        for (int i = 0; i < dp_model_num_param_tensors(model); i++) (void)dp_model_param(model, i)->numel;
        if (dp_model_num_outputs(model) < 1) abort();
        dp_model_free(model);
        return 0;
    }
    const char *message = dp_error_message();
    if (model != NULL || strncmp(message, "<fuzz>:", 7) != 0 || strchr(message, '\n')) abort();
    return 0;
}
