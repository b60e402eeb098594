/* pooling.cu - max and average pooling 1-D to 3-D, forward and backward
 * (a gather: one thread per input element), global average pooling, and
 * conv_transpose's window copy (a crop or zero padding of the same planes).
 * Pooling and global average pooling also over NHWC tensors (g.C > 0):
 * each thread's element in memory order, the same loops and sums. The
 * forwards read and write float or bf16 activations (`bf16` bits, kernels.h);
 * the backwards are FP32 gradients (argmax and the geometry: no activation). */
#include "kernels_common.cuh"

/* Element i (memory order) of a tensor of `volume` values per plane: NCHW
 * (g.C = 0) plane *first = i / volume, *c = 0; NHWC: *first = the image n,
 * *c its channel; *s its place in the plane. Plane values then lie at
 * (first volume' stride + c) + s' stride, stride = max(g.C, 1), for any
 * plane size volume' (input or output). */
__device__ static __forceinline__ void pool_decode(const dp_cuda_pool_t &g, size_t i, size_t volume, size_t *first,
                                                   int *c, int *s) {
    if (!g.C) {
        *first = i / volume, *c = 0, *s = (int)(i % volume);
        return;
    }
    size_t r = i / (size_t)g.C;
    *c = (int)(i % (size_t)g.C), *first = r / volume, *s = (int)(r % volume);
}

/* --- pooling, 1-D to 3-D (ops_pool.c's rules): (D, H, W) planes, 1-D and
 * 2-D with the missing leading dims of size 1 and a window of 1 ------------ */
template <typename TX, typename TY>
__device__ static void max_pool_forward_loop(const dp_cuda_pool_t &g, const TX *x, TY *y, int32_t *argmax) {
    const size_t out_plane = (size_t)g.OD * g.OH * g.OW, stride = g.C ? (size_t)g.C : 1;
    GRID_LOOP(i, (size_t)g.planes * out_plane) {
        size_t first;
        int c, o;
        pool_decode(g, i, out_plane, &first, &c, &o);
        const int od = o / (g.OH * g.OW), oh = o / g.OW % g.OH, ow = o % g.OW;
        const TX *xp = x + first * (size_t)g.D * g.H * g.W * stride + c;
        float best = -INFINITY;
        int32_t at = -1;
        for (int t = 0; t < g.kd; t++) {
            int d = od * g.sd - g.pd + t * g.dd;
            if (d < 0 || d >= g.D) continue;
            for (int a = 0; a < g.kh; a++) {
                int h = oh * g.sh - g.ph + a * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int b = 0; b < g.kw; b++) {
                    int w = ow * g.sw - g.pw + b * g.dw;
                    if (w < 0 || w >= g.W) continue;
                    int32_t idx = (d * g.H + h) * g.W + w;
                    float v = ld(xp, (size_t)idx * stride);
                    /* the first maximum in (d, h, w) order wins; a NaN beats everything after it (PyTorch) */
                    if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
                        best = v;
                        at = idx;
                    }
                }
            }
        }
        st(y, i, best);
        argmax[i] = at;
    }
}

__global__ void max_pool_forward_kernel(dp_cuda_pool_t g, const void *x, void *y, int32_t *argmax, int bf16) {
    FORMAT2(bf16, TX, TY, max_pool_forward_loop(g, (const TX *)x, (TY *)y, argmax));
}

extern "C" cudaError_t dp_cuda_max_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const void *x, void *y,
                                                int32_t *argmax, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    max_pool_forward_kernel<<<blocks_for((size_t)g->planes * g->OD * g->OH * g->OW), THREADS, 0, stream>>>(
        *g, x, y, argmax, bf16);
    return cudaGetLastError();
}

/* The outputs whose window may hold input row h: oh in [lo, hi]. */
__device__ static void covering(int h, int k, int s, int p, int d, int out, int *lo, int *hi) {
    int span = (k - 1) * d; /* window from oh*s - p to oh*s - p + span */
    int a = h + p - span, b = h + p;
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    *hi = b < 0 ? -1 : b / s;
    if (*hi > out - 1) *hi = out - 1;
}

