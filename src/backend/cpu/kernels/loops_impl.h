/* loops_impl.h - the plain-C hot loops of the CPU ops (ReLU and ReLU6 masks, bias
 * epilogues, batch norm's output, row sums, 2x2 average pooling, depthwise convolution planes,
 * the SiLU, GELU and sigmoid activations with loops_math.h's exp and erfc) and of the backend (the sum of
 * replicas), written once and compiled once
 * per ISA: loops_avx512.c, loops_avx2.c and loops_generic.c each define
 * DP_LOOP(name) (the name with their ISA's suffix) and include this file,
 * and CMakeLists.txt compiles each with its ISA's flags, so the compiler
 * vectorizes the same C for 16, 8 or 4 lanes. The portable build's own
 * files (ops_*.c) are compiled for baseline x86-64 (SSE2): these loops were
 * the measured cost of that build against -march=native.
 *
 * No intrinsics. Every loop is element-wise or keeps its order of
 * additions (no reassociation: the build does not allow it, and ISO C mode
 * contracts no a * b + c into an FMA), so every ISA gives the same bits.
 * Not installed; included only by the loops_*.c files.
 */
#ifndef DP_LOOP
#error "define DP_LOOP(name) before including loops_impl.h"
#endif

#include <stddef.h>
#include <string.h>

#include "loops_math.h"
#include "winograd_f35.h"

/* dst[l] = max(src[l] + b, 0), as the relu op (a NaN passes through) */
static void DP_LOOP(add_scalar_relu)(float *restrict dst, const float *restrict src, size_t n, float b) {
    for (size_t l = 0; l < n; l++) {
        float v = src[l] + b;
        dst[l] = v < 0.0f ? 0.0f : v;
    }
}

/* x[l] = max(x[l] + b, 0) in place */
static void DP_LOOP(add_scalar_relu_inplace)(float *x, size_t n, float b) {
    for (size_t l = 0; l < n; l++) {
        float v = x[l] + b;
        x[l] = v < 0.0f ? 0.0f : v;
    }
}

/* dst[l] = src[l] + b */
static void DP_LOOP(add_scalar)(float *restrict dst, const float *restrict src, size_t n, float b) {
    for (size_t l = 0; l < n; l++) dst[l] = src[l] + b;
}

/* x[l] += b */
static void DP_LOOP(add_scalar_inplace)(float *x, size_t n, float b) {
    for (size_t l = 0; l < n; l++) x[l] += b;
}

