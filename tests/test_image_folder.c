/* test_image_folder.c - the image folder index and the streamed source
 * (image_folder.h), on folders of small PNGs written here (gray, each
 * image's bytes telling its file apart):
 * - the index: classes sorted, files in torchvision 0.14's make_dataset
 *   order (subfolders of a class, their paths sorted as Python sorts
 *   strings: sub, sub-x, sub/deep), image extensions of any case only, dot files and dot folders
 *   skipped; the test split keeps the training classes' labels; an
 *   unknown test class, an empty training class and an unreadable file
 *   (one line each, with --skip-bad-files left out and counted) refused;
 * - a checkpoint's class names against the folder's (eval's labels): its
 *   names matched, the first other folder refused by name, a folder of
 *   other names alone labelled in its own order with a warning; relabel;
 * - the source: a fixed fill gives each file's bytes; a training fill with
 *   resized-crop is the same for the same (seed, epoch, sample) whatever
 *   the position, and changes with the epoch; with a cache the second
 *   epoch reads no file (they are deleted meanwhile) and gives the same
 *   bytes; a file broken after the index fails the fill naming it, or with
 *   skip_bad is replaced by the next file and counted (skipped);
 * - the evaluation transform's text: written and parsed back, bad texts
 *   refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/image_folder.h"
#include "testing.h"

#define SIDE 8

/* An 8 x 8 gray PNG whose pixels are value + (x + y) */
static void write_png(const char *path, int value) {
    uint8_t pixels[SIDE * SIDE];
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) pixels[y * SIDE + x] = (uint8_t)(value + x + y);
    testing_write_png(path, 1, SIDE, SIDE, pixels);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    DP_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static char root[512];

static const char *at(const char *relative) {
    static char paths[8][800];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 800, "%s/%s", root, relative);
    return p;
}

static void make(const char *relative) { DP_ASSERT(mkdir(at(relative), 0755) == 0); }

/* The folder: train/{ant,bee}, bee with a subfolder; test/bee */
static void make_folder(void) {
    snprintf(root, sizeof root, "%s/folder", testing_tmpdir());
    DP_ASSERT(mkdir(root, 0755) == 0);
    make("train"), make("train/bee"), make("train/ant"), make("train/bee/sub"), make("train/bee/sub-x"),
        make("train/bee/sub/deep"), make("train/.cache"), make("test"), make("test/bee");
    write_png(at("train/ant/b.png"), 10);
    write_png(at("train/ant/a.PNG"), 20);
    write_png(at("train/bee/z.png"), 30);
    write_png(at("train/bee/sub/y.jpg.png"), 40);
    write_png(at("train/bee/sub-x/x.png"), 50);
    write_png(at("train/bee/sub/deep/w.png"), 55);
    write_png(at("train/bee/.hidden.png"), 60);
    write_png(at("train/.cache/c.png"), 70);
    write_text(at("train/ant/notes.txt"), "not an image\n");
    write_png(at("test/bee/t.png"), 80);
}

static void test_index(void) {
    dp_image_index_t x;
    CHECK(dp_image_index_build(root, "train", NULL, 0, NULL, &x) == DP_OK, "index: %s", dp_error_message());
    CHECK(x.num_classes == 2 && !strcmp(x.class_names[0], "ant") && !strcmp(x.class_names[1], "bee"),
          "classes: %d", x.num_classes);
    /* make_dataset (sorted(os.walk(...)), the folders' paths compared as strings; torchvision 0.14's lists
     * bee's files so, run by hand): ant's a.PNG, b.png; bee's own z.png, then sub (a prefix of sub-x), then
     * sub-x, then sub/deep ('-' < '/') */
    const char *want[6] = {"ant/a.PNG", "ant/b.png", "bee/z.png", "bee/sub/y.jpg.png", "bee/sub-x/x.png",
                           "bee/sub/deep/w.png"};
    const int labels[6] = {0, 0, 1, 1, 1, 1};
    int same = x.count == 6;
    for (int i = 0; same && i < 6; i++) same = !strcmp(x.paths[i] + x.root_length, want[i]) && x.labels[i] == labels[i];
    CHECK(same, "the files in make_dataset's order (%d found; first %s)", x.count,
          x.count ? x.paths[0] + x.root_length : "-");
    dp_image_index_t t;
    CHECK(dp_image_index_build(root, "test", x.class_names, x.num_classes, NULL, &t) == DP_OK && t.count == 1 &&
              t.labels[0] == 1,
          "the test split keeps bee's label 1: %s", dp_error_message());
    dp_image_index_free(&t);
    /* an unknown test class; an unreadable file; an empty training class */
    make("test/cat");
    write_png(at("test/cat/c.png"), 1);
    CHECK(dp_image_index_build(root, "test", x.class_names, x.num_classes, NULL, &t) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "'cat' is not a class of the training split"),
          "unknown test class: %s", dp_error_message());
    remove(at("test/cat/c.png"));
    rmdir(at("test/cat"));
    write_text(at("train/ant/broken.png"), "not a png");
    CHECK(dp_image_index_build(root, "train", NULL, 0, NULL, &t) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "1 file cannot be read as an image") &&
              strstr(dp_error_message(), "train/ant/broken.png"),
          "unreadable file: %s", dp_error_message());
    dp_index_options_t skip = {.skip_bad = 1, .threads = 3};
    CHECK(dp_image_index_build(root, "train", NULL, 0, &skip, &t) == DP_OK && t.count == 6 && t.skipped == 1,
          "skip_bad: %d files, %d skipped", t.count, t.skipped);
    dp_image_index_free(&t);
    remove(at("train/ant/broken.png"));
    make("train/cow");
    CHECK(dp_image_index_build(root, "train", NULL, 0, NULL, &t) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "train/cow: empty class"),
          "empty class: %s", dp_error_message());
    rmdir(at("train/cow"));
    dp_image_index_free(&x);
}

