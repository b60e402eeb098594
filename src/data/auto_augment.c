/* auto_augment.c - TrivialAugmentWide's, RandAugment's and AutoAugment's
 * ops, policy tables and draws (auto_augment.h), with PIL 9.4's arithmetic:
 * Geometry.c's nearest affine paths (ImagingScaleAffine, affine_fixed,
 * the double loop), Image.rotate's matrix (its entries rounded to 15
 * decimals) and transposes, Blend.c's float32 blend, Filter.c's 3x3
 * SMOOTH in float32 (+0.5, truncated; the border rows and columns kept),
 * ImageOps' lookup tables. Compiled with -ffp-contract=off: the float
 * roundings are PIL's only without fused multiply-adds.
 */
#include "dptrain/auto_augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

static const char *const op_names[DP_AA_OPS] = {
    "Identity",   "ShearX", "ShearY",   "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",      "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
};

static const char *const kind_names[DP_AUTO_AUGMENT_KINDS] = {"none", "ta_wide", "ra", "imagenet", "cifar10", "svhn"};

const char *dp_aa_op_name(dp_aa_op_t op) { return op >= 0 && op < DP_AA_OPS ? op_names[op] : "?"; }

const char *dp_auto_augment_kind_name(dp_auto_augment_kind_t kind) {
    return kind > DP_AUTO_AUGMENT_NONE && kind < DP_AUTO_AUGMENT_KINDS ? kind_names[kind] : "none";
}

dp_status_t dp_auto_augment_parse(const char *text, const char *who, dp_auto_augment_kind_t *kind) {
    for (int k = 0; k < DP_AUTO_AUGMENT_KINDS; k++)
        if (text && !strcmp(text, kind_names[k])) {
            *kind = (dp_auto_augment_kind_t)k;
            return DP_OK;
        }
    return dp_fail(DP_ERR_ARG, "%s: '%s' is not ta_wide, ra, imagenet, cifar10, svhn or none", who, text ? text : "");
}

/* AutoAugment's policies (AutoAugment._get_policies): 25 sub-policies of 2
 * ops, each with its probability and its bin of 10 (-1: None). */
