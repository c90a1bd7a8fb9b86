"""Views: getitem (constant indices and slices), transpose, reshape, broadcast_to.

A view costs nothing at run time: its lowering maps the argument's storage (an offset and strides
over a flat array) to the result's. Their derivatives are views too, and a slice's adjoint updates
a part of the cotangent in place instead of padding with zeros (IndexContribution)."""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..core import current
from ..op import Op, broadcast_shapes, cstrides, free, index_shape, numpy_index, register
from ..rules import IndexContribution, batched_index, linear, shift, to_shape, unbroadcast


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


def view(name, shape, numpy, rule, lower):
    return register(Op(name, "view", shape, numpy, rule, lower, free))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _batched_perm(perm, bs):
    return tuple(range(len(bs))) + shift(perm, bs)


# ---- getitem(x, index): index holds ints and normalized (start, stop, step) ranges -----------------------
def _getitem_view(offset, strides, e):
    out = []
    for it, st in zip(e.attr("index"), strides):
        if isinstance(it, tuple):
            offset += it[0] * st
            out.append(st * it[2])
        else:
            offset += it * st
    return offset, tuple(out)


view("getitem", lambda shapes, dtypes, index: (index_shape(shapes[0], index), dtypes[0]),
     lambda x, index: x[numpy_index(index)],
     linear(lambda e, t, bs: emit("getitem", t, index=batched_index(e.attr("index"), bs)),
            lambda e, ct, bs: IndexContribution(e.attr("index"), ct)),
     _getitem_view)


# ---- transpose(x, perm) ------------------------------------------------------------------------------
view("transpose", lambda shapes, dtypes, perm: (tuple(shapes[0][p] for p in perm), dtypes[0]),
     lambda x, perm: np.transpose(x, perm),
     linear(lambda e, t, bs: emit("transpose", t, perm=_batched_perm(e.attr("perm"), bs)),
            lambda e, ct, bs: emit("transpose", ct, perm=_batched_perm(_inverse(e.attr("perm")), bs))),
     lambda offset, strides, e: (offset, tuple(strides[p] for p in e.attr("perm"))))


# ---- reshape(x, shape) -----------------------------------------------------------------------------------
def _reshape_shape(shapes, dtypes, shape):
    (s,) = shapes
    if math.prod(s) != math.prod(shape):
        raise ShapeError(f"reshape: cannot reshape {tuple(s)} (size {math.prod(s)}) to {tuple(shape)}")
    return tuple(shape), dtypes[0]


def _reshape_view(offset, strides, e):
    """A view if only unit axes come or go, or if the argument is contiguous; else None (the code
    generator copies the argument into contiguous storage first)."""
    x, shape = e.args[0], e.out.shape
    kept = iter([s for d, s in zip(x.shape, strides) if d != 1])
    if [d for d in x.shape if d != 1] == [d for d in shape if d != 1]:
        return offset, tuple(0 if d == 1 else next(kept) for d in shape)
    if all(s == c or d == 1 for s, d, c in zip(strides, x.shape, cstrides(x.shape))):
        return offset, cstrides(shape)
    return None


view("reshape", _reshape_shape, lambda x, shape: np.reshape(x, shape),
     linear(lambda e, t, bs: emit("reshape", t, shape=tuple(bs) + tuple(e.attr("shape"))),
            lambda e, ct, bs: emit("reshape", ct, shape=tuple(bs) + e.args[0].shape)),
     _reshape_view)


# ---- broadcast_to(x, shape) ----------------------------------------------------------------------------
def _broadcast_shape(shapes, dtypes, shape):
    (s,) = shapes
    got = broadcast_shapes("broadcast_to", [s, shape])
    if got != tuple(shape):
        raise ShapeError(f"broadcast_to: shape {tuple(s)} does not broadcast to {tuple(shape)}")
    return tuple(shape), dtypes[0]


def _broadcast_view(offset, strides, e):
    x, shape = e.args[0], e.out.shape
    lead = len(shape) - x.rank
    return offset, tuple([0] * lead + [0 if d == 1 else s for d, s in zip(x.shape, strides)])


view("broadcast_to", _broadcast_shape, lambda x, shape: np.broadcast_to(x, shape),
     linear(lambda e, t, bs: to_shape(t, bs, e.attr("shape")),
            lambda e, ct, bs: unbroadcast(ct, bs, e.args[0].shape)),
     _broadcast_view)
