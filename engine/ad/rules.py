"""The one table of derivative rules: for every IR op, its forward (jvp) and reverse (vjp) rule.

Tangents and cotangents carry leading batch axes `bs`: in forward (vector) mode a tangent of v has
shape (*wrt_shape, *v.shape), one direction per leading index; in reverse mode a cotangent of v has
shape (*out_shape, *v.shape). Because batch axes lead, numpy broadcasting lines the primal values up
with the trailing axes, so elementwise rules need only their partial derivatives.

Elementwise ops are given by their partials (d out / d arg_k as IR, in terms of the args and the
output), from which `jvp` and `vjp` are derived once. Other ops give both rules. A zero derivative
is None, never an array of zeros. A reverse rule may return `IndexContribution` for an argument:
an update of a part of its cotangent, which accumulates in place instead of padding with zeros.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.core import Var, current


@dataclass(frozen=True)
class IndexContribution:
    index: tuple                # getitem index into the argument (without batch axes)
    ct: Var                     # cotangent of that part, shape bs + part shape


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

# Masks keep `where` from turning a derivative into NaN (JAX's "double where" problem): the
# cotangent a branch of select receives is exactly zero where the branch was not taken, but the
# branch's own partials may be inf or NaN there (sqrt'(0), log'(-1)), and 0 * inf = NaN. So a
# cotangent carries the condition under which it can be nonzero, and elementwise rules select
# instead of multiplying where the mask is false.


def _guard(x, mask):
    return x if mask is None else emit("select", mask, x, 0.0)


def _same_shape_masks(e, mask):
    return [mask if a.shape == e.out.shape else None for a in e.args]


def from_partials(partials):
    """The rules of an elementwise op from partials(out, *args) -> one partial (or None) per arg."""
    def jvp(e, ts, bs):
        ps = partials(e.out, *e.args)
        terms = [lift(t, bs, e.out.rank) * p for t, p in zip(ts, ps) if t is not None and p is not None]
        if not terms:
            return None
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return to_shape(total, bs, e.out.shape)

    def vjp(e, ct, bs, mask=None):
        ps = partials(e.out, *e.args)
        return [None if p is None or a.dtype == "bool" else unbroadcast(_guard(ct * p, mask), bs, a.shape)
                for a, p in zip(e.args, ps)]
    return Rule(jvp, vjp, _same_shape_masks)


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


def no_derivative():
    return Rule(lambda e, ts, bs: None, lambda e, ct, bs: [None] * len(e.args))


def _sqrt(x):
    return emit("sqrt", x)


def _sq(x):
    return emit("square", x)


RULES: dict[str, Rule] = {}
P = {   # partials of elementwise ops: (out, *args) -> tuple of partials
    "neg": lambda y, x: (-1.0 * _one(x),),
    "exp": lambda y, x: (y,),
    "log": lambda y, x: (1.0 / x,),
    "log1p": lambda y, x: (1.0 / (1.0 + x),),
    "expm1": lambda y, x: (y + 1.0,),
    "sqrt": lambda y, x: (0.5 / y,),
    "cbrt": lambda y, x: (1.0 / (3.0 * _sq(y)),),
    "sin": lambda y, x: (emit("cos", x),),
    "cos": lambda y, x: (-emit("sin", x),),
    "tan": lambda y, x: (1.0 + _sq(y),),
    "arcsin": lambda y, x: (1.0 / _sqrt(1.0 - _sq(x)),),
    "arccos": lambda y, x: (-1.0 / _sqrt(1.0 - _sq(x)),),
    "arctan": lambda y, x: (1.0 / (1.0 + _sq(x)),),
    "sinh": lambda y, x: (emit("cosh", x),),
    "cosh": lambda y, x: (emit("sinh", x),),
    "tanh": lambda y, x: (1.0 - _sq(y),),
    "abs": lambda y, x: (emit("sign", x),),
    "sign": lambda y, x: (None,),
    "square": lambda y, x: (2.0 * x,),
    "sigmoid": lambda y, x: (y * (1.0 - y),),
    "softplus": lambda y, x: (emit("sigmoid", x),),
    "erf": lambda y, x: (2.0 / math.sqrt(math.pi) * emit("exp", -_sq(x)),),
    "add": lambda y, a, b: (_one(a), _one(b)),
    "sub": lambda y, a, b: (_one(a), -1.0 * _one(b)),
    "mul": lambda y, a, b: (b, a),
    "div": lambda y, a, b: (1.0 / b, -y / b),
    "pow": lambda y, a, b: (b * a ** (b - 1.0), emit("log", a) * y),
    "minimum": lambda y, a, b: (one_if(emit("le", a, b)), one_if(emit("gt", a, b))),
    "maximum": lambda y, a, b: (one_if(emit("ge", a, b)), one_if(emit("lt", a, b))),
    "arctan2": lambda y, a, b: (b / (_sq(a) + _sq(b)), -a / (_sq(a) + _sq(b))),
}


def _one(x):
    """The constant 1 (a partial of a linear op); scalar, so it folds away in products."""
    return current().const(1.0)


for _name, _p in P.items():
    RULES[_name] = from_partials(_p)
for _name in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not", "const", "array", "eye"):
    RULES[_name] = no_derivative()


def _select_jvp(e, ts, bs):
    c, a, b = e.args
    ta, tb = ts[1], ts[2]
    if ta is None and tb is None:
        return None
    za = lift(ta, bs, e.out.rank) if ta is not None else 0.0
    zb = lift(tb, bs, e.out.rank) if tb is not None else 0.0
    return to_shape(emit("select", c, za, zb), bs, e.out.shape)


def _select_vjp(e, ct, bs, mask=None):
    c, a, b = e.args
    # select, not multiply by a 0/1 mask: the untaken branch gets an exact zero, never 0*inf = NaN
    return [None, unbroadcast(emit("select", c, ct, 0.0), bs, a.shape),
            unbroadcast(emit("select", c, 0.0, ct), bs, b.shape)]


def _select_masks(e, mask):
    c = e.args[0]
    taken = [c, emit("not", c)]
    if mask is not None:
        taken = [emit("and", t, mask) for t in taken]
    if c.shape != e.out.shape:
        taken = [emit("broadcast_to", t, shape=e.out.shape) for t in taken]
    return [None] + [t if a.shape == e.out.shape else None for t, a in zip(taken, e.args[1:])]


RULES["select"] = Rule(_select_jvp, _select_vjp, _select_masks)

RULES["reduce_sum"] = linear(
    lambda e, t, bs: emit("reduce_sum", t, axes=shift(e.attr("axes"), bs)),
    lambda e, ct, bs: expand(ct, bs, e.args[0].shape, e.attr("axes")))


def _chooser(e):
    """Weights of the elements a max/min picked: ties share equally (JAX's convention)."""
    x = e.args[0]
    axes = e.attr("axes")
    picked = one_if(emit("eq", x, expand(e.out, (), x.shape, axes)))
    count = emit("reduce_sum", picked, axes=axes)
    return picked / expand(count, (), x.shape, axes)


def _weighted_reduction(weights):
    def jvp(e, ts, bs):
        if ts[0] is None:
            return None
        return emit("reduce_sum", ts[0] * weights(e), axes=shift(e.attr("axes"), bs))

    def vjp(e, ct, bs):
        return [expand(ct, bs, e.args[0].shape, e.attr("axes")) * weights(e)]
    return Rule(jvp, vjp)


RULES["reduce_max"] = _weighted_reduction(_chooser)
RULES["reduce_min"] = _weighted_reduction(_chooser)
RULES["reduce_prod"] = _weighted_reduction(lambda e: emit("prod_others", e.args[0], axes=e.attr("axes")))

RULES["broadcast_to"] = linear(
    lambda e, t, bs: to_shape(t, bs, e.attr("shape")),
    lambda e, ct, bs: unbroadcast(ct, bs, e.args[0].shape))
RULES["reshape"] = linear(
    lambda e, t, bs: emit("reshape", t, shape=tuple(bs) + tuple(e.attr("shape"))),
    lambda e, ct, bs: emit("reshape", ct, shape=tuple(bs) + e.args[0].shape))


def _batched_perm(perm, bs):
    return tuple(range(len(bs))) + shift(perm, bs)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


RULES["transpose"] = linear(
    lambda e, t, bs: emit("transpose", t, perm=_batched_perm(e.attr("perm"), bs)),
    lambda e, ct, bs: emit("transpose", ct, perm=_batched_perm(_inverse(e.attr("perm")), bs)))
RULES["getitem"] = linear(
    lambda e, t, bs: emit("getitem", t, index=batched_index(e.attr("index"), bs)),
    lambda e, ct, bs: IndexContribution(e.attr("index"), ct))


def _index_add_jvp(e, ts, bs):
    t_acc, t_val = ts
    if t_acc is None and t_val is None:
        return None
    if t_val is None:
        return t_acc
    if t_acc is None:
        t_acc = current().const(0.0, tuple(bs) + e.out.shape)
    return emit("index_add", t_acc, t_val, index=batched_index(e.attr("index"), bs))


RULES["index_add"] = Rule(_index_add_jvp, lambda e, ct, bs: [
    ct, emit("getitem", ct, index=batched_index(e.attr("index"), bs))])



def _element(k, shape):
    """The integer index of flat element k of an array of `shape` (C order)."""
    idx = []
    for d in reversed(shape):
        idx.append(k % d)
        k //= d
    return tuple(reversed(idx))


def _pack_jvp(e, ts, bs):
    if all(t is None for t in ts):
        return None
    acc = current().const(0.0, tuple(bs) + e.out.shape)
    for k, t in enumerate(ts):
        if t is not None:
            acc = emit("index_add", acc, t, index=batched_index(_element(k, e.out.shape), bs))
    return acc


RULES["pack"] = Rule(_pack_jvp, lambda e, ct, bs: [
    emit("getitem", ct, index=batched_index(_element(k, e.out.shape), bs)) for k in range(len(e.args))])


# ---- prod_others: the partial of a product, so products have derivatives of every order ---------
def _to_lanes(v, axes, lead):
    """v (lead axes, then x's axes) with x's `axes` moved last and flattened: lead + kept + (n,).
    Returns it with what _from_lanes needs to undo the move."""
    rank = v.rank - lead
    order = [k for k in range(rank) if k not in axes] + sorted(axes)
    perm = tuple(range(lead)) + tuple(lead + k for k in order)
    moved = emit("transpose", v, perm=perm)
    n = math.prod(v.shape[lead + k] for k in axes)
    return emit("reshape", moved, shape=moved.shape[: v.rank - len(axes)] + (n,)), perm, moved.shape


def _from_lanes(v, perm, moved_shape):
    return emit("transpose", emit("reshape", v, shape=moved_shape), perm=_inverse(perm))


def _others_weights(e):
    """W[..., i, k] = prod of x_j over j not in {i, k} for k != i, and 0 for k == i, so that
    d prod_others(x)_i = sum_k W[..., i, k] dx_k. It is prod_others of rows of x with x_i set to 1."""
    x2, _, _ = _to_lanes(e.args[0], e.attr("axes"), 0)
    n = x2.shape[-1]
    diag = emit("gt", emit("eye", shape=(n,)), 0.5)
    rows = emit("broadcast_to", emit("reshape", x2, shape=x2.shape[:-1] + (1, n)), shape=x2.shape[:-1] + (n, n))
    others = emit("prod_others", emit("select", diag, 1.0, rows), axes=(x2.rank,))
    return emit("select", diag, 0.0, others)


def _prod_others_jvp(e, ts, bs):
    if ts[0] is None:
        return None
    t2, perm, moved = _to_lanes(ts[0], e.attr("axes"), len(bs))
    t_row = emit("reshape", t2, shape=t2.shape[:-1] + (1, t2.shape[-1]))
    return _from_lanes(emit("reduce_sum", _others_weights(e) * t_row, axes=(t2.rank,)), perm, moved)


def _prod_others_vjp(e, ct, bs):
    c2, perm, moved = _to_lanes(ct, e.attr("axes"), len(bs))
    c_col = emit("reshape", c2, shape=c2.shape + (1,))
    return [_from_lanes(emit("reduce_sum", c_col * _others_weights(e), axes=(c2.rank - 1,)), perm, moved)]


RULES["prod_others"] = Rule(_prod_others_jvp, _prod_others_vjp)
