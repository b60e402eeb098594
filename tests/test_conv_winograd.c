/* test_conv_winograd.c - the Winograd convolution F(3x3, 5x5) of the CPU
 * backend (src/backend/cpu/conv_winograd.c), through the op table:
 *  - forward, data, weight and bias gradients of 5x5 convolutions (LeNet's
 *    conv2, non-square planes, pads 0 to 4, batches over several chunks,
 *    with and without bias and fused ReLU) against direct sums in double,
 *    within a bound relative to the largest reference value; the im2col
 *    path's error on the same case is printed beside it;
 *  - the bias gradient has the im2col path's bits (same row sums);
 *  - routing: off by default; when on (--winograd) LeNet's conv2 goes to
 *    Winograd (its output equals the forced Winograd path's bits and
 *    differs from im2col's), a one-input-channel 5x5 conv and a 3x3 conv
 *    stay on im2col;
 *  - an image's forward and data gradient have the same bits whatever
 *    batch, chunk or lane it is in;
 *  - the transform tables satisfy the 1-D identities they come from.
 * DPTRAIN_ISA runs it per ISA (isa_run.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cpu/conv_winograd.h" /* library-internal */
#include "../src/backend/cpu/kernels/winograd_f35.h"
#include "dptrain/ops.h"
#include "dptrain/rng.h"
#include "testing.h"

typedef struct {
    int n, c, oc, h, w, k, pad, relu, bias;
} shape_t;

typedef struct {
    float *y, *dx, *dw, *db;
} result_t;

static float *random_floats(dp_rng_t *rng, size_t n, float scale) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * (float)dp_rng_uniform(rng) - 1.0f);
    return p;
}

static size_t out_size(const shape_t *s) { return (size_t)(s->h + 2 * s->pad - s->k + 1); }
static size_t out_w(const shape_t *s) { return (size_t)(s->w + 2 * s->pad - s->k + 1); }

/* Forward and backward of the conv under `mode`; the grads start at 0 and
 * are returned (the caller frees). */
static result_t run(const shape_t *s, const float *xd, const float *wd, const float *bd, const float *dy,
                    dp_wino_mode_t mode) {
    const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * s->k * s->k;
    const size_t ny = (size_t)s->n * s->oc * out_size(s) * out_w(s);
    dp_conv_winograd_set_mode(mode);
    dp_tensor_t x = {0}, w = {0}, b = {0};
    dp_tensor_set_shape(&x, 4, (const int[]){s->n, s->c, s->h, s->w});
    dp_tensor_set_shape(&w, 4, (const int[]){s->oc, s->c, s->k, s->k});
    dp_tensor_set_shape(&b, 1, (const int[]){s->oc});
    x.data = (float *)xd;
    w.data = (float *)wd;
    b.data = (float *)bd;
    x.grad = calloc(nx, sizeof(float));
    w.grad = calloc(nw, sizeof(float));
    b.grad = calloc((size_t)s->oc, sizeof(float));
    dp_node_t node = {.kind = DP_OP_CONV, .attr = dp_op_attr_default(), .in = {&x, &w, s->bias ? &b : NULL}};
    node.attr.pad[0] = node.attr.pad[1] = s->pad;
    node.attr.fuse_relu = s->relu;
    dp_arena_t *arena = dp_arena_new(1 << 20);
    result_t r = {0};
    dp_status_t st = dp_op_forward(&node, arena);
    CHECK(st == DP_OK, "conv forward (mode %d): %s", mode, dp_error_message());
    if (st == DP_OK) {
        r.y = malloc(ny * sizeof(float));
        memcpy(r.y, node.out.data, ny * sizeof(float));
        dp_grad_prepare(&node.out);
        memcpy(node.out.grad, dy, ny * sizeof(float));
        st = dp_op_backward(&node, arena);
        CHECK(st == DP_OK, "conv backward (mode %d): %s", mode, dp_error_message());
    }
    r.dx = x.grad;
    r.dw = w.grad;
    r.db = b.grad;
    dp_arena_free(arena);
    dp_conv_winograd_set_mode(DP_WINO_OFF);
    return r;
}

static void release(result_t *r) {
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

/* max |got - want| / max(|want|, 1e-30) scale */
static double rel_err(const float *got, const double *want, size_t n) {
    double scale = 0.0, err = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[i] - want[i]));
    return scale > 0.0 ? err / scale : err;
}

