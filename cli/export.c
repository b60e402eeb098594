/* export.c - `dptrain export`: a checkpoint's model as an ONNX file
 * (onnx.h: inference form, opset 13, dynamic batch, written atomically),
 * with the checkpoint's class names as metadata_props "classes". */
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "dptrain/checkpoint.h"
#include "dptrain/io.h"
#include "dptrain/model_file.h"
#include "dptrain/onnx.h"
#include "options.h"

static const char export_usage[] =
    "usage: dptrain export --resume CK.safetensors --onnx MODEL.onnx [--model NAME|FILE]\n"
    "\n"
    "Writes the checkpoint's model with its trained parameters as ONNX (opset 13,\n"
    "IR version 7), in inference form: batch norm with its running statistics,\n"
    "dropout removed. Input \"input\" (batch, C, H, W) with a dynamic batch\n"
    "dimension, images scaled to [0, 1] (pixel / 255) as in training; output\n"
    "\"logits\" (batch, classes), before the softmax. The file is replaced\n"
    "atomically. Runs with onnxruntime, OpenCV's cv2.dnn.readNetFromONNX,\n"
    "onnx2torch and the like. A model trained on an image folder keeps its class\n"
    "names (the class folders, in label order) in the metadata_props entry\n"
    "\"classes\", a JSON array: [\"cat\",\"dog\"]; an image folder's evaluation\n"
    "transform in \"transform\" (\"resize 256\": Resize(256), then CenterCrop to\n"
    "the input, an image of the input's size as it is; \"squash\": Resize to the\n"
    "input, the aspect not kept; \", bicubic\" last: PIL's bicubic filter, else\n"
    "bilinear) and the normalisation in \"normalize\"\n"
    "(\"M0,..,S0,..\"); docs/inference.md shows the preprocessing in Python.\n"
    "\n"
    "options:\n"
    "  --resume FILE       the checkpoint (safetensors), required\n"
    "  --onnx FILE         the ONNX file to write, required\n"
    "  --model NAME|FILE   the network (default: the checkpoint's)\n"
    "  --help              show this help\n";

int cmd_export(int argc, char **argv) {
    const char *resume = NULL, *onnx_path = NULL, *model_name = NULL;
    int help = 0;
    const option_t options[] = {
        {"resume", OPT_STRING, &resume, 0, 0},
        {"onnx", OPT_STRING, &onnx_path, 0, 0},
        {"model", OPT_STRING, &model_name, 0, 0},
        {NULL, 0, NULL, 0, 0},
    };
    if (options_parse("export", options, argc, argv, 2, &help) != DP_OK) return cli_report_error();
    if (help) {
        fputs(export_usage, stdout);
        return 0;
    }
    if (!resume || !onnx_path) {
        dp_fail(DP_ERR_ARG, "export: --resume FILE and --onnx FILE are required (see --help)");
        return cli_report_error();
    }
    int exit_code = 1;
    dp_checkpoint_t *c = NULL;
    dp_model_t *model = NULL;
    float *params = NULL;
    if (dp_file_check_writable("export: --onnx", onnx_path) != DP_OK) goto done; /* before the model is built */
    if (dp_checkpoint_open(resume, &c) != DP_OK) goto done;
    if (dp_checkpoint_load_model(c, model_name, &model) != DP_OK) goto done;
    params = dp_alloc(sizeof(float) * dp_model_num_params(model), "parameters");
    if (!params || dp_checkpoint_load_params(c, model, params) != DP_OK) goto done;
    /* the preprocessing that travels with the model: the training data's class names (an image folder's,
     * a JSON array as the checkpoint holds them), its evaluation transform and its normalisation */
    const dp_checkpoint_info_t *info = dp_checkpoint_info(c);
    const char *classes = dp_safetensors_meta(dp_checkpoint_tensors(c), "data.classes");
    dp_onnx_prop_t props[3];
    int num_props = 0;
    if (classes) props[num_props++] = (dp_onnx_prop_t){"classes", classes};
    if (info->transform[0]) props[num_props++] = (dp_onnx_prop_t){"transform", info->transform};
    if (info->normalize[0]) props[num_props++] = (dp_onnx_prop_t){"normalize", info->normalize};
    if (dp_onnx_export(model, params, onnx_path, "dptrain " DPTRAIN_VERSION, props, num_props) != DP_OK) goto done;
    exit_code = 0;
done:
    if (exit_code != 0) cli_report_error();
    free(params);
    dp_model_free(model);
    dp_checkpoint_close(c);
    return exit_code;
}
