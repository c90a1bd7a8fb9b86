"""Ops that are not elementwise, reductions or views: constants, in-place updates, products of the
others, and packing scalars into an array.

Their code-generator lowering writes statements through the emit context (engine/codegen/emit.py:
EmitContext), because where their result lives (a workspace block, an output row, an update in
place) is part of what they do."""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..core import current
from ..op import Op, cstrides, elements, free, index_shape, lanes, numpy_index, per_output, register
from ..rules import Rule, batched_index, no_derivative
from .views import _getitem_view, _inverse


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


def _at(x, index):
    """x[index] as an array, also when the index picks a single element."""
    return np.asarray(x[numpy_index(index)], dtype=x.dtype)


def _element(k, shape):
    """The integer index of flat element k of an array of `shape` (C order)."""
    idx = []
    for d in reversed(shape):
        idx.append(k % d)
        k //= d
    return tuple(reversed(idx))


# ---- const(value), array(data, shape), eye(shape) ------------------------------------------------------
def _const_lower(ctx, e):
    ctx.bind(e.out, ctx.literal(e.attr("value")))


def _array_lower(ctx, e):
    ctx.bind(e.out, ctx.constant(e.out, e.attr("data")))


def _eye_loop(idx, space):
    """Element idx of the identity of R^shape, an array of shape (*shape, *shape)."""
    half = len(space) // 2
    st = cstrides(space[:half])
    flat = lambda ks: " + ".join(f"{k}*{s}" if s != 1 else k for k, s in zip(ks, st))   # noqa: E731
    return f"(1.0 if {flat(idx[:half])} == {flat(idx[half:])} else 0.0)"


def _eye_scalar(b, e, xs):
    n = math.prod(e.attr("shape"))
    flat = elements((n, n), lambda idx: b.const(1.0 if idx[0] == idx[1] else 0.0))
    return flat.reshape(e.out.shape)


register(Op("const", "structural", lambda shapes, dtypes, value: ((), "f8"), lambda value: np.float64(value),
            no_derivative(), _const_lower, free,
            scalar=lambda b, e, xs: elements((), lambda idx: b.const(e.attr("value")))))
register(Op("array", "structural", lambda shapes, dtypes, data, shape: (tuple(shape), "f8"),
            lambda data, shape: np.array(data, dtype=float).reshape(shape), no_derivative(), _array_lower, free,
            scalar=lambda b, e, xs: elements(e.out.shape, lambda idx, data=np.asarray(e.attr("data")).reshape(
                e.out.shape): b.const(data[idx]))))
# eye seeds forward mode; inside a loop nest it is a comparison of indices, never stored
register(Op("eye", "structural", lambda shapes, dtypes, shape: (tuple(shape) * 2, "f8"),
            lambda shape: np.eye(math.prod(shape)).reshape(tuple(shape) * 2), no_derivative(), None,
            per_output(1), scalar=_eye_scalar, loop=_eye_loop))


# ---- index_add(acc, val, index): acc with val added to acc[index] ---------------------------------------
def _index_add_shape(shapes, dtypes, index):
    acc, val = shapes
    want = index_shape(acc, index)
    if tuple(val) != want:
        raise ShapeError(f"index_add: value shape {tuple(val)} does not match target shape {want}")
    return tuple(acc), "f8"


def _index_add_np(acc, val, index):
    out = np.array(acc, dtype=float, copy=True)
    out[numpy_index(index)] += val
    return out


def _index_add_jvp(e, ts, bs):
    t_acc, t_val = ts
    if t_acc is None and t_val is None:
        return None
    if t_val is None:
        return t_acc
    if t_acc is None:
        t_acc = current().const(0.0, tuple(bs) + e.out.shape)
    return emit("index_add", t_acc, t_val, index=batched_index(e.attr("index"), bs))


def _index_add_lower(ctx, e):
    acc, val = e.args
    ctx.comment(e)
    dst = ctx.reuse(acc, e.out)         # acc's workspace block if acc dies here: updated in place
    if dst is None:
        dst = ctx.alloc(e.out)
        with ctx.loops(acc.shape, "c") as idx:
            ctx.line(f"{dst.at(idx)} = {ctx.read(acc, acc.shape, idx)}")
    offset, strides = _getitem_view(dst.offset, dst.strides, e)
    target = dst.view(offset, val.shape, strides)
    with ctx.loops(val.shape, "k") as idx:
        ctx.line(f"{target.at(idx)} += {ctx.read(val, val.shape, idx)}")
    ctx.bind(e.out, dst)


def _index_add_scalar(b, e, xs):
    acc, val = xs
    out = np.array(acc, dtype=object)          # a writable copy: acc may be a broadcast view
    flat = out.reshape(-1)
    where = _at(np.arange(out.size).reshape(out.shape), e.attr("index"))
    for idx in np.ndindex(*val.shape):
        flat[where[idx]] = b.emit("add", flat[where[idx]], val[idx])
    return out


