"""The polynomial coefficients of engine/numeric/vecmath.py, computed with mpmath: a Remez exchange
for the weighted minimax polynomial of each kernel on its reduced interval, at 200 bits, then rounded
to float64 (the module holds them as literals).

    python benchmarks/vecmath_coefficients.py            # every set, as Python literals
    python benchmarks/vecmath_coefficients.py EXPM1_Q constants    # only these

Each line printed under a set's name is `NAME = (c0, c1, ...)` (c0 the constant term, Horner order is
reversed in the module) and a comment with the weighted error of the float64-rounded coefficients in
bits (log2 of the max weighted error over a dense grid): the size of the approximation error relative
to the final result, so -60 means 2**-60 relative, about 0.002 ulp.
"""
import sys

import mpmath as mp

mp.mp.prec = 200


def horner(c, x):
    y = mp.mpf(0)
    for ci in reversed(c):
        y = y * x + ci
    return y


def solve(A, rhs):
    """A x = rhs by Gaussian elimination with partial pivoting (lists of mpf; mpmath's lu_solve calls the
    badly scaled Remez systems singular)."""
    n = len(A)
    M = [row[:] + [r] for row, r in zip(A, rhs)]
    for i in range(n):
        p = max(range(i, n), key=lambda k: abs(M[k][i]))
        M[i], M[p] = M[p], M[i]
        for k in range(i + 1, n):
            m = M[k][i] / M[i][i]
            for j in range(i, n + 1):
                M[k][j] -= m * M[i][j]
    x = [mp.mpf(0)] * n
    for i in reversed(range(n)):
        x[i] = (M[i][n] - sum(M[i][j] * x[j] for j in range(i + 1, n))) / M[i][i]
    return x


def _extrema(xs, err, n_ref):
    """One point of largest |err| per run of constant sign, thinned to n_ref alternating points."""
    pts = []
    for x, e in zip(xs, err):
        if pts and (e >= 0) == (pts[-1][1] >= 0):
            if abs(e) > abs(pts[-1][1]):
                pts[-1] = (x, e)
        else:
            pts.append((x, e))
    while len(pts) > n_ref:
        if len(pts) == n_ref + 1:                     # drop the smaller end
            pts.pop(0 if abs(pts[0][1]) < abs(pts[-1][1]) else -1)
            continue
        i = min(range(len(pts)), key=lambda j: abs(pts[j][1]))
        if i in (0, len(pts) - 1):
            pts.pop(i)
        else:                                         # drop it and its smaller neighbour: signs still alternate
            j = i - 1 if abs(pts[i - 1][1]) < abs(pts[i + 1][1]) else i + 1
            for k in sorted((i, j), reverse=True):
                pts.pop(k)
    return pts


def remez(f, a, b, n, w=lambda x: 1, grid=2500, iters=40):
    """c[0..n] minimizing max |w(x) (f(x) - sum c_i x^i)| on [a, b]."""
    a, b = mp.mpf(a), mp.mpf(b)
    N = n + 2
    ref = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * (j + mp.mpf(1) / 4) / (N - mp.mpf(1) / 2)) for j in range(N)]
    xs = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * j / (grid - 1)) for j in range(grid)]
    fx = [f(x) for x in xs]
    wx = [w(x) for x in xs]
    c = None
    for _ in range(iters):
        A = [[x ** i for i in range(n + 1)] + [(-1) ** j / w(x)] for j, x in enumerate(ref)]
        sol = solve(A, [f(x) for x in ref])
        c = [sol[i] for i in range(n + 1)]
        E = abs(sol[n + 1])
        err = [wi * (fi - horner(c, x)) for x, fi, wi in zip(xs, fx, wx)]
        pts = _extrema(xs, err, N)
        if len(pts) < N:
            break
        ref = [p[0] for p in pts]
        top = max(abs(e) for e in err)
        if top <= E * (1 + mp.mpf(10) ** -6):
            break
    return c


def rounded_error(c, f, a, b, w, grid=4000):
    """log2 max |w (f - p)| with the float64-rounded coefficients c."""
    a, b = mp.mpf(a), mp.mpf(b)
    cd = [mp.mpf(float(ci)) for ci in c]
    top = mp.mpf(0)
    for j in range(grid + 1):
        x = a + (b - a) * j / grid
        top = max(top, abs(w(x) * (f(x) - horner(cd, x))))
    return float(mp.log(top, 2)) if top else float("-inf")


TINY = mp.mpf(2) ** -80                  # the lower end of intervals whose functions are 0/0 at 0


