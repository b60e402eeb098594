/* fuzz_image.c - libFuzzer target for the PNG/PGM decoder: any bytes must
 * decode into an image whose pixels can all be read (and converted to a
 * model input), or fail with one line starting with the name given, never
 * crash, leak or overrun.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON && cmake --build build-fuzz -j2 --target fuzz_image
 *   mkdir -p corpus && build-fuzz/fuzz_image -max_total_time=120 -max_len=4096 corpus/
 * (tests/test_image.c writes seed files into its temporary directory). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dp_image_t image;
    dp_status_t status = dp_image_decode(data, size, "<fuzz>", &image);
    if (status == DP_OK) {
        if (image.channels != 1 && image.channels != 3) abort();
        size_t n = (size_t)image.channels * image.height * image.width;
        unsigned sum = 0;
        for (size_t i = 0; i < n; i++) sum += image.pixels[i]; /* every pixel readable (ASan) */
        float input[3 * 8 * 8];
        if (dp_image_to_input(&image, image.channels, 8, 8, input) != DP_OK) abort();
        for (int i = 0; i < image.channels * 64; i++)
            if (!(input[i] >= 0.0f && input[i] <= 1.0f + 1e-6f)) abort();
        (void)sum;
        dp_image_free(&image);
        return 0;
    }
    const char *message = dp_error_message();
    if (image.pixels != NULL || strncmp(message, "<fuzz>: ", 8) != 0 || strchr(message, '\n')) abort();
    return 0;
}
