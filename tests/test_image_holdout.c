/* test_image_holdout.c - a test split held out of an image folder that has
 * none (image_folder.h dp_image_index_hold_out, data.h's layouts):
 * - per class round(fraction x n), at most n - 1 (a class of 1 keeps its
 *   file), both parts disjoint, together the whole index, each in index
 *   order; the same files for any listing order of the index (a reversed
 *   one) and whatever other classes hold; a file added to a class moves
 *   at most one other file across the line;
 * - a fraction of 0, 1, below 0 or not a number refused; nothing to hold
 *   out (every class a single file) refused naming the folder, the index
 *   unchanged;
 * - on disk: class folders directly in DIR are an image folder (the index
 *   of the split "" has paths CLASS/FILE below DIR), DIR/train without
 *   DIR/test too; dp_dataset_load of either gives train and test splits
 *   that are disjoint and make up the folder; DIR/val is the test split
 *   when there is no DIR/test (nothing held out); an empty DIR and a
 *   DIR/test without DIR/train are refused in one line naming DIR.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/data.h"
#include "dptrain/image_folder.h"
#include "testing.h"

/* --- indexes in memory --------------------------------------------------------------- */

/* An index of `count` files "CLASS/fNNN.png" below "ROOT/" with the given
 * labels, in the given order (paths point into one pool). */
static void make_index(dp_image_index_t *x, int num_classes, const int *labels, const int *numbers, int count) {
    memset(x, 0, sizeof *x);
    x->num_classes = num_classes;
    x->class_names = calloc((size_t)num_classes, sizeof *x->class_names);
    for (int c = 0; c < num_classes; c++) {
        x->class_names[c] = malloc(16);
        snprintf(x->class_names[c], 16, "class%d", c);
    }
    x->pool = malloc((size_t)count * 32 + 1);
    x->paths = calloc((size_t)count + 1, sizeof *x->paths);
    x->labels = calloc((size_t)count + 1, sizeof *x->labels);
    x->root_length = strlen("ROOT/");
    char *p = x->pool;
    for (int i = 0; i < count; i++) {
        int n = snprintf(p, 32, "ROOT/class%d/f%03d.png", labels[i], numbers[i]);
        x->paths[i] = p;
        x->labels[i] = labels[i];
        p += n + 1;
    }
    x->count = count;
}

static int find(const dp_image_index_t *x, const char *path) {
    for (int i = 0; i < x->count; i++)
        if (strcmp(x->paths[i], path) == 0) return i;
    return -1;
}

/* Whether `part`'s paths appear in `whole` in the same order. */
static int in_order(const dp_image_index_t *part, const dp_image_index_t *whole) {
    int last = -1;
    for (int i = 0; i < part->count; i++) {
        int at = find(whole, part->paths[i]);
        if (at <= last) return 0;
        last = at;
    }
    return 1;
}

static int count_label(const dp_image_index_t *x, int label) {
    int n = 0;
    for (int i = 0; i < x->count; i++) n += x->labels[i] == label;
    return n;
}

/* Classes of 10, 1 and 7 files (class 1's single file, class 2 listed first). */
enum { FILES = 18 };
static void three_classes(dp_image_index_t *x, int reversed) {
    int labels[FILES], numbers[FILES], n = 0;
    for (int k = 0; k < 7; k++) labels[n] = 2, numbers[n++] = k;
    for (int k = 0; k < 10; k++) labels[n] = 0, numbers[n++] = k;
    labels[n] = 1, numbers[n++] = 0;
    if (reversed)
        for (int i = 0; i < n / 2; i++) {
            int l = labels[i], m = numbers[i];
            labels[i] = labels[n - 1 - i], numbers[i] = numbers[n - 1 - i];
            labels[n - 1 - i] = l, numbers[n - 1 - i] = m;
        }
    make_index(x, 3, labels, numbers, n);
}