#define SUB_POLICIES DP_AA_SUB_POLICIES
#define SHX DP_AA_SHEAR_X
#define SHY DP_AA_SHEAR_Y
#define TX DP_AA_TRANSLATE_X
#define TY DP_AA_TRANSLATE_Y
#define ROT DP_AA_ROTATE
#define BRI DP_AA_BRIGHTNESS
#define COL DP_AA_COLOR
#define CON DP_AA_CONTRAST
#define SHA DP_AA_SHARPNESS
#define POS DP_AA_POSTERIZE
#define SOL DP_AA_SOLARIZE
#define AC DP_AA_AUTOCONTRAST
#define EQ DP_AA_EQUALIZE
#define INV DP_AA_INVERT
static const dp_aa_sub_op_t policies[3][SUB_POLICIES][2] = {
    { /* imagenet */
     {{POS, 0.4f, 8}, {ROT, 0.6f, 9}},  {{SOL, 0.6f, 5}, {AC, 0.6f, -1}},  {{EQ, 0.8f, -1}, {EQ, 0.6f, -1}},
     {{POS, 0.6f, 7}, {POS, 0.6f, 6}},  {{EQ, 0.4f, -1}, {SOL, 0.2f, 4}},  {{EQ, 0.4f, -1}, {ROT, 0.8f, 8}},
     {{SOL, 0.6f, 3}, {EQ, 0.6f, -1}},  {{POS, 0.8f, 5}, {EQ, 1.0f, -1}},  {{ROT, 0.2f, 3}, {SOL, 0.6f, 8}},
     {{EQ, 0.6f, -1}, {POS, 0.4f, 6}},  {{ROT, 0.8f, 8}, {COL, 0.4f, 0}},  {{ROT, 0.4f, 9}, {EQ, 0.6f, -1}},
     {{EQ, 0.0f, -1}, {EQ, 0.8f, -1}},  {{INV, 0.6f, -1}, {EQ, 1.0f, -1}}, {{COL, 0.6f, 4}, {CON, 1.0f, 8}},
     {{ROT, 0.8f, 8}, {COL, 1.0f, 2}},  {{COL, 0.8f, 8}, {SOL, 0.8f, 7}},  {{SHA, 0.4f, 7}, {INV, 0.6f, -1}},
     {{SHX, 0.6f, 5}, {EQ, 1.0f, -1}},  {{COL, 0.4f, 0}, {EQ, 0.6f, -1}},  {{EQ, 0.4f, -1}, {SOL, 0.2f, 4}},
     {{SOL, 0.6f, 5}, {AC, 0.6f, -1}},  {{INV, 0.6f, -1}, {EQ, 1.0f, -1}}, {{COL, 0.6f, 4}, {CON, 1.0f, 8}},
     {{EQ, 0.8f, -1}, {EQ, 0.6f, -1}}},
    { /* cifar10 */
     {{INV, 0.1f, -1}, {CON, 0.2f, 6}}, {{ROT, 0.7f, 2}, {TX, 0.3f, 9}},   {{SHA, 0.8f, 1}, {SHA, 0.9f, 3}},
     {{SHY, 0.5f, 8}, {TY, 0.7f, 9}},   {{AC, 0.5f, -1}, {EQ, 0.9f, -1}},  {{SHY, 0.2f, 7}, {POS, 0.3f, 7}},
     {{COL, 0.4f, 3}, {BRI, 0.6f, 7}},  {{SHA, 0.3f, 9}, {BRI, 0.7f, 9}},  {{EQ, 0.6f, -1}, {EQ, 0.5f, -1}},
     {{CON, 0.6f, 7}, {SHA, 0.6f, 5}},  {{COL, 0.7f, 7}, {TX, 0.5f, 8}},   {{EQ, 0.3f, -1}, {AC, 0.4f, -1}},
     {{TY, 0.4f, 3}, {SHA, 0.2f, 6}},   {{BRI, 0.9f, 6}, {COL, 0.2f, 8}},  {{SOL, 0.5f, 2}, {INV, 0.0f, -1}},
     {{EQ, 0.2f, -1}, {AC, 0.6f, -1}},  {{EQ, 0.2f, -1}, {EQ, 0.6f, -1}},  {{COL, 0.9f, 9}, {EQ, 0.6f, -1}},
     {{AC, 0.8f, -1}, {SOL, 0.2f, 8}},  {{BRI, 0.1f, 3}, {COL, 0.7f, 0}},  {{SOL, 0.4f, 5}, {AC, 0.9f, -1}},
     {{TY, 0.9f, 9}, {TY, 0.7f, 9}},    {{AC, 0.9f, -1}, {SOL, 0.8f, 3}},  {{EQ, 0.8f, -1}, {INV, 0.1f, -1}},
     {{TY, 0.7f, 9}, {AC, 0.9f, -1}}},
    { /* svhn */
     {{SHX, 0.9f, 4}, {INV, 0.2f, -1}}, {{SHY, 0.9f, 8}, {INV, 0.7f, -1}}, {{EQ, 0.6f, -1}, {SOL, 0.6f, 6}},
     {{INV, 0.9f, -1}, {EQ, 0.6f, -1}}, {{EQ, 0.6f, -1}, {ROT, 0.9f, 3}},  {{SHX, 0.9f, 4}, {AC, 0.8f, -1}},
     {{SHY, 0.9f, 8}, {INV, 0.4f, -1}}, {{SHY, 0.9f, 5}, {SOL, 0.2f, 6}},  {{INV, 0.9f, -1}, {AC, 0.8f, -1}},
     {{EQ, 0.6f, -1}, {ROT, 0.9f, 3}},  {{SHX, 0.9f, 4}, {SOL, 0.3f, 3}},  {{SHY, 0.8f, 8}, {INV, 0.7f, -1}},
     {{EQ, 0.9f, -1}, {TY, 0.6f, 6}},   {{INV, 0.9f, -1}, {EQ, 0.6f, -1}}, {{CON, 0.3f, 3}, {ROT, 0.8f, 4}},
     {{INV, 0.8f, -1}, {TY, 0.0f, 2}},  {{SHY, 0.7f, 6}, {SOL, 0.4f, 8}},  {{INV, 0.6f, -1}, {ROT, 0.8f, 4}},
     {{SHY, 0.3f, 7}, {TX, 0.9f, 3}},   {{SHX, 0.1f, 6}, {INV, 0.6f, -1}}, {{SOL, 0.7f, 2}, {TY, 0.6f, 7}},
     {{SHY, 0.8f, 4}, {INV, 0.8f, -1}}, {{SHX, 0.7f, 9}, {TY, 0.8f, 3}},   {{SHY, 0.8f, 5}, {AC, 0.7f, -1}},
     {{SHX, 0.7f, 2}, {INV, 0.1f, -1}}},
};
#undef SHX
#undef SHY
#undef TX
#undef TY
#undef ROT
#undef BRI
#undef COL
#undef CON
#undef SHA
#undef POS
#undef SOL
#undef AC
#undef EQ
#undef INV

