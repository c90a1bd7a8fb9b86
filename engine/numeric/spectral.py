"""Spectral functions of symmetric 3x3 matrices: what the spectral ops (engine/ir/ops/spectral.py)
compute, for one matrix.

A matrix is read through its symmetric part (A + A^T)/2 = U diag(lam) U^T: `eigh3`, cyclic Jacobi,
eigenvalues ascending, U orthogonal to round-off also where eigenvalues coincide. An isotropic
matrix function F(A) = U diag(f(lam)) U^T of a scalar f of the family KINDS (x**p, log x, exp x)
has the derivatives (Daleckii-Krein; hats are components in the eigenbasis, B and C symmetric)

    dF[B]^     = f[lam_i, lam_j] B^_ij
    d2F[B, C]^ = sum_k f[lam_i, lam_k, lam_j] (B^_ik C^_kj + C^_ik B^_kj)

with the divided differences f[a, b] = (f(a) - f(b)) / (a - b) and f[a, b, c], whose limits where
nodes coincide are f'(a) and f''(a)/2. They are computed without cancellation: f[a, b] through
expm1 and log1p when a and b are close, f[a, b, c] as a Taylor series about the mean of the nodes
when all three lie within a relative SPREAD. So both derivatives are finite and accurate at three
equal eigenvalues (F = I), at two, and at any gap in between. Errors inside a nearly degenerate
eigenspace (where U is ill-determined) meet nearly equal divided differences, so they cancel.
"""
import math

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)

POW, LOG, EXP = 0, 1, 2          # the scalar functions: x**p, log(x), exp(x)
KINDS = {"pow": POW, "log": LOG, "exp": EXP}
SPREAD = 1e-2                    # below it (relative), f[a, b, c] is a Taylor series to 8 terms: error ~ SPREAD**8
MAX_SWEEPS = 50                  # Jacobi converges quadratically: 3x3 takes 4 to 6 (NaN stops at the cap)


@njit(inline="always", error_model="numpy")
def _rotate(app, aqq, apq):
    """The Jacobi rotation that zeroes a_pq: (t, s, tau) of Numerical Recipes' jacobi, with r = 1/c =
    sqrt(1 + t^2) so that s = t/r and tau = s/(1 + c) = t/(1 + r) are two independent divisions. A rotation
    is made only when |a_pq| > 1e-18 (|a_pp| + |a_qq|) (_small), so |theta| < 1e18 and sqrt(1 + theta^2)
    cannot overflow: hypot's care is not needed (it took a third of eigh3's time)."""
    theta = 0.5 * (aqq - app) / apq
    t = 1.0 / (abs(theta) + math.sqrt(1.0 + theta * theta))
    if theta < 0.0:
        t = -t
    r = math.sqrt(1.0 + t * t)
    return t, t / r, t / (1.0 + r)


@njit(inline="always", error_model="numpy")
def _mix(g, h, s, tau):
    """(g, h) rotated: (c g - s h, s g + c h) in the form that keeps round-off small."""
    return g - s * (h + g * tau), h + s * (g - h * tau)


@njit(inline="always", error_model="numpy")
def _small(apq, app, aqq):
    """Whether a_pq is below round-off of the diagonal: rotating it away changes nothing."""
    return not (abs(apq) > 1e-18 * (abs(app) + abs(aqq))) or apq == 0.0


@njit(inline="always", error_model="numpy")
def _jacobi(dp, dq, epq, erp, erq, v0p, v0q, v1p, v1q, v2p, v2q):
    """One rotation in the (p, q) plane: a_pq becomes 0; the diagonal, the third index r's
    off-diagonals and columns p, q of V are updated."""
    t, s, tau = _rotate(dp, dq, epq)
    erp, erq = _mix(erp, erq, s, tau)
    v0p, v0q = _mix(v0p, v0q, s, tau)
    v1p, v1q = _mix(v1p, v1q, s, tau)
    v2p, v2q = _mix(v2p, v2q, s, tau)
    return dp - t * epq, dq + t * epq, 0.0, erp, erq, v0p, v0q, v1p, v1q, v2p, v2q


