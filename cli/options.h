/* options.h - command-line option parsing for the dptrain subcommands.
 *
 * Options are `--name VALUE` or `--name=VALUE`; flags take no value. Each
 * parser checks the whole value (no trailing junk, in range) and reports a
 * one-line error naming the option, the value and what was expected.
 */
#ifndef DPTRAIN_CLI_OPTIONS_H
#define DPTRAIN_CLI_OPTIONS_H

#include <stdint.h>

#include "dptrain/status.h"

typedef enum { OPT_INT, OPT_UINT64, OPT_FLOAT, OPT_DOUBLE, OPT_STRING, OPT_FLAG } option_kind_t;

typedef struct {
    const char *name; /* without the leading "--" */
    option_kind_t kind;
    void *target;     /* int *, uint64_t *, float *, double *, const char **, int * (flag) */
    long min, max;    /* OPT_INT range */
} option_t;

/* Parses argv[first..argc) against `options`. "--help"/"-h" sets *help. */
dp_status_t options_parse(const char *command, const option_t *options, int argc, char **argv,
                          int first, int *help);
/* The same, and given[i] = 1 for every options[i] the command line gives,
 * 0 for the others (given: one per entry of `options`; NULL: none), for
 * defaults that depend on what was given (train --resume: the checkpoint's). */
dp_status_t options_parse_given(const char *command, const option_t *options, int argc, char **argv,
                                int first, int *help, unsigned char *given);

#endif