/* dst[i] += src[i] (the backend's sum of replicas, reduce_range) */
static void DP_LOOP(add_inplace)(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* dy[l] = y[l] > 0 ? dy[l] : 0 (the gradient through a ReLU whose output
 * is y) */
static void DP_LOOP(relu_mask)(float *restrict dy, const float *restrict y, size_t n) {
    for (size_t l = 0; l < n; l++) dy[l] = y[l] > 0.0f ? dy[l] : 0.0f;
}

/* dst[l] = y[l] > 0 ? dy[l] : 0: relu_mask into another buffer, dy
 * unchanged */
static void DP_LOOP(relu_mask_copy)(float *restrict dst, const float *restrict dy, const float *restrict y,
                                    size_t n) {
    for (size_t l = 0; l < n; l++) dst[l] = y[l] > 0.0f ? dy[l] : 0.0f;
}

/* dy[l] = 0 < y[l] < 6 ? dy[l] : 0 (the gradient through a ReLU6 whose
 * output is y, as the relu6 op's backward) */
static void DP_LOOP(relu6_mask)(float *restrict dy, const float *restrict y, size_t n) {
    for (size_t l = 0; l < n; l++) dy[l] = y[l] > 0.0f && y[l] < 6.0f ? dy[l] : 0.0f;
}

/* dst[l] = (src[l] - mean) scale + shift (batch norm's output over one
 * plane, ops_batch_norm.c), then with fuse 1 (ops.h DP_FUSE_RELU) relu of
 * it, with fuse 2 (DP_FUSE_RELU6) relu6 of it, as the relu and relu6 ops (a
 * NaN passes through). The product and the sum in two statements: no
 * compiler contracts them into an FMA. */
static void DP_LOOP(batch_norm_apply)(float *restrict dst, const float *restrict src, size_t n, float mean,
                                      float scale, float shift, int fuse) {
    if (fuse == 1)
        for (size_t l = 0; l < n; l++) {
            float v = (src[l] - mean) * scale;
            v += shift;
            dst[l] = v < 0.0f ? 0.0f : v;
        }
    else if (fuse == 2)
        for (size_t l = 0; l < n; l++) {
            float v = (src[l] - mean) * scale;
            v += shift;
            dst[l] = v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v;
        }
    else
        for (size_t l = 0; l < n; l++) {
            float v = (src[l] - mean) * scale;
            dst[l] = v + shift;
        }
}

/* The sum of n floats in 8 float lanes (element i into lane i % 8), the
 * lanes then the tail added in double: the same bits on every ISA. */
static double DP_LOOP(row_sum)(const float *x, size_t n) {
    float lanes[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lanes[j] += x[i + j];
    double sum = 0.0;
    for (int j = 0; j < 8; j++) sum += lanes[j];
    for (; i < n; i++) sum += x[i];
    return sum;
}

/* 2x2, stride 2 average pooling over `planes` planes (H, W) -> (OH, OW):
 * y = ((x00 + x10) + (x01 + x11)) * 0.25 (ops_pool.c's order). */
static void DP_LOOP(avg_pool_2x2_forward)(const float *restrict x, float *restrict y, size_t planes, int W,
                                          int OH, int OW, size_t in_plane, size_t out_plane) {
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * in_plane; /* (H, W) */
        float *yp = y + p * out_plane;      /* (OH, OW) */
        for (int oh = 0; oh < OH; oh++) {
            const float *r0 = xp + (size_t)(2 * oh) * W, *r1 = r0 + W;
            float *out = yp + (size_t)oh * OW;
            for (int ow = 0; ow < OW; ow++)
                out[ow] = ((r0[2 * ow] + r1[2 * ow]) + (r0[2 * ow + 1] + r1[2 * ow + 1])) * 0.25f;
        }
    }
}

/* Its adjoint: every x of a window gets dy * 0.25, written (overwrite) or
 * added. */
static void DP_LOOP(avg_pool_2x2_backward)(const float *restrict dy, float *restrict dx, size_t planes, int W,
                                           int OH, int OW, size_t in_plane, size_t out_plane, int overwrite) {
    for (size_t p = 0; p < planes; p++) {
        float *dxp = dx + p * in_plane;           /* (H, W) */
        const float *dyp = dy + p * out_plane;    /* (OH, OW) */
        for (int oh = 0; oh < OH; oh++) {
            float *restrict r0 = dxp + (size_t)(2 * oh) * W, *restrict r1 = r0 + W;
            const float *d = dyp + (size_t)oh * OW;
            if (overwrite) {
                for (int ow = 0; ow < OW; ow++) {
                    float v = d[ow] * 0.25f;
                    r0[2 * ow] = v;
                    r0[2 * ow + 1] = v;
                    r1[2 * ow] = v;
                    r1[2 * ow + 1] = v;
                }
                continue;
            }
            for (int ow = 0; ow < OW; ow++) {
                float v = d[ow] * 0.25f;
                r0[2 * ow] += v;
                r0[2 * ow + 1] += v;
                r1[2 * ow] += v;
                r1[2 * ow + 1] += v;
            }
        }
    }
}

/* Depthwise convolution of one plane (ops_conv_depthwise.c). The padded
 * input plane is split by stride phase (conv_common.h's
 * dp_conv_split_phases: `phases` (sh, sw, Hq, Wq)), so that tap t reads
 * output position (oh, ow) at phases + tap_at[t] + oh * Wq + ow (tap_at[t]
 * = the phase's start plus the tap's row and column offset in it). The
 * outputs are computed on the grid of OH rows of Wq columns, OH * Wq
 * values rounded up to n, a multiple of 16, columns ow >= OW and the
 * rounding included (their values are the caller's to drop): so each tap
 * is ONE product over n consecutive floats in blocks of 16 without a tail,
 * not one per short row. Element-wise over the grid, taps in order: the same bits on
 * every ISA. */

/* ygrid (n, a multiple of 16) = bias + sum over taps of w[t] * the tap's
 * floats; relu: then max(., 0), as the relu op. Blocks of 16: no tail. */
static void DP_LOOP(dw_conv_grid)(const float *restrict phases, const size_t *restrict tap_at, int taps, size_t n,
                                  const float *restrict w, float bias, int relu, float *restrict ygrid) {
    for (size_t i = 0; i < n; i += 16)
        for (int j = 0; j < 16; j++) ygrid[i + j] = bias;
    for (int t = 0; t < taps; t++) {
        const float *restrict src = phases + tap_at[t];
        const float wt = w[t];
        for (size_t i = 0; i < n; i += 16)
            for (int j = 0; j < 16; j++) ygrid[i + j] += wt * src[i + j];
    }
    if (relu)
        for (size_t i = 0; i < n; i += 16)
            for (int j = 0; j < 16; j++) ygrid[i + j] = ygrid[i + j] < 0.0f ? 0.0f : ygrid[i + j];
}

/* Its adjoint for the input: dphases (the layout of phases) += w[t] * dygrid
 * at each tap's floats, taps in order (dygrid 0 at the dropped columns; n
 * a multiple of 16). */
static void DP_LOOP(dw_conv_grid_dx)(float *restrict dphases, const size_t *restrict tap_at, int taps, size_t n,
                                     const float *restrict w, const float *restrict dygrid) {
    for (int t = 0; t < taps; t++) {
        float *restrict dst = dphases + tap_at[t];
        const float wt = w[t];
        for (size_t i = 0; i < n; i += 16)
            for (int j = 0; j < 16; j++) dst[i + j] += wt * dygrid[i + j];
    }
}

/* For the weight: dw[t] += dygrid . the tap's floats, in 16 float lanes
 * (element i into lane i % 16; n a multiple of 16) added to dw[t] in
 * double every 256 elements: the same bits on every ISA. */
static void DP_LOOP(dw_conv_grid_dw)(const float *restrict phases, const size_t *restrict tap_at, int taps, size_t n,
                                     const float *restrict dygrid, double *restrict dw) {
    for (int t = 0; t < taps; t++) {
        const float *restrict src = phases + tap_at[t];
        double sum = 0.0;
        for (size_t i0 = 0; i0 < n; i0 += 256) {
            const size_t end = n - i0 < 256 ? n : i0 + 256;
            float lanes[16] = {0};
            for (size_t i = i0; i < end; i += 16)
                for (int j = 0; j < 16; j++) lanes[j] += dygrid[i + j] * src[i + j];
            for (int j = 0; j < 16; j++) sum += lanes[j];
        }
        dw[t] += sum;
    }
}

/* The activations (ops_elementwise.c's formulas, aten's order of
 * operations) with loops_math.h's exp and erfc in place of libm's. */

/* dst[l] = e^src[l] */
static void DP_LOOP(exp_floats)(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t l = 0; l < n; l++) dst[l] = dp_loop_exp(src[l]);
}