/* dx of one input element: its outputs in (od, oh, ow) order whose argmax it is */
__global__ void max_pool_backward_kernel(dp_cuda_pool_t g, const float *dy, const int32_t *argmax, float *dx, int add) {
    const size_t in_plane = (size_t)g.D * g.H * g.W, out_plane = (size_t)g.OD * g.OH * g.OW;
    const size_t stride = g.C ? (size_t)g.C : 1;
    GRID_LOOP(i, (size_t)g.planes * in_plane) {
        size_t first;
        int c, at;
        pool_decode(g, i, in_plane, &first, &c, &at);
        const int d = at / (g.H * g.W), h = at / g.W % g.H, w = at % g.W;
        int d0, d1, h0, h1, w0, w1;
        covering(d, g.kd, g.sd, g.pd, g.dd, g.OD, &d0, &d1);
        covering(h, g.kh, g.sh, g.ph, g.dh, g.OH, &h0, &h1);
        covering(w, g.kw, g.sw, g.pw, g.dw, g.OW, &w0, &w1);
        const size_t base = first * out_plane * stride + c;
        float s = 0.0f;
        for (int od = d0; od <= d1; od++)
            for (int oh = h0; oh <= h1; oh++)
                for (int ow = w0; ow <= w1; ow++) {
                    size_t o = base + (((size_t)od * g.OH + oh) * g.OW + ow) * stride;
                    if (argmax[o] == at) s = __fadd_rn(s, dy[o]);
                }
        dx[i] = add ? __fadd_rn(dx[i], s) : s;
    }
}

extern "C" cudaError_t dp_cuda_max_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                                 const int32_t *argmax, float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    max_pool_backward_kernel<<<blocks_for((size_t)g->planes * g->D * g->H * g->W), THREADS, 0, stream>>>(
        *g, dy, argmax, dx, add);
    return cudaGetLastError();
}

/* The inputs inside [o * s - p, o * s - p + k) along one dim. */
__device__ static int inside(int o, int k, int s, int p, int in) {
    int a = o * s - p;
    return min(a + k, in) - max(a, 0);
}

/* The divisor of output (od, oh, ow): the kernel volume, or the inputs inside the window. */
__device__ static float avg_divisor(const dp_cuda_pool_t *g, int od, int oh, int ow) {
    if (g->count_include_pad) return (float)(g->kd * g->kh * g->kw);
    return (float)(inside(od, g->kd, g->sd, g->pd, g->D) * inside(oh, g->kh, g->sh, g->ph, g->H) *
                   inside(ow, g->kw, g->sw, g->pw, g->W));
}

template <typename TX, typename TY> __device__ static void avg_pool_forward_loop(const dp_cuda_pool_t &g, const TX *x, TY *y) {
    const size_t out_plane = (size_t)g.OD * g.OH * g.OW, stride = g.C ? (size_t)g.C : 1;
    GRID_LOOP(i, (size_t)g.planes * out_plane) {
        size_t first;
        int c, o;
        pool_decode(g, i, out_plane, &first, &c, &o);
        const int od = o / (g.OH * g.OW), oh = o / g.OW % g.OH, ow = o % g.OW;
        const TX *xp = x + first * (size_t)g.D * g.H * g.W * stride + c;
        float s = 0.0f;
        for (int t = 0; t < g.kd; t++) {
            int d = od * g.sd - g.pd + t;
            if (d < 0 || d >= g.D) continue;
            for (int a = 0; a < g.kh; a++) {
                int h = oh * g.sh - g.ph + a;
                if (h < 0 || h >= g.H) continue;
                for (int b = 0; b < g.kw; b++) {
                    int w = ow * g.sw - g.pw + b;
                    if (w >= 0 && w < g.W) s = __fadd_rn(s, ld(xp, (size_t)((d * g.H + h) * g.W + w) * stride));
                }
            }
        }
        st(y, i, __fdiv_rn(s, avg_divisor(&g, od, oh, ow)));
    }
}

__global__ void avg_pool_forward_kernel(dp_cuda_pool_t g, const void *x, void *y, int bf16) {
    FORMAT2(bf16, TX, TY, avg_pool_forward_loop(g, (const TX *)x, (TY *)y));
}

/* 2-D pooling of NCHW planes (pool_2d_narrow): avg_pool_forward_loop's
 * sums and divisor with 32-bit indices, the output's plane and row found by
 * two fast divisions instead of pool_decode's 64-bit ones (those were most
 * of the kernel's time: LeNet's pools on an H200, 2026-11-28) */
