"""The kinds of derivative rules, and the helpers op entries (engine/ir/ops/) write theirs with.

Tangents and cotangents carry leading batch axes `bs`: in forward (vector) mode a tangent of v has
shape (*wrt_shape, *v.shape), one direction per leading index; in reverse mode a cotangent of v has
shape (*out_shape, *v.shape). Because batch axes lead, numpy broadcasting lines the primal values up
with the trailing axes, so elementwise rules need only their partial derivatives.

Elementwise ops are given by their partials (d out / d arg_k as IR, in terms of the args and the
output), from which `jvp` and `vjp` are derived once. Other ops give both rules. A zero derivative
is None, never an array of zeros. A reverse rule may return `IndexContribution` for an argument:
an update of a part of its cotangent, which accumulates in place instead of padding with zeros; or
`Unsupported` where it has no derivative to give (a forward rule raises SpecError itself).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass

from .core import Var, current


@dataclass(frozen=True)
class IndexContribution:
    index: tuple                # getitem index into the argument (without batch axes)
    ct: Var                     # cotangent of that part, shape bs + part shape


@dataclass(frozen=True)
class Unsupported:
    """A reverse rule's answer for an argument whose derivative the op does not give: an error with
    this message if that argument depends on what is being differentiated, else nothing."""
    message: str


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


# ---- helpers on batched values ---------------------------------------------------------------
def lift(t, bs, rank):
    """Reshape a batched tangent (bs + s) to bs + (1,)*(rank - len(s)) + s, so it broadcasts with
    primal values of rank `rank` on the trailing axes."""
    s = t.shape[len(bs):]
    if len(s) == rank or not bs:    # without batch axes, broadcasting inserts the 1s itself
        return t
    return emit("reshape", t, shape=tuple(bs) + (1,) * (rank - len(s)) + tuple(s))


def unbroadcast(ct, bs, shape):
    """Sum a batched cotangent (bs + out) over the axes that broadcasting added to `shape`."""
    out = ct.shape[len(bs):]
    lead = len(out) - len(shape)
    axes = [len(bs) + i for i in range(lead)]
    axes += [len(bs) + lead + i for i, d in enumerate(shape) if d == 1 and out[lead + i] != 1]
    if axes:
        ct = emit("reduce_sum", ct, axes=tuple(axes))
    return emit("reshape", ct, shape=tuple(bs) + tuple(shape))


def to_shape(t, bs, shape):
    return emit("broadcast_to", lift(t, bs, len(shape)), shape=tuple(bs) + tuple(shape))


def expand(ct, bs, in_shape, axes):
    """The cotangent of a reduction over `axes`, broadcast back to the reduced input's shape."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(in_shape))
    if bs or set(axes) != set(range(len(axes))):     # else broadcasting inserts the leading 1s
        ct = emit("reshape", ct, shape=tuple(bs) + kept)
    return emit("broadcast_to", ct, shape=tuple(bs) + tuple(in_shape))


def shift(axes, bs):
    return tuple(len(bs) + a for a in axes)


def batched_index(index, bs):
    return tuple((0, n, 1) for n in bs) + tuple(index)


def one_if(cond):
    return emit("select", cond, 1.0, 0.0)


# ---- rule kinds ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    jvp: object                 # jvp(eqn, tangents, bs) -> tangent of eqn.out or None
    vjp: object                 # vjp(eqn, ct, bs[, mask]) -> per argument: Var, IndexContribution or None
    masks: object = None        # elementwise only: masks(eqn, mask) -> per argument, the mask of its cotangent
    zeros: bool = False         # vjp makes exact zeros that must stay zero downstream (select): hard_zeros
    cut: bool = False           # the output is a constant to differentiation: nothing depends on the args through it
    partials: object = None     # elementwise: partials(out, *args, **attrs), which jvp and vjp are made of

