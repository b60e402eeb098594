/* color_jitter.c - ColorJitter's draw and adjustments (color_jitter.h)
 * with PIL 9.4's arithmetic: brightness, contrast and saturation are
 * auto_augment.c's ImageEnhance ops (dp_aa_apply at factor - 1); the hue
 * is Convert.c's rgb2hsv and hsv2rgb (their float and double roundings as
 * C evaluates them on x86-64: float operands stay float, a double
 * constant makes the expression double) around numpy's uint8 addition,
 * with exact shortcuts: fmod(x, 1) of x in [5/6, 11/6] as a subtraction,
 * hsv2rgb's per-H and per-S values tabulated once an image, round() of a
 * non-negative double by its integer part (test_color_jitter checks all
 * 2^24 colours both ways).
 * Compiled with -ffp-contract=off: no fused multiply-adds, as PIL's build.
 */
#include "dptrain/color_jitter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/auto_augment.h"
#include "image_internal.h"

static const char *const op_names[DP_CJ_OPS] = {"brightness", "contrast", "saturation", "hue"};

const char *dp_cj_op_name(dp_cj_op_t op) { return op >= 0 && op < DP_CJ_OPS ? op_names[op] : "?"; }

int dp_color_jitter_on(const dp_color_jitter_t *jitter) {
    for (int k = 0; k < DP_CJ_OPS; k++)
        if (jitter->value[k] > 0.0) return 1;
    return 0;
}

dp_status_t dp_color_jitter_parse(const char *text, const char *who, dp_color_jitter_t *jitter) {
    double v[DP_CJ_OPS] = {0};
    char copy[128];
    int count = 0, ok = text && strlen(text) < sizeof copy;
    if (ok) snprintf(copy, sizeof copy, "%s", text);
    for (char *part = copy, *next; ok && part; part = next, count++) {
        next = strchr(part, ',');
        if (next) *next++ = '\0';
        char *end;
        ok = count < DP_CJ_OPS && *part && *part != ' ';
        if (ok) v[count] = strtod(part, &end) + 0.0; /* -0 is 0 */
        ok = ok && end != part && !*end && isfinite(v[count]) && v[count] >= 0.0;
    }
    if (!ok || (count != 1 && count != 3 && count != 4))
        return dp_fail(DP_ERR_ARG, "%s: '%s' is not B, B,C,S or B,C,S,H (numbers >= 0: brightness, contrast, "
                       "saturation, hue; e.g. 0.4)", who, text ? text : "");
    dp_color_jitter_t j = {{v[0], count == 1 ? v[0] : v[1], count == 1 ? v[0] : v[2], count == 4 ? v[3] : 0.0}};
    for (int k = 0; k < DP_CJ_HUE; k++)
        if (j.value[k] > DP_CJ_MAX_FACTOR)
            return dp_fail(DP_ERR_ARG, "%s: %s %g (0 to %g)", who, op_names[k], j.value[k], DP_CJ_MAX_FACTOR);
    if (j.value[DP_CJ_HUE] > DP_CJ_MAX_HUE)
        return dp_fail(DP_ERR_ARG, "%s: hue %g (0 to 0.5: adjust_hue's shift of at most half the circle)", who,
                       j.value[DP_CJ_HUE]);
    *jitter = j;
    return DP_OK;
}

/* The shortest fixed-point decimal of v that reads back as v (else %.17g). */
static void shortest(double v, char *text, size_t size) {
    for (int decimals = 0; decimals <= 17; decimals++) {
        snprintf(text, size, "%.*f", decimals, v);
        if (strtod(text, NULL) == v) return;
    }
    snprintf(text, size, "%.17g", v);
}

int dp_color_jitter_text(const dp_color_jitter_t *jitter, char *text, size_t size) {
    char part[DP_CJ_OPS][40];
    for (int k = 0; k < DP_CJ_OPS; k++) shortest(jitter->value[k], part[k], sizeof part[k]);
    return snprintf(text, size, "%s,%s,%s,%s", part[0], part[1], part[2], part[3]);
}

