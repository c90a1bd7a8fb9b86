"""Branch-free float64 elementary functions that LLVM vectorizes inside numba loops.

A libm call (math.exp, np.sin) in a loop keeps LLVM from vectorizing it. These functions are numba
functions made only of float and int64 arithmetic, fma, sqrt, floor and selects, so a loop such as
`for i in range(n): y[i] = vexp(x[i])` compiles to packed-double code (zmm on this AVX-512 machine,
ymm/xmm on others), 1.7-12x faster than the libm loop (benchmarks/vecmath.py):

    vexp vlog vexpm1 vlog1p vpow(x, y) vsinh vcosh vtanh vsigmoid vsoftplus
    vsin vcos vtan varctan varctan2(y, x) varcsin varccos vcbrt verf

Calling convention (what generated code emits): `from adgrad.engine.numeric.vecmath import vexp as
__vexp`, then `__vexp(x)` on a float64 (two for vpow(x, y) and varctan2(y, x), numpy's argument
order; ints and float32 are converted to float64 first); the result is a float64, numpy's value
(np.exp etc.; vsigmoid(x) = 1/(1+e**-x), vsoftplus(x) = log(1+e**x)), special values included. Each
is `@njit(inline="always", error_model="numpy")`: inlining at numba's IR level is what puts the body
in the caller's loop (a plain @njit callee stays a call, LLVM does not inline it, and the loop is
scalar again: measured 7x slower than inlined). The caller must be compiled with error_model="numpy"
too (with "python" a float division checks its divisor and may raise, and that branch stops the
vectorizer) and without fastmath. Each call site adds about 0.1-0.5 s of compile time (vpow 0.5 s); the
code generator calls a function that a kernel calls twice or more through its CALLED form (below).

Pure: the same bits on every call and in every process, vectorized lanes and scalar remainder alike
(no fastmath, no contraction; the fma is llvm.fma, correctly rounded, so the bits do not depend on
the CPU; where the CPU has no FMA, LLVM calls libm's fma: right, but slow and not vectorized).

How: Cody-Waite range reduction with fma (the reduced argument a double-double where it matters), a
minimax polynomial (benchmarks/vecmath_coefficients.py computes the coefficients with mpmath; they
are literals here), double-double arithmetic (`_two_sum`, `_two_prod`, ...) for the few leading
terms, 2**k built from int64 bits viewed as float64 (`_bits`/`_float`: LLVM bitcasts, which
vectorize), scaling in two steps so that overflow and underflow happen in one rounding, and the
special cases (inf, -inf, NaN, -0, out of domain) as selects (`select(c, a, b)`, one LLVM select,
a blend in vector code) after the main computation, never early returns. No tables, so no gathers.

Accuracy, measured against mpmath (tests/test_vecmath.py; 1e5 random arguments over each whole
domain plus edge cases, and 1e6 against numpy and numpy's long double): at most 0.61 ulp on normal
results for every function but those built on `_exp_fast` (most 0.50-0.55: the final rounding of a
double-double), and at most 0.75 ulp where the result is subnormal or just above 2**-1022 (vexp,
vexpm1, vpow, vsigmoid, vsoftplus, verf: the result is rounded to 53 bits and then once more to the
subnormal's precision). `_exp_fast` trades accuracy for speed (1 + r1 split exactly, the rest in
double, no double-double product; 2.1x faster than the double-double `_exp_red` it replaced): vexp
is within 0.65 ulp on normal results (1e7 points against long double; bound 0.76 from its terms'
roundings) and 0.78 on subnormal ones; vpow, vsigmoid and vsoftplus, which take e**x from it too
(1.1-1.3x faster than with `_exp_red`), within 0.63, 0.63 and 0.61.
The special values (signed zeros, infinities, NaN, overflow and underflow thresholds) are numpy's.

Trigonometric functions of large arguments. vsin, vcos and vtan reduce by pi/2 with a 4-part
Cody-Waite constant, which is exact enough for |x| <= TRIG_MAX (2**30, about 1.07e9). Beyond it an
exact reduction needs Payne-Hanek (the bits of 2/pi near x's exponent: a table lookup per lane,
plus a multi-word product), so there the three return NaN as a marker. A caller that may see such
arguments redoes those lanes with libm after the vectorized loop: `trig_fallback(x)` says whether
lane x needs it (finite and |x| > TRIG_MAX), e.g. a second, scalar loop
`if trig_fallback(x[i]): y[i] = math.sin(x[i])` (cheap: a compare per element, a predictable branch).
"""
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_inline = njit(inline="always", error_model="numpy")

