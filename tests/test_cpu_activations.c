/* test_cpu_activations.c - the activation loops of the CPU backend
 * (src/backend/cpu/kernels/loops_impl.h: exp, erf, silu, gelu, sigmoid and
 * the backwards of silu and gelu, with loops_math.h's exp and erfc) against
 * double-precision libm over every 1/1024 in [-100, 100] and special values
 * (+-0, +-inf, NaN, +-FLT_MAX, the edges of expf's range and of its
 * subnormal results): the largest error of each, printed and held to the
 * bounds that ops_elementwise.c's header states; the exact limits (silu's
 * -0, sigmoid's 0 and 1, gelu's x and -0, NaN kept); the backwards' add
 * mode adds what the overwrite mode writes; and every copy this CPU can
 * run (avx512, avx2, generic) gives the same bits as the generic one.
 *
 * Errors are in ulps: |got - exact| over the spacing of floats at the
 * exact value (2^-149 below FLT_MIN); for a gradient at the larger of its
 * two terms (it crosses 0 by cancellation). erf's is absolute. silu's
 * exact value is aten's x / (1 + e^-x) with e^-x overflowing where expf
 * does (beyond 88.72: -0), as the op's header says.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_loop_copies.h"
#include "testing.h"

enum { SWEEP = 200 * 1024 + 1 };

/* The bounds (ops_elementwise.c's header) */
#define EXP_ULPS 1.0
#define ERF_ABS 1e-7
#define SILU_ULPS 2.1
#define SILU_GRAD_ULPS 16.5 /* aten's 1 - s near 1, as with libm's expf */
#define GELU_ULPS 11.0      /* the largest at subnormal results (x < -13) */
#define GELU_GRAD_ULPS 12.0
#define SIGMOID_ULPS 2.0

static const float specials[] = {0.0f,      -0.0f,     INFINITY,   -INFINITY,   NAN,         FLT_MAX,
                                 -FLT_MAX,  FLT_MIN,   -FLT_MIN,   1e-40f,      -1e-40f,     88.7f,
                                 -88.7f,    88.72283f, 88.72284f,  -88.72283f,  -88.72284f,  89.0f,
                                 104.0f,    -104.0f,   -103.97f,   -103.98f,    -87.33f,     -87.34f,
                                 -95.5f,    -100.25f,  1e-7f,      -1e-7f,      0.5f,        -0.75f,
                                 5.0f,      -5.0f,     9.5f,       -9.5f,       10.6f,       -10.6f,
                                 14.0f,     -14.0f,    15.5f,      -15.5f,      1000.0f,     -1000.0f};

/* Spacing of floats at |v| (2^-149 in the subnormal range) */
static double float_ulp(double v) {
    int e;
    v = fabs(v);
    if (v < FLT_MIN) return 0x1p-149;
    frexp(v, &e); /* v = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 24);
}

/* |got - want| in ulps at `scale` (>= |want|); 0 when a NaN is a NaN or
 * an overflowed exact value is the float's inf; INFINITY on a mismatch */
static double ulps(float got, double want, double scale) {
    if (isnan(want)) return isnan(got) ? 0.0 : INFINITY;
    if (isinf((float)want)) return got == (float)want ? 0.0 : INFINITY;
    if (!isfinite(got)) return INFINITY;
    return fabs((double)got - want) / float_ulp(scale);
}

/* The exact values: e^x, erf, aten's silu and its gradient (e^-x as expf:
 * inf beyond FLT_MAX), gelu = x Phi(x) and its gradient, sigmoid */
static double exp_as_float(double x) {
    const double e = exp(x);
    return e > FLT_MAX ? INFINITY : e;
}
static double silu_exact(double x) { return x / (1.0 + exp_as_float(-x)); }
static double silu_grad_exact(double x, double *scale) {
    const double s = 1.0 / (1.0 + exp_as_float(-x));
    *scale = fmax(s, fabs(x * s * (1.0 - s)));
    return s * (1.0 + x * (1.0 - s));
}
static double normal_cdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
static double gelu_exact(double x) { return x * normal_cdf(x); }
static double gelu_grad_exact(double x, double *scale) {
    const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */
    *scale = fmax(normal_cdf(x), fabs(x * pdf));
    return normal_cdf(x) + x * pdf;
}
static double sigmoid_exact(double x) {
    const double e = exp(-fabs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

typedef struct {
    double exp, erf, silu, silu_grad, gelu, gelu_grad, sigmoid;
} errors_t;

/* The outputs of one copy of the loops over x (n values) */
typedef struct {
    float *exp, *erf, *silu, *silu_grad, *gelu, *gelu_grad, *sigmoid;
} outputs_t;

static void run_loops(const dp_cpu_loops_t *t, const float *x, const float *ones, size_t n, outputs_t *out) {
    t->exp_floats(out->exp, x, n);
    t->erf_floats(out->erf, x, n);
    t->silu(out->silu, x, n);
    t->silu_backward(out->silu_grad, x, ones, n, 1);
    t->gelu(out->gelu, x, n);
    t->gelu_backward(out->gelu_grad, x, ones, n, 1);
    t->sigmoid(out->sigmoid, x, n);
}

static errors_t measure(const float *x, size_t n, const outputs_t *o) {
    errors_t e = {0};
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        double scale;
        e.exp = fmax(e.exp, ulps(o->exp[i], exp(v), exp(v)));
        const double erf_err = isnan(v) ? (isnan(o->erf[i]) ? 0.0 : INFINITY) : fabs(o->erf[i] - erf(v));
        e.erf = fmax(e.erf, isnan(erf_err) ? INFINITY : erf_err);
        e.silu = fmax(e.silu, ulps(o->silu[i], silu_exact(v), silu_exact(v)));
        double g = silu_grad_exact(v, &scale);
        e.silu_grad = fmax(e.silu_grad, ulps(o->silu_grad[i], g, scale));
        e.gelu = fmax(e.gelu, ulps(o->gelu[i], gelu_exact(v), gelu_exact(v)));
        g = gelu_grad_exact(v, &scale);
        e.gelu_grad = fmax(e.gelu_grad, ulps(o->gelu_grad[i], g, scale));
        e.sigmoid = fmax(e.sigmoid, ulps(o->sigmoid[i], sigmoid_exact(v), sigmoid_exact(v)));
    }
    return e;
}

static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof(float)) != 0) return 0;
    return 1;
}

