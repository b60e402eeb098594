/* test_image_list.c - image lists (src/data/image_list.c, image_folder.h):
 * a text or CSV file of image paths and labels as an image folder's split.
 * - text lists: comments, blank lines, CR line ends, a byte-order mark,
 *   paths with spaces, the label the last field; the index keeps the
 *   list's order, paths relative to the list's folder; named labels give
 *   the sorted names as classes, numbers give "0" .. the largest;
 * - CSV: the header skipped, quoted fields ("" and commas inside), columns
 *   after the second ignored;
 * - a test list against the training classes: by name, numbers against
 *   named classes, an unknown label refused naming LIST:LINE;
 * - every malformed list one line naming the list and line;
 * - DIR/train.txt, DIR/val.csv found as the splits (before folders), a
 *   list given as the data itself detected, the library's in-memory load,
 *   and a list's hold-out the same files as its folder's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/data.h"
#include "dptrain/image_folder.h"
#include "testing.h"

#define SIDE 4

static char root[512];

/* root/relative (testing_tmp_file's: the last 8 stay valid) */
static const char *at(const char *relative) {
    char name[600];
    snprintf(name, sizeof name, "lists/%s", relative);
    return testing_tmp_file(name);
}

static void write_png(const char *relative, int value) {
    uint8_t pixels[SIDE * SIDE];
    memset(pixels, value, sizeof pixels);
    testing_write_png(at(relative), 1, SIDE, SIDE, pixels);
}

static void write_text(const char *relative, const char *text, size_t n) {
    FILE *f = fopen(at(relative), "wb");
    DP_ASSERT(f && fwrite(text, 1, n, f) == n && fclose(f) == 0);
}
#define WRITE(relative, literal) write_text(relative, literal, sizeof literal - 1)

/* The folder: pics/{cat,dog}/N.png, "pics/my dog.png", and the lists beside it. */
static void make_folder(void) {
    snprintf(root, sizeof root, "%s", testing_tmp_file("lists"));
    DP_ASSERT(mkdir(root, 0755) == 0);
    DP_ASSERT(mkdir(at("pics"), 0755) == 0 && mkdir(at("pics/cat"), 0755) == 0 && mkdir(at("pics/dog"), 0755) == 0);
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "pics/cat/%d.png", i);
        write_png(name, 10 + i);
        snprintf(name, sizeof name, "pics/dog/%d.png", i);
        write_png(name, 50 + i);
    }
    write_png("pics/my dog.png", 99);
}

static int path_is(const dp_image_index_t *x, int i, const char *below) {
    return i < x->count && strcmp(x->paths[i] + x->root_length, below) == 0;
}

static void test_text(void) {
    /* a byte-order mark, a comment, a blank line, CR line ends, a tab, a path with a space */
    WRITE("named.txt", "\xEF\xBB\xBFpics/dog/3.png dog\r\n# a comment\r\n\r\npics/my dog.png\tdog\r\n"
                       "  pics/cat/0.png   cat  \r\n");
    dp_image_index_t x;
    CHECK(dp_image_index_build(at("named.txt"), "", NULL, 0, NULL, &x) == DP_OK, "named.txt: %s", dp_error_message());
    CHECK(x.count == 3 && x.num_classes == 2 && !strcmp(x.class_names[0], "cat") && !strcmp(x.class_names[1], "dog"),
          "named labels: %d files, %d classes (sorted names)", x.count, x.num_classes);
    CHECK(path_is(&x, 0, "pics/dog/3.png") && path_is(&x, 1, "pics/my dog.png") && path_is(&x, 2, "pics/cat/0.png") &&
              x.labels[0] == 1 && x.labels[1] == 1 && x.labels[2] == 0,
          "the list's order, paths below its folder, labels: %s %d", x.count ? x.paths[0] : "-", x.count ? x.labels[0] : -1);
    CHECK(!strncmp(x.paths[0], root, strlen(root)), "paths joined to the list's folder: %s", x.paths[0]);
    dp_image_index_free(&x);
    /* numbers: the classes 0 .. the largest, gaps kept */
    WRITE("numbers.txt", "pics/cat/1.png 0\npics/dog/1.png 3\n");
    CHECK(dp_image_index_build(at("numbers.txt"), "", NULL, 0, NULL, &x) == DP_OK && x.num_classes == 4 &&
              !strcmp(x.class_names[3], "3") && x.labels[0] == 0 && x.labels[1] == 3,
          "numbered labels: %d classes: %s", x.num_classes, dp_error_message());
    dp_image_index_free(&x);
    /* absolute paths: kept, root_length 0 */
    char text[2048];
    int n = snprintf(text, sizeof text, "%s/pics/cat/2.png cat\n%s/pics/dog/2.png dog\n", root, root);
    write_text("absolute.txt", text, (size_t)n);
    CHECK(dp_image_index_build(at("absolute.txt"), "", NULL, 0, NULL, &x) == DP_OK && x.root_length == 0 &&
              !strcmp(x.paths[1], at("pics/dog/2.png")),
          "absolute paths: %s", dp_error_message());
    dp_image_index_free(&x);
}

