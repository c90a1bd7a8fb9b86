"""Helpers the generated kernels call: intrinsics (LLVM instructions) where a helper is a few
operations, njit functions numba inlines otherwise. The scalar ones match numpy's semantics (NaN
propagation included) for one float64."""
import importlib.util
import math
import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .vecmath import _bits, select  # noqa: F401  (select: the generated kernels' __select)
from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)


def _defer_blas_probe():
    """numba loads its registries on the first compile or cache load, and one of them probes for a BLAS
    by importing scipy.linalg: 0.15-0.25 s of loading any kernel, though kernels call no BLAS. Loaded
    here with that import failing fast, the registry is told afterwards what the probe would have
    found (whether scipy is installed), so a caller's own numba np.dot still uses BLAS: numba imports
    scipy.linalg when it first compiles one."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg.cython_blas"] = None
    try:
        import numba.np.arraymath as registry
    finally:
        del sys.modules["scipy.linalg.cython_blas"]
    if hasattr(registry, "_HAVE_BLAS"):
        registry._HAVE_BLAS = importlib.util.find_spec("scipy") is not None


_defer_blas_probe()


def _real(x):
    """A number the helpers take (as a float64, as the njit helpers they replace did)."""
    return isinstance(x, (types.Float, types.Integer, types.Boolean))


def _doubles(context, builder, kinds, args):
    return [context.cast(builder, v, t, types.float64) for v, t in zip(args, kinds)]


def _f(value):
    return ir.Constant(ir.DoubleType(), value)


def _float_intrinsic(sig, build):
    """An intrinsic returning float64 from real arguments, cast to float64, built by build(builder, *args)."""
    def codegen(context, builder, signature, args):
        return build(builder, *_doubles(context, builder, signature.args, args))
    return sig, codegen


# ---- one-line helpers as LLVM instructions (see the table lookups below for why not njit helpers) ----

@intrinsic
def sign(typingctx, x):
    """numpy's sign of a float64: 1, -1, or x * 0 (0, -0 and NaN kept)."""
    if not _real(x):
        return None

    def build(b, x):
        return b.select(b.fcmp_ordered(">", x, _f(0.0)), _f(1.0),
                        b.select(b.fcmp_ordered("<", x, _f(0.0)), _f(-1.0), b.fmul(x, _f(0.0))))
    return _float_intrinsic(types.float64(x), build)


@njit(inline="always", error_model="numpy")
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


@njit(inline="always", error_model="numpy")
def softplus(x):
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@intrinsic
def hardmul(typingctx, d, p):
    """d * p, but an exact zero d times an infinite or NaN p is zero (a hard zero derivative); the
    bits of every other product are d * p's."""
    if not (_real(d) and _real(p)):
        return None

    def build(b, d, p):
        keep = b.or_(b.fcmp_unordered("!=", d, _f(0.0)), b.fcmp_ordered("==", b.fsub(p, p), _f(0.0)))
        return b.select(keep, b.fmul(d, p), b.fmul(d, _f(0.0)))
    return _float_intrinsic(types.float64(d, p), build)


def _nan_first(name, cmp):
    """np.minimum (cmp "<=") or np.maximum (">=") of two float64: a if a NaN or a cmp b, else b."""
    def typer(typingctx, a, b):
        if not (_real(a) and _real(b)):
            return None
        return _float_intrinsic(types.float64(a, b), lambda bld, a, b: bld.select(
            bld.or_(bld.fcmp_ordered(cmp, a, b), bld.fcmp_unordered("!=", a, a)), a, b))
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


minimum = _nan_first("minimum", "<=")
maximum = _nan_first("maximum", ">=")


EXPONENT = 0x7FF0000000000000      # a float64 whose exponent bits are all ones is an infinity or a NaN
EXPONENT32 = 0x7F800000            # the same for a float32


@njit(inline="always")
def _all_ones(bits, mask):
    """Whether any of `bits` has every bit of `mask` set: an integer max reduction over the
    exponent bits, which vectorizes (a float test with an early exit does not)."""
    top = 0
    for b in bits:
        top = select(b & mask > top, b & mask, top)     # max(): its overload would be one more compile
    return top == mask


# one compiled signature, a read-only row (the drivers' inputs are read-only; a writable row converts
# to it), compiled or loaded when this module is imported
READONLY_ROW = types.Array(types.float64, 1, "C", readonly=True)