@njit(cache=True, nogil=True, error_model="numpy")
def eigh3(a):
    """(l0, l1, l2, u00, u01, u02, u10, u11, u12, u20, u21, u22): eigenvalues ascending and the
    eigenvectors as the columns of U (row-major), of the symmetric part of A (a row-major 9-tuple)."""
    d0, d1, d2 = a[0], a[4], a[8]
    e01, e02, e12 = 0.5 * (a[1] + a[3]), 0.5 * (a[2] + a[6]), 0.5 * (a[5] + a[7])
    v00, v01, v02, v10, v11, v12, v20, v21, v22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    for _ in range(MAX_SWEEPS):
        if _small(e01, d0, d1) and _small(e02, d0, d2) and _small(e12, d1, d2):
            break
        if not _small(e01, d0, d1):                 # p, q, r = 0, 1, 2
            d0, d1, e01, e02, e12, v00, v01, v10, v11, v20, v21 = _jacobi(d0, d1, e01, e02, e12,
                                                                          v00, v01, v10, v11, v20, v21)
        if not _small(e02, d0, d2):                 # p, q, r = 0, 2, 1
            d0, d2, e02, e01, e12, v00, v02, v10, v12, v20, v22 = _jacobi(d0, d2, e02, e01, e12,
                                                                          v00, v02, v10, v12, v20, v22)
        if not _small(e12, d1, d2):                 # p, q, r = 1, 2, 0
            d1, d2, e12, e01, e02, v01, v02, v11, v12, v21, v22 = _jacobi(d1, d2, e12, e01, e02,
                                                                          v01, v02, v11, v12, v21, v22)
    if d1 < d0:                                     # sort: three compare-and-swaps of columns
        d0, d1, v00, v01, v10, v11, v20, v21 = d1, d0, v01, v00, v11, v10, v21, v20
    if d2 < d1:
        d1, d2, v01, v02, v11, v12, v21, v22 = d2, d1, v02, v01, v12, v11, v22, v21
    if d1 < d0:
        d0, d1, v00, v01, v10, v11, v20, v21 = d1, d0, v01, v00, v11, v10, v21, v20
    return d0, d1, d2, v00, v01, v02, v10, v11, v12, v20, v21, v22


@njit(cache=True, nogil=True, error_model="numpy")
def fder(kind, p, n, x):
    """The n-th derivative of the scalar function `kind` (with exponent p for POW) at x."""
    if kind == EXP:
        return np.exp(x)
    c = 1.0
    if kind == LOG:
        if n == 0:
            return np.log(x)
        for k in range(1, n):
            c *= -k
        return c / x ** n
    for k in range(n):
        c *= p - k
    return 0.0 if c == 0.0 else c * x ** (p - n)


@njit(inline="always", error_model="numpy")
def _deriv(kind, p, x):
    """(f'(x), q): q = x**(p - 1) for x**p, the power f' shares with the divided differences at x."""
    if kind != POW:
        return fder(kind, p, 1, x), 0.0
    q = x ** (p - 1.0)
    return (0.0 if p == 0.0 else p * q), q


@njit(inline="always", error_model="numpy")
def _dd1(kind, p, a, b, fa, fb, qb):
    """f[a, b] from fa = f'(a), fb = f'(b) and qb (_deriv's q at b): no power or exp computed twice."""
    if a == b:
        return fa
    d = a - b
    if kind == EXP:
        return (fa if a < b else fb) * np.expm1(abs(d)) / abs(d) if abs(d) <= 1.0 else (fa - fb) / d
    if abs(d) <= 0.5 * max(abs(a), abs(b)):      # same sign, |h| <= 1/2
        h = d / b
        if kind == LOG:
            return np.log1p(h) / d
        return qb * np.expm1(p * np.log1p(h)) / h
    return (fder(kind, p, 0, a) - fder(kind, p, 0, b)) / d


@njit(cache=True, nogil=True, error_model="numpy")
def dd1(kind, p, a, b):
    """f[a, b], exact in the limit a = b and free of cancellation when a and b are close."""
    fb, qb = _deriv(kind, p, b)
    return _dd1(kind, p, a, b, fder(kind, p, 1, a), fb, qb)