static int is_auto(dp_auto_augment_kind_t kind) { return kind >= DP_AUTO_AUGMENT_IMAGENET && kind < DP_AUTO_AUGMENT_KINDS; }

const dp_aa_sub_op_t *dp_auto_augment_sub_policy(dp_auto_augment_kind_t kind, int index) {
    return is_auto(kind) && index >= 0 && index < SUB_POLICIES ? policies[kind - DP_AUTO_AUGMENT_IMAGENET][index] : NULL;
}

int dp_aa_op_signed(dp_aa_op_t op) { return op >= DP_AA_SHEAR_X && op <= DP_AA_SHARPNESS; }

int dp_aa_op_ranged(dp_aa_op_t op) { return op >= DP_AA_SHEAR_X && op <= DP_AA_SOLARIZE; }

/* torch.linspace(start, end, steps)[bin] (steps 10 or 31) in float32 as
 * torch's portable CPU kernel (ATEN_CPU_CAPABILITY=default) makes it: step
 * = (end - start) / (steps - 1); the first 16 elements of 31 as two vectors
 * of 8, base + lane x step with base = start + step x first lane; the
 * others one by one, start + step x bin below steps / 2, else from the end,
 * end - step x (steps - 1 - bin). (Torch's AVX2 and AVX-512 builds fuse the
 * multiply-add and differ in the last bit at a few bins:
 * tests/fixtures/image/make_auto_augment.py.) */
static double linspace(double start, double end, int steps, int bin) {
    const float s = (float)start, e = (float)end, step = (e - s) / (float)(steps - 1);
    if (bin < steps / 16 * 16) {
        const float base = s + step * (float)(bin & ~7);
        return (double)(base + (float)(bin & 7) * step);
    }
    if (bin < steps / 2) return (double)(s + step * (float)bin);
    return (double)(e - step * (float)(steps - 1 - bin));
}

double dp_aa_magnitude(dp_auto_augment_kind_t kind, dp_aa_op_t op, int bin, int height, int width) {
    const int ta = kind == DP_AUTO_AUGMENT_TA_WIDE, bins = is_auto(kind) ? DP_AA_AUTO_BINS : DP_AA_BINS;
    if (!dp_aa_op_ranged(op) || bin < 0 || bin >= bins) return 0.0;
    switch (op) {
    case DP_AA_SHEAR_X:
    case DP_AA_SHEAR_Y: return linspace(0.0, ta ? 0.99 : 0.3, bins, bin);
    case DP_AA_TRANSLATE_X: return linspace(0.0, ta ? 32.0 : 150.0 / 331.0 * width, bins, bin);
    case DP_AA_TRANSLATE_Y: return linspace(0.0, ta ? 32.0 : 150.0 / 331.0 * height, bins, bin);
    case DP_AA_ROTATE: return linspace(0.0, ta ? 135.0 : 30.0, bins, bin);
    case DP_AA_POSTERIZE: /* 8 - (arange(bins) / ((bins - 1) / 6 or 4)).round(): 5, 7.5, AutoAugment's 2.25 */
        return 8.0 - (double)nearbyintf((float)bin / (ta ? 5.0f : bins == DP_AA_BINS ? 7.5f : 2.25f));
    case DP_AA_SOLARIZE: return linspace(255.0, 0.0, bins, bin);
    default: return linspace(0.0, ta ? 0.99 : 0.9, bins, bin); /* the enhancements */
    }
}

/* AutoAugment.forward: the sub-policy, 2 probabilities and 2 signs (always
 * drawn), then each op whose probability came up (probs[i] <= p in
 * float32), at its bin, negated for a signed op when its sign is 0. */