/* Bound on the Winograd path's error, relative to the largest reference
 * value (measured: at most about 2e-6 on these cases; im2col 3e-7). */
#define WINO_REL 2e-5

static void check_shape(const shape_t *s, unsigned seed) {
    const int OH = (int)out_size(s), OW = (int)out_w(s), K = s->k, P = s->pad;
    const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * K * K;
    const size_t ny = (size_t)s->n * s->oc * OH * OW;
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    float *xd = random_floats(&rng, nx, 1.0f), *wd = random_floats(&rng, nw, 0.2f);
    float *bd = random_floats(&rng, (size_t)s->oc, 0.3f), *dy = random_floats(&rng, ny, 1.0f);
    result_t wg = run(s, xd, wd, bd, dy, DP_WINO_ALL), ic = run(s, xd, wd, bd, dy, DP_WINO_OFF);
    if (!wg.y || !ic.y) goto out;
    /* the references, in double */
    double *y = calloc(ny, sizeof(double)), *dx = calloc(nx, sizeof(double)), *dw = calloc(nw, sizeof(double));
    double *db = calloc((size_t)s->oc, sizeof(double));
    for (int n = 0; n < s->n; n++)
        for (int oc = 0; oc < s->oc; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double sum = s->bias ? bd[oc] : 0.0;
                    for (int c = 0; c < s->c; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh + kh - P, iw = ow + kw - P;
                                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                                sum += (double)xd[(((size_t)n * s->c + c) * s->h + ih) * s->w + iw] *
                                       wd[(((size_t)oc * s->c + c) * K + kh) * K + kw];
                            }
                    size_t o = (((size_t)n * s->oc + oc) * OH + oh) * OW + ow;
                    y[o] = s->relu && sum < 0.0 ? 0.0 : sum;
                    /* the mask of the path's own output, as training sees it */
                    double g = s->relu && !(wg.y[o] > 0.0f) ? 0.0 : dy[o];
                    db[oc] += g;
                    for (int c = 0; c < s->c; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh + kh - P, iw = ow + kw - P;
                                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                                size_t xi = (((size_t)n * s->c + c) * s->h + ih) * s->w + iw;
                                size_t wi = (((size_t)oc * s->c + c) * K + kh) * K + kw;
                                dx[xi] += g * wd[wi];
                                dw[wi] += g * xd[xi];
                            }
                }
    int masks_agree = 1;
    for (size_t i = 0; i < ny; i++)
        if ((wg.y[i] > 0.0f) != (ic.y[i] > 0.0f)) masks_agree = 0;
    double e[4] = {rel_err(wg.y, y, ny), rel_err(wg.dx, dx, nx), rel_err(wg.dw, dw, nw),
                   rel_err(wg.db, db, (size_t)s->oc)};
    double ei[2] = {rel_err(ic.y, y, ny), rel_err(ic.dw, dw, nw)};
    const char *what[4] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < (s->bias ? 4 : 3); i++) /* without a bias there is no db */
        CHECK(e[i] <= WINO_REL, "winograd (%d, %d, %dx%d) -> %d k%d pad %d: %s max error %.3g of the largest value, "
              "expected <= %g", s->n, s->c, s->h, s->w, s->oc, K, P, what[i], e[i], WINO_REL);
    /* where a ReLU flips between the paths, the two db differ by that dy */
    if (masks_agree && s->bias)
        CHECK(memcmp(wg.db, ic.db, (size_t)s->oc * sizeof(float)) == 0,
              "winograd (%d, %d, %dx%d): the bias gradient differs from the im2col path's bits", s->n, s->c, s->h,
              s->w);
    printf("  (%2d, %2d, %2dx%2d) -> %2d, k%d pad %d%s%s: rel. error y %.2g dx %.2g dw %.2g db %.2g "
           "(im2col: y %.2g dw %.2g)\n",
           s->n, s->c, s->h, s->w, s->oc, K, P, s->relu ? " relu" : "", s->bias ? " bias" : "", e[0], e[1], e[2],
           s->bias ? e[3] : 0.0, ei[0], ei[1]);
    free(y);
    free(dx);
    free(dw);
    free(db);
out:
    release(&wg);
    release(&ic);
    free(xd);
    free(wd);
    free(bd);
    free(dy);
}