static int is_neg_zero(float v) { return v == 0.0f && signbit(v); }

/* The limits the ops' header promises, on this copy's outputs */
static void check_limits(const char *isa, const float *x, size_t n, const outputs_t *o) {
    int bad_silu = 0, bad_sigmoid = 0, bad_gelu = 0, bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            bad_nan += !isnan(o->exp[i]) || !isnan(o->erf[i]) || !isnan(o->silu[i]) || !isnan(o->gelu[i]) ||
                       !isnan(o->sigmoid[i]) || !isnan(o->silu_grad[i]) || !isnan(o->gelu_grad[i]);
            continue;
        }
        if (x[i] < -89.0f && isfinite(x[i])) bad_silu += !is_neg_zero(o->silu[i]);
        if (x[i] > 20.0f) bad_silu += o->silu[i] != x[i];
        if (isfinite(x[i])) bad_sigmoid += isnan(o->sigmoid[i]) || o->sigmoid[i] < 0.0f || o->sigmoid[i] > 1.0f;
        if (x[i] > 17.0f) bad_sigmoid += o->sigmoid[i] != 1.0f;
        if (x[i] < -104.0f) bad_sigmoid += o->sigmoid[i] != 0.0f;
        if (x[i] > 6.0f) bad_gelu += o->gelu[i] != x[i];
        if (x[i] < -15.0f && isfinite(x[i])) bad_gelu += !is_neg_zero(o->gelu[i]);
    }
    CHECK(bad_nan == 0, "%s: %d NaN inputs gave a number", isa, bad_nan);
    CHECK(bad_silu == 0, "%s: silu: %d large |x| not -0 / x", isa, bad_silu);
    CHECK(bad_sigmoid == 0, "%s: sigmoid: %d outputs off [0, 1] or off its exact limits", isa, bad_sigmoid);
    CHECK(bad_gelu == 0, "%s: gelu: %d large |x| not x / -0", isa, bad_gelu);
    CHECK(is_neg_zero(o->gelu[1]) && is_neg_zero(o->silu[1]), "%s: gelu(-0), silu(-0) not -0", isa);
    CHECK(o->exp[2] == INFINITY && o->exp[3] == 0.0f, "%s: exp(+-inf) = %g, %g", isa, o->exp[2], o->exp[3]);
}

/* The backwards with overwrite 0 add to dx exactly what overwrite 1 writes */
static void check_add_mode(const char *isa, const dp_cpu_loops_t *t, const float *x, size_t n) {
    float *dy = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float)), *written = malloc(n * sizeof(float));
    float *base = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) dy[i] = base[i] = (float)((i * 37) % 19) * 0.125f - 1.0f;
    for (int op = 0; op < 2; op++) {
        void (*backward)(float *restrict, const float *restrict, const float *restrict, size_t, int) =
            op ? t->gelu_backward : t->silu_backward;
        memcpy(dx, base, n * sizeof(float));
        backward(written, x, dy, n, 1);
        backward(dx, x, dy, n, 0);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            const float want = base[i] + written[i];
            bad += !(isnan(want) && isnan(dx[i])) && memcmp(&want, &dx[i], sizeof want) != 0;
        }
        CHECK(bad == 0, "%s: %s_backward adding: %d values differ from dx + what it writes", isa,
              op ? "gelu" : "silu", bad);
    }
    free(dy), free(dx), free(written), free(base);
}

