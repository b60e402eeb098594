/* folder_loader_bench.c - dptrain's image-folder loader alone, as a
 * training epoch drives it: the folder indexed (not timed), then EPOCHS
 * epochs of batches of BATCH from the batch loader with THREADS loader
 * threads (RandomResizedCrop 224 + flip, JPEG DCT scaling on), each batch
 * turned into normalised floats (ImageNet's mean and std) on this thread
 * as a device would, so that both sides of bench/loader_vs_torchvision.sh
 * end with the same float batches. Prints images/s and the process's peak
 * resident memory.
 *
 * usage: folder_loader_bench DIR [THREADS] [BATCH] [EPOCHS] [SIZE] [center|none|ta_wide|ra|imagenet|cifar10|svhn]
 *        [bilinear|bicubic]
 *   (center: the default training transform of `dptrain train`, Resize +
 *   CenterCrop, images of the size as they are, 1 channel, no normalisation;
 *   none: the crop and flip alone; ta_wide, ra: the crop and flip, then
 *   TrivialAugmentWide or RandAugment, auto_augment.h; cj:B[,C,S,H]: the
 *   crop and flip, then ColorJitter, color_jitter.h; the last: the resize's
 *   filter, default bilinear, image_transform.h)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dptrain/auto_augment.h"
#include "dptrain/batch_loader.h"
#include "dptrain/color_jitter.h"
#include "dptrain/image_folder.h"

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what) {
    fprintf(stderr, "folder_loader_bench: %s: %s\n", what, dp_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: folder_loader_bench DIR [THREADS] [BATCH] [EPOCHS] [SIZE] "
                        "[center|none|ta_wide|ra|imagenet|cifar10|svhn] [bilinear|bicubic]\n");
        return 2;
    }
    const char *dir = argv[1];
    int threads = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int batch = argc > 3 ? atoi(argv[3]) : 256, epochs = argc > 4 ? atoi(argv[4]) : 1;
    int size = argc > 5 ? atoi(argv[5]) : 224;
    const int center = argc > 6 && strcmp(argv[6], "center") == 0, channels = center ? 1 : 3;
    dp_image_index_t index;
    dp_index_options_t io = {.threads = threads};
    if (dp_image_index_build(dir, "train", NULL, 0, &io, &index) != DP_OK) return die("index");
    dp_folder_options_t fo = {0};
    fo.train = dp_sample_options_default(center ? DP_SAMPLE_FIXED : DP_SAMPLE_TRAIN, channels, size, size);
    fo.eval = dp_sample_options_default(DP_SAMPLE_EVAL, channels, size, size);
    const int jitter = argc > 6 && !strncmp(argv[6], "cj:", 3);
    if (jitter && dp_color_jitter_parse(argv[6] + 3, "color jitter", &fo.train.color_jitter) != DP_OK)
        return die("the 6th argument");
    if (argc > 6 && !center && !jitter && dp_auto_augment_parse(argv[6], "augmentation", &fo.train.auto_augment.kind) != DP_OK)
        return die("the 6th argument");
    if (argc > 7 && strcmp(argv[7], "bilinear") != 0 && strcmp(argv[7], "bicubic") != 0) {
        fprintf(stderr, "folder_loader_bench: the 7th argument '%s' is not bilinear or bicubic\n", argv[7]);
        return 2;
    }
    fo.train.interpolation = fo.eval.interpolation =
        argc > 7 && !strcmp(argv[7], "bicubic") ? DP_INTERP_BICUBIC : DP_INTERP_BILINEAR;
    dp_batch_source_t *src;
    if (dp_folder_source_new(&index, &fo, &src) != DP_OK) return die("source");
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    if (!center && dp_batch_source_set_normalize(src, 3, mean, std) != DP_OK) return die("normalize");
    const int count = dp_batch_source_info(src)->count;
    if (batch > count) batch = count;
    dp_batch_loader_config_t lc = {.batch_size = batch, .shuffle = 1, .seed = 1, .training = 1, .threads = threads};
    dp_batch_loader_t *loader;
    if (dp_batch_loader_new(src, &lc, &loader) != DP_OK) return die("loader");
    float *x = malloc(sizeof(float) * (size_t)batch * channels * size * size);
    if (!x) return die("floats");
    double checksum = 0.0, start = now_sec();
    long images = 0;
    for (int e = 0; e < epochs; e++) {
        if (dp_batch_loader_seek(loader, e, 0) != DP_OK) return die("seek");
        const dp_batch_t *b;
        for (;;) {
            if (dp_batch_loader_next(loader, &b) != DP_OK) return die("next");
            if (!b) break;
            dp_pixels_to_input(b->pixels, b->n, channels, (size_t)size * size, b->normalize, x);
            checksum += x[0] + x[(size_t)b->n * channels * size * size - 1];
            images += b->n;
        }
    }
    double seconds = now_sec() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("dptrain: %.1f img/s, peak RSS %.1f MB (%ld images, %d loader threads, batch %d, %dx%d, %s, checksum %.3f)\n",
           images / seconds, ru.ru_maxrss / 1024.0, images, threads, batch, size, size,
           dp_interpolation_name(fo.train.interpolation), checksum);
    free(x);
    dp_batch_loader_free(loader);
    dp_batch_source_free(src);
    return 0;
}
