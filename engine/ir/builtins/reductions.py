"""Reductions over axes (numpy's axis numbering; default: every axis): sum prod max min mean norm,
and the stable logsumexp and softmax."""
from __future__ import annotations

import math

from .call import builtin

SMALL_PROD = 16     # products of at most this many factors are unrolled into multiplications


@builtin("sum", "max", "min")
def reduce(call):
    x, axes = call.array_and_axes()
    return call.emit("reduce_" + call.name, x, axes=axes)


@builtin("mean")
def mean(call):
    x, axes = call.array_and_axes()
    n = math.prod(x.shape[a] for a in axes)
    return call.emit("div", call.emit("reduce_sum", x, axes=axes), n)


@builtin("prod")
def prod(call):
    x, axes = call.array_and_axes()
    if math.prod(x.shape[a] for a in axes) <= SMALL_PROD:
        return _unrolled_prod(call, x, axes)
    return call.emit("reduce_prod", x, axes=axes)


def _unrolled_prod(call, x, axes):
    """prod over few elements as a chain of multiplications of views: derivatives of every order
    follow from mul's rule, and the code is as fast as the reduction loop."""
    kept = [a for a in range(x.rank) if a not in axes]
    x = call.emit("transpose", x, perm=tuple(kept) + tuple(axes))
    n = math.prod(x.shape[len(kept):])
    x = call.reshape(x, x.shape[:len(kept)] + (n,))
    full = tuple((0, d, 1) for d in x.shape[:-1])
    out = None
    for k in range(n):
        part = call.emit("getitem", x, index=full + (k,)) if x.shape[-1] > 1 else call.reshape(x, x.shape[:-1])
        out = part if out is None else call.emit("mul", out, part)
    return out


@builtin("norm")
def norm(call):
    """The 2-norm over `axis` (default: all elements, the Frobenius norm of a matrix)."""
    x, axes = call.array_and_axes()
    return call.emit("sqrt", call.emit("reduce_sum", call.emit("square", x), axes=axes))


def _keepdims(call, r, x, axes):
    return call.reshape(r, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))


def _shifted_exp(call, x, axes):
    """exp(x - max(x)) over axes: the stable form (the max cancels in value and derivative)."""
    mx = call.emit("reduce_max", x, axes=axes)
    z = call.emit("exp", call.emit("sub", x, _keepdims(call, mx, x, axes)))
    return mx, z


@builtin("softmax")
def softmax(call):
    x, axes = call.array_and_axes(-1)
    _, z = _shifted_exp(call, x, axes)
    s = call.emit("reduce_sum", z, axes=axes)
    return call.emit("div", z, _keepdims(call, s, x, axes))


@builtin("logsumexp")
def logsumexp(call):
    x, axes = call.array_and_axes()
    mx, z = _shifted_exp(call, x, axes)
    return call.emit("add", mx, call.emit("log", call.emit("reduce_sum", z, axes=axes)))
