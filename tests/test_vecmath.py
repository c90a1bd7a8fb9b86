"""engine/numeric/vecmath.py: accuracy against mpmath (the exact result, 120 bits) and against numpy,
special values exactly as numpy gives them, the same bits in every loop and call, and the packed-double
code LLVM makes of a numba loop over each function.

Every function runs inside a numba loop `y[i] = f(x[i])` compiled with error_model="numpy" (the
vectorized code path, with its scalar remainder). Errors are in ulps of the exact result (the ulp of
a subnormal is 2**-1074). The tests assert at most 1 ulp; measured maxima (seeds as below, 1e5
mpmath points per function instead of the tests' 2e4; numpy: the number of float64s between ours and
numpy's result on 1e6 points, and the fraction that differ; long double: numpy's x87 evaluation of
the same function, 64-bit mantissa, on the same 1e6 points):

| function | vs mpmath | vs numpy float64 | vs long double | note |
|---|---:|---:|---:|---|
| vexp | 0.725 | 1 (2.6%) | 0.747 | 0.633 on normal results; the max is a subnormal result (*) |
| vlog | 0.524 | 1 (0.31%) | 0.537 | |
| vexpm1 | 0.512 | 1 (0.06%) | 0.517 | |
| vlog1p | 0.538 | 1 (0.11%) | 0.535 | |
| vpow | 0.704 | 1 (4.3%) | 0.739 | 0.630 on normal results |
| vsinh | 0.540 | 1 (0.69%) | 0.543 | |
| vcosh | 0.509 | 1 (3.0%) | 0.512 | |
| vtanh | 0.520 | 1 (10.6%) | 0.532 | |
| vsigmoid | 0.611 | 2 (22%) | 0.628 | numpy: 1/(1+exp(-x)), three roundings |
| vsoftplus | 0.604 | 2 (6.6%) | 0.605 | numpy: max(x,0) + log1p(exp(-abs(x))) |
| vsin | 0.558 | 1 (0.12%) | 0.569 | |x| <= 2**30; beyond: NaN marker |
| vcos | 0.539 | 1 (0.10%) | 0.558 | |
| vtan | 0.557 | 1 (0.21%) | 0.579 | |
| varctan | 0.520 | 1 (0.07%) | 0.532 | |
| varctan2 | 0.500 | 1 (0.03%) | 0.501 | |
| varcsin | 0.594 | 1 (2.4%) | 0.601 | |
| varccos | 0.575 | 1 (2.8%) | 0.612 | |
| vcbrt | 0.500 | 1 (0.60%) | 0.500 | |
| verf | 0.561 | 1 (5.0%) vs libm | - | numpy has no erf: math.erf |

(*) vexp on 1e7 more points against long double: 0.651 ulp on normal results, 0.773 on subnormal ones
(uniform in [-746, 710] and in [-745.2, -708.3]).

The sizes keep this file under about a minute: mpmath evaluates some 2e4-4e4 elementary functions
per second at 120 bits, numpy's long double 1e7.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from adgrad.engine.numeric import vecmath as vm
from numba import njit

mpmath = pytest.importorskip("mpmath")
mpmath.mp.prec = 120

BOUND = 1.0            # the requirement: within 1 ulp of the exact result everywhere
N_MP = 20_000          # random arguments per function against mpmath
N_NP = 1_000_000       # against numpy
TINY = 2.2250738585072014e-308
DBL_MAX = 1.7976931348623157e308


# ---- references ----

def _mp_sigmoid(x):
    return 1 / (1 + mpmath.exp(-x))


def _mp_softplus(x):
    return mpmath.log1p(mpmath.exp(x))


def _mp_cbrt(x):
    return mpmath.sign(x) * mpmath.cbrt(abs(x))


def _np_sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


def _np_softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


_libm_erf = np.frompyfunc(math.erf, 1, 1)


def _np_erf(x):
    """libm's erf (numpy has none)."""
    return _libm_erf(x).astype(np.float64)