def _q_exp(r):                          # (e^r - 1 - r - r^2/2) / r^3
    return (mp.expm1(r) - r - r * r / 2) / r ** 3 if abs(r) > TINY else mp.mpf(1) / 6


def _series_at_0(f, value):
    return lambda x: f(x) if abs(x) > TINY else mp.mpf(value)


_C0 = 2 / mp.sqrt(mp.pi)


def _erf_q(m):
    """Q(u) = (erf(m + u) - E0 - E1 u - E2 u^2) / u^3: E0 = erf(m), E1 = erf'(m), E2 = erf''(m)/2 = -m E1."""
    m = mp.mpf(m)
    e0, e1 = mp.erf(m), _C0 * mp.exp(-m * m)
    e2 = -m * e1
    return lambda u: (mp.erf(m + u) - e0 - e1 * u - e2 * u * u) / u ** 3 if abs(u) > TINY else (2 * m * m - 1) * e1 / 3


def _erf_w(m):
    return lambda u: abs(u) ** 3 / mp.erf(mp.mpf(m) + u)


def sets():
    """name -> (f, a, b, degree, weight, the interval's meaning)."""
    R = mp.log(2) / 2 * (1 + mp.mpf(2) ** -20)
    S = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)
    Z_LOG = S * S * (1 + mp.mpf(2) ** -20)
    Z_TRIG = (mp.pi / 4) ** 2 * (1 + mp.mpf(2) ** -20)
    return {
        # expm1(r) = r + r^2/2 + r^3 Q(r), |r| <= ln2/2; weight: relative to expm1(r)
        "EXPM1_Q": (_q_exp, -R, R, 9, lambda r: abs(r ** 3 / mp.expm1(r)) if r else 0,
                    "expm1(r) = r + r^2/2 + r^3 Q(r), |r| <= ln2/2"),
        # vexp: e^r = 1 + r + r^2 (1/2 + r P1(r)), |r| <= ln2/2 (1/2 kept exact); weight: relative to e^r,
        # the result itself (not to expm1(r) as above)
        "EXP_P1": (_series_at_0(lambda r: ((mp.expm1(r) - r) / r ** 2 - mp.mpf(1) / 2) / r, mp.mpf(1) / 6), -R, R, 9,
                   lambda r: abs(r) ** 3 / mp.exp(r), "e^r = 1 + r + r^2 (1/2 + r P1(r)), |r| <= ln2/2"),
        # log(m) = 2s + s^3 (2/3 + 2s^2/5 + s^4 P(s^2)), s = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)]
        "LOG_P": (_series_at_0(lambda z: ((2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2) / z - mp.mpf(2) / 3
                                          - 2 * z / 5) / z ** 2, mp.mpf(2) / 7),
                  TINY, Z_LOG, 6, lambda z: z ** 3 / 2, "log(m) = 2s + s^3 (2/3 + 2s^2/5 + s^4 P(s^2)), s^2 <= 0.0295"),
        # sin(r) = r - r^3/6 + r^5 S1(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4
        "SIN_S1": (_series_at_0(lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z) + z * mp.sqrt(z) / 6) / (z * z * mp.sqrt(z)),
                                mp.mpf(1) / 120),
                   TINY, Z_TRIG, 5, lambda z: z * z * mp.sqrt(z) / mp.sin(mp.sqrt(z)),
                   "sin(r) = r - r^3/6 + r^5 S1(r^2)"),
        "COS_C": (_series_at_0(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / (z * z), mp.mpf(1) / 24),
                  TINY, Z_TRIG, 6, lambda z: z * z / mp.cos(mp.sqrt(z)), "cos(r) = 1 - r^2/2 + r^4 C(r^2)"),
        # atan(t) = t + t^3 A(t^2), |t| <= 1/4
        "ATAN_A": (_series_at_0(lambda z: (mp.atan(mp.sqrt(z)) - mp.sqrt(z)) / (z * mp.sqrt(z)), -mp.mpf(1) / 3),
                   TINY, mp.mpf(1) / 16 * (1 + mp.mpf(2) ** -20), 8, lambda z: z, "atan(t) = t + t^3 A(t^2)"),
        # asin(s) = s + s^3 B(s^2), s <= 1/2
        "ASIN_B": (_series_at_0(lambda z: (mp.asin(mp.sqrt(z)) - mp.sqrt(z)) / (z * mp.sqrt(z)), mp.mpf(1) / 6),
                   TINY, mp.mpf(1) / 4, 13, lambda z: z, "asin(s) = s + s^3 B(s^2)"),
        # erf(x) = C0 x + C3 x^3 + x^5 A(x^2), |x| <= 1/2, C0 = 2/sqrt(pi) and C3 = -C0/3 double-doubles
        "ERF_A": (_series_at_0(lambda z: (mp.erf(mp.sqrt(z)) / mp.sqrt(z) - _C0 + _C0 * z / 3) / z ** 2, _C0 / 10),
                  TINY, mp.mpf(1) / 4, 6, lambda z: z * z / _C0, "erf(x) = C0 x + C3 x^3 + x^5 A(x^2), |x| <= 1/2"),
        # erf(m + u) = E0 + E1 u + E2 u^2 + u^3 Q(u), |u| <= 3/8, m = 7/8 and 13/8 (E0..E2: `constants()`)
        "ERF_B1": (_erf_q(0.875), -0.375, 0.375, 13, _erf_w(0.875), "erf(7/8 + u) = E0 + E1 u + E2 u^2 + u^3 Q(u)"),
        "ERF_B2": (_erf_q(1.625), -0.375, 0.375, 13, _erf_w(1.625), "erf(13/8 + u) = E0 + E1 u + E2 u^2 + u^3 Q(u)"),
        # erfc(4 + u) = e^{-(4+u)^2} R(u), |u| <= 2; weight: the error of erfc relative to erf
        "ERF_R": (lambda u: mp.erfc(4 + u) * mp.exp((4 + u) ** 2), -2, 2, 16,
                  lambda u: mp.exp(-(4 + u) ** 2) / mp.erf(4 + u), "erfc(4 + u) = exp(-(4+u)^2) R(u), |u| <= 2"),
        # cbrt(m) on [1, 2]: a first guess to ~1e-7 for two Newton steps
        "CBRT_G": (lambda m: mp.cbrt(m), 1, 2, 4, lambda m: 1 / mp.cbrt(m), "cbrt(m), m in [1, 2]"),
    }