template <typename TX, typename TY>
__device__ static void avg_pool_forward_2d(const dp_cuda_pool_t &g, const TX *x, TY *y, fast_div_t by_out_plane,
                                           fast_div_t by_OW) {
    const uint32_t out_plane = (uint32_t)(g.OH * g.OW), in_plane = (uint32_t)(g.H * g.W);
    GRID_LOOP_T(uint32_t, i, (uint32_t)g.planes * out_plane) {
        const uint32_t p = div_by(by_out_plane, i), o = i - p * out_plane, q = div_by(by_OW, o);
        const int oh = (int)q, ow = (int)(o - q * (uint32_t)g.OW);
        const TX *xp = x + p * in_plane;
        float s = 0.0f;
        for (int a = 0; a < g.kh; a++) {
            int h = oh * g.sh - g.ph + a;
            if (h < 0 || h >= g.H) continue;
            for (int b = 0; b < g.kw; b++) {
                int w = ow * g.sw - g.pw + b;
                if (w >= 0 && w < g.W) s = __fadd_rn(s, ld(xp, (uint32_t)(h * g.W + w)));
            }
        }
        st(y, i, __fdiv_rn(s, avg_divisor(&g, 0, oh, ow)));
    }
}

__global__ void avg_pool_forward_2d_kernel(dp_cuda_pool_t g, const void *x, void *y, int bf16, fast_div_t by_out_plane,
                                           fast_div_t by_OW) {
    FORMAT2(bf16, TX, TY, avg_pool_forward_2d(g, (const TX *)x, (TY *)y, by_out_plane, by_OW));
}

/* Pooling over (H, W) planes of an NCHW tensor with 32-bit indices: no
 * depth (D = OD = 1, a window of 1 without padding along it), planes H W
 * and planes OH OW below 2^31. */
static int pool_2d_narrow(const dp_cuda_pool_t *g) {
    return !g->C && g->D == 1 && g->OD == 1 && g->kd == 1 && g->pd == 0 &&
           (size_t)g->planes * g->H * g->W <= NARROW_MAX && (size_t)g->planes * g->OH * g->OW <= NARROW_MAX;
}

extern "C" cudaError_t dp_cuda_avg_pool_forward(cudaStream_t stream, const dp_cuda_pool_t *g, const void *x, void *y,
                                                int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    const size_t out_n = (size_t)g->planes * g->OD * g->OH * g->OW;
    if (pool_2d_narrow(g))
        avg_pool_forward_2d_kernel<<<blocks_for(out_n), THREADS, 0, stream>>>(
            *g, x, y, bf16, fast_div((uint32_t)(g->OH * g->OW)), fast_div((uint32_t)g->OW));
    else
        avg_pool_forward_kernel<<<blocks_for(out_n), THREADS, 0, stream>>>(*g, x, y, bf16);
    return cudaGetLastError();
}

/* dx of input element i (at d, h, w of its plane): its outputs in (od, oh,
 * ow) order, dy / divisor each, output o of the plane at dy[base + o
 * stride]; the divisor as avg_divisor, its factors hoisted out of the inner
 * loops (the same int product, the same float). */
template <typename I>
__device__ static __forceinline__ void avg_pool_grad_at(const dp_cuda_pool_t &g, const float *dy, float *dx, int add,
                                                        I i, I base, I stride, int d, int h, int w) {
    int d0, d1, h0, h1, w0, w1;
    covering(d, g.kd, g.sd, g.pd, 1, g.OD, &d0, &d1);
    covering(h, g.kh, g.sh, g.ph, 1, g.OH, &h0, &h1);
    covering(w, g.kw, g.sw, g.pw, 1, g.OW, &w0, &w1);
    const float volume = (float)(g.kd * g.kh * g.kw);
    float s = 0.0f;
    for (int od = d0; od <= d1; od++) {
        const int in_d = inside(od, g.kd, g.sd, g.pd, g.D);
        for (int oh = h0; oh <= h1; oh++) {
            const int in_dh = in_d * inside(oh, g.kh, g.sh, g.ph, g.H);
            const I row = ((I)od * (I)g.OH + (I)oh) * (I)g.OW;
            for (int ow = w0; ow <= w1; ow++) {
                float divisor = g.count_include_pad ? volume : (float)(in_dh * inside(ow, g.kw, g.sw, g.pw, g.W));
                s = __fadd_rn(s, __fdiv_rn(dy[base + (row + (I)ow) * stride], divisor));
            }
        }
    }
    dx[i] = add ? __fadd_rn(dx[i], s) : s;
}