# Masks keep `where` from turning a derivative into NaN (JAX's "double where" problem): the
# cotangent a branch of select receives is exactly zero where the branch was not taken, but the
# branch's own partials may be inf or NaN there (sqrt'(0), log'(-1)), and 0 * inf = NaN. So a
# cotangent carries the condition under which it can be nonzero, and elementwise rules select
# instead of multiplying where the mask is false.


_HARD = contextvars.ContextVar("adgrad_hard_zeros", default=False)


@contextlib.contextmanager
def hard_zeros(on):
    """Within: the cotangent being propagated may hold exact zeros made by `where` (engine/ad/transform.py
    sets it for everything downstream of a select), so products with partials keep them zero."""
    token = _HARD.set(on)
    try:
        yield
    finally:
        _HARD.reset(token)


def hard_product(ct, p):
    """ct * p for a cotangent ct and a partial p. Where ct may hold hard zeros, an exact zero stays
    zero even if p is infinite or NaN (the partial of a branch `where` did not take, sqrt'(0) in a
    padding row), as symbolic zeros do; elsewhere, and for a finite constant p, a plain product."""
    b = current()
    c, z = b.const_value(p), b.const_value(ct)
    if not _HARD.get() or c is not None and math.isfinite(c) or z is not None and z != 0.0:
        return ct * p
    return emit("hardmul", ct, p)


def _guard(x, mask):
    return x if mask is None else emit("select", mask, x, 0.0)


def _same_shape_masks(e, mask):
    return [mask if a.shape == e.out.shape else None for a in e.args]


def from_partials(partials):
    """The rules of an elementwise op from partials(out, *args, **attrs) -> one partial (or None) per arg."""
    def jvp(e, ts, bs):
        ps = partials(e.out, *e.args, **dict(e.attrs))
        terms = [lift(t, bs, e.out.rank) * p for t, p in zip(ts, ps) if t is not None and p is not None]
        if not terms:
            return None
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return to_shape(total, bs, e.out.shape)

    def vjp(e, ct, bs, mask=None):
        ps = partials(e.out, *e.args, **dict(e.attrs))
        # with a mask, the select zeroes the untaken entries itself: a plain product suffices
        return [None if p is None or a.dtype == "bool" else
                unbroadcast(_guard(ct * p if mask is not None else hard_product(ct, p), mask), bs, a.shape)
                for a, p in zip(e.args, ps)]
    return Rule(jvp, vjp, _same_shape_masks, partials=partials)


def from_jacobians(jacobians):
    """Rules from Jacobian blocks: jacobians(out, *args) -> per arg J_k of shape out.shape + arg.shape
    (or None), contracted with tangents over the argument's axes, with cotangents over the output's."""
    def jvp(e, ts, bs):
        total = None
        for t, a, J in zip(ts, e.args, jacobians(e.out, *e.args)):
            if t is None or J is None:
                continue
            t = emit("reshape", t, shape=tuple(bs) + (1,) * e.out.rank + a.shape)
            term = emit("reduce_sum", t * J, axes=tuple(range(len(bs) + e.out.rank, len(bs) + e.out.rank + a.rank)))
            total = term if total is None else total + term
        return total

    def vjp(e, ct, bs):
        out = []
        for a, J in zip(e.args, jacobians(e.out, *e.args)):
            if J is None:
                out.append(None)
                continue
            c = emit("reshape", ct, shape=tuple(bs) + e.out.shape + (1,) * a.rank)
            out.append(emit("reduce_sum", c * J, axes=tuple(range(len(bs), len(bs) + e.out.rank))))
        return out
    return Rule(jvp, vjp)


def linear(apply, transpose):
    """Rules of an op linear in its single argument: jvp applies it, vjp applies its transpose."""
    def jvp(e, ts, bs):
        return None if ts[0] is None else apply(e, ts[0], bs)

    def vjp(e, ct, bs):
        return [transpose(e, ct, bs)]
    return Rule(jvp, vjp)


def no_derivative(cut=False):
    return Rule(lambda e, ts, bs: None, lambda e, ct, bs: [None] * len(e.args), cut=cut)