/* Which path the mode "on" (--winograd) takes: compares its output bits
 * with the forced paths'. */
static void check_routing(const shape_t *s, int want_winograd, const char *name) {
    const size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->oc * s->c * s->k * s->k;
    const size_t ny = (size_t)s->n * s->oc * out_size(s) * out_w(s);
    dp_rng_t rng;
    dp_rng_seed(&rng, 5);
    float *xd = random_floats(&rng, nx, 1.0f), *wd = random_floats(&rng, nw, 0.2f);
    float *bd = random_floats(&rng, (size_t)s->oc, 0.3f), *dy = random_floats(&rng, ny, 1.0f);
    result_t a = run(s, xd, wd, bd, dy, DP_WINO_ON), w = run(s, xd, wd, bd, dy, DP_WINO_ALL),
             o = run(s, xd, wd, bd, dy, DP_WINO_OFF);
    if (a.y && w.y && o.y) {
        const result_t *same = want_winograd ? &w : &o, *other = want_winograd ? &o : &w;
        CHECK(memcmp(a.y, same->y, ny * sizeof(float)) == 0 && memcmp(a.dw, same->dw, nw * sizeof(float)) == 0 &&
                  memcmp(a.dx, same->dx, nx * sizeof(float)) == 0,
              "%s: with winograd on, the path is not %s", name, want_winograd ? "winograd" : "im2col");
        if (s->k == DP_WINO_R) /* a 3x3 kernel has no winograd path: forced or not, im2col */
            CHECK(memcmp(a.y, other->y, ny * sizeof(float)) != 0,
              "%s: winograd and im2col gave the same bits: the comparison proves nothing", name);
    }
    printf("  %s: with winograd on: %s\n", name, want_winograd ? "winograd" : "im2col");
    release(&a);
    release(&w);
    release(&o);
    free(xd);
    free(wd);
    free(bd);
    free(dy);
}

/* The forward and the data gradient of an image do not depend on the
 * batch it is in (its chunk, its lane, the chunk's size): the first
 * images of a batch of 17, alone in batches of 1, 5 and 12, give the
 * same bits; so k devices compute what 1 device does for their shards. */
static void check_split_independent(void) {
    const shape_t big = {17, 20, 50, 13, 13, 5, 0, 1, 1};
    const size_t img_x = (size_t)big.c * big.h * big.w, img_y = (size_t)big.oc * out_size(&big) * out_w(&big);
    const size_t nw = (size_t)big.oc * big.c * 25;
    dp_rng_t rng;
    dp_rng_seed(&rng, 9);
    float *xd = random_floats(&rng, big.n * img_x, 1.0f), *wd = random_floats(&rng, nw, 0.2f);
    float *bd = random_floats(&rng, (size_t)big.oc, 0.3f), *dy = random_floats(&rng, big.n * img_y, 1.0f);
    result_t all = run(&big, xd, wd, bd, dy, DP_WINO_ON);
    const int firsts[] = {0, 0, 0, 3, 9, 13}, sizes[] = {1, 5, 12, 9, 8, 4};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes && all.y; i++) {
        shape_t part = big;
        part.n = sizes[i];
        const size_t f = (size_t)firsts[i];
        result_t r = run(&part, xd + f * img_x, wd, bd, dy + f * img_y, DP_WINO_ON);
        if (r.y)
            CHECK(memcmp(r.y, all.y + f * img_y, sizes[i] * img_y * sizeof(float)) == 0 &&
                      memcmp(r.dx, all.dx + f * img_x, sizes[i] * img_x * sizeof(float)) == 0,
                  "winograd: images %zu..%zu alone differ from the same images in a batch of 17", f,
                  f + (size_t)sizes[i] - 1);
        release(&r);
    }
    printf("  forward and dx of an image: the same bits in batches of 1, 4, 5, 8, 9, 12 and 17 at any offset\n");
    release(&all);
    free(xd);
    free(wd);
    free(bd);
    free(dy);
}

/* The tables: for random 1-D g (5 taps), d (7 inputs) and e (3 outputs' dy),
 * A^T [(G g) (.) (B^T d)] is the correlation of d with g, A'^T [(G' e) (.)
 * (B^T d)] is the correlation of d with e, and A, B are the transposes. */