static outputs_t outputs_new(size_t n) {
    outputs_t o;
    float **all[] = {&o.exp, &o.erf, &o.silu, &o.silu_grad, &o.gelu, &o.gelu_grad, &o.sigmoid};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) *all[k] = malloc(n * sizeof(float));
    return o;
}

static void outputs_free(outputs_t *o) {
    free(o->exp), free(o->erf), free(o->silu), free(o->silu_grad), free(o->gelu), free(o->gelu_grad);
    free(o->sigmoid);
}

/* Every output of `o` has the bits of `ref`'s (any NaN equals any NaN) */
static int outputs_same(const outputs_t *o, const outputs_t *ref, size_t n) {
    return same_bits(o->exp, ref->exp, n) && same_bits(o->erf, ref->erf, n) && same_bits(o->silu, ref->silu, n) &&
           same_bits(o->silu_grad, ref->silu_grad, n) && same_bits(o->gelu, ref->gelu, n) &&
           same_bits(o->gelu_grad, ref->gelu_grad, n) && same_bits(o->sigmoid, ref->sigmoid, n);
}

/* The bounds ops_elementwise.c's header states (ulps; erf absolute) */
static void check_bounds(const char *isa, errors_t e) {
    printf("%s: max error exp %.3f ulp, erf %.3g abs, silu %.3f ulp, silu' %.3f ulp, gelu %.3f ulp, gelu' %.3f "
           "ulp, sigmoid %.3f ulp\n",
           isa, e.exp, e.erf, e.silu, e.silu_grad, e.gelu, e.gelu_grad, e.sigmoid);
    CHECK(e.exp <= EXP_ULPS, "%s: exp off by %.3f ulp (bound %g)", isa, e.exp, EXP_ULPS);
    CHECK(e.erf <= ERF_ABS, "%s: erf off by %.3g (bound %g)", isa, e.erf, ERF_ABS);
    CHECK(e.silu <= SILU_ULPS, "%s: silu off by %.3f ulp (bound %g)", isa, e.silu, SILU_ULPS);
    CHECK(e.silu_grad <= SILU_GRAD_ULPS, "%s: silu's gradient off by %.3f ulp (bound %g)", isa, e.silu_grad,
          SILU_GRAD_ULPS);
    CHECK(e.gelu <= GELU_ULPS, "%s: gelu off by %.3f ulp (bound %g)", isa, e.gelu, GELU_ULPS);
    CHECK(e.gelu_grad <= GELU_GRAD_ULPS, "%s: gelu's gradient off by %.3f ulp (bound %g)", isa, e.gelu_grad,
          GELU_GRAD_ULPS);
    CHECK(e.sigmoid <= SIGMOID_ULPS, "%s: sigmoid off by %.3f ulp (bound %g)", isa, e.sigmoid, SIGMOID_ULPS);
}

int main(void) {
    CHECK(dp_cpu_init() == DP_OK, "dp_cpu_init: %s", dp_error_message());
    const size_t nspecial = sizeof specials / sizeof specials[0], n = nspecial + SWEEP;
    float *x = malloc(n * sizeof(float)), *ones = malloc(n * sizeof(float));
    memcpy(x, specials, sizeof specials);
    for (size_t i = 0; i < SWEEP; i++) x[nspecial + i] = (float)i / 1024.0f - 100.0f;
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    const cpu_loop_copy_t *copies = cpu_loop_copies;
    outputs_t generic = outputs_new(n), o = outputs_new(n);
    run_loops(&dp_cpu_loops_generic, x, ones, n, &generic);
    for (size_t c = 0; c < CPU_LOOP_COPIES; c++) {
        if (copies[c].isa > dp_cpu_best_isa()) {
            printf("%s: not on this CPU, skipped\n", copies[c].name);
            continue;
        }
        run_loops(copies[c].loops, x, ones, n, &o);
        check_bounds(copies[c].name, measure(x, n, &o));
        check_limits(copies[c].name, x, n, &o);
        check_add_mode(copies[c].name, copies[c].loops, x, n);
        CHECK(outputs_same(&o, &generic, n), "%s: outputs differ from the generic copy's", copies[c].name);
    }
    outputs_free(&generic), outputs_free(&o);
    free(x), free(ones);
    return testing_finish("test_cpu_activations");
}
