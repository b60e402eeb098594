/* idx.c - the IDX file reader (dp_idx_read / dp_idx_free).
 *
 * An IDX file is a big-endian magic 0x0000TTNN (TT = data type, NN = number
 * of dims), NN big-endian uint32 dims, then the data. Only TT = 0x08
 * (unsigned byte) is accepted. The file goes through zlib's gzread, which
 * reads gzip and plain files alike (detected by content, not by name).
 *
 * Checks, each reported as one line naming the file: the file opens; the
 * magic starts with two zero bytes; the type is 0x08; 1 <= ndim <= 4; every
 * dim > 0 and the total size at most DP_IDX_MAX_BYTES; the gzip stream is
 * intact; the data is exactly as long as the dims say (neither truncated nor
 * followed by trailing bytes).
 *
 * The data buffer grows as data actually arrives, so a tiny file whose header
 * claims gigabytes fails on truncation without allocating gigabytes first.
 */
#include "dptrain/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Largest data size accepted: it keeps every byte index within an int. */
#define DP_IDX_MAX_BYTES ((uint64_t)INT32_MAX)

/* How much to decompress per gzread call and the first buffer size. */
#define READ_CHUNK (1u << 20)

/* Beyond this many trailing bytes we stop counting them. */
#define TRAILING_COUNT_LIMIT (1u << 20)

static const char *idx_type_name(unsigned type) {
    switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown type";
    }
}

/* Turns the gzip stream's error state into a status, or DP_OK if none.
 * Z_BUF_ERROR means the gzip stream ended early; that is reported by the
 * caller as truncation, so it counts as no error here. */
static dp_status_t gz_check_error(gzFile gz, const char *path) {
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    if (errnum == Z_OK || errnum == Z_BUF_ERROR) return DP_OK;
    if (errnum == Z_ERRNO)
        return dp_fail(DP_ERR_IO, "%s: read error: %s", path, strerror(errno));
    if (errnum == Z_MEM_ERROR)
        return dp_fail(DP_ERR_NOMEM, "%s: out of memory while decompressing", path);
    if (!msg) msg = "unknown error";
    /* zlib prefixes the name it was opened with, "<fd:N>: " after gzdopen. */
    if (strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) msg = strstr(msg, ": ") + 2;
    return dp_fail(DP_ERR_FORMAT, "%s: corrupt gzip data: %s", path, msg);
}

/* Reads up to `want` bytes into buf; *got says how many arrived (fewer only
 * at the end of the data). Fails only on a read or gzip stream error. */
