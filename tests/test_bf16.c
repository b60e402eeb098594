/* test_bf16.c - the float -> bf16 conversion of --precision bf16
 * (src/backend/cuda/bf16.h, the same code the cast kernels run), bit for
 * bit against a reference written another way: the two bf16 neighbours of
 * the float (its truncation toward zero and the next bf16 away from zero,
 * 2^128 standing for the one past the largest finite value) as doubles,
 * which hold them and the float exactly, the nearer one taken, a tie to
 * the one with an even last bit; past the largest finite value, Inf; a NaN
 * must stay a NaN of the same sign. Over every one of the 2^16 upper
 * halves with the lower halves 0, 1, 0x7fff (just below half way), 0x8000
 * (the tie), 0x8001 and 0xffff; the edge cases by name (zeros, the
 * smallest and largest subnormals, the largest finite float, the overflow
 * threshold and its neighbours, Inf, NaNs whose payload lies only in the
 * lower half or whose rounding would carry into the sign); and 10^7
 * pseudo-random bit patterns. Also: bf16 -> float -> bf16 is the identity
 * on every non-NaN bf16 value. Runs without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../src/backend/cuda/bf16.h"
#include "testing.h"

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The reference: RNE to bf16 by comparing distances in double. */
static uint16_t reference(uint32_t u) {
    const uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return 0; /* NaN: checked apart */
    if (mag == 0x7f800000u) return (uint16_t)((sign | mag) >> 16);
    const double x = fabs((double)float_of(u));
    const uint32_t low_bits = mag & 0xffff0000u; /* toward zero */
    const double low = (double)float_of(low_bits);
    /* away from zero: the next bf16 magnitude, or 2^128 past the largest finite one */
    const double high = low_bits == 0x7f7f0000u ? ldexp(1.0, 128) : (double)float_of(low_bits + 0x10000u);
    uint32_t pick;
    if (x - low < high - x) pick = low_bits;
    else if (x - low > high - x) pick = low_bits + 0x10000u;
    else pick = (low_bits & 0x10000u) ? low_bits + 0x10000u : low_bits; /* a tie: the even one */
    return (uint16_t)((sign | pick) >> 16);
}

static long checked, mismatches;

static void check(uint32_t u) {
    checked++;
    const uint16_t got = dp_bf16_from_float(float_of(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN: a NaN of the same sign */
        int ok = (got & 0x7f80u) == 0x7f80u && (got & 0x7fu) != 0 && (got & 0x8000u) == ((u >> 16) & 0x8000u);
        if (!ok && mismatches++ < 10) CHECK(0, "NaN 0x%08x became 0x%04x, not a NaN of its sign", u, got);
        return;
    }
    const uint16_t want = reference(u);
    if (got != want && mismatches++ < 10) CHECK(0, "0x%08x (%.9g): got 0x%04x, want 0x%04x", u, float_of(u), got, want);
}

int main(void) {
    /* named edge cases */
    const uint32_t edges[] = {
        0x00000000u, 0x80000000u,             /* zeros */
        0x00000001u, 0x00008000u, 0x00018000u, /* the smallest subnormal; subnormal ties to even (down, up) */
        0x007fffffu, 0x007f8000u, 0x007f7fffu, /* the largest subnormal: it rounds up into the smallest normal */
        0x00800000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, /* 1 and ties around it */
        0x7f7fffffu,                           /* the largest finite float: past the threshold, Inf */
        0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, /* below, at, past the overflow threshold */
        0xff7f8000u, 0xff7f7fffu,              /* the same, negative */
        0x7f800000u, 0xff800000u,              /* Inf */
        0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xffffffffu, 0xff800001u, /* NaNs */
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check(edges[i]);
    /* results pinned by hand: a tie to even goes down from an even bf16 and up from an odd one */
    CHECK(dp_bf16_from_float(float_of(0x3f808000u)) == 0x3f80u, "1 + 2^-8 (a tie) must round down to 1");
    CHECK(dp_bf16_from_float(float_of(0x3f818000u)) == 0x3f82u, "1 + 3 * 2^-8 (a tie) must round up");
    CHECK(dp_bf16_from_float(float_of(0x7f7f8000u)) == 0x7f80u, "the overflow threshold must round to Inf");
    CHECK(dp_bf16_from_float(float_of(0x7f7f7fffu)) == 0x7f7fu, "just below the threshold: the largest finite bf16");
    CHECK(dp_bf16_from_float(float_of(0x007fffffu)) == 0x0080u, "the largest subnormal must round up to 2^-126");
    CHECK(dp_bf16_from_float(float_of(0x00000001u)) == 0x0000u, "the smallest subnormal must round to zero");
    CHECK(dp_bf16_from_float(float_of(0x80000001u)) == 0x8000u, "the smallest negative subnormal: -0");
    CHECK(dp_bf16_from_float(float_of(0x7fffffffu)) == 0x7fffu, "a NaN whose rounding would carry into the sign");
    /* every upper half with the lower halves that decide a rounding */
    const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (size_t j = 0; j < sizeof lows / sizeof lows[0]; j++) check(hi << 16 | lows[j]);
    /* 10^7 pseudo-random patterns (xorshift64*) */
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < 10000000; i++) {
        state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
        check((uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32));
    }
    /* bf16 -> float -> bf16: the identity on every non-NaN bf16 */
    long round_trip_bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) continue;
        round_trip_bad += dp_bf16_from_float(dp_bf16_to_float((uint16_t)h)) != h;
    }
    CHECK(round_trip_bad == 0, "bf16 -> float -> bf16 changed %ld values", round_trip_bad);
    CHECK(mismatches == 0, "%ld of %ld conversions differ from the reference", mismatches, checked);
    printf("  %ld conversions checked against the reference, %ld differ; round trip of 65536 bf16 values\n", checked,
           mismatches);
    return testing_finish("test_bf16");
}
