/* fit_lenet.c - training from a C program with dp_fit (fit.h): what
 * `dptrain train --model lenet` does, in a page. The program builds the
 * model, loads Fashion-MNIST, makes the data-parallel trainer and hands the
 * epochs to dp_fit, which writes the metrics and a checkpoint after every
 * epoch; the callback prints one line per epoch. Run it again with the
 * same checkpoint and more epochs and it continues where it stopped.
 *
 * usage: fit_lenet [num_devices] [epochs] [limit] [checkpoint] [metrics]
 *        defaults: 2 10 60000 lenet.safetensors (none)
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dptrain/fit.h"
#include "dptrain/model_file.h"

static dp_status_t print_epoch(const dp_epoch_stats_t *s, void *ctx) {
    const int *epochs = ctx;
    printf("epoch %d/%d: loss %.4f, train acc %.3f, test acc %.3f, %.0f images/sec\n", s->epoch, *epochs,
           s->train_loss, s->train_acc, s->test_acc, s->images_per_sec);
    fflush(stdout);
    return DP_OK; /* anything else stops training (early stopping) */
}

int main(int argc, char **argv) {
    int num_devices = argc > 1 ? atoi(argv[1]) : 2;
    int epochs = argc > 2 ? atoi(argv[2]) : 10;
    int limit = argc > 3 ? atoi(argv[3]) : 60000;
    const char *checkpoint = argc > 4 ? argv[4] : "lenet.safetensors";
    const char *metrics = argc > 5 ? argv[5] : NULL;
    if (num_devices < 1 || epochs < 1 || limit < 1) {
        fprintf(stderr, "usage: fit_lenet [num_devices >= 1] [epochs >= 1] [limit >= 1] [checkpoint] [metrics]\n");
        return 2;
    }

    dp_model_t *model = NULL;
    dp_dataset_t train = {0}, test = {0};
    dp_trainer_t *trainer = NULL;
    int code = 1;
    if (dp_model_load("lenet", &model) != DP_OK) goto done;
    if (dp_dataset_load(DP_DEFAULT_DATA_DIR, "train", &train) != DP_OK) goto done;
    if (dp_dataset_load(DP_DEFAULT_DATA_DIR, "t10k", &test) != DP_OK) goto done;
    dp_dataset_truncate(&train, limit);

    /* the book's settings: minibatch SGD, batch 256, lr 0.2, seed 0 */
    const float lr = 0.2f;
    dp_trainer_config_t tc = {.model = model, .num_devices = num_devices, .threads_per_device = 1,
                              .allreduce = DP_ALLREDUCE_RING, .optim = {.kind = DP_OPTIM_SGD, .lr = lr}};
    if (dp_trainer_new(&tc, &trainer) != DP_OK) goto done;
    dp_fit_config_t fc = {
        .trainer = trainer, .model = model, .model_name = "lenet", .train_set = &train, .test_set = &test,
        .batch_size = 256, .epochs = epochs, .seed = 0,
        .schedule = {.kind = DP_LR_CONSTANT, .lr = lr},
        .metrics_path = metrics, .save_path = checkpoint,
        .resume_path = access(checkpoint, F_OK) == 0 ? checkpoint : NULL, /* continue an earlier run */
    };
    dp_fit_result_t result;
    if (dp_fit(&fc, print_epoch, &epochs, &result) != DP_OK) goto done;
    if (result.first_epoch >= result.last_epoch)
        printf("%s already has %d epochs: ", checkpoint, result.first_epoch);
    printf("test acc: %.4f on %s\n", result.test_acc, dp_trainer_device_names(trainer));
    code = 0;
done:
    if (code != 0) fprintf(stderr, "fit_lenet: %s\n", dp_error_message());
    dp_trainer_free(trainer);
    dp_dataset_free(&test);
    dp_dataset_free(&train);
    dp_model_free(model);
    return code;
}