static dp_status_t gz_read_upto(gzFile gz, const char *path, uint8_t *buf, size_t want,
                                size_t *got) {
    size_t done = 0;
    while (done < want) {
        size_t left = want - done;
        unsigned ask = left > READ_CHUNK ? READ_CHUNK : (unsigned)left;
        int n = gzread(gz, buf + done, ask);
        if (n < 0) {
            *got = done;
            dp_status_t st = gz_check_error(gz, path);
            return st != DP_OK ? st
                               : dp_fail(DP_ERR_IO, "%s: read error", path);
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    *got = done;
    return gz_check_error(gz, path);
}

/* Whether the stream's last read hit a gzip stream that ended early. */
static int gz_stream_ended_early(gzFile gz) {
    int errnum = Z_OK;
    gzerror(gz, &errnum);
    return errnum == Z_BUF_ERROR;
}

static uint32_t read_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Reads the magic and dims; fills out->ndim and out->dims, *total gets the
 * data size in bytes. */
static dp_status_t read_header(gzFile gz, const char *path, dp_idx_t *out, uint64_t *total) {
    uint8_t magic[4];
    size_t got = 0;
    DP_TRY(gz_read_upto(gz, path, magic, sizeof magic, &got));
    if (got < sizeof magic)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated header: expected 4 magic bytes, found %zu%s",
                       path, got, gz_stream_ended_early(gz) ? " (gzip stream ends early)" : "");
    uint32_t value = read_be32(magic);
    if (magic[0] != 0 || magic[1] != 0)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: wrong magic 0x%08x (expected 0x000008NN: two zero bytes, "
                       "type 0x08, number of dims); not an IDX file",
                       path, (unsigned)value);
    if (magic[2] != 0x08)
        return dp_fail(DP_ERR_FORMAT,
                       "%s: data type 0x%02x (%s) is not supported (expected 0x08, unsigned byte)",
                       path, magic[2], idx_type_name(magic[2]));
    int ndim = magic[3];
    if (ndim < 1 || ndim > 4)
        return dp_fail(DP_ERR_FORMAT, "%s: %d dims in magic 0x%08x (expected 1 to 4)", path,
                       ndim, (unsigned)value);

    uint8_t dim_bytes[16];
    size_t want = (size_t)ndim * 4;
    DP_TRY(gz_read_upto(gz, path, dim_bytes, want, &got));
    if (got < want)
        return dp_fail(DP_ERR_FORMAT, "%s: truncated header: expected %zu bytes of dims, found %zu%s",
                       path, want, got,
                       gz_stream_ended_early(gz) ? " (gzip stream ends early)" : "");

    uint64_t product = 1;
    for (int i = 0; i < ndim; i++) {
        uint32_t dim = read_be32(dim_bytes + 4 * i);
        if (dim == 0)
            return dp_fail(DP_ERR_FORMAT, "%s: dim %d is 0 (expected > 0)", path, i);
        product *= dim; /* stays exact: product <= DP_IDX_MAX_BYTES < 2^32 before this */
        if (product > DP_IDX_MAX_BYTES)
            return dp_fail(DP_ERR_FORMAT,
                           "%s: dims give more than %llu bytes of data (at dim %d = %u); "
                           "the header is probably corrupt",
                           path, (unsigned long long)DP_IDX_MAX_BYTES, i, (unsigned)dim);
        out->dims[i] = dim;
    }
    out->ndim = ndim;
    *total = product;
    return DP_OK;
}

/* Reads exactly `total` data bytes into a fresh buffer (*data), growing it
 * as the data arrives. */
static dp_status_t read_data(gzFile gz, const char *path, size_t total, uint8_t **data) {
    size_t capacity = total < READ_CHUNK ? total : READ_CHUNK;
    uint8_t *buf = dp_alloc(capacity, path);
    if (!buf) return DP_ERR_NOMEM;
    size_t have = 0;
    for (;;) {
        size_t got = 0;
        dp_status_t st = gz_read_upto(gz, path, buf + have, capacity - have, &got);
        if (st != DP_OK) {
            free(buf);
            return st;
        }
        have += got;
        if (have < capacity) { /* the data ended early */
            free(buf);
            return dp_fail(DP_ERR_FORMAT,
                           "%s: truncated: the dims say %zu data bytes, found %zu%s", path,
                           total, have,
                           gz_stream_ended_early(gz) ? " (gzip stream ends early)" : "");
        }
        if (have == total) break;
        size_t bigger = capacity > total / 2 ? total : capacity * 2;
        uint8_t *grown = realloc(buf, bigger); /* large blocks: glibc moves the pages (mremap), no copy */
        if (!grown) {
            free(buf);
            return dp_fail(DP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bigger, path);
        }
        buf = grown;
        capacity = bigger;
    }
    *data = buf;
    return DP_OK;
}

/* Fails if anything follows the data (reading to the end also surfaces a
 * corrupt gzip trailer, e.g. a CRC mismatch). */
static dp_status_t check_no_trailing(gzFile gz, const char *path, size_t total) {
    uint8_t scratch[4096];
    size_t trailing = 0;
    while (trailing < TRAILING_COUNT_LIMIT) {
        size_t got = 0;
        DP_TRY(gz_read_upto(gz, path, scratch, sizeof scratch, &got));
        if (got == 0) break;
        trailing += got;
    }
    if (trailing == 0 && gz_stream_ended_early(gz))
        return dp_fail(DP_ERR_FORMAT,
                       "%s: truncated gzip stream: all %zu data bytes present but the gzip "
                       "trailer (CRC and length) is missing",
                       path, total);
    if (trailing == 0) return DP_OK;
    return dp_fail(DP_ERR_FORMAT,
                   "%s: %s%zu trailing bytes after the %zu data bytes the dims say", path,
                   trailing >= TRAILING_COUNT_LIMIT ? "at least " : "", trailing, total);
}

dp_status_t dp_idx_read(const char *path, dp_idx_t *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return dp_fail(DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return dp_fail(DP_ERR_NOMEM, "%s: cannot set up the gzip reader", path);
    }
    gzbuffer(gz, 1u << 17);

    dp_idx_t idx = {0};
    uint64_t total = 0;
    dp_status_t st = read_header(gz, path, &idx, &total);
    if (st == DP_OK) st = read_data(gz, path, (size_t)total, &idx.data);
    if (st == DP_OK) st = check_no_trailing(gz, path, (size_t)total);
    int close_rc = gzclose_r(gz); /* also closes fd */
    if (st == DP_OK && close_rc != Z_OK)
        st = dp_fail(DP_ERR_IO, "%s: error closing the file (zlib code %d)", path, close_rc);
    if (st != DP_OK) {
        free(idx.data);
        return st;
    }
    *out = idx;
    return DP_OK;
}

void dp_idx_free(dp_idx_t *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}