/* A checkpoint's class names against the folder's (eval's labels): folders of its names match (classes without a
 * folder are fine; files and dot folders are no classes), the first folder in sorted order that is not one of
 * them is refused by name, a folder none of whose class folders is one of them is labelled in its own order with
 * a warning, a folder that cannot be read is left to the index; relabel makes the labels positions among the
 * names, or refuses a class that is not one. */
static void test_match_classes(void) {
    char *const three[] = {"ant", "bee", "cow"}, *const bee[] = {"bee"}, *const others[] = {"x", "y"};
    char warning[8192], want[8192];
    int by_name = -1;
    write_text(at("test/notes.txt"), "not a class\n");
    CHECK(dp_image_folder_match_classes(root, "test", three, 3, &by_name, warning, sizeof warning) == DP_OK &&
              by_name == 1 && !warning[0],
          "test/bee against ant, bee, cow: %d '%s' %s", by_name, warning, dp_error_message());
    make("test/cat"), make("test/ape");
    snprintf(want, sizeof want, "%s/test/ape: 'ape' is not one of the checkpoint's 1 classes (bee)", root);
    CHECK(dp_image_folder_match_classes(root, "test", bee, 1, &by_name, warning, sizeof warning) == DP_ERR_FORMAT &&
              !strcmp(dp_error_message(), want),
          "test/{ape,bee,cat} against bee: %s", dp_error_message());
    rmdir(at("test/cat")), rmdir(at("test/ape"));
    snprintf(want, sizeof want, "none of the class folders of %s/train is a class of the checkpoint (x, y): labelled "
             "in their sorted order, as torchvision's ImageFolder labels them (ant: output 0)", root);
    CHECK(dp_image_folder_match_classes(root, "train", others, 2, &by_name, warning, sizeof warning) == DP_OK &&
              by_name == 0 && !strcmp(warning, want),
          "train/{ant,bee} against x, y: %d '%s'", by_name, warning);
    char *const splits[] = {"test", "train"};
    CHECK(dp_image_folder_match_classes(root, "", splits, 2, &by_name, warning, sizeof warning) == DP_OK &&
              by_name == 1 && !warning[0],
          "the split '': %d '%s' %s", by_name, warning, dp_error_message());
    dp_error_clear();
    CHECK(dp_image_folder_match_classes(root, "val", bee, 1, &by_name, warning, sizeof warning) == DP_OK &&
              by_name == 1 && !warning[0] && dp_error_status() == DP_OK,
          "no folder: %d '%s' %s", by_name, warning, dp_error_message());
    remove(at("test/notes.txt"));
    /* train: ant's 2 files (0), bee's 4 (1) */
    dp_image_index_t x;
    DP_ASSERT(dp_image_index_build(root, "train", NULL, 0, NULL, &x) == DP_OK && x.count == 6);
    CHECK(dp_image_index_relabel(&x, bee, 1) == DP_ERR_FORMAT &&
              !strcmp(dp_error_message(), "'ant' is not a class of the checkpoint") && x.num_classes == 2 &&
              !strcmp(x.class_names[0], "ant") && x.labels[0] == 0 && x.labels[5] == 1,
          "relabel to bee alone: %s", dp_error_message());
    char *const reversed[] = {"cow", "bee", "ant"};
    CHECK(dp_image_index_relabel(&x, reversed, 3) == DP_OK && x.num_classes == 3 &&
              !strcmp(x.class_names[0], "cow") && !strcmp(x.class_names[2], "ant") && x.labels[0] == 2 &&
              x.labels[1] == 2 && x.labels[2] == 1 && x.labels[5] == 1,
          "relabel to cow, bee, ant: %s", dp_error_message());
    dp_image_index_free(&x);
}