static int draw_auto(dp_auto_augment_kind_t kind, int height, int width, dp_draw_fn draw, void *state,
                     dp_aa_choice_t out[DP_RA_OPS]) {
    const dp_aa_sub_op_t *sub = policies[kind - DP_AUTO_AUGMENT_IMAGENET][draw(state) % SUB_POLICIES];
    float probs[2];
    uint32_t signs[2];
    for (int i = 0; i < 2; i++) probs[i] = dp_torch_uniform(draw(state), 0.0f, 1.0f); /* torch.rand */
    for (int i = 0; i < 2; i++) signs[i] = draw(state) % 2;
    int count = 0;
    for (int i = 0; i < 2; i++) {
        if (!(probs[i] <= sub[i].p)) continue;
        double magnitude = sub[i].bin >= 0 ? dp_aa_magnitude(kind, sub[i].op, sub[i].bin, height, width) : 0.0;
        if (dp_aa_op_signed(sub[i].op) && signs[i] == 0) magnitude = -magnitude;
        out[count++] = (dp_aa_choice_t){sub[i].op, magnitude};
    }
    return count;
}

int dp_auto_augment_draw(const dp_auto_augment_t *policy, int height, int width, dp_draw_fn draw, void *state,
                         dp_aa_choice_t out[DP_RA_OPS]) {
    if (is_auto(policy->kind)) return draw_auto(policy->kind, height, width, draw, state, out);
    if (policy->kind != DP_AUTO_AUGMENT_TA_WIDE && policy->kind != DP_AUTO_AUGMENT_RA) return 0;
    const int count = policy->kind == DP_AUTO_AUGMENT_RA ? DP_RA_OPS : 1;
    for (int i = 0; i < count; i++) {
        const dp_aa_op_t op = (dp_aa_op_t)(draw(state) % DP_AA_SPACE_OPS);
        int bin = policy->magnitude;
        if (policy->kind == DP_AUTO_AUGMENT_TA_WIDE && dp_aa_op_ranged(op)) bin = (int)(draw(state) % DP_AA_BINS);
        double magnitude = dp_aa_magnitude(policy->kind, op, bin, height, width);
        if (dp_aa_op_signed(op) && draw(state) % 2) magnitude = -magnitude;
        out[i] = (dp_aa_choice_t){op, magnitude};
    }
    return count;
}

/* --- geometry ------------------------------------------------------------------------------ */
#define PI 3.141592653589793
#define COORD(v) ((v) < 0.0 ? -1 : (int)(v)) /* Geometry.c's */
#define FLOOR(v) ((v) < 0.0 ? (int)floor(v) : (int)(v))

/* Image.transform(AFFINE, NEAREST) of one plane `in` into the zeroed `out`
 * (ImagingTransformAffine: x0 = y0 = 0, x1 = width, y1 = height). */
static void affine_plane(const double a[6], const unsigned char *in, unsigned char *out, int w, int h) {
    if (a[1] == 0 && a[3] == 0) { /* ImagingScaleAffine: columns tabulated */
        double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
        for (int y = 0; y < h; y++, yo += a[4]) {
            const int yi = COORD(yo);
            double xx = xo;
            for (int x = 0; x < w; x++, xx += a[0]) {
                const int xi = COORD(xx);
                if (yi >= 0 && yi < h && xi >= 0 && xi < w) out[(size_t)y * w + x] = in[(size_t)yi * w + xi];
            }
        }
        return;
    }
    const int corners[4][2] = {{0, 0}, {w, h}, {0, h}, {w, 0}};
    int fixed = 1;
    for (int k = 0; k < 4; k++)
        fixed &= fabs(corners[k][0] * a[0] + corners[k][1] * a[1] + a[2]) < 32768.0 &&
                 fabs(corners[k][0] * a[3] + corners[k][1] * a[4] + a[5]) < 32768.0;
    if (fixed) { /* affine_fixed: 16.16 */
#define FIX(v) FLOOR((v) * 65536.0 + 0.5)
        const int a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
        int a2 = FIX(a[2] + a[0] * 0.5 + a[1] * 0.5), a5 = FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef FIX
        for (int y = 0; y < h; y++, a2 += a1, a5 += a4) {
            int xx = a2, yy = a5;
            for (int x = 0; x < w; x++, xx += a0, yy += a3) {
                const int xin = xx >> 16, yin = yy >> 16; /* arithmetic shifts: floor */
                if (xin >= 0 && xin < w && yin >= 0 && yin < h) out[(size_t)y * w + x] = in[(size_t)yin * w + xin];
            }
        }
        return;
    }
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < h; y++, xo += a[1], yo += a[4]) {
        double xx = xo, yy = yo;
        for (int x = 0; x < w; x++, xx += a[0], yy += a[3]) {
            const int xin = COORD(xx), yin = COORD(yy);
            if (xin >= 0 && xin < w && yin >= 0 && yin < h) out[(size_t)y * w + x] = in[(size_t)yin * w + xin];
        }
    }
}

