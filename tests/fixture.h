/* fixture.h - reading the fixture files that tools/make_fixtures.py and
 * tools/make_network_fixture.py write with PyTorch.
 *
 * Format (little-endian):
 *   "DPFX", u32 version 1, str case name, str op name,
 *   i32 kernel[3] stride[3] pad[3] dilation[3] groups count_include_pad,
 *   f32 loss_denominator, u32 count, count x (str name, u32 dtype (0 f32,
 *   1 i32), u32 ndim, i32 dims[ndim], numel x 4 bytes data);
 *   str = u32 length + bytes.
 */
#ifndef DPTRAIN_TEST_FIXTURE_H
#define DPTRAIN_TEST_FIXTURE_H

#include "dptrain/ops.h"

#define FIXTURE_MAX_TENSORS 32

typedef struct {
    char name[32];
    int is_int; /* dtype 1 = int32, 0 = float32 */
    dp_tensor_t shape; /* ndim and shape only */
    size_t numel;
    void *data; /* own copy, aligned (the file's layout is not) */
} fixture_tensor_t;

typedef struct {
    char path[4608];
    char name[128];
    char op[32];
    dp_op_attr_t attr;
    int count;
    fixture_tensor_t tensors[FIXTURE_MAX_TENSORS];
} fixture_t;

/* Reads one fixture file; returns 0 and prints why on a bad file. */
int fixture_read(const char *path, fixture_t *f);
/* Reads tests/fixtures/SUBDIR/NAME.bin (found through DPTRAIN_TEST_DIR); a
 * file that cannot be read is a test failure. Returns 1 when it was read. */
int fixture_load(const char *subdir, const char *name, fixture_t *f);
void fixture_free(fixture_t *f);
/* The tensor called `name`, or NULL. */
const fixture_tensor_t *fixture_get(const fixture_t *f, const char *name);
/* The attributes that travel as tensors (attr.training, attr.eps,
 * attr.label_smoothing, ...;
 * tools/make_fixtures.py) into *attr; the others came with the header. */
void fixture_read_attrs(const fixture_t *f, dp_op_attr_t *attr);
/* Checks got[i] - offset against the fixture tensor `want` (numel floats)
 * within rtol, and atol scaled by want's largest magnitude (at least 1); a
 * test failure names the case, the pass, `what` and the worst index. Appends
 * " what violation" to report (the per-case summary line). */
void fixture_compare(const fixture_t *f, double rtol, double atol, const char *pass, const char *what,
                     const float *got, float offset, const fixture_tensor_t *want, char *report, size_t report_size);

#endif
