/* safetensors.c - the safetensors writer and strict reader (safetensors.h),
 * for any F32 tensors; dptrain's checkpoint layout is checkpoint.c's.
 *
 * Writer: the JSON header is built in memory (metadata first, then the
 * tensors in the caller's order, each tensor's data right after the
 * previous one's), padded with spaces to a multiple of 8 bytes together with
 * the 8-byte length, then streamed to a temporary file as little-endian
 * float32 and committed with dp_file_commit.
 *
 * Reader: the whole file is read into memory (checkpoints are small next to
 * the training data), the header parsed by json.c, and every tensor entry
 * checked before anything points into the data; sorted by offset, the
 * tensors must tile the data exactly.
 */
#include "dptrain/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/io.h"
#include "dptrain/json.h"

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* --- A growable text buffer for the header --------------------------------------- */
typedef struct {
    char *data;
    size_t used, size;
    int failed; /* an allocation failed; the text is incomplete */
} text_t;

static void text_append(text_t *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->used + n + 1 > t->size) {
        size_t size = t->size ? t->size : 1024;
        while (t->used + n + 1 > size) size *= 2;
        char *data = realloc(t->data, size);
        if (!data) {
            t->failed = 1;
            return;
        }
        t->data = data;
        t->size = size;
    }
    memcpy(t->data + t->used, s, n);
    t->used += n;
    t->data[t->used] = '\0';
}

static void text_printf(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text_t *t, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        t->failed = 1;
        return;
    }
    text_append(t, buf, (size_t)n);
}

static void text_put(void *t, const char *bytes, size_t len) { text_append(t, bytes, len); }

/* A JSON string (json.h's writer). */
static void text_json_string(text_t *t, const char *s) { dp_json_write_string(s, strlen(s), text_put, t); }

/* --- Writer ----------------------------------------------------------------------- */
static size_t tensor_numel(const dp_st_tensor_t *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static dp_status_t check_tensors(const char *path, const dp_st_tensor_t *tensors, int count,
                                 const dp_st_meta_t *meta, int meta_count) {
    for (int i = 0; i < count; i++) {
        const dp_st_tensor_t *t = &tensors[i];
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
            return dp_fail(DP_ERR_ARG, "%s: tensor %d has an empty or reserved name '%s'", path, i,
                           t->name ? t->name : "");
        if (t->ndim < 0 || t->ndim > DP_ST_MAX_DIMS)
            return dp_fail(DP_ERR_ARG, "%s: tensor '%s' has %d dims (expected 0 to %d)", path,
                           dp_json_show(t->name).text, t->ndim, DP_ST_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return dp_fail(DP_ERR_ARG, "%s: tensor '%s' has a negative dim", path, dp_json_show(t->name).text);
        if (!t->data && tensor_numel(t) > 0)
            return dp_fail(DP_ERR_ARG, "%s: tensor '%s' has no data", path, dp_json_show(t->name).text);
        for (int j = 0; j < i; j++)
            if (strcmp(tensors[j].name, t->name) == 0)
                return dp_fail(DP_ERR_ARG, "%s: tensor name '%s' is used twice", path, dp_json_show(t->name).text);
    }
    for (int i = 0; i < meta_count; i++)
        if (!meta[i].key || !meta[i].value)
            return dp_fail(DP_ERR_ARG, "%s: metadata entry %d has no key or value", path, i);
    return DP_OK;
}

static void build_header(text_t *h, const dp_st_tensor_t *tensors, int count, const dp_st_meta_t *meta,
                         int meta_count) {
    text_append(h, "{", 1);
    if (meta_count > 0) {
        text_append(h, "\"__metadata__\":{", 16);
        for (int i = 0; i < meta_count; i++) {
            if (i) text_append(h, ",", 1);
            text_json_string(h, meta[i].key);
            text_append(h, ":", 1);
            text_json_string(h, meta[i].value);
        }
        text_append(h, "}", 1);
    }
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const dp_st_tensor_t *t = &tensors[i];
        if (i || meta_count > 0) text_append(h, ",", 1);
        text_json_string(h, t->name);
        text_append(h, ":{\"dtype\":\"F32\",\"shape\":[", 25);
        for (int d = 0; d < t->ndim; d++) text_printf(h, d ? ",%" PRId64 : "%" PRId64, t->shape[d]);
        uint64_t end = offset + 4 * (uint64_t)tensor_numel(t);
        text_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, end);
        offset = end;
    }
    text_append(h, "}", 1);
    while ((8 + h->used) % 8 != 0) text_append(h, " ", 1);
}

