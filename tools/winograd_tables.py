#!/usr/bin/python3
"""winograd_tables.py - writes src/backend/cpu/kernels/winograd_f35.h, the
transform matrices of the Winograd convolution F(3x3, 5x5) and of its weight
gradient F(5x5, 3x3) (src/backend/cpu/conv_winograd.c), in exact rational
arithmetic.

Toom-Cook with the n = 7 points 0, 1, -1, 2, -2, 1/2 and infinity: V is the
(n, n) Vandermonde matrix of the points (row j: the powers 0..n-1 of point
j; the row of infinity picks the leading coefficient, e_{n-1}), V_k its
evaluation of k coefficients (the first k columns, infinity's row e_{k-1}).
A correlation y_i = sum_k d_{i+k} g_k of m outputs and r taps is then
    y = V_m^T [ (V_r g) (.) (V^-T d) ]
(the transpose of the polynomial product by evaluation and interpolation).
Each row j of B^T = V^-T is scaled by f_j = prod over the other finite points
(p_j - p_l) and the same row of G = V_r divided by it, which leaves B^T with
small multiples of 1/2:
    forward          A^T = V_3^T (3, 7)   G  = V_5 / f (7, 5)   B^T (7, 7)
    weight gradient  A'^T = V_5^T (5, 7)  G' = V_3 / f (7, 3)   same B^T
    data gradient    A and B: the forward's adjoint (transposes)
Each entry is written as the C expression of its exact fraction, which the
compiler rounds to the nearest float (through double, as the division of
two integers is exact there up to the last double bit).

usage: tools/winograd_tables.py > src/backend/cpu/kernels/winograd_f35.h
"""
from fractions import Fraction as F

POINTS = [F(0), F(1), F(-1), F(2), F(-2), F(1, 2)]  # and infinity
M, R = 3, 5
N = M + R - 1


def vandermonde(cols):
    rows = [[p ** k for k in range(cols)] for p in POINTS]
    rows.append([F(int(k == cols - 1)) for k in range(cols)])
    return rows


def inverse(a):
    n = len(a)
    w = [row[:] + [F(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for c in range(n):
        p = next(i for i in range(c, n) if w[i][c] != 0)
        w[c], w[p] = w[p], w[c]
        d = w[c][c]
        w[c] = [x / d for x in w[c]]
        for i in range(n):
            if i != c and w[i][c] != 0:
                f = w[i][c]
                w[i] = [x - f * y for x, y in zip(w[i], w[c])]
    return [row[n:] for row in w]


def main():
    vi = inverse(vandermonde(N))
    f = []
    for j in range(N):
        v = F(1)
        if j < N - 1:
            for l in range(N - 1):
                if l != j:
                    v *= POINTS[j] - POINTS[l]
        f.append(v)
    vm, vr = vandermonde(M), vandermonde(R)
    tables = {
        "BT": [[f[j] * vi[k][j] for k in range(N)] for j in range(N)],
        "G": [[vr[j][k] / f[j] for k in range(R)] for j in range(N)],
        "AT": [[vm[j][i] for j in range(N)] for i in range(M)],
        "GW": [[vm[j][k] / f[j] for k in range(M)] for j in range(N)],
        "ATW": [[vr[j][i] for j in range(N)] for i in range(R)],
    }
    tables["A"] = [list(col) for col in zip(*tables["AT"])]
    tables["B"] = [list(col) for col in zip(*tables["BT"])]
    what = {
        "BT": "B^T (7, 7): input tiles, both passes",
        "G": "G (7, 5): kernels, forward",
        "AT": "A^T (3, 7): output tiles, forward",
        "GW": "G' (7, 3): dy blocks, weight gradient",
        "ATW": "A'^T (5, 7): the weight gradient's output",
        "A": "A (7, 3): dy blocks, data gradient (the adjoint of the output transform)",
        "B": "B (7, 7): data gradient tiles (the adjoint of the input transform)",
    }

    def expr(x):
        if x.denominator == 1:
            return "%d.0f" % x.numerator
        return "(float)(%d.0 / %d.0)" % (x.numerator, x.denominator)

    print("/* winograd_f35.h - written by tools/winograd_tables.py (do not edit):")
    print(" * the transforms of the Winograd convolution F(3x3, 5x5) and of its")
    print(" * weight gradient F(5x5, 3x3), points 0, 1, -1, 2, -2, 1/2, infinity;")
    print(" * the script says how they are made. Row-major. */")
    print("#ifndef DPTRAIN_WINOGRAD_F35_H")
    print("#define DPTRAIN_WINOGRAD_F35_H")
    print()
    print("#define DP_WINO_M %d /* outputs per tile side */" % M)
    print("#define DP_WINO_R %d /* kernel side */" % R)
    print("#define DP_WINO_N %d /* input tile side: M + R - 1 */" % N)
    for name, rows in tables.items():
        print()
        print("/* %s */" % what[name])
        print("static const float dp_wino_%s[%d] = {" % (name.lower(), len(rows) * len(rows[0])))
        for row in rows:
            print("    " + ", ".join(expr(x) for x in row) + ",")
        print("};")
    print()
    print("#endif")


main()
