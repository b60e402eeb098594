/* fuzz_image_list.c - libFuzzer target for image lists (src/data/image_list.c
 * through image_folder.h's dp_image_index_build): any bytes, written as a
 * text list or a CSV, must index or fail with one line starting with the
 * list's path (the unreadable-files report excepted: a line, then one per
 * file), never crash, leak or overrun; an index's labels must lie in
 * [0, num_classes) and its paths start with the list's folder. The last
 * byte picks the format (bit 0: CSV), whether the classes are given (bit 1:
 * "cat", "dog", "0") and whether unreadable files are skipped (bit 2). The
 * list names files of a folder made once (FOLDER/a.png, FOLDER/b.png), so
 * some lines index.
 *
 * Built only with -DDPTRAIN_FUZZ=ON and clang (not part of ctest):
 *   CC=clang cmake -S . -B build-fuzz -DDPTRAIN_FUZZ=ON -DDPTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
 *   cmake --build build-fuzz -j2 --target fuzz_image_list
 *   mkdir -p corpus-list && build-fuzz/fuzz_image_list -max_total_time=300 -dict=tests/fuzz_image_list.dict corpus-list/
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/image.h"
#include "dptrain/image_folder.h"

static char folder[256];

/* A 2 x 2 gray binary PGM. */
static void write_image(const char *name) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite("P5\n2 2\n255\n\1\2\3\4", 1, 15, f) != 15 || fclose(f) != 0) abort();
}

static void make_folder(void) {
    if (folder[0]) return;
    snprintf(folder, sizeof folder, "/tmp/fuzz_image_list.%d", (int)getpid());
    if (mkdir(folder, 0755) != 0) abort();
    write_image("a.png");
    write_image("b.png");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    make_folder();
    const uint8_t mode = data[size - 1];
    char list[400];
    snprintf(list, sizeof list, "%s/list.%s", folder, (mode & 1) ? "csv" : "txt");
    FILE *f = fopen(list, "wb");
    if (!f || fwrite(data, 1, size - 1, f) != size - 1 || fclose(f) != 0) abort();
    char *classes[] = {"cat", "dog", "0"};
    dp_index_options_t options = {.skip_bad = (mode & 4) != 0, .threads = 1};
    dp_image_index_t x;
    dp_status_t status = dp_image_index_build(list, "", (mode & 2) ? classes : NULL, (mode & 2) ? 3 : 0, &options, &x);
    if (status != DP_OK) {
        const char *message = dp_error_message();
        if (strncmp(message, list, strlen(list)) != 0 && strncmp(message, "out of memory", 13) != 0) {
            fprintf(stderr, "a failure that does not name the list: %s\n", message);
            abort();
        }
        if (strchr(message, '\n') && !strstr(message, "cannot be read as an image")) {
            fprintf(stderr, "a failure of more than one line: %s\n", message);
            abort();
        }
        unlink(list);
        return 0;
    }
    for (int i = 0; i < x.count; i++) {
        if (x.labels[i] < 0 || x.labels[i] >= x.num_classes) abort();
        if (x.root_length && strncmp(x.paths[i], folder, strlen(folder)) != 0) abort();
    }
    dp_image_index_free(&x);
    unlink(list);
    return 0;
}
