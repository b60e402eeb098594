/* loops_avx512.c - the ops' hot plain-C loops (loops_impl.h) compiled for
 * AVX-512 (16 lanes). */
#include "kernels.h"

#define DP_LOOP(name) name##_avx512
#include "loops_impl.h"
