/* io.h - what training writes for people and programs: per-epoch metrics as
 * JSON lines, an SVG plot of the curves (the book's Animator), and the
 * terminal progress bar.
 *
 * Files are written to a temporary name in the same directory, flushed and
 * renamed, so a crash never leaves a half-written file; metrics are appended
 * one whole line per write.
 */
#ifndef DPTRAIN_IO_H
#define DPTRAIN_IO_H

#include <stdio.h>

#include "dptrain/status.h"

typedef struct {
    int epoch;              /* 1-based */
    double train_loss;      /* mean loss over the epoch's examples (the training loss: smoothed
                               when label_smoothing is not 0) */
    double train_acc;       /* fraction correct over the epoch's examples */
    double test_acc;        /* fraction correct on the test set */
    int has_acc5;           /* test_acc5 is set: the model has more than 5 outputs (with 5 or
                               fewer every answer is in the top 5) */
    double test_acc5;       /* fraction of the test set whose label is among the model's 5
                               largest outputs (top-5, torchvision's Acc@5; backend.h's rule) */
    double epoch_sec;       /* wall seconds of the epoch's training steps */
    double images_per_sec;  /* training images / epoch_sec */
    const char *devices;    /* e.g. "cpu:0,cpu:1" */
    int num_devices;        /* devices of all ranks */
    int num_ranks;          /* processes (0 is taken as 1) */
    double lr;              /* the learning rate of the epoch's last step */
    size_t device_mem_peak; /* bytes: the most memory a GPU of this rank held through dptrain so far
                               (backend.h memory_peak); 0: not counted (CPU devices) */
    long skipped_files;     /* the training data's files left out or replaced so far, unreadable
                               (batch_source.h dp_batch_source_skipped); 0: none */
    double label_smoothing; /* the training loss's label smoothing (parallel.h), as its shortest
                               decimal (0.1); 0: none (train_loss is plain cross-entropy) */
    int best_epoch;         /* dp_fit: the run's epoch with the highest test accuracy so far, this
                               one included (the earlier of equals); == epoch: this one is */
    int grad_norm_steps;    /* gradient clipping (parallel.h): the epoch's steps whose norm was
                               measured (0: no clipping; the next three are then unset) */
    double grad_norm_mean, grad_norm_max; /* their norms' mean and largest, before clipping */
    double clipped_fraction; /* the fraction of those steps clipped */
    int has_ema;            /* the model's moving average was evaluated: test_acc_ema */
    double test_acc_ema;    /* fraction correct on the test set of the model's moving average */
} dp_epoch_stats_t;

/* What ran (cpu.h), for the metrics. */
typedef struct {
    const char *isa;        /* the kernels' ISA, e.g. "avx2" */
    const char *cpu;        /* the CPU model */
    const char *blas;       /* the BLAS library and its kernels */
    const char *precision;  /* of products and convolutions: "fp32", "tf32", "bf16" */
    const char *layout;     /* of the devices' activations: "nchw", "nhwc" (--channels-last) */
    const char *sync;       /* how the gradients are summed: parallel.h dp_trainer_sync_strategy */
} dp_run_info_t;

/* Appends one JSON object (one line) with the keys epoch, train_loss,
 * label_smoothing when not 0 (train_loss is then the smoothed loss),
 * train_acc, test_acc, epoch_sec, images_per_sec, lr, devices (an array of
 * names, the devices of one rank), num_devices (of all ranks), ranks,
 * device_mem_peak_bytes when counted (GPU devices), skipped_files when
 * the training data left out or replaced unreadable files, and with
 * gradient clipping grad_norm_mean, grad_norm_max and clipped_fraction
 * (after lr), test_acc5 when has_acc5 (after test_acc), and with the
 * model's moving average test_acc_ema (after test_acc and test_acc5). */
dp_status_t dp_metrics_append(const char *path, const dp_epoch_stats_t *stats);

/* The same line with the keys precision, layout, sync, isa, cpu and blas
 * (strings) appended, for those of `run` that are not NULL (run may be
 * NULL). */
dp_status_t dp_metrics_append_run(const char *path, const dp_epoch_stats_t *stats, const dp_run_info_t *run);

/* Writes an SVG with train loss, train accuracy and test accuracy against the
 * epoch, axes with ticks, and a legend; atomically (temp file + rename).
 * The loss axis names the last epoch's label smoothing when it has one. */
dp_status_t dp_plot_write_svg(const char *path, const dp_epoch_stats_t *stats, int count);

/* Writes `tmp`'s content to `path` atomically: fflush, fsync, fclose, rename.
 * Closes `tmp` in every case; on failure removes the temporary file. */
dp_status_t dp_file_commit(FILE *tmp, const char *tmp_path, const char *path);
/* Before a run writes `path` (a checkpoint, metrics, a plot): DP_OK, or
 * DP_ERR_IO with one line starting "WHAT PATH" (what: the option or field
 * that named it) when it is a directory or its directory is missing or not
 * writable; DP_ERR_ARG for an empty path or one of 4096 bytes or more. */
dp_status_t dp_file_check_writable(const char *what, const char *path);
/* Opens a temporary file next to `path` for dp_file_commit; tmp_path gets its name. */
dp_status_t dp_file_begin(const char *path, char *tmp_path, size_t tmp_size, FILE **out);

/* A one-line progress bar on a terminal: "[=====>    ] 120/235 loss 0.53".
 * Draws to `stream` only when it is a terminal (isatty); otherwise every
 * call is a no-op. */
typedef struct {
    FILE *stream;
    int enabled;
    int total;
    double last_draw; /* monotonic seconds of the last redraw, < 0 before the first */
} dp_progress_t;

void dp_progress_init(dp_progress_t *bar, FILE *stream, int total);
void dp_progress_update(dp_progress_t *bar, int done, double loss);
void dp_progress_finish(dp_progress_t *bar); /* erases the bar */

#endif