TRIG_MAX = 1073741824.0                    # 2**30: vsin/vcos/vtan are exact to here, NaN above
INF = math.inf
NAN = math.nan
TINY = 2.2250738585072014e-308             # the smallest normal float64
SHIFT = 6755399441055744.0                 # 1.5 * 2**52: x + SHIFT rounds x to an integer in the low bits
SHIFT_BITS = 0x4338000000000000            # the bits of SHIFT
SIGN = -0x8000000000000000                 # the sign bit as an int64
MAGNITUDE = 0x7FFFFFFFFFFFFFFF             # every bit but the sign
INV_LN2 = 1.4426950408889634
LN2_H, LN2_L = 0.6931471805599453, 2.3190468138462996e-17
LN2_42, LN2_42_L = 0.6931471805598903, 5.497923018708371e-14    # ln2 to 42 bits: k * LN2_42 is exact
TWO_OVER_PI = 0.6366197723675814
PIO2_1, PIO2_2, PIO2_3, PIO2_4 = 1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33, 5.562271104316826e-50
PIO2_H, PIO2_L = PIO2_1, PIO2_2
PIO4_H, PIO4_L = 0.7853981633974483, 3.061616997868383e-17
PI_H, PI_L = 3.141592653589793, 1.2246467991473532e-16
ATAN_HALF_H, ATAN_HALF_L = 0.4636476090008061, 2.2698777452961687e-17
TWO_THIRDS_H, TWO_THIRDS_L = 0.6666666666666666, 3.700743415417188e-17
TWO_FIFTHS_L = -2.2204460492503132e-17   # 2/5 - 0.4
ERF_C0_H, ERF_C0_L = 1.1283791670955126, 1.533545961316588e-17
ERF_C3_H, ERF_C3_L = -0.37612638903183754, 1.3391897206030649e-17
ERF78_0_H, ERF78_0_L = 0.7840750610598597, -3.204544978890348e-17
ERF78_1_H, ERF78_1_L = 0.5247450452901482, 1.439496850926237e-17
ERF78_2_H, ERF78_2_L = -0.45915191462887966, -2.647338525341903e-17
ERF138_0_H, ERF138_0_L = 0.9784437332399837, -1.7028513178925588e-17
ERF138_1_H, ERF138_1_L = 0.08047225902251116, 1.0359757380047113e-18
ERF138_2_H, ERF138_2_L = -0.13076742091158064, -3.418184050234463e-18
MINUS_SIXTH_H, MINUS_SIXTH_L = -0.16666666666666666, -9.25185853854297e-18


# ---- bit casts and fma: LLVM instructions that vectorize (bitcast, llvm.fma.f64) ----

