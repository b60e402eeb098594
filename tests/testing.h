/* testing.h - the small test harness every test program uses.
 *
 * CHECK(cond, ...) records a failure with file, line and a message and goes
 * on; CHECK_CLOSE compares floats with a relative+absolute tolerance;
 * testing_finish() prints "N passed, N failed" and returns the exit code.
 */
#ifndef DPTRAIN_TESTING_H
#define DPTRAIN_TESTING_H

#include <stdint.h>
#include <stdio.h>

#include "dptrain/data.h"
#include "dptrain/parallel.h"

extern int testing_passed, testing_failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            testing_passed++;                                                  \
        } else {                                                               \
            testing_failed++;                                                  \
            fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* Largest |a - b| / (atol + rtol * |b|) over n values; <= 1 means close. */
double testing_max_violation(const float *a, const float *b, size_t n,
                             double rtol, double atol, size_t *worst_index);

/* Path of a file under the tests source dir ($DPTRAIN_TEST_DIR). */
const char *testing_path(const char *relative);

/* A fresh temporary directory (removed by the caller's script or left in /tmp). */
const char *testing_tmpdir(void);

/* testing_tmpdir()/name; the last 8 results stay valid. */
const char *testing_tmp_file(const char *name);
/* The whole file, malloc'd with a terminating NUL after its *size bytes
 * (so text files are strings); NULL and *size 0 when it cannot be read. */
unsigned char *testing_read_file(const char *path, size_t *size);

/* Number of entries in dir whose name contains `part` (-1: unreadable dir). */
int testing_count_entries(const char *dir, const char *part);

int testing_finish(const char *name);

/* A host batch of examples of a dataset or source, in buffers kept from
 * call to call (grown as needed): testing_batch fills the examples
 * indices[0..n) of ds as they are (no augmentation), testing_source_batch
 * those of a source with keys (seed, epoch, first_position, training).
 * The batch stays valid until the next call; testing_batch_free frees. */
typedef struct {
    dp_batch_source_t *source; /* testing_batch's, over the last ds */
    const dp_dataset_t *ds;
    uint8_t *pixels;
    int32_t *labels;
    size_t pixel_bytes, label_count;
    dp_batch_t batch;
} testing_batch_t;
const dp_batch_t *testing_batch(testing_batch_t *b, const dp_dataset_t *ds, const int *indices, int n);
const dp_batch_t *testing_source_batch(testing_batch_t *b, dp_batch_source_t *src, const int *indices, int n,
                                       const dp_fill_keys_t *keys);
void testing_batch_free(testing_batch_t *b);

/* `steps` training steps of `batch` examples on t: step s takes examples
 * (s * batch + i * stride) % count at position s * batch of epoch 0, its
 * loss sum into losses[s]. A failed step is a CHECK failure naming `name`
 * and ends the loop; returns 1 when every step succeeded. */
int testing_train_steps(dp_trainer_t *t, const dp_dataset_t *ds, int steps, int batch, int stride, double *losses,
                        const char *name);
/* The same from a source, its training fills keyed by (seed, epoch 0,
 * position s * batch + i): its augmentation applied. */
int testing_train_source_steps(dp_trainer_t *t, dp_batch_source_t *src, uint64_t seed, int steps, int batch,
                               int stride, double *losses, const char *name);
/* dp_trainer_step on the examples indices[0..n) of ds, as they are (a
 * batch made by testing_batch in buffers this function keeps). */
dp_status_t testing_step(dp_trainer_t *t, const dp_dataset_t *ds, const int *indices, int n, double *loss_sum,
                         int *correct);
/* dp_trainer_evaluate over an in-memory source of ds (made and freed here). */
dp_status_t testing_evaluate(dp_trainer_t *t, const dp_dataset_t *ds, int batch_size, int *correct);

/* An 8-bit gray (channels 1) or RGB (3) PNG at `path` of (h, w, channels)
 * interleaved pixels (filter None, real deflate); aborts when it cannot
 * write. */
void testing_write_png(const char *path, int channels, int h, int w, const uint8_t *hwc);

/* count side x side images of `classes` classes whose class is visible: noise
 * in [0, noise) and a bright column at column_step * label + column_offset
 * (drawn from seed: label, then the pixels, per image). */
dp_dataset_t testing_column_dataset(int count, int side, int classes, int column_step, int column_offset,
                                    int noise, uint64_t seed);
/* count 28 x 28 gray images of uniform noise with labels in [0, 10), all
 * drawn from seed (the pixels, then the labels). */
dp_dataset_t testing_random_images(int count, uint64_t seed);

#endif
