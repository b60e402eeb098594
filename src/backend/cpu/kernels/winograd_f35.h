/* winograd_f35.h - written by tools/winograd_tables.py (do not edit):
 * the transforms of the Winograd convolution F(3x3, 5x5) and of its
 * weight gradient F(5x5, 3x3), points 0, 1, -1, 2, -2, 1/2, infinity;
 * the script says how they are made. Row-major. */
#ifndef DPTRAIN_WINOGRAD_F35_H
#define DPTRAIN_WINOGRAD_F35_H

#define DP_WINO_M 3 /* outputs per tile side */
#define DP_WINO_R 5 /* kernel side */
#define DP_WINO_N 7 /* input tile side: M + R - 1 */

/* B^T (7, 7): input tiles, both passes */
static const float dp_wino_bt[49] = {
    -2.0f, 4.0f, (float)(5.0 / 2.0), -5.0f, (float)(-1.0 / 2.0), 1.0f, 0.0f,
    0.0f, 2.0f, -2.0f, (float)(-9.0 / 2.0), (float)(1.0 / 2.0), 1.0f, 0.0f,
    0.0f, -2.0f, 6.0f, (float)(-7.0 / 2.0), (float)(-3.0 / 2.0), 1.0f, 0.0f,
    0.0f, 1.0f, (float)(-3.0 / 2.0), -2.0f, (float)(3.0 / 2.0), 1.0f, 0.0f,
    0.0f, -1.0f, (float)(5.0 / 2.0), 0.0f, (float)(-5.0 / 2.0), 1.0f, 0.0f,
    0.0f, 4.0f, 0.0f, -5.0f, 0.0f, 1.0f, 0.0f,
    0.0f, -2.0f, 4.0f, (float)(5.0 / 2.0), -5.0f, (float)(-1.0 / 2.0), 1.0f,
};

/* G (7, 5): kernels, forward */
static const float dp_wino_g[35] = {
    (float)(-1.0 / 2.0), 0.0f, 0.0f, 0.0f, 0.0f,
    (float)(-1.0 / 3.0), (float)(-1.0 / 3.0), (float)(-1.0 / 3.0), (float)(-1.0 / 3.0), (float)(-1.0 / 3.0),
    (float)(1.0 / 9.0), (float)(-1.0 / 9.0), (float)(1.0 / 9.0), (float)(-1.0 / 9.0), (float)(1.0 / 9.0),
    (float)(1.0 / 36.0), (float)(1.0 / 18.0), (float)(1.0 / 9.0), (float)(2.0 / 9.0), (float)(4.0 / 9.0),
    (float)(-1.0 / 60.0), (float)(1.0 / 30.0), (float)(-1.0 / 15.0), (float)(2.0 / 15.0), (float)(-4.0 / 15.0),
    (float)(32.0 / 45.0), (float)(16.0 / 45.0), (float)(8.0 / 45.0), (float)(4.0 / 45.0), (float)(2.0 / 45.0),
    0.0f, 0.0f, 0.0f, 0.0f, 1.0f,
};

/* A^T (3, 7): output tiles, forward */
static const float dp_wino_at[21] = {
    1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f,
    0.0f, 1.0f, -1.0f, 2.0f, -2.0f, (float)(1.0 / 2.0), 0.0f,
    0.0f, 1.0f, 1.0f, 4.0f, 4.0f, (float)(1.0 / 4.0), 1.0f,
};

/* G' (7, 3): dy blocks, weight gradient */
static const float dp_wino_gw[21] = {
    (float)(-1.0 / 2.0), 0.0f, 0.0f,
    (float)(-1.0 / 3.0), (float)(-1.0 / 3.0), (float)(-1.0 / 3.0),
    (float)(1.0 / 9.0), (float)(-1.0 / 9.0), (float)(1.0 / 9.0),
    (float)(1.0 / 36.0), (float)(1.0 / 18.0), (float)(1.0 / 9.0),
    (float)(-1.0 / 60.0), (float)(1.0 / 30.0), (float)(-1.0 / 15.0),
    (float)(32.0 / 45.0), (float)(16.0 / 45.0), (float)(8.0 / 45.0),
    0.0f, 0.0f, 1.0f,
};

/* A'^T (5, 7): the weight gradient's output */
static const float dp_wino_atw[35] = {
    1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f,
    0.0f, 1.0f, -1.0f, 2.0f, -2.0f, (float)(1.0 / 2.0), 0.0f,
    0.0f, 1.0f, 1.0f, 4.0f, 4.0f, (float)(1.0 / 4.0), 0.0f,
    0.0f, 1.0f, -1.0f, 8.0f, -8.0f, (float)(1.0 / 8.0), 0.0f,
    0.0f, 1.0f, 1.0f, 16.0f, 16.0f, (float)(1.0 / 16.0), 1.0f,
};

/* A (7, 3): dy blocks, data gradient (the adjoint of the output transform) */
static const float dp_wino_a[21] = {
    1.0f, 0.0f, 0.0f,
    1.0f, 1.0f, 1.0f,
    1.0f, -1.0f, 1.0f,
    1.0f, 2.0f, 4.0f,
    1.0f, -2.0f, 4.0f,
    1.0f, (float)(1.0 / 2.0), (float)(1.0 / 4.0),
    0.0f, 0.0f, 1.0f,
};

/* B (7, 7): data gradient tiles (the adjoint of the input transform) */
static const float dp_wino_b[49] = {
    -2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
    4.0f, 2.0f, -2.0f, 1.0f, -1.0f, 4.0f, -2.0f,
    (float)(5.0 / 2.0), -2.0f, 6.0f, (float)(-3.0 / 2.0), (float)(5.0 / 2.0), 0.0f, 4.0f,
    -5.0f, (float)(-9.0 / 2.0), (float)(-7.0 / 2.0), -2.0f, 0.0f, -5.0f, (float)(5.0 / 2.0),
    (float)(-1.0 / 2.0), (float)(1.0 / 2.0), (float)(-3.0 / 2.0), (float)(3.0 / 2.0), (float)(-5.0 / 2.0), 0.0f, -5.0f,
    1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, (float)(-1.0 / 2.0),
    0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f,
};

#endif