static void test_csv(void) {
    WRITE("k.csv", "image,label,source\n\"pics/cat/3.png\",cat,x\n pics/dog/4.png , dog \n"
                   "\"pics/my dog.png\",\"dog\"\n");
    dp_image_index_t x;
    CHECK(dp_image_index_build(at("k.csv"), "", NULL, 0, NULL, &x) == DP_OK, "k.csv: %s", dp_error_message());
    CHECK(x.count == 3 && x.num_classes == 2 && path_is(&x, 0, "pics/cat/3.png") && path_is(&x, 1, "pics/dog/4.png") &&
              path_is(&x, 2, "pics/my dog.png") && x.labels[0] == 0 && x.labels[2] == 1,
          "CSV: %d files, %d classes, first %s", x.count, x.num_classes, x.count ? x.paths[0] : "-");
    dp_image_index_free(&x);
    /* a quoted label with a comma and a quote in it is a name like any other */
    WRITE("q.csv", "p,l\npics/cat/0.png,\"a, \"\"b\"\"\"\npics/dog/0.png,c\n");
    CHECK(dp_image_index_build(at("q.csv"), "", NULL, 0, NULL, &x) == DP_OK && x.num_classes == 2 &&
              !strcmp(x.class_names[0], "a, \"b\""),
          "quoted label: %s / %s", x.num_classes ? x.class_names[0] : "-", dp_error_message());
    dp_image_index_free(&x);
}

static void test_test_lists(void) {
    char *names[] = {"cat", "dog"};
    dp_image_index_t x;
    WRITE("t.txt", "pics/dog/0.png dog\npics/cat/4.png cat\n");
    CHECK(dp_image_index_build(at("t.txt"), "", names, 2, NULL, &x) == DP_OK && x.labels[0] == 1 && x.labels[1] == 0 &&
              x.num_classes == 2,
          "a test list by name: %s", dp_error_message());
    dp_image_index_free(&x);
    /* numbers against named classes (an ImageNet val.txt): outputs */
    WRITE("n.txt", "pics/dog/0.png 1\npics/cat/4.png 0\n");
    CHECK(dp_image_index_build(at("n.txt"), "", names, 2, NULL, &x) == DP_OK && x.labels[0] == 1 && x.labels[1] == 0,
          "numbers against names: %s", dp_error_message());
    dp_image_index_free(&x);
    WRITE("u.txt", "pics/dog/0.png dog\n\npics/cat/4.png cow\n");
    CHECK(dp_image_index_build(at("u.txt"), "", names, 2, NULL, &x) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "u.txt:3: label 'cow' is not one of the 2 classes (cat, dog)"),
          "an unknown label: %s", dp_error_message());
    WRITE("big.txt", "pics/dog/0.png 1\npics/cat/4.png 2\n");
    CHECK(dp_image_index_build(at("big.txt"), "", names, 2, NULL, &x) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "big.txt:2: label '2' is not one of"),
          "a number past the classes: %s", dp_error_message());
}

/* refused(list, text, what): the list refused with `what` in its one line */
static void refused(const char *name, const char *text, size_t n, const char *what) {
    write_text(name, text, n);
    dp_image_index_t x;
    dp_status_t status = dp_image_index_build(at(name), "", NULL, 0, NULL, &x);
    CHECK(status != DP_OK && strstr(dp_error_message(), what) && !strchr(dp_error_message(), '\n'),
          "%s: want '%s', got: %s", name, what, dp_error_message());
}
#define REFUSED(name, literal, what) refused(name, literal, sizeof literal - 1, what)

static void test_refused(void) {
    REFUSED("r1.txt", "pics/cat/0.png cat\npics/dog/0.png\n", "r1.txt:2: 'pics/dog/0.png' has no label");
    REFUSED("r2.txt", "# nothing\n\n", "r2.txt: lists no image");
    REFUSED("r3.csv", "path,label\n", "r3.csv: lists no image (a header line");
    REFUSED("r4.csv", "p,l\n\"pics/cat/0.png,cat\n", "r4.csv:2: a quoted field without its closing quote");
    REFUSED("r5.csv", "p,l\npics/cat/0.png\n", "r5.csv:2: one field, expected PATH,LABEL");
    REFUSED("r6.csv", "p,l\npics/cat/0.png,\n", "r6.csv:2: an empty label");
    REFUSED("r7.csv", "p,l\n\"pics/cat/0.png\"x,cat\n", "r7.csv:2: text after a quoted field's closing quote");
    REFUSED("r8.txt", "pics/cat/0.png cat\n/pics/dog/0.png dog\n", "r8.txt:2: '/pics/dog/0.png' is absolute");
    REFUSED("r9.txt", "pics/cat/0.png c\0at\n", "r9.txt:1: a NUL byte");
    /* an unreadable file: the index's report (a line, then one per file), or with skip_bad left out and counted */
    WRITE("r10.txt", "pics/cat/0.png cat\npics/cat/nope.png cat\n");
    dp_image_index_t x;
    CHECK(dp_image_index_build(at("r10.txt"), "", NULL, 0, NULL, &x) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "r10.txt: 1 file cannot be read") &&
              strstr(dp_error_message(), "pics/cat/nope.png: cannot open image"),
          "an unreadable file: %s", dp_error_message());
    dp_index_options_t skip = {.skip_bad = 1};
    CHECK(dp_image_index_build(at("r10.txt"), "", NULL, 0, &skip, &x) == DP_OK && x.count == 1 && x.skipped == 1,
          "skip_bad: %s", dp_error_message());
    dp_image_index_free(&x);
}

