/* metrics.c - per-epoch metrics as JSON lines (dp_metrics_append, dp_metrics_append_run).
 *
 * Each call appends one line, e.g.
 *   {"epoch": 1, "train_loss": 0.512, "train_acc": 0.81, "test_acc": 0.84,
 *    "epoch_sec": 3.2, "images_per_sec": 18750, "devices": ["cpu:0","cpu:1"],
 *    "num_devices": 2, "ranks": 1, "precision": "fp32", "layout": "nchw", "sync": "chunked",
 *    "isa": "avx2", "cpu": "...", "blas": "..."}
 * (on one line; GPU devices add "device_mem_peak_bytes" after "ranks"; a
 * run with label smoothing "label_smoothing" after "train_loss", which is
 * then the smoothed loss; a model of more than 5 outputs "test_acc5", the
 * top-5 accuracy, after "test_acc").
 * The line is built in memory and written with a single
 * fwrite to a file opened for appending, so concurrent appenders and crashes
 * leave whole lines. Numbers use %.9g (enough to round-trip a float, and
 * printf's C locale output); NaN and infinities, which JSON cannot express,
 * are written as null.
 */
#include "dptrain/io.h"
#include "dptrain/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A fixed-capacity line buffer; `ok` turns 0 if anything did not fit. */
typedef struct {
    char *data;
    size_t size, used;
    int ok;
} line_t;

static void line_printf(line_t *line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line_printf(line_t *line, const char *fmt, ...) {
    if (!line->ok) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line->data + line->used, line->size - line->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= line->size - line->used) {
        line->ok = 0;
        return;
    }
    line->used += (size_t)n;
}

static void line_number(line_t *line, const char *key, double value) {
    if (isfinite(value))
        line_printf(line, ", \"%s\": %.9g", key, value);
    else
        line_printf(line, ", \"%s\": null", key);
}

static void line_put(void *ctx, const char *bytes, size_t len) {
    line_t *line = ctx;
    line_printf(line, "%.*s", (int)len, bytes);
}

/* Appends `len` bytes of a device name as a JSON string (quotes included; json.h's writer). */
static void line_json_string(line_t *line, const char *s, size_t len) { dp_json_write_string(s, len, line_put, line); }

/* "cpu:0, cpu:1" -> ["cpu:0","cpu:1"]; names are trimmed, empty ones skipped. */
static void line_device_array(line_t *line, const char *devices) {
    line_printf(line, ", \"devices\": [");
    int first = 1;
    const char *p = devices ? devices : "";
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        if (b > a) {
            if (!first) line_printf(line, ",");
            line_json_string(line, a, (size_t)(b - a));
            first = 0;
        }
        p = *end ? end + 1 : end;
    }
    line_printf(line, "]");
}

dp_status_t dp_metrics_append(const char *path, const dp_epoch_stats_t *stats) {
    return dp_metrics_append_run(path, stats, NULL);
}

dp_status_t dp_metrics_append_run(const char *path, const dp_epoch_stats_t *stats, const dp_run_info_t *run) {
    size_t devices_len = stats->devices ? strlen(stats->devices) : 0;
    /* Fixed keys and numbers take < 570 bytes (every key, each number at
     * its longest: 16 characters, "-1.23456789e-308", an int 11, a size
     * 20); a device name character takes at most 6 ("\u00XX"), each name
     * adds 3 (quotes and comma). */
    size_t size = 640 + 9 * devices_len + 3;
    const char *const info_keys[6] = {"precision", "layout", "sync", "isa", "cpu", "blas"};
    const char *const info[6] = {run ? run->precision : NULL, run ? run->layout : NULL, run ? run->sync : NULL,
                                 run ? run->isa : NULL,       run ? run->cpu : NULL,    run ? run->blas : NULL};
    for (int i = 0; i < 6; i++)
        if (info[i]) size += 6 * strlen(info[i]) + 16;
    line_t line = {dp_alloc(size, "metrics line"), size, 0, 1};
    if (!line.data) return DP_ERR_NOMEM;

    line_printf(&line, "{\"epoch\": %d", stats->epoch);
    line_number(&line, "train_loss", stats->train_loss);
    if (stats->label_smoothing != 0.0) line_number(&line, "label_smoothing", stats->label_smoothing);
    line_number(&line, "train_acc", stats->train_acc);
    line_number(&line, "test_acc", stats->test_acc);
    if (stats->has_acc5) line_number(&line, "test_acc5", stats->test_acc5);
    if (stats->has_ema) line_number(&line, "test_acc_ema", stats->test_acc_ema);
    line_number(&line, "epoch_sec", stats->epoch_sec);
    line_number(&line, "images_per_sec", stats->images_per_sec);
    line_number(&line, "lr", stats->lr);
    if (stats->grad_norm_steps > 0) {
        line_number(&line, "grad_norm_mean", stats->grad_norm_mean);
        line_number(&line, "grad_norm_max", stats->grad_norm_max);
        line_number(&line, "clipped_fraction", stats->clipped_fraction);
    }
    line_device_array(&line, stats->devices);
    line_printf(&line, ", \"num_devices\": %d, \"ranks\": %d", stats->num_devices,
                stats->num_ranks > 0 ? stats->num_ranks : 1);
    if (stats->device_mem_peak) line_printf(&line, ", \"device_mem_peak_bytes\": %zu", stats->device_mem_peak);
    if (stats->skipped_files) line_printf(&line, ", \"skipped_files\": %ld", stats->skipped_files);
    for (int i = 0; i < 6; i++)
        if (info[i]) {
            line_printf(&line, ", \"%s\": ", info_keys[i]);
            line_json_string(&line, info[i], strlen(info[i]));
        }
    line_printf(&line, "}\n");
    DP_ASSERT(line.ok); /* the size bound above covers every case */

    FILE *f = fopen(path, "a");
    if (!f) {
        int err = errno;
        free(line.data);
        return dp_fail(DP_ERR_IO, "%s: cannot open for appending: %s", path, strerror(err));
    }
    dp_status_t st = DP_OK;
    if (fwrite(line.data, 1, line.used, f) != line.used || fflush(f) != 0)
        st = dp_fail(DP_ERR_IO, "%s: cannot append metrics: %s", path, strerror(errno));
    if (fclose(f) != 0 && st == DP_OK)
        st = dp_fail(DP_ERR_IO, "%s: cannot append metrics (close): %s", path, strerror(errno));
    free(line.data);
    return st;
}
