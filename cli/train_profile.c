/* train_profile.c - `dptrain train --profile`: the option's value, and
 * the per-layer table (profile.h) printed at the end of training and
 * appended to the metrics file as one JSON line {"profile": {...}}.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

dp_status_t train_profile_parse(const char *text, int *warmup, int *steps) {
    char *end;
    errno = 0;
    long w = strtol(text, &end, 10);
    int ok = errno == 0 && end != text && *end == ',' && text[0] >= '0' && text[0] <= '9';
    long n = 0;
    if (ok) {
        const char *second = end + 1;
        n = strtol(second, &end, 10);
        ok = errno == 0 && end != second && *end == '\0' && second[0] >= '0' && second[0] <= '9';
    }
    if (!ok || w < 0 || w > 1000000000L || n < 1 || n > 100000)
        return dp_fail(DP_ERR_ARG, "train: --profile-steps '%s': expected WARMUP,STEPS (warm-up steps 0 to 1000000000, "
                       "timed steps 1 to 100000), e.g. %d,%d", text, DP_PROFILE_DEFAULT_WARMUP,
                       DP_PROFILE_DEFAULT_WINDOW);
    *warmup = (int)w;
    *steps = (int)n;
    return DP_OK;
}

static const char *direction_name(dp_profile_direction_t d) { return d == DP_PROFILE_FORWARD ? "forward" : "backward"; }

/* Device d's name in "cpu:0,cpu:1" into buf. */
static const char *device_name(const char *names, int d, char *buf, size_t size) {
    const char *start = names;
    for (int i = 0; i < d && start; i++) {
        start = strchr(start, ',');
        if (start) start++;
    }
    if (!start) start = "?";
    size_t len = strcspn(start, ",");
    snprintf(buf, size, "%.*s", (int)(len < size ? len : size - 1), start);
    return buf;
}

dp_status_t train_print_profile(dp_trainer_t *trainer, const char *precision, int channels_last) {
    int devices = dp_trainer_num_devices(trainer);
    const char *names = dp_trainer_device_names(trainer);
    int width = (int)strlen("(outside the layers)");
    const dp_profile_report_t *first = NULL;
    for (int d = 0; d < devices; d++) {
        const dp_profile_report_t *r;
        DP_TRY(dp_trainer_profile(trainer, d, &r));
        if (!first) first = r;
        for (int i = 0; i < r->num_rows; i++)
            if ((int)strlen(r->rows[i].layer) > width) width = (int)strlen(r->rows[i].layer);
    }
    if (first->steps == 0) {
        printf("profile: no step timed: training ended within the %d warm-up steps (--profile-steps)\n",
               first->warmup);
        return DP_OK;
    }
    printf("profile: mean ms per step over %d step%s after %d warm-up step%s, precision %s%s%s\n", first->steps,
           first->steps == 1 ? "" : "s", first->warmup, first->warmup == 1 ? "" : "s", precision,
           channels_last ? ", channels-last" : "", first->steps < first->window ? " (training ended before the window's end)" : "");
    printf("%-8s %-*s %-16s %-9s %10s %7s\n", "device", width, "layer", "op", "direction", "ms", "share");
    for (int d = 0; d < devices; d++) {
        const dp_profile_report_t *r;
        DP_TRY(dp_trainer_profile(trainer, d, &r));
        char name[64];
        device_name(names, d, name, sizeof name);
        for (int i = 0; i < r->num_rows; i++) {
            const dp_profile_row_t *row = &r->rows[i];
            printf("%-8s %-*s %-16s %-9s %10.3f %6.1f%%\n", name, width, row->layer, row->op,
                   direction_name(row->direction), row->ms, 100.0 * row->share);
        }
        printf("%-8s %-*s %-16s %-9s %10.3f %6.1f%%\n", name, width, "(outside the layers)", "-", "-", r->outside_ms,
               100.0 * r->outside_share);
        printf("%-8s %-*s %-16s %-9s %10.3f %6.1f%%\n", name, width, "(step)", "-", "-", r->step_ms, 100.0);
    }
    printf("cpu time: %.3f ms per step, the process's (every thread, user + system) over the first device's timed "
           "steps\n", first->process_cpu_ms);
    return DP_OK;
}

dp_status_t train_append_profile(const char *path, dp_trainer_t *trainer) {
    FILE *f = fopen(path, "a");
    if (!f) return dp_fail(DP_ERR_IO, "cannot append the profile to %s: %s", path, strerror(errno));
    int devices = dp_trainer_num_devices(trainer);
    const char *names = dp_trainer_device_names(trainer);
    dp_status_t status = DP_OK;
    for (int d = 0; d < devices && status == DP_OK; d++) {
        const dp_profile_report_t *r;
        if ((status = dp_trainer_profile(trainer, d, &r)) != DP_OK) break;
        char name[64];
        if (d == 0) fprintf(f, "{\"profile\": {\"warmup\": %d, \"window\": %d, \"steps\": %d, \"devices\": [", r->warmup,
                            r->window, r->steps);
        /* layer and op names are [A-Za-z0-9_.+-]: nothing to escape */
        fprintf(f, "%s{\"device\": \"%s\", \"step_ms\": %.6g, \"layers_ms\": %.6g, \"outside_ms\": %.6g, "
                "\"outside_share\": %.6g, \"process_cpu_ms\": %.6g, \"rows\": [", d ? ", " : "",
                device_name(names, d, name, sizeof name), r->step_ms, r->layers_ms, r->outside_ms, r->outside_share,
                r->process_cpu_ms);
        for (int i = 0; i < r->num_rows; i++) {
            const dp_profile_row_t *row = &r->rows[i];
            fprintf(f, "%s{\"layer\": \"%s\", \"op\": \"%s\", \"direction\": \"%s\", \"calls\": %ld, \"ms\": %.6g, "
                    "\"share\": %.6g}", i ? ", " : "", row->layer, row->op, direction_name(row->direction), row->calls,
                    row->ms, row->share);
        }
        fprintf(f, "]}");
    }
    if (status == DP_OK) fprintf(f, "]}}\n");
    if (fclose(f) != 0 && status == DP_OK)
        status = dp_fail(DP_ERR_IO, "cannot append the profile to %s: %s", path, strerror(errno));
    return status;
}