@intrinsic
def _bits(typingctx, x):
    """The int64 whose bits are float64(x)'s (x any real: the public functions take ints and float32 too)."""
    if not isinstance(x, (types.Float, types.Integer, types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(context.cast(builder, args[0], signature.args[0], types.float64), ir.IntType(64))
    return types.int64(x), codegen


@intrinsic
def _float(typingctx, i):
    """The float64 whose bits are int64 i's."""
    if i != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding, in float64 (llvm.fma.f64: vfmadd on x86 with FMA)."""
    if not all(isinstance(t, (types.Float, types.Integer, types.Boolean)) for t in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*(context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)))
    return types.float64(a, b, c), codegen


# ---- integer <-> float without cvt instructions, powers of two, double-double arithmetic ----

@intrinsic
def select(typingctx, c, a, b):
    """The select op: a where c, else b, as one LLVM select instruction (a blend in vector code). Each
    `a if c else b` in a kernel's source is a branch in numba's IR, whose SSA pass costs blocks times
    variables (1.2 s of the Tersoff kernel's compile; 0.9 -> 0.5 s for vpow's 40 selects); an njit
    helper is a function numba compiles and LLVM then inlines. Both a and b are evaluated, as every
    argument of a call is: here, arithmetic that cannot raise (error_model="numpy")."""
    if not isinstance(c, types.Boolean):
        return None
    kind = typingctx.unify_pairs(a, b)
    if kind is None:
        return None
    kind = types.unliteral(kind)

    def codegen(context, builder, signature, args):
        _, ta, tb = signature.args
        return builder.select(args[0], context.cast(builder, args[1], ta, kind),
                              context.cast(builder, args[2], tb, kind))
    return kind(c, a, b), codegen


@_inline
def _rint(x):
    """(x rounded to the nearest integer as a float64, and as an int64), for |x| < 2**51."""
    t = x + SHIFT
    return t - SHIFT, _bits(t) - SHIFT_BITS


@_inline
def _i2f(k):
    """float64(k) for an int64 |k| < 2**51."""
    return _float(k + SHIFT_BITS) - SHIFT


@_inline
def _pow2(k):
    """2**k for an int64 k in [-1022, 1023]."""
    return _float((k + 1023) << 52)


@_inline
def _scale(y, k):
    """y * 2**k for k in [-2044, 2046] with one rounding: y * 2**(k//2) is exact for y near 1, the second
    product rounds (to a subnormal, or overflows to inf) as y * 2**k would."""
    h = k >> 1
    return y * _pow2(h) * _pow2(k - h)


@_inline
def _copysign(y, x):
    """|y| with x's sign (y >= 0 or -0 expected)."""
    return _float((_bits(y) & MAGNITUDE) | (_bits(x) & SIGN))


@_inline
def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


@_inline
def _fast_two_sum(a, b):
    """_two_sum for |a| >= |b| (or a = 0)."""
    s = a + b
    return s, b - (s - a)


@_inline
def _two_prod(a, b):
    """(p, e) with p = fl(a * b) and p + e = a * b exactly."""
    p = a * b
    return p, _fma(a, b, -p)


@_inline
def _dd_mul(ah, al, bh, bl):
    """(ah + al) * (bh + bl) as a double-double."""
    p, e = _two_prod(ah, bh)
    return _fast_two_sum(p, _fma(ah, bl, _fma(al, bh, e)))


@_inline
def _dd_div(ah, al, bh, bl):
    """(ah + al) / (bh + bl) as an unnormalized double-double (q, r): q = fl(ah / bh), r the correction;
    both arguments normalized (|al| <= ulp(ah) or so)."""
    q = ah / bh
    r = _fma(-q, bh, ah) + (al - q * bl)
    return q, r / bh


# ---- exp and log kernels ----

@_inline
def _expm1_poly(r):
    """Q(r) with expm1(r) = r + r^2/2 + r^3 Q(r), |r| <= ln2/2 (weighted error 2**-59)."""
    p = _fma(r, 2.0878910886154676e-09, 2.510867618288853e-08)
    p = _fma(r, p, 2.755738701958476e-07)
    p = _fma(r, p, 2.755724532093861e-06)
    p = _fma(r, p, 2.4801587198281076e-05)
    p = _fma(r, p, 0.00019841269884918934)
    p = _fma(r, p, 0.0013888888888942625)
    p = _fma(r, p, 0.008333333333322167)
    p = _fma(r, p, 0.04166666666666658)
    return _fma(r, p, 0.16666666666666677)


@_inline
def _expm1_red(xh, xl, kf):
    """e**(xh + xl - kf ln2) - 1 as a double-double (uh, ul), for |xh - kf ln2| <= ln2/2 + tiny and
    |xl| <= ulp(xh); normalized if xl = 0. fma(-kf, LN2_H, xh) is exact (Cody-Waite, exact product)."""
    r1 = _fma(-kf, LN2_H, xh)
    rh, e = _two_sum(r1, -kf * LN2_L)
    rl = e + xl
    hh, hl = _two_prod(0.5 * rh, rh)
    s, e2 = _two_sum(rh, hh)
    s, lo = _fast_two_sum(s, e2 + hl + rh * rh * rh * _expm1_poly(rh))
    return s, _fma(rl, 1.0 + s, lo)                   # + rl e**rh: rl may be as large as ulp(xh)


@_inline
def _exp_poly(r, z):
    """P1(r) with e**r = 1 + r + r^2 (1/2 + r P1(r)), |r| <= ln2/2, z = r^2 (weighted error 2**-60.0 relative
    to e**r), evaluated as E(z) + r O(z): two Horner chains of 4 fmas instead of one of 9."""
    e = _fma(z, 2.5111234303127655e-08, 2.755723748925252e-06)
    e = _fma(z, e, 0.00019841269893306482)
    e = _fma(z, e, 0.008333333333318543)
    e = _fma(z, e, 0.1666666666666668)
    o = _fma(z, 2.08385359999e-09, 2.7557525954292037e-07)
    o = _fma(z, o, 2.4801587025842163e-05)
    o = _fma(z, o, 0.0013888888889033112)
    o = _fma(z, o, 0.041666666666666415)
    return _fma(r, o, e)


@_inline
def _exp_fast(x, xl):
    """(h, l, k) with e**(x + xl) = (h + l) 2**k to about 2**-55 relative, h + l in [0.7, 1.42], for
    |x| <= 746 and |xl| <= 2 ulp(x) (NaN passes through): x = k ln2 + r1 + rl with r1 = x - k LN2_H exact
    (fma; |r1| <= ln2/2) and rl = xl - k LN2_L, then e**r = 1 + r1 + rl + r^2 (1/2 + r P1(r)) at
    r = fl(r1 + rl). 1 + r1 is split exactly into h + e (Fast2Sum), so neither r's rounding nor 1 + r1's
    reaches the result: h + l rounds to within 0.66 ulp (measured; bound 0.76 from the terms' roundings:
    t = r^2 (...) is at most 0.054, its rounding and its error through r's are a few 2**-57)."""
    t = _fma(x, INV_LN2, SHIFT)                  # k + SHIFT: x / ln2 rounded to an integer
    kf = t - SHIFT
    r1 = _fma(kf, -LN2_H, x)
    rl = _fma(kf, -LN2_L, xl)
    r = r1 + rl
    z = r * r
    h = 1.0 + r1
    return h, ((1.0 - h) + r1) + _fma(z, _fma(r, _exp_poly(r, z), 0.5), rl), _bits(t) - SHIFT_BITS


@_inline
def _exp_red(xh, xl, lo_clamp, hi_clamp):
    """(w, k) with e**(xh + xl) = w * 2**k, w = wh + wl in [0.7, 1.42] as a double-double; xh is clamped
    to [lo_clamp, hi_clamp] (NaN passes through) and xl is dropped where it was."""
    xc = max(min(xh, hi_clamp), lo_clamp)        # numba's min/max return their first argument if NaN
    xl = select(xc == xh, xl, 0.0)
    kf, k = _rint(xc * INV_LN2)
    uh, ul = _expm1_red(xc, xl, kf)
    wh, e = _two_sum(1.0, uh)
    return wh, e + ul, k


@_inline
def _log_poly(z):
    """P(z) with log(m) = 2s + s^3 (2/3 + 2z/5 + z^2 P(z)), z = s^2 <= 0.0295 (weighted error 2**-72)."""
    p = _fma(z, 0.11910721336078564, 0.11685070178506535)
    p = _fma(z, p, 0.1333576183475348)
    p = _fma(z, p, 0.15384572928575665)
    p = _fma(z, p, 0.18181818605075573)
    p = _fma(z, p, 0.22222222220014684)
    return _fma(z, p, 0.28571428571433155)


@_inline
def _log_red(x, koff):
    """(k, sh, sl) with x 2**koff = 2**k m, m in [sqrt(1/2), sqrt(2)), for a positive normal x, and
    s = (m-1)/(m+1) = sh + sl as a double-double (m - 1 and the residual of the division are exact); then
    log x = k ln2 + 2 atanh(s) = k ln2 + 2s + s^3 B(s^2), B = 2/3 + 2z/5 + z^2 P(z), |s| <= 0.1716."""
    ix = _bits(x)
    t = ix - 0x3FE6A09E667F3BCD
    m = _float(ix - ((t >> 52) << 52))
    f = m - 1.0
    dh, dl = _two_sum(1.0, m)
    sh = f / dh
    return _i2f((t >> 52) + koff), sh, (_fma(-sh, dh, f) - sh * dl) / dh


@_inline
def _log_fast(x, koff):
    """log(x * 2**koff) as a double-double with s^3 B(s^2) in double: relative error about 2**-60 (what
    vlog, vlog1p and vsoftplus need: s^3 B is at most 1% of the result)."""
    kf, sh, sl = _log_red(x, koff)
    z = sh * sh
    t = sh * z * _fma(z, _fma(z, _log_poly(z), 0.4), TWO_THIRDS_H)
    a, e = _two_sum(kf * LN2_42, 2.0 * sh)
    return _fast_two_sum(a, e + (kf * LN2_42_L + (2.0 * sl + t)))


@_inline
def _log_dd(x, koff):
    """log(x * 2**koff) as a double-double, relative error about 2**-68 (what vpow needs: its error is
    y log x's, up to 745 times log x's): 2s, s^3 and B are double-doubles."""
    kf, sh, sl = _log_red(x, koff)
    zh, zl = _two_prod(sh, sh)
    ch, cl = _two_prod(zh, sh)
    ph, pl = _two_prod(zh, 0.4)                    # B as a double-double, z = zh + zl + 2 sh sl
    bh, e = _fast_two_sum(TWO_THIRDS_H, ph)
    bl = e + (pl + (zh * zh * _log_poly(zh) + (TWO_THIRDS_L + (0.4 * (zl + 2.0 * sh * sl) + TWO_FIFTHS_L * zh))))
    gh, gl = _dd_mul(ch, cl + zl * sh + 3.0 * zh * sl, bh, bl)
    a, e1 = _two_sum(2.0 * sh, gh)
    b, e2 = _two_sum(kf * LN2_42, a)
    return _fast_two_sum(b, e2 + (e1 + (kf * LN2_42_L + (2.0 * sl + gl))))


# ---- exp, log, expm1, log1p, pow ----

@_inline
def vexp(x):
    """e**x: _exp_fast's h + l rounded once, then scaled by 2**k (one more rounding for a subnormal result)."""
    h, l, k = _exp_fast(max(min(x, 710.0), -746.0), -0.0)    # numba's min/max return their first argument if NaN
    return _scale(h + l, k)


@_inline
def vexpm1(x):
    """e**x - 1, accurate near 0."""
    xc = max(min(x, 710.0), -40.0)
    kf, k = _rint(xc * INV_LN2)
    uh, ul = _expm1_red(xc, -0.0, kf)
    # 2**k (1 + u) - 1 = 2**k u + (2**k - 1), computed at 2**-j where 2**k would overflow
    j = select(k > 1000, 64, 0)
    p = _pow2(k - j)
    ch, cl = _two_sum(p, -_pow2(-j))
    s, e = _two_sum(p * uh, ch)
    y = (s + (e + (cl + p * ul))) * _pow2(j)
    return select(x == 0.0, x, y)


@_inline
def vlog(x):
    """The natural logarithm."""
    sub = x < TINY
    hi, lo = _log_fast(select(sub, x * 18014398509481984.0, x), select(sub, -54, 0))
    y = hi + lo
    y = select(x == 0.0, -INF, y)
    y = select(x < 0.0, NAN, y)
    return select((x == INF) | np.isnan(x), x + x, y)


@_inline
def _log1p_dd(c, a, bh, bl):
    """c + log(a + bh + bl) rounded once, for a >= 2**-53 normal and |bh + bl| <= ulp(a): log a as a
    double-double plus log(1 + q) = q - q^2/2, q = b/a (a double-double too: log a and q may cancel)."""
    lh, ll = _log_fast(a, 0)
    q = bh / a
    ql = (_fma(-q, a, bh) + bl) / a - 0.5 * q * q
    s, e = _two_sum(lh, q)
    s2, e2 = _two_sum(c, s)
    return s2 + (e2 + (e + (ll + ql)))


@_inline
def vlog1p(x):
    """log(1 + x), accurate near 0."""
    a, b = _two_sum(1.0, x)
    y = _log1p_dd(0.0, select((a < TINY) | (a == INF), 1.0, a), b, 0.0)
    y = select(x == -1.0, -INF, y)
    y = select(x < -1.0, NAN, y)
    y = select((x == INF) | np.isnan(x), x + x, y)
    return select(abs(x) < 5.551115123125783e-17, x, y)


@_inline
def _is_odd_integer(y):
    """Whether y is an odd integer."""
    h = y * 0.5
    return (np.floor(y) == y) & (np.floor(h) != h) & (abs(y) < 9007199254740992.0)


@_inline
def vpow(x, y):
    """x**y with C99/numpy semantics (also for integer y and negative x): e**(y log|x|) with log|x| and
    the product as double-doubles; log 0 = -inf and log inf = inf give the zeros and infinities."""
    ax = abs(x)
    sub = ax < TINY
    lh, ll = _log_dd(select(sub, ax * 18014398509481984.0, select(ax == INF, 1.0, ax)), select(sub, -54, 0))
    lh = select(ax == 0.0, -INF, lh)
    lh = select((ax == INF) | np.isnan(ax), ax, lh)
    zh, zl = _two_prod(y, lh)                     # |zl + y ll| <= 2 ulp(zh): _exp_fast takes it as it is
    zc = max(min(zh, 710.0), -746.0)              # numba's min/max return their first argument if NaN
    h, l, k = _exp_fast(zc, select(zc == zh, zl + y * ll, 0.0))
    r = select(ax == 1.0, 1.0, _scale(h + l, k))
    r = select((_bits(x) < 0) & _is_odd_integer(y), -r, r)
    r = select((x < 0.0) & (x > -INF) & (np.floor(y) != y), NAN, r)
    return select((y == 0.0) | (x == 1.0), 1.0, r)


# ---- sinh, cosh, tanh, sigmoid, softplus ----

@_inline
def _hyp(ax, hi_clamp):
    """For a = min(ax, hi_clamp) = (k + r) ln2, u = e**r - 1 as a double-double: (p, w, k, c) with
    p = u (2 + u) and w = 1 + u as double-doubles and c = 2**-2k (k clamped to 60). Then
    sinh a = 2**(k-1) (p + 1 - c) / w, cosh a = 2**(k-1) (p + 1 + c) / w, tanh a = (p + 1 - c) / (p + 1 + c),
    with no cancellation for small a (p ~ 2a)."""
    ac = min(ax, hi_clamp)
    kf, k = _rint(ac * INV_LN2)
    uh, ul = _expm1_red(ac, -0.0, kf)
    th, tl = _two_sum(2.0, uh)
    ph, pl = _dd_mul(uh, ul, th, tl + ul)
    wh, wl = _two_sum(1.0, uh)
    c = _pow2(-2 * min(k, 60))
    return ph, pl, wh, wl + ul, k, c


@_inline
def _hyp_sum(ph, pl, c):
    """p + 1 + c as a double-double (p = ph + pl; 1 + c kept exact as a double-double)."""
    ch, cl = _two_sum(1.0, c)
    s, e = _two_sum(ph, ch)
    return s, e + (pl + cl)


@_inline
def vsinh(x):
    """The hyperbolic sine."""
    ph, pl, wh, wl, k, c = _hyp(abs(x), 711.0)
    nh, nl = _hyp_sum(ph, pl, -c)
    qh, ql = _dd_div(nh, nl, wh, wl)
    return _copysign(_scale(qh + ql, k - 1), x)


@_inline
def vcosh(x):
    """The hyperbolic cosine."""
    ph, pl, wh, wl, k, c = _hyp(abs(x), 711.0)
    nh, nl = _hyp_sum(ph, pl, c)
    qh, ql = _dd_div(nh, nl, wh, wl)
    return _scale(qh + ql, k - 1)


@_inline
def vtanh(x):
    """The hyperbolic tangent."""
    ph, pl, _, _, _, c = _hyp(abs(x), 20.0)
    nh, nl = _hyp_sum(ph, pl, -c)
    dh, dl = _hyp_sum(ph, pl, c)
    qh, ql = _dd_div(nh, nl, dh, dl)
    return _copysign(qh + ql, x)


@_inline
def vsigmoid(x):
    """1 / (1 + e**-x), as 1 / (1 + z) for x >= 0 and z / (1 + z) for x < 0, z = e**-|x| = w 2**k."""
    h, l, k = _exp_fast(max(-abs(x), -746.0), -0.0)
    wh, wl = _fast_two_sum(h, l)
    z = _scale(wh, k)
    dh, dl = _two_sum(1.0, z)
    dl = dl + _scale(wl, k)
    neg = x < 0.0
    qh, ql = _dd_div(select(neg, wh, 1.0), select(neg, wl, 0.0), dh, dl)
    return _scale(qh + ql, select(neg, k, 0))


@_inline
def vsoftplus(x):
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|)."""
    h, l, k = _exp_fast(max(-abs(x), -746.0), -0.0)
    wh, wl = _fast_two_sum(h, l)
    a, b = _two_sum(1.0, _scale(wh, k))
    y = _log1p_dd(max(x, 0.0), a, b, _scale(wl, k))
    return select(x > 40.0, x, y)


# ---- sin, cos, tan ----

@_inline
def _sin_poly(z):
    """S1(z) with sin(r) = r - r^3/6 + r^5 S1(r^2), |r| <= pi/4 (weighted error 2**-62)."""
    p = _fma(z, -7.581591353424894e-13, 1.6058431555909933e-10)
    p = _fma(z, p, -2.505210548818885e-08)
    p = _fma(z, p, 2.7557319216752244e-06)
    p = _fma(z, p, -0.00019841269841260967)
    return _fma(z, p, 0.00833333333333333)


@_inline
def _cos_poly(z):
    """C(z) with cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (weighted error 2**-60)."""
    p = _fma(z, 4.737750758212208e-14, -1.1470284842578173e-11)
    p = _fma(z, p, 2.0876754287074018e-09)
    p = _fma(z, p, -2.7557319214999753e-07)
    p = _fma(z, p, 2.480158730157055e-05)
    p = _fma(z, p, -0.0013888888888888872)
    return _fma(z, p, 0.041666666666666664)


@_inline
def _sincos(x):
    """(sin r, cos r) as double-doubles and q, with x = q pi/2 + r, |r| <= pi/4 (for |x| <= TRIG_MAX).
    r = x - q (PIO2_1 + PIO2_2 + PIO2_3 + PIO2_4): the first product and difference are exact (fma),
    the second product exact (two_prod), so r is a double-double accurate to about 2**-130 absolute."""
    qf, q = _rint(x * TWO_OVER_PI)
    r1 = _fma(-qf, PIO2_1, x)
    t2h, t2l = _two_prod(qf, PIO2_2)
    rh, e = _two_sum(r1, -t2h)
    rl = e - (t2l + _fma(qf, PIO2_3, qf * PIO2_4))
    rh, rl = _fast_two_sum(rh, rl)
    zh, zl = _two_prod(rh, rh)
    ah, al = _two_prod(zh, rh)                             # r^3, and -r^3/6 as double-doubles
    th, tl = _two_prod(ah, MINUS_SIXTH_H)
    tl = tl + (_fma(zl, rh, al) * MINUS_SIXTH_H + ah * MINUS_SIXTH_L)
    sh, e = _two_sum(rh, th)
    sl = e + (tl + (ah * zh * _sin_poly(zh) + rl * (1.0 - 0.5 * zh)))
    ch, e = _two_sum(1.0, -0.5 * zh)
    cl = e - 0.5 * zl + zh * zh * _cos_poly(zh) - rh * rl
    return sh, sl, ch, cl, q


@_inline
def _trig_special(x, y):
    """y, or x itself for |x| < 2**-27 (sin x = tan x = x there; keeps -0), NaN for inf and |x| > TRIG_MAX."""
    y = select(abs(x) < 7.450580596923828e-09, x, y)
    return select(abs(x) <= TRIG_MAX, y, x - x + NAN)


@_inline
def trig_fallback(x):
    """Whether vsin/vcos/vtan(x) returned the NaN marker for a finite x beyond TRIG_MAX (redo with libm)."""
    return (abs(x) > TRIG_MAX) & (abs(x) < INF)


@_inline
def vsin(x):
    """The sine, for |x| <= TRIG_MAX (NaN marker above: see trig_fallback)."""
    sh, sl, ch, cl, q = _sincos(x)
    odd = (q & 1) != 0
    y = select(odd, ch + cl, sh + sl)
    y = select((q & 2) != 0, -y, y)
    return _trig_special(x, y)


@_inline
def vcos(x):
    """The cosine, for |x| <= TRIG_MAX (NaN marker above: see trig_fallback)."""
    sh, sl, ch, cl, q = _sincos(x)
    odd = (q & 1) != 0
    y = select(odd, sh + sl, ch + cl)
    y = select(((q + 1) & 2) != 0, -y, y)
    return select(abs(x) <= TRIG_MAX, y, x - x + NAN)


@_inline
def vtan(x):
    """The tangent, for |x| <= TRIG_MAX (NaN marker above: see trig_fallback)."""
    sh, sl, ch, cl, q = _sincos(x)
    sh, sl = _fast_two_sum(sh, sl)
    ch, cl = _fast_two_sum(ch, cl)
    odd = (q & 1) != 0
    qh, ql = _dd_div(select(odd, ch, sh), select(odd, cl, sl), select(odd, sh, ch), select(odd, sl, cl))
    y = qh + ql
    return _trig_special(x, select(odd, -y, y))


# ---- arctan, arctan2, arcsin, arccos ----

@_inline
def _atan_poly(z):
    """A(z) with atan(t) = t + t^3 A(t^2), |t| <= 1/4 (weighted error 2**-62)."""
    p = _fma(z, -0.04000014533328664, 0.05724865369495584)
    p = _fma(z, p, -0.0665551964346479)
    p = _fma(z, p, 0.07691827141406858)
    p = _fma(z, p, -0.09090896261362741)
    p = _fma(z, p, 0.11111110903652012)
    p = _fma(z, p, -0.1428571428381341)
    p = _fma(z, p, 0.19999999999991452)
    return _fma(z, p, -0.3333333333333332)


@_inline
def _atan01(th, tl):
    """atan(th + tl) as a double-double for t in [0, 1]: atan t = atan a + atan((t - a) / (1 + a t)) with
    a = 0, 1/2 or 1 (t - a is exact), the reduced argument |u| <= 1/4 a double-double."""
    i1 = th >= 0.25
    i2 = th >= 0.75
    a = select(i2, 1.0, select(i1, 0.5, 0.0))
    ch = select(i2, PIO4_H, select(i1, ATAN_HALF_H, 0.0))
    cl = select(i2, PIO4_L, select(i1, ATAN_HALF_L, 0.0))
    ph, pl = _two_prod(a, th)
    dh, e = _two_sum(1.0, ph)
    uh, ul = _dd_div(th - a, tl, dh, e + pl + a * tl)
    z = uh * uh
    s, e2 = _two_sum(ch, uh)
    return s, e2 + (cl + (ul * (1.0 - z) + uh * z * _atan_poly(z)))


@_inline
def varctan(x):
    """The arctangent."""
    ax = min(abs(x), 1.152921504606847e18)       # atan(2**60) rounds to pi/2; inf -> 2**60
    big = ax > 1.0
    th = select(big, 1.0 / ax, ax)
    tl = select(big, _fma(-th, ax, 1.0) / ax, 0.0)
    ah, al = _atan01(th, tl)
    h, e = _two_sum(select(big, PIO2_H, 0.0), select(big, -ah, ah))
    y = h + (e + (select(big, PIO2_L - al, al)))
    return _copysign(y, x)



@_inline
def varctan2(y, x):
    """The angle of (x, y), with C99/numpy's signed zeros and infinities."""
    ay, ax = abs(y), abs(x)
    swap = ay > ax
    n = select(swap, ax, ay)
    d = select(swap, ay, ax)
    both_inf = n == INF
    n = select(both_inf, 1.0, select((d == INF) | (d == 0.0), 0.0, n))
    d = select(both_inf | (d == INF) | (d == 0.0), 1.0, d)
    small = d < 1.4916681462400413e-154                  # 2**-510: scale so the residual is exact
    n = select(small, n * 1.157920892373162e77, n)         # 2**256
    d = select(small, d * 1.157920892373162e77, d)
    th = n / d
    tl = _fma(-th, d, n) / d                             # below 2**-960 it would be a coarse subnormal, and
    ah, al = _atan01(th, select(th > 1e-289, tl, 0.0))     # atan t = t = th there, correctly rounded
    h, e = _two_sum(select(swap, PIO2_H, 0.0), select(swap, -ah, ah))
    l = e + (select(swap, PIO2_L - al, al))
    neg = _bits(x) < 0
    h, e = _two_sum(select(neg, PI_H, 0.0), select(neg, -h, h))
    r = _copysign(h + (e + (select(neg, PI_L - l, l))), y)
    return select(np.isnan(x) | np.isnan(y), x + y, r)


@_inline
def _asin_poly(z):
    """B(z) with asin(s) = s + s^3 B(s^2), s <= 1/2 (weighted error 2**-59)."""
    p = _fma(z, 0.0336926668682298, -0.026235080753307747)
    p = _fma(z, p, 0.02489335628257779)
    p = _fma(z, p, 0.0006512815816319649)
    p = _fma(z, p, 0.010019098121222914)
    p = _fma(z, p, 0.00948199144138182)
    p = _fma(z, p, 0.01158598459422202)
    p = _fma(z, p, 0.013961871287484924)
    p = _fma(z, p, 0.017352945565834534)
    p = _fma(z, p, 0.022372151585164285)
    p = _fma(z, p, 0.03038194464527535)
    p = _fma(z, p, 0.044642857139676126)
    p = _fma(z, p, 0.07500000000002544)
    return _fma(z, p, 0.1666666666666666)


@_inline
def _asin_half(ax):
    """(big, asin(s) as a double-double): s = ax for ax <= 1/2, else s = sqrt((1 - ax) / 2) (exact z) as a
    double-double, and then asin(ax) = pi/2 - 2 asin(s). NaN for ax > 1."""
    big = ax > 0.5
    z = select(big, 0.5 * (1.0 - ax), ax * ax)
    sh = select(big, np.sqrt(z), ax)
    sl = select(big & (z > 0.0), _fma(-sh, sh, z) / (sh + sh), 0.0)
    return big, sh, sl + sh * z * _asin_poly(z)


@_inline
def varcsin(x):
    """The arcsine."""
    big, sh, sl = _asin_half(abs(x))
    h, e = _two_sum(select(big, PIO2_H, 0.0), select(big, -2.0 * sh, sh))
    y = h + (e + (select(big, PIO2_L - 2.0 * sl, sl)))
    return _copysign(y, x)


@_inline
def varccos(x):
    """The arccosine: pi/2 - asin x for |x| <= 1/2, 2 asin(s) for x > 1/2, pi - 2 asin(s) for x < -1/2."""
    big, sh, sl = _asin_half(abs(x))
    neg = x < 0.0
    ah = select(big & neg, PI_H, select(big, 0.0, PIO2_H))
    al = select(big & neg, PI_L, select(big, 0.0, PIO2_L))
    b = select(big, select(neg, -2.0, 2.0), select(neg, 1.0, -1.0))
    h, e = _two_sum(ah, b * sh)
    return h + (e + (al + b * sl))


# ---- cbrt ----

@_inline
def vcbrt(x):
    """The cube root: x = 2**(3k + j) m, a polynomial guess for cbrt(m 2**j), one Newton step, and a last
    Newton step with the residual v - y**3 computed exactly."""
    ax = abs(x)
    sub = ax < TINY
    a = select(sub, ax * 18014398509481984.0, ax)
    ia = _bits(a)
    e = (ia >> 52) - (select(sub, 1077, 1023))
    kf = np.floor((_i2f(e) + 0.5) * 0.3333333333333333)
    k = _rint(kf)[1]
    j = e - 3 * k
    mant = ia & 0x000FFFFFFFFFFFFF
    m = _float(mant | 0x3FF0000000000000)
    v = _float(mant | ((j + 1023) << 52))
    g = _fma(m, -0.010603897688531374, 0.08609135360393823)
    g = _fma(m, g, -0.3006115740319406)
    g = _fma(m, g, 0.7181539535247768)
    g = _fma(m, g, 0.5069793722436446)
    g = g * (select(j == 2, 1.5874010519681996, select(j == 1, 1.2599210498948732, 1.0)))
    g = g - (g * g * g - v) / (3.0 * g * g)
    ph, pl = _two_prod(g, g)
    r = _fma(ph, g, -v) + pl * g
    y = _copysign((g - r / (3.0 * ph)) * _pow2(k), x)
    return select((ax == 0.0) | (ax == INF) | np.isnan(x), x + x, y)


# ---- erf ----

@_inline
def _erf_a(z):
    """A(z) with erf(x) = C0 x + C3 x^3 + x^5 A(x^2), |x| <= 1/2 (weighted error 2**-57)."""
    p = _fma(z, 1.4797064085447076e-06, -1.4853237382954627e-05)
    p = _fma(z, p, 0.00012053648736227418)
    p = _fma(z, p, -0.0008548304748273756)
    p = _fma(z, p, 0.005223977460485717)
    p = _fma(z, p, -0.026866170638923364)
    return _fma(z, p, 0.1128379167094623)


@_inline
def _erf_b(u, hi):
    """Q(u) with erf(m + u) = E0 + E1 u + E2 u^2 + u^3 Q(u), |u| <= 3/8, m = 13/8 if hi else 7/8
    (weighted error 2**-60)."""
    p = _fma(u, select(hi, 6.705227077935617e-07, -3.2235788462546012e-06), select(hi, 2.5801065569585395e-06, 3.8169864424071897e-07))
    p = _fma(u, p, select(hi, -1.0611485403035514e-05, 2.902817384993576e-05))
    p = _fma(u, p, select(hi, -4.212507387145322e-06, -2.907290704291257e-05))
    p = _fma(u, p, select(hi, 8.797060152239721e-05, -0.00019296064444108965))
    p = _fma(u, p, select(hi, -0.0001256709228479867, 0.0003900580535954373))
    p = _fma(u, p, select(hi, -0.0003559792697413155, 0.0008981544113916924))
    p = _fma(u, p, select(hi, 0.0014106855369493425, -0.003256863116673308))
    p = _fma(u, p, select(hi, -0.0005765254278891251, -0.0018461468368187633))
    p = _fma(u, p, select(hi, -0.006184261534727238, 0.01859572677939012))
    p = _fma(u, p, select(hi, 0.014414781131018253, -0.01036778574631312))
    p = _fma(u, p, select(hi, -0.002134924840240348, -0.06721587738361082))
    p = _fma(u, p, select(hi, -0.049718863159089854, 0.11239656243519786))
    return _fma(u, p, select(hi, 0.11484061964670615, 0.09292360177013213))


@_inline
def _erf_r(u):
    """R(u) with erfc(4 + u) = e**-(4 + u)^2 R(u), |u| <= 2 (weighted error 2**-61)."""
    p = _fma(u, 3.652747623357095e-11, 3.7901172696845266e-10)
    p = _fma(u, p, 2.0081988479570618e-09)
    p = _fma(u, p, 5.608224262646125e-09)
    p = _fma(u, p, 1.1169981431904221e-08)
    p = _fma(u, p, 3.1207889179863174e-09)
    p = _fma(u, p, 2.5658740411693837e-08)
    p = _fma(u, p, -1.5945785483576563e-07)
    p = _fma(u, p, 6.985609563764645e-07)
    p = _fma(u, p, -3.517340395998017e-06)
    p = _fma(u, p, 1.690849423980543e-05)
    p = _fma(u, p, -7.990449864627042e-05)
    p = _fma(u, p, 0.00037035420750536054)
    p = _fma(u, p, -0.0016811819770114807)
    p = _fma(u, p, 0.007465433135422939)
    p = _fma(u, p, -0.03238350611987803)
    return _fma(u, p, 0.136999457624055)


@_inline
def _erf_small(ax):
    """erf(ax) for ax <= 1/2: C0 ax + C3 ax^3 (double-doubles) + ax^5 A(ax^2)."""
    zh, zl = _two_prod(ax, ax)
    ch, cl = _two_prod(zh, ax)                       # ax^3
    th, tl = _two_prod(ERF_C3_H, ch)
    ph, pl = _two_prod(ERF_C0_H, ax)
    s, e = _two_sum(ph, th)
    lo = pl + (ERF_C0_L * ax + (tl + ERF_C3_L * ch + ERF_C3_H * (cl + zl * ax) + ch * zh * _erf_a(zh)))
    return s + (e + lo)


@_inline
def _erf_mid(ax):
    """erf(ax) for 1/2 < ax < 2: E0 + E1 u + E2 u^2 (double-doubles) + u^3 Q(u) about m = 7/8 or 13/8."""
    hi = ax >= 1.25
    u = ax - (select(hi, 1.625, 0.875))               # exact
    ph, pl = _two_prod(select(hi, ERF138_1_H, ERF78_1_H), u)
    zh, zl = _two_prod(u, u)
    qh, ql = _two_prod(select(hi, ERF138_2_H, ERF78_2_H), zh)
    s, e = _two_sum(select(hi, ERF138_0_H, ERF78_0_H), ph)
    s, e2 = _two_sum(s, qh)
    lo = (select(hi, ERF138_0_L, ERF78_0_L)) + (select(hi, ERF138_1_L, ERF78_1_L)) * u + (
        select(hi, ERF138_2_L, ERF78_2_L)) * zh + (select(hi, ERF138_2_H, ERF78_2_H)) * zl
    return s + (e + (e2 + (pl + (ql + (lo + zh * u * _erf_b(u, hi))))))


@_inline
def verf(x):
    """The error function: a double-double-led polynomial in x for |x| <= 1/2, in |x| - 7/8 or |x| - 13/8
    below 2, then 1 - e**-x^2 R(|x| - 4) (x^2 a double-double) up to 6, where erf rounds to +-1."""
    ax = min(abs(x), 6.0)
    zh, zl = _two_prod(ax, ax)
    wh, _, k = _exp_red(-zh, -zl, -746.0, 0.0)
    yc = 1.0 - _scale(wh * _erf_r(ax - 4.0), k)
    return _copysign(select(ax <= 0.5, _erf_small(ax), select(ax < 2.0, _erf_mid(ax), yc)), x)


# ---- the same functions as calls that LLVM inlines ----

def _called(fn):
    """`fn` compiled once per process as a function that LLVM inlines where it is called (forceinline),
    instead of numba inlining its body at every call: the code generator calls this form where a
    kernel calls a function twice or more (each numba-level copy of vpow costs 0.8 s of compile time,
    the LLVM-level one little). Not cached: a caller needs its LLVM IR to inline it."""
    return njit(forceinline=True, error_model="numpy")(fn.py_func)


CALLED = {fn.py_func.__name__: _called(fn) for fn in (vexp, vexpm1, vlog, vlog1p, vpow, vsinh, vcosh, vtanh, vsigmoid,
                                             vsoftplus, vsin, vcos, vtan, varctan, varctan2, varcsin, varccos,
                                             vcbrt, verf)}
