"""Small tensors -> scalars: a whole graph rewritten element by element into straight-line code.

A kernel over 3x3 matrices loses its time to loop overhead, workspace traffic and arithmetic on
structural zeros: forward mode seeds with identity tensors, so most tangent entries are 0 or a
copy. Rewritten per element, the builder folds those zeros away (x*0 -> 0, x+0 -> x), CSE shares
per-element work, and the emitter keeps every value in a local instead of the workspace. A Hessian
wrt one argument twice reads its upper triangle from the lower one, so half the tangent work is
dead code. The pass gives up (returns None) when the result would be long: numba's compile time
grows faster than linearly with the length of a function.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.core import Builder, Graph
from ..ir.ops import OPS, numpy_index
from .dce import dce

MAX_EQNS = 2000          # scalar equations in the result; longer kernels keep their loops
MAX_SIZE = 4096          # elements of any one value; larger values are not "small tensors"
SHORT_LOOP = 32          # loops this short cost more in overhead than in arithmetic


class _TooLong(Exception):
    pass


class _ScalarBuilder(Builder):
    """A Builder that also folds structural zeros: a product with a constant 0 is 0.

    This is JAX's symbolic-zero semantics: an off-diagonal Jacobian entry is 0 even where the
    partial it multiplies is infinite, instead of inf*0 = NaN."""

    def __init__(self, graph, limit):
        super().__init__(graph)
        self.limit = limit

    def _fold(self, op, args, attrs):
        if op == "mul" and any(self.const_value(a) == 0.0 for a in args):
            return self.const(0.0)
        if op == "div" and self.const_value(args[0]) == 0.0:
            return self.const(0.0)
        if op == "select" and args[1] is args[2]:
            return args[1]
        return super()._fold(op, args, attrs)

    def emit(self, op, *args, **attrs):
        v = super().emit(op, *args, **attrs)
        if len(self.graph.eqns) > self.limit:
            raise _TooLong
        return v


def scalarize(graph: Graph, symmetric=None, limit=MAX_EQNS) -> Graph | None:
    """The graph with every equation on scalars and each output a `pack` of its elements, or None
    when a value is large or the result would exceed `limit` equations.

    symmetric: {output name: r} for second derivatives wrt one argument of rank r twice; their
    last 2r axes form a symmetric matrix, and entries above the diagonal are read from below it."""
    if any(e.out.size > MAX_SIZE for e in graph.eqns):
        return None
    b = _ScalarBuilder(Graph(dict(graph.inputs), dict(graph.params), [], {}), limit)
    env = {}
    try:
        with b.active():
            for v in [*graph.inputs.values(), *graph.params.values()]:
                env[v] = _elements(v.shape, lambda idx, v=v: b.emit("getitem", v, index=idx) if idx else v)
            for e in graph.eqns:
                lower = _LOWER.get(e.op) or _LOWER[OPS[e.op].kind]
                env[e.out] = lower(b, e, [env[a] for a in e.args])
            outputs = {}
            for name, v in graph.outputs.items():
                arr = env[v]
                if symmetric and name in symmetric:
                    arr = _mirror(arr, symmetric[name])
                outputs[name] = arr[()] if not v.shape else b.emit("pack", *arr.ravel(), shape=v.shape)
    except _TooLong:
        return None
    b.graph.outputs = outputs
    return dce(b.graph)


def pays_off(graph: Graph, scalar: Graph) -> bool:
    """Straight-line code beats loops when the loops are short (their overhead dominates) or when
    scalarizing removed at least a quarter of the arithmetic (structural zeros, symmetry)."""
    longest = max((e.out.size for e in graph.eqns), default=0)
    return longest <= SHORT_LOOP or 4 * _arithmetic(scalar) <= 3 * _arithmetic(graph)


def _arithmetic(graph):
    """Scalar operations a graph performs per point (views and constants are free)."""
    work = 0
    for e in graph.eqns:
        kind = OPS[e.op].kind
        if e.op == "index_add":
            work += e.args[1].size
        elif kind == "elementwise" or e.op in ("prod_others", "eye"):
            work += e.out.size
        elif kind == "reduce":
            work += e.args[0].size
    return work


def _elements(shape, make):
    """An object array of `shape` whose element idx is make(idx)."""
    arr = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        arr[idx] = make(idx)
    return arr


def _mirror(arr, r):
    lead = arr.shape[: arr.ndim - 2 * r]
    n = math.prod(arr.shape[arr.ndim - r:])
    sq = np.array(arr.reshape(lead + (n, n)))
    upper = np.triu_indices(n, 1)
    sq[(..., *upper)] = sq[(..., upper[1], upper[0])]
    return sq.reshape(arr.shape)


def _elementwise(b, e, xs):
    attrs = dict(e.attrs)
    xs = [np.broadcast_to(x, e.out.shape) for x in xs]
    return _elements(e.out.shape, lambda idx: b.emit(e.op, *[x[idx] for x in xs], **attrs))


_COMBINE = {"reduce_sum": "add", "reduce_prod": "mul", "reduce_max": "maximum", "reduce_min": "minimum"}
_EMPTY = {"reduce_sum": 0.0, "reduce_prod": 1.0, "reduce_max": -math.inf, "reduce_min": math.inf}


def _lanes(x, axes):
    """x with the reduced axes flattened into one last axis."""
    kept = tuple(d for k, d in enumerate(x.shape) if k not in axes)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    return moved.reshape(kept + (-1,))


def _reduce(b, e, xs):
    lanes = _lanes(xs[0], e.attr("axes"))
    op = _COMBINE[e.op]

    def fold(idx):
        terms = list(lanes[idx])
        if not terms:
            return b.const(_EMPTY[e.op])
        acc = terms[0]
        for t in terms[1:]:
            acc = b.emit(op, acc, t)
        return acc
    return _elements(e.out.shape, fold)


def _view(b, e, xs):
    (x,) = xs
    if e.op == "getitem":
        return _at(x, e.attr("index"))
    if e.op == "transpose":
        return np.transpose(x, e.attr("perm"))
    if e.op == "reshape":
        return x.reshape(e.attr("shape"))
    return np.broadcast_to(x, e.attr("shape"))


def _index_add(b, e, xs):
    acc, val = xs
    out = np.array(acc, dtype=object)          # a writable copy: acc may be a broadcast view
    flat = out.reshape(-1)
    where = _at(np.arange(out.size).reshape(out.shape), e.attr("index"))
    for idx in np.ndindex(*val.shape):
        flat[where[idx]] = b.emit("add", flat[where[idx]], val[idx])
    return out


def _at(x, index):
    """x[index] as an array, also when the index picks a single element."""
    return np.asarray(x[numpy_index(index)], dtype=x.dtype)


def _prod_others(b, e, xs):
    (x,) = xs
    axes = e.attr("axes")
    lanes = _lanes(x, axes)
    out = np.empty(lanes.shape, dtype=object)
    for idx in np.ndindex(*lanes.shape[:-1]):
        terms = list(lanes[idx])
        before = [b.const(1.0)]
        for t in terms[:-1]:
            before.append(b.emit("mul", before[-1], t))
        after = b.const(1.0)
        for k in range(len(terms) - 1, -1, -1):
            out[idx + (k,)] = b.emit("mul", before[k], after)
            after = b.emit("mul", after, terms[k])
    kept = [d for k, d in enumerate(x.shape) if k not in axes]
    red = [x.shape[k] for k in axes]
    moved = out.reshape(tuple(kept) + tuple(red))
    return np.moveaxis(moved, tuple(range(len(kept), x.ndim)), axes)


def _const(b, e, xs):
    if e.op == "const":
        return _elements((), lambda idx: b.const(e.attr("value")))
    if e.op == "array":
        data = np.asarray(e.attr("data"), dtype=float).reshape(e.out.shape)
        return _elements(e.out.shape, lambda idx: b.const(data[idx]))
    n = math.prod(e.attr("shape"))                         # eye
    flat = _elements((n, n), lambda idx: b.const(1.0 if idx[0] == idx[1] else 0.0))
    return flat.reshape(e.out.shape)


def _pack(b, e, xs):
    return np.array([x[()] for x in xs], dtype=object).reshape(e.out.shape)


# by op name first, then by op kind
_LOWER = {"index_add": _index_add, "prod_others": _prod_others, "const": _const, "array": _const, "eye": _const,
          "pack": _pack, "elementwise": _elementwise, "reduce": _reduce, "view": _view}
