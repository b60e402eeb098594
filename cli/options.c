/* options.c - parsing `--name VALUE` options with full validation (and,
 * where asked, which were given); an unknown option is named with the
 * closest known one ("did you mean"). */
#include "options.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const option_t *find_option(const option_t *options, const char *name, size_t len) {
    for (const option_t *o = options; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
}

/* The edit distance (insertions, deletions, substitutions, swaps of two
 * neighbours) between a[0..n) and b, capped at 9. */
static int edit_distance(const char *a, size_t n, const char *b) {
    size_t m = strlen(b);
    if (n > 40 || m > 40) return 9;
    int d[42][42];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m] < 9 ? d[n][m] : 9;
}

/* The known option a typo most likely meant: the closest within 1 edit
 * (2 for names of 6 letters or more), else the one option the typo begins
 * (3 letters or more); NULL if none. */
static const char *closest_option(const option_t *options, const char *name, size_t len) {
    const char *best = NULL, *prefixed = NULL;
    int best_distance = len >= 6 ? 3 : 2, prefixes = 0;
    for (const option_t *o = options; o->name; o++) {
        int distance = edit_distance(name, len, o->name);
        if (distance < best_distance) best_distance = distance, best = o->name;
        if (len >= 3 && strncmp(o->name, name, len) == 0) prefixes++, prefixed = o->name;
    }
    if (edit_distance(name, len, "help") < best_distance) best = "help"; /* every command's */
    return best ? best : prefixes == 1 ? prefixed : NULL;
}

static dp_status_t parse_value(const char *command, const option_t *o, const char *value) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case OPT_INT: {
        long v = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || errno == ERANGE)
            return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' is not a whole number", command, o->name, value);
        if (v < o->min || v > o->max)
            return dp_fail(DP_ERR_ARG, "%s: --%s: %ld is out of range (expected %ld to %ld)",
                           command, o->name, v, o->min, o->max);
        *(int *)o->target = (int)v;
        return DP_OK;
    }
    case OPT_UINT64: {
        if (value[0] == '-')
            return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' must not be negative", command, o->name, value);
        unsigned long long v = strtoull(value, &end, 10);
        if (*value == '\0' || *end != '\0' || errno == ERANGE)
            return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' is not a whole number", command, o->name, value);
        *(uint64_t *)o->target = (uint64_t)v;
        return DP_OK;
    }
    case OPT_FLOAT:
    case OPT_DOUBLE: {
        double v = strtod(value, &end);
        if (*value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
            return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' is not a number", command, o->name, value);
        if (o->kind == OPT_DOUBLE) *(double *)o->target = v; /* a decimal kept as Python keeps it */
        else *(float *)o->target = (float)v;
        return DP_OK;
    }
    case OPT_STRING:
        if (*value == '\0')
            return dp_fail(DP_ERR_ARG, "%s: --%s: the value must not be empty", command, o->name);
        *(const char **)o->target = value;
        return DP_OK;
    case OPT_FLAG:
        break;
    }
    return dp_fail(DP_ERR_ARG, "%s: --%s takes no value", command, o->name);
}

dp_status_t options_parse(const char *command, const option_t *options, int argc, char **argv,
                          int first, int *help) {
    return options_parse_given(command, options, argc, argv, first, help, NULL);
}

dp_status_t options_parse_given(const char *command, const option_t *options, int argc, char **argv,
                                int first, int *help, unsigned char *given) {
    *help = 0;
    for (const option_t *o = options; given && o->name; o++) given[o - options] = 0;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            *help = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return dp_fail(DP_ERR_ARG, "%s: unexpected argument '%s' (options start with --; see --help)",
                           command, arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const option_t *o = find_option(options, name, len);
        if (!o) {
            const char *meant = closest_option(options, name, len);
            if (meant)
                return dp_fail(DP_ERR_ARG, "%s: unknown option '--%.*s' (did you mean --%s?)", command, (int)len,
                               name, meant);
            return dp_fail(DP_ERR_ARG, "%s: unknown option '--%.*s' (see --help)", command, (int)len, name);
        }
        if (given) given[o - options] = 1;
        if (o->kind == OPT_FLAG) {
            if (eq) return dp_fail(DP_ERR_ARG, "%s: --%s takes no value", command, o->name);
            *(int *)o->target = 1;
            continue;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return dp_fail(DP_ERR_ARG, "%s: --%s needs a value", command, o->name);
            value = argv[++i];
        }
        DP_TRY(parse_value(command, o, value));
    }
    return DP_OK;
}