/* dst[l] = erf(src[l]): x S(x^2) for |x| <= 0.8, else +-(1 - erfc(|x|))
 * with |x| clamped to 10.6 (erf is +-1 in float beyond); a NaN stays NaN */
static void DP_LOOP(erf_floats)(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t l = 0; l < n; l++) {
        const float x = src[l] < -10.6f ? -10.6f : src[l] > 10.6f ? 10.6f : src[l];
        const float a = x < 0.0f ? -x : x;
        const float tail = 1.0f - dp_loop_erfc(a, dp_loop_exp_neg_square(x, 1.0f));
        dst[l] = a <= 0.8f ? dp_loop_erf_small(x) : x < 0.0f ? -tail : tail;
    }
}

/* The normal CDF (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2 from
 * gauss = e^(-x^2 / 2), for |x| <= 15 */
static inline float DP_LOOP(normal_cdf)(float x, float gauss) {
    const float half_tail = 0.5f * dp_loop_erfc((x < 0.0f ? -x : x) * 0.707106781f, gauss);
    return x < 0.0f ? half_tail : 1.0f - half_tail;
}

/* |x| clamped to 15 (the CDF is 0 or 1 in float beyond); a NaN stays NaN */
static inline float DP_LOOP(gelu_clamp)(float x) { return x < -15.0f ? -15.0f : x > 15.0f ? 15.0f : x; }

