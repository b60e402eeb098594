/* fuzz_image.c - libFuzzer target for the image decoders (JPEG, PNG,
 * PGM/PPM, BMP), the probe and the transforms: any bytes must probe and
 * decode into an image whose pixels can all be read, or fail with one line
 * starting with the name given, never crash, leak or overrun; a decoded
 * image then goes through a resized crop, a resize + center crop and the
 * model-input conversion, and the bytes through the per-sample path (train
 * with and without DCT scaling, eval), whose failures must leave the batch
 * slot untouched. The last byte of the input picks the channels, the
 * modes and whether EXIF is ignored (it is also part of the image).
 *
 * Images whose header promises more than 2^22 pixels are probed only: a
 * decoder would legitimately allocate their size (up to DP_IMAGE_MAX_PIXELS,
 * hundreds of MB), which libFuzzer counts as running out of memory.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON -DDPTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
 *   cmake --build build-fuzz -j2 --target fuzz_image
 *   /usr/bin/python3 tests/fixtures/image/make_formats.py seeds && mkdir -p corpus && (cd seeds && cp *.jpg *.png *.p?m *.bmp ../corpus/)
 *   build-fuzz/fuzz_image -max_total_time=600 -max_len=65536 -dict=tests/fuzz_image.dict corpus/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image.h"
#include "dptrain/image_sample.h"
#include "dptrain/image_transform.h"

static void check_failure(const char *name) {
    const char *message = dp_error_message();
    size_t n = strlen(name);
    if (strncmp(message, name, n) != 0 || message[n] != ':' || strchr(message, '\n')) abort();
}

static void transforms(const dp_image_t *image, unsigned control) {
    unsigned char out[3 * 17 * 13];
    int h = image->height, w = image->width;
    dp_crop_box_t box = {(int)(control % (unsigned)h), (int)(control / 3 % (unsigned)w), 0, 0};
    box.height = 1 + (int)(control / 7 % (unsigned)(h - box.top));
    box.width = 1 + (int)(control / 11 % (unsigned)(w - box.left));
    const dp_interpolation_t filter = (control >> 1) & 1 ? DP_INTERP_BICUBIC : DP_INTERP_BILINEAR;
    if (dp_image_resized_crop(image, box, 17, 13, (int)(control & 1), filter, out) != DP_OK) abort();
    if (dp_image_resize_center_crop(image, 1 + (int)(control % 40), 17, 13, filter, out) != DP_OK) abort();
    float input[3 * 8 * 8];
    if (dp_image_to_input(image, image->channels, 8, 8, input) != DP_OK) abort();
    for (int i = 0; i < image->channels * 64; i++)
        if (!(input[i] >= 0.0f && input[i] <= 1.0f + 1e-6f)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned control = size ? data[size - 1] : 0;
    dp_image_info_t info;
    if (dp_image_probe(data, size, "<fuzz>", (int)(control >> 7), &info) != DP_OK) {
        check_failure("<fuzz>");
    } else if ((size_t)info.width * info.height > ((size_t)1 << 22)) {
        return 0;
    }
    dp_image_options_t options = {.channels = (int)(control % 3), .ignore_exif = (int)(control >> 7)};
    if (options.channels == 2) options.channels = 3;
    dp_image_t image;
    if (dp_image_decode_with(data, size, "<fuzz>", &options, &image) == DP_OK) {
        if (image.channels != 1 && image.channels != 3) abort();
        size_t n = (size_t)image.channels * image.height * image.width;
        unsigned sum = 0;
        for (size_t i = 0; i < n; i++) sum += image.pixels[i]; /* every pixel readable (ASan) */
        if (sum == 1u << 31) abort();
        transforms(&image, control * 2654435761u);
        dp_image_free(&image);
    } else {
        if (image.pixels != NULL) abort();
        check_failure("<fuzz>");
    }
    unsigned char slot[3 * 24 * 20], untouched[3 * 24 * 20];
    memset(untouched, 0xa5, sizeof untouched);
    for (int mode = 0; mode < 3; mode++) {
        int channels = control & 2 ? 1 : 3;
        dp_sample_options_t o = dp_sample_options_default(mode == 2 ? DP_SAMPLE_EVAL : DP_SAMPLE_TRAIN, channels, 24, 20);
        o.dct_scale = mode == 0;
        o.ignore_exif = (int)(control >> 7);
        dp_rng_t rng;
        dp_rng_seed(&rng, size);
        memcpy(slot, untouched, sizeof slot);
        if (dp_image_sample(data, size, "<fuzz>", &o, &rng, slot, NULL) != DP_OK) {
            check_failure("<fuzz>");
            if (memcmp(slot, untouched, sizeof slot) != 0) abort();
        }
    }
    return 0;
}