/* Where output pixel (x, y) samples (affine_transform: its centre through
 * the matrix), less 0.5 as the filters take it; 0 outside the w x h image. */
static int source_point(const double a[6], int x, int y, int w, int h, double *u, double *v) {
    const double xc = x + 0.5, yc = y + 0.5;
    *u = a[0] * xc + a[1] * yc + a[2];
    *v = a[3] * xc + a[4] * yc + a[5];
    if (*u < 0.0 || *u >= w || *v < 0.0 || *v >= h) return 0;
    *u -= 0.5;
    *v -= 0.5;
    return 1;
}

/* Image.transform(AFFINE, BILINEAR) of the c planes of `in` into the
 * zeroed `out` (ImagingGenericTransform with affine_transform and the 8-bit
 * bilinear filter): each output pixel's source point and weights once, the
 * bands blended with them one by one, as PIL's RGB filter does. */
static void bilinear_planes(const double a[6], const unsigned char *in, unsigned char *out, int c, int w, int h) {
    const size_t plane = (size_t)w * h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double u, v;
            if (!source_point(a, x, y, w, h, &u, &v)) continue; /* the fill */
            const int xi = FLOOR(u), yi = FLOOR(v);
            const double dx = u - xi, dy = v - yi;
            const int x0 = xi < 0 ? 0 : xi < w ? xi : w - 1, x1 = xi + 1 < 0 ? 0 : xi + 1 < w ? xi + 1 : w - 1;
            const size_t r0 = (size_t)(yi < 0 ? 0 : yi < h ? yi : h - 1) * w;
            const int second = yi + 1 >= 0 && yi + 1 < h; /* else the first row again */
            const size_t r1 = second ? (size_t)(yi + 1) * w : r0;
            for (int k = 0; k < c; k++) {
                const unsigned char *p = in + k * plane;
                const double top = p[r0 + x0] + (double)(p[r0 + x1] - p[r0 + x0]) * dx;
                const double bottom = second ? p[r1 + x0] + (double)(p[r1 + x1] - p[r1 + x0]) * dx : top;
                out[k * plane + (size_t)y * w + x] = (unsigned char)(top + (bottom - top) * dy);
            }
        }
}

/* Geometry.c's cubic through four samples at 0 < d < 1 between v2 and v3:
 * the cubic convolution with a = -1 (not Resample.c's a = -0.5), in
 * doubles, its terms summed in PIL's order. */
static double cubic_at(double v1, double v2, double v3, double v4, double d) {
    const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* Image.transform(AFFINE, BICUBIC) of the c planes of `in` into the zeroed
 * `out` (ImagingGenericTransform with the 8-bit bicubic filter): the 4x4
 * neighbourhood from (floor(u - 0.5) - 1, floor(v - 0.5) - 1), columns
 * clamped to the image; its first row clamped, a later row outside the
 * image repeats the row value before it; each row's cubic along x, then
 * one along y; <= 0 is 0, >= 255 is 255, else truncated. */
static void bicubic_planes(const double a[6], const unsigned char *in, unsigned char *out, int c, int w, int h) {
    const size_t plane = (size_t)w * h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double u, v;
            if (!source_point(a, x, y, w, h, &u, &v)) continue; /* the fill */
            const int xi = FLOOR(u) - 1, yi = FLOOR(v) - 1;
            const double dx = u - (xi + 1), dy = v - (yi + 1);
            int cols[4];
            for (int j = 0; j < 4; j++) cols[j] = xi + j < 0 ? 0 : xi + j < w ? xi + j : w - 1;
            for (int k = 0; k < c; k++) {
                const unsigned char *p = in + k * plane;
                double rows[4];
                for (int i = 0; i < 4; i++) {
                    const int row = yi + i;
                    if (i > 0 && (row < 0 || row >= h)) {
                        rows[i] = rows[i - 1];
                        continue;
                    }
                    const unsigned char *r = p + (size_t)(row < 0 ? 0 : row < h ? row : h - 1) * w;
                    rows[i] = cubic_at(r[cols[0]], r[cols[1]], r[cols[2]], r[cols[3]], dx);
                }
                const double value = cubic_at(rows[0], rows[1], rows[2], rows[3], dy);
                out[k * plane + (size_t)y * w + x] = value <= 0.0 ? 0 : value >= 255.0 ? 255 : (unsigned char)value;
            }
        }
}