/* y[l] = x Phi(x), Phi the normal CDF (gelu: x (1 + erf(x / sqrt 2)) / 2) */
static void DP_LOOP(gelu)(float *restrict y, const float *restrict x, size_t n) {
    for (size_t l = 0; l < n; l++) {
        const float xc = DP_LOOP(gelu_clamp)(x[l]);
        y[l] = x[l] * DP_LOOP(normal_cdf)(xc, dp_loop_exp_neg_square(xc, 0.5f));
    }
}

/* dy (Phi(x) + x e^(-x^2 / 2) / sqrt(2 pi)) (aten's GeluBackwardKernel) */
static inline float DP_LOOP(gelu_grad)(float x, float dy) {
    const float xc = DP_LOOP(gelu_clamp)(x), gauss = dp_loop_exp_neg_square(xc, 0.5f);
    const float pdf = gauss * 0.398942280f; /* 1 / sqrt(2 pi) */
    return dy * (DP_LOOP(normal_cdf)(xc, gauss) + x * pdf);
}

/* name_backward: dx[l] = (overwrite) or += name_grad(x[l], dy[l]) */
#define DP_BACKWARD_LOOP(name)                                                                                      \
    static void DP_LOOP(name##_backward)(float *restrict dx, const float *restrict x, const float *restrict dy,      \
                                         size_t n, int overwrite) {                                                 \
        if (overwrite)                                                                                              \
            for (size_t l = 0; l < n; l++) dx[l] = DP_LOOP(name##_grad)(x[l], dy[l]);                               \
        else                                                                                                        \
            for (size_t l = 0; l < n; l++) dx[l] += DP_LOOP(name##_grad)(x[l], dy[l]);                              \
    }
DP_BACKWARD_LOOP(gelu)

/* y[l] = x / (1 + e^-x) (aten's silu_kernel: -0 for large negative x) */
static void DP_LOOP(silu)(float *restrict y, const float *restrict x, size_t n) {
    for (size_t l = 0; l < n; l++) y[l] = x[l] / (1.0f + dp_loop_exp(-x[l]));
}

/* dy s (1 + x (1 - s)), s = 1 / (1 + e^-x) (aten's silu_backward_kernel) */
static inline float DP_LOOP(silu_grad)(float x, float dy) {
    const float s = 1.0f / (1.0f + dp_loop_exp(-x));
    return dy * s * (1.0f + x * (1.0f - s));
}

DP_BACKWARD_LOOP(silu)
#undef DP_BACKWARD_LOOP

/* y[l] = 1 / (1 + e), or e / (1 + e) for x < 0, with e = e^-|x| in (0, 1]:
 * no overflow, exact 0 and 1 limits */
static void DP_LOOP(sigmoid)(float *restrict y, const float *restrict x, size_t n) {
    for (size_t l = 0; l < n; l++) {
        const float e = dp_loop_exp(x[l] < 0.0f ? x[l] : -x[l]);
        y[l] = x[l] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
}

/* The two-sided product of a Winograd transform (conv_winograd.c) on
 * `lanes` independent (b, b) tiles at once:
 *   dst[i][j][q] = sum_l (sum_k mat[i][k] src[k][l][q]) mat[j][l]
 * for i, j < a, k, l < b, q < lanes; mat is (a, b) row-major, a, b <= 8;
 * src[k][l][q] lives at src + k * src_rs + l * src_cs + q and dst[i][j][q]
 * at dst + i * dst_rs + j * dst_cs + q. Each sum runs in order of k (then
 * l) from 0 and skips the zero entries of mat; products and sums in float
 * without contraction: the same bits on every ISA and in every lane.
 * Eight lanes at a time in a GCC vector (no intrinsics: one AVX register,
 * two SSE or NEON ones). Always inlined: with one of
 * winograd_f35.h's constant matrices the loops unroll and only the
 * nonzero entries remain, multiplications by 1 and -1 folded away. */
typedef float DP_LOOP(v8) __attribute__((vector_size(32)));

/* One block of 8 lanes at src, dst. */
static inline __attribute__((always_inline)) void DP_LOOP(sandwich8)(const float *restrict mat, int a, int b,
                                                                     const float *restrict src, size_t src_rs,
                                                                     size_t src_cs, float *restrict dst,
                                                                     size_t dst_rs, size_t dst_cs) {
    typedef DP_LOOP(v8) v8;
    v8 t[8 * 8];
#pragma GCC unroll 8
    for (int i = 0; i < a; i++) /* t[i][l] = sum_k mat[i][k] src[k][l] */
#pragma GCC unroll 8
        for (int l = 0; l < b; l++) {
            v8 acc = {0};
#pragma GCC unroll 8
            for (int k = 0; k < b; k++) {
                const float c = mat[i * b + k];
                if (c == 0.0f) continue;
                v8 s;
                memcpy(&s, src + (size_t)k * src_rs + (size_t)l * src_cs, sizeof s);
                acc += c * s;
            }
            t[i * b + l] = acc;
        }
#pragma GCC unroll 8
    for (int i = 0; i < a; i++) /* dst[i][j] = sum_l t[i][l] mat[j][l] */
#pragma GCC unroll 8
        for (int j = 0; j < a; j++) {
            v8 acc = {0};
#pragma GCC unroll 8
            for (int l = 0; l < b; l++) {
                const float c = mat[j * b + l];
                if (c == 0.0f) continue;
                acc += c * t[i * b + l];
            }
            memcpy(dst + (size_t)i * dst_rs + (size_t)j * dst_cs, &acc, sizeof acc);
        }
}

/* Every block of 8 lanes in place; the last lanes (fewer than 8) through
 * zero-padded copies (lanes are independent: the same bits). */
static inline __attribute__((always_inline)) void DP_LOOP(sandwich)(const float *restrict mat, int a, int b,
                                                                    const float *restrict src, size_t src_rs,
                                                                    size_t src_cs, float *restrict dst,
                                                                    size_t dst_rs, size_t dst_cs, size_t lanes) {
    size_t q0 = 0;
    for (; q0 + 8 <= lanes; q0 += 8)
        DP_LOOP(sandwich8)(mat, a, b, src + q0, src_rs, src_cs, dst + q0, dst_rs, dst_cs);
    if (q0 == lanes) return;
    const size_t nq = lanes - q0;
    float in[8 * 8 * 8] = {0}, out[8 * 8 * 8];
    for (int k = 0; k < b; k++)
        for (int l = 0; l < b; l++) memcpy(in + (k * b + l) * 8, src + (size_t)k * src_rs + (size_t)l * src_cs + q0,
                                           nq * sizeof(float));
    DP_LOOP(sandwich8)(mat, a, b, in, (size_t)b * 8, 8, out, (size_t)a * 8, 8);
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
            memcpy(dst + (size_t)i * dst_rs + (size_t)j * dst_cs + q0, out + (i * a + j) * 8, nq * sizeof(float));
}

/* The sandwich with any matrix (the transforms done once per call). */
static void DP_LOOP(wino_sandwich)(const float *restrict mat, int a, int b, const float *restrict src, size_t src_rs,
                                   size_t src_cs, float *restrict dst, size_t dst_rs, size_t dst_cs, size_t lanes) {
    DP_LOOP(sandwich)(mat, a, b, src, src_rs, src_cs, dst, dst_rs, dst_cs, lanes);
}

/* The per-chunk transforms of F(3x3, 5x5), each with its constant matrix:
 * input tiles (B^T, 7x7 -> 7x7), output tiles (A^T, 7x7 -> 3x3), and their
 * adjoints for the data gradient (A: dy blocks 3x3 -> 7x7, B: 7x7 -> 7x7),
 * dy blocks of the weight gradient (G', 3x3 -> 7x7). */
#define DP_WINO_FIXED(name, mat, a, b)                                                                              \
    static void DP_LOOP(name)(const float *restrict src, size_t src_rs, size_t src_cs, float *restrict dst,          \
                              size_t dst_rs, size_t dst_cs, size_t lanes) {                                           \
        DP_LOOP(sandwich)(mat, a, b, src, src_rs, src_cs, dst, dst_rs, dst_cs, lanes);                                \
    }
DP_WINO_FIXED(wino_input, dp_wino_bt, DP_WINO_N, DP_WINO_N)
DP_WINO_FIXED(wino_output, dp_wino_at, DP_WINO_M, DP_WINO_N)
DP_WINO_FIXED(wino_dy_adjoint, dp_wino_a, DP_WINO_N, DP_WINO_M)
DP_WINO_FIXED(wino_input_adjoint, dp_wino_b, DP_WINO_N, DP_WINO_N)
DP_WINO_FIXED(wino_dy, dp_wino_gw, DP_WINO_N, DP_WINO_M)
#undef DP_WINO_FIXED

/* The table entry of this ISA's loops (kernels.h's dp_cpu_loops_t). */
const dp_cpu_loops_t DP_LOOP(dp_cpu_loops) = {
    .add_scalar_relu = DP_LOOP(add_scalar_relu),
    .add_scalar_relu_inplace = DP_LOOP(add_scalar_relu_inplace),
    .add_scalar = DP_LOOP(add_scalar),
    .add_scalar_inplace = DP_LOOP(add_scalar_inplace),
    .add_inplace = DP_LOOP(add_inplace),
    .relu_mask = DP_LOOP(relu_mask),
    .relu_mask_copy = DP_LOOP(relu_mask_copy),
    .relu6_mask = DP_LOOP(relu6_mask),
    .batch_norm_apply = DP_LOOP(batch_norm_apply),
    .row_sum = DP_LOOP(row_sum),
    .avg_pool_2x2_forward = DP_LOOP(avg_pool_2x2_forward),
    .avg_pool_2x2_backward = DP_LOOP(avg_pool_2x2_backward),
    .wino_sandwich = DP_LOOP(wino_sandwich),
    .wino_input = DP_LOOP(wino_input),
    .wino_output = DP_LOOP(wino_output),
    .wino_dy = DP_LOOP(wino_dy),
    .wino_dy_adjoint = DP_LOOP(wino_dy_adjoint),
    .wino_input_adjoint = DP_LOOP(wino_input_adjoint),
    .dw_conv_grid = DP_LOOP(dw_conv_grid),
    .dw_conv_grid_dx = DP_LOOP(dw_conv_grid_dx),
    .dw_conv_grid_dw = DP_LOOP(dw_conv_grid_dw),
    .exp_floats = DP_LOOP(exp_floats),
    .erf_floats = DP_LOOP(erf_floats),
    .gelu = DP_LOOP(gelu),
    .gelu_backward = DP_LOOP(gelu_backward),
    .silu = DP_LOOP(silu),
    .silu_backward = DP_LOOP(silu_backward),
    .sigmoid = DP_LOOP(sigmoid),
};