static void store_le64(unsigned char *out, uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* Writes n floats as little-endian float32. */
static void write_floats_le(FILE *f, const float *data, size_t n) {
    if (host_is_little_endian()) {
        if (n) fwrite(data, sizeof(float), n, f);
        return;
    }
    unsigned char chunk[4096];
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < sizeof chunk / 4 && i < n; m++, i++) {
            uint32_t bits;
            memcpy(&bits, &data[i], 4);
            for (int b = 0; b < 4; b++) chunk[4 * m + (size_t)b] = (unsigned char)(bits >> (8 * b));
        }
        fwrite(chunk, 4, m, f);
    }
}

dp_status_t dp_safetensors_write(const char *path, const dp_st_tensor_t *tensors, int count,
                                 const dp_st_meta_t *meta, int meta_count) {
    DP_TRY(check_tensors(path, tensors, count, meta, meta_count));
    text_t header = {0};
    build_header(&header, tensors, count, meta, meta_count);
    if (header.failed) {
        free(header.data);
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    char tmp_path[4200];
    FILE *f;
    dp_status_t status = dp_file_begin(path, tmp_path, sizeof tmp_path, &f);
    if (status != DP_OK) {
        free(header.data);
        return status;
    }
    unsigned char length[8];
    store_le64(length, header.used);
    fwrite(length, 1, 8, f);
    fwrite(header.data, 1, header.used, f);
    free(header.data);
    for (int i = 0; i < count && !ferror(f); i++) write_floats_le(f, tensors[i].data, tensor_numel(&tensors[i]));
    return dp_file_commit(f, tmp_path, path); /* checks the stream's error flag */
}

/* --- Reader ----------------------------------------------------------------------- */
struct dp_safetensors {
    char *path;
    unsigned char *file; /* the whole file */
    size_t file_size;
    dp_json_t *header;   /* names and metadata point into it */
    dp_st_entry_t *entries;
    int count;
    dp_st_meta_t *meta;
    int meta_count;
};

static dp_status_t read_whole_file(const char *path, unsigned char **out, size_t *size) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dp_fail(DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return dp_fail(DP_ERR_IO, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    unsigned char *data = dp_alloc(*size ? *size : 1, "checkpoint file");
    if (!data) {
        fclose(f);
        return DP_ERR_NOMEM;
    }
    size_t got = fread(data, 1, *size, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != *size || extra) {
        free(data);
        return dp_fail(DP_ERR_IO, "%s: read %zu bytes, the file changed size while being read", path, got);
    }
    *out = data;
    return DP_OK;
}

char *dp_st_shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* One tensor entry {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}. */
static dp_status_t parse_entry(const char *path, const char *name, const dp_json_t *v, size_t data_size,
                               dp_st_entry_t *e, uint64_t *begin, uint64_t *end) {
    const dp_json_shown_t shown = dp_json_show(name); /* a name may hold "\n": messages show it escaped */
    if (v->kind != DP_JSON_OBJECT)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': expected an object, found %s", path, shown.text,
                       dp_json_kind_name(v->kind));
    for (int i = 0; i < v->count; i++)
        if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") && strcmp(v->keys[i], "data_offsets"))
            return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': unknown key '%s' (expected dtype, shape, "
                           "data_offsets)", path, shown.text, dp_json_show(v->keys[i]).text);
    const dp_json_t *dtype = dp_json_get(v, "dtype"), *shape = dp_json_get(v, "shape"),
                    *offsets = dp_json_get(v, "data_offsets");
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing) return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' has no '%s'", path, shown.text, missing);
    if (dtype->kind != DP_JSON_STRING)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': dtype must be a string", path, shown.text);
    if (strcmp(dtype->string, "F32") != 0)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' has dtype '%s' (dptrain reads F32 only)", path, shown.text,
                       dp_json_show(dtype->string).text);
    if (shape->kind != DP_JSON_ARRAY)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': shape must be an array", path, shown.text);
    if (shape->count > DP_ST_MAX_DIMS)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s' has %d dims (dptrain reads up to %d)", path, shown.text,
                       shape->count, DP_ST_MAX_DIMS);
    e->name = name;
    e->ndim = shape->count;
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < shape->count; d++) {
        const dp_json_t *dim = &shape->items[d];
        if (dim->kind != DP_JSON_INTEGER || dim->integer < 0)
            return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': shape[%d] must be an integer >= 0", path, shown.text, d);
        e->shape[d] = dim->integer;
        if (dim->integer != 0 && numel > UINT64_MAX / 4 / (uint64_t)dim->integer) overflow = 1;
        else numel *= (uint64_t)dim->integer;
    }
    if (offsets->kind != DP_JSON_ARRAY || offsets->count != 2 || offsets->items[0].kind != DP_JSON_INTEGER ||
        offsets->items[1].kind != DP_JSON_INTEGER || offsets->items[0].integer < 0 ||
        offsets->items[1].integer < offsets->items[0].integer)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': data_offsets must be [begin, end] with "
                       "0 <= begin <= end", path, shown.text);
    *begin = (uint64_t)offsets->items[0].integer;
    *end = (uint64_t)offsets->items[1].integer;
    char shape_text[200];
    dp_st_shape_str(shape_text, sizeof shape_text, e->ndim, e->shape);
    if (overflow)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': shape %s has more than 2^62 elements", path, shown.text,
                       shape_text);
    if (numel * 4 != *end - *begin)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': shape %s needs %" PRIu64 " bytes of F32, data_offsets "
                       "[%" PRIu64 ", %" PRIu64 "] hold %" PRIu64, path, shown.text, shape_text, numel * 4,
                       *begin, *end, *end - *begin);
    if (*end > data_size)
        return dp_fail(DP_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] go past "
                       "the end of the data (%zu bytes): the file is truncated or corrupt", path, shown.text,
                       *begin, *end, data_size);
    e->numel = (size_t)numel;
    return DP_OK;
}

