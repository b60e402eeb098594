/* test_cpu_loops.c - the per-ISA copies of the ops' plain-C loops
 * (src/backend/cpu/kernels/loops_impl.h): every copy this CPU can run
 * (avx512, avx2, generic on x86-64; generic on aarch64) gives the same bits
 * as a scalar reference written here (a NaN may be any NaN), for lengths 0-70 at unaligned
 * offsets, with -0, NaN, infinities, values near the ReLU threshold and
 * exactly 6 (ReLU6's); batch norm's output loop with each fused activation;
 * the 2x2 average pool for odd and even planes, overwriting and adding;
 * the Winograd transforms (any matrix and the fixed F(3x3, 5x5) ones);
 * the depthwise convolution's grid loops;
 * and the table in use is the copy of the ISA in use (DPTRAIN_ISA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cpu/kernels/winograd_f35.h"
#include "cpu_loop_copies.h"
#include "testing.h"

enum { MAXN = 4096 };

static uint32_t state = 12345u;
static float next_value(void) {
    state = state * 1664525u + 1013904223u;
    uint32_t r = state >> 8;
    switch (r % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return NAN;
    case 3: return (r & 256) ? INFINITY : -INFINITY;
    case 4: return 1e-40f * (float)(r % 7); /* subnormal */
    case 5: return 6.0f;                    /* ReLU6's upper kink */
    default: return ((float)(r % 20001) - 10000.0f) / 1000.0f;
    }
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = next_value();
}

/* Bit for bit, except that any NaN equals any NaN: which of two NaN
 * operands an add passes on (and so the sign of the result, e.g. a NaN
 * input plus inf - inf) depends on the order the compiler gives the
 * operands of a commutative add. */
static int same_value(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }
static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!same_value(a[i], b[i])) return 0;
    return 1;
}

