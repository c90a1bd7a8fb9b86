"""Tensor and linear-algebra functions, lowered to the core ops (mul, reduce_sum, views, index_add).

No new ops means no new derivative rules: matmul and einsum are a broadcast product reduced over
the contracted axes, which the code generator fuses into one loop nest that never stores the
product (an einsum diagonal is a strided view); stack and concatenate are in-place updates of a
zero array, whose adjoints are free views. det and inv take the ops of engine/ir/ops/linalg.py: up to
4x4 the closed forms (det, and inv as cofactors over it), above them the LU ops.
"""
from __future__ import annotations


import numpy as np

from ..ops.linalg import CLOSED_FORM, cofactor, entries
from .call import builtin
from .constructors import stack
from .spectral import STACKS


def matmul(call, a, b):
    """numpy's matmul (and dot of two vectors): vectors are promoted, batch axes broadcast."""
    if a.rank == 0 or b.rank == 0:
        raise call.fail(f"matmul: operands must have at least one axis, got shapes {a.shape} and {b.shape}")
    if a.rank == 1 and b.rank == 1:
        if a.shape != b.shape:
            raise call.fail(f"matmul: {a.shape} @ {b.shape}: inner dimensions {a.shape[0]} and {b.shape[0]} differ")
        return call.emit("reduce_sum", call.emit("mul", a, b), axes=(0,))
    if b.rank == 1 and a.shape[-1] == b.shape[0]:      # (..., m, k) @ (k,): b broadcasts along the rows
        return call.emit("reduce_sum", call.emit("mul", a, b), axes=(a.rank - 1,))
    a2 = call.reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = call.reshape(b, b.shape + (1,)) if b.rank == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise call.fail(f"matmul: {a.shape} @ {b.shape}: inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise call.fail(f"matmul: {a.shape} @ {b.shape}: batch dimensions do not broadcast") from None
    ea = call.reshape(a2, a2.shape + (1,))                       # (..., m, k, 1)
    eb = call.reshape(b2, b2.shape[:-2] + (1,) + b2.shape[-2:])  # (..., 1, k, n)
    prod = call.emit("mul", ea, eb)
    out = call.emit("reduce_sum", prod, axes=(prod.rank - 2,))     # (..., m, n)
    shape = batch + ((a2.shape[-2],) if a.rank > 1 else ()) + ((b2.shape[-1],) if b.rank > 1 else ())
    return call.reshape(out, shape)


@builtin("dot")
def dot(call):
    """numpy's dot for scalars, vectors and matrices: a scalar operand multiplies; else as matmul
    (for operands of rank above 2 numpy's dot differs, and this is matmul's rule)."""
    a, b = call.arrays(2)
    if a.rank == 0 or b.rank == 0:
        return call.emit("mul", a, b)
    return matmul(call, a, b)


@builtin("matmul")
def _matmul_fn(call):
    a, b = call.arrays(2)
    return matmul(call, a, b)


@builtin("einsum")
def _einsum(call):
    """numpy's einsum: explicit ('ij,jk->ik') or implicit ('ij,jk': the letters used once, sorted)
    output, '...' for leading axes that broadcast, size-1 axes broadcast, and a letter repeated in
    one operand takes its diagonal. Lowered to one broadcast product reduced over the other letters."""
    if call.keywords or len(call.args) < 2:
        raise call.fail("einsum('ij,jk->ik', A, B): a subscripts string, then the operands")
    spec = call.static(call.args[0])
    if not isinstance(spec, str):
        raise call.fail("einsum: the first argument is a subscripts string such as 'ij,jk->ik'", call.args[0])
    ops = [call.array(a) for a in call.args[1:]]
    lhs, arrow, out = spec.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise call.fail(f"einsum: {len(terms)} operand subscripts but {len(ops)} operands")
    for t in terms + [out]:
        if not all(ch in _LETTERS for ch in t.replace("...", "", 1)):
            raise call.fail(f"einsum: subscripts are letters with at most one '...', got '{t}'", call.args[0])
    terms, ellipsis = _expand_ellipses(call, terms, ops)
    if not arrow:
        once = sorted(ch for ch in set("".join(terms)) if ch in _LETTERS and "".join(terms).count(ch) == 1)
        out = ellipsis + "".join(once)
    elif "..." in out:
        out = out.replace("...", ellipsis)
    elif ellipsis:
        raise call.fail("einsum: the operands' '...' axes need a '...' in the output subscripts", call.args[0])
    sizes = {}
    for k, (t, x) in enumerate(zip(terms, ops)):
        x, t = _diagonal(call, x, t)
        terms[k], ops[k] = t, x
        for ch, d in zip(t, x.shape):
            known = sizes.setdefault(ch, d)
            if d != known and 1 not in (d, known):
                raise call.fail(f"einsum: subscript '{_shown(ch)}' has sizes {known} and {d}")
            sizes[ch] = max(known, d)
    if len(set(out)) != len(out) or any(ch not in sizes for ch in out):
        raise call.fail(f"einsum: output subscripts '{spec.partition('->')[2].strip()}' must be "
                                  f"distinct letters of the inputs", call.args[0])
    letters = list(out) + [ch for ch in dict.fromkeys("".join(terms)) if ch not in out]
    total = None
    for t, x in zip(terms, ops):
        present = [ch for ch in letters if ch in t]
        x = call.emit("transpose", x, perm=tuple(t.index(ch) for ch in present))
        x = call.reshape(x, [x.shape[present.index(ch)] if ch in t else 1 for ch in letters])
        total = x if total is None else call.emit("mul", total, x)
    full = tuple(sizes[ch] for ch in letters)
    if total.shape != full:
        total = call.emit("broadcast_to", total, shape=full)
    return call.emit("reduce_sum", total, axes=tuple(range(len(out), len(letters))))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ELLIPSIS_AXES = "".join(chr(0x3b1 + k) for k in range(24))    # stand-ins for the axes of '...' (Greek)


def _shown(ch):
    return "..." if ch in _ELLIPSIS_AXES else ch


def _expand_ellipses(call, terms, ops):
    """Each term with '...' spelled out in stand-in letters, aligned from the right as numpy
    broadcasts them; and the stand-ins of the longest '...' (what an output '...' means)."""
    width = 0
    for t, x in zip(terms, ops):
        named = len(t.replace("...", ""))
        if ("..." in t and named > x.rank) or ("..." not in t and named != x.rank):
            at_least = " at least" if "..." in t else ""
            raise call.fail(f"einsum: subscripts '{t}' need an operand of rank{at_least} {named}, "
                              f"got shape {x.shape}")
        if "..." in t:
            width = max(width, x.rank - named)
    stand_ins = _ELLIPSIS_AXES[:width]
    return [t.replace("...", stand_ins[width - (x.rank - len(t) + 3):]) for t, x in zip(terms, ops)], stand_ins


def _diagonal(call, x, term):
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
            raise call.fail(f"einsum: subscript '{ch}' repeats over axes of sizes {d} and {x.shape[j]}")
        keep = [a for a in range(x.rank) if a not in (i, j)]
        x = call.emit("transpose", x, perm=tuple(keep) + (i, j))
        x = call.reshape(x, x.shape[:-2] + (d * d,))
        x = call.emit("getitem", x, index=tuple((0, n, 1) for n in x.shape[:-1]) + ((0, d * d, d + 1),))
        term = "".join(term[a] for a in keep) + ch


@builtin("outer")
def _outer(call):
    a, b = call.arrays(2)
    a = call.reshape(a, (a.size, 1))
    b = call.reshape(b, (b.size,))
    return call.emit("mul", a, b)


@builtin("trace")
def _trace(call):
    """numpy's trace(a, axis1=0, axis2=1): the sum of the diagonal of the two axes, the others kept in
    order. A stack of matrices (rank > 2) needs its axes named (numpy's default would take the stack's)."""
    if len(call.args) != 1 or any(kw.arg not in ("axis1", "axis2") for kw in call.keywords):
        raise call.fail("trace(a) of a matrix, or trace(a, axis1=i, axis2=j) of a stack of matrices")
    a = call.array(call.args[0])
    given = {kw.arg: call.static(kw.value) for kw in call.keywords}
    if a.rank != 2 and len(given) != 2:
        raise call.fail(f"trace: expects a matrix, got shape {a.shape}; of a stack of matrices, name the axes: "
                        f"trace(a, axis1=-2, axis2=-1)")
    i, j = (call.axes(given.get(k, d), a.rank)[0] for k, d in (("axis1", 0), ("axis2", 1)))
    if i == j:
        raise call.fail(f"trace: axis1 and axis2 are both axis {i}")
    if a.rank == 2:
        made = call.builder.producer(a)
        if made is not None and made.op == "matfun":      # tr f(A): a sum over eigenvalues (ops/spectral.py)
            return call.emit("trfun", *made.args, **dict(made.attrs))
    elif (i, j) in ((a.rank - 2, a.rank - 1), (a.rank - 1, a.rank - 2)) and a in STACKS:
        out = call.const(0.0, a.shape[:-2])             # powm(A, p) of an array p: trfun per entry
        for k, part in zip(np.ndindex(*a.shape[:-2]), STACKS[a]):
            made = call.builder.producer(part)
            out = call.emit("index_add", out, call.emit("trfun", *made.args, **dict(made.attrs)), index=k)
        return out
    keep = [k for k in range(a.rank) if k not in (i, j)]
    a = call.emit("transpose", a, perm=(*keep, i, j)) if (*keep, i, j) != tuple(range(a.rank)) else a
    mask = call.constant(np.eye(*a.shape[-2:]))
    return call.emit("reduce_sum", call.emit("mul", a, mask), axes=(a.rank - 2, a.rank - 1))


@builtin("transpose")
def _transpose(call):
    if len(call.args) not in (1, 2) or call.keywords:
        raise call.fail("transpose(a) or transpose(a, axes)")
    a = call.array(call.args[0])
    perm = tuple(reversed(range(a.rank)))
    if len(call.args) == 2:
        perm = call.static(call.args[1])
        if not isinstance(perm, tuple) or sorted(perm) != list(range(a.rank)):
            raise call.fail(f"transpose: axes must be a permutation of 0..{a.rank - 1}", call.args[1])
    return call.emit("transpose", a, perm=perm)


LARGEST = 16        # the largest det, inv (and local solve) accepted, and tested


def _square_matrix(call, name):
    (a,) = call.arrays(1)
    if a.rank != 2 or a.shape[0] != a.shape[1]:
        raise call.fail(f"{name}: expects a square matrix, got shape {a.shape}")
    if a.shape[0] > LARGEST:
        raise call.fail(f"{name}: matrices larger than {LARGEST}x{LARGEST} are not supported, got shape {a.shape}")
    return a


@builtin("det")
def _det(call):
    a = _square_matrix(call, "det")
    if a.shape[0] <= CLOSED_FORM:
        return call.emit("det", a)
    return call.emit("lu_det", a, call.emit("lu", a))


@builtin("inv")
def _inv(call):
    return inverse(call, _square_matrix(call, "inv"))


def inverse(call, a):
    """inv(a) of a square matrix: cofactors over det up to 4x4, an LU factorization above."""
    n = a.shape[0]
    if n > CLOSED_FORM:
        return call.emit("lu_inv", a, call.emit("lu", a))
    m = entries(a, call.emit)
    det = call.emit("det", a)
    rows = []
    for i in range(n):          # inv[i][j] = cofactor(j, i) / det
        row = []
        for j in range(n):
            c = cofactor(m, j, i, call.emit) if n > 1 else call.const(1.0)
            row.append(call.emit("div", c, det))
        rows.append(stack(call, row))
    return stack(call, rows)
