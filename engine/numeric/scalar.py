"""Helpers the generated kernels call; numba inlines them. The scalar ones match numpy's semantics
(NaN propagation included) for one float64."""
import importlib.util
import math
import sys

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from .vecmath import _bits, select  # noqa: F401  (select: the generated kernels' __select)


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


@njit(inline="always", error_model="numpy")
def sign(x):
    return select(x > 0.0, 1.0, select(x < 0.0, -1.0, x * 0.0))


@njit(inline="always", error_model="numpy")
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


@njit(inline="always", error_model="numpy")
def softplus(x):
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@njit(inline="always", error_model="numpy")
def hardmul(d, p):
    """d * p, but an exact zero d times an infinite or NaN p is zero (a hard zero derivative); the
    bits of every other product are d * p's."""
    return select((d != 0.0) | (p - p == 0.0), d * p, d * 0.0)


@njit(inline="always", error_model="numpy")
def minimum(a, b):
    return select((a <= b) | (a != a), a, b)


@njit(inline="always", error_model="numpy")
def maximum(a, b):
    return select((a >= b) | (a != a), a, b)


EXPONENT = 0x7FF0000000000000      # a float64 whose exponent bits are all ones is an infinity or a NaN
EXPONENT32 = 0x7F800000            # the same for a float32


@njit(inline="always")
def _all_ones(bits, mask):
    """Whether any of `bits` has every bit of `mask` set: an integer max reduction over the
    exponent bits, which vectorizes (a float test with an early exit does not)."""
    top = 0
    for b in bits:
        top = max(top, b & mask)
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
        top = max(top, _bits(v) & EXPONENT)
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


@njit(inline="always", error_model="numpy")
def table_segment(x, x0, rdx, n):
    """The table_segment op (reference: engine/numeric/tables.py segment): x's piece, 1..n-1, as a float."""
    p = (x - x0) * rdx + 1.0
    if p >= n:
        return float(n - 1)
    if p >= 1.0:
        return float(int(p))
    return 1.0                         # also a NaN p, whose fraction is then NaN


@njit(inline="always", error_model="numpy")
def table_fraction(x, m, x0, rdx):
    """The table_fraction op (reference: tables.py fraction)."""
    return (x - x0) * rdx + 1.0 - m


@njit(inline="always", error_model="numpy")
def table_row(t, m, ntab, n):
    """The table_row op (reference: tables.py row): piece m of table t's flat offset, or NaN."""
    if t >= 0.0 and t < ntab and t == math.floor(t):
        return (t * n + m - 1.0) * 7.0
    return np.nan


@njit(inline="always", error_model="numpy")
def table_at(c, x, p, k, last, rdx, xlin, order):
    """The table op for one element (reference: tables.py evaluate_at); c is the flat (T * n * 7)
    coefficient array, k a piece's offset in it (table_row), last the last piece's (T n - 1) 7, p the
    position in the piece (table_fraction). `last` is a constant rather than c's length, so that the
    tables of one shape at one k share the test."""
    if not (k >= 0.0 and k <= last):
        return np.nan
    j = np.uint64(k)                   # unsigned: no wraparound of negative indices to test
    clamped = p > 1.0
    if clamped:
        p = 1.0
    if order == 0:
        y = ((c[j + np.uint64(3)] * p + c[j + np.uint64(4)]) * p + c[j + np.uint64(5)]) * p + c[j + np.uint64(6)]
        if x > xlin:
            y += ((c[j] * p + c[j + np.uint64(1)]) * p + c[j + np.uint64(2)]) * (x - xlin)
        return y
    if order == 1:
        return (c[j] * p + c[j + np.uint64(1)]) * p + c[j + np.uint64(2)]
    if clamped:
        return 0.0
    if order == 2:
        return (2.0 * c[j] * p + c[j + np.uint64(1)]) * rdx
    return 2.0 * c[j] * rdx * rdx


@njit(inline="always", error_model="numpy")
def take(a, t, n):
    """The take op for one element (its reference: engine/numeric/tables.py take_reference)."""
    if not (t >= 0.0 and t < n and t == math.floor(t)):
        return np.nan
    return a[int(t)]