@njit(cache=True, nogil=True, error_model="numpy")
def dd2(kind, p, a, b, c):
    """f[a, b, c] (symmetric in its nodes). Within a relative SPREAD, the Taylor series about the
    nodes' mean m: sum_k f^(k+2)(m)/(k+2)! h_k, h_k the complete symmetric polynomials of the offsets
    (from their power sums by Newton's identities; h_1 = 0); else the recurrence over the widest pair."""
    lo, hi = min(a, b, c), max(a, b, c)
    if hi - lo <= SPREAD * max(abs(lo), abs(hi)):
        m = (a + b + c) / 3.0
        da, db, dc = a - m, b - m, c - m
        s2, s3 = da * da + db * db + dc * dc, da * da * da + db * db * db + dc * dc * dc
        s4 = da ** 4 + db ** 4 + dc ** 4
        s5, s6, s7 = da ** 5 + db ** 5 + dc ** 5, da ** 6 + db ** 6 + dc ** 6, da ** 7 + db ** 7 + dc ** 7
        h2 = s2 / 2.0
        h3 = s3 / 3.0
        h4 = (s2 * h2 + s4) / 4.0
        h5 = (s2 * h3 + s3 * h2 + s5) / 5.0
        h6 = (s2 * h4 + s3 * h3 + s4 * h2 + s6) / 6.0
        h7 = (s2 * h5 + s3 * h4 + s4 * h3 + s5 * h2 + s7) / 7.0
        total, fact = 0.0, 2.0
        for k, h in enumerate((1.0, 0.0, h2, h3, h4, h5, h6, h7)):
            if k > 0:
                fact *= k + 2
            if h != 0.0:
                total += fder(kind, p, k + 2, m) / fact * h
        return total
    mid = a + b + c - lo - hi
    return (dd1(kind, p, mid, hi) - dd1(kind, p, lo, mid)) / (hi - lo)


@njit(inline="always", error_model="numpy")
def to_eigenbasis(u, b):
    """The 6 distinct entries (00, 11, 22, 01, 02, 12) of U^T sym(B) U for the 9-tuples U and B."""
    s01, s02, s12 = 0.5 * (b[1] + b[3]), 0.5 * (b[2] + b[6]), 0.5 * (b[5] + b[7])
    w00 = b[0] * u[0] + s01 * u[3] + s02 * u[6]          # w = sym(B) U
    w10 = s01 * u[0] + b[4] * u[3] + s12 * u[6]
    w20 = s02 * u[0] + s12 * u[3] + b[8] * u[6]
    w01 = b[0] * u[1] + s01 * u[4] + s02 * u[7]
    w11 = s01 * u[1] + b[4] * u[4] + s12 * u[7]
    w21 = s02 * u[1] + s12 * u[4] + b[8] * u[7]
    w02 = b[0] * u[2] + s01 * u[5] + s02 * u[8]
    w12 = s01 * u[2] + b[4] * u[5] + s12 * u[8]
    w22 = s02 * u[2] + s12 * u[5] + b[8] * u[8]
    return (u[0] * w00 + u[3] * w10 + u[6] * w20, u[1] * w01 + u[4] * w11 + u[7] * w21,
            u[2] * w02 + u[5] * w12 + u[8] * w22, u[0] * w01 + u[3] * w11 + u[6] * w21,
            u[0] * w02 + u[3] * w12 + u[6] * w22, u[1] * w02 + u[4] * w12 + u[7] * w22)


@njit(inline="always", error_model="numpy")
def _row(ui0, ui1, ui2, x):
    """Row i of U X, from row i of U and the 6 entries of the symmetric X."""
    x00, x11, x22, x01, x02, x12 = x
    return ui0 * x00 + ui1 * x01 + ui2 * x02, ui0 * x01 + ui1 * x11 + ui2 * x12, ui0 * x02 + ui1 * x12 + ui2 * x22


@njit(inline="always", error_model="numpy")
def _dot(y, u, j):
    return y[0] * u[3 * j] + y[1] * u[3 * j + 1] + y[2] * u[3 * j + 2]


@njit(inline="always", error_model="numpy")
def from_eigenbasis(u, x):
    """U X U^T (9-tuple, row-major) of the symmetric X given by its entries (00, 11, 22, 01, 02, 12): the
    upper triangle, mirrored, so the result is exactly symmetric (scalarized kernels read (j, i) as (i, j))."""
    y0, y1, y2 = _row(u[0], u[1], u[2], x), _row(u[3], u[4], u[5], x), _row(u[6], u[7], u[8], x)
    a01, a02, a12 = _dot(y0, u, 1), _dot(y0, u, 2), _dot(y1, u, 2)
    return _dot(y0, u, 0), a01, a02, a01, _dot(y1, u, 1), a12, a02, a12, _dot(y2, u, 2)