/* DIR/train.txt and DIR/val.csv as the splits; a list as the data; the in-memory load; the hold-out */
static void test_splits(void) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s", at("pics"));
    CHECK(!strcmp(dp_image_folder_train_split(dir), "") && dp_image_folder_test_split(dir) == NULL,
          "class folders alone: no splits");
    /* hold-outs: the folder's and a list of the same files in its order (paths below pics/ the same) */
    WRITE("pics/all.txt", "cat/0.png cat\ncat/1.png cat\ncat/2.png cat\ncat/3.png cat\ncat/4.png cat\n"
                          "dog/0.png dog\ndog/1.png dog\ndog/2.png dog\ndog/3.png dog\ndog/4.png dog\n");
    dp_image_index_t folder, list, held_folder, held_list;
    DP_ASSERT(dp_image_index_build(dir, "", NULL, 0, NULL, &folder) == DP_OK);
    DP_ASSERT(dp_image_index_build(at("pics/all.txt"), "", NULL, 0, NULL, &list) == DP_OK);
    DP_ASSERT(dp_image_index_hold_out(&folder, 0.4, "pics", &held_folder) == DP_OK);
    DP_ASSERT(dp_image_index_hold_out(&list, 0.4, "all.txt", &held_list) == DP_OK);
    int same = held_folder.count == held_list.count && held_folder.count == 4;
    for (int i = 0; same && i < held_list.count; i++)
        same = !strcmp(held_folder.paths[i] + held_folder.root_length, held_list.paths[i] + held_list.root_length);
    CHECK(same, "a list's hold-out = its folder's: %d and %d held out", held_folder.count, held_list.count);
    dp_image_index_free(&folder), dp_image_index_free(&list);
    dp_image_index_free(&held_folder), dp_image_index_free(&held_list);
    dp_data_layout_t layout = DP_DATA_IDX;
    CHECK(dp_data_detect_layout(at("pics/all.txt"), &layout) == DP_OK && layout == DP_DATA_IMAGE_FOLDER,
          "a list as the data: %s", dp_error_message());
    WRITE("pics/all.dat", "x");
    CHECK(dp_data_detect_layout(at("pics/all.dat"), &layout) != DP_OK &&
              strstr(dp_error_message(), "is not a data directory (nor an image list: a .txt or .csv file)"),
          "another file: %s", dp_error_message());
    /* lists before folders: DIR/train.txt over DIR/train, DIR/val.csv over DIR/test */
    DP_ASSERT(mkdir(at("pics/train"), 0755) == 0 && mkdir(at("pics/test"), 0755) == 0);
    WRITE("pics/train.txt", "cat/0.png cat\ncat/1.png cat\ndog/0.png dog\n");
    WRITE("pics/val.csv", "path,label\ndog/4.png,dog\ncat/4.png,cat\n");
    CHECK(!strcmp(dp_image_folder_train_split(dir), "train.txt") && dp_image_folder_test_split(dir) &&
              !strcmp(dp_image_folder_test_split(dir), "val.csv"),
          "the splits: %s and %s", dp_image_folder_train_split(dir), dp_image_folder_test_split(dir));
    dp_dataset_t train, test;
    CHECK(dp_dataset_load_with(dir, "train", NULL, &train) == DP_OK && train.count == 3 && train.labels[2] == 1,
          "in memory, train.txt: %s", dp_error_message());
    CHECK(dp_dataset_load_with(dir, "test", NULL, &test) == DP_OK && test.count == 2 && test.labels[0] == 1 &&
              test.labels[1] == 0 && test.pixels[0] == 54 && test.pixels[SIDE * SIDE] == 14,
          "in memory, val.csv in its order: %s", dp_error_message());
    dp_dataset_free(&train), dp_dataset_free(&test);
}

int main(void) {
    make_folder();
    test_text();
    test_csv();
    test_test_lists();
    test_refused();
    test_splits();
    return testing_finish("test_image_list");
}
