/* loops_generic.c - the ops' hot plain-C loops (loops_impl.h) compiled for
 * the baseline ISA of the target (SSE2 on x86-64, NEON on aarch64). */
#include "kernels.h"

#define DP_LOOP(name) name##_generic
#include "loops_impl.h"
