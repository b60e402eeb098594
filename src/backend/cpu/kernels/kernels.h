/* kernels.h - library-internal: the table of per-ISA kernels, and the
 * scalar helpers the kernel files share. Not installed.
 *
 * Every SIMD path lives in a file of its own per ISA
 * (gemm_avx512.c, conv_avx2.c, bn_neon.c, ...), compiled with that ISA's
 * flags (CMakeLists.txt); only those files include intrinsics headers, and
 * nothing calls into them except through the table cpu_features.c fills
 * once per process (dp_cpu_kernels()). A NULL entry means "no fast path on
 * this ISA": the caller uses its portable C code (or, for GEMM, BLAS).
 */
#ifndef DPTRAIN_KERNELS_H
#define DPTRAIN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "../conv_common.h"
#include "dptrain/cpu.h"

/* C = alpha op(A) op(B) + beta C (gemm.h's arguments, M, N, K > 0).
 * Returns false, touching nothing, for shapes the ISA's kernels leave to
 * BLAS. */
typedef bool (*dp_gemm_kernel_fn)(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                                  int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Batch norm partial sums over one (example, channel) plane of n floats
 * (ops_batch_norm.c says what they are and why they are float partials). */
typedef void (*dp_bn_shifted_sums_fn)(const float *x, size_t n, double shift, double *s1, double *s2);
typedef void (*dp_bn_grad_sums_fn)(const float *x, const float *dy, size_t n, double mean, double *s_dy,
                                   double *s_dyx);

/* Conv fast paths (ops_conv.c): one image-group's im2col / col2im_add. */
typedef void (*dp_conv_im2col_fn)(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                                  size_t ldcol);
typedef void (*dp_conv_col2im_fn)(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                                  float *restrict dx);

/* A Winograd transform with a fixed matrix (loops_impl.h). */
typedef void (*dp_wino_fn)(const float *restrict src, size_t src_rs, size_t src_cs, float *restrict dst,
                           size_t dst_rs, size_t dst_cs, size_t lanes);

/* The ops' hot plain-C loops, one copy compiled per ISA (loops_impl.h
 * says what each computes; every copy gives the same bits). */
typedef struct {
    void (*add_scalar_relu)(float *restrict dst, const float *restrict src, size_t n, float b);
    void (*add_scalar_relu_inplace)(float *x, size_t n, float b);
    void (*add_scalar)(float *restrict dst, const float *restrict src, size_t n, float b);
    void (*add_scalar_inplace)(float *x, size_t n, float b);
    void (*add_inplace)(float *restrict dst, const float *restrict src, size_t n);
    void (*relu_mask)(float *restrict dy, const float *restrict y, size_t n);
    void (*relu_mask_copy)(float *restrict dst, const float *restrict dy, const float *restrict y, size_t n);
    void (*relu6_mask)(float *restrict dy, const float *restrict y, size_t n);
    void (*batch_norm_apply)(float *restrict dst, const float *restrict src, size_t n, float mean, float scale,
                             float shift, int fuse);
    double (*row_sum)(const float *x, size_t n);
    void (*avg_pool_2x2_forward)(const float *restrict x, float *restrict y, size_t planes, int W, int OH, int OW,
                                 size_t in_plane, size_t out_plane);
    void (*avg_pool_2x2_backward)(const float *restrict dy, float *restrict dx, size_t planes, int W, int OH,
                                  int OW, size_t in_plane, size_t out_plane, int overwrite);
    void (*wino_sandwich)(const float *restrict mat, int a, int b, const float *restrict src, size_t src_rs,
                          size_t src_cs, float *restrict dst, size_t dst_rs, size_t dst_cs, size_t lanes);
    /* F(3x3, 5x5)'s B^T, A^T, G', and A, B (the adjoints) */
    dp_wino_fn wino_input, wino_output, wino_dy, wino_dy_adjoint, wino_input_adjoint;
    /* one depthwise plane's forward, input gradient and weight gradient
     * over its output grid (ops_conv_depthwise.c, on stride-phase planes) */
    void (*dw_conv_grid)(const float *restrict phases, const size_t *restrict tap_at, int taps, size_t n,
                         const float *restrict w, float bias, int relu, float *restrict ygrid);
    void (*dw_conv_grid_dx)(float *restrict dphases, const size_t *restrict tap_at, int taps, size_t n,
                            const float *restrict w, const float *restrict dygrid);
    void (*dw_conv_grid_dw)(const float *restrict phases, const size_t *restrict tap_at, int taps, size_t n,
                            const float *restrict dygrid, double *restrict dw);
    /* e^x, erf, and the activations' forward and backward (dx written when
     * overwrite, else added to) with them (loops_math.h) */
    void (*exp_floats)(float *restrict dst, const float *restrict src, size_t n);
    void (*erf_floats)(float *restrict dst, const float *restrict src, size_t n);
    void (*gelu)(float *restrict y, const float *restrict x, size_t n);
    void (*gelu_backward)(float *restrict dx, const float *restrict x, const float *restrict dy, size_t n,
                          int overwrite);
    void (*silu)(float *restrict y, const float *restrict x, size_t n);
    void (*silu_backward)(float *restrict dx, const float *restrict x, const float *restrict dy, size_t n,
                          int overwrite);
    void (*sigmoid)(float *restrict y, const float *restrict x, size_t n);
} dp_cpu_loops_t;

typedef struct {
    dp_isa_t isa;
    const dp_cpu_loops_t *loops;            /* never NULL */
    dp_gemm_kernel_fn gemm;                 /* NULL: BLAS */
    dp_bn_shifted_sums_fn bn_shifted_sums;  /* never NULL */
    dp_bn_grad_sums_fn bn_grad_sums;        /* never NULL */
    /* 2-D, stride 1, no padding or dilation, rows of <= 16 floats
     * (dp_conv_is_plain_narrow) */
    dp_conv_im2col_fn conv_im2col_narrow;
    dp_conv_col2im_fn conv_col2im_narrow;
    /* small output planes (dp_conv_is_small_plane): im2col from
     * g->pad_scratch, col2im through g->small_index / small_mask */
    dp_conv_im2col_fn conv_im2col_small;
    dp_conv_col2im_fn conv_col2im_small;
} dp_cpu_kernels_t;

/* The table for the ISA chosen once per process (cpu.h). */
const dp_cpu_kernels_t *dp_cpu_kernels(void);

/* --- The kernels each ISA file exports ------------------------------------ */
extern const dp_cpu_loops_t dp_cpu_loops_generic; /* loops_generic.c (also aarch64's NEON table) */
void dp_bn_shifted_sums_generic(const float *x, size_t n, double shift, double *s1, double *s2);
void dp_bn_grad_sums_generic(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx);
#if defined(__x86_64__) || defined(__i386__)
extern const dp_cpu_loops_t dp_cpu_loops_avx512;
extern const dp_cpu_loops_t dp_cpu_loops_avx2;
bool dp_gemm_avx512(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
void dp_bn_shifted_sums_avx512(const float *x, size_t n, double shift, double *s1, double *s2);
void dp_bn_grad_sums_avx512(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx);
void dp_conv_im2col_narrow_avx512(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                                  size_t ldcol);
void dp_conv_col2im_narrow_avx512(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                                  float *restrict dx);
void dp_conv_im2col_small_avx512(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                                 size_t ldcol);
void dp_conv_col2im_small_avx512(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                                 float *restrict dx);
bool dp_gemm_avx2(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
void dp_bn_shifted_sums_avx2(const float *x, size_t n, double shift, double *s1, double *s2);
void dp_bn_grad_sums_avx2(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx);
void dp_conv_im2col_narrow_avx2(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                                size_t ldcol);
void dp_conv_col2im_narrow_avx2(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                                float *restrict dx);
void dp_conv_im2col_small_avx2(const dp_conv_geom_t *g, const float *restrict x, float *restrict col,
                               size_t ldcol);
void dp_conv_col2im_small_avx2(const dp_conv_geom_t *g, const float *restrict col, size_t ldcol,
                               float *restrict dx);
#endif
#if defined(__aarch64__)
bool dp_gemm_neon(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
void dp_bn_shifted_sums_neon(const float *x, size_t n, double shift, double *s1, double *s2);
void dp_bn_grad_sums_neon(const float *x, const float *dy, size_t n, double mean, double *s_dy, double *s_dyx);
#endif

/* --- Shared by the GEMM kernels ------------------------------------------- */

/* Per-thread packing buffers of at least DP_GEMM_PACK_A / DP_GEMM_PACK_B
 * floats (gemm.c owns them: allocated on a thread's first product, freed at
 * thread exit). false when out of memory (the caller then uses BLAS). */
#define DP_GEMM_PACK_A ((size_t)240 * 384)
#define DP_GEMM_PACK_B ((size_t)384 * 2048)
bool dp_gemm_buffers(float **packed_a, float **packed_b);

/* A block of op(A): rows [i0, i0+mc), k [k0, k0+kc) into mr-row panels,
 * each panel k-major: panel[k * mr + r], rows past mc zero. Scalar (the
 * compiler vectorizes it for the including file's ISA). */
static inline void dp_gemm_pack_a(bool trans_a, const float *A, int lda, int i0, int mc, int k0, int kc,
                                  const int mr, float *packed) {
    for (int p = 0; p < mc; p += mr) {
        int rows = mc - p < mr ? mc - p : mr;
        float *dst = packed + (size_t)p * kc;
        if (!trans_a) {
            for (int r = 0; r < rows; r++) {
                const float *src = A + (size_t)(i0 + p + r) * lda + k0;
                for (int k = 0; k < kc; k++) dst[k * mr + r] = src[k];
            }
        } else { /* op(A)[i][k] = A[k][i]: rows of A are contiguous in i */
            for (int k = 0; k < kc; k++) {
                const float *src = A + (size_t)(k0 + k) * lda + i0 + p;
                for (int r = 0; r < rows; r++) dst[k * mr + r] = src[r];
            }
        }
        for (int r = rows; r < mr; r++)
            for (int k = 0; k < kc; k++) dst[k * mr + r] = 0.0f;
    }
}

/* --- Shared by ops_conv.c and the conv kernels ---------------------------- */

/* 2-D, stride 1, dilation 1, no padding, output and input rows of at most
 * 16 floats (both of LeNet's convolutions but conv1's 26-wide rows). */
static inline int dp_conv_is_plain_narrow(const dp_conv_geom_t *g) {
    return g->in_size[0] == 1 && g->kernel[0] == 1 && g->out_size[2] <= 16 && g->in_size[2] <= 16 &&
           g->stride[1] == 1 && g->stride[2] == 1 && g->dilation[1] == 1 && g->dilation[2] == 1 &&
           g->pad[1] == 0 && g->pad[2] == 0;
}

/* A 2-D (or 1-D) conv whose output plane has at most 64 positions
 * (ResNet's 7x7 and 4x4 stages, any stride, padding and dilation). */
static inline int dp_conv_is_small_plane(const dp_conv_geom_t *g) {
    return g->in_size[0] == 1 && g->kernel[0] == 1 && g->out_plane <= 64 && g->in_plane <= 256;
}

/* The tiniest planes (L <= 16) without dilation: im2col by stride phases. */
static inline int dp_conv_is_phase_plane(const dp_conv_geom_t *g) {
    return g->out_plane <= 16 && g->dilation[1] == 1 && g->dilation[2] == 1;
}

/* Floats of scratch the phase planes of one image-group need. */
static inline size_t dp_conv_phase_plane_floats(const dp_conv_geom_t *g) {
    const int sh = g->stride[1], sw = g->stride[2];
    const int Hq = (g->in_size[1] + 2 * g->pad[1] + sh - 1) / sh, Wq = (g->in_size[2] + 2 * g->pad[2] + sw - 1) / sw;
    return (size_t)g->group_in_ch * sh * sw * Hq * Wq;
}

#endif
