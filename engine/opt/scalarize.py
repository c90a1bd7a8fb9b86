"""Small tensors -> scalars: a whole graph rewritten element by element into straight-line code.

A kernel over 3x3 matrices loses its time to loop overhead, workspace traffic and arithmetic on
structural zeros: forward mode seeds with identity tensors, so most tangent entries are 0 or a
copy. Rewritten per element, the builder folds those zeros away (x*0 -> 0, x+0 -> x), CSE shares
per-element work, and the emitter keeps every value in a local instead of the workspace. A Hessian
wrt one argument twice reads its upper triangle from the lower one, so half the tangent work is
dead code. The pass gives up (returns None) when the result would be longer than MAX_EQNS, where
numba's compile time of straight-line code outgrows that of the loops (2026-11-25, cold): the
library's W+P+A tangents (1,600-2,500 scalar equations) run about 3x faster straight-line and compile
faster too (8-37 s against 16-87 s as loops); a J2 return mapping of 2,428 compiled in 16 s against
8 s; longer ones compiled up to 8x slower: the fifteen Hessians of tests/test_hard_zeros.py in 226 s
against 27 s, two 16x16x16 products (9,477 equations) in 20 s against 3 s.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.core import Builder, Graph
from ..ir.op import OPS, elements, lanes
from .dce import dce

MAX_EQNS = 3000          # scalar equations in the result; longer kernels keep their loops
BUILD_SLACK = 3          # while building, up to 3x that: dead code (a Hessian's unused halves) goes at the end
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
        self._inputs = set(graph.inputs.values())
        self._fixed_memo = {}

    def _fold(self, op, args, attrs):
        if op in ("mul", "hardmul") and any(self.const_value(a) == 0.0 for a in args):
            return self.const(0.0)
        if op == "div" and self.const_value(args[0]) == 0.0:
            return self.const(0.0)
        if op == "select" and args[1] is args[2]:
            return args[1]
        return self._negated(op, args) or self._doubled(op, args) or super()._fold(op, args, attrs)

    def _doubled(self, op, args):
        """x + x of a product x = a b whose factor a is free of the inputs (params and constants): (a + a) b,
        so the doubled factor is computed once for all the elements it scales (the two sides of the gradient
        of tr(F^T F), mu/2 F + mu/2 F, become mu F: 9 operations, not 18). The same value as 2 (a b), but
        where 2a overflows or a b is subnormal."""
        if op != "add" or args[0] is not args[1]:
            return None
        e = self.producer(args[0])
        if e is None or e.op != "mul":
            return None
        a, b = e.args
        if not self._fixed(a):
            a, b = b, a
        return self.emit("mul", self.emit("add", a, a), b) if self._fixed(a) else None

    def _fixed(self, v):
        """Whether v is computed from params and constants alone (the same for every element it scales)."""
        memo, todo = self._fixed_memo, [v]
        while todo:                 # depth first without recursion: chains of scalar code are long
            u = todo.pop()
            if u in memo:
                continue
            e = self.producer(u)
            if e is None:
                memo[u] = u not in self._inputs
                continue
            missing = [a for a in e.args if a not in memo]
            if missing:
                todo += [u, *missing]
                continue
            memo[u] = all(memo[a] for a in e.args)
        return memo[v]

    def _negated(self, op, args):
        """Negations move out of products and into sums, to the bit (IEEE: x - y is x + (-y), and
        (-x) y is -(x y)): x + (-y) -> x - y, x - (-y) -> x + y, (-x) y -> -(x y), (-x)(-y) -> x y, so
        the negated partials of reverse mode mostly cost no operation of their own."""
        if op not in ("add", "sub", "mul"):
            return None
        neg = [e.args[0] if e is not None and e.op == "neg" else None for e in map(self.producer, args)]
        if op == "mul" and neg != [None, None]:
            m = self.emit("mul", neg[0] or args[0], neg[1] or args[1])
            return m if None not in neg else self.emit("neg", m)
        if neg[1] is not None:
            return self.emit("sub" if op == "add" else "add", args[0], neg[1])
        if op == "add" and neg[0] is not None:
            return self.emit("sub", args[1], neg[0])
        return None

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
    b = _ScalarBuilder(Graph(dict(graph.inputs), dict(graph.params), [], {}), BUILD_SLACK * limit)
    env = {}
    try:
        with b.active():
            for v in [*graph.inputs.values(), *graph.params.values()]:
                # a large param (a table's coefficients) is only read whole, never element by element
                env[v] = v if v.size > MAX_SIZE else \
                    elements(v.shape, lambda idx, v=v: b.emit("getitem", v, index=idx) if idx else v)
            for e in graph.eqns:
                op = OPS[e.op]
                form = op.scalar or _GENERIC[op.kind]
                xs = [a if k in op.whole else env[a] for k, a in enumerate(e.args)]
                if any(x is a for k, (x, a) in enumerate(zip(xs, e.args)) if k not in op.whole):
                    return None
                env[e.out] = form(b, e, xs)
            outputs = {}
            for name, v in graph.outputs.items():
                arr = env[v]
                if symmetric and name in symmetric:
                    arr = _mirror(arr, symmetric[name])
                outputs[name] = arr[()] if not v.shape else b.emit("pack", *arr.ravel(), shape=v.shape)
    except _TooLong:
        return None
    b.graph.outputs = outputs
    scalar = dce(b.graph)
    return scalar if len(scalar.eqns) <= limit else None


def pays_off(graph: Graph, scalar: Graph) -> bool:
    """Straight-line code beats loops when the loops are short (their overhead dominates) or when
    scalarizing removed at least a quarter of the arithmetic (structural zeros, symmetry)."""
    longest = max((e.out.size for e in graph.eqns), default=0)
    return longest <= SHORT_LOOP or 4 * _arithmetic(scalar) <= 3 * _arithmetic(graph)


def _arithmetic(graph):
    """Scalar operations a graph performs per point (views and constants are free)."""
    return sum(OPS[e.op].cost(e) for e in graph.eqns)


def _mirror(arr, r):
    lead = arr.shape[: arr.ndim - 2 * r]
    n = math.prod(arr.shape[arr.ndim - r:])
    sq = np.array(arr.reshape(lead + (n, n)))
    upper = np.triu_indices(n, 1)
    sq[(..., *upper)] = sq[(..., upper[1], upper[0])]
    return sq.reshape(arr.shape)


# the element forms of whole kinds; structural ops give their own (Op.scalar)
def _elementwise(b, e, xs):
    attrs, whole = dict(e.attrs), OPS[e.op].whole
    xs = [x if k in whole else np.broadcast_to(x, e.out.shape) for k, x in enumerate(xs)]
    return elements(e.out.shape, lambda idx: b.emit(e.op, *[x if k in whole else x[idx] for k, x in enumerate(xs)],
                                                    **attrs))


def _reduce(b, e, xs):
    rows = lanes(xs[0], e.attr("axes"))
    red = OPS[e.op].lower

    def fold(idx):
        terms = list(rows[idx])
        if not terms:
            return b.const(red.identity)
        acc = terms[0]
        for t in terms[1:]:
            acc = b.emit(red.combine, acc, t)
        return acc
    return elements(e.out.shape, fold)


def _view(b, e, xs):
    """A view of an object array is numpy's view of it (as an array, also for a single element)."""
    return np.asarray(OPS[e.op].numpy(xs[0], **dict(e.attrs)), dtype=object)


_GENERIC = {"elementwise": _elementwise, "reduce": _reduce, "view": _view}
