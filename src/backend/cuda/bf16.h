/* bf16.h - bf16 numbers (the top 16 bits of a float, held as uint16_t)
 * for --precision bf16: the conversions between float and bf16, on the
 * bits, with no CUDA header, so that nvcc's device code (precision.cu), the
 * emulator's host build of it and the tests compute the same bits.
 *
 * float -> bf16 rounds to nearest, ties to even: add 0x7fff plus the
 * lowest kept bit, keep the top half. That is IEEE rounding for every
 * finite float, subnormals included (their spacing is uniform), and a
 * value at or past the midpoint between bf16's largest finite value and
 * 2^128 becomes Inf, as RNE says; Inf stays Inf; a NaN stays a NaN (quiet,
 * its sign and the top of its payload kept), never rounded into Inf.
 * bf16 -> float is exact. */
#ifndef DPTRAIN_CUDA_BF16_H
#define DPTRAIN_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DP_BF16_FN static __host__ __device__ __forceinline__
#else
#define DP_BF16_FN static inline
#endif

DP_BF16_FN uint16_t dp_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: kept a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

DP_BF16_FN float dp_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