static void test_counts_and_parts(void) {
    static const struct { double fraction; int held[3]; } cases[] = {
        {0.1, {1, 0, 1}},   /* 10 x 0.1 = 1, a single file stays, 7 x 0.1 = 0.7 -> 1 */
        {0.5, {5, 0, 4}},   /* 3.5 -> 4 */
        {0.25, {3, 0, 2}},  /* 2.5 -> 3, 1.75 -> 2 */
        {0.95, {9, 0, 6}},  /* at most all but one */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        dp_image_index_t whole, x, held;
        three_classes(&whole, 0);
        three_classes(&x, 0);
        dp_status_t st = dp_image_index_hold_out(&x, cases[k].fraction, "ROOT", &held);
        CHECK(st == DP_OK, "fraction %g: %s", cases[k].fraction, dp_error_message());
        if (st != DP_OK) continue;
        for (int c = 0; c < 3; c++) {
            CHECK(count_label(&held, c) == cases[k].held[c], "fraction %g class %d: %d held out, expected %d",
                  cases[k].fraction, c, count_label(&held, c), cases[k].held[c]);
            CHECK(count_label(&held, c) + count_label(&x, c) == count_label(&whole, c), "class %d: files lost", c);
        }
        CHECK(held.count + x.count == FILES, "%d + %d files", held.count, x.count);
        int disjoint = 1;
        for (int i = 0; i < held.count; i++) disjoint &= find(&x, held.paths[i]) < 0 && find(&whole, held.paths[i]) >= 0;
        CHECK(disjoint, "fraction %g: a held-out file is also a training file, or not the folder's",
              cases[k].fraction);
        CHECK(in_order(&held, &whole) && in_order(&x, &whole), "fraction %g: the parts left the index order",
              cases[k].fraction);
        for (int i = 0; i < held.count; i++)
            CHECK(held.labels[i] == atoi(held.paths[i] + strlen("ROOT/class")), "%s: label %d", held.paths[i],
                  held.labels[i]);
        CHECK(held.num_classes == 3 && x.num_classes == 3 && !strcmp(held.class_names[2], "class2") &&
                  held.root_length == whole.root_length,
              "the parts keep the classes and the root");
        dp_image_index_free(&whole);
        dp_image_index_free(&x);
        dp_image_index_free(&held);
    }
}

/* Which files are held out is what every checkpoint's data.holdout has
 * meant (eval holds them out again): pinned, as derived outside the library
 * (the files of each class ordered by FNV-1a from 1469598103934665603 of
 * "CLASS/NAME", the first round(0.25 n) held out). */
static void test_selection_pinned(void) {
    static const char *expected[] = {"ROOT/class2/f001.png", "ROOT/class2/f003.png", "ROOT/class0/f002.png",
                                     "ROOT/class0/f004.png", "ROOT/class0/f007.png"}; /* in index order */
    dp_image_index_t x, held;
    three_classes(&x, 0);
    CHECK(dp_image_index_hold_out(&x, 0.25, "ROOT", &held) == DP_OK, "%s", dp_error_message());
    int same = held.count == 5;
    for (int i = 0; same && i < 5; i++) same = strcmp(held.paths[i], expected[i]) == 0;
    CHECK(same, "held out at 0.25: %d files, the first '%s' (expected class2/f001, f003, class0/f002, f004, f007)",
          held.count, held.count ? held.paths[0] : "");
    dp_image_index_free(&x);
    dp_image_index_free(&held);
}

/* The same files held out however the index lists them. */
static void test_listing_order(void) {
    dp_image_index_t a, b, held_a, held_b;
    three_classes(&a, 0);
    three_classes(&b, 1);
    CHECK(dp_image_index_hold_out(&a, 0.3, "ROOT", &held_a) == DP_OK, "%s", dp_error_message());
    CHECK(dp_image_index_hold_out(&b, 0.3, "ROOT", &held_b) == DP_OK, "%s", dp_error_message());
    int same = held_a.count == held_b.count;
    for (int i = 0; same && i < held_a.count; i++) same = find(&held_b, held_a.paths[i]) >= 0;
    CHECK(same, "a reversed listing held out other files");
    dp_image_index_free(&a);
    dp_image_index_free(&b);
    dp_image_index_free(&held_a);
    dp_image_index_free(&held_b);
}

/* Adding a file to a class of 40 moves at most one other file across the
 * line: the hash of each path decides, not its position in the listing (a
 * shuffle of the positions would move many), and the held-out files are
 * not a run of names (neither the first nor the last 8). */
