"""Constructors with constant arguments (arange linspace zeros ones eye), and arrays assembled from
others (stack concatenate reshape). Assembly is an in-place update of a zero array (index_add), whose
adjoints are free views."""
from __future__ import annotations

import math

import numpy as np

from ...limits import MAX_ELEMENTS
from .call import builtin


def _shape_arg(call, s):
    s = s if isinstance(s, tuple) else (s,)
    if not all(isinstance(d, int) and d >= 1 for d in s):
        raise call.fail(f"{call.name}(): a shape is a positive integer or a list of them, got {s!r}")
    return s


def _count(call, n):
    """Refuse a constructor of more than MAX_ELEMENTS elements before numpy allocates them."""
    if n > MAX_ELEMENTS:
        raise call.fail(f"{call.name}(): {n:,} elements, more than the limit of {MAX_ELEMENTS:,} per value")


@builtin("arange")
def arange(call):
    args = call.statics(1, 3)
    if all(isinstance(a, (int, float)) for a in args):
        lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if step == 0:
            raise call.fail("arange(): the step cannot be zero")
        _count(call, max(0, math.ceil((hi - lo) / step)))
    arr = np.arange(*args, dtype=float)
    if arr.size == 0:
        raise call.fail("arange(): the range is empty")
    return call.constant(arr)


@builtin("linspace")
def linspace(call):
    a, b, n = call.statics(3, 3)
    if not isinstance(n, int) or n < 1:
        raise call.fail("linspace(): the number of points must be a positive integer")
    _count(call, n)
    return call.constant(np.linspace(a, b, n))


@builtin("zeros", "ones")
def filled(call):
    (s,) = call.statics(1, 1)
    return call.const(1.0 if call.name == "ones" else 0.0, _shape_arg(call, s))


@builtin("eye")
def eye(call):
    (n,) = call.statics(1, 1)
    n = _shape_arg(call, n)[0]
    _count(call, n * n)
    return call.constant(np.eye(n))


@builtin("reshape")
def reshape(call):
    if len(call.args) != 2 or call.keywords:
        raise call.fail("reshape(a, shape)")
    a = call.array(call.args[0])
    shape = call.static(call.args[1])
    shape = shape if isinstance(shape, tuple) else (shape,)
    if shape.count(-1) == 1 and a.size % max(1, -math.prod(shape)) == 0:
        shape = tuple(a.size // -math.prod(shape) if d == -1 else d for d in shape)
    if not all(isinstance(d, int) and d >= 1 for d in shape):
        raise call.fail(f"reshape: a shape is a list of positive integers (one may be -1), got {shape}",
                        call.args[1])
    return call.reshape(a, shape)


def concatenate(call, parts, axis):
    first = parts[0]
    if first.rank == 0:
        raise call.fail("concatenate: zero-dimensional arrays cannot be concatenated (use stack)")
    (axis,) = call.axes(axis, first.rank)
    for p in parts[1:]:
        if p.rank != first.rank or any(d != e for i, (d, e) in enumerate(zip(p.shape, first.shape)) if i != axis):
            raise call.fail(f"concatenate: shapes {first.shape} and {p.shape} differ outside axis {axis}")
    n = sum(p.shape[axis] for p in parts)
    shape = first.shape[:axis] + (n,) + first.shape[axis + 1:]
    out, off = call.const(0.0, shape), 0
    for p in parts:
        index = tuple((off, off + p.shape[axis], 1) if i == axis else (0, d, 1) for i, d in enumerate(shape))
        out = call.emit("index_add", out, p, index=index)
        off += p.shape[axis]
    return out


def stack(call, parts, axis=0):
    first = parts[0]
    for p in parts[1:]:
        if p.shape != first.shape:
            raise call.fail(f"stack: all arrays need the same shape, got {first.shape} and {p.shape}")
    (axis,) = call.axes(axis, first.rank + 1)
    shape = first.shape[:axis] + (1,) + first.shape[axis:]
    return concatenate(call, [call.reshape(p, shape) for p in parts], axis)


@builtin("concatenate")
def concatenate_fn(call):
    return concatenate(call, *call.list_argument())


@builtin("stack")
def stack_fn(call):
    return stack(call, *call.list_argument())


@builtin("triu", "tril")
def triangle(call):
    """numpy's triu/tril(x, k=0): x with the entries below (triu) or above (tril) the k-th diagonal of its
    last two axes set to 0 (selected, so an inf or NaN there does not leak, nor into derivatives)."""
    if not 1 <= len(call.args) <= 2 or any(kw.arg != "k" for kw in call.keywords):
        raise call.fail(f"{call.name}(x, k=0)")
    x = call.array(call.args[0])
    k = call.static(call.args[1]) if len(call.args) == 2 else \
        (call.static(call.keywords[0].value) if call.keywords else 0)
    if not isinstance(k, int):
        raise call.fail(f"{call.name}(): k must be an integer constant")
    if x.rank < 2:
        raise call.fail(f"{call.name}(): x must have at least 2 axes, got shape {x.shape}")
    n, m = x.shape[-2:]
    keep = np.triu(np.ones((n, m)), k) if call.name == "triu" else np.tril(np.ones((n, m)), k)
    return call.emit("select", call.emit("gt", call.constant(keep), 0.5), x, 0.0)
