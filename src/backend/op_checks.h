/* op_checks.h - the checks of a node's tensors and attributes that the CPU
 * ops and the CUDA module both run before their arithmetic (batch norm,
 * layer norm, dropout and drop path, softmax cross-entropy, mean squared
 * error), with the one-line messages the ops document. The CPU ops call
 * them directly, the CUDA module through the host's table (cuda_module.h),
 * so that a node is refused alike, in the same words, on every device;
 * conv_shape.h does the same for convolutions. Library internal. */
#ifndef DPTRAIN_OP_CHECKS_H
#define DPTRAIN_OP_CHECKS_H

#include <stddef.h>

#include "dptrain/ops.h"

/* A normalisation over the channels (`op`: "batch_norm" or "layer_norm"): x
 * (N, C) or (N, C, [D,] [H,] W) with data, none empty; in[1] weight and in[2]
 * bias (C) or NULL; attr.eps finite and >= 0. Sets N, C and S (the values of
 * a channel per example: the product of the spatial dims, 1 for (N, C)). */
dp_status_t dp_norm_check(const dp_node_t *node, const char *op, int *N, int *C, size_t *S);

/* dp_norm_check for "batch_norm", then its attributes: momentum in [0, 1]
 * when training, running_mean and running_var both given or both NULL (and
 * given in inference), fuse_relu 0, DP_FUSE_RELU or DP_FUSE_RELU6. */
dp_status_t dp_batch_norm_check(const dp_node_t *node, int *N, int *C, size_t *S);

/* Dropout's and drop path's (`op`) input and attributes: x (N, ...) with
 * data and N >= 1, attr.dropout_p in [0, 1), attr.example_offset >= 0. */
dp_status_t dp_masked_check(const dp_node_t *node, const char *op);

/* Softmax cross-entropy: logits (N, K) with data, N, K >= 1, labels given,
 * attr.label_smoothing in [0, 1), attr.loss_denominator finite and >= 0.
 * Sets N, K and D, the denominator: attr.loss_denominator, or N when it is
 * 0 (the mean over the batch). */
dp_status_t dp_xent_check(const dp_node_t *node, int *N, int *K, double *D);

/* Mean squared error: prediction in[0] and target in[1] with data, of the
 * same non-empty shape, attr.loss_denominator finite and >= 0. Sets D:
 * attr.loss_denominator, or the element count when it is 0. */
dp_status_t dp_mse_check(const dp_node_t *node, double *D);

#endif