typedef struct {
    uint64_t begin, end;
    int index;
} span_t;

static int compare_spans(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index - y->index;
}

/* The tensors, sorted by offset, must tile [0, data_size) exactly. */
static dp_status_t check_tiling(const char *path, const dp_st_entry_t *entries, span_t *spans, int count,
                                size_t data_size) {
    qsort(spans, (size_t)count, sizeof *spans, compare_spans);
    uint64_t expected = 0;
    for (int i = 0; i < count; i++) {
        const span_t *s = &spans[i];
        if (s->begin < expected)
            return dp_fail(DP_ERR_FORMAT, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                           ", %" PRIu64 ") overlap", path, dp_json_show(entries[spans[i - 1].index].name).text,
                           spans[i - 1].begin, spans[i - 1].end, dp_json_show(entries[s->index].name).text, s->begin,
                           s->end);
        if (s->begin > expected)
            return dp_fail(DP_ERR_FORMAT, "%s: %" PRIu64 " unused bytes before tensor '%s' (data offset %"
                           PRIu64 ")", path, s->begin - expected, dp_json_show(entries[s->index].name).text, expected);
        expected = s->end;
    }
    if (expected != data_size)
        return dp_fail(DP_ERR_FORMAT, "%s: %" PRIu64 " bytes after the last tensor (trailing data)", path,
                       (uint64_t)data_size - expected);
    return DP_OK;
}

static dp_status_t parse_metadata(const char *path, const dp_json_t *v, dp_safetensors_t *st) {
    if (v->kind != DP_JSON_OBJECT)
        return dp_fail(DP_ERR_FORMAT, "%s: __metadata__ must be an object, found %s", path,
                       dp_json_kind_name(v->kind));
    st->meta = dp_alloc_zeroed((size_t)v->count + 1, sizeof *st->meta, "checkpoint metadata");
    if (!st->meta) return DP_ERR_NOMEM;
    for (int i = 0; i < v->count; i++) {
        if (v->items[i].kind != DP_JSON_STRING)
            return dp_fail(DP_ERR_FORMAT, "%s: __metadata__ '%s' must be a string, found %s", path,
                           dp_json_show(v->keys[i]).text,
                           dp_json_kind_name(v->items[i].kind));
        st->meta[i] = (dp_st_meta_t){v->keys[i], v->items[i].string};
    }
    st->meta_count = v->count;
    return DP_OK;
}

