/* emu_device.h - what CUDA C++ gives a kernel, for the host (the CUDA
 * emulator, cuda_emulator.h): host_kernels.pl turns each kernel file (*.cu)
 * into C++ that includes this first. Qualifiers vanish, __shared__ memory is per
 * launching thread (a block runs at a time on it), the built-in indices are
 * the launcher's, the intrinsics that round one operation (__fadd_rn, ...)
 * are that operation (compiled with -ffp-contract=off: no fusing, as
 * nvcc's -fmad=false), and a launch kernel<<<grid, block, 0, stream>>>(args)
 * becomes EMU_LAUNCH(kernel, cooperative, (grid, block, 0, stream), args):
 * the arguments are evaluated and copied at the launch, as on a GPU. */
#ifndef DPTRAIN_EMU_DEVICE_H
#define DPTRAIN_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

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

/* A launch's arguments, evaluated and copied when it is made (as a GPU
 * takes them): a plain aggregate, so that a capture (emu_graph.c) can copy
 * its bytes and run it later, when the caller's variables are gone. */
template <typename... T> struct emu_pack;
template <> struct emu_pack<> {
    template <typename K, typename... D> void call(K k, D... d) const { k(d...); }
};
template <typename H, typename... T> struct emu_pack<H, T...> {
    H head;
    emu_pack<T...> tail;
    template <typename K, typename... D> void call(K k, D... d) const { tail.call(k, d..., head); }
};
/* The pack of a kernel's parameter types, from the launch's arguments
 * converted as the launch converts them (NULL to a pointer, int to size_t). */
template <typename... T> struct emu_packer;
template <> struct emu_packer<> {
    static emu_pack<> make() { return {}; }
};
template <typename H, typename... T> struct emu_packer<H, T...> {
    template <typename A, typename... R> static emu_pack<H, T...> make(A &&a, R &&...r) {
        return {(H)(a), emu_packer<T...>::make(std::forward<R>(r)...)};
    }
};
template <typename... P, typename... A>
static inline emu_pack<std::decay_t<P>...> emu_make_pack(void (*)(P...), A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launched with as many arguments as it has parameters");
    return emu_packer<std::decay_t<P>...>::make(std::forward<A>(a)...);
}

template <typename K, typename P>
static inline void emu_launch_pack(const char *kernel, int cooperative, unsigned grid, unsigned block,
                                   cudaStream_t stream, K k, P pack) {
    auto f = [=]() { pack.call(k); };
    static_assert(std::is_trivially_copyable<decltype(f)>::value, "a captured launch copies the closure's bytes");
    emu_launch(kernel, grid, block, stream, cooperative, emu_trampoline<decltype(f)>, &f, sizeof f);
}

#define EMU_CFG(grid, block, shared_bytes, stream) (grid), (block), (stream)
#define EMU_LAUNCH(kernel, cooperative, cfg, ...)                                                              \
    emu_launch_pack(#kernel, cooperative, EMU_CFG cfg, [](auto... emu_arg) { kernel(emu_arg...); },           \
                    emu_make_pack(kernel, __VA_ARGS__))

#endif