/* torchvision's _get_inverse_affine_matrix(center, angle, translate, scale 1, shear) as F.affine gives PIL. */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x, double shear_y,
                           double m[6]) {
    const double deg = PI / 180.0;
    const double rot = angle * deg, sx = shear_x * deg, sy = shear_y * deg;
    const double a = cos(rot - sy) / cos(sy);
    const double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    const double c = sin(rot - sy) / cos(sy);
    const double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / 1.0, m[1] = -b / 1.0, m[2] = 0.0, m[3] = -c / 1.0, m[4] = a / 1.0, m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* Python's round(v, 15): the nearest 15-decimal number (correctly rounded both ways). */
static double round15(double v) {
    char text[64];
    snprintf(text, sizeof text, "%.15f", v);
    return strtod(text, NULL);
}

/* Image.transpose ROTATE_90 (turns 1), ROTATE_180 (2), ROTATE_270 (3) of a plane; 90 and 270 only of a square. */
static void transpose_plane(int turns, const unsigned char *in, unsigned char *out, int w, int h) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx = x, sy = y;
            if (turns == 1) sx = w - 1 - y, sy = x;
            else if (turns == 2) sx = w - 1 - x, sy = h - 1 - y;
            else sx = y, sy = h - 1 - x;
            out[(size_t)y * w + x] = in[(size_t)sy * w + sx];
        }
}

/* The geometric ops: each plane through one matrix (or a copy, a transpose). */
static void geometry(dp_aa_op_t op, double magnitude, dp_aa_interpolation_t interpolation, const unsigned char *in,
                     unsigned char *out, int c, int h, int w) {
    const size_t plane = (size_t)w * h;
    double m[6];
    memset(out, 0, plane * c);
    if (op == DP_AA_SHEAR_X || op == DP_AA_SHEAR_Y) {
        const double shear = atan(magnitude) * (180.0 / PI); /* math.degrees */
        inverse_affine(0.0, 0.0, 0.0, 0.0, 0.0, op == DP_AA_SHEAR_X ? shear : 0.0, op == DP_AA_SHEAR_Y ? shear : 0.0,
                       m);
    } else if (op == DP_AA_TRANSLATE_X || op == DP_AA_TRANSLATE_Y) {
        const double t = (double)(long)magnitude; /* int(magnitude) */
        inverse_affine(w * 0.5, h * 0.5, 0.0, op == DP_AA_TRANSLATE_X ? t : 0.0, op == DP_AA_TRANSLATE_Y ? t : 0.0,
                       0.0, 0.0, m);
    } else { /* Image.rotate(angle, NEAREST) */
        double angle = fmod(magnitude, 360.0);
        if (angle < 0.0) angle += 360.0; /* Python's %: the divisor's sign */
        const int turns = angle == 90.0 ? 1 : angle == 180.0 ? 2 : angle == 270.0 ? 3 : 0;
        if (angle == 0.0 || turns == 2 || (turns && w == h)) {
            for (int k = 0; k < c; k++) {
                if (angle == 0.0) memcpy(out + k * plane, in + k * plane, plane);
                else transpose_plane(turns, in + k * plane, out + k * plane, w, h);
            }
            return;
        }
        const double r = -(angle * (PI / 180.0)); /* -math.radians(angle) */
        m[0] = round15(cos(r)), m[1] = round15(sin(r)), m[2] = 0.0;
        m[3] = round15(-sin(r)), m[4] = round15(cos(r)), m[5] = 0.0;
        const double cx = w / 2.0, cy = h / 2.0, x = -cx - 0, y = -cy - 0;
        const double m2 = m[0] * x + m[1] * y + m[2], m5 = m[3] * x + m[4] * y + m[5];
        m[2] = m2 + cx;
        m[5] = m5 + cy;
    }
    if (interpolation == DP_AA_BILINEAR) bilinear_planes(m, in, out, c, w, h);
    else if (interpolation == DP_AA_BICUBIC) bicubic_planes(m, in, out, c, w, h);
    else
        for (int k = 0; k < c; k++) affine_plane(m, in + k * plane, out + k * plane, w, h);
}