@njit(types.boolean(READONLY_ROW), nogil=True, cache=True)
def nonfinite(row):
    """Whether a contiguous float64 row holds a NaN or an infinity: the integer max of the exponent
    bits, which vectorizes. Not inlined into numba's IR: the drivers call it once per per-point array,
    and inlined copies made a kernel of many results take minutes to compile (LLVM still inlines the
    compiled function where it pays). One signature and a bit cast instead of an array view: a lazy
    function compiled twice (read-only inputs, writable results) with the view cost 0.6 s of every
    cold compile, this 0.1 s once."""
    top = 0
    for v in row:
        b = _bits(v) & EXPONENT
        top = select(b > top, b, top)          # max(): its overload would be one more compile
    return top == EXPONENT


@njit(inline="always")
def nonfinite32(row):
    """Whether a contiguous float32 row holds a NaN or an infinity."""
    return _all_ones(row.view(np.int32), EXPONENT32)


@njit(cache=True, nogil=True)
def narrow(next_row, block, wide, narrow, bad):
    """narrow[i] = wide[i] rounded to float32, and bad[i] |= that row holds a NaN or an infinity (a
    float32 overflow becomes inf): one pass while the row is in cache. Rows in blocks taken from the
    shared counter next_row[0], as the batch drivers, so that several threads can run it at once."""
    m = wide.shape[0]
    lo = fetch_add(next_row, block)
    while lo < m:
        for i in range(lo, min(m, lo + block)):
            for j in range(wide.shape[1]):
                narrow[i, j] = wide[i, j]
            if nonfinite32(narrow[i]):
                bad[i] = True
        lo = fetch_add(next_row, block)


def nonfinite_row(row):
    """The same test from Python, for one row of any float dtype and shape."""
    row = np.ascontiguousarray(row).reshape(-1)
    return bool(nonfinite32(row) if row.dtype == np.float32 else nonfinite(row.astype(np.float64, copy=False)))


@intrinsic
def fetch_add(typingctx, counter, value):
    """counter[0] += value as one atomic step (int64 counter); returns the value before. What the
    threads running a batch driver take their blocks of rows with."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and isinstance(value, types.Integer)):
        return None
    sig = types.int64(counter, types.int64)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", array.data, args[1], "monotonic")
    return sig, codegen


# ---- table lookups (engine/ir/ops/tables.py): LLVM instructions, not njit helpers, because numba inlines
# an njit helper into its IR anew at every call site (0.3 s of the Cu EAM kernel's cold compile for its
# 12 lookups). Each builds the IEEE operations the reference's Python spells, in the same order. -------

def _call_math(builder, name, x):
    """llvm.<name>.f64(x): floor and trunc, which vectorize (roundsd / vrndscalepd)."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]),
                                        f"llvm.{name}.f64")
    return builder.call(fn, [x])


@intrinsic
def table_segment(typingctx, x, x0, rdx, n):
    """The table_segment op (reference: engine/numeric/tables.py segment): x's piece, 1..n-1, as a float
    (n - 1 from p >= n, 1 below the grid and for a NaN p, whose fraction is then NaN)."""
    if not all(map(_real, (x, x0, rdx, n))):
        return None

    def build(b, x, x0, rdx, n):
        p = b.fadd(b.fmul(b.fsub(x, x0), rdx), _f(1.0))
        inside = b.select(b.fcmp_ordered(">=", p, _f(1.0)), _call_math(b, "trunc", p), _f(1.0))
        return b.select(b.fcmp_ordered(">=", p, n), b.fsub(n, _f(1.0)), inside)
    return _float_intrinsic(types.float64(x, x0, rdx, n), build)


@intrinsic
def table_fraction(typingctx, x, m, x0, rdx):
    """The table_fraction op (reference: tables.py fraction): ((x - x0) rdx + 1) - m."""
    if not all(map(_real, (x, m, x0, rdx))):
        return None

    def build(b, x, m, x0, rdx):
        return b.fsub(b.fadd(b.fmul(b.fsub(x, x0), rdx), _f(1.0)), m)
    return _float_intrinsic(types.float64(x, m, x0, rdx), build)


@intrinsic
def table_row(typingctx, t, m, ntab, n):
    """The table_row op (reference: tables.py row): piece m of table t's flat offset ((t n + m) - 1) 7,
    or NaN for a t that is not one of 0..ntab-1."""
    if not all(map(_real, (t, m, ntab, n))):
        return None

    def build(b, t, m, ntab, n):
        valid = b.and_(b.and_(b.fcmp_ordered(">=", t, _f(0.0)), b.fcmp_ordered("<", t, ntab)),
                       b.fcmp_ordered("==", t, _call_math(b, "floor", t)))
        row = b.fmul(b.fsub(b.fadd(b.fmul(t, n), m), _f(1.0)), _f(7.0))
        return b.select(valid, row, _f(math.nan))
    return _float_intrinsic(types.float64(t, m, ntab, n), build)


