/* fuzz_model_file.c - libFuzzer target for the model-file parser: any bytes
 * must parse into a model or fail with one line "<fuzz>:LINE: ..." (or the
 * whole-file "empty"/"larger than" errors), never crash, leak or overrun;
 * a text that parses also gets its backbone's freeze list (one the model
 * takes, or one line), and another head and input size
 * (model_file_edit.c): the edited text parses or fails in one line.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON && cmake --build build-fuzz -j2 --target fuzz_model_file
 *   mkdir -p /tmp/corpus && cp models/*.cfg /tmp/corpus/
 *   build-fuzz/fuzz_model_file -max_total_time=300 -max_len=8192 -dict=tests/fuzz_model_file.dict /tmp/corpus
 * (a copy: libFuzzer writes the inputs it keeps into the first folder named)
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
        /* the backbone's list: a list the model freezes, or one line */
        char *backbone = NULL;
        if (dp_model_backbone_list(model, &backbone) == DP_OK) {
            if (!backbone || dp_model_freeze(model, backbone) != DP_OK) abort();
        } else if (backbone || strchr(dp_error_message(), '\n')) {
            abort();
        }
        free(backbone);
        dp_model_free(model);
        /* a text that parsed, with another head and input size: it parses again, or fails in one line */
        char *edited = NULL, *again = NULL;
        size_t edited_len = 0, again_len = 0;
        if (dp_model_file_set_outputs((const char *)data, size, "<fuzz>", 3, &edited, &edited_len) == DP_OK) {
            if (dp_model_file_set_input_size(edited, edited_len, "<fuzz>", 33, 31, &again, &again_len) != DP_OK ||
                !again)
                abort(); /* a text that parsed has [net] with its height and width */
            model = NULL;
            if (dp_model_parse(again, again_len, "<fuzz>", &model) == DP_OK) {
                dp_model_free(model); /* its outputs need not be 3: the last linear layer need not be the output */
            } else if (model || strncmp(dp_error_message(), "<fuzz>:", 7) != 0 || strchr(dp_error_message(), '\n')) {
                abort();
            }
        } else if (edited || strncmp(dp_error_message(), "<fuzz>:", 7) != 0 || strchr(dp_error_message(), '\n')) {
            abort();
        }
        free(edited);
        free(again);
        return 0;
    }
    const char *message = dp_error_message();
    if (model != NULL || strncmp(message, "<fuzz>:", 7) != 0 || strchr(message, '\n')) abort();
    return 0;
}