static dp_batch_source_t *open_source(int train_mode, size_t cache, int skip_bad) {
    dp_image_index_t x;
    DP_ASSERT(dp_image_index_build(root, "train", NULL, 0, NULL, &x) == DP_OK);
    dp_folder_options_t o = {.cache_bytes = cache, .skip_bad = skip_bad};
    o.train = dp_sample_options_default(train_mode ? DP_SAMPLE_TRAIN : DP_SAMPLE_FIXED, 1, 4, 4);
    o.eval = dp_sample_options_default(DP_SAMPLE_FIXED, 1, 4, 4);
    dp_batch_source_t *src = NULL;
    DP_ASSERT(dp_folder_source_new(&x, &o, &src) == DP_OK);
    return src;
}

static void test_source(void) {
    /* fixed 8x8 -> 4x4: the center crop of the resize; every sample differs from the next */
    dp_batch_source_t *src = open_source(0, 0, 0);
    int samples[5] = {0, 1, 2, 3, 4};
    uint8_t a[5 * 16], b[5 * 16];
    int32_t la[5], lb[5];
    dp_fill_keys_t keys = {.seed = 1, .epoch = 0, .training = 1};
    CHECK(dp_batch_source_fill(src, samples, 5, &keys, a, la) == DP_OK && la[0] == 0 && la[4] == 1, "fixed fill");
    CHECK(memcmp(a, a + 16, 16) != 0 && memcmp(a + 16, a + 32, 16) != 0, "the samples' bytes tell them apart");
    dp_batch_source_free(src);
    /* resized-crop: a pure function of (seed, epoch, sample) */
    src = open_source(1, 0, 0);
    int reversed[5] = {4, 3, 2, 1, 0};
    DP_ASSERT(dp_batch_source_fill(src, samples, 5, &keys, a, la) == DP_OK);
    keys.first_position = 77;
    DP_ASSERT(dp_batch_source_fill(src, reversed, 5, &keys, b, lb) == DP_OK);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= memcmp(a + 16 * i, b + 16 * (4 - i), 16) == 0;
    CHECK(same, "a sample's crop depends on (seed, epoch, sample), not on its position");
    keys.epoch = 1;
    DP_ASSERT(dp_batch_source_fill(src, samples, 5, &keys, b, lb) == DP_OK);
    CHECK(memcmp(a, b, sizeof a) != 0, "another epoch, other crops");
    /* repeated augmentation: sample 2 three times at positions 30, 31, 32 (copies 0, 1, 2 of R = 3): copy 0 is
     * the plain crop, the others their own */
    keys.epoch = 0;
    keys.first_position = 30;
    keys.repeats = 3;
    int thrice[3] = {2, 2, 2};
    uint8_t r[3 * 16];
    DP_ASSERT(dp_batch_source_fill(src, thrice, 3, &keys, r, lb) == DP_OK);
    CHECK(memcmp(r, a + 2 * 16, 16) == 0, "repeats: copy 0 is not the plain sample");
    CHECK(memcmp(r + 16, r, 16) != 0 && memcmp(r + 32, r, 16) != 0 && memcmp(r + 32, r + 16, 16) != 0,
          "repeats: copies 1 and 2 are not crops of their own");
    dp_batch_source_free(src);
}

/* The cache: epoch 2 reads no file. A copy of the folder, whose files are deleted after epoch 1. */
static void test_cache(void) {
    for (int mode = 0; mode < 2; mode++) {
        dp_batch_source_t *cached = open_source(mode, 1 << 20, 0), *plain = open_source(mode, 0, 0);
        int samples[5] = {0, 1, 2, 3, 4};
        uint8_t a[5 * 16], b[5 * 16];
        int32_t la[5], lb[5];
        dp_fill_keys_t keys = {.seed = 3, .training = 1};
        DP_ASSERT(dp_batch_source_fill(cached, samples, 5, &keys, a, la) == DP_OK);
        CHECK(dp_folder_source_cached(cached) == 5, "mode %d: %ld samples cached", mode,
              dp_folder_source_cached(cached));
        keys.epoch = 1;
        DP_ASSERT(dp_batch_source_fill(plain, samples, 5, &keys, b, lb) == DP_OK);
        char moved[700];
        snprintf(moved, sizeof moved, "%s-away", root);
        DP_ASSERT(rename(root, moved) == 0); /* no file to read */
        CHECK(dp_batch_source_fill(cached, samples, 5, &keys, a, la) == DP_OK, "mode %d: epoch 2 from the cache: %s",
              mode, dp_error_message());
        CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(la, lb, sizeof la) == 0,
              "mode %d: the cache's bytes are those of the files", mode);
        CHECK(dp_batch_source_fill(plain, samples, 5, &keys, b, lb) == DP_ERR_IO, "without the cache, the files are read");
        DP_ASSERT(rename(moved, root) == 0);
        dp_batch_source_free(cached);
        dp_batch_source_free(plain);
    }
}