static void test_added_file(void) {
    int labels[41] = {0}, numbers[41];
    for (int i = 0; i < 41; i++) numbers[i] = i;
    int worst = 0;
    for (int added = 0; added < 41; added++) { /* the file `added` missing from the smaller folder */
        int small_numbers[40], small_labels[40] = {0}, n = 0;
        for (int i = 0; i < 41; i++)
            if (i != added) small_numbers[n++] = numbers[i];
        dp_image_index_t before, after, held_before, held_after;
        make_index(&before, 1, small_labels, small_numbers, 40);
        make_index(&after, 1, labels, numbers, 41);
        CHECK(dp_image_index_hold_out(&before, 0.2, "ROOT", &held_before) == DP_OK, "%s", dp_error_message());
        CHECK(dp_image_index_hold_out(&after, 0.2, "ROOT", &held_after) == DP_OK, "%s", dp_error_message());
        CHECK(held_before.count == 8 && held_after.count == 8, "40 and 41 files at 0.2: %d and %d held out",
              held_before.count, held_after.count);
        int moved = 0; /* files of both folders held out in one and not the other */
        char name[32];
        snprintf(name, sizeof name, "ROOT/class0/f%03d.png", added);
        for (int i = 0; i < held_before.count; i++) moved += find(&held_after, held_before.paths[i]) < 0;
        for (int i = 0; i < held_after.count; i++)
            moved += strcmp(held_after.paths[i], name) != 0 && find(&held_before, held_after.paths[i]) < 0;
        if (moved > worst) worst = moved;
        dp_image_index_free(&before);
        dp_image_index_free(&after);
        dp_image_index_free(&held_before);
        dp_image_index_free(&held_after);
    }
    CHECK(worst <= 1, "adding a file moved %d others across the line", worst);
    dp_image_index_t x, held;
    make_index(&x, 1, labels, numbers, 40);
    CHECK(dp_image_index_hold_out(&x, 0.2, "ROOT", &held) == DP_OK, "%s", dp_error_message());
    int first = 0, last = 0;
    for (int i = 0; i < held.count; i++) {
        int n = atoi(held.paths[i] + strlen("ROOT/class0/f"));
        first += n < 8;
        last += n >= 32;
    }
    CHECK(first < 8 && last < 8, "the held-out files are a run of names");
    dp_image_index_free(&x);
    dp_image_index_free(&held);
}

static void test_refused(void) {
    static const double bad[] = {0.0, 1.0, -0.1, 1.5};
    for (size_t k = 0; k < sizeof bad / sizeof *bad + 1; k++) {
        double f = k < sizeof bad / sizeof *bad ? bad[k] : NAN;
        dp_image_index_t x, held;
        three_classes(&x, 0);
        CHECK(dp_image_index_hold_out(&x, f, "ROOT", &held) == DP_ERR_ARG && strstr(dp_error_message(), "--holdout"),
              "fraction %g: %s", f, dp_error_message());
        CHECK(x.count == FILES && held.count == 0 && !held.paths, "fraction %g: the index changed", f);
        dp_image_index_free(&x);
    }
    /* every class a single file: nothing to hold out */
    int labels[3] = {0, 1, 2}, numbers[3] = {0, 0, 0};
    dp_image_index_t x, held;
    make_index(&x, 3, labels, numbers, 3);
    CHECK(dp_image_index_hold_out(&x, 0.5, "mypictures", &held) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "mypictures: too few images to hold out a test split"),
          "%s", dp_error_message());
    CHECK(x.count == 3 && !strcmp(x.paths[2], "ROOT/class2/f000.png"), "the index changed on failure");
    dp_image_index_free(&x);
}

/* --- folders on disk --------------------------------------------------------------------- */

#define SIDE 4
static void write_png(const char *path, int value) {
    uint8_t pixels[SIDE * SIDE];
    memset(pixels, value, sizeof pixels);
    testing_write_png(path, 1, SIDE, SIDE, pixels);
}

/* DIR/PREFIX{ant,bee}/NNN.png: ant 6 files, bee 4; each file's value its own. */
static void make_classes(const char *dir, const char *prefix) {
    char path[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, prefix);
    mkdir(path, 0755);
    static const char *const classes[] = {"ant", "bee"};
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%s%s", dir, prefix, classes[c]);
        DP_ASSERT(mkdir(path, 0755) == 0);
        for (int i = 0; i < (c ? 4 : 6); i++) {
            snprintf(path, sizeof path, "%s/%s%s/%03d.png", dir, prefix, classes[c], i);
            write_png(path, 10 * c + i + 1);
        }
    }
}

/* train and test of dp_dataset_load: disjoint, together the folder's 10 values. */
static void check_loaded(const char *dir, double holdout, int expect_test) {
    dp_dataset_load_options_t o = {.holdout = holdout};
    dp_dataset_t train, test;
    DP_ASSERT(dp_dataset_load_with(dir, "train", &o, &train) == DP_OK);
    DP_ASSERT(dp_dataset_load_with(dir, "test", &o, &test) == DP_OK);
    CHECK(test.count == expect_test && train.count + test.count == 10, "%s: %d training, %d test images", dir,
          train.count, test.count);
    int seen[32] = {0};
    for (int i = 0; i < train.count; i++) seen[train.pixels[(size_t)i * SIDE * SIDE]]++;
    for (int i = 0; i < test.count; i++) seen[test.pixels[(size_t)i * SIDE * SIDE]]++;
    int each_once = 1;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < (c ? 4 : 6); i++) each_once &= seen[10 * c + i + 1] == 1;
    CHECK(each_once, "%s: an image in both splits, or in none", dir);
    for (int i = 0; i < test.count; i++)
        CHECK(test.labels[i] == (test.pixels[(size_t)i * SIDE * SIDE] > 10), "%s: a test image with label %d", dir,
              test.labels[i]);
    CHECK(train.num_classes == 2 && test.num_classes == 2 && !strcmp(test.class_names[1], "bee"),
          "%s: the classes", dir);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
}