register(Op("index_add", "structural", _index_add_shape, _index_add_np,
            Rule(_index_add_jvp, lambda e, ct, bs: [ct, emit("getitem", ct, index=batched_index(e.attr("index"), bs))]),
            _index_add_lower, lambda e: e.args[1].size, scalar=_index_add_scalar))


# ---- prod_others(x, axes): the product of the other elements along `axes` (the partial of a product,
# exact at zeros), so products have derivatives of every order ---------------------------------------------
def _prod_others_np(x, axes):
    moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))
    n = flat.shape[-1]
    ones = np.ones(flat.shape[:-1] + (1,))
    before = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., : n - 1]], axis=-1)
    after = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., : n - 1][..., ::-1], ones], axis=-1)
    return np.moveaxis((before * after).reshape(moved.shape), tuple(range(-len(axes), 0)), axes)


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


def _prod_others_lower(ctx, e):
    """Products of the elements before and after each one: two passes, no division."""
    x, axes = e.args[0], e.attr("axes")
    ctx.comment(e)
    dst = ctx.alloc(e.out)
    kept = [k for k in range(x.rank) if k not in axes]
    red = [k for k in range(x.rank) if k in axes]
    red_shape = tuple(x.shape[k] for k in red)
    n, rst = math.prod(red_shape), cstrides(red_shape)
    with ctx.loops(tuple(x.shape[k] for k in kept), "q") as kidx:
        def full_idx(r):
            parts = {k: f"(({r} // {s}) % {d})" for k, s, d in zip(red, rst, red_shape)}
            parts.update(zip(kept, kidx))
            return [parts[k] for k in range(x.rank)]
        at, xr = dst.at(full_idx("r")), ctx.read(x, x.shape, full_idx("r"))
        ctx.line("run = 1.0")
        with ctx.block(f"for r in range({n}):"):
            ctx.line(f"{at} = run")
            ctx.line(f"run *= {xr}")
        ctx.line("run = 1.0")
        with ctx.block(f"for r in range({n - 1}, -1, -1):"):
            ctx.line(f"{at} *= run")
            ctx.line(f"run *= {xr}")
    ctx.bind(e.out, dst)


def _prod_others_scalar(b, e, xs):
    (x,) = xs
    axes = e.attr("axes")
    rows = lanes(x, axes)
    out = np.empty(rows.shape, dtype=object)
    for idx in np.ndindex(*rows.shape[:-1]):
        terms = list(rows[idx])
        before = [b.const(1.0)]
        for t in terms[:-1]:
            before.append(b.emit("mul", before[-1], t))
        after = b.const(1.0)
        for k in range(len(terms) - 1, -1, -1):
            out[idx + (k,)] = b.emit("mul", before[k], after)
            after = b.emit("mul", after, terms[k])
    kept = [d for k, d in enumerate(x.shape) if k not in axes]
    moved = out.reshape(tuple(kept) + tuple(x.shape[k] for k in axes))
    return np.moveaxis(moved, tuple(range(len(kept), x.ndim)), axes)


register(Op("prod_others", "structural", lambda shapes, dtypes, axes: (tuple(shapes[0]), "f8"), _prod_others_np,
            Rule(_prod_others_jvp, _prod_others_vjp), _prod_others_lower, per_output(1), scalar=_prod_others_scalar))


# ---- pack(*scalars, shape): the array with these elements in C order; scalarized kernels build their
# outputs with it (engine/opt/scalarize.py) -------------------------------------------------------------------
def _pack_shape(shapes, dtypes, shape):
    if len(shapes) != math.prod(shape) or any(shapes):
        raise ShapeError(f"pack: {len(shapes)} scalars cannot fill shape {tuple(shape)}")
    return tuple(shape), "f8"


def _pack_jvp(e, ts, bs):
    if all(t is None for t in ts):
        return None
    acc = current().const(0.0, tuple(bs) + e.out.shape)
    for k, t in enumerate(ts):
        if t is not None:
            acc = emit("index_add", acc, t, index=batched_index(_element(k, e.out.shape), bs))
    return acc


def _pack_lower(ctx, e):
    ctx.comment(e)
    dst = ctx.alloc(e.out)
    for k in range(len(e.args)):
        ctx.line(f"{dst.at([str(i) for i in _element(k, e.out.shape)])} = {ctx.read(e.args[k], (), [])}")
    ctx.bind(e.out, dst)


register(Op("pack", "structural", _pack_shape, lambda *xs, shape: np.array(xs, dtype=float).reshape(shape),
            Rule(_pack_jvp, lambda e, ct, bs: [emit("getitem", ct, index=batched_index(_element(k, e.out.shape), bs))
                                               for k in range(len(e.args))]),
            _pack_lower, free,
            scalar=lambda b, e, xs: np.array([x[()] for x in xs], dtype=object).reshape(e.out.shape)))
