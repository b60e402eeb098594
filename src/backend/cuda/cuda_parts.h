/* cuda_parts.h - the parts backend_cuda.c puts together into a GPU's
 * backend table (backend.h): the op table (ops_cuda.c), the peer
 * collectives (peer_nccl.c), the timing marks (timer_cuda.c), the
 * convolution algorithm choices (algo_choices.c), the convolutions'
 * settings (conv_cuda.c), the step arena's range (range_cuda.c). */
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

/* graph_cuda.c: sets the table's step graphs (backend.h: graph_*); while
 * c->capture is set, an upload's bytes become a constant of the graph
 * (copied from its pinned memory) and an optimizer whose update is captured
 * is noted, for each launch to write its scalars first. 1 on a failure (the
 * context's). Under the lock. */
void dp_cuda_graph_register(dp_backend_t *table);
int dp_cuda_graph_constant(dp_cuda_ctx_t *c, void *dst, const void *host_src, size_t bytes, const char *what);
int dp_cuda_graph_note_optimizer(dp_cuda_ctx_t *c, dp_optimizer_t *opt);
/* While capturing: where the captured kernel reads the per-step seed whose
 * value at the capture is `seed` (dropout's mask): device memory that each
 * launch writes with the seed's value for its step; NULL with the context
 * failed when the graph has no room. */
const uint64_t *dp_cuda_graph_seed(dp_cuda_ctx_t *c, uint64_t seed);

/* range_cuda.c: DPTRAIN_CUDA_VMM read and checked (*on: 1 unless off; an
 * unknown value is one line naming it), and the table's range growing in
 * place (backend.h reserve, commit, release) set when `on` and the driver
 * has CUDA's virtual memory functions; left NULL otherwise. */
dp_status_t dp_cuda_range_setting(int *on);
void dp_cuda_range_register(dp_backend_t *table, int on);

/* The op table of GPU g (ops_cuda.c). */
const dp_op_def_t *dp_cuda_op_table(int gpu);

/* conv_cuda.c: DPTRAIN_CUDNN_ALGO (*algo_mode), DPTRAIN_CONV_EPILOGUE
 * (*epilogue: 1 cudnn, 0 own) and DPTRAIN_CONV_DIRECT (*direct: 1 on, 0
 * off) read and checked: an unknown value is one
 * line naming the variable and the values it takes. Opening a GPU's table
 * checks them, so a bad value stops a run before it starts; the first
 * convolution of a GPU reads them again (a library user may set them
 * later). */
dp_status_t dp_cuda_conv_settings(int *algo_mode, int *epilogue, int *direct);

#endif
