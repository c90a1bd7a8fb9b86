"""Tensor and linear-algebra functions, lowered to the core ops (mul, reduce_sum, views, index_add).

No new ops means no new derivative rules: matmul and einsum are a broadcast product reduced over
the contracted axes, which the code generator fuses into one loop nest that never stores the
product (an einsum diagonal is a strided view); stack and concatenate are in-place updates of a
zero array, whose adjoints are free views; det and inv are closed forms up to 4x4 and unrolled
Gaussian elimination above, whose pivot choices are comparisons (constants to differentiation).
"""
from __future__ import annotations

import math

import numpy as np

from .lower import FUNCS, _constant_array, _Fail, _args, array_and_axes, normalize_axes


def _reshape(lw, node, x, shape):
    return lw._emit(node, "reshape", x, shape=tuple(shape))


def matmul(lw, node, a, b):
    """numpy's matmul (and dot of two vectors): vectors are promoted, batch axes broadcast."""
    if a.rank == 0 or b.rank == 0:
        raise _Fail(node, f"matmul: operands must have at least one axis, got shapes {a.shape} and {b.shape}")
    if a.rank == 1 and b.rank == 1:
        if a.shape != b.shape:
            raise _Fail(node, f"matmul: {a.shape} @ {b.shape}: inner dimensions {a.shape[0]} and {b.shape[0]} differ")
        return lw._emit(node, "reduce_sum", lw._emit(node, "mul", a, b), axes=(0,))
    if b.rank == 1 and a.shape[-1] == b.shape[0]:      # (..., m, k) @ (k,): b broadcasts along the rows
        return lw._emit(node, "reduce_sum", lw._emit(node, "mul", a, b), axes=(a.rank - 1,))
    a2 = _reshape(lw, node, a, (1,) + a.shape) if a.rank == 1 else a
    b2 = _reshape(lw, node, b, b.shape + (1,)) if b.rank == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise _Fail(node, f"matmul: {a.shape} @ {b.shape}: inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise _Fail(node, f"matmul: {a.shape} @ {b.shape}: batch dimensions do not broadcast") from None
    ea = _reshape(lw, node, a2, a2.shape + (1,))                       # (..., m, k, 1)
    eb = _reshape(lw, node, b2, b2.shape[:-2] + (1,) + b2.shape[-2:])  # (..., 1, k, n)
    prod = lw._emit(node, "mul", ea, eb)
    out = lw._emit(node, "reduce_sum", prod, axes=(prod.rank - 2,))     # (..., m, n)
    shape = batch + ((a2.shape[-2],) if a.rank > 1 else ()) + ((b2.shape[-1],) if b.rank > 1 else ())
    return _reshape(lw, node, out, shape)


def _matmul_fn(lw, node, env):
    a, b = _args(lw, node, env, 2)
    return matmul(lw, node, a, b)


def _einsum(lw, node, env):
    """numpy's einsum: explicit ('ij,jk->ik') or implicit ('ij,jk': the letters used once, sorted)
    output, '...' for leading axes that broadcast, size-1 axes broadcast, and a letter repeated in
    one operand takes its diagonal. Lowered to one broadcast product reduced over the other letters."""
    if node.keywords or len(node.args) < 2:
        raise _Fail(node, "einsum('ij,jk->ik', A, B): a subscripts string, then the operands")
    spec = lw._static(node.args[0], env)
    if not isinstance(spec, str):
        raise _Fail(node.args[0], "einsum: the first argument is a subscripts string such as 'ij,jk->ik'")
    ops = [lw._var(a, env) for a in node.args[1:]]
    lhs, arrow, out = spec.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise _Fail(node, f"einsum: {len(terms)} operand subscripts but {len(ops)} operands")
    for t in terms + [out]:
        if not all(ch in _LETTERS for ch in t.replace("...", "", 1)):
            raise _Fail(node.args[0], f"einsum: subscripts are letters with at most one '...', got '{t}'")
    terms, ellipsis = _expand_ellipses(node, terms, ops)
    if not arrow:
        once = sorted(ch for ch in set("".join(terms)) if ch in _LETTERS and "".join(terms).count(ch) == 1)
        out = ellipsis + "".join(once)
    elif "..." in out:
        out = out.replace("...", ellipsis)
    elif ellipsis:
        raise _Fail(node.args[0], "einsum: the operands' '...' axes need a '...' in the output subscripts")
    sizes = {}
    for k, (t, x) in enumerate(zip(terms, ops)):
        x, t = _diagonal(lw, node, x, t)
        terms[k], ops[k] = t, x
        for ch, d in zip(t, x.shape):
            known = sizes.setdefault(ch, d)
            if d != known and 1 not in (d, known):
                raise _Fail(node, f"einsum: subscript '{_shown(ch)}' has sizes {known} and {d}")
            sizes[ch] = max(known, d)
    if len(set(out)) != len(out) or any(ch not in sizes for ch in out):
        raise _Fail(node.args[0], f"einsum: output subscripts '{spec.partition('->')[2].strip()}' must be "
                                  f"distinct letters of the inputs")
    letters = list(out) + [ch for ch in dict.fromkeys("".join(terms)) if ch not in out]
    total = None
    for t, x in zip(terms, ops):
        present = [ch for ch in letters if ch in t]
        x = lw._emit(node, "transpose", x, perm=tuple(t.index(ch) for ch in present))
        x = _reshape(lw, node, x, [x.shape[present.index(ch)] if ch in t else 1 for ch in letters])
        total = x if total is None else lw._emit(node, "mul", total, x)
    full = tuple(sizes[ch] for ch in letters)
    if total.shape != full:
        total = lw._emit(node, "broadcast_to", total, shape=full)
    return lw._emit(node, "reduce_sum", total, axes=tuple(range(len(out), len(letters))))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ELLIPSIS_AXES = "".join(chr(0x3b1 + k) for k in range(24))    # stand-ins for the axes of '...' (Greek)


def _shown(ch):
    return "..." if ch in _ELLIPSIS_AXES else ch


def _expand_ellipses(node, terms, ops):
    """Each term with '...' spelled out in stand-in letters, aligned from the right as numpy
    broadcasts them; and the stand-ins of the longest '...' (what an output '...' means)."""
    width = 0
    for t, x in zip(terms, ops):
        named = len(t.replace("...", ""))
        if ("..." in t and named > x.rank) or ("..." not in t and named != x.rank):
            at_least = " at least" if "..." in t else ""
            raise _Fail(node, f"einsum: subscripts '{t}' need an operand of rank{at_least} {named}, "
                              f"got shape {x.shape}")
        if "..." in t:
            width = max(width, x.rank - named)
    stand_ins = _ELLIPSIS_AXES[:width]
    return [t.replace("...", stand_ins[width - (x.rank - len(t) + 3):]) for t, x in zip(terms, ops)], stand_ins


def _diagonal(lw, node, x, term):
    """x, with subscripts `term` in which a letter may repeat, as its diagonal over each repeated
    letter: one axis per distinct letter. The diagonal of d x d axes is a stride-(d + 1) view of
    their d*d elements."""
    while True:
        ch = next((c for c in term if term.count(c) > 1), None)
        if ch is None:
            return x, term
        i = term.index(ch)
        j = term.index(ch, i + 1)
        d = x.shape[i]
        if x.shape[j] != d:
            raise _Fail(node, f"einsum: subscript '{ch}' repeats over axes of sizes {d} and {x.shape[j]}")
        keep = [a for a in range(x.rank) if a not in (i, j)]
        x = lw._emit(node, "transpose", x, perm=tuple(keep) + (i, j))
        x = _reshape(lw, node, x, x.shape[:-2] + (d * d,))
        x = lw._emit(node, "getitem", x, index=tuple((0, n, 1) for n in x.shape[:-1]) + ((0, d * d, d + 1),))
        term = "".join(term[a] for a in keep) + ch


def _outer(lw, node, env):
    a, b = _args(lw, node, env, 2)
    a = _reshape(lw, node, a, (a.size, 1))
    b = _reshape(lw, node, b, (b.size,))
    return lw._emit(node, "mul", a, b)


def _trace(lw, node, env):
    (a,) = _args(lw, node, env, 1)
    if a.rank != 2:
        raise _Fail(node, f"trace: expects a matrix, got shape {a.shape}")
    mask = _constant_array(lw, node, np.eye(*a.shape))
    return lw._emit(node, "reduce_sum", lw._emit(node, "mul", a, mask), axes=(0, 1))


def _transpose(lw, node, env):
    if len(node.args) not in (1, 2) or node.keywords:
        raise _Fail(node, "transpose(a) or transpose(a, axes)")
    a = lw._var(node.args[0], env)
    perm = tuple(reversed(range(a.rank)))
    if len(node.args) == 2:
        perm = lw._static(node.args[1], env)
        if not isinstance(perm, tuple) or sorted(perm) != list(range(a.rank)):
            raise _Fail(node.args[1], f"transpose: axes must be a permutation of 0..{a.rank - 1}")
    return lw._emit(node, "transpose", a, perm=perm)


def _reshape_fn(lw, node, env):
    if len(node.args) != 2 or node.keywords:
        raise _Fail(node, "reshape(a, shape)")
    a = lw._var(node.args[0], env)
    shape = lw._static(node.args[1], env)
    shape = shape if isinstance(shape, tuple) else (shape,)
    if shape.count(-1) == 1 and a.size % max(1, -math.prod(shape)) == 0:
        shape = tuple(a.size // -math.prod(shape) if d == -1 else d for d in shape)
    if not all(isinstance(d, int) and d >= 1 for d in shape):
        raise _Fail(node.args[1], f"reshape: a shape is a list of positive integers (one may be -1), got {shape}")
    return _reshape(lw, node, a, shape)


def _parts(lw, node, env, name):
    if len(node.args) != 1 or not hasattr(node.args[0], "elts"):
        raise _Fail(node, f"{name}([a, b, ...], axis=k): the arrays go in a list")
    axis = 0
    for kw in node.keywords:
        if kw.arg != "axis":
            raise _Fail(kw, f"{name}(): unknown keyword '{kw.arg}'")
        axis = lw._static(kw.value, env)
    return [lw._var(e, env) for e in node.args[0].elts], axis


def concatenate(lw, node, parts, axis):
    first = parts[0]
    if first.rank == 0:
        raise _Fail(node, "concatenate: zero-dimensional arrays cannot be concatenated (use stack)")
    (axis,) = normalize_axes(node, axis, first.rank)
    for p in parts[1:]:
        if p.rank != first.rank or any(d != e for i, (d, e) in enumerate(zip(p.shape, first.shape)) if i != axis):
            raise _Fail(node, f"concatenate: shapes {first.shape} and {p.shape} differ outside axis {axis}")
    n = sum(p.shape[axis] for p in parts)
    shape = first.shape[:axis] + (n,) + first.shape[axis + 1:]
    out, off = lw.b.const(0.0, shape), 0
    for p in parts:
        index = tuple((off, off + p.shape[axis], 1) if i == axis else (0, d, 1) for i, d in enumerate(shape))
        out = lw._emit(node, "index_add", out, p, index=index)
        off += p.shape[axis]
    return out


def _concatenate(lw, node, env):
    parts, axis = _parts(lw, node, env, "concatenate")
    return concatenate(lw, node, parts, axis)


def stack(lw, node, parts, axis=0):
    first = parts[0]
    for p in parts[1:]:
        if p.shape != first.shape:
            raise _Fail(node, f"stack: all arrays need the same shape, got {first.shape} and {p.shape}")
    (axis,) = normalize_axes(node, axis, first.rank + 1)
    shape = first.shape[:axis] + (1,) + first.shape[axis:]
    return concatenate(lw, node, [_reshape(lw, node, p, shape) for p in parts], axis)


def _stack(lw, node, env):
    parts, axis = _parts(lw, node, env, "stack")
    return stack(lw, node, parts, axis)


CLOSED_FORM = 4     # det and inv up to this size are unrolled cofactor forms
LARGEST = 16        # above CLOSED_FORM, unrolled elimination: n steps of O(n) tensor ops each


def _square_matrix(lw, node, env, name):
    (a,) = _args(lw, node, env, 1)
    if a.rank != 2 or a.shape[0] != a.shape[1]:
        raise _Fail(node, f"{name}: expects a square matrix, got shape {a.shape}")
    if a.shape[0] > LARGEST:
        raise _Fail(node, f"{name}: matrices larger than {LARGEST}x{LARGEST} are not supported, got shape {a.shape}")
    return a


def _entries(lw, node, a):
    n = a.shape[0]
    return [[lw._emit(node, "getitem", a, index=(i, j)) for j in range(n)] for i in range(n)]


def _det_entries(lw, node, m):
    """Cofactor expansion, unrolled: closed forms for the 2x2 and 3x3 matrices of mechanics."""
    n = len(m)
    if n == 1:
        return m[0][0]
    if n == 2:
        return lw._emit(node, "sub", lw._emit(node, "mul", m[0][0], m[1][1]), lw._emit(node, "mul", m[0][1], m[1][0]))
    total = None
    for j in range(n):
        minor = [row[:j] + row[j + 1:] for row in m[1:]]
        term = lw._emit(node, "mul", m[0][j], _det_entries(lw, node, minor))
        total = term if total is None else lw._emit(node, "add" if j % 2 == 0 else "sub", total, term)
    return total


def _det(lw, node, env):
    a = _square_matrix(lw, node, env, "det")
    if a.shape[0] <= CLOSED_FORM:
        return _det_entries(lw, node, _entries(lw, node, a))
    pivots, sign, _ = _eliminate(lw, node, a, a.shape[0], jordan=False)
    total = sign
    for p in pivots:
        total = lw._emit(node, "mul", total, p)
    return total


def _inv(lw, node, env):
    a = _square_matrix(lw, node, env, "inv")
    n = a.shape[0]
    if n > CLOSED_FORM:
        augmented = concatenate(lw, node, [a, _constant_array(lw, node, np.eye(n))], 1)
        return _eliminate(lw, node, augmented, n, jordan=True)[2]
    m = _entries(lw, node, a)
    det = _det_entries(lw, node, m)
    rows = []
    for i in range(n):          # inv[i][j] = cofactor(j, i) / det
        row = []
        for j in range(n):
            minor = [r[:i] + r[i + 1:] for k, r in enumerate(m) if k != j]
            c = _det_entries(lw, node, minor) if n > 1 else lw.b.const(1.0)
            if (i + j) % 2:
                c = lw._emit(node, "neg", c)
            row.append(lw._emit(node, "div", c, det))
        rows.append(stack(lw, node, row))
    return stack(lw, node, rows)


def _part(lw, node, x, *items):
    """x[items] for ints and Python slices (a getitem with normalized ranges)."""
    index = tuple(i.indices(d) if isinstance(i, slice) else i for i, d in zip(items, x.shape))
    return lw._emit(node, "getitem", x, index=index + tuple((0, d, 1) for d in x.shape[len(items):]))


def _column(lw, node, v):
    return _reshape(lw, node, v, (v.size, 1))


def _pivot_choice(lw, node, col, top):
    """1.0 at the first row, from `top` on, of the largest |col| entry, 0.0 elsewhere (partial
    pivoting). Made of comparisons, it is a constant to differentiation: the derivative is that of
    the row exchange taken, as at any other branch."""
    n = col.size
    mag = lw._emit(node, "abs", col)
    if top:                     # rows above top are already pivots: -1 never wins
        eligible = lw._emit(node, "ge", _constant_array(lw, node, np.arange(n, dtype=float)), float(top))
        mag = lw._emit(node, "select", eligible, mag, -1.0)
    hit = lw._emit(node, "eq", mag, lw._emit(node, "reduce_max", mag, axes=(0,)))
    before = _constant_array(lw, node, np.tri(n, k=-1))        # before[i, j] = 1 where j < i
    earlier = lw._emit(node, "reduce_sum", before * lw._emit(node, "select", hit, 1.0, 0.0), axes=(1,))
    first = lw._emit(node, "and", hit, lw._emit(node, "eq", earlier, 0.0))
    return lw._emit(node, "select", first, 1.0, 0.0)


def _eliminate(lw, node, m, steps, jordan):
    """Gaussian elimination with partial pivoting, unrolled over the first `steps` columns of m.
    Each step's pivot column is column 0 of the working matrix, which drops it after use. LU
    (jordan=False) also drops the pivot row, leaving the trailing block; Gauss-Jordan eliminates
    every row and normalizes the pivot row, so [A | I] becomes inv(A).
    Returns the pivots, the sign of the row permutation and the working matrix left over."""
    sign, pivots = lw.b.const(1.0), []
    for k in range(steps):
        rows = m.shape[0]
        top = k if jordan else 0
        e_top = _constant_array(lw, node, np.eye(rows)[top])
        if rows - top > 1:      # exchange rows top and p: m += (p - e_top) (m[top] - m[p])
            p = _pivot_choice(lw, node, _part(lw, node, m, slice(None), 0), top)
            pivot_row = lw._emit(node, "reduce_sum", _column(lw, node, p) * m, axes=(0,))
            m = m + _column(lw, node, p - e_top) * (_part(lw, node, m, top) - pivot_row)
            sign = sign * (2.0 * _part(lw, node, p, top) - 1.0)
        piv = _part(lw, node, m, top, 0)
        pivots.append(piv)
        if jordan:
            normalized = _part(lw, node, m, top, slice(1, None)) / piv
            m = _part(lw, node, m, slice(None), slice(1, None)) - \
                _column(lw, node, _part(lw, node, m, slice(None), 0) - e_top) * normalized
        elif rows > 1:          # a zero pivot means a zero column (LAPACK's getrf leaves it, det is 0)
            safe = lw._emit(node, "select", lw._emit(node, "eq", piv, 0.0), 1.0, piv)
            factors = _part(lw, node, m, slice(1, None), 0) / safe
            m = _part(lw, node, m, slice(1, None), slice(1, None)) - \
                _column(lw, node, factors) * _part(lw, node, m, 0, slice(1, None))
    return pivots, sign, m


def _keepdims(lw, node, r, x, axes):
    return _reshape(lw, node, r, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))


def _shifted_exp(lw, node, x, axes):
    """exp(x - max(x)) over axes: the stable form (the max cancels in value and derivative)."""
    mx = lw._emit(node, "reduce_max", x, axes=axes)
    z = lw._emit(node, "exp", lw._emit(node, "sub", x, _keepdims(lw, node, mx, x, axes)))
    return mx, z


def _softmax(lw, node, env):
    x, axes = array_and_axes(lw, node, env, -1)
    _, z = _shifted_exp(lw, node, x, axes)
    s = lw._emit(node, "reduce_sum", z, axes=axes)
    return lw._emit(node, "div", z, _keepdims(lw, node, s, x, axes))


def _logsumexp(lw, node, env):
    x, axes = array_and_axes(lw, node, env)
    mx, z = _shifted_exp(lw, node, x, axes)
    return lw._emit(node, "add", mx, lw._emit(node, "log", lw._emit(node, "reduce_sum", z, axes=axes)))


FUNCS.update(matmul=_matmul_fn, einsum=_einsum, outer=_outer, trace=_trace, transpose=_transpose,
             reshape=_reshape_fn, concatenate=_concatenate, stack=_stack, det=_det, inv=_inv,
             softmax=_softmax, logsumexp=_logsumexp)