static void test_folders(void) {
    char flat[512], split[512], empty[512], only_test[512], path[1024];
    snprintf(flat, sizeof flat, "%s/flat", testing_tmpdir());
    snprintf(split, sizeof split, "%s/train-only", testing_tmpdir());
    snprintf(empty, sizeof empty, "%s/empty", testing_tmpdir());
    snprintf(only_test, sizeof only_test, "%s/test-only", testing_tmpdir());
    make_classes(flat, "");
    make_classes(split, "train/");
    dp_data_layout_t layout = DP_DATA_IDX;
    CHECK(dp_data_detect_layout(flat, &layout) == DP_OK && layout == DP_DATA_IMAGE_FOLDER, "class folders: %s",
          dp_error_message());
    layout = DP_DATA_IDX;
    CHECK(dp_data_detect_layout(split, &layout) == DP_OK && layout == DP_DATA_IMAGE_FOLDER, "train alone: %s",
          dp_error_message());
    /* the split "": DIR's own folders, paths CLASS/FILE below DIR */
    dp_image_index_t x;
    DP_ASSERT(dp_image_index_build(flat, "", NULL, 0, NULL, &x) == DP_OK);
    CHECK(x.count == 10 && x.num_classes == 2 && !strcmp(x.paths[0] + x.root_length, "ant/000.png") &&
              !strcmp(x.paths[9] + x.root_length, "bee/003.png"),
          "the index of DIR itself: %d files, first %s", x.count, x.count ? x.paths[0] : "-");
    dp_image_index_free(&x);
    check_loaded(flat, 0.0, 1);   /* the default 0.1: ant 0.6 -> 1, bee 0.4 -> 0 */
    check_loaded(flat, 0.5, 5);   /* ant 3, bee 2 */
    check_loaded(split, 0.5, 5);
    DP_ASSERT(mkdir(empty, 0755) == 0);
    CHECK(dp_data_detect_layout(empty, &layout) == DP_ERR_FORMAT && strstr(dp_error_message(), "no data found") &&
              strstr(dp_error_message(), empty),
          "an empty folder: %s", dp_error_message());
    CHECK(dp_image_folder_test_split(flat) == NULL && dp_image_folder_test_split(split) == NULL,
          "a test split where there is none");
    /* DIR/val: the test split when there is no DIR/test (nothing held out), DIR/test before it */
    snprintf(path, sizeof path, "%s/val", split);
    DP_ASSERT(mkdir(path, 0755) == 0);
    make_classes(split, "val/");
    CHECK(dp_image_folder_test_split(split) && !strcmp(dp_image_folder_test_split(split), "val"), "DIR/val");
    dp_dataset_t with_val;
    DP_ASSERT(dp_dataset_load_with(split, "train", NULL, &with_val) == DP_OK);
    CHECK(with_val.count == 10, "beside DIR/val the training split is all 10 images: %d", with_val.count);
    dp_dataset_free(&with_val);
    DP_ASSERT(dp_dataset_load_with(split, "test", NULL, &with_val) == DP_OK);
    CHECK(with_val.count == 10, "DIR/val's 10 images: %d", with_val.count);
    dp_dataset_free(&with_val);
    snprintf(path, sizeof path, "%s/test", split);
    DP_ASSERT(mkdir(path, 0755) == 0);
    CHECK(dp_image_folder_test_split(split) && !strcmp(dp_image_folder_test_split(split), "test"), "DIR/test first");
    DP_ASSERT(mkdir(only_test, 0755) == 0);
    snprintf(path, sizeof path, "%s/test", only_test);
    DP_ASSERT(mkdir(path, 0755) == 0);
    CHECK(dp_data_detect_layout(only_test, &layout) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "has a test folder but no train folder"),
          "test without train: %s", dp_error_message());
}

int main(void) {
    test_counts_and_parts();
    test_listing_order();
    test_selection_pinned();
    test_added_file();
    test_refused();
    test_folders();
    return testing_finish("test_image_holdout");
}
