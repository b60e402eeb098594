/* loops_avx2.c - the ops' hot plain-C loops (loops_impl.h) compiled for
 * AVX2+FMA (8 lanes). */
#include "kernels.h"

#define DP_LOOP(name) name##_avx2
#include "loops_impl.h"