def constants():
    """The split constants, as lines of Python: the double-double parts of each."""
    with mp.workprec(400):
        return _constants()


def _constants():
    ln2, pio2 = mp.log(2), mp.pi / 2
    out = []
    for name, v in [("LN2", ln2), ("PIO4", mp.pi / 4), ("PI", mp.pi), ("ATAN_HALF", mp.atan(mp.mpf(1) / 2)),
                    ("TWO_THIRDS", mp.mpf(2) / 3), ("MINUS_SIXTH", -mp.mpf(1) / 6)]:
        h = float(v)
        out.append(f"{name}_H, {name}_L = {h!r}, {float(v - h)!r}")
    out.append(f"TWO_FIFTHS_L = {float(mp.mpf(2) / 5 - 0.4)!r}")
    erfs = [(f"{n}{i}", v) for n, m in (("ERF78_", mp.mpf(7) / 8), ("ERF138_", mp.mpf(13) / 8))
            for i, v in enumerate((mp.erf(m), _C0 * mp.exp(-m * m), -m * _C0 * mp.exp(-m * m)))]
    for name, v in [("ERF_C0", _C0), ("ERF_C3", -_C0 / 3)] + erfs:
        h = float(v)
        out.append(f"{name}_H, {name}_L = {h!r}, {float(v - h)!r}")
    h42 = mp.floor(ln2 * 2 ** 42) / 2 ** 42
    out.append(f"LN2_42, LN2_42_L = {float(h42)!r}, {float(ln2 - h42)!r}    # k * LN2_42 exact for |k| < 2**11")
    parts, rest = [], pio2
    for _ in range(4):
        parts.append(float(rest))
        rest -= parts[-1]
    out.append(f"PIO2_1, PIO2_2, PIO2_3, PIO2_4 = {', '.join(repr(p) for p in parts)}")
    out.append(f"INV_LN2, TWO_OVER_PI = {float(1 / ln2)!r}, {float(2 / mp.pi)!r}")
    out.append(f"CBRT2, CBRT4 = {float(mp.cbrt(2))!r}, {float(mp.cbrt(4))!r}")
    return out


def main(names):
    if not names or "constants" in names:
        print("\n".join(constants()))
    for name, (f, a, b, n, w, what) in sets().items():
        if names and name not in names:
            continue
        c = remez(f, a, b, n, w)
        bits = rounded_error(c, f, a, b, w)
        print(f"# {what}; degree {n}, weighted error 2**{bits:.1f}")
        print(f"{name} = ({', '.join(repr(float(ci)) for ci in c)})")


if __name__ == "__main__":
    main(sys.argv[1:])
