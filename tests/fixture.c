/* fixture.c - the reader of PyTorch-written fixture files (fixture.h). */
#include "fixture.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fixture_free(fixture_t *f) {
    for (int t = 0; t < f->count; t++) free(f->tensors[t].data);
    f->count = 0;
}

/* --- reading --------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
    const char *path;
} reader_t;

static int read_bytes(reader_t *r, void *dst, size_t n) {
    if ((size_t)(r->end - r->p) < n) return 0;
    memcpy(dst, r->p, n);
    r->p += n;
    return 1;
}

static int read_i32(reader_t *r, int32_t *v) { return read_bytes(r, v, 4); } /* little-endian host */

static int read_str(reader_t *r, char *dst, size_t size) {
    int32_t len;
    if (!read_i32(r, &len) || len < 0 || (size_t)len >= size) return 0;
    if (!read_bytes(r, dst, (size_t)len)) return 0;
    dst[len] = '\0';
    return 1;
}

/* Reads one fixture file. Format (little-endian), see tools/make_fixtures.py:
 *   "DPFX", u32 version 1, str case name, str op name,
 *   i32 kernel[3] stride[3] pad[3] dilation[3] groups count_include_pad,
 *   f32 loss_denominator, u32 count, count x (str name, u32 dtype (0 f32,
 *   1 i32), u32 ndim, i32 dims[ndim], numel x 4 bytes data);
 *   str = u32 length + bytes. Returns 0 and prints why on a bad file. */
int fixture_read(const char *path, fixture_t *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 0;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *blob = malloc(size > 0 ? (size_t)size : 1);
    if (!blob || size <= 0 || fread(blob, 1, (size_t)size, fp) != (size_t)size) {
        fprintf(stderr, "%s: cannot read %ld bytes\n", path, size);
        free(blob);
        fclose(fp);
        return 0;
    }
    fclose(fp);
    reader_t r = {blob, blob + size, path};
    char magic[4];
    int32_t version, ints[14], count;
    float denominator;
    if (!read_bytes(&r, magic, 4) || memcmp(magic, "DPFX", 4) != 0) goto bad;
    if (!read_i32(&r, &version) || version != 1) goto bad;
    if (!read_str(&r, f->name, sizeof f->name) || !read_str(&r, f->op, sizeof f->op)) goto bad;
    for (int i = 0; i < 14; i++)
        if (!read_i32(&r, &ints[i])) goto bad;
    if (!read_bytes(&r, &denominator, 4)) goto bad;
    for (int d = 0; d < 3; d++) {
        f->attr.kernel[d] = ints[d];
        f->attr.stride[d] = ints[3 + d];
        f->attr.pad[d] = ints[6 + d];
        f->attr.dilation[d] = ints[9 + d];
    }
    f->attr.groups = ints[12];
    f->attr.count_include_pad = ints[13];
    f->attr.loss_denominator = denominator;
    if (!read_i32(&r, &count) || count < 1 || count > FIXTURE_MAX_TENSORS) goto bad;
    for (int t = 0; t < count; t++) {
        fixture_tensor_t *ft = &f->tensors[t];
        f->count = t;
        int32_t dtype, ndim;
        if (!read_str(&r, ft->name, sizeof ft->name) || !read_i32(&r, &dtype) || !read_i32(&r, &ndim)) goto bad;
        if ((dtype != 0 && dtype != 1) || ndim < 0 || ndim > DP_MAX_DIMS) goto bad;
        ft->is_int = dtype == 1;
        ft->shape.ndim = ndim;
        for (int d = 0; d < ndim; d++)
            if (!read_i32(&r, &ft->shape.shape[d]) || ft->shape.shape[d] < 0) goto bad;
        ft->numel = dp_tensor_numel(&ft->shape);
        if ((size_t)(r.end - r.p) / 4 < ft->numel) goto bad;
        ft->data = malloc(ft->numel * 4 + 1);
        memcpy(ft->data, r.p, ft->numel * 4);
        r.p += ft->numel * 4;
        f->count = t + 1;
    }
    if (r.p != r.end) goto bad;
    free(blob);
    return 1;
bad:
    fprintf(stderr, "%s: malformed fixture at byte %ld\n", path, (long)(r.p - blob));
    fixture_free(f);
    free(blob);
    return 0;
}

const fixture_tensor_t *fixture_get(const fixture_t *f, const char *name) {
    for (int t = 0; t < f->count; t++)
        if (strcmp(f->tensors[t].name, name) == 0) return &f->tensors[t];
    return NULL;
}

int fixture_load(const char *subdir, const char *name, fixture_t *f) {
    char relative[256];
    snprintf(relative, sizeof relative, "fixtures/%s/%s.bin", subdir, name);
    int ok = fixture_read(testing_path(relative), f);
    CHECK(ok, "cannot read fixture %s", relative);
    return ok;
}

void fixture_read_attrs(const fixture_t *f, dp_op_attr_t *attr) {
    const fixture_tensor_t *t;
    if ((t = fixture_get(f, "attr.output_padding")) && t->is_int && t->numel == 3)
        for (int d = 0; d < 3; d++) attr->output_padding[d] = ((const int32_t *)t->data)[d];
    if ((t = fixture_get(f, "attr.training")) && t->is_int && t->numel == 1) attr->training = *(const int32_t *)t->data;
    if ((t = fixture_get(f, "attr.fuse_relu")) && t->is_int && t->numel == 1)
        attr->fuse_relu = *(const int32_t *)t->data;
    if ((t = fixture_get(f, "attr.eps")) && !t->is_int && t->numel == 1) attr->eps = *(const float *)t->data;
    if ((t = fixture_get(f, "attr.momentum")) && !t->is_int && t->numel == 1) attr->momentum = *(const float *)t->data;
    if ((t = fixture_get(f, "attr.dropout_p")) && !t->is_int && t->numel == 1)
        attr->dropout_p = *(const float *)t->data;
    if ((t = fixture_get(f, "attr.label_smoothing")) && !t->is_int && t->numel == 1)
        attr->label_smoothing = *(const float *)t->data;
    if ((t = fixture_get(f, "attr.ceil_mode")) && t->is_int && t->numel == 1)
        attr->ceil_mode = *(const int32_t *)t->data;
}

void fixture_compare(const fixture_t *f, double rtol, double atol, const char *pass, const char *what,
                     const float *got, float offset, const fixture_tensor_t *want, char *report, size_t report_size) {
    const float *expected = want->data;
    float *adjusted = malloc(want->numel * sizeof(float) + 1);
    if (!adjusted) {
        CHECK(0, "%s (%s): out of memory comparing %s", f->name, pass, what);
        return;
    }
    for (size_t i = 0; i < want->numel; i++) adjusted[i] = got[i] - offset;
    double scale = 1.0;
    for (size_t i = 0; i < want->numel; i++)
        if (fabs(expected[i]) > scale) scale = fabs(expected[i]);
    size_t worst = 0;
    double v = testing_max_violation(adjusted, expected, want->numel, rtol, atol * scale, &worst);
    size_t used = strlen(report);
    snprintf(report + used, report_size - used, " %s %.3g", what, v);
    CHECK(v <= 1.0, "%s (%s): %s differs at index %zu: got %.8g, want %.8g (violation %.3g)", f->name, pass, what,
          worst, (double)adjusted[worst], (double)expected[worst], v);
    free(adjusted);
}