def _guarded(context, builder, ok, load):
    """load() (a float64 that reads memory) where ok, else NaN: a branch, so that no load runs for an
    offset that is out of range (the check is predictable; selects around it measured slower)."""
    with builder.if_else(ok) as (then, otherwise):
        with then:
            value = load()
            inside = builder.block
        with otherwise:
            outside = builder.block
    phi = builder.phi(ir.DoubleType())
    phi.add_incoming(value, inside)
    phi.add_incoming(_f(math.nan), outside)
    return phi


@intrinsic(prefer_literal=True)
def table_at(typingctx, c, x, p, k, last, rdx, xlin, order):
    """The table op for one element (reference: tables.py evaluate_at); c is the flat (T * n * 7)
    coefficient array, k a piece's offset in it (table_row), last the last piece's (T n - 1) 7, p the
    position in the piece (table_fraction), order (a literal) 0 for the value, 1-3 for derivatives.
    `last` is a constant rather than c's length, so that the tables of one shape at one k share the
    test. Pieces are p clamped to 1 (beyond the grid), and above xlin the value goes on linearly."""
    if not (isinstance(c, types.Array) and c.ndim == 1 and c.dtype == types.float64
            and isinstance(order, types.IntegerLiteral)
            and all(map(_real, (x, p, k, last, rdx, xlin)))):
        return None
    degree = order.literal_value

    def codegen(context, builder, signature, args):
        x, p, k, last, rdx, xlin = _doubles(context, builder, signature.args[1:7], args[1:7])
        cty = signature.args[0]
        array = context.make_array(cty)(context, builder, args[0])
        ok = builder.and_(builder.fcmp_ordered(">=", k, _f(0.0)), builder.fcmp_ordered("<=", k, last))

        def load():
            b = builder
            j = b.fptoui(k, ir.IntType(64))          # unsigned: k is in 0..last here
            cs = [b.load(cgutils.get_item_pointer(context, b, cty, array, [b.add(j, ir.Constant(j.type, i))],
                                                  wraparound=False)) for i in range(7)]
            clamped = b.fcmp_ordered(">", p, _f(1.0))
            q = b.select(clamped, _f(1.0), p)

            def horner(*coefficients):
                y = coefficients[0]
                for a in coefficients[1:]:
                    y = b.fadd(b.fmul(y, q), a)
                return y
            if degree == 0:
                y = horner(*cs[3:])
                beyond = b.fadd(y, b.fmul(horner(*cs[:3]), b.fsub(x, xlin)))
                return b.select(b.fcmp_ordered(">", x, xlin), beyond, y)
            if degree == 1:
                return horner(*cs[:3])
            twice = b.fmul(_f(2.0), cs[0])
            d = (b.fmul(b.fadd(b.fmul(twice, q), cs[1]), rdx) if degree == 2
                 else b.fmul(b.fmul(twice, rdx), rdx))
            return b.select(clamped, _f(0.0), d)
        return _guarded(context, builder, ok, load)
    return types.float64(c, x, p, k, last, rdx, xlin, order), codegen     # the literal: one codegen per order


@intrinsic
def take(typingctx, a, t, n):
    """The take op for one element (its reference: engine/numeric/tables.py take_reference): a[t] for t
    one of 0..n-1, else NaN."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and _real(t) and _real(n)):
        return None

    def codegen(context, builder, signature, args):
        aty = signature.args[0]
        t, n = _doubles(context, builder, signature.args[1:], args[1:])
        valid = builder.and_(builder.and_(builder.fcmp_ordered(">=", t, _f(0.0)), builder.fcmp_ordered("<", t, n)),
                             builder.fcmp_ordered("==", t, _call_math(builder, "floor", t)))
        array = context.make_array(aty)(context, builder, args[0])

        def load():
            i = builder.fptoui(t, ir.IntType(64))
            value = builder.load(cgutils.get_item_pointer(context, builder, aty, array, [i], wraparound=False))
            return context.cast(builder, value, aty.dtype, types.float64)
        return _guarded(context, builder, valid, load)
    return types.float64(a, t, n), codegen