/* The references: the loops' meaning in the plainest C. */
static void ref_add_scalar_relu(float *dst, const float *src, size_t n, float b) {
    for (size_t l = 0; l < n; l++) {
        float v = src[l] + b;
        dst[l] = v < 0.0f ? 0.0f : v;
    }
}
static void ref_add_scalar(float *dst, const float *src, size_t n, float b) {
    for (size_t l = 0; l < n; l++) dst[l] = src[l] + b;
}
static void ref_relu_mask(float *dy, const float *y, size_t n) {
    for (size_t l = 0; l < n; l++)
        if (!(y[l] > 0.0f)) dy[l] = 0.0f;
}
static void ref_relu6_mask(float *dy, const float *y, size_t n) {
    for (size_t l = 0; l < n; l++)
        if (!(y[l] > 0.0f && y[l] < 6.0f)) dy[l] = 0.0f;
}
static void ref_batch_norm_apply(float *dst, const float *src, size_t n, float mean, float scale, float shift,
                                 int fuse) {
    for (size_t l = 0; l < n; l++) {
        float d = src[l] - mean;
        float v = d * scale;
        v = v + shift;
        if (fuse >= 1 && v < 0.0f) v = 0.0f;
        if (fuse == 2 && v > 6.0f) v = 6.0f;
        dst[l] = v;
    }
}
static double ref_row_sum(const float *x, size_t n) {
    float lanes[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lanes[j] += x[i + j];
    double sum = 0.0;
    for (int j = 0; j < 8; j++) sum += lanes[j];
    for (; i < n; i++) sum += x[i];
    return sum;
}

static void check_elementwise(const char *isa, const dp_cpu_loops_t *t) {
    static float src[MAXN + 16], dst[MAXN + 16], want[MAXN + 16], y[MAXN + 16];
    int bad_relu = 0, bad_relu_in = 0, bad_add = 0, bad_add_in = 0, bad_mask = 0, bad_sum = 0, bad_acc = 0;
    int bad_mask6 = 0, bad_bn[3] = {0, 0, 0};
    const float biases[] = {0.0f, -0.0f, 0.5f, -1.25f, 3e-3f};
    for (size_t n = 0; n <= 70; n++)
        for (size_t off = 0; off < 3; off++)
            for (size_t bi = 0; bi < sizeof biases / sizeof biases[0]; bi++) {
                float b = biases[bi];
                fill(src + off, n);
                ref_add_scalar_relu(want + off, src + off, n, b);
                t->add_scalar_relu(dst + off, src + off, n, b);
                bad_relu += !same_bits(dst + off, want + off, n);
                memcpy(dst + off, src + off, n * sizeof(float));
                t->add_scalar_relu_inplace(dst + off, n, b);
                bad_relu_in += !same_bits(dst + off, want + off, n);
                ref_add_scalar(want + off, src + off, n, b);
                t->add_scalar(dst + off, src + off, n, b);
                bad_add += !same_bits(dst + off, want + off, n);
                memcpy(dst + off, src + off, n * sizeof(float));
                t->add_scalar_inplace(dst + off, n, b);
                bad_add_in += !same_bits(dst + off, want + off, n);
                fill(y + off, n);
                memcpy(dst + off, src + off, n * sizeof(float));
                t->add_inplace(dst + off, y + off, n);
                for (size_t i = 0; i < n; i++) want[off + i] = src[off + i] + y[off + i];
                bad_acc += !same_bits(dst + off, want + off, n);
                memcpy(want + off, src + off, n * sizeof(float));
                ref_relu_mask(want + off, y + off, n);
                memcpy(dst + off, src + off, n * sizeof(float));
                t->relu_mask(dst + off, y + off, n);
                bad_mask += !same_bits(dst + off, want + off, n);
                fill(dst + off, n);
                t->relu_mask_copy(dst + off, src + off, y + off, n);
                bad_mask += !same_bits(dst + off, want + off, n);
                memcpy(want + off, src + off, n * sizeof(float));
                ref_relu6_mask(want + off, y + off, n);
                memcpy(dst + off, src + off, n * sizeof(float));
                t->relu6_mask(dst + off, y + off, n);
                bad_mask6 += !same_bits(dst + off, want + off, n);
                for (int fuse = 0; fuse <= 2; fuse++) { /* bias -0: mean 0, scale 1 keep src's 0 and 6 */
                    float mean = bi % 2 ? 0.0f : 0.375f * b, scale = bi % 2 ? 1.0f : 1.5f + b;
                    ref_batch_norm_apply(want + off, src + off, n, mean, scale, b, fuse);
                    t->batch_norm_apply(dst + off, src + off, n, mean, scale, b, fuse);
                    bad_bn[fuse] += !same_bits(dst + off, want + off, n);
                }
                /* sums of finite values (a NaN or inf would hide the order) */
                for (size_t i = 0; i < n; i++)
                    if (!isfinite(src[off + i])) src[off + i] = 0.125f * (float)i;
                double got = t->row_sum(src + off, n), ref = ref_row_sum(src + off, n);
                bad_sum += memcmp(&got, &ref, sizeof got) != 0;
            }
    /* a long row: the lanes' order of additions matters at this length */
    for (size_t i = 0; i < MAXN; i++) src[i] = (float)(i % 97) * 0.37f - 17.0f;
    double got = t->row_sum(src + 1, MAXN - 1), ref = ref_row_sum(src + 1, MAXN - 1);
    CHECK(memcmp(&got, &ref, sizeof got) == 0, "%s: row_sum of %d floats %.17g, reference %.17g", isa, MAXN - 1,
          got, ref);
    CHECK(bad_relu == 0, "%s: add_scalar_relu differs from the reference in %d cases", isa, bad_relu);
    CHECK(bad_relu_in == 0, "%s: add_scalar_relu_inplace differs in %d cases", isa, bad_relu_in);
    CHECK(bad_add == 0, "%s: add_scalar differs in %d cases", isa, bad_add);
    CHECK(bad_add_in == 0, "%s: add_scalar_inplace differs in %d cases", isa, bad_add_in);
    CHECK(bad_acc == 0, "%s: add_inplace differs in %d cases", isa, bad_acc);
    CHECK(bad_mask == 0, "%s: relu_mask or relu_mask_copy differs in %d cases", isa, bad_mask);
    CHECK(bad_mask6 == 0, "%s: relu6_mask differs in %d cases", isa, bad_mask6);
    for (int fuse = 0; fuse <= 2; fuse++)
        CHECK(bad_bn[fuse] == 0, "%s: batch_norm_apply (fuse %d) differs in %d cases", isa, fuse, bad_bn[fuse]);
    CHECK(bad_sum == 0, "%s: row_sum differs in %d cases", isa, bad_sum);
}

static void check_pool(const char *isa, const dp_cpu_loops_t *t) {
    const int sizes[][2] = {{2, 2}, {3, 5}, {26, 26}, {9, 9}, {13, 13}, {4, 34}, {28, 28}, {7, 40}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int H = sizes[s][0], W = sizes[s][1], OH = H / 2, OW = W / 2;
        const size_t planes = 5, in_plane = (size_t)H * W, out_plane = (size_t)OH * OW;
        float *x = malloc(planes * in_plane * sizeof(float)), *y = malloc(planes * out_plane * sizeof(float));
        float *want = malloc(planes * in_plane * sizeof(float)), *dx = malloc(planes * in_plane * sizeof(float));
        if (!x || !y || !want || !dx) {
            CHECK(0, "out of memory");
            free(x), free(y), free(want), free(dx);
            return;
        }
        fill(x, planes * in_plane);
        t->avg_pool_2x2_forward(x, y, planes, W, OH, OW, in_plane, out_plane);
        int bad = 0;
        for (size_t p = 0; p < planes; p++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    const float *r0 = x + p * in_plane + (size_t)(2 * oh) * W + 2 * ow, *r1 = r0 + W;
                    float v = ((r0[0] + r1[0]) + (r0[1] + r1[1])) * 0.25f;
                    bad += !same_value(v, y[p * out_plane + (size_t)oh * OW + ow]);
                }
        CHECK(bad == 0, "%s: avg_pool_2x2_forward %dx%d: %d outputs differ", isa, H, W, bad);
        /* backward, adding into dx and overwriting it: rows and columns
         * past the last window (odd H, W) keep what dx had */
        fill(y, planes * out_plane);
        for (int overwrite = 0; overwrite < 2; overwrite++) {
            fill(dx, planes * in_plane);
            memcpy(want, dx, planes * in_plane * sizeof(float));
            for (size_t p = 0; p < planes; p++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++) {
                        float v = y[p * out_plane + (size_t)oh * OW + ow] * 0.25f;
                        for (int a = 0; a < 2; a++)
                            for (int b = 0; b < 2; b++) {
                                float *w = want + p * in_plane + (size_t)(2 * oh + a) * W + 2 * ow + b;
                                *w = overwrite ? v : *w + v;
                            }
                    }
            t->avg_pool_2x2_backward(y, dx, planes, W, OH, OW, in_plane, out_plane, overwrite);
            CHECK(same_bits(dx, want, planes * in_plane), "%s: avg_pool_2x2_backward %dx%d overwrite %d differs",
                  isa, H, W, overwrite);
        }
        free(x), free(y), free(want), free(dx);
    }
}

/* The Winograd transforms (wino_sandwich with any matrix, and the fixed
 * F(3x3, 5x5) ones): the same bits as a scalar reference with the same
 * order of sums, on strided tiles, for 8-lane blocks and a tail. */
static void ref_sandwich(const float *mat, int a, int b, const float *src, size_t src_rs, size_t src_cs, float *dst,
                         size_t dst_rs, size_t dst_cs, size_t lanes) {
    for (size_t q = 0; q < lanes; q++) {
        float t[64];
        for (int i = 0; i < a; i++)
            for (int l = 0; l < b; l++) {
                float acc = 0.0f;
                for (int k = 0; k < b; k++)
                    if (mat[i * b + k] != 0.0f) acc += mat[i * b + k] * src[k * src_rs + l * src_cs + q];
                t[i * b + l] = acc;
            }
        for (int i = 0; i < a; i++)
            for (int j = 0; j < a; j++) {
                float acc = 0.0f;
                for (int l = 0; l < b; l++)
                    if (mat[j * b + l] != 0.0f) acc += mat[j * b + l] * t[i * b + l];
                dst[i * dst_rs + j * dst_cs + q] = acc;
            }
    }
}

static void check_winograd(const char *isa, const dp_cpu_loops_t *t) {
    const struct {
        const char *name;
        dp_wino_fn fn;
        const float *mat;
        int a, b;
    } fixed[] = {
        {"wino_input", t->wino_input, dp_wino_bt, DP_WINO_N, DP_WINO_N},
        {"wino_output", t->wino_output, dp_wino_at, DP_WINO_M, DP_WINO_N},
        {"wino_dy", t->wino_dy, dp_wino_gw, DP_WINO_N, DP_WINO_M},
        {"wino_dy_adjoint", t->wino_dy_adjoint, dp_wino_a, DP_WINO_N, DP_WINO_M},
        {"wino_input_adjoint", t->wino_input_adjoint, dp_wino_b, DP_WINO_N, DP_WINO_N},
        {"wino_sandwich (G)", NULL, dp_wino_g, DP_WINO_N, DP_WINO_R},
        {"wino_sandwich (A'^T)", NULL, dp_wino_atw, DP_WINO_R, DP_WINO_N},
    };
    enum { LANES = 19, RS = 8 * 23, CS = 23 }; /* src/dst [k][l][q] at k * RS + l * CS + q */
    float *src = malloc(8 * RS * sizeof(float)), *got = malloc(8 * RS * sizeof(float));
    float *want = malloc(8 * RS * sizeof(float));
    for (size_t i = 0; i < 8 * RS; i++) src[i] = ((float)((i * 7919) % 2001) - 1000.0f) / 137.0f;
    for (size_t f = 0; f < sizeof fixed / sizeof fixed[0]; f++)
        for (size_t lanes = 1; lanes <= LANES; lanes += 9) { /* 1, 10 (8 + 2), 19 (16 + 3) */
            memset(got, 0, 8 * RS * sizeof(float));
            memset(want, 0, 8 * RS * sizeof(float));
            if (fixed[f].fn)
                fixed[f].fn(src, RS, CS, got, RS, CS, lanes);
            else
                t->wino_sandwich(fixed[f].mat, fixed[f].a, fixed[f].b, src, RS, CS, got, RS, CS, lanes);
            ref_sandwich(fixed[f].mat, fixed[f].a, fixed[f].b, src, RS, CS, want, RS, CS, lanes);
            CHECK(same_bits(got, want, 8 * RS), "%s: %s over %zu lanes differs from the reference", isa,
                  fixed[f].name, lanes);
        }
    free(src), free(got), free(want);
}

/* The depthwise grid loops against scalar references of their meaning
 * (loops_impl.h): forward with and without relu, the input gradient's
 * accumulation, the weight gradient's 16 lanes flushed to double every 256
 * floats; grids of 16 to 640 floats, taps at unaligned offsets. */
static void check_depthwise(const char *isa, const dp_cpu_loops_t *t) {
    enum { TAPS = 4, MAXG = 640, SPAN = MAXG + 200 };
    static float phases[SPAN], w[TAPS], y[MAXG], want[MAXG], dy[MAXG], dph[SPAN], dph_want[SPAN];
    const size_t tap_at[TAPS] = {0, 1, 51, 197};
    int bad_fwd = 0, bad_dx = 0, bad_dw = 0;
    for (size_t n = 16; n <= MAXG; n += 16)
        for (int relu = 0; relu < 2; relu++) {
            for (int i = 0; i < SPAN; i++) phases[i] = (float)((i * 37) % 101) * 0.03f - 1.5f;
            for (int k = 0; k < TAPS; k++) w[k] = 0.25f * (float)(k + 1) - 0.6f;
            for (size_t i = 0; i < n; i++) dy[i] = (float)((i * 53) % 89) * 0.02f - 0.9f;
            const float bias = 0.1f * (float)relu - 0.05f;
            t->dw_conv_grid(phases, tap_at, TAPS, n, w, bias, relu, y);
            for (size_t i = 0; i < n; i++) {
                float v = bias;
                for (int k = 0; k < TAPS; k++) v += w[k] * phases[tap_at[k] + i];
                want[i] = relu && v < 0.0f ? 0.0f : v;
            }
            bad_fwd += !same_bits(y, want, n);
            for (int i = 0; i < SPAN; i++) dph[i] = dph_want[i] = 0.01f * (float)(i % 13);
            t->dw_conv_grid_dx(dph, tap_at, TAPS, n, w, dy);
            for (int k = 0; k < TAPS; k++)
                for (size_t i = 0; i < n; i++) dph_want[tap_at[k] + i] += w[k] * dy[i];
            bad_dx += !same_bits(dph, dph_want, SPAN);
            double dw[TAPS] = {0.5, 0, 0, 0}, dw_want[TAPS] = {0.5, 0, 0, 0};
            t->dw_conv_grid_dw(phases, tap_at, TAPS, n, dy, dw);
            for (int k = 0; k < TAPS; k++) {
                double sum = 0.0;
                for (size_t i0 = 0; i0 < n; i0 += 256) {
                    float lanes[16] = {0};
                    for (size_t i = i0; i < n && i < i0 + 256; i++) lanes[i % 16] += dy[i] * phases[tap_at[k] + i];
                    for (int j = 0; j < 16; j++) sum += lanes[j];
                }
                dw_want[k] += sum;
            }
            bad_dw += memcmp(dw, dw_want, sizeof dw) != 0;
        }
    CHECK(bad_fwd == 0, "%s: dw_conv_grid differs from the reference in %d cases", isa, bad_fwd);
    CHECK(bad_dx == 0, "%s: dw_conv_grid_dx differs in %d cases", isa, bad_dx);
    CHECK(bad_dw == 0, "%s: dw_conv_grid_dw differs in %d cases", isa, bad_dw);
}

int main(void) {
    CHECK(dp_cpu_init() == DP_OK, "dp_cpu_init: %s", dp_error_message());
    const dp_cpu_loops_t *in_use = dp_cpu_kernels()->loops;
    CHECK(in_use != NULL, "no loops in the kernel table");
    const cpu_loop_copy_t *copies = cpu_loop_copies;
    int tested = 0;
    for (size_t i = 0; i < CPU_LOOP_COPIES; i++) {
        if (copies[i].isa > dp_cpu_best_isa()) {
            printf("%s: not on this CPU, skipped\n", copies[i].name);
            continue;
        }
        check_elementwise(copies[i].name, copies[i].loops);
        check_pool(copies[i].name, copies[i].loops);
        check_winograd(copies[i].name, copies[i].loops);
        check_depthwise(copies[i].name, copies[i].loops);
        tested++;
        if (dp_cpu_isa() == copies[i].isa)
            CHECK(in_use == copies[i].loops, "isa %s in use, but its table has another ISA's loops",
                  copies[i].name);
        printf("%s: checked\n", copies[i].name);
    }
#if defined(__aarch64__)
    CHECK(in_use == &dp_cpu_loops_generic, "aarch64: the loops are the baseline (NEON) copy");
#endif
    CHECK(tested >= 1, "no copy tested");
    return testing_finish("test_cpu_loops");
}
