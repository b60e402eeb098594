/* emu_device.h - what CUDA C++ gives a kernel, for the host (the CUDA
 * emulator, cuda_emulator.h): host_kernels.pl turns each kernel file (*.cu)
 * into C++ that includes this first. Qualifiers vanish, __shared__ memory is per
 * launching thread (a block runs at a time on it), the built-in indices are
 * the launcher's, the intrinsics that round one operation (__fadd_rn, ...)
 * are that operation (compiled with -ffp-contract=off: no fusing, as
 * nvcc's -fmad=false), and a launch kernel<<<grid, block, 0, stream>>>(args)
 * becomes EMU_LAUNCH(kernel, cooperative, (grid, block, 0, stream), args). */
#ifndef DPTRAIN_EMU_DEVICE_H
#define DPTRAIN_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda_emulator.h"

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#undef __grid_constant__
#define __grid_constant__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static __thread
#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
#define __syncthreads() emu_syncthreads()

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

template <typename F> static void emu_trampoline(void *f) { (*(F *)f)(); }

template <typename F>
static inline void emu_launch_lambda(const char *kernel, int cooperative, unsigned grid, unsigned block,
                                     cudaStream_t stream, F f) {
    emu_launch(kernel, grid, block, stream, cooperative, emu_trampoline<F>, &f);
}

#define EMU_CFG(grid, block, shared_bytes, stream) (grid), (block), (stream)
#define EMU_LAUNCH(kernel, cooperative, cfg, ...) \
    emu_launch_lambda(#kernel, cooperative, EMU_CFG cfg, [=]() { kernel(__VA_ARGS__); })

#endif
