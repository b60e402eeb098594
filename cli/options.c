/* options.c - parsing `--name VALUE` options with full validation. */
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
    case OPT_FLOAT: {
        double v = strtod(value, &end);
        if (*value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
            return dp_fail(DP_ERR_ARG, "%s: --%s: '%s' is not a number", command, o->name, value);
        *(float *)o->target = (float)v;
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
    *help = 0;
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
        if (!o)
            return dp_fail(DP_ERR_ARG, "%s: unknown option '--%.*s' (see --help)", command, (int)len, name);
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
