/* classify.c - using libdptrain from your own program: load a checkpoint
 * (`dptrain train --save ck.safetensors`), read JPEG, PNG, PGM/PPM or BMP
 * images into the model's input as the training data was made (its
 * transform and normalisation: dp_predict_image_input), classify them on
 * all devices and print the most probable class of each with its
 * probability: the lines of `dptrain predict --top 1`, which does the same
 * with more options.
 *
 * usage: classify CK.safetensors IMAGE...
 * build: cc classify.c $(pkg-config --cflags --libs dptrain)
 *    or: find_package(dptrain) + target_link_libraries(... dptrain::dptrain)
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dptrain/checkpoint.h"
#include "dptrain/predict.h"

/* the names of a checkpoint trained without any (IDX files: Fashion-MNIST) */
static const char *const fashion_mnist[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CK.safetensors IMAGE...\n", argv[0]);
        return 2;
    }
    int n = argc - 2, status = 1;
    dp_checkpoint_t *ck = NULL;
    dp_model_t *model = NULL;
    dp_predictor_t *predictor = NULL;
    float *params = NULL, *x = NULL, *logits = NULL, *probs = NULL;

    /* the checkpoint's model: a built-in one, or the model file it carries */
    if (dp_checkpoint_open(argv[1], &ck) != DP_OK) goto done;
    if (dp_checkpoint_load_model(ck, NULL, &model) != DP_OK) goto done;
    params = malloc(sizeof(float) * dp_model_num_params(model));
    if (!params || dp_checkpoint_load_params(ck, model, params) != DP_OK) goto done;

    /* images -> (n, C, H, W) inputs, made like the training data (the checkpoint says how) */
    const dp_checkpoint_info_t *info = dp_checkpoint_info(ck);
    int c, h, w, classes = dp_model_num_outputs(model);
    dp_model_input_shape(model, &c, &h, &w);
    x = malloc(sizeof(float) * (size_t)n * c * h * w);
    logits = malloc(sizeof(float) * (size_t)n * classes);
    probs = malloc(sizeof(float) * (size_t)classes);
    if (!x || !logits || !probs) goto done;
    for (int i = 0; i < n; i++)
        if (dp_predict_image_input(info, argv[2 + i], c, h, w, x + (size_t)i * c * h * w) != DP_OK) goto done;

    /* forward on every core, batch norm with running statistics, no dropout */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int devices = cores < 1 ? 1 : cores > n ? n : (int)cores;
    if (dp_predictor_new(model, params, devices, &predictor) != DP_OK) goto done;
    if (dp_predictor_run(predictor, x, n, logits) != DP_OK) goto done;
    for (int i = 0; i < n; i++) {
        dp_softmax(logits + (size_t)i * classes, classes, probs);
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (probs[k] > probs[best]) best = k;
        if (best < info->num_class_names) printf("%s: %s %.4f\n", argv[2 + i], info->class_names[best], probs[best]);
        else if (info->num_class_names == 0 && classes == 10)
            printf("%s: %s %.4f\n", argv[2 + i], fashion_mnist[best], probs[best]);
        else printf("%s: (output %d) %.4f\n", argv[2 + i], best, probs[best]);
    }
    status = 0;
done:
    if (status != 0) fprintf(stderr, "classify: %s\n", dp_error_message());
    dp_predictor_free(predictor);
    free(probs);
    free(logits);
    free(x);
    free(params);
    dp_model_free(model);
    dp_checkpoint_close(ck);
    return status;
}
