/* decode_bench.c - the per-sample training path on one thread: every
 * JPEG/PNG of a folder (recursively, read into memory first: no file I/O
 * is timed) through dp_image_sample, RandomResizedCrop to 224 x 224 + a
 * flip with p = 0.5 into a (3, 224, 224) uint8 slot, as the loader threads
 * will run it; with DCT scaling (the train default) and without (the exact
 * path, torchvision's bytes), and the evaluation transform (Resize 256 +
 * CenterCrop 224). Prints images/s of each (by the process's CPU time,
 * and by the wall clock), the mean |difference| that DCT
 * scaling makes on these photographs (same crops), and the pixels decoded
 * per image. bench/decode_vs_pil.sh runs it beside PIL + torchvision.
 *
 * usage: decode_bench FOLDER [passes] [size]
 *   size: the output's side (default 224; at 112 most crops of ~500 x 375
 *   photographs shrink by 2 or more, so DCT scaling applies)
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/image_sample.h"

#define MAX_SIZE 512

static int size = 224; /* the output's side */

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

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* images/s of `passes` passes over the files, by the process's CPU time (a
 * shared machine's load changes the wall clock's figure more) and, in
 * *wall, by the wall clock; the outputs of the last pass in out (if not NULL). */
static double run(const dp_sample_options_t *o, int passes, unsigned char *out, long *decoded, double *wall) {
    unsigned char slot[3 * MAX_SIZE * MAX_SIZE];
    *decoded = 0;
    double start = seconds(CLOCK_PROCESS_CPUTIME_ID), start_wall = seconds(CLOCK_MONOTONIC);
    for (int p = 0; p < passes; p++)
        for (int i = 0; i < file_count; i++) {
            dp_rng_t rng;
            dp_rng_seed(&rng, dp_seed_mix(0, (uint64_t)i)); /* the same crops in every pass and mode */
            dp_sample_report_t rep;
            unsigned char *dst = out && p == passes - 1 ? out + (size_t)i * 3 * size * size : slot;
            if (dp_image_sample(files[i].data, files[i].size, files[i].path, o, &rng, dst, &rep) != DP_OK) {
                fprintf(stderr, "decode_bench: %s\n", dp_error_message());
                exit(1);
            }
            *decoded += rep.decoded_pixels;
        }
    *wall = (double)passes * file_count / (seconds(CLOCK_MONOTONIC) - start_wall);
    return (double)passes * file_count / (seconds(CLOCK_PROCESS_CPUTIME_ID) - start);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: decode_bench FOLDER [passes] [size]\n");
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    size = argc > 3 ? atoi(argv[3]) : 224;
    if (size < 1 || size > MAX_SIZE) {
        fprintf(stderr, "decode_bench: size %d (1 to %d)\n", size, MAX_SIZE);
        return 2;
    }
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
    size_t slot = 3 * (size_t)size * size;
    unsigned char *with = malloc(slot * file_count), *without = malloc(slot * file_count);
    dp_sample_options_t train = dp_sample_options_default(DP_SAMPLE_TRAIN, 3, size, size), exact = train;
    exact.dct_scale = 0;
    dp_sample_options_t eval = dp_sample_options_default(DP_SAMPLE_EVAL, 3, size, size);
    long decoded_on, decoded_off, decoded_eval;
    double wall_on, wall_off, wall_eval;
    run(&train, 1, NULL, &decoded_on, &wall_on); /* warm the caches and the allocator */
    double on = run(&train, passes, with, &decoded_on, &wall_on);
    double off = run(&exact, passes, without, &decoded_off, &wall_off);
    double ev = run(&eval, passes, NULL, &decoded_eval, &wall_eval);
    long diff = 0;
    for (size_t i = 0; i < slot * (size_t)file_count; i++) diff += abs((int)with[i] - without[i]);
    double per = (double)passes * file_count;
    printf("decode_bench: %d images (%.0f KB each), %d passes, 1 thread, output %d x %d\n", file_count,
           bytes / 1024.0 / file_count, passes, size, size);
    printf("images/s by CPU time (by the wall clock):\n");
    printf("dptrain train (RandomResizedCrop + flip), DCT scaling on:  %7.1f (%7.1f), %.0f kpixels decoded/image\n",
           on, wall_on, decoded_on / per / 1000);
    printf("dptrain train (RandomResizedCrop + flip), DCT scaling off: %7.1f (%7.1f), %.0f kpixels decoded/image\n",
           off, wall_off, decoded_off / per / 1000);
    printf("dptrain eval (Resize + CenterCrop):                       %7.1f (%7.1f)\n", ev, wall_eval);
    printf("DCT scaling on these photographs: mean |difference| %.3f levels from the exact path (same crops)\n",
           (double)diff / ((double)slot * file_count));
    printf("dptrain: %.1f %.1f %.1f %.1f %.1f %.1f\n", on, off, ev, wall_on, wall_off, wall_eval); /* for the script */
    for (int i = 0; i < file_count; i++) free(files[i].path), free(files[i].data);
    free(files);
    free(with);
    free(without);
    return 0;
}