void dp_color_jitter_draw(const dp_color_jitter_t *jitter, dp_draw_fn draw, void *state, dp_cj_draw_t *out) {
    for (int k = 0; k < DP_CJ_OPS; k++) out->order[k] = k;
    for (int i = 0; i < DP_CJ_OPS - 1; i++) { /* randperm_cpu */
        const int z = (int)(draw(state) % (uint32_t)(DP_CJ_OPS - i)), swap = out->order[i];
        out->order[i] = out->order[i + z];
        out->order[i + z] = swap;
    }
    for (int k = 0; k < DP_CJ_OPS; k++) {
        const double v = jitter->value[k];
        out->on[k] = v > 0.0;
        out->factor[k] = k == DP_CJ_HUE ? 0.0 : 1.0;
        if (!out->on[k]) continue;
        const double lo = k == DP_CJ_HUE ? -v : fmax(0.0, 1.0 - v), hi = k == DP_CJ_HUE ? v : 1.0 + v;
        out->factor[k] = (double)dp_torch_uniform(draw(state), (float)lo, (float)hi);
    }
}

/* --- HSV (Convert.c) -------------------------------------------------------------------- */
static unsigned char clip8(int v) { return (unsigned char)(v <= 0 ? 0 : v >= 255 ? 255 : v); }

static void rgb_to_hsv_pixel(unsigned char r, unsigned char g, unsigned char b, unsigned char hsv[3]) {
    const unsigned char maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    const unsigned char minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    hsv[2] = maxc;
    if (minc == maxc) {
        hsv[0] = hsv[1] = 0;
        return;
    }
    const float cr = (float)(maxc - minc);
    const float s = cr / (float)maxc;
    float h;
    if (r == maxc) h = (float)(maxc - b) / cr - (float)(maxc - g) / cr;                   /* float */
    else if (g == maxc) h = (float)(2.0 + (float)(maxc - r) / cr - (float)(maxc - b) / cr); /* double, to float */
    else h = (float)(4.0 + (float)(maxc - g) / cr - (float)(maxc - r) / cr);
    /* fmod(h / 6 + 1, 1): the sum lies in [5/6, 11/6], where fmod is the sum or the sum - 1, both exact */
    const double turn = (double)h / 6.0 + 1.0;
    h = (float)(turn >= 1.0 ? turn - 1.0 : turn);
    hsv[0] = clip8((int)((double)h * 255.0));
    hsv[1] = clip8((int)((double)s * 255.0));
}

/* C's round() of x >= 0 (halves away from zero): x minus its integer part is exact. */
static int round_half_up(double x) {
    const int whole = (int)x;
    return x - (double)whole >= 0.5 ? whole + 1 : whole;
}

/* hsv2rgb's values of one H and one S, computed once per image: the sector i and its remainder f of H, S / 255. */
typedef struct {
    int sector[256];
    float remainder[256], saturation[256];
} hsv_tables_t;

static void hsv_tables_init(hsv_tables_t *t) {
    for (int k = 0; k < 256; k++) {
        const double sixth = (double)(float)k * 6.0 / 255.0;
        t->sector[k] = (int)floor(sixth) % 6;
        t->remainder[k] = (float)(sixth - (double)(float)(int)floor(sixth));
        t->saturation[k] = (float)((double)(float)k / 255.0);
    }
}

static void hsv_to_rgb_pixel(const hsv_tables_t *tables, unsigned char h, unsigned char s, unsigned char v,
                             unsigned char rgb[3]) {
    if (s == 0) {
        rgb[0] = rgb[1] = rgb[2] = v;
        return;
    }
    const float f = tables->remainder[h], fs = tables->saturation[s];
    const float fsf = fs * f; /* float x float */
    const double value = (double)(float)v;
    const unsigned char p = clip8(round_half_up(value * (1.0 - (double)fs)));
    const unsigned char q = clip8(round_half_up(value * (1.0 - (double)fsf)));
    const unsigned char t = clip8(round_half_up(value * (1.0 - (double)fs * (1.0 - (double)f))));
    switch (tables->sector[h]) { /* (a table of the six would be built and read on the stack: slower) */
    case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
    }
}