/* by_plane, by_HW, by_W divide by D H W, H W and W (narrow: planes D H W and
 * planes OD OH OW < 2^31) */
__global__ void avg_pool_backward_kernel(dp_cuda_pool_t g, const float *dy, float *dx, int add, fast_div_t by_plane,
                                         fast_div_t by_HW, fast_div_t by_W, int narrow) {
    const size_t in_plane = (size_t)g.D * g.H * g.W;
    if (narrow) {
        GRID_LOOP_T(uint32_t, i, (uint32_t)((size_t)g.planes * in_plane)) {
            uint32_t plane = div_by(by_plane, i), at = i - plane * (uint32_t)in_plane;
            uint32_t d = div_by(by_HW, at), r = at - d * (uint32_t)(g.H * g.W), h = div_by(by_W, r);
            avg_pool_grad_at<uint32_t>(g, dy, dx, add, i, plane * (uint32_t)(g.OD * g.OH * g.OW), 1u, (int)d, (int)h,
                                       (int)(r - h * (uint32_t)g.W));
        }
        return;
    }
    const size_t out_plane = (size_t)g.OD * g.OH * g.OW, stride = g.C ? (size_t)g.C : 1;
    GRID_LOOP(i, (size_t)g.planes * in_plane) {
        size_t first;
        int c, at;
        pool_decode(g, i, in_plane, &first, &c, &at);
        avg_pool_grad_at<size_t>(g, dy, dx, add, i, first * out_plane * stride + c, stride, at / (g.H * g.W),
                                 at / g.W % g.H, at % g.W);
    }
}

/* Windows that tile the plane (pool_2d_narrow, stride = window, no
 * padding: LeNet's 2x2 / 2): input (h, w) lies in output (h / kh, w / kw)
 * alone, or in none past the last whole or partial window. The value
 * avg_pool_grad_at gives (0 + dy / divisor, its divisor; 0 where no output
 * covers the input) with two fast divisions for covering()'s four integer
 * ones. */
__global__ void avg_pool_backward_tiles_kernel(dp_cuda_pool_t g, const float *dy, float *dx, int add,
                                               fast_div_t by_plane, fast_div_t by_W, fast_div_t by_kh, fast_div_t by_kw) {
    const uint32_t in_plane = (uint32_t)(g.H * g.W), out_plane = (uint32_t)(g.OH * g.OW);
    GRID_LOOP_T(uint32_t, i, (uint32_t)g.planes * in_plane) {
        const uint32_t p = div_by(by_plane, i), at = i - p * in_plane, h = div_by(by_W, at);
        const uint32_t oh = div_by(by_kh, h), ow = div_by(by_kw, at - h * (uint32_t)g.W);
        float s = 0.0f;
        if (oh < (uint32_t)g.OH && ow < (uint32_t)g.OW) {
            const int in_dh = inside(0, g.kd, g.sd, g.pd, g.D) * inside((int)oh, g.kh, g.sh, g.ph, g.H);
            float divisor = g.count_include_pad ? (float)(g.kd * g.kh * g.kw)
                                                : (float)(in_dh * inside((int)ow, g.kw, g.sw, g.pw, g.W));
            s = __fadd_rn(s, __fdiv_rn(dy[p * out_plane + oh * (uint32_t)g.OW + ow], divisor));
        }
        dx[i] = add ? __fadd_rn(dx[i], s) : s;
    }
}

extern "C" cudaError_t dp_cuda_avg_pool_backward(cudaStream_t stream, const dp_cuda_pool_t *g, const float *dy,
                                                 float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    size_t in_n = (size_t)g->planes * g->D * g->H * g->W, out_n = (size_t)g->planes * g->OD * g->OH * g->OW;
    if (pool_2d_narrow(g) && g->sh == g->kh && g->sw == g->kw && g->ph == 0 && g->pw == 0) {
        avg_pool_backward_tiles_kernel<<<blocks_for(in_n), THREADS, 0, stream>>>(
            *g, dy, dx, add, fast_div((uint32_t)(g->H * g->W)), fast_div((uint32_t)g->W), fast_div((uint32_t)g->kh),
            fast_div((uint32_t)g->kw));
        return cudaGetLastError();
    }
    int narrow = !g->C && in_n <= NARROW_MAX && out_n <= NARROW_MAX; /* NHWC: the general loop */
    avg_pool_backward_kernel<<<blocks_for(in_n), THREADS, 0, stream>>>(
        *g, dy, dx, add, fast_div(narrow ? (uint32_t)(g->D * g->H * g->W) : 1u),
        fast_div(narrow ? (uint32_t)(g->H * g->W) : 1u), fast_div(narrow ? (uint32_t)g->W : 1u), narrow);
    return cudaGetLastError();
}