/* --- blends and filters ----------------------------------------------------------------- */
/* Image.blend(degenerate, image, factor) in place over `image`: alpha in float32. */
static void blend(const unsigned char *degenerate, unsigned char *image, size_t n, double factor) {
    const float alpha = (float)factor;
    if (alpha == 0.0f) {
        memcpy(image, degenerate, n);
        return;
    }
    if (alpha == 1.0f) return;
    const int inside = alpha >= 0 && alpha <= 1.0;
    for (size_t i = 0; i < n; i++) {
        const int d = degenerate[i], v = image[i];
        const float product = alpha * (float)(v - d);
        const float t = (float)d + product;
        if (inside) image[i] = (unsigned char)t;
        else image[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
    }
}

/* The L image of planar pixels (convert("L")): one plane. */
static void luma_plane(const unsigned char *in, int c, size_t plane, unsigned char *out) {
    for (size_t i = 0; i < plane; i++)
        out[i] = c == 1 ? in[i] : dp_luma(in[i], in[plane + i], in[2 * plane + i]);
}

/* ImageFilter.SMOOTH ((1 1 1, 1 5 1, 1 1 1) / 13) of one plane: Filter.c's 3x3 in float32; the border kept. */
static void smooth_plane(const unsigned char *in, unsigned char *out, int w, int h) {
    memcpy(out, in, (size_t)w * h);
    if (w < 3 || h < 3) return; /* ImagingFilter: a copy */
    const float k = 1.0f / 13.0f, center = 5.0f / 13.0f, offset = 0.0f + 0.5f;
    for (int y = 1; y < h - 1; y++) {
        const unsigned char *r[3] = {in + (size_t)(y + 1) * w, in + (size_t)y * w, in + (size_t)(y - 1) * w};
        for (int x = 1; x < w - 1; x++) {
            float ss = offset;
            for (int row = 0; row < 3; row++) {
                const float mid = row == 1 ? center : k;
                const float t0 = (float)r[row][x - 1] * k, t1 = (float)r[row][x] * mid, t2 = (float)r[row][x + 1] * k;
                const float sum = t0 + t1;
                const float line = sum + t2;
                ss += line;
            }
            out[(size_t)y * w + x] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (unsigned char)ss;
        }
    }
}

/* The ImageEnhance ops: the degenerate image, then the blend with 1 + magnitude. */
static void enhance(dp_aa_op_t op, double magnitude, const unsigned char *in, unsigned char *image, unsigned char *dg,
                    int c, int h, int w) {
    const size_t plane = (size_t)w * h, n = plane * c;
    if (op == DP_AA_BRIGHTNESS) {
        memset(dg, 0, n);
    } else if (op == DP_AA_COLOR) {
        luma_plane(in, c, plane, dg);
        for (int k = 1; k < c; k++) memcpy(dg + k * plane, dg, plane);
    } else if (op == DP_AA_CONTRAST) { /* int(ImageStat.Stat(L).mean[0] + 0.5) */
        luma_plane(in, c, plane, dg);
        long hist[256] = {0};
        for (size_t i = 0; i < plane; i++) hist[dg[i]]++;
        double sum = 0.0;
        for (int j = 0; j < 256; j++) sum += (double)j * (double)hist[j];
        memset(dg, (int)(sum / (double)plane + 0.5), n);
    } else {
        for (int k = 0; k < c; k++) smooth_plane(in + k * plane, dg + k * plane, w, h);
    }
    blend(dg, image, n, 1.0 + magnitude);
}

/* --- lookup tables ------------------------------------------------------------------------ */
/* ImageOps.autocontrast (cutoff 0) or equalize's table of one plane. */
static void plane_lut(dp_aa_op_t op, const unsigned char *p, size_t plane, unsigned char lut[256]) {
    long h[256] = {0};
    for (size_t i = 0; i < plane; i++) h[p[i]]++;
    for (int i = 0; i < 256; i++) lut[i] = (unsigned char)i;
    if (op == DP_AA_AUTOCONTRAST) {
        int lo = 0, hi = 255;
        while (lo < 255 && !h[lo]) lo++;
        while (hi > 0 && !h[hi]) hi--;
        if (hi <= lo) return;
        const double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            double v = i * scale + offset;
            long ix = (long)v; /* int(): toward zero */
            lut[i] = (unsigned char)(ix < 0 ? 0 : ix > 255 ? 255 : ix);
        }
        return;
    }
    long total = 0, last = 0, used = 0; /* equalize: over the non-empty bins */
    for (int i = 0; i < 256; i++)
        if (h[i]) total += h[i], last = h[i], used++;
    if (used <= 1) return;
    const long step = (total - last) / 255;
    if (!step) return;
    long n = step / 2;
    for (int i = 0; i < 256; i++) {
        lut[i] = (unsigned char)(n / step > 255 ? 255 : n / step); /* point() clips an entry to 0..255 */
        n += h[i];
    }
}

