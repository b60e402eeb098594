/* conv_winograd.c - the Winograd (Toom-Cook) convolution F(3x3, 5x5) of
 * the CPU backend: 2-D, one group, stride 1, dilation 1, 5x5 kernels
 * (LeNet's conv2 is what it is for), forward, data gradient and weight
 * gradient, with fewer multiplications than im2col + GEMM. Off unless
 * asked for (conv_winograd.h says why).
 *
 * F(m x m, r x r) computes an m x m block of outputs from an n x n tile of
 * input, n = m + r - 1 (here 3, 5, 7), as
 *   Y = A^T [ (G g G^T) (.) (B^T d B) ] A
 * where (.) is the element-wise product over the n x n "frequencies" xi.
 * Summed over input channels, the element-wise products of every xi are a
 * matrix product (Lavin & Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2016):
 *   U[xi] (OC, C) = the transformed weights     (once per call)
 *   V[xi] (C, T)  = the transformed input tiles (T = tiles x images)
 *   M[xi] (OC, T) = U[xi] V[xi]                 (n^2 dp_gemm calls)
 *   y = A^T M A per tile and output channel, + bias, ReLU
 * The matrices (kernels/winograd_f35.h) come from the points 0, +-1, +-2,
 * 1/2 and infinity; tools/winograd_tables.py writes them and says how.
 *
 * The data gradient is the forward's adjoint over the same tiles:
 * dx += B [ sum over oc of U[xi]^T (A dy_block A^T)[xi] ] B^T per tile, the
 * tiles' 7x7 blocks overlapping and added in tile order. The weight gradient
 * is F(5x5, 3x3) over the same tiles: dw = A'^T [sum over tiles and images
 * of (G' dy_block G'^T) (.) (B^T d B)] A', one dp_gemm per xi with the
 * long dimension inside (K = T), accumulated over chunks.
 *
 * Layouts, per chunk of nb images padded to `lanes` (a multiple of 8): the
 * images are the innermost index everywhere, so every transform works on
 * vectors of images (the kernel table's wino_* loops):
 *   XT  (C, Hp, Wp, lanes)  the chunk's input, zero-padded: XT[c][i][j] =
 *                           x[c][i - pad][j - pad]
 *   V   (n^2, C, T)   M (n^2, OC, T)   T = TH * TW * lanes, column
 *                                      (tile, image)
 * An image's output and data gradient do not depend on its chunk or lane
 * (the products' sums run over channels only). The bias gradient is summed
 * row by row as ops_conv.c does (same bits).
 */
#include "conv_winograd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/gemm.h"
#include "kernels/kernels.h"
#include "kernels/winograd_f35.h"

typedef dp_conv_geom_t conv_geom_t;

enum { LANE_STEP = 8 };

/* The one configuration: F(3x3, 5x5). Chosen for LeNet's conv2 (9x9
 * outputs: 3x3 tiles exactly); compared there with F(2x2, 5x5) and
 * F(4x4, 5x5) in a first version with generated matrices: F(4x4) had twice
 * the error on the op fixture and tiles of 12x12 outputs for 9x9 (more work
 * per output), F(2x2) twice the products per output. */
enum { M = DP_WINO_M, R = DP_WINO_R, N = DP_WINO_N, N2 = DP_WINO_N * DP_WINO_N };

/* --- the mode ---------------------------------------------------------- */

static int mode_state = -1; /* -1: not read yet */
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;

/* DPTRAIN_CONV: winograd (on), im2col or unset (off); anything else is
 * off and an error for dp_conv_winograd_check_env (a warning line when
 * nothing checked it first). */
static int env_mode(const char **value) {
    const char *e = getenv("DPTRAIN_CONV");
    if (value) *value = e;
    if (!e || !*e || strcmp(e, "im2col") == 0) return DP_WINO_OFF;
    return strcmp(e, "winograd") == 0 ? DP_WINO_ON : -1;
}

static void read_mode(void) {
    if (mode_state >= 0) return; /* set by dp_conv_winograd_set_mode first */
    const char *value;
    int mode = env_mode(&value);
    if (mode < 0)
        fprintf(stderr, "dptrain: warning: DPTRAIN_CONV must be winograd or im2col (the default), found '%s': "
                "using im2col\n", value);
    mode_state = mode < 0 ? DP_WINO_OFF : mode;
}

