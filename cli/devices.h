/* devices.h - the --devices and --precision options shared by `dptrain
 * train` and `dptrain eval`: which devices, each with its backend table,
 * and the precision of their products and convolutions. */
#ifndef DPTRAIN_CLI_DEVICES_H
#define DPTRAIN_CLI_DEVICES_H

#include <stddef.h>

#include "dptrain/backend.h"
#include "dptrain/nn.h"
#include "dptrain/status.h"

#define CLI_MAX_DEVICES 256

/* --devices TEXT of `command` (named in the errors): a count of CPU
 * devices, or a list cpu:N,... or cuda:N,... (one kind; cuda:N may repeat:
 * several devices sharing one GPU; cuda:0,cuda:1: one device per GPU).
 * ids[d] is device d's N, backends[d] its table (the CPU's for a count; one
 * per GPU); at most CLI_MAX_DEVICES. staged:N,... (distinct ids) is the
 * test double of a GPU (backend_cpu_staged.c) and split:N,... the test
 * double of distinct GPUs (backend_cpu_split.c, a table per N; N may
 * repeat): for tests, not in --help. */
dp_status_t cli_parse_devices(const char *command, const char *text, int *ids, int *count,
                              const dp_backend_t **backends);

/* No --devices: every GPU when the CUDA backend sees one (the book's
 * try_all_gpus), else one CPU device per core. `note` says which and why,
 * for the first line. */
dp_status_t cli_default_devices(int *ids, int *count, const dp_backend_t **backends, char *note, size_t size);

/* --precision TEXT of `command`: fp32, tf32 or bf16 (else one line). */
dp_status_t cli_parse_precision(const char *command, const char *text, dp_precision_t *precision);

/* The precision on each distinct table of the devices (a setting is the
 * table's: one GPU's); `option` names it in the errors (--precision bf16,
 * --tf32). FP32 asks nothing of a table; another precision on a table
 * without one (the CPU's) is one line naming the device and what to use. */
dp_status_t cli_set_precision(const char *command, const char *option, const dp_backend_t *const *backends,
                              const int *ids, int count, dp_precision_t precision);

/* Whether --channels-last is on when not given: with --precision bf16
 * (GPU tables alone take it) for a model whose 2-D convolutions all have
 * channel counts in multiples of 8 (the input image's aside), as tensor
 * cores take them; off otherwise. On an H200 (2026-11-28, docs/devices.md)
 * on was ResNet-18's faster side in bf16 (1.29x) and the slower side of
 * every FP32 line, LeNet's (20 and 50 channels) included. */
int cli_channels_last_default(dp_precision_t precision, const dp_model_t *model);

/* --channels-last TEXT of `command` (on or off; NULL: not given, then
 * default_on) on each distinct table of the devices: on is refused, naming
 * the device, where a table has no channels-last layout (the CPU's).
 * *on = 1 or 0. */
dp_status_t cli_set_channels_last(const char *command, const char *text, int default_on,
                                  const dp_backend_t *const *backends, const int *ids, int count, int *on);

#endif