static dp_status_t parse_file(dp_safetensors_t *st) {
    const char *path = st->path;
    if (st->file_size < 8)
        return dp_fail(DP_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header length: truncated or "
                       "not a safetensors file", path, st->file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | st->file[i];
    if (st->file_size > 8 && st->file[8] != '{') { /* no JSON header: another kind of file */
        static const struct { const char *magic; size_t len; const char *kind; } kinds[] = {
            {"\x89PNG", 4, "a PNG image"}, {"\xff\xd8\xff", 3, "a JPEG image"}, {"\x1f\x8b", 2, "a gzip file"},
            {"P5", 2, "a PGM image"}, {"P2", 2, "a PGM image"}, {"PK", 2, "a zip file (a PyTorch .pt?)"},
        };
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            if (memcmp(st->file, kinds[k].magic, kinds[k].len) == 0)
                return dp_fail(DP_ERR_FORMAT, "%s: not a safetensors file (%s)", path, kinds[k].kind);
        return dp_fail(DP_ERR_FORMAT, "%s: not a safetensors file (the header after its 8-byte length does not "
                       "start with '{')", path);
    }
    if (n > st->file_size - 8)
        return dp_fail(DP_ERR_FORMAT, "%s: header length %" PRIu64 " is larger than the %zu bytes that follow "
                       "it: truncated or not a safetensors file", path, n, st->file_size - 8);
    if (n > DP_ST_MAX_HEADER)
        return dp_fail(DP_ERR_FORMAT, "%s: header length %" PRIu64 " is above the limit of %" PRIu64 " bytes",
                       path, n, DP_ST_MAX_HEADER);
    if (n < 2 || st->file[8] != '{')
        return dp_fail(DP_ERR_FORMAT, "%s: the header does not start with '{': not a safetensors file", path);
    char source[4200];
    snprintf(source, sizeof source, "%s: JSON header", path);
    DP_TRY(dp_json_parse((const char *)st->file + 8, (size_t)n, source, &st->header));
    const dp_json_t *root = st->header;
    size_t data_size = st->file_size - 8 - (size_t)n;
    st->entries = dp_alloc_zeroed((size_t)root->count + 1, sizeof *st->entries, "checkpoint entries");
    span_t *spans = dp_alloc_zeroed((size_t)root->count + 1, sizeof *spans, "checkpoint spans");
    dp_status_t status = st->entries && spans ? DP_OK : DP_ERR_NOMEM;
    for (int i = 0; i < root->count && status == DP_OK; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            status = parse_metadata(path, &root->items[i], st);
            continue;
        }
        dp_st_entry_t *e = &st->entries[st->count];
        span_t *s = &spans[st->count];
        status = parse_entry(path, root->keys[i], &root->items[i], data_size, e, &s->begin, &s->end);
        if (status != DP_OK) break;
        e->bytes = st->file + 8 + n + s->begin;
        s->index = st->count++;
    }
    if (status == DP_OK) status = check_tiling(path, st->entries, spans, st->count, data_size);
    free(spans);
    return status;
}

dp_status_t dp_safetensors_read(const char *path, dp_safetensors_t **out) {
    *out = NULL;
    dp_safetensors_t *st = dp_alloc_zeroed(1, sizeof *st, "safetensors");
    if (!st) return DP_ERR_NOMEM;
    st->path = strdup(path);
    dp_status_t status = st->path ? DP_OK : dp_fail(DP_ERR_NOMEM, "out of memory");
    if (status == DP_OK) status = read_whole_file(path, &st->file, &st->file_size);
    if (status == DP_OK) status = parse_file(st);
    if (status != DP_OK) {
        dp_safetensors_free(st);
        return status;
    }
    *out = st;
    return DP_OK;
}

void dp_safetensors_free(dp_safetensors_t *st) {
    if (!st) return;
    dp_json_free(st->header);
    free(st->entries);
    free(st->meta);
    free(st->file);
    free(st->path);
    free(st);
}

const char *dp_safetensors_path(const dp_safetensors_t *st) { return st->path; }
int dp_safetensors_count(const dp_safetensors_t *st) { return st->count; }
const dp_st_entry_t *dp_safetensors_entry(const dp_safetensors_t *st, int i) {
    DP_ASSERT(i >= 0 && i < st->count);
    return &st->entries[i];
}

const dp_st_entry_t *dp_safetensors_find(const dp_safetensors_t *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    return NULL;
}

void dp_safetensors_copy(const dp_st_entry_t *entry, float *dst) {
    if (host_is_little_endian()) {
        if (entry->numel) memcpy(dst, entry->bytes, 4 * entry->numel);
        return;
    }
    for (size_t i = 0; i < entry->numel; i++) {
        const unsigned char *b = entry->bytes + 4 * i;
        uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        memcpy(&dst[i], &bits, 4);
    }
}

const char *dp_safetensors_meta(const dp_safetensors_t *st, const char *key) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

int dp_safetensors_meta_count(const dp_safetensors_t *st) { return st->meta_count; }
dp_st_meta_t dp_safetensors_meta_at(const dp_safetensors_t *st, int i) {
    DP_ASSERT(i >= 0 && i < st->meta_count);
    return st->meta[i];
}