void dp_rgb_to_hsv(const unsigned char *in, unsigned char *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char hsv[3];
        rgb_to_hsv_pixel(in[i], in[n + i], in[2 * n + i], hsv);
        out[i] = hsv[0], out[n + i] = hsv[1], out[2 * n + i] = hsv[2];
    }
}

void dp_hsv_to_rgb(const unsigned char *in, unsigned char *out, size_t n) {
    hsv_tables_t tables;
    hsv_tables_init(&tables);
    for (size_t i = 0; i < n; i++) {
        unsigned char rgb[3];
        hsv_to_rgb_pixel(&tables, in[i], in[n + i], in[2 * n + i], rgb);
        out[i] = rgb[0], out[n + i] = rgb[1], out[2 * n + i] = rgb[2];
    }
}

/* adjust_hue: H + np.uint8(hue x 255) (the product truncated toward zero, then modulo 256), per pixel. */
static void adjust_hue(double factor, unsigned char *pixels, size_t n) {
    const unsigned char shift = (unsigned char)((int)(factor * 255.0) & 255);
    hsv_tables_t tables;
    hsv_tables_init(&tables);
    for (size_t i = 0; i < n; i++) {
        unsigned char hsv[3], rgb[3];
        rgb_to_hsv_pixel(pixels[i], pixels[n + i], pixels[2 * n + i], hsv);
        hsv_to_rgb_pixel(&tables, (unsigned char)(hsv[0] + shift), hsv[1], hsv[2], rgb);
        pixels[i] = rgb[0], pixels[n + i] = rgb[1], pixels[2 * n + i] = rgb[2];
    }
}

dp_status_t dp_cj_adjust(dp_cj_op_t op, double factor, unsigned char *pixels, int channels, int height, int width) {
    if ((channels != 1 && channels != 3) || height < 1 || width < 1 || op < 0 || op >= DP_CJ_OPS)
        return dp_fail(DP_ERR_ARG, "color-jitter: adjustment %d on %d x %d x %d pixels", (int)op, channels, height,
                       width);
    if (op == DP_CJ_HUE ? !(factor >= -DP_CJ_MAX_HUE && factor <= DP_CJ_MAX_HUE) : !(factor >= 0.0 && isfinite(factor)))
        return dp_fail(DP_ERR_ARG, "color-jitter: %s factor %g", op_names[op], factor);
    if (op == DP_CJ_HUE) {
        if (channels == 3) adjust_hue(factor, pixels, (size_t)width * height);
        return DP_OK;
    }
    /* factor - 1 is exact for a float factor down to 2^-29; below, 1 + it rounds to a float within an ulp of the
     * factor, which moves no pixel (the blend's product is under 2^-21 of a byte, truncated or rounded away) */
    const dp_aa_op_t aa = op == DP_CJ_BRIGHTNESS ? DP_AA_BRIGHTNESS
                          : op == DP_CJ_CONTRAST ? DP_AA_CONTRAST
                                                 : DP_AA_COLOR;
    return dp_aa_apply(aa, factor - 1.0, pixels, channels, height, width);
}

dp_status_t dp_cj_apply_draw(const dp_cj_draw_t *draw, unsigned char *pixels, int channels, int height, int width) {
    for (int i = 0; i < DP_CJ_OPS; i++) {
        const int op = draw->order[i];
        if (op >= 0 && op < DP_CJ_OPS && draw->on[op])
            DP_TRY(dp_cj_adjust((dp_cj_op_t)op, draw->factor[op], pixels, channels, height, width));
    }
    return DP_OK;
}

dp_status_t dp_color_jitter_apply(const dp_color_jitter_t *jitter, dp_draw_fn draw, void *state,
                                  unsigned char *pixels, int channels, int height, int width) {
    dp_cj_draw_t d;
    dp_color_jitter_draw(jitter, draw, state, &d);
    return dp_cj_apply_draw(&d, pixels, channels, height, width);
}