dp_status_t dp_conv_winograd_check_env(void) {
    const char *value;
    if (env_mode(&value) < 0)
        return dp_fail(DP_ERR_ARG, "DPTRAIN_CONV must be winograd or im2col (the default), found '%s'", value);
    return DP_OK;
}

dp_wino_mode_t dp_conv_winograd_set_mode(dp_wino_mode_t mode) {
    pthread_once(&mode_once, read_mode);
    dp_wino_mode_t old = (dp_wino_mode_t)mode_state;
    mode_state = mode;
    return old;
}

dp_wino_mode_t dp_conv_winograd_mode(void) {
    pthread_once(&mode_once, read_mode);
    return (dp_wino_mode_t)mode_state;
}

int dp_conv_winograd_applies(const conv_geom_t *g) {
    const dp_wino_mode_t mode = dp_conv_winograd_mode();
    if (mode == DP_WINO_OFF) return 0;
    const int r = g->kernel[1];
    if (g->ndim != 4 || g->groups != 1 || r != DP_WINO_R || g->kernel[2] != r) return 0;
    if (g->stride[1] != 1 || g->stride[2] != 1 || g->dilation[1] != 1 || g->dilation[2] != 1) return 0;
    if (g->pad[1] >= r || g->pad[2] >= r) return 0;
    if (mode == DP_WINO_ALL) return 1;
    /* measured faster: enough channels on both sides (LeNet's conv1, one
     * input channel, keeps im2col) */
    return g->in_ch >= 8 && g->out_ch >= 8;
}

/* --- the passes -------------------------------------------------------- */

/* The tiles of an output plane and the padded input plane they read. */
typedef struct {
    int th, tw;   /* tiles down and across */
    int hp, wp;   /* the padded input plane: th * m + r - 1, tw * m + r - 1 */
} tiling_t;

static tiling_t tiling(int out_h, int out_w) {
    tiling_t t;
    t.th = (out_h + M - 1) / M;
    t.tw = (out_w + M - 1) / M;
    t.hp = t.th * M + R - 1;
    t.wp = t.tw * M + R - 1;
    return t;
}

/* Images per chunk: about 1 MiB of XT, V and M per chunk, a multiple of
 * LANE_STEP, at least one step, no more than the batch (rounded up). */
static int chunk_lanes(size_t floats_per_image, int batch) {
    size_t n = ((size_t)1 << 20) / (floats_per_image * sizeof(float));
    n = n / LANE_STEP * LANE_STEP;
    if (n < LANE_STEP) n = LANE_STEP;
    size_t most = ((size_t)batch + LANE_STEP - 1) / LANE_STEP * LANE_STEP;
    return (int)(n < most ? n : most);
}

/* XT (C, hp, wp, lanes) = the chunk's images [n0, n0 + nb) of src
 * (N, C, H, W), placed at (top, left), zero elsewhere. */
static void gather(const float *src, int C, int H, int W, int n0, int nb, int top, int left, const tiling_t *t,
                   int lanes, float *xt) {
    memset(xt, 0, (size_t)C * t->hp * t->wp * lanes * sizeof(float));
    for (int q = 0; q < nb; q++)
        for (int c = 0; c < C; c++) {
            const float *s = src + ((size_t)(n0 + q) * C + c) * H * W;
            for (int i = 0; i < H; i++) {
                float *d = xt + (((size_t)c * t->hp + i + top) * t->wp + left) * lanes + q;
                for (int j = 0; j < W; j++) d[(size_t)j * lanes] = s[(size_t)i * W + j];
            }
        }
}

/* V (n^2, C, T) = B^T d B for every tile of XT (C, hp, wp, lanes). */
static void input_transform(const float *xt, int C, const tiling_t *t, int lanes, float *v) {
    const dp_cpu_loops_t *k = dp_cpu_kernels()->loops;
    const size_t T = (size_t)t->th * t->tw * lanes, xi = (size_t)C * T;
    for (int ch = 0; ch < C; ch++)
        for (int a = 0; a < t->th; a++)
            for (int b = 0; b < t->tw; b++)
                k->wino_input(xt + (((size_t)ch * t->hp + (size_t)a * M) * t->wp + (size_t)b * M) * lanes,
                              (size_t)t->wp * lanes, (size_t)lanes,
                              v + (size_t)ch * T + ((size_t)a * t->tw + b) * lanes, N * xi, xi, (size_t)lanes);
}