# ---- the helpers generated kernels call: e is eigh3's 12-tuple, matrices are row-major 9-tuples ----------
@njit(inline="always")
def _vecs(e):
    return (e[3], e[4], e[5], e[6], e[7], e[8], e[9], e[10], e[11])


@njit(cache=True, nogil=True, error_model="numpy")
def matfun(e, kind, p):
    """F(A) = U diag(f(lam)) U^T."""
    f = (fder(kind, p, 0, e[0]), fder(kind, p, 0, e[1]), fder(kind, p, 0, e[2]))
    return from_eigenbasis(_vecs(e), (f[0], f[1], f[2], 0.0, 0.0, 0.0))


@njit(cache=True, nogil=True, error_model="numpy")
def trfun(e, kind, p):
    """tr F(A) = f(lam_0) + f(lam_1) + f(lam_2)."""
    return fder(kind, p, 0, e[0]) + fder(kind, p, 0, e[1]) + fder(kind, p, 0, e[2])


TINY, HUGE = 2.2250738585072014e-308, 1.7976931348623157e308     # the normal doubles' range


@njit(inline="always", error_model="numpy")
def _deriv_from(kind, p, x, fx):
    """_deriv(kind, p, x) from fx = f(x): x**(p - 1) = x**p / x (one rounding more than pow's) unless x = 0
    or x**p is not a normal number (then pow: 0**p / 0 is no value of 0**(p - 1))."""
    if kind == EXP:
        return fx, 0.0
    if kind == LOG:
        return 1.0 / x, 0.0
    q = fx / x if x != 0.0 and TINY <= abs(fx) <= HUGE else x ** (p - 1.0)
    return (0.0 if p == 0.0 else p * q), q


@njit(inline="always", error_model="numpy")
def _dd1_shared(kind, p, a, b, fa, fb, qb, ga, gb, lg):
    """_dd1 with f(a) = ga, f(b) = gb and lg = log1p((a - b)/b) given (shared by the functions of one matrix):
    the same expressions, no pow, log or log1p of its own."""
    if a == b or kind == EXP:
        return _dd1(kind, p, a, b, fa, fb, qb)
    d = a - b
    if abs(d) <= 0.5 * max(abs(a), abs(b)):
        if kind == LOG:
            return lg / d
        return qb * np.expm1(p * lg) / (d / b)
    return (ga - gb) / d


@njit(cache=True, nogil=True, error_model="numpy")
def matfun_dd1(e, kind, p, t=None, g=None):
    """The first divided differences f[lam_i, lam_j] as (00, 11, 22, 01, 02, 12). With t = f(lam) and g =
    log1p((lam_i - lam_j)/lam_j) for the pairs 01, 02, 12 given (what the functions of one matrix share,
    engine/opt/spectral.py), the same values without a pow, log, exp or log1p of its own."""
    l0, l1, l2 = e[0], e[1], e[2]
    if t is None or g is None:
        (f0, _), (f1, q1), (f2, q2) = _deriv(kind, p, l0), _deriv(kind, p, l1), _deriv(kind, p, l2)
        return f0, f1, f2, _dd1(kind, p, l0, l1, f0, f1, q1), _dd1(kind, p, l0, l2, f0, f2, q2), \
            _dd1(kind, p, l1, l2, f1, f2, q2)
    (f0, _), (f1, q1), (f2, q2) = _deriv_from(kind, p, l0, t[0]), _deriv_from(kind, p, l1, t[1]), \
        _deriv_from(kind, p, l2, t[2])
    return f0, f1, f2, _dd1_shared(kind, p, l0, l1, f0, f1, q1, t[0], t[1], g[0]), \
        _dd1_shared(kind, p, l0, l2, f0, f2, q2, t[0], t[2], g[1]), \
        _dd1_shared(kind, p, l1, l2, f1, f2, q2, t[1], t[2], g[2])