/* --- global average pooling (ops_pool.c) --------------------------------------------- */
/* One thread per plane, the CPU's four double lanes in the same order: its
 * bits (NHWC, C > 0: plane p = n C + c, its values C apart). */
template <typename TX, typename TY>
__device__ static void global_avg_loop(const TX *x, TY *y, size_t planes, size_t plane, int C) {
    GRID_LOOP(p, planes) {
        const size_t stride = C ? (size_t)C : 1;
        const TX *src = C ? x + p / stride * plane * stride + p % stride : x + p * plane;
        double lanes[4] = {0.0, 0.0, 0.0, 0.0};
        size_t i = 0;
        for (; i + 4 <= plane; i += 4)
            for (int j = 0; j < 4; j++) lanes[j] += ld(src, (i + j) * stride);
        for (; i < plane; i++) lanes[0] += ld(src, i * stride);
        st(y, p, (float)(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) / (double)plane));
    }
}

__global__ void global_avg_kernel(const void *x, void *y, size_t planes, size_t plane, int C, int bf16) {
    FORMAT2(bf16, TX, TY, global_avg_loop((const TX *)x, (TY *)y, planes, plane, C));
}

extern "C" cudaError_t dp_cuda_global_avg_forward(cudaStream_t stream, const void *x, void *y, size_t planes,
                                                  size_t plane, int C, int bf16) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    global_avg_kernel<<<blocks_for(planes), THREADS, 0, stream>>>(x, y, planes, plane, C, bf16);
    return cudaGetLastError();
}

__global__ void global_avg_backward_kernel(const float *dy, float *dx, size_t planes, size_t plane, int C, int add) {
    const float inv = __fdiv_rn(1.0f, (float)plane);
    GRID_LOOP(i, planes * plane) {
        /* NHWC: element i is channel i % C of image i / (plane C), dy (N, C) */
        float g = __fmul_rn(dy[C ? i / (plane * (size_t)C) * (size_t)C + i % (size_t)C : i / plane], inv);
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_global_avg_backward(cudaStream_t stream, const float *dy, float *dx, size_t planes,
                                                   size_t plane, int C, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    global_avg_backward_kernel<<<blocks_for(planes * plane), THREADS, 0, stream>>>(dy, dx, planes, plane, C, add);
    return cudaGetLastError();
}

/* --- window copy (conv_transpose's crop and zero padding) ---------------------- */
__global__ void window_copy_kernel(dp_cuda_window_t g, const float *src, float *dst) {
    const size_t dst_plane = (size_t)g.dst[0] * g.dst[1] * g.dst[2];
    GRID_LOOP(i, (size_t)g.planes * dst_plane) {
        size_t plane = i / dst_plane;
        int o = (int)(i % dst_plane);
        int d = o / (g.dst[1] * g.dst[2]) + g.offset[0], h = o / g.dst[2] % g.dst[1] + g.offset[1],
            w = o % g.dst[2] + g.offset[2];
        int in = d >= 0 && d < g.src[0] && h >= 0 && h < g.src[1] && w >= 0 && w < g.src[2];
        dst[i] = in ? src[plane * ((size_t)g.src[0] * g.src[1] * g.src[2]) + ((size_t)d * g.src[1] + h) * g.src[2] + w]
                    : 0.0f;
    }
}

extern "C" cudaError_t dp_cuda_window_copy(cudaStream_t stream, const dp_cuda_window_t *g, const float *src,
                                           float *dst) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    window_copy_kernel<<<blocks_for((size_t)g->planes * g->dst[0] * g->dst[1] * g->dst[2]), THREADS, 0, stream>>>(
        *g, src, dst);
    return cudaGetLastError();
}