dp_status_t dp_aa_apply(dp_aa_op_t op, double magnitude, unsigned char *pixels, int channels, int height, int width) {
    return dp_aa_apply_interpolated(op, magnitude, DP_AA_NEAREST, pixels, channels, height, width);
}

dp_status_t dp_aa_apply_interpolated(dp_aa_op_t op, double magnitude, dp_aa_interpolation_t interpolation,
                                     unsigned char *pixels, int channels, int height, int width) {
    if ((channels != 1 && channels != 3) || height < 1 || width < 1 || op < 0 || op >= DP_AA_OPS)
        return dp_fail(DP_ERR_ARG, "auto-augment: op %d on %d x %d x %d pixels", (int)op, channels, height, width);
    const size_t plane = (size_t)width * height, n = plane * channels;
    if (op == DP_AA_POSTERIZE && !(magnitude >= 0.0 && magnitude < 9.0))
        return dp_fail(DP_ERR_ARG, "auto-augment: Posterize to %g bits (0 to 8)", magnitude);
    if (op == DP_AA_IDENTITY) return DP_OK;
    if (op >= DP_AA_POSTERIZE) { /* tables */
        unsigned char lut[256];
        for (int k = 0; k < channels; k++) {
            unsigned char *p = pixels + k * plane;
            if (op == DP_AA_POSTERIZE) {
                const int bits = (int)magnitude, mask = ~((1 << (8 - bits)) - 1);
                for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i & mask);
            } else if (op == DP_AA_SOLARIZE) {
                for (int i = 0; i < 256; i++) lut[i] = (unsigned char)((double)i < magnitude ? i : 255 - i);
            } else if (op == DP_AA_INVERT) {
                for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(255 - i);
            } else {
                plane_lut(op, p, plane, lut);
            }
            for (size_t i = 0; i < plane; i++) p[i] = lut[p[i]];
        }
        return DP_OK;
    }
    unsigned char *copy = dp_alloc(2 * n, "an auto-augment scratch image");
    if (!copy) return DP_ERR_NOMEM;
    memcpy(copy, pixels, n);
    if (op <= DP_AA_ROTATE) geometry(op, magnitude, interpolation, copy, pixels, channels, height, width);
    else enhance(op, magnitude, copy, pixels, copy + n, channels, height, width);
    free(copy);
    return DP_OK;
}

dp_status_t dp_auto_augment_apply(const dp_auto_augment_t *policy, dp_draw_fn draw, void *state, unsigned char *pixels,
                                  int channels, int height, int width) {
    dp_aa_choice_t choices[DP_RA_OPS];
    const int count = dp_auto_augment_draw(policy, height, width, draw, state, choices);
    for (int i = 0; i < count; i++)
        DP_TRY(dp_aa_apply_interpolated(choices[i].op, choices[i].magnitude, policy->interpolation, pixels, channels,
                                        height, width));
    return DP_OK;
}
