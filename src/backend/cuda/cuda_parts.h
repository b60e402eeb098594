/* cuda_parts.h - the parts backend_cuda.c puts together into a GPU's
 * backend table (backend.h): the op table (ops_cuda.c), the peer
 * collectives (peer_nccl.c), the timing marks (timer_cuda.c), the
 * convolution algorithm choices (algo_choices.c). */
#ifndef DPTRAIN_CUDA_PARTS_H
#define DPTRAIN_CUDA_PARTS_H

#include "cuda_context.h"

/* peer_nccl.c: sets the table's peer members (backend.h) when built with
 * NCCL; leaves them NULL otherwise. */
void dp_cuda_peer_register(dp_backend_t *table);
/* timer_cuda.c: sets the table's timing marks (backend.h: timer_*). */
void dp_cuda_timer_register(dp_backend_t *table);
/* algo_choices.c: sets the table's conv_algorithms and
 * conv_algorithms_install (backend.h). */
void dp_cuda_algo_register(dp_backend_t *table);

/* The op table of GPU g (ops_cuda.c). */
const dp_op_def_t *dp_cuda_op_table(int gpu);

#endif
