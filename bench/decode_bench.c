/* decode_bench.c - the per-sample training path on one thread: every
 * JPEG/PNG of a folder (recursively, read into memory first: no file I/O
 * is timed) through dp_image_sample, RandomResizedCrop to 224 x 224 + a
 * flip with p = 0.5 into a (3, 224, 224) uint8 slot, as the loader threads
 * will run it; with DCT scaling (the train default) and without (the exact
 * path, torchvision's bytes), and the evaluation transform (Resize 256 +
 * CenterCrop 224). Prints images/s of each, the mean |difference| that DCT
 * scaling makes on these photographs (same crops), and the pixels decoded
 * per image. bench/decode_vs_pil.sh runs it beside PIL + torchvision.
 *
 * usage: decode_bench FOLDER [passes]
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/image_sample.h"

typedef struct {
    char *path;
    unsigned char *data;
    size_t size;
} file_t;

static file_t *files;
static int file_count, file_capacity;

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)ftw;
    const char *ext = strrchr(path, '.');
    if (type != FTW_F || !ext || (strcmp(ext, ".jpg") != 0 && strcmp(ext, ".JPEG") != 0 && strcmp(ext, ".png") != 0))
        return 0;
    if (file_count == file_capacity) {
        file_capacity = file_capacity ? 2 * file_capacity : 1024;
        files = realloc(files, sizeof *files * (size_t)file_capacity);
    }
    files[file_count++] = (file_t){.path = strdup(path)};
    return 0;
}

static int by_path(const void *a, const void *b) { return strcmp(((const file_t *)a)->path, ((const file_t *)b)->path); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* images/s of `passes` passes over the files; the outputs of the last pass in out (if not NULL). */
static double run(const dp_sample_options_t *o, int passes, unsigned char *out, long *decoded) {
    unsigned char slot[3 * 224 * 224];
    *decoded = 0;
    double start = now();
    for (int p = 0; p < passes; p++)
        for (int i = 0; i < file_count; i++) {
            dp_rng_t rng;
            dp_rng_seed(&rng, dp_seed_mix(0, (uint64_t)i)); /* the same crops in every pass and mode */
            dp_sample_report_t rep;
            unsigned char *dst = out && p == passes - 1 ? out + (size_t)i * sizeof slot : slot;
            if (dp_image_sample(files[i].data, files[i].size, files[i].path, o, &rng, dst, &rep) != DP_OK) {
                fprintf(stderr, "decode_bench: %s\n", dp_error_message());
                exit(1);
            }
            *decoded += rep.decoded_pixels;
        }
    return (double)passes * file_count / (now() - start);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: decode_bench FOLDER [passes]\n");
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    if (nftw(argv[1], collect, 16, FTW_PHYS) != 0 || file_count == 0) {
        fprintf(stderr, "decode_bench: no .jpg/.png files under %s\n", argv[1]);
        return 1;
    }
    qsort(files, (size_t)file_count, sizeof *files, by_path);
    long bytes = 0;
    for (int i = 0; i < file_count; i++)
        if (dp_image_file_bytes(files[i].path, &files[i].data, &files[i].size) != DP_OK) {
            fprintf(stderr, "decode_bench: %s\n", dp_error_message());
            return 1;
        } else {
            bytes += (long)files[i].size;
        }
    size_t slot = 3 * 224 * 224;
    unsigned char *with = malloc(slot * file_count), *without = malloc(slot * file_count);
    dp_sample_options_t train = dp_sample_options_default(DP_SAMPLE_TRAIN, 3, 224, 224), exact = train;
    exact.dct_scale = 0;
    dp_sample_options_t eval = dp_sample_options_default(DP_SAMPLE_EVAL, 3, 224, 224);
    long decoded_on, decoded_off, decoded_eval;
    run(&train, 1, NULL, &decoded_on); /* warm the caches and the allocator */
    double on = run(&train, passes, with, &decoded_on);
    double off = run(&exact, passes, without, &decoded_off);
    double ev = run(&eval, passes, NULL, &decoded_eval);
    long diff = 0;
    for (size_t i = 0; i < slot * (size_t)file_count; i++) diff += abs((int)with[i] - without[i]);
    double per = (double)passes * file_count;
    printf("decode_bench: %d images (%.0f KB each), %d passes, 1 thread\n", file_count, bytes / 1024.0 / file_count,
           passes);
    printf("dptrain train (RandomResizedCrop 224 + flip), DCT scaling on:  %8.1f img/s, %.0f kpixels decoded/image\n", on,
           decoded_on / per / 1000);
    printf("dptrain train (RandomResizedCrop 224 + flip), DCT scaling off: %8.1f img/s, %.0f kpixels decoded/image\n", off,
           decoded_off / per / 1000);
    printf("dptrain eval (Resize 256 + CenterCrop 224):                   %8.1f img/s\n", ev);
    printf("DCT scaling on these photographs: mean |difference| %.3f levels from the exact path (same crops)\n",
           (double)diff / ((double)slot * file_count));
    printf("dptrain: %.1f %.1f %.1f\n", on, off, ev); /* for the script */
    for (int i = 0; i < file_count; i++) free(files[i].path), free(files[i].data);
    free(files);
    free(with);
    free(without);
    return 0;
}
