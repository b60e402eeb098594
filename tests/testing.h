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

/* `steps` training steps of `batch` examples on t: step s takes examples
 * (s * batch + i * stride) % count at position s * batch of epoch 0, its
 * loss sum into losses[s]. A failed step is a CHECK failure naming `name`
 * and ends the loop; returns 1 when every step succeeded. */
int testing_train_steps(dp_trainer_t *t, const dp_dataset_t *ds, int steps, int batch, int stride, double *losses,
                        const char *name);

/* count side x side images of `classes` classes whose class is visible: noise
 * in [0, noise) and a bright column at column_step * label + column_offset
 * (drawn from seed: label, then the pixels, per image). */
dp_dataset_t testing_column_dataset(int count, int side, int classes, int column_step, int column_offset,
                                    int noise, uint64_t seed);

#endif
