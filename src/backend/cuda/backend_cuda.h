/* backend_cuda.h - the CUDA backend's entry points, which module_host.c
 * hands to backend_registry.c in the module's table (internal to the
 * module libdptrain_cuda.so). */
#ifndef DPTRAIN_BACKEND_CUDA_H
#define DPTRAIN_BACKEND_CUDA_H

#include "dptrain/backend.h"

/* GPUs the runtime sees; 0 with *why set (static text) when none. */
int dp_cuda_gpu_count(const char **why);

/* The backend of GPU `gpu` (0 <= gpu < DP_CUDA_MAX_GPUS), opened once
 * (stream, cuBLAS and cuDNN handles) and kept until exit. Errors name
 * "cuda:N" and what failed. */
dp_status_t dp_cuda_backend_open(int gpu, const dp_backend_t **out);

#endif