def _log_uniform(rng, n, lo, hi, signs=True):
    x = np.exp(rng.uniform(math.log(lo), math.log(hi), n))
    return x * rng.choice([-1.0, 1.0], n) if signs else x


def _pio2_multiples(rng, n, kmax):
    """The doubles nearest k pi/2 for random |k| <= kmax (the reduced argument is tiny), and neighbours."""
    k = rng.integers(-kmax, kmax + 1, n)
    with mpmath.workprec(200):
        x = np.array([float(int(ki) * mpmath.pi / 2) for ki in k])
    return np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)])


def _sample(name, rng, n):
    """n (or so) arguments spread over the whole float64 domain of the function."""
    h = n // 2
    lu = _log_uniform
    return {
        "vexp": lambda: np.concatenate([rng.uniform(-746, 710, h), lu(rng, h, 1e-300, 746)]),
        "vexpm1": lambda: np.concatenate([rng.uniform(-40, 710, h), lu(rng, h, 1e-300, 746)]),
        "vlog": lambda: np.concatenate([lu(rng, h, 5e-324, DBL_MAX, False), rng.uniform(0.5, 2, h)]),
        "vlog1p": lambda: np.concatenate([lu(rng, h // 2, 1e-300, DBL_MAX, False), -lu(rng, h // 2, 1e-300, 1, False),
                                          lu(rng, h // 2, 1e-18, 1e-12), rng.uniform(-1, 2, h // 2)]),
        "vsinh": lambda: np.concatenate([lu(rng, h, 1e-300, 710.5), rng.uniform(-3, 3, h)]),
        "vcosh": lambda: np.concatenate([lu(rng, h, 1e-300, 710.5), rng.uniform(-3, 3, h)]),
        "vtanh": lambda: np.concatenate([lu(rng, h, 1e-300, 25), rng.uniform(-3, 3, h)]),
        "vsigmoid": lambda: np.concatenate([lu(rng, h, 1e-300, 750), rng.uniform(-40, 40, h)]),
        "vsoftplus": lambda: np.concatenate([lu(rng, h, 1e-300, 750), rng.uniform(-40, 40, h)]),
        "vsin": lambda: np.concatenate([lu(rng, h, 1e-300, vm.TRIG_MAX), rng.uniform(-10, 10, h // 2),
                                        _pio2_multiples(rng, h // 6, 2 ** 29)]),
        "varctan": lambda: np.concatenate([lu(rng, h, 1e-300, 1e300), rng.uniform(-3, 3, h)]),
        "varcsin": lambda: np.concatenate([lu(rng, h, 1e-300, 1), rng.uniform(-1, 1, h // 2),
                                           (1 - lu(rng, h // 2, 1e-16, 1, False)) * rng.choice([-1.0, 1.0], h // 2)]),
        "vcbrt": lambda: np.concatenate([lu(rng, h, 5e-324, DBL_MAX), rng.uniform(-10, 10, h)]),
        "verf": lambda: np.concatenate([lu(rng, h, 1e-300, 10), rng.uniform(-7, 7, h // 2), rng.uniform(0.4, 2.2, h // 2)]),
    }[{"vcos": "vsin", "vtan": "vsin", "varccos": "varcsin"}.get(name, name)]()


def _sample2(name, rng, n):
    if name == "varctan2":
        return _log_uniform(rng, n, 1e-300, 1e300), _log_uniform(rng, n, 1e-300, 1e300)
    # pow: results over the whole range (y = t / log x), small y, and negative x with integer y
    h = n // 3
    x = _log_uniform(rng, h, 1e-300, 1e300, False)
    t = rng.uniform(-745, 709.7, h)
    xn = -_log_uniform(rng, h, 0.01, 100, False)
    yn = np.round(rng.uniform(-150, 150, h))
    xs = _log_uniform(rng, h, 1e-3, 1e3, False)
    return np.concatenate([x, xn, xs]), np.concatenate([t / np.log(x), yn, rng.uniform(-3, 3, h)])


UNARY = {   # name: (mpmath, numpy float64, numpy on long double)
    "vexp": (mpmath.exp, np.exp, np.exp),
    "vlog": (mpmath.log, np.log, np.log),
    "vexpm1": (mpmath.expm1, np.expm1, np.expm1),
    "vlog1p": (mpmath.log1p, np.log1p, np.log1p),
    "vsinh": (mpmath.sinh, np.sinh, np.sinh),
    "vcosh": (mpmath.cosh, np.cosh, np.cosh),
    "vtanh": (mpmath.tanh, np.tanh, np.tanh),
    "vsigmoid": (_mp_sigmoid, _np_sigmoid, _np_sigmoid),
    "vsoftplus": (_mp_softplus, _np_softplus, _np_softplus),
    "vsin": (mpmath.sin, np.sin, np.sin),
    "vcos": (mpmath.cos, np.cos, np.cos),
    "vtan": (mpmath.tan, np.tan, np.tan),
    "varctan": (mpmath.atan, np.arctan, np.arctan),
    "varcsin": (mpmath.asin, np.arcsin, np.arcsin),
    "varccos": (mpmath.acos, np.arccos, np.arccos),
    "vcbrt": (_mp_cbrt, np.cbrt, np.cbrt),
    "verf": (mpmath.erf, _np_erf, None),        # numpy has no erf, so no long double reference
}
BINARY = {
    "vpow": (mpmath.power, np.power),
    "varctan2": (mpmath.atan2, np.arctan2),
}
ALL = list(UNARY) + list(BINARY)
TRIG = ("vsin", "vcos", "vtan")


# ---- the loops under test, compiled once per function ----

_LOOPS = {}


def loop(name):
    """The numba loop over vecmath's `name`: (x, y) -> y[i] = f(x[i]), or (a, b, y) for two arguments."""
    if name not in _LOOPS:
        f = getattr(vm, name)
        if name in BINARY:
            @njit(error_model="numpy")
            def run(a, b, y):
                for i in range(a.size):
                    y[i] = f(a[i], b[i])
        else:
            @njit(error_model="numpy")
            def run(x, y):
                for i in range(x.size):
                    y[i] = f(x[i])
        _LOOPS[name] = run
    return _LOOPS[name]


def apply(name, *args):
    args = [np.ascontiguousarray(a, dtype=np.float64) for a in args]
    y = np.empty_like(args[0])
    loop(name)(*args, y)
    return y


# ---- errors in ulps ----

def _ulp_exp(e):
    """The ulp of a float64 whose binary exponent (floor log2 |v|) is e."""
    return max(e, -1022) - 52


def mp_ulps(y, exact):
    """|y - exact| in ulps of exact (an mpf); 0 for the right infinity or zero when exact is beyond range."""
    if not mpmath.isfinite(exact):
        return 0.0 if y == float(exact) else math.inf
    if exact == 0:
        return 0.0 if y == 0 else math.inf
    e = exact.exp + exact.man.bit_length() - 1
    if e >= 1024 or abs(exact) >= mpmath.mpf(2) ** 1024 * (1 - mpmath.mpf(2) ** -54):
        return 0.0 if math.isinf(y) and (y > 0) == (exact > 0) else math.inf
    if math.isinf(y) or math.isnan(y):
        return math.inf
    return float(abs(mpmath.mpf(y) - exact) / mpmath.mpf(2) ** _ulp_exp(e))


def max_mp_ulps(name, args, y):
    ref = UNARY[name][0] if name in UNARY else BINARY[name][0]
    errs = [mp_ulps(float(yi), ref(*(mpmath.mpf(float(a[i])) for a in args))) for i, yi in enumerate(y)]
    i = int(np.argmax(errs))
    return errs[i], tuple(float(a[i]) for a in args)


def ulps_between(a, b):
    """The number of float64s between a and b (0 for two NaNs, inf for a NaN and a number)."""
    ia, ib = a.view(np.int64), b.view(np.int64)
    oa = np.where(ia < 0, -(ia & 0x7FFFFFFFFFFFFFFF), ia)
    ob = np.where(ib < 0, -(ib & 0x7FFFFFFFFFFFFFFF), ib)
    d = np.abs(oa - ob).astype(np.float64)
    d[np.isnan(a) & np.isnan(b)] = 0
    d[np.isnan(a) != np.isnan(b)] = np.inf
    return d


def ld_ulps(y, ref):
    """|y - ref| in ulps of ref, ref a long double array (finite results only)."""
    ok = np.isfinite(ref) & (np.abs(ref) < DBL_MAX) & np.isfinite(y)
    r, yy = ref[ok], y[ok].astype(np.longdouble)
    _, e = np.frexp(r)
    ulp = np.ldexp(np.longdouble(1), np.maximum(e.astype(np.int64) - 1, -1022) - 52)
    return np.abs(yy - r) / ulp


# ---- accuracy ----

@pytest.mark.parametrize("name", ALL)
def test_accuracy_vs_mpmath(name):
    rng = np.random.default_rng(12)
    args = _sample2(name, rng, N_MP) if name in BINARY else (_sample(name, rng, N_MP),)
    y = apply(name, *args)
    worst, at = max_mp_ulps(name, args, y)
    assert worst <= BOUND, f"{name}{at}: {worst:.3f} ulp"


@pytest.mark.parametrize("name", ALL)
def test_accuracy_vs_numpy(name):
    """1e6 points: within 1 ulp of numpy's result (sigmoid and softplus: numpy formulas of several
    roundings, so within 2), and within 1 ulp of numpy's long double evaluation of the same function."""
    rng = np.random.default_rng(34)
    with np.errstate(all="ignore"):
        if name in BINARY:
            a, b = _sample2(name, rng, N_NP)
            y = apply(name, a, b)
            ref, ref_ld = BINARY[name][1](a, b), BINARY[name][1](a.astype(np.longdouble), b.astype(np.longdouble))
        else:
            x = _sample(name, rng, N_NP)
            y = apply(name, x)
            ld = UNARY[name][2]
            ref, ref_ld = UNARY[name][1](x), ld and ld(x.astype(np.longdouble))
    d = ulps_between(y, ref)
    assert d.max() <= (2 if name in ("vsigmoid", "vsoftplus") else 1), name
    assert ref_ld is None or ld_ulps(y, ref_ld).max() <= BOUND


# ---- special values and edges ----

EDGES = [0.0, 5e-324, 1e-310, TINY, 1e-300, 2 ** -60, 2 ** -54, 2 ** -53, 1e-16, 2 ** -27, 0.25, 0.5 - 2 ** -54,
         0.5, 0.75, 1 - 2 ** -53, 1.0, 1 + 2 ** -52, 2.0, 3.0, 10.0, 19.1, 37.0, 40.0, 700.0, 708.3964185322641,
         709.782712893384, 709.7827128933841, 710.0, 710.4758600739439, 710.475860073944, 711.0, 745.1332191019411,
         745.1332191019412, 746.0, 1e9, vm.TRIG_MAX, 2.0 ** 53, 2.0 ** 60, 1e300, DBL_MAX, math.inf, math.nan]
EDGES = np.array(EDGES + [-v for v in EDGES] + [k * math.pi / 4 for k in range(-12, 13)])


def _same(a, b):
    """Equal, with the same sign of zero, or both NaN."""
    return (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))


def _check_edges(name, args, y, ref):
    special = ~np.isfinite(ref) | (ref == 0) | ~np.isfinite(y) | (y == 0)
    bad = special & ~_same(y, ref)
    if name in TRIG:           # beyond TRIG_MAX: the NaN marker
        big = np.isfinite(args[0]) & (np.abs(args[0]) > vm.TRIG_MAX)
        assert np.isnan(y[big]).all()
        bad &= ~big
    assert not bad.any(), [(tuple(a[i] for a in args), y[i], ref[i]) for i in np.flatnonzero(bad)[:5]]
    fin = ~special & np.all([np.isfinite(a) & (a != 0) for a in args], axis=0)     # mpmath has no -0
    assert ulps_between(y[~special], ref[~special]).max(initial=0) <= 1     # e.g. atan2(inf, inf) = pi/4
    errs = [mp_ulps(float(y[i]), (UNARY.get(name) or BINARY[name])[0](*(mpmath.mpf(float(a[i])) for a in args)))
            for i in np.flatnonzero(fin)]
    assert max(errs, default=0.0) <= BOUND


@pytest.mark.parametrize("name", list(UNARY))
def test_edges(name):
    with np.errstate(all="ignore"):
        _check_edges(name, (EDGES,), apply(name, EDGES), UNARY[name][1](EDGES))


@pytest.mark.parametrize("name", list(BINARY))
def test_edges_binary(name):
    vals = np.concatenate([EDGES[::2], [0.5, -0.5, 1.5, -1.5, 2.5, -3.0, 3.0, 1e-3]])
    a, b = (v.ravel() for v in np.meshgrid(vals, vals))
    with np.errstate(all="ignore"):
        _check_edges(name, (a, b), apply(name, a, b), BINARY[name][1](a, b))


def test_trig_fallback():
    x = np.array([1.0, vm.TRIG_MAX, np.nextafter(vm.TRIG_MAX, np.inf), -1e300, np.inf, np.nan])
    flags = [vm.trig_fallback(v) for v in x]
    assert flags == [False, False, True, True, False, False]
    for name in TRIG:
        y = apply(name, x)
        assert np.isnan(y[2:]).all() and np.isfinite(y[:2]).all()


@pytest.mark.parametrize("name", ["vsinh", "vpow", "varctan2"])
def test_int_and_float32_arguments(name):
    """Ints and float32 are taken as their float64 values (the bit casts and fma convert them; a few
    functions, as compiling each takes a while)."""
    f = getattr(vm, name)
    if name in BINARY:
        @njit(error_model="numpy")
        def call(a, b):
            return f(a, b)
        cases = [((2, 3), (2.0, 3.0)), ((np.float32(0.5), -3), (0.5, -3.0))]
    else:
        @njit(error_model="numpy")
        def call(a):
            return f(a)
        cases = [((1,), (1.0,)), ((np.float32(0.25),), (0.25,)), ((np.int32(-3),), (-3.0,))]
    for args, as_float in cases:
        assert _same(np.array(call(*args)), np.array(f(*as_float)))


# ---- purity: the same bits in the vectorized loop, its scalar remainder and a call from Python ----

@pytest.mark.parametrize("name", ALL)
def test_same_bits(name):
    rng = np.random.default_rng(56)
    args = _sample2(name, rng, 999) if name in BINARY else (_sample(name, rng, 999),)
    y1 = apply(name, *args)
    y2 = np.concatenate([apply(name, *(a[s:s + 7] for a in args)) for s in range(0, args[0].size, 7)])
    f = getattr(vm, name)
    y3 = np.array([f(*(float(a[i]) for a in args)) for i in range(0, args[0].size, 37)])
    assert y1.tobytes() == y2.tobytes()
    assert y1[::37].tobytes() == y3.tobytes()


# ---- vectorization ----

PACKED = re.compile(r"^\s*v?(add|sub|mul|div|fn?madd\w*|fn?msub\w*|sqrt|min|max)pd\s+.*%[xyz]mm", re.MULTILINE)


@pytest.mark.parametrize("name", ALL)
def test_vectorized(name):
    """The loop compiles to packed-double arithmetic (scalar code has only ...sd instructions)."""
    run = loop(name)
    if not run.signatures:
        apply(name, *([np.ones(4)] * (2 if name in BINARY else 1)))
    asm = run.inspect_asm(run.signatures[0])
    assert len(PACKED.findall(asm)) >= 10, name
