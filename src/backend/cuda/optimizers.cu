/* optimizers.cu - the five optimizers (sgd, momentum, adagrad, adam, adamw) as
 * optim.c's loops, one element per thread (dp_cuda_optim). The scalars
 * (kind, learning rate, Adam's corrections, ...) are read from device
 * memory, not passed as kernel arguments: a step captured as a CUDA graph
 * (graph_cuda.c) takes each step's values, written before its launch. */
#include "kernels_common.cuh"

/* --- optimizers: optim.c's loops, one element per thread --------------------- */
__global__ void optim_kernel(const dp_cuda_optim_args_t *args, float *p, const float *g, float *s0, float *s1,
                             size_t n) {
    const dp_cuda_optim_args_t a = *args;
    GRID_LOOP(i, n) {
        float pi = p[i];
        switch (a.kind) {
        case 0: /* sgd */
            p[i] = a.wd == 0.0f ? fmaf(a.neg_lr, g[i], pi) : fmaf(a.neg_lr, fmaf(a.wd, pi, g[i]), pi);
            break;
        case 1: { /* momentum */
            float d = fmaf(a.wd, pi, g[i]);
            float b = __fadd_rn(__fmul_rn(s0[i], a.momentum), d);
            s0[i] = b;
            p[i] = fmaf(a.neg_lr, a.nesterov ? fmaf(a.momentum, b, d) : b, pi);
            break;
        }
        case 2: { /* adagrad */
            float d = fmaf(a.wd, pi, g[i]);
            float s = fmaf(d, d, s0[i]);
            s0[i] = s;
            p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(a.neg_lr, d), __fadd_rn(__fsqrt_rn(s), a.eps)));
            break;
        }
        case 3:   /* adam: the gradient plus wd * p */
        case 4: { /* adamw: p decayed first (p * (1 - lr * wd)), the gradient alone */
            if (a.kind == 4) pi = __fmul_rn(pi, a.decay);
            float d = a.kind == 4 ? g[i] : fmaf(a.wd, pi, g[i]);
            float mi = fmaf(a.one_minus_b1, d, __fmul_rn(s0[i], a.b1));
            float vi = fmaf(__fmul_rn(a.one_minus_b2, d), d, __fmul_rn(s1[i], a.b2));
            s0[i] = mi;
            s1[i] = vi;
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.correction2_sqrt), a.eps);
            p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(a.neg_step_size, mi), denom));
            break;
        }
        }
    }
}

extern "C" cudaError_t dp_cuda_optim(cudaStream_t stream, const dp_cuda_optim_args_t *device_args, float *p,
                                     const float *g, float *s0, float *s1, size_t n) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (n == 0) return cudaSuccess;
    optim_kernel<<<blocks_for(n), THREADS, 0, stream>>>(device_args, p, g, s0, s1, n);
    return cudaGetLastError();
}