/* U (n^2, OC, C) = G g G^T of the kernels g = w[oc][c] (w (OC, C, r, r)).
 * buf: r * r * C floats. */
static void weight_transform(const float *w, int OC, int C, float *buf, float *u) {
    const dp_cpu_loops_t *k = dp_cpu_kernels()->loops;
    const size_t xi = (size_t)OC * C;
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < C; i++) /* buf[kh][kw][i] */
            for (int kk = 0; kk < R * R; kk++) buf[(size_t)kk * C + i] = w[((size_t)o * C + i) * R * R + kk];
        k->wino_sandwich(dp_wino_g, N, R, buf, (size_t)R * C, (size_t)C, u + (size_t)o * C, N * xi, xi, (size_t)C);
    }
}

/* M (n^2, OUT, T) = U V; then out (N, OUT, OH, OW) = A^T M A of every
 * tile + bias, ReLU when relu is set. */
static void multiply_and_output(const float *u, const float *v, float *mbuf, int IN, int OUT,
                                const tiling_t *t, int lanes, int n0, int nb, float *out, int OH, int OW,
                                const float *bias, int relu) {
    const dp_cpu_loops_t *k = dp_cpu_kernels()->loops;
    const size_t T = (size_t)t->th * t->tw * lanes;
    for (int x = 0; x < N2; x++)
        dp_gemm(false, false, OUT, (int)T, IN, 1.0f, u + (size_t)x * OUT * IN, IN, v + (size_t)x * IN * T, (int)T,
                0.0f, mbuf + (size_t)x * OUT * T, (int)T);
    float tile[DP_WINO_M * DP_WINO_M * 64];
    const size_t xi = (size_t)OUT * T, plane = (size_t)OH * OW;
    for (int o = 0; o < OUT; o++) {
        const float b = bias ? bias[o] : 0.0f;
        for (int a = 0; a < t->th; a++)
            for (int bb = 0; bb < t->tw; bb++)
                for (int q0 = 0; q0 < lanes; q0 += 64) {
                    const int nq = lanes - q0 < 64 ? lanes - q0 : 64;
                    k->wino_output(mbuf + (size_t)o * T + ((size_t)a * t->tw + bb) * lanes + q0,
                                     N * xi, xi, tile, (size_t)M * nq, (size_t)nq, (size_t)nq);
                    for (int i = 0; i < M && a * M + i < OH; i++)
                        for (int j = 0; j < M && bb * M + j < OW; j++) {
                            const float *s = tile + ((size_t)i * M + j) * nq;
                            float *d = out + ((size_t)(n0 + q0) * OUT + o) * plane + (size_t)(a * M + i) * OW +
                                       (size_t)(bb * M + j);
                            const int qn = nb - q0 < nq ? nb - q0 : nq;
                            for (int q = 0; q < qn; q++, d += (size_t)OUT * plane) {
                                float y = s[q] + b; /* as the relu op */
                                *d = relu && y < 0.0f ? 0.0f : y;
                            }
                        }
                }
    }
}

dp_status_t dp_conv_winograd_forward(const conv_geom_t *g, const float *x, const float *w, const float *bias,
                                     int relu, float *y, dp_arena_t *arena) {
    const int C = g->in_ch, OC = g->out_ch;
    const int H = g->in_size[1], W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const tiling_t t = tiling(OH, OW);
    const size_t tiles = (size_t)t.th * t.tw;
    const int lanes = chunk_lanes((size_t)C * t.hp * t.wp + (size_t)N2 * (C + OC) * tiles, g->batch);
    const size_t T = tiles * lanes;
    float *u = dp_arena_floats(arena, (size_t)N2 * OC * C);
    float *buf = dp_arena_floats(arena, (size_t)R * R * (C > OC ? C : OC));
    float *xt = dp_arena_floats(arena, (size_t)C * t.hp * t.wp * lanes);
    float *v = dp_arena_floats(arena, (size_t)N2 * C * T);
    float *mbuf = dp_arena_floats(arena, (size_t)N2 * OC * T);
    if (!u || !buf || !xt || !v || !mbuf)
        return dp_fail(DP_ERR_NOMEM, "conv (winograd): out of arena memory for %zu floats of transforms",
                       (size_t)N2 * (OC * C + (C + OC) * T) + (size_t)C * t.hp * t.wp * lanes);
    weight_transform(w, OC, C, buf, u);
    for (int n0 = 0; n0 < g->batch; n0 += lanes) {
        const int nb = g->batch - n0 < lanes ? g->batch - n0 : lanes;
        gather(x, C, H, W, n0, nb, g->pad[1], g->pad[2], &t, lanes, xt);
        input_transform(xt, C, &t, lanes, v);
        multiply_and_output(u, v, mbuf, C, OC, &t, lanes, n0, nb, y, OH, OW, bias, relu);
    }
    return DP_OK;
}

