/* confusion.h - an evaluation's confusion matrix (parallel.h
 * dp_trainer_evaluate_confusion): each device's task adds its shard's
 * rows, the counts are summed over devices and ranks at the end. Library
 * internal: trainer.c's evaluation calls it; the counting itself is
 * dptrain/confusion.h's.
 */
#ifndef DPTRAIN_CONFUSION_H
#define DPTRAIN_CONFUSION_H

#include <stdint.h>

#include "dptrain/confusion.h"
#include "replica.h"

/* Per device: a host copy of a shard's logits and its counts. */
typedef struct dp_confusion {
    int classes;
    int64_t *counts;   /* (num_devices x classes x classes): device d's [label][predicted] */
    float **logits;    /* (num_devices) host buffers of cap[d] x classes */
    int *cap;          /* (num_devices) */
    int num_devices;
} dp_confusion_t;

dp_status_t dp_confusion_init(dp_confusion_t *c, int num_devices, int classes);
void dp_confusion_free(dp_confusion_t *c);
/* Device r's task: the shard's logits (n x classes, device memory) and its
 * host labels, each row's first largest logit (count_metrics' rule) counted
 * at [label][predicted]. */
dp_status_t dp_confusion_add_shard(dp_confusion_t *c, dp_replica_t *r, const float *logits, const int32_t *labels,
                                   int n);
/* out (classes x classes) = the devices' counts summed, then every rank's. */
dp_status_t dp_confusion_total(const dp_confusion_t *c, int64_t *out);

#endif
