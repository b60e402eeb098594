/* conv_direct.cu - dptrain's own direct convolution forward for
 * convolutions with few input values per output (C kh kw at most
 * DP_CUDA_DIRECT_MAX: LeNet's conv1, 1x3x3, a CIFAR network's 3x3x3 first
 * layer), with the bias and the ReLU in the same kernel: one thread per
 * output element, its window's products summed in (c, kh, kw) order by
 * fused multiply-adds. FP32, NCHW, 2-D, one group; taken in place of
 * cuDNN's forward with DPTRAIN_CONV_DIRECT=on (conv_cuda.c). Why: such a
 * convolution reads a few floats per output and is bound by writing y, a
 * few microseconds on a GPU, where LeNet's largest kernel on an H200 was
 * cuDNN's implicit-GEMM forward, 59 us a call at ncu's clocks (2026-11-28;
 * for conv1 or conv2: bench/gpu_vs_pytorch.sh's on/off line will say). */
#include "kernels_common.cuh"

/* y[n, k, oh, ow] = relu(sum w[k, c, a, b] x[n, c, oh sh - ph + a dh, ow sw - pw + b dw] + bias[k]),
 * the sum in (c, a, b) order over the window's inputs inside x, then one
 * FP32 addition of the bias, then the ReLU (NaN kept): bias_act's
 * arithmetic after the sum. */
__global__ void conv_direct_forward_kernel(dp_cuda_conv_direct_t g, const float *x, const float *w, const float *bias,
                                           float *y, int relu, fast_div_t by_plane, fast_div_t by_OW, fast_div_t by_K) {
    const uint32_t out_plane = (uint32_t)(g.OH * g.OW), in_plane = (uint32_t)(g.H * g.W);
    const int taps = g.C * g.kh * g.kw;
    GRID_LOOP_T(uint32_t, i, (uint32_t)g.N * (uint32_t)g.K * out_plane) {
        const uint32_t nk = div_by(by_plane, i), o = i - nk * out_plane, q = div_by(by_OW, o);
        const uint32_t n = div_by(by_K, nk), k = nk - n * (uint32_t)g.K;
        const int h0 = (int)q * g.sh - g.ph, w0 = (int)(o - q * (uint32_t)g.OW) * g.sw - g.pw;
        const float *xn = x + n * (uint32_t)g.C * in_plane, *wk = w + k * (uint32_t)taps;
        float s = 0.0f;
        for (int c = 0; c < g.C; c++) {
            const float *xc = xn + (uint32_t)c * in_plane;
            for (int a = 0; a < g.kh; a++) {
                const int h = h0 + a * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int b = 0; b < g.kw; b++) {
                    const int v = w0 + b * g.dw;
                    if (v >= 0 && v < g.W) s = fmaf(xc[h * g.W + v], wk[(c * g.kh + a) * g.kw + b], s);
                }
            }
        }
        if (bias) s = __fadd_rn(s, bias[k]);
        if (relu) s = s < 0.0f ? 0.0f : s;
        y[i] = s;
    }
}

extern "C" int dp_cuda_conv_direct_fits(const dp_cuda_conv_direct_t *g) {
    return g->N > 0 && g->C > 0 && g->K > 0 && g->C * g->kh * g->kw <= DP_CUDA_DIRECT_MAX &&
           (size_t)g->N * g->K * g->OH * g->OW <= NARROW_MAX && (size_t)g->N * g->C * g->H * g->W <= NARROW_MAX;
}

extern "C" cudaError_t dp_cuda_conv_direct_forward(cudaStream_t stream, const dp_cuda_conv_direct_t *g, const float *x,
                                                   const float *w, const float *bias, float *y, int relu) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    if (!dp_cuda_conv_direct_fits(g)) return cudaErrorInvalidValue;
    const size_t n = (size_t)g->N * g->K * g->OH * g->OW;
    conv_direct_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
        *g, x, w, bias, y, relu, fast_div((uint32_t)(g->OH * g->OW)), fast_div((uint32_t)g->OW),
        fast_div((uint32_t)g->K));
    return cudaGetLastError();
}