@njit(inline="always", error_model="numpy")
def _dd2_from(kind, p, lo, mid, hi, d_lo_mid, d_mid_hi):
    """dd2(kind, p, lo, mid, hi) for lo <= mid <= hi given f[lo, mid] and f[mid, hi] (as dd1 computes them):
    the Taylor series within SPREAD, else the recurrence over them (no divided difference computed twice)."""
    if hi - lo <= SPREAD * max(abs(lo), abs(hi)):
        return dd2(kind, p, lo, mid, hi)
    return (d_mid_hi - d_lo_mid) / (hi - lo)


@njit(cache=True, nogil=True, error_model="numpy")
def matfun_dd2(e, kind, p):
    """The second divided differences f[lam_i, lam_k, lam_j] for the index multisets
    000, 111, 222, 001, 002, 011, 022, 112, 122, 012. The eigenvalues are ascending, so the first divided
    differences of their pairs (matfun_dd1, each computed once) are those dd2's recurrence takes."""
    l0, l1, l2 = e[0], e[1], e[2]
    g00, g11, g22, g01, g02, g12 = matfun_dd1(e, kind, p)
    return (dd2(kind, p, l0, l0, l0), dd2(kind, p, l1, l1, l1), dd2(kind, p, l2, l2, l2),
            _dd2_from(kind, p, l0, l0, l1, g00, g01), _dd2_from(kind, p, l0, l0, l2, g00, g02),
            _dd2_from(kind, p, l0, l1, l1, g01, g11), _dd2_from(kind, p, l0, l2, l2, g02, g22),
            _dd2_from(kind, p, l1, l1, l2, g11, g12), _dd2_from(kind, p, l1, l2, l2, g12, g22),
            _dd2_from(kind, p, l0, l1, l2, g01, g12))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def matfun_d1(e, g, b):
    """dF[B] for the divided differences g of matfun_dd1. Inlined where a kernel calls it (numba does not
    inline its functions otherwise): a tangent makes this call in each of its directions, and the call's
    arguments and result passed through memory cost 5-9% of Ogden's P+A kernel (one thread, 2026-11-25)."""
    u = _vecs(e)
    h = to_eigenbasis(u, b)
    return from_eigenbasis(u, (g[0] * h[0], g[1] * h[1], g[2] * h[2], g[3] * h[3], g[4] * h[4], g[5] * h[5]))


@njit(cache=True, nogil=True, error_model="numpy")
def matfun_d2(e, t, b, c):
    """d2F[B, C] for the divided differences t of matfun_dd2."""
    u = _vecs(e)
    b00, b11, b22, b01, b02, b12 = to_eigenbasis(u, b)
    c00, c11, c22, c01, c02, c12 = to_eigenbasis(u, c)
    t000, t111, t222, t001, t002, t011, t022, t112, t122, t012 = t
    x00 = 2.0 * (t000 * b00 * c00 + t001 * b01 * c01 + t002 * b02 * c02)
    x11 = 2.0 * (t011 * b01 * c01 + t111 * b11 * c11 + t112 * b12 * c12)
    x22 = 2.0 * (t022 * b02 * c02 + t122 * b12 * c12 + t222 * b22 * c22)
    x01 = t001 * (b00 * c01 + c00 * b01) + t011 * (b01 * c11 + c01 * b11) + t012 * (b02 * c12 + c02 * b12)
    x02 = t002 * (b00 * c02 + c00 * b02) + t012 * (b01 * c12 + c01 * b12) + t022 * (b02 * c22 + c02 * b22)
    x12 = t012 * (b01 * c02 + c01 * b02) + t112 * (b11 * c12 + c11 * b12) + t122 * (b12 * c22 + c12 * b22)
    return from_eigenbasis(u, (x00, x11, x22, x01, x02, x12))


@njit(cache=True, nogil=True, error_model="numpy")
def eigvals_d(e, b):
    """d lam[B] = diag(U^T sym(B) U)."""
    h = to_eigenbasis(_vecs(e), b)
    return h[0], h[1], h[2]


@njit(cache=True, nogil=True, error_model="numpy")
def eigvals_dt(e, g):
    """The transpose of eigvals_d: U diag(g) U^T."""
    return from_eigenbasis(_vecs(e), (g[0], g[1], g[2], 0.0, 0.0, 0.0))