dp_status_t dp_conv_winograd_backward(const conv_geom_t *g, const float *x, const float *w, const float *y,
                                      const float *dy, int relu, float *dx, float *dw, double *bias_sum,
                                      dp_arena_t *arena) {
    const dp_cpu_loops_t *k = dp_cpu_kernels()->loops;
    const int C = g->in_ch, OC = g->out_ch;
    const int H = g->in_size[1], W = g->in_size[2], OH = g->out_size[1], OW = g->out_size[2];
    const int ph = g->pad[1], pw = g->pad[2];
    const size_t L = (size_t)OH * OW;
    const tiling_t t = tiling(OH, OW); /* the forward's tiles */
    const size_t tiles = (size_t)t.th * t.tw, bh = (size_t)t.th * M, bw = (size_t)t.tw * M;
    size_t per_image = (size_t)OC * bh * bw + (size_t)N2 * (C + OC) * tiles + (size_t)C * t.hp * t.wp;
    const int lanes = chunk_lanes(per_image, g->batch);
    const size_t T = tiles * lanes, xi_y = (size_t)OC * T, xi_x = (size_t)C * T;
    float *dyt = dp_arena_floats(arena, (size_t)OC * bh * bw * lanes); /* (OC, bh, bw, lanes) */
    float *row = dp_arena_floats(arena, L);
    float *vy = dp_arena_floats(arena, (size_t)N2 * xi_y);      /* (n^2, OC, T) */
    float *vx = dp_arena_floats(arena, (size_t)N2 * xi_x);      /* (n^2, C, T) */
    float *xt = dp_arena_floats(arena, (size_t)C * t.hp * t.wp * lanes); /* (C, hp, wp, lanes) */
    float *u = dx ? dp_arena_floats(arena, (size_t)N2 * OC * C) : NULL;
    float *buf = dx ? dp_arena_floats(arena, (size_t)R * R * C) : NULL;
    float *dwh = dw ? dp_arena_floats(arena, (size_t)N2 * OC * C) : NULL;
    float *dwk = dw ? dp_arena_floats(arena, (size_t)R * R * OC * C) : NULL;
    if (!dyt || !row || !vy || !vx || !xt || (dx && (!u || !buf)) || (dw && (!dwh || !dwk)))
        return dp_fail(DP_ERR_NOMEM, "conv backward (winograd): out of arena memory for %zu floats a chunk",
                       per_image * lanes);
    if (dx) weight_transform(w, OC, C, buf, u);
    if (dwh) memset(dwh, 0, (size_t)N2 * OC * C * sizeof(float));
    float tile[DP_WINO_N * DP_WINO_N * 8];
    for (int n0 = 0; n0 < g->batch; n0 += lanes) {
        const int nb = g->batch - n0 < lanes ? g->batch - n0 : lanes;
        /* dyt: dy masked by the ReLU, zero past the output; the bias sums
         * row by row as ops_conv.c's prepare_dy_chunk */
        memset(dyt, 0, (size_t)OC * bh * bw * lanes * sizeof(float));
        for (int q = 0; q < nb; q++)
            for (int oc = 0; oc < OC; oc++) {
                const size_t at = ((size_t)(n0 + q) * OC + oc) * L;
                if (relu)
                    k->relu_mask_copy(row, dy + at, y + at, L);
                else
                    memcpy(row, dy + at, L * sizeof(float));
                if (bias_sum) bias_sum[oc] += k->row_sum(row, L);
                for (int i = 0; i < OH; i++) {
                    float *d = dyt + (((size_t)oc * bh + i) * bw) * lanes + q;
                    for (int j = 0; j < OW; j++) d[(size_t)j * lanes] = row[(size_t)i * OW + j];
                }
            }
        if (dx) {
            /* the forward's adjoint: vy = A dy A^T per block, vx[xi] = U[xi]^T vy[xi],
             * then B vx B^T per tile added into xt at the tile, xt into dx */
            for (int oc = 0; oc < OC; oc++)
                for (int a = 0; a < t.th; a++)
                    for (int b = 0; b < t.tw; b++)
                        k->wino_dy_adjoint(dyt + (((size_t)oc * bh + (size_t)a * M) * bw + (size_t)b * M) * lanes,
                                           bw * lanes, (size_t)lanes,
                                           vy + (size_t)oc * T + ((size_t)a * t.tw + b) * lanes, N * xi_y, xi_y,
                                           (size_t)lanes);
            for (int x2 = 0; x2 < N2; x2++)
                dp_gemm(true, false, C, (int)T, OC, 1.0f, u + (size_t)x2 * OC * C, C, vy + (size_t)x2 * xi_y, (int)T,
                        0.0f, vx + (size_t)x2 * xi_x, (int)T);
            memset(xt, 0, (size_t)C * t.hp * t.wp * lanes * sizeof(float));
            for (int ch = 0; ch < C; ch++)
                for (int a = 0; a < t.th; a++)
                    for (int b = 0; b < t.tw; b++)
                        for (int q0 = 0; q0 < lanes; q0 += 8) {
                            k->wino_input_adjoint(vx + (size_t)ch * T + ((size_t)a * t.tw + b) * lanes + q0,
                                                  N * xi_x, xi_x, tile, (size_t)N * 8, 8, 8);
                            for (int i = 0; i < N; i++) {
                                float *d = xt + (((size_t)ch * t.hp + (size_t)a * M + i) * t.wp + (size_t)b * M) *
                                                    lanes + q0;
                                const float *s = tile + (size_t)i * N * 8;
                                for (int j = 0; j < N; j++)
                                    for (int q = 0; q < 8; q++) d[(size_t)j * lanes + q] += s[j * 8 + q];
                            }
                        }
            for (int q = 0; q < nb; q++)
                for (int ch = 0; ch < C; ch++) {
                    float *d = dx + ((size_t)(n0 + q) * C + ch) * H * W;
                    for (int i = 0; i < H; i++) {
                        const float *s = xt + (((size_t)ch * t.hp + i + ph) * t.wp + pw) * lanes + q;
                        for (int j = 0; j < W; j++) d[(size_t)i * W + j] += s[(size_t)j * lanes];
                    }
                }
        }
        if (dw) { /* dwh[xi] += (G' dy G'^T)[xi] (B^T x B)[xi]^T over the chunk's tiles */
            gather(x, C, H, W, n0, nb, ph, pw, &t, lanes, xt);
            input_transform(xt, C, &t, lanes, vx);
            for (int oc = 0; oc < OC; oc++)
                for (int a = 0; a < t.th; a++)
                    for (int b = 0; b < t.tw; b++)
                        k->wino_dy(dyt + (((size_t)oc * bh + (size_t)a * M) * bw + (size_t)b * M) * lanes,
                                   bw * lanes, (size_t)lanes, vy + (size_t)oc * T + ((size_t)a * t.tw + b) * lanes,
                                   N * xi_y, xi_y, (size_t)lanes);
            for (int x2 = 0; x2 < N2; x2++)
                dp_gemm(false, true, OC, C, (int)T, 1.0f, vy + (size_t)x2 * xi_y, (int)T, vx + (size_t)x2 * xi_x,
                        (int)T, 1.0f, dwh + (size_t)x2 * OC * C, C);
        }
    }
    if (dw) { /* dw[oc][c] += A'^T dwh A' */
        const size_t xi = (size_t)OC * C;
        k->wino_sandwich(dp_wino_atw, R, N, dwh, N * xi, xi, dwk, (size_t)R * xi, xi, xi);
        for (int oc = 0; oc < OC; oc++)
            for (int ch = 0; ch < C; ch++)
                for (int kk = 0; kk < R * R; kk++)
                    dw[((size_t)oc * C + ch) * R * R + kk] += dwk[(size_t)kk * xi + (size_t)oc * C + ch];
    }
    return DP_OK;
}