/* A file broken after the index: the fill fails naming it, or skip_bad replaces it with the next. */
static void test_broken_later(void) {
    dp_batch_source_t *strict = open_source(0, 0, 0), *lenient = open_source(0, 0, 1);
    write_text(at("train/ant/b.png"), "broken");
    int samples[2] = {1, 3};
    uint8_t a[2 * 16], b[2 * 16];
    int32_t la[2], lb[2];
    dp_fill_keys_t keys = {.training = 1};
    CHECK(dp_batch_source_fill(strict, samples, 2, &keys, a, la) != DP_OK &&
              strstr(dp_error_message(), "train/ant/b.png"),
          "a broken file: %s", dp_error_message());
    CHECK(dp_batch_source_skipped(strict) == 0, "nothing skipped without skip_bad");
    CHECK(dp_batch_source_fill(lenient, samples, 2, &keys, a, la) == DP_OK && dp_batch_source_skipped(lenient) == 1,
          "skip_bad: %s, %ld skipped", dp_error_message(), dp_batch_source_skipped(lenient));
    int next[2] = {2, 3};
    DP_ASSERT(dp_batch_source_fill(strict, next, 2, &keys, b, lb) == DP_OK);
    CHECK(memcmp(a, b, sizeof a) == 0 && la[0] == lb[0], "the broken sample 1 became sample 2");
    write_png(at("train/ant/b.png"), 10);
    dp_batch_source_free(strict);
    dp_batch_source_free(lenient);
}

static void test_transform_text(void) {
    dp_sample_options_t eval = dp_sample_options_default(DP_SAMPLE_EVAL, 3, 224, 224), back;
    char text[64];
    dp_eval_transform_text(&eval, text, sizeof text);
    CHECK(!strcmp(text, "resize 256"), "224: '%s'", text);
    eval.resize_size = 300;
    eval.ignore_exif = 1;
    dp_eval_transform_text(&eval, text, sizeof text);
    CHECK(!strcmp(text, "resize 300, exif ignore") && dp_eval_transform_parse(text, 3, 224, 224, &back) == DP_OK &&
              back.resize_size == 300 && back.ignore_exif == 1 && back.mode == DP_SAMPLE_FIXED,
          "'%s' parsed back", text);
    CHECK(back.interpolation == DP_INTERP_BILINEAR, "a text without ', bicubic' is bilinear (older checkpoints)");
    eval.interpolation = DP_INTERP_BICUBIC;
    dp_eval_transform_text(&eval, text, sizeof text);
    CHECK(!strcmp(text, "resize 300, exif ignore, bicubic") && dp_eval_transform_parse(text, 3, 224, 224, &back) ==
              DP_OK && back.resize_size == 300 && back.ignore_exif == 1 && back.interpolation == DP_INTERP_BICUBIC,
          "'%s' parsed back", text);
    eval.mode = DP_SAMPLE_SQUASH;
    eval.ignore_exif = 0;
    dp_eval_transform_text(&eval, text, sizeof text);
    CHECK(!strcmp(text, "squash, bicubic") && dp_eval_transform_parse(text, 3, 224, 224, &back) == DP_OK &&
              back.mode == DP_SAMPLE_SQUASH && back.ignore_exif == 0 && back.interpolation == DP_INTERP_BICUBIC,
          "'%s' parsed back", text);
    const char *bad[] = {"resize", "resize 0", "resize 9x", "crop 32", "resize 32, exif maybe",
                         "resize 32, bicubic, exif ignore", "resize 32, bicubicx", "resize 32, bicubic,",
                         "squash, bilinear"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(dp_eval_transform_parse(bad[i], 1, 28, 28, &back) == DP_ERR_FORMAT, "'%s' accepted", bad[i]);
}

int main(void) {
    make_folder();
    test_index();
    test_match_classes();
    test_source();
    test_cache();
    test_broken_later();
    test_transform_text();
    return testing_finish("test_image_folder");
}