static void check_tables(void) {
    dp_rng_t rng;
    dp_rng_seed(&rng, 3);
    double worst = 0.0;
    int transposes = 1;
    for (int trial = 0; trial < 100; trial++) {
        double g[5], d[7], e[3], gg[7], bd[7], ge[7];
        for (int i = 0; i < 5; i++) g[i] = 2.0 * dp_rng_uniform(&rng) - 1.0;
        for (int i = 0; i < 7; i++) d[i] = 2.0 * dp_rng_uniform(&rng) - 1.0;
        for (int i = 0; i < 3; i++) e[i] = 2.0 * dp_rng_uniform(&rng) - 1.0;
        for (int j = 0; j < 7; j++) {
            gg[j] = bd[j] = ge[j] = 0.0;
            for (int k = 0; k < 5; k++) gg[j] += dp_wino_g[j * 5 + k] * g[k];
            for (int k = 0; k < 7; k++) bd[j] += dp_wino_bt[j * 7 + k] * d[k];
            for (int k = 0; k < 3; k++) ge[j] += dp_wino_gw[j * 3 + k] * e[k];
        }
        for (int i = 0; i < 3; i++) { /* y_i = sum_k d_{i+k} g_k */
            double y = 0.0, want = 0.0;
            for (int j = 0; j < 7; j++) y += dp_wino_at[i * 7 + j] * gg[j] * bd[j];
            for (int k = 0; k < 5; k++) want += d[i + k] * g[k];
            worst = fmax(worst, fabs(y - want));
        }
        for (int i = 0; i < 5; i++) { /* dw_i = sum_k d_{i+k} e_k */
            double v = 0.0, want = 0.0;
            for (int j = 0; j < 7; j++) v += dp_wino_atw[i * 7 + j] * ge[j] * bd[j];
            for (int k = 0; k < 3; k++) want += d[i + k] * e[k];
            worst = fmax(worst, fabs(v - want));
        }
    }
    for (int i = 0; i < 7; i++) {
        for (int j = 0; j < 3; j++) transposes &= dp_wino_a[i * 3 + j] == dp_wino_at[j * 7 + i];
        for (int j = 0; j < 7; j++) transposes &= dp_wino_b[i * 7 + j] == dp_wino_bt[j * 7 + i];
    }
    /* the fractions of G and G' are rounded to float: about 1e-7 */
    CHECK(worst <= 1e-6, "winograd tables: the 1-D identities are off by %g", worst);
    CHECK(transposes, "winograd tables: A and B are not the transposes of A^T and B^T");
    printf("  tables: 1-D identities within %.2g; A, B are the transposes\n", worst);
}

int main(void) {
    /* off unless asked for (DPTRAIN_CONV=winograd, or the backend's set_winograd) */
    const char *env = getenv("DPTRAIN_CONV");
    const int asked = env && strcmp(env, "winograd") == 0;
    CHECK(dp_conv_winograd_mode() == (asked ? DP_WINO_ON : DP_WINO_OFF), "winograd mode %d at start, DPTRAIN_CONV=%s",
          dp_conv_winograd_mode(), env ? env : "(unset)");
    check_tables();
    check_split_independent();
    const shape_t shapes[] = {
        {17, 20, 50, 13, 13, 5, 0, 1, 1}, /* LeNet's conv2, 3 chunks */
        {9, 8, 8, 12, 12, 5, 0, 0, 1},    /* outputs 8x8: partial tiles */
        {3, 9, 12, 11, 7, 5, 2, 0, 0},    /* non-square, pad 2, no bias */
        {2, 8, 10, 5, 6, 5, 4, 1, 1},     /* the largest pad */
        {1, 16, 8, 20, 17, 5, 1, 1, 0},   /* one image, pad 1 */
        {11, 3, 5, 9, 9, 5, 3, 1, 1},     /* few channels (forced) */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_shape(&shapes[i], 100u + (unsigned)i);
    check_routing(&shapes[0], 1, "LeNet conv2 (20 -> 50, 5x5)");
    check_routing(&(shape_t){4, 1, 20, 28, 28, 5, 2, 1, 1}, 0, "one input channel (1 -> 20, 5x5)");
    check_routing(&(shape_t){4, 16, 16, 9, 9, 3, 1, 1, 1}, 0, "3x3 kernel (16 -> 16)");
    return testing_finish("test_conv_winograd");
}